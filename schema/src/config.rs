//! Loading a binary's TOML configuration file (feature `config`): the error type both binaries
//! share, the read + parse step with environment overrides, and [`Valid`], the type a
//! configuration becomes once checked. Each binary's own config module owns its sections,
//! defaults and validation ([`Check`]).
//!
//! Two stages, as in ripgrep's low/high arguments: the raw configuration is what TOML, the
//! environment and command-line flags layer into (every field public, nothing guaranteed); its
//! [`Check::check`] fills derived defaults, resolves aliases and refuses bad values, and the
//! result is a [`Valid`] that only that check can make. Code that runs a service takes a
//! `Valid<…>`, so it never sees an unchecked configuration and cannot change one after the check.

use std::path::{Path, PathBuf};

/// Configuration failed to load or validate.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The config file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The config file that failed to parse.
        path: PathBuf,
        /// Parser message (names the key and line).
        message: String,
    },
    /// A value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The validation step of a raw configuration type.
pub trait Check: Sized {
    /// Fills derived defaults, resolves aliases and refuses bad values.
    fn check(self) -> Result<Self, ConfigError>;
}

/// A configuration that passed its [`Check`]. Only [`Valid::new`] makes one, and it derefs to
/// the configuration read-only.
#[derive(Debug, Clone, PartialEq)]
pub struct Valid<T>(T);

impl<T: Check> Valid<T> {
    /// Checks `raw`.
    pub fn new(raw: T) -> Result<Self, ConfigError> {
        raw.check().map(Valid)
    }
}

impl<T> Valid<T> {
    /// The checked configuration as a raw one again (to change it and check it anew).
    pub fn into_raw(self) -> T {
        self.0
    }
}

/// Serialises as the configuration itself (a printed valid configuration loads and checks again).
impl<T: serde::Serialize> serde::Serialize for Valid<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<T> std::ops::Deref for Valid<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Parses TOML text (`path` only names it in errors). Unknown keys are refused where the types
/// say `deny_unknown_fields`.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.to_owned(), message: e.to_string() })
}

/// Reads and parses a TOML file.
pub fn load_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    parse_toml(&text, path)
}

/// Prefix of the environment variables that set configuration keys.
pub const ENV_PREFIX: &str = "OOMLENS_";

/// One `OOMLENS_<SECTION>__<FIELD>` environment variable: the TOML key path it sets
/// (`OOMLENS_UPLINK__BATCH_MAX_ROWS` → `uplink.batch_max_rows`, nested tables with more `__`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvOverride {
    /// The variable's name.
    pub var: String,
    /// Key path, lower case (`["uplink", "batch_max_rows"]`).
    pub path: Vec<String>,
    /// The raw value.
    pub value: String,
}

impl EnvOverride {
    /// The dotted key (`uplink.batch_max_rows`).
    pub fn key(&self) -> String {
        self.path.join(".")
    }
}

/// The configuration overrides among `vars` (e.g. `std::env::vars()`): names `OOMLENS_` + key path
/// with `__` between the levels. Variables without `__` (`OOMLENS_NODE`, `OOMLENS_LOG`, …) are
/// flags' variables or other settings, not key paths, and are skipped. Sorted by name, so the
/// result does not depend on the environment's order.
pub fn env_overrides<I>(vars: I) -> Vec<EnvOverride>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut out: Vec<EnvOverride> = vars
        .into_iter()
        .filter_map(|(var, value)| {
            let rest = var.strip_prefix(ENV_PREFIX)?;
            if !rest.contains("__") {
                return None;
            }
            let path = rest.split("__").map(str::to_ascii_lowercase).collect();
            Some(EnvOverride { var, path, value })
        })
        .collect();
    out.sort_by(|a, b| a.var.cmp(&b.var));
    out
}

/// The layered configuration of a binary: defaults, then the TOML file at `path` when given,
/// then every `OOMLENS_<SECTION>__<KEY>` variable among `vars` ([`env_overrides`]). Command-line
/// flags are applied on top by the binary.
pub fn load_layered<T, I>(path: Option<&Path>, vars: I) -> Result<T, ConfigError>
where
    T: serde::de::DeserializeOwned + serde::Serialize + Default,
    I: IntoIterator<Item = (String, String)>,
{
    let overrides = env_overrides(vars);
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
            parse_layered(Some((&text, path)), &overrides)
        }
        None => parse_layered(None, &overrides),
    }
}

