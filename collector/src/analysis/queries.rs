//! The built-in SQL queries (`collector/sql/*.sql`), embedded in the binary.
//!
//! Every query is one file with a header, then the SQL:
//!
//! ```sql
//! -- name: oom_events
//! -- description: OOM events in a time window, …
//! -- param: since_ms Int64 = 0
//! -- param: until_ms Int64 = 9223372036854775807
//! SELECT … FROM {db}.oom_events WHERE ts_ms >= ? AND ts_ms < ? ORDER BY …
//! ```
//!
//! * `{db}` is the database, substituted by [`Query::render`] after validating it as an identifier
//!   (`[A-Za-z_][A-Za-z0-9_]*`).
//! * Each `?` is a positional parameter, in `-- param:` order, bound by [`Query::bind`] with the
//!   `clickhouse` crate's client-side `?` bind (which escapes; server-side parameters do not exist
//!   on ClickHouse 18.16). A literal `?` is written `??`. The example value after `=` is what the
//!   portability check (`deploy/sqlcheck`) and the docs run the query with.
//! * Other leading `--` lines are free comments. No `FORMAT` clause and no trailing `;`.
//! * Portability: every query runs unchanged on 18.16 and modern servers:
//!   no window functions, no `ASOF JOIN`, at most one `JOIN … ON` with equalities, no `DateTime64`,
//!   no `Map`, and a deterministic `ORDER BY`.
//!
//! **Adding a query**: drop `collector/sql/<name>.sql` (with `-- name: <name>`) and add `"<name>"` to
//! the [`builtin!`] list below; a unit test fails if a file in the directory is not registered,
//! and `deploy/test.sh` runs it on 18.16 and chdb-core over the fixtures and compares the answers.

use std::fmt;
use std::sync::LazyLock;

/// Registers the embedded query files: one name per `collector/sql/<name>.sql`.
macro_rules! builtin {
    ($($name:literal),* $(,)?) => {
        /// `(file stem, file contents)` of every built-in query.
        const FILES: &[(&str, &str)] = &[$(($name, include_str!(concat!("../../sql/", $name, ".sql")))),*];
    };
}

builtin![
    "table_counts",
    "oom_events",
    "scenario_breakdown",
    "gpu_memory_curve",
    "oom_features",
    "oom_neighbours",
    "postmortem_events",
    "postmortem_event_count",
    "oom_process_curve",
    "oom_gpu_curve",
    "capacity_headroom",
    "capacity_headroom_gpu_model",
    "capacity_events",
    "top_gpus",
    "top_processes",
    "attribution_pending",
    "attribution_breakdown",
    "attribution_timeline",
    "attributed_events",
    "alloc_sites",
    "fit_shape_events",
    "fit_workload_peaks",
];

/// A query parameter's type (the ClickHouse type name in the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// `Int8`.
    Int8,
    /// `Int16`.
    Int16,
    /// `Int32`.
    Int32,
    /// `Int64`.
    Int64,
    /// `UInt8`.
    UInt8,
    /// `UInt16`.
    UInt16,
    /// `UInt32`.
    UInt32,
    /// `UInt64`.
    UInt64,
    /// `Float64`.
    Float64,
    /// `String`.
    String,
}

impl ParamType {
    /// Parses a ClickHouse type name.
    pub fn from_name(name: &str) -> Option<ParamType> {
        Some(match name {
            "Int8" => ParamType::Int8,
            "Int16" => ParamType::Int16,
            "Int32" => ParamType::Int32,
            "Int64" => ParamType::Int64,
            "UInt8" => ParamType::UInt8,
            "UInt16" => ParamType::UInt16,
            "UInt32" => ParamType::UInt32,
            "UInt64" => ParamType::UInt64,
            "Float64" => ParamType::Float64,
            "String" => ParamType::String,
            _ => return None,
        })
    }

