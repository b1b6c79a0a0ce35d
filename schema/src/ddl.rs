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
//!
//! On a ClickHouse cluster ([`ClusterDdl`], [`schema_sql`]) every table becomes a storage table
//! `<table>_local` on each shard (plain or `Replicated*` engine) and a `Distributed` table
//! `<table>` sharded by [`SHARDING_KEY`], so queries and inserts keep the plain names.

use std::fmt::Write as _;

pub mod rollups;

use crate::rows::{
    AgentRow, ColumnDef, GpuSampleRow, OomAttributionRow, OomEventRow, ProcessSampleRow, Storage, TableRow,
};

/// A ClickHouse server version, as `SELECT version()` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    /// Major (year-based since 18.x).
    pub major: u32,
    /// Minor version (8 in `24.8.1`).
    pub minor: u32,
    /// Patch number (0 when the version string has only two parts).
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
            insert_dedup: self.at_least(20, 10),
            dedup_token: self.at_least(22, 2),
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
    /// The MergeTree setting `non_replicated_deduplication_window` (20.10+): a plain MergeTree
    /// remembers the hashes of its last inserted blocks and drops a block inserted again.
    pub insert_dedup: bool,
    /// The `insert_deduplication_token` insert setting (22.2+): the caller names the insert, and
    /// a retried insert with the same token is dropped (see `collector/src/clickhouse/sink.rs`).
    pub dedup_token: bool,
}

/// Inserted blocks per table whose hashes (or tokens) the server keeps for deduplication, where
/// it can ([`ServerCaps::insert_dedup`]). Generous: a collector flushes a few times per second.
pub const DEDUP_WINDOW: u32 = 10_000;

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
    /// Table engine (`MergeTree` or `ReplacingMergeTree`).
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
    let mut tables = vec![
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
    ];
    tables.push(attribution_table());
    tables
}