/// Parses the configuration: defaults, then the TOML `file` (text and path) when given, then the
/// `overrides`. Errors name the file's key and line, or the variable. A variable's value is read
/// as the type of the key's default (a string stays a string; lists are comma-separated or a TOML
/// array); keys without a default value (unset options) take a TOML value, else the plain string.
pub fn parse_layered<T>(file: Option<(&str, &Path)>, overrides: &[EnvOverride]) -> Result<T, ConfigError>
where
    T: serde::de::DeserializeOwned + serde::Serialize + Default,
{
    let (mut table, origin) = match file {
        Some((text, path)) => {
            // Parse into the typed configuration first: its errors name the key and the line.
            let _: T = parse_toml(text, path)?;
            let table: toml::Table = parse_toml(text, path)?;
            (table, path.to_owned())
        }
        None => (toml::Table::new(), PathBuf::from("(defaults)")),
    };
    if overrides.is_empty() {
        return toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse { path: origin, message: e.to_string() });
    }
    let defaults = match toml::Value::try_from(T::default()) {
        Ok(toml::Value::Table(t)) => t,
        Ok(_) => toml::Table::new(),
        Err(e) => return Err(ConfigError::Invalid(format!("cannot render the default configuration: {e}"))),
    };
    for o in overrides {
        let env_err =
            |m: String| ConfigError::Invalid(format!("environment variable {} ({}): {m}", o.var, o.key()));
        if o.path.iter().any(String::is_empty) {
            return Err(env_err("empty key segment (use __ only between keys)".to_owned()));
        }
        let hint = lookup(&defaults, &o.path);
        let value = typed_value(&o.value, hint).map_err(env_err)?;
        // The variable alone on top of the defaults: an unknown key or a wrong type is reported
        // against the variable, not against the merged document.
        let mut alone = toml::Table::new();
        insert(&mut alone, &o.path, value.clone()).map_err(env_err)?;
        toml::Value::Table(alone).try_into::<T>().map_err(|e| env_err(e.message().to_owned()))?;
        insert(&mut table, &o.path, value).map_err(env_err)?;
    }
    toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| {
        ConfigError::Invalid(format!(
            "{} with the OOMLENS_*__* environment variables: {}",
            origin.display(),
            e.message()
        ))
    })
}

fn lookup<'a>(table: &'a toml::Table, path: &[String]) -> Option<&'a toml::Value> {
    let (first, rest) = path.split_first()?;
    let v = table.get(first)?;
    match (rest.is_empty(), v) {
        (true, v) => Some(v),
        (false, toml::Value::Table(t)) => lookup(t, rest),
        (false, _) => None,
    }
}

