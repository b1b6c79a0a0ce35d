//! ClickHouse DDL rendered for the detected server version, and the schema check.
//!
//! Production runs modern ClickHouse (23.x–26.x); the only server installable on our machines is
//! 18.16. The DDL therefore adapts: `LowCardinality`, column `CODEC`s, table `TTL` and the
//! `DateTime64` type of the `ts` convenience alias are used only where the server has them
//! ([`ServerCaps`]). Time is always stored as `ts_ms Int64` (epoch ms, UTC), identical everywhere.
//!
//! [`check_columns`] compares a table's `DESCRIBE TABLE` answer with the Row struct the collector
//! writes, because with schema validation off (as 18.16 requires) a mismatched type would decode
//! to garbage without an error.

use std::fmt::Write as _;

use crate::rows::{AgentRow, ColumnDef, GpuSampleRow, OomEventRow, ProcessSampleRow, Storage, TableRow};

/// A ClickHouse server version, as `SELECT version()` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    /// Major (year-based since 18.x).
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

/// `SELECT version()` answered something unparseable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse ClickHouse version {0:?}")]
pub struct BadVersion(pub String);

impl std::str::FromStr for ServerVersion {
    type Err = BadVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadVersion(s.to_owned());
        let mut parts = s.trim().split('.').map(|p| p.parse::<u32>());
        let major = parts.next().ok_or_else(bad)?.map_err(|_| bad())?;
        let minor = parts.next().ok_or_else(bad)?.map_err(|_| bad())?;
        let patch = parts.next().transpose().map_err(|_| bad())?.unwrap_or(0);
        Ok(ServerVersion { major, minor, patch })
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl ServerVersion {
    const fn at_least(self, major: u32, minor: u32) -> bool {
        self.major > major || (self.major == major && self.minor >= minor)
    }

    /// What this server supports.
    pub const fn caps(self) -> ServerCaps {
        ServerCaps {
            low_cardinality: self.at_least(19, 9),
            codecs: self.at_least(19, 10),
            ttl: self.at_least(19, 6),
            datetime64: self.at_least(20, 1),
        }
    }
}

/// DDL features by server version (thresholds: first release where they are production-ready).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerCaps {
    /// `LowCardinality(String)` without the experimental setting (19.9+).
    pub low_cardinality: bool,
    /// Column compression codecs (19.10+).
    pub codecs: bool,
    /// Table TTL (19.6+); without it the collector drops expired partitions itself.
    pub ttl: bool,
    /// `DateTime64` and `fromUnixTimestamp64Milli` (20.1+).
    pub datetime64: bool,
}

/// Table engine family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Append-only samples.
    MergeTree,
    /// Rows with the same sort key collapse to one on merge (re-sent events, agent state); the row
    /// with the highest value of the version column wins (the last inserted without one).
    ReplacingMergeTree(Option<&'static str>),
}

/// Everything needed to create one table.
#[derive(Debug, Clone)]
pub struct TableSpec {
    /// Table name.
    pub name: &'static str,
    /// Columns (from the Row struct).
    pub columns: Vec<ColumnDef>,
    /// Engine.
    pub engine: Engine,
    /// `ORDER BY` key.
    pub order_by: &'static str,
    /// `PARTITION BY` granularity.
    pub partition: Partition,
}

/// Partition granularity; both are computed from `ts_ms` in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    /// `toYYYYMMDD` — data tables.
    Day,
    /// `toYYYYMM` — small state tables.
    Month,
}

/// Retention of each table in days (0: keep forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// `gpu_samples` and `process_samples`.
    pub samples_days: u32,
    /// `oom_events`.
    pub events_days: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { samples_days: 30, events_days: 365 }
    }
}

fn spec<R: TableRow>(engine: Engine, order_by: &'static str, partition: Partition) -> TableSpec {
    TableSpec { name: R::TABLE, columns: R::columns(), engine, order_by, partition }
}