    /// The ClickHouse type name.
    pub fn name(self) -> &'static str {
        match self {
            ParamType::Int8 => "Int8",
            ParamType::Int16 => "Int16",
            ParamType::Int32 => "Int32",
            ParamType::Int64 => "Int64",
            ParamType::UInt8 => "UInt8",
            ParamType::UInt16 => "UInt16",
            ParamType::UInt32 => "UInt32",
            ParamType::UInt64 => "UInt64",
            ParamType::Float64 => "Float64",
            ParamType::String => "String",
        }
    }

    /// The inclusive range of an integer type (`None` for floats and strings).
    fn int_range(self) -> Option<(i128, i128)> {
        let r = |lo: i128, hi: i128| Some((lo, hi));
        match self {
            ParamType::Int8 => r(i8::MIN.into(), i8::MAX.into()),
            ParamType::Int16 => r(i16::MIN.into(), i16::MAX.into()),
            ParamType::Int32 => r(i32::MIN.into(), i32::MAX.into()),
            ParamType::Int64 => r(i64::MIN.into(), i64::MAX.into()),
            ParamType::UInt8 => r(0, u8::MAX.into()),
            ParamType::UInt16 => r(0, u16::MAX.into()),
            ParamType::UInt32 => r(0, u32::MAX.into()),
            ParamType::UInt64 => r(0, u64::MAX.into()),
            ParamType::Float64 | ParamType::String => None,
        }
    }

    /// Parses a value of this type from text (a CLI argument, a header example).
    pub fn parse_value(self, text: &str) -> Result<ParamValue, QueryError> {
        let bad = || QueryError::BadValue { ty: self, value: text.to_owned() };
        match self {
            ParamType::String => Ok(ParamValue::String(text.to_owned())),
            ParamType::Float64 => text.trim().parse::<f64>().map(ParamValue::Float).map_err(|_| bad()),
            _ => {
                let v = text.trim().parse::<i128>().map_err(|_| bad())?;
                let value = if v < 0 {
                    ParamValue::Int(i64::try_from(v).map_err(|_| bad())?)
                } else {
                    ParamValue::UInt(u64::try_from(v).map_err(|_| bad())?)
                };
                self.check(&value).map_err(|_| bad())?;
                Ok(value)
            }
        }
    }

    /// Checks that `value` fits this type.
    fn check(self, value: &ParamValue) -> Result<(), &'static str> {
        match (self, value) {
            (ParamType::String, ParamValue::String(_)) => Ok(()),
            (ParamType::String, _) => Err("a string"),
            (_, ParamValue::String(_)) => Err("a number"),
            (ParamType::Float64, ParamValue::Float(f)) if f.is_finite() => Ok(()),
            (ParamType::Float64, ParamValue::Float(_)) => Err("a finite number"),
            (ParamType::Float64, _) => Ok(()),
            (_, ParamValue::Float(_)) => Err("an integer"),
            (ty, ParamValue::Int(v)) => in_range(ty, i128::from(*v)),
            (ty, ParamValue::UInt(v)) => in_range(ty, i128::from(*v)),
        }
    }
}

fn in_range(ty: ParamType, v: i128) -> Result<(), &'static str> {
    match ty.int_range() {
        Some((lo, hi)) if v >= lo && v <= hi => Ok(()),
        _ => Err("in range"),
    }
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An argument for a query parameter. Integers fit any integer type whose range holds them.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A float.
    Float(f64),
    /// A string (bound as an escaped literal).
    String(String),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Int(v) => write!(f, "{v}"),
            ParamValue::UInt(v) => write!(f, "{v}"),
            ParamValue::Float(v) => write!(f, "{v}"),
            ParamValue::String(v) => f.write_str(v),
        }
    }
}

impl From<i64> for ParamValue {
    fn from(v: i64) -> Self {
        ParamValue::Int(v)
    }
}

impl From<u64> for ParamValue {
    fn from(v: u64) -> Self {
        ParamValue::UInt(v)
    }
}

impl From<u32> for ParamValue {
    fn from(v: u32) -> Self {
        ParamValue::UInt(v.into())
    }
}

impl From<f64> for ParamValue {
    fn from(v: f64) -> Self {
        ParamValue::Float(v)
    }
}

impl From<&str> for ParamValue {
    fn from(v: &str) -> Self {
        ParamValue::String(v.to_owned())
    }
}

impl From<String> for ParamValue {
    fn from(v: String) -> Self {
        ParamValue::String(v)
    }
}