/// `oom_attributions`: one row per OOM event (cluster, node, event_id) with its features, the
/// rules' answer and its top neighbours, written by the collector's attributor. Re-attributing an
/// event inserts a newer row (`attributed_ms`) that replaces the older one on merge; readers
/// deduplicate by key before merges. Same sort key and day partitions as `oom_events` (the
/// readers select a time window) and the same retention.
pub fn attribution_table() -> TableSpec {
    spec::<OomAttributionRow>(
        Engine::ReplacingMergeTree(Some("attributed_ms")),
        "cluster, ts_ms, node, event_id",
        Partition::Day,
    )
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
            "oom_events" | "oom_attributions" => retention.events_days,
            _ => 0,
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` for this server.
    pub fn create_sql(&self, database: &str, caps: ServerCaps, retention: Retention) -> String {
        self.render_create(
            &format!("{database}.{}", self.name),
            None,
            &self.engine_sql(None),
            caps,
            retention,
        )
    }

    /// The `ENGINE` expression; `replicated` gives the `Replicated*` variant with its ZooKeeper
    /// path and replica name.
    fn engine_sql(&self, replicated: Option<(&str, &str)>) -> String {
        let (prefix, mut args) = match replicated {
            Some((path, replica)) => ("Replicated", vec![format!("'{path}'"), format!("'{replica}'")]),
            None => ("", Vec::new()),
        };
        let family = match self.engine {
            Engine::MergeTree => "MergeTree",
            Engine::ReplacingMergeTree(version) => {
                args.extend(version.map(str::to_owned));
                "ReplacingMergeTree"
            }
        };
        format!("{prefix}{family}({})", args.join(", "))
    }

    /// `CREATE TABLE IF NOT EXISTS <table> [ON CLUSTER …]` with this table's columns, `engine`,
    /// partitioning, sort key and (where the server has it) TTL.
    fn render_create(
        &self,
        table: &str,
        on_cluster: Option<&str>,
        engine: &str,
        caps: ServerCaps,
        retention: Retention,
    ) -> String {
        let mut columns: Vec<String> =
            self.columns.iter().map(|col| Self::column_definition(col, caps)).collect();
        columns.push(ts_alias(caps).to_owned());
        let partition = match self.partition {
            Partition::Day => "toYYYYMMDD",
            Partition::Month => "toYYYYMM",
        };
        let mut sql = create_table_sql(
            table,
            on_cluster,
            &columns,
            engine,
            &format!("{partition}({TS_SECONDS_EXPR})"),
            self.order_by,
            TS_SECONDS_EXPR,
            caps.ttl.then(|| self.retention_days(retention)),
        );
        // Replicated tables deduplicate inserts by themselves (`replicated_deduplication_window`).
        if caps.insert_dedup && !engine.starts_with("Replicated") {
            let _ = write!(sql, "\nSETTINGS non_replicated_deduplication_window = {DEDUP_WINDOW}");
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

/// Suffix of the per-shard storage tables in cluster mode (`gpu_samples_local`, …).
pub const LOCAL_SUFFIX: &str = "_local";

/// Sharding key of the `Distributed` tables: every row of one node lands on one shard, so the
/// per-node deduplication (`LIMIT 1 BY cluster, node, event_id`, the `ReplacingMergeTree` merges
/// of `oom_events` and `agents`) never needs rows from two shards.
pub const SHARDING_KEY: &str = "cityHash64(cluster, node)";

/// A ClickHouse cluster (`remote_servers`) the tables are spread over: per table a storage table
/// `<table>_local` on every shard and a `Distributed` table `<table>` in front of them, so every
/// query and insert keeps using the plain table names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDdl {
    /// Cluster name as in the servers' `remote_servers` (a plain identifier).
    pub name: String,
    /// Render `ON CLUSTER <name>`: one statement creates the table on every host through the
    /// distributed DDL queue (needs ZooKeeper / ClickHouse Keeper). Without it the statements are
    /// run on every host separately.
    pub on_cluster: bool,
    /// Storage tables use `ReplicatedMergeTree` / `ReplicatedReplacingMergeTree` with the
    /// `{shard}` and `{replica}` macros (needs ZooKeeper / Keeper and `<macros>` on every host).
    pub replicated: bool,
}

impl ClusterDdl {
    fn on_cluster(&self) -> Option<&str> {
        self.on_cluster.then_some(self.name.as_str())
    }
}

impl TableSpec {
    /// The per-shard storage table's name, `<table>_local`.
    pub fn local_name(&self) -> String {
        format!("{}{LOCAL_SUFFIX}", self.name)
    }

    /// The ZooKeeper path of a replicated storage table: one per shard, table and database.
    pub fn replication_path(&self, database: &str) -> String {
        format!("/clickhouse/tables/{{shard}}/{database}/{}", self.name)
    }

    /// `CREATE TABLE IF NOT EXISTS <db>.<table>_local` — the storage table on each shard.
    pub fn create_local_sql(
        &self,
        database: &str,
        caps: ServerCaps,
        retention: Retention,
        cluster: &ClusterDdl,
    ) -> String {
        let path = self.replication_path(database);
        let engine = self.engine_sql(cluster.replicated.then_some((path.as_str(), "{replica}")));
        self.render_create(
            &format!("{database}.{}", self.local_name()),
            cluster.on_cluster(),
            &engine,
            caps,
            retention,
        )
    }

    /// `CREATE TABLE IF NOT EXISTS <db>.<table>` as `Distributed(cluster, db, <table>_local,
    /// cityHash64(cluster, node))` with the same columns (types as on the shards, no codecs).
    pub fn create_distributed_sql(&self, database: &str, caps: ServerCaps, cluster: &ClusterDdl) -> String {
        let mut columns: Vec<String> =
            self.columns.iter().map(|col| format!("{} {}", col.name, Self::column_type(col, caps))).collect();
        columns.push(ts_alias(caps).to_owned());
        let mut sql = create_table_head(&format!("{database}.{}", self.name), cluster.on_cluster(), &columns);
        let _ = write!(
            sql,
            "\nENGINE = Distributed({}, {database}, {}, {SHARDING_KEY})",
            cluster.name,
            self.local_name()
        );
        sql
    }

    /// `ALTER TABLE <table> [ON CLUSTER …] ADD COLUMN …` for a column a newer collector writes.
    pub fn add_column_sql(
        table: &str,
        col: &ColumnDef,
        caps: ServerCaps,
        on_cluster: Option<&str>,
    ) -> String {
        let on = on_cluster.map(|c| format!(" ON CLUSTER {c}")).unwrap_or_default();
        format!("ALTER TABLE {table}{on} ADD COLUMN {}", Self::column_definition(col, caps))
    }
}

/// `CREATE TABLE IF NOT EXISTS <table> [ON CLUSTER …] (<columns, one per line>)`, without the
/// engine: shared by the storage tables and their `Distributed` fronts.
pub(crate) fn create_table_head(table: &str, on_cluster: Option<&str>, columns: &[String]) -> String {
    let mut sql = format!("CREATE TABLE IF NOT EXISTS {table}");
    if let Some(cluster) = on_cluster {
        let _ = write!(sql, " ON CLUSTER {cluster}");
    }
    let columns: Vec<String> = columns.iter().map(|c| format!("    {c}")).collect();
    let _ = write!(sql, " (\n{}\n)", columns.join(",\n"));
    sql
}

/// `CREATE TABLE IF NOT EXISTS <table> [ON CLUSTER …] (<columns>) ENGINE … PARTITION BY …
/// ORDER BY (…) [TTL <ttl_time> + INTERVAL <days> DAY]`: the shape every oomlens table shares (the
/// sample/event tables and the rollups). `ttl_days`: `None` where the server has no TTL, `Some(0)`
/// to keep forever.
#[allow(clippy::too_many_arguments)]
pub(crate) fn create_table_sql(
    table: &str,
    on_cluster: Option<&str>,
    columns: &[String],
    engine: &str,
    partition_by: &str,
    order_by: &str,
    ttl_time: &str,
    ttl_days: Option<u32>,
) -> String {
    let mut sql = create_table_head(table, on_cluster, columns);
    let _ = write!(sql, "\nENGINE = {engine}\nPARTITION BY {partition_by}\nORDER BY ({order_by})");
    if let Some(days) = ttl_days.filter(|d| *d > 0) {
        let _ = write!(sql, "\nTTL {ttl_time} + INTERVAL {days} DAY");
    }
    sql
}

/// `CREATE DATABASE IF NOT EXISTS` (`ON CLUSTER` when the cluster asks for it).
pub fn create_database_sql(database: &str, cluster: Option<&ClusterDdl>) -> String {
    match cluster.and_then(ClusterDdl::on_cluster) {
        Some(name) => format!("CREATE DATABASE IF NOT EXISTS {database} ON CLUSTER {name}"),
        None => format!("CREATE DATABASE IF NOT EXISTS {database}"),
    }
}

/// Every statement of the schema in execution order: for one server the tables; for a cluster
/// the database, then per table its `_local` storage table and its `Distributed` table. The
/// per-minute rollups and their materialized views ([`rollups::rollups_sql`]) come last.
pub fn schema_sql(
    database: &str,
    caps: ServerCaps,
    retention: Retention,
    cluster: Option<&ClusterDdl>,
) -> Vec<String> {
    let mut stmts: Vec<String> = match cluster {
        None => tables().iter().map(|t| t.create_sql(database, caps, retention)).collect(),
        Some(c) => std::iter::once(create_database_sql(database, Some(c)))
            .chain(tables().iter().flat_map(|t| {
                [
                    t.create_local_sql(database, caps, retention, c),
                    t.create_distributed_sql(database, caps, c),
                ]
            }))
            .collect(),
    };
    stmts.extend(rollups::rollups_sql(database, caps, retention, cluster));
    stmts
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
        /// Name of the table checked, without the database.
        table: String,
        /// Name of the missing column.
        column: String,
        /// Expected type.
        expected: String,
    },
    /// A column has another type than the Row struct writes.
    #[error("table {table}: column {column} has type {actual}, the collector writes {expected}")]
    WrongType {
        /// Name of the table checked, without the database.
        table: String,
        /// Name of the column with the wrong type.
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
        assert!(sql.ends_with("SETTINGS non_replicated_deduplication_window = 10000"), "{sql}");
    }

    #[test]
    fn insert_dedup_is_gated_by_version() {
        let caps = |v: &str| v.parse::<ServerVersion>().unwrap().caps();
        assert!(!caps("18.16.1").insert_dedup && !caps("18.16.1").dedup_token);
        assert!(!caps("20.9.1").insert_dedup && caps("20.10.1").insert_dedup);
        assert!(!caps("22.1.3").dedup_token && caps("22.2.1").dedup_token);
        for t in tables() {
            assert!(!t.create_sql("oomlens", caps("18.16.1"), Retention::default()).contains("SETTINGS"));
        }
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

    #[test]
    fn attributions_are_replaced_by_newer_rows_and_kept_like_events() {
        let t = attribution_table();
        assert!(tables().iter().any(|s| s.name == t.name), "created by the migrations");
        let retention = Retention { samples_days: 7, events_days: 90 };
        assert_eq!(t.retention_days(retention), 90);
        let modern = t.create_sql("oomlens", "26.9.1".parse::<ServerVersion>().unwrap().caps(), retention);
        assert!(modern.contains("ENGINE = ReplacingMergeTree(attributed_ms)"), "{modern}");
        assert!(modern.contains("ORDER BY (cluster, ts_ms, node, event_id)"), "{modern}");
        assert!(modern.contains("TTL toDateTime(intDiv(ts_ms, 1000), 'UTC') + INTERVAL 90 DAY"), "{modern}");
        let old = t.create_sql("oomlens", "18.16.1".parse::<ServerVersion>().unwrap().caps(), retention);
        assert!(old.contains("PARTITION BY toYYYYMMDD(") && !old.contains("TTL"), "{old}");
        for col in [
            "neighbour_workloads Array(String)",
            "neighbour_growth_bytes Array(Int64)",
            "rules_version UInt32",
        ] {
            assert!(old.contains(col), "{col}: {old}");
        }
    }

    #[test]
    fn cluster_ddl_has_local_storage_and_distributed_fronts() {
        let caps = "18.16.1".parse::<ServerVersion>().unwrap().caps();
        let plain = ClusterDdl { name: "oomlens_c".into(), on_cluster: false, replicated: false };
        let stmts = schema_sql("db1", caps, Retention::default(), Some(&plain));
        assert_eq!(stmts.len(), 1 + 2 * tables().len() + 3 * rollups::rollups().len());
        assert_eq!(stmts[0], "CREATE DATABASE IF NOT EXISTS db1");
        for (i, t) in tables().iter().enumerate() {
            let local = &stmts[1 + 2 * i];
            let dist = &stmts[2 + 2 * i];
            assert!(
                local.starts_with(&format!("CREATE TABLE IF NOT EXISTS db1.{}_local (", t.name)),
                "{local}"
            );
            // Same storage as on one server, only the name differs.
            let single = t.create_sql("db1", caps, Retention::default());
            assert_eq!(local.replacen(&format!("{}_local", t.name), t.name, 1), single);
            assert!(dist.starts_with(&format!("CREATE TABLE IF NOT EXISTS db1.{} (", t.name)), "{dist}");
            assert!(
                dist.ends_with(&format!(
                    "ENGINE = Distributed(oomlens_c, db1, {}_local, cityHash64(cluster, node))",
                    t.name
                )),
                "{dist}"
            );
            for col in &t.columns {
                assert!(dist.contains(&format!("    {} ", col.name)), "{dist}");
            }
            assert!(!dist.contains("PARTITION") && !dist.contains("ON CLUSTER"), "{dist}");
        }
    }

    #[test]
    fn replicated_on_cluster_ddl() {
        let caps = "26.9.1".parse::<ServerVersion>().unwrap().caps();
        let c = ClusterDdl { name: "prod".into(), on_cluster: true, replicated: true };
        let stmts = schema_sql("oomlens", caps, Retention::default(), Some(&c));
        assert_eq!(stmts[0], "CREATE DATABASE IF NOT EXISTS oomlens ON CLUSTER prod");
        let all = stmts.join(";\n");
        assert!(all.contains(
            "CREATE TABLE IF NOT EXISTS oomlens.gpu_samples_local ON CLUSTER prod (\n    cluster LowCardinality(String)"
        ));
        assert!(all.contains(
            "ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/oomlens/gpu_samples', '{replica}')"
        ));
        assert!(all.contains(
            "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/oomlens/oom_events', '{replica}')"
        ));
        assert!(all.contains(
            "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/oomlens/agents', '{replica}', last_seq)"
        ));
        assert!(all.contains("CREATE TABLE IF NOT EXISTS oomlens.agents ON CLUSTER prod ("));
        assert!(!all.contains("non_replicated_deduplication_window"), "{all}");
        let plain = ClusterDdl { replicated: false, ..c.clone() };
        assert!(
            tables()[0]
                .create_local_sql("oomlens", caps, Retention::default(), &plain)
                .contains("SETTINGS non_replicated_deduplication_window")
        );
        // Codecs and TTL only on the storage tables.
        let dist = tables()[0].create_distributed_sql("oomlens", caps, &c);
        assert!(!dist.contains("CODEC") && !dist.contains("TTL"), "{dist}");
        assert!(dist.contains("cluster LowCardinality(String)"), "{dist}");
        let col = &tables()[0].columns[0];
        assert_eq!(
            TableSpec::add_column_sql("oomlens.gpu_samples_local", col, caps, Some("prod")),
            "ALTER TABLE oomlens.gpu_samples_local ON CLUSTER prod ADD COLUMN cluster LowCardinality(String)"
        );
        // One server: unchanged.
        let single = schema_sql("oomlens", caps, Retention::default(), None);
        assert_eq!(single.len(), tables().len() + 2 * rollups::rollups().len());
        assert!(single.iter().all(|s| !s.contains("_local") && !s.contains("Distributed")));
    }
}