/// The tables, in creation order.
pub fn tables() -> Vec<TableSpec> {
    vec![
        spec::<GpuSampleRow>(Engine::MergeTree, "cluster, node, gpu_index, ts_ms", Partition::Day),
        spec::<ProcessSampleRow>(Engine::MergeTree, "cluster, node, gpu_index, ts_ms, pid", Partition::Day),
        spec::<OomEventRow>(
            Engine::ReplacingMergeTree(None),
            "cluster, ts_ms, node, event_id",
            Partition::Day,
        ),
        spec::<AgentRow>(
            Engine::ReplacingMergeTree(Some("last_seq")),
            "cluster, node, agent_id, boot_id",
            Partition::Month,
        ),
    ]
}

/// The `DateTime` expression of `ts_ms` (seconds resolution) used for partitions and TTL.
pub const TS_SECONDS_EXPR: &str = "toDateTime(intDiv(ts_ms, 1000), 'UTC')";

impl TableSpec {
    /// The column type as it is created on a server with `caps` (and as `DESCRIBE` shows it).
    pub fn column_type(col: &ColumnDef, caps: ServerCaps) -> String {
        match col.storage {
            Storage::LowCardinality if caps.low_cardinality => format!("LowCardinality({})", col.ch_type),
            _ => col.ch_type.clone(),
        }
    }