/// One `-- param:` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// Parameter name (e.g. `since_ms`).
    pub name: String,
    /// ClickHouse type the argument must fit.
    pub ty: ParamType,
    /// Example value (the docs and the portability check run the query with it).
    pub example: ParamValue,
}

/// A built-in query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Name (the file stem).
    pub name: String,
    /// One-line description.
    pub description: String,
    /// Positional parameters, one per `?`.
    pub params: Vec<Param>,
    /// The SQL with `{db}` and `?` placeholders, without the header.
    pub sql: String,
}

/// A bad query file, database name or argument list.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    /// The header or body of a query file is malformed.
    #[error("query file {file}: {message}")]
    BadFile {
        /// File stem.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// The database name is not a plain identifier.
    #[error("bad database name {0:?}: expected [A-Za-z_][A-Za-z0-9_]*")]
    BadDatabase(String),
    /// No built-in query has this name.
    #[error("no built-in query named {0:?} (see `oomlens sql --list`)")]
    UnknownQuery(String),
    /// Wrong number of arguments.
    #[error("query {query} takes {expected} argument(s) ({names}), got {got}")]
    ArgCount {
        /// Name of the built-in query.
        query: String,
        /// Parameter count.
        expected: usize,
        /// Parameter names, comma-separated.
        names: String,
        /// Argument count.
        got: usize,
    },
    /// An argument does not fit its parameter's type.
    #[error("query {query}: argument {param} must be {expected} ({ty}), got {got:?}")]
    ArgType {
        /// Name of the built-in query.
        query: String,
        /// Parameter name.
        param: String,
        /// Parameter type.
        ty: ParamType,
        /// What was expected (`a string`, `in range`, …).
        expected: &'static str,
        /// The argument.
        got: ParamValue,
    },
    /// Text does not parse as a value of the type.
    #[error("{value:?} is not a valid {ty}")]
    BadValue {
        /// The type the text was parsed as.
        ty: ParamType,
        /// The text.
        value: String,
    },
}

static ALL: LazyLock<Vec<Query>> = LazyLock::new(|| {
    FILES
        .iter()
        .map(|(file, text)| {
            Query::parse(file, text)
                .unwrap_or_else(|e| panic!("built-in query is broken (unit tests catch this): {e}"))
        })
        .collect()
});

/// Every built-in query, in registration order (parsed once).
pub fn all() -> &'static [Query] {
    &ALL
}

/// The built-in query called `name`.
pub fn get(name: &str) -> Option<&'static Query> {
    all().iter().find(|q| q.name == name)
}

/// The built-in query `name`, or [`QueryError::UnknownQuery`].
pub fn builtin(name: &str) -> Result<&'static Query, QueryError> {
    get(name).ok_or_else(|| QueryError::UnknownQuery(name.to_owned()))
}

/// Whether `name` is a plain identifier `[A-Za-z_][A-Za-z0-9_]*` (at most 255 bytes).
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 255
}

/// Counts the `?` placeholders the `clickhouse` crate will bind (`??` is a literal `?`).
/// `Err` when the SQL uses `?fields`, which the built-in queries must not.
fn count_placeholders(sql: &str) -> Result<usize, String> {
    let mut n = 0;
    let mut rest = sql;
    while let Some(idx) = rest.find('?') {
        let after = &rest[idx + 1..];
        if let Some(next) = after.strip_prefix('?') {
            rest = next;
            continue;
        }
        if after.starts_with("fields") {
            return Err("`?fields` is not supported in built-in queries".to_owned());
        }
        n += 1;
        rest = after;
    }
    Ok(n)
}