fn insert(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let Some((first, rest)) = path.split_first() else {
        return Err("empty key".to_owned());
    };
    if rest.is_empty() {
        table.insert(first.clone(), value);
        return Ok(());
    }
    let child = table.entry(first.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    match child {
        toml::Value::Table(t) => insert(t, rest, value),
        _ => Err(format!("{first} is a value, not a section")),
    }
}

/// A TOML literal (`42`, `true`, `[1, 2]`, `"x"`), if `raw` is one.
fn toml_literal(raw: &str) -> Option<toml::Value> {
    let mut t: toml::Table = toml::from_str(&format!("v = {raw}")).ok()?;
    t.remove("v")
}

fn typed_value(raw: &str, hint: Option<&toml::Value>) -> Result<toml::Value, String> {
    use toml::Value as V;
    let trimmed = raw.trim();
    match hint {
        Some(V::String(_)) => Ok(V::String(raw.to_owned())),
        Some(V::Integer(_)) => {
            trimmed.parse::<i64>().map(V::Integer).map_err(|_| format!("{raw:?} is not an integer"))
        }
        Some(V::Float(_)) => {
            trimmed.parse::<f64>().map(V::Float).map_err(|_| format!("{raw:?} is not a number"))
        }
        Some(V::Boolean(_)) => match trimmed.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(V::Boolean(true)),
            "false" | "0" | "no" | "off" => Ok(V::Boolean(false)),
            _ => Err(format!("{raw:?} is not a boolean (true/false)")),
        },
        Some(V::Array(items)) => {
            if trimmed.starts_with('[') {
                return match toml_literal(trimmed) {
                    Some(v @ V::Array(_)) => Ok(v),
                    _ => Err(format!("{raw:?} is not a TOML array")),
                };
            }
            let element = items.first();
            trimmed
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| match element {
                    Some(e) => typed_value(s, Some(e)),
                    None => Ok(toml_literal(s)
                        .filter(|v| !v.is_array() && !v.is_table())
                        .unwrap_or_else(|| V::String(s.to_owned()))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(V::Array)
        }
        Some(V::Table(_)) => Err("is a section: set its keys (OOMLENS_SECTION__KEY)".to_owned()),
        Some(V::Datetime(_)) | None => Ok(toml_literal(trimmed).unwrap_or_else(|| V::String(raw.to_owned()))),
    }
}

/// Whether the "default" cell of a documentation table row (docs/configuration.md) states `value`:
/// a number as digits (`1000`, `0o660`, `1.0`) or with a binary unit (`256 MiB`, `2 GiB`), a
/// boolean as `true`/`false`. Strings, lists and tables are described in words there (`host name`,
/// `none`), so they always match. Used by the binaries' tests that keep the page in step.
pub fn documented_default_matches(cell: &str, value: &toml::Value) -> bool {
    let cell = cell.replace('`', " ");
    let tokens: Vec<&str> = cell
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | ',' | ';' | ':' | '[' | ']'))
        .filter(|t| !t.is_empty())
        .collect();
    let mut numbers = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let n = match t.strip_prefix("0o") {
            Some(oct) => i64::from_str_radix(oct, 8).ok().map(|v| v as f64),
            None => t.replace('_', "").parse::<f64>().ok(),
        };
        let Some(n) = n else { continue };
        let unit = match tokens.get(i + 1).copied() {
            Some("KiB") => 1024.0,
            Some("MiB") => 1024.0 * 1024.0,
            Some("GiB") => 1024.0 * 1024.0 * 1024.0,
            _ => 1.0,
        };
        numbers.push(n * unit);
        numbers.push(n);
    }
    match value {
        toml::Value::Integer(v) => numbers.contains(&(*v as f64)),
        toml::Value::Float(v) => numbers.iter().any(|n| (n - v).abs() < 1e-9),
        toml::Value::Boolean(b) => tokens.contains(&if *b { "true" } else { "false" }),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, serde::Deserialize, serde::Serialize)]
    #[serde(deny_unknown_fields, default)]
    struct Section {
        name: String,
        count: u32,
        ratio: f64,
        on: bool,
        list: Vec<String>,
        addr: Option<std::net::SocketAddr>,
    }

    #[derive(Debug, Default, PartialEq, serde::Deserialize, serde::Serialize)]
    #[serde(deny_unknown_fields, default)]
    struct Cfg {
        sec: Section,
    }

    fn vars(v: &[(&str, &str)]) -> Vec<EnvOverride> {
        env_overrides(v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())))
    }

    #[test]
    fn variables_map_to_keys_and_types() {
        let o = vars(&[
            ("OOMLENS_SEC__NAME", "123"),
            ("OOMLENS_SEC__COUNT", " 7 "),
            ("OOMLENS_SEC__RATIO", "0.5"),
            ("OOMLENS_SEC__ON", "true"),
            ("OOMLENS_SEC__LIST", "a:1, b:2"),
            ("OOMLENS_SEC__ADDR", "127.0.0.1:9"),
            ("OOMLENS_NODE", "ignored: no __"),
            ("OTHER__X", "ignored: no prefix"),
        ]);
        assert_eq!(o.len(), 6);
        let file = "[sec]\nname = 'file'\ncount = 1\n";
        let cfg: Cfg = parse_layered(Some((file, Path::new("c.toml"))), &o).unwrap();
        assert_eq!(cfg.sec.name, "123", "a string key keeps digits as a string");
        assert_eq!((cfg.sec.count, cfg.sec.ratio, cfg.sec.on), (7, 0.5, true));
        assert_eq!(cfg.sec.list, ["a:1", "b:2"]);
        assert_eq!(cfg.sec.addr, Some("127.0.0.1:9".parse().unwrap()));
        let cfg: Cfg = parse_layered(None, &vars(&[("OOMLENS_SEC__LIST", "['x', 'y,z']")])).unwrap();
        assert_eq!(cfg.sec.list, ["x", "y,z"]);
        let cfg: Cfg = parse_layered(Some((file, Path::new("c.toml"))), &[]).unwrap();
        assert_eq!((cfg.sec.name.as_str(), cfg.sec.count), ("file", 1));
    }

    #[test]
    fn documented_defaults() {
        use toml::Value as V;
        assert!(documented_default_matches("1000", &V::Integer(1000)));
        assert!(documented_default_matches("256 MiB", &V::Integer(256 << 20)));
        assert!(documented_default_matches("2147483648 (2 GiB)", &V::Integer(2 << 30)));
        assert!(documented_default_matches("`0o660`", &V::Integer(0o660)));
        assert!(documented_default_matches("90", &V::Float(90.0)));
        assert!(documented_default_matches("`true`", &V::Boolean(true)));
        assert!(documented_default_matches("0 (now)", &V::Integer(0)));
        assert!(!documented_default_matches("1000", &V::Integer(2000)));
        assert!(!documented_default_matches("1 GiB", &V::Integer(1 << 20)));
        assert!(!documented_default_matches("`false`", &V::Boolean(true)));
        assert!(documented_default_matches("host name", &V::String("vm".into())));
    }

    #[test]
    fn bad_variables_are_named_in_the_error() {
        for (var, value, needle) in [
            ("OOMLENS_SEC__COUNTT", "1", "countt"),
            ("OOMLENS_SEC__COUNT", "many", "not an integer"),
            ("OOMLENS_SEC__COUNT", "-1", "OOMLENS_SEC__COUNT"),
            ("OOMLENS_SEC__ON", "maybe", "not a boolean"),
            ("OOMLENS_SEC__ADDR", "nowhere", "OOMLENS_SEC__ADDR"),
            ("OOMLENS_NOPE__X", "1", "nope"),
            ("OOMLENS_SEC", "1", "never"),
            ("OOMLENS_SEC____X", "1", "empty key segment"),
        ] {
            let o = vars(&[(var, value)]);
            if needle == "never" {
                assert!(o.is_empty());
                continue;
            }
            let err = parse_layered::<Cfg>(None, &o).unwrap_err().to_string();
            assert!(err.contains(needle) && err.contains(var), "{var}={value}: {err}");
        }
        let err = parse_layered::<Cfg>(Some(("[sec]\nbogus = 1\n", Path::new("c.toml"))), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("bogus") && err.contains("c.toml") && err.contains("line 2"), "{err}");
    }
}