    /// Retention in days for this table.
    pub fn retention_days(&self, retention: Retention) -> u32 {
        match self.name {
            "gpu_samples" | "process_samples" => retention.samples_days,
            "oom_events" => retention.events_days,
            _ => 0,
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` for this server.
    pub fn create_sql(&self, database: &str, caps: ServerCaps, retention: Retention) -> String {
        let mut sql = format!("CREATE TABLE IF NOT EXISTS {database}.{} (\n", self.name);
        for col in &self.columns {
            let _ = write!(sql, "    {}", Self::column_definition(col, caps));
            sql.push_str(",\n");
        }
        let _ = writeln!(sql, "    {}", ts_alias(caps));
        let engine = match self.engine {
            Engine::MergeTree => "MergeTree()".to_owned(),
            Engine::ReplacingMergeTree(None) => "ReplacingMergeTree()".to_owned(),
            Engine::ReplacingMergeTree(Some(version)) => format!("ReplacingMergeTree({version})"),
        };
        let partition = match self.partition {
            Partition::Day => "toYYYYMMDD",
            Partition::Month => "toYYYYMM",
        };
        let _ = write!(
            sql,
            ")\nENGINE = {engine}\nPARTITION BY {partition}({TS_SECONDS_EXPR})\nORDER BY ({})",
            self.order_by
        );
        let days = self.retention_days(retention);
        if caps.ttl && days > 0 {
            let _ = write!(sql, "\nTTL {TS_SECONDS_EXPR} + INTERVAL {days} DAY");
        }
        sql
    }

    /// One column's definition (name, type, codec).
    pub fn column_definition(col: &ColumnDef, caps: ServerCaps) -> String {
        let ty = Self::column_type(col, caps);
        match col.storage {
            Storage::Codec(codec) if caps.codecs => format!("{} {ty} CODEC({codec})", col.name),
            _ => format!("{} {ty}", col.name),
        }
    }
}

/// The `ts` convenience column: `DateTime64(3, 'UTC')` where supported, else `DateTime`.
pub fn ts_alias(caps: ServerCaps) -> &'static str {
    if caps.datetime64 {
        "ts DateTime64(3, 'UTC') ALIAS fromUnixTimestamp64Milli(ts_ms, 'UTC')"
    } else {
        "ts DateTime('UTC') ALIAS toDateTime(intDiv(ts_ms, 1000), 'UTC')"
    }
}

/// One line of `DESCRIBE TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedColumn {
    /// Column name.
    pub name: String,
    /// Type as the server prints it.
    pub ty: String,
    /// `''`, `DEFAULT`, `MATERIALIZED` or `ALIAS`.
    pub default_kind: String,
}

/// How a live table differs from what the collector writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaMismatch {
    /// A column the Row struct writes is missing.
    #[error("table {table}: column {column} is missing (expected {expected})")]
    Missing {
        /// Table.
        table: String,
        /// Column.
        column: String,
        /// Expected type.
        expected: String,
    },
    /// A column has another type than the Row struct writes.
    #[error("table {table}: column {column} has type {actual}, the collector writes {expected}")]
    WrongType {
        /// Table.
        table: String,
        /// Column.
        column: String,
        /// Expected type.
        expected: String,
        /// Actual type.
        actual: String,
    },
}

/// Strips `LowCardinality(…)`: it does not change the RowBinary encoding.
fn rowbinary_type(ty: &str) -> String {
    let mut out = ty.replace("LowCardinality(", "");
    let removed = (ty.len() - out.len()) / "LowCardinality(".len();
    for _ in 0..removed {
        if let Some(pos) = out.rfind(')') {
            out.remove(pos);
        }
    }
    out
}

/// Compares `DESCRIBE TABLE` output with the columns the collector writes.
///
/// Extra columns on the server are fine (a newer collector may have added them); a missing
/// column or a different RowBinary type is an error.
pub fn check_columns(spec: &TableSpec, described: &[DescribedColumn]) -> Vec<SchemaMismatch> {
    spec.columns
        .iter()
        .filter_map(|col| {
            let expected = col.ch_type.clone();
            match described.iter().find(|d| d.name == col.name) {
                None => Some(SchemaMismatch::Missing {
                    table: spec.name.to_owned(),
                    column: col.name.to_owned(),
                    expected,
                }),
                Some(d) if rowbinary_type(&d.ty) != expected || d.default_kind == "ALIAS" => {
                    Some(SchemaMismatch::WrongType {
                        table: spec.name.to_owned(),
                        column: col.name.to_owned(),
                        expected,
                        actual: d.ty.clone(),
                    })
                }
                Some(_) => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_gate_features() {
        let old: ServerVersion = "18.16.1".parse().unwrap();
        let new: ServerVersion = "26.9.1.1".parse().unwrap();
        assert_eq!(old, ServerVersion { major: 18, minor: 16, patch: 1 });
        assert!(!old.caps().low_cardinality && !old.caps().ttl && !old.caps().codecs);
        assert!(new.caps().low_cardinality && new.caps().ttl && new.caps().codecs && new.caps().datetime64);
        assert!("garbage".parse::<ServerVersion>().is_err());
        assert!("18".parse::<ServerVersion>().is_err());
    }

    #[test]
    fn old_ddl_has_no_modern_extras() {
        let caps = "18.16.1".parse::<ServerVersion>().unwrap().caps();
        for t in tables() {
            let sql = t.create_sql("oomlens", caps, Retention::default());
            assert!(
                !sql.contains("LowCardinality") && !sql.contains("CODEC") && !sql.contains("TTL"),
                "{sql}"
            );
            assert!(sql.contains("ts_ms Int64"), "{sql}");
        }
    }

    #[test]
    fn modern_ddl_uses_extras() {
        let caps = "26.9.1".parse::<ServerVersion>().unwrap().caps();
        let sql = tables()[0].create_sql("oomlens", caps, Retention::default());
        assert!(sql.contains("cluster LowCardinality(String)"), "{sql}");
        assert!(sql.contains("CODEC(Delta, ZSTD(1))"), "{sql}");
        assert!(sql.contains("TTL toDateTime(intDiv(ts_ms, 1000), 'UTC') + INTERVAL 30 DAY"), "{sql}");
        assert!(sql.contains("DateTime64(3, 'UTC')"), "{sql}");
    }

    #[test]
    fn describe_check_finds_mismatches() {
        let spec = &tables()[0];
        let mut described: Vec<DescribedColumn> = spec
            .columns
            .iter()
            .map(|c| DescribedColumn {
                name: c.name.to_owned(),
                ty: TableSpec::column_type(c, "26.1".parse::<ServerVersion>().unwrap().caps()),
                default_kind: String::new(),
            })
            .collect();
        assert!(check_columns(spec, &described).is_empty());
        described[3].ty = "Int32".to_owned();
        described.remove(0);
        let errs = check_columns(spec, &described);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert_eq!(rowbinary_type("Array(LowCardinality(String))"), "Array(String)");
    }
}