impl Query {
    /// Parses one query file (`file` is its stem, which must equal `-- name:`).
    pub fn parse(file: &str, text: &str) -> Result<Query, QueryError> {
        let bad = |message: String| QueryError::BadFile { file: file.to_owned(), message };
        let (mut name, mut description, mut params) = (None, None, Vec::new());
        let mut body = Vec::new();
        let mut in_header = true;
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            if in_header && trimmed.starts_with("--") {
                let comment = trimmed.trim_start_matches('-').trim();
                let Some((key, value)) = comment.split_once(':') else { continue };
                let value = value.trim();
                match key.trim() {
                    "name" => name = Some(value.to_owned()),
                    "description" => description = Some(value.to_owned()),
                    "param" => params
                        .push(Self::parse_param(value).map_err(|m| bad(format!("line {}: {m}", i + 1)))?),
                    _ => {}
                }
                continue;
            }
            in_header = false;
            body.push(line);
        }
        let name = name.ok_or_else(|| bad("missing `-- name:` line".to_owned()))?;
        if name != file {
            return Err(bad(format!("`-- name: {name}` differs from the file name")));
        }
        if !is_identifier(&name) {
            return Err(bad(format!("name {name:?} is not an identifier")));
        }
        let description = description
            .filter(|d| !d.is_empty())
            .ok_or_else(|| bad("missing `-- description:` line".to_owned()))?;
        let sql = body.join("\n");
        let sql = sql.trim().trim_end_matches(';').trim_end().to_owned();
        if sql.is_empty() {
            return Err(bad("no SQL after the header".to_owned()));
        }
        let placeholders = count_placeholders(&sql).map_err(bad)?;
        if placeholders != params.len() {
            return Err(bad(format!(
                "{placeholders} `?` placeholder(s) but {} `-- param:` line(s)",
                params.len()
            )));
        }
        for (i, p) in params.iter().enumerate() {
            if params[..i].iter().any(|q: &Param| q.name == p.name) {
                return Err(bad(format!("parameter {} declared twice", p.name)));
            }
        }
        Ok(Query { name, description, params, sql })
    }

    /// `NAME TYPE = EXAMPLE`.
    fn parse_param(text: &str) -> Result<Param, String> {
        let (decl, example) =
            text.split_once('=').ok_or_else(|| "expected `-- param: NAME TYPE = EXAMPLE`".to_owned())?;
        let mut words = decl.split_whitespace();
        let (Some(name), Some(ty), None) = (words.next(), words.next(), words.next()) else {
            return Err("expected `-- param: NAME TYPE = EXAMPLE`".to_owned());
        };
        if !is_identifier(name) {
            return Err(format!("parameter name {name:?} is not an identifier"));
        }
        let ty =
            ParamType::from_name(ty).ok_or_else(|| format!("parameter {name}: unsupported type {ty}"))?;
        let example = ty.parse_value(example.trim()).map_err(|e| format!("parameter {name}: example {e}"))?;
        Ok(Param { name: name.to_owned(), ty, example })
    }

    /// The SQL for database `db` (still with its `?` placeholders).
    pub fn render(&self, db: &str) -> Result<String, QueryError> {
        if !is_identifier(db) {
            return Err(QueryError::BadDatabase(db.to_owned()));
        }
        Ok(self.sql.replace("{db}", db))
    }

    /// The example arguments from the header.
    pub fn example_args(&self) -> Vec<ParamValue> {
        self.params.iter().map(|p| p.example.clone()).collect()
    }

    /// Parses textual arguments (e.g. from the command line) by the parameters' types.
    pub fn parse_args<S: AsRef<str>>(&self, args: &[S]) -> Result<Vec<ParamValue>, QueryError> {
        self.check_count(args.len())?;
        self.params.iter().zip(args).map(|(p, a)| p.ty.parse_value(a.as_ref())).collect()
    }

    fn check_count(&self, got: usize) -> Result<(), QueryError> {
        if got == self.params.len() {
            return Ok(());
        }
        Err(QueryError::ArgCount {
            query: self.name.clone(),
            expected: self.params.len(),
            names: self.params.iter().map(|p| format!("{} {}", p.name, p.ty)).collect::<Vec<_>>().join(", "),
            got,
        })
    }

    /// Checks `args` against the parameters (count and types).
    pub fn check_args(&self, args: &[ParamValue]) -> Result<(), QueryError> {
        self.check_count(args.len())?;
        for (p, a) in self.params.iter().zip(args) {
            p.ty.check(a).map_err(|expected| QueryError::ArgType {
                query: self.name.clone(),
                param: p.name.clone(),
                ty: p.ty,
                expected,
                got: a.clone(),
            })?;
        }
        Ok(())
    }

    /// A `clickhouse` query for database `db` with `args` bound to the `?` placeholders (escaped
    /// client-side). Fetch its rows with `fetch_all::<YourRow>()` (or `fetch_bytes("TSV")`).
    pub fn bind(
        &self,
        client: &clickhouse::Client,
        db: &str,
        args: &[ParamValue],
    ) -> Result<clickhouse::query::Query, QueryError> {
        let sql = self.render(db)?;
        self.check_args(args)?;
        let mut query = client.query(&sql);
        for (p, a) in self.params.iter().zip(args) {
            query = match (p.ty, a) {
                (_, ParamValue::String(s)) => query.bind(s.as_str()),
                (ParamType::Float64, ParamValue::Int(v)) => query.bind(*v as f64),
                (ParamType::Float64, ParamValue::UInt(v)) => query.bind(*v as f64),
                (_, ParamValue::Int(v)) => query.bind(*v),
                (_, ParamValue::UInt(v)) => query.bind(*v),
                (_, ParamValue::Float(v)) => query.bind(*v),
            };
        }
        Ok(query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql_dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql")
    }

    #[test]
    fn every_file_parses_and_is_registered() {
        let mut on_disk: Vec<String> = std::fs::read_dir(sql_dir())
            .expect("collector/sql")
            .filter_map(|e| {
                let path = e.ok()?.path();
                (path.extension()? == "sql").then(|| path.file_stem()?.to_str().map(str::to_owned))?
            })
            .collect();
        on_disk.sort();
        let mut registered: Vec<String> = FILES.iter().map(|(f, _)| (*f).to_owned()).collect();
        registered.sort();
        assert_eq!(on_disk, registered, "add every collector/sql/*.sql to builtin![…] in queries.rs");
        for (file, text) in FILES {
            let q = Query::parse(file, text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(q.name, *file);
        }
        assert_eq!(all().len(), FILES.len());
        for name in ["table_counts", "oom_events", "scenario_breakdown", "gpu_memory_curve"] {
            assert!(get(name).is_some(), "{name}");
        }
        assert!(get("nope").is_none());
    }

    #[test]
    fn placeholders_match_params() {
        for q in all() {
            assert_eq!(count_placeholders(&q.sql), Ok(q.params.len()), "{}", q.name);
            assert!(q.sql.contains("{db}."), "{}: tables must be qualified with {{db}}", q.name);
        }
        assert_eq!(count_placeholders("a = ? AND b = '??' AND c = ?"), Ok(2));
        assert!(count_placeholders("SELECT ?fields").is_err());
    }

    #[test]
    fn queries_follow_the_portability_rules() {
        for q in all() {
            let upper = q.sql.to_uppercase();
            let words: Vec<&str> = upper.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').collect();
            assert!(words.contains(&"ORDER"), "{}: needs a deterministic ORDER BY", q.name);
            for banned in ["OVER", "ASOF", "DATETIME64", "MAP", "FORMAT", "SETTINGS"] {
                assert!(!words.contains(&banned), "{}: {banned} is not portable to 18.16", q.name);
            }
            assert!(words.iter().filter(|w| **w == "JOIN").count() <= 1, "{}: one JOIN at most", q.name);
            assert!(!q.sql.contains("{db}") || q.render("oomlens").is_ok_and(|s| !s.contains('{')));
        }
    }

    #[test]
    fn identifier_validation() {
        let q = get("oom_events").expect("oom_events");
        assert!(q.render("oomlens").is_ok_and(|s| s.contains("FROM oomlens.oom_events")));
        for bad in ["oomlens; DROP", "", "1db", "a-b", "a.b", "`x`", "x y", "é"] {
            assert_eq!(q.render(bad), Err(QueryError::BadDatabase(bad.to_owned())), "{bad:?}");
        }
        assert!(is_identifier("_oomlens_2"));
    }

    #[test]
    fn bind_checks_count_and_types() {
        let client = clickhouse::Client::default();
        let q = get("gpu_memory_curve").expect("gpu_memory_curve");
        let args: Vec<ParamValue> = vec![
            "train-east".into(),
            "node'; DROP TABLE x --".into(),
            3u32.into(),
            0i64.into(),
            i64::MAX.into(),
        ];
        let bound = q.bind(&client, "oomlens", &args).expect("bind");
        let sql = bound.sql_display().to_string();
        assert!(sql.contains("cluster = 'train-east'"), "{sql}");
        assert!(sql.contains(r"node = 'node\'; DROP TABLE x --'"), "{sql}");
        assert!(sql.contains("gpu_index = 3 AND ts_ms >= 0 AND ts_ms < 9223372036854775807"), "{sql}");
        assert!(!sql.contains('?'), "{sql}");

        assert!(matches!(
            q.bind(&client, "oomlens", &args[..2]),
            Err(QueryError::ArgCount { expected: 5, got: 2, .. })
        ));
        let mut wrong = args.clone();
        wrong[2] = ParamValue::Int(-1);
        assert!(
            matches!(q.bind(&client, "oomlens", &wrong), Err(QueryError::ArgType { ref param, .. }) if param == "gpu_index")
        );
        wrong[2] = ParamValue::UInt(u64::from(u32::MAX) + 1);
        assert!(matches!(q.bind(&client, "oomlens", &wrong), Err(QueryError::ArgType { .. })));
        wrong[2] = "3".into();
        assert!(matches!(q.bind(&client, "oomlens", &wrong), Err(QueryError::ArgType { .. })));
        let mut wrong = args.clone();
        wrong[0] = 1i64.into();
        assert!(matches!(q.bind(&client, "oomlens", &wrong), Err(QueryError::ArgType { .. })));
        assert_eq!(q.bind(&client, "x;y", &args).err(), Some(QueryError::BadDatabase("x;y".into())));
        // the examples always bind
        for q in all() {
            assert!(q.bind(&client, "oomlens", &q.example_args()).is_ok(), "{}", q.name);
        }
    }

    #[test]
    fn textual_args_parse_by_type() {
        let q = get("gpu_memory_curve").expect("gpu_memory_curve");
        let args = q.parse_args(&["c", "n", "2", "-5", "100"]).expect("parse");
        assert_eq!(args[2], ParamValue::UInt(2));
        assert_eq!(args[3], ParamValue::Int(-5));
        assert!(q.check_args(&args).is_ok());
        assert!(matches!(q.parse_args(&["c", "n", "-1", "0", "1"]), Err(QueryError::BadValue { .. })));
        assert!(matches!(q.parse_args(&["c", "n", "x", "0", "1"]), Err(QueryError::BadValue { .. })));
        assert!(matches!(q.parse_args(&["c"]), Err(QueryError::ArgCount { .. })));
        assert_eq!(ParamType::Float64.parse_value("1.5"), Ok(ParamValue::Float(1.5)));
        assert!(ParamType::Int64.parse_value("9223372036854775808").is_err());
        assert_eq!(ParamType::UInt64.parse_value("18446744073709551615"), Ok(ParamValue::UInt(u64::MAX)));
    }

    #[test]
    fn bad_headers_are_typed_errors() {
        let ok = "-- name: q\n-- description: d\n-- param: a Int64 = 1\nSELECT ? ORDER BY 1";
        assert!(Query::parse("q", ok).is_ok());
        let cases = [
            ("-- description: d\nSELECT 1", "missing `-- name:`"),
            ("-- name: other\n-- description: d\nSELECT 1", "differs from the file name"),
            ("-- name: q\nSELECT 1", "description"),
            ("-- name: q\n-- description: d\n", "no SQL"),
            ("-- name: q\n-- description: d\n-- param: a Int64 = 1\nSELECT 1", "placeholder"),
            ("-- name: q\n-- description: d\n-- param: a Date = 1\nSELECT ?", "unsupported type"),
            ("-- name: q\n-- description: d\n-- param: a UInt8 = 300\nSELECT ?", "example"),
            ("-- name: q\n-- description: d\n-- param: a Int64\nSELECT ?", "NAME TYPE = EXAMPLE"),
            (
                "-- name: q\n-- description: d\n-- param: a Int64 = 1\n-- param: a Int64 = 1\nSELECT ?, ?",
                "twice",
            ),
        ];
        for (text, needle) in cases {
            let err = Query::parse("q", text).expect_err(text).to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        let q = Query::parse("q", "-- name: q\n-- description: d\n-- a free comment\nSELECT 1 ORDER BY 1;\n")
            .expect("parse");
        assert_eq!(q.sql, "SELECT 1 ORDER BY 1");
    }
}
