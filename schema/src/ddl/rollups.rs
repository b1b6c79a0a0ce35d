//! Per-minute rollups of the sample tables, filled by materialized views on insert.
//!
//! The capacity report (`collector/sql/capacity_headroom*.sql`) reads these instead of the raw
//! samples: at fleet scale (116 M samples over 7 days) the raw scan takes 20–36 s on the bench box,
//! the rollups about a second (`benches/README.md`).
//!
//! * `gpu_minutes` — per (cluster, node, gpu_index, minute, `used_pct` = ⌊100 × used / total⌋):
//!   `seconds`, a `groupBitOrForEach` state of [`SUB_BUCKETS`] 64-bit masks — bit *s* of mask *j*
//!   is set when the GPU had a sample in second *s* of the minute with ⌊1000 × used / total⌋ =
//!   10 × `used_pct` + *j* (so the quantiles keep 0.1 % resolution with a tenth of the rows); the
//!   max of used/total; the first and last `ts_ms`.
//! * `process_minutes` — per (cluster, node, gpu_index, minute): the process holding the most
//!   memory on that GPU in that minute, as `argMaxState`s of its workload and `namespace` label by
//!   (`used_bytes`, workload, namespace) — ties go to the greatest (workload, namespace).
//!
//! Both are `AggregatingMergeTree` tables whose states are **idempotent under duplicates**: the
//! collector is at-least-once, 18.16 has no insert deduplication for plain MergeTree tables, and a
//! re-sent batch inserts its rows again — through the view into the rollup too. OR-ing the same
//! bits again, a max, a min and an argMax do not change when the same rows arrive twice, so the rollups stay
//! exact (readers merge the states with `-Merge` and `GROUP BY`, correct before merges happen).
//! For the same reason a backfill that overlaps rows the view already saw is harmless. The unit
//! counted is the *sampled second* (per 0.1 % bucket): one per sample at the agents' 1 Hz, and one
//! per second — not ten — while the flight recorder streams a hot GPU at 10 Hz, so shares such as
//! "time at or above 90 %" are shares of time. A mask state is 8 bytes where a set of sample
//! times would hold every sample again (measured: 15 MiB instead of 204 MiB for 29 M samples).
//!
//! Both carry `gpu_key = cityHash64(cluster, node, gpu_index)` (a function of the key, so it
//! does not change the grouping): the readers group and join on it, numbers instead of strings —
//! several times faster at fleet scale. Two GPUs of a fleet of 100 000 share a 64-bit key with a
//! probability of about 3·10⁻¹⁰.
//!
//! The views read the table the collector inserts into: on one server `gpu_samples`, in cluster
//! mode `gpu_samples_local` on every shard (a view fires on the server where the block is
//! written), writing `gpu_minutes_local` there; a `Distributed` `gpu_minutes` serves the queries.
//! Partitions are UTC days of the minute (the same `YYYYMMDD` ids as the sample tables) with the
//! samples' retention. Timestamps before 1970 are not supported by the seconds masks.

use std::fmt::Write as _;

use super::{ClusterDdl, LOCAL_SUFFIX, Retention, SHARDING_KEY, ServerCaps};

/// Resolution of the quantiles: used/total is bucketed as ⌊ratio × 1000⌋ (0.1 %).
pub const BUCKETS_PER_UNIT: u32 = 1000;

/// Width of a rollup row in milliseconds (one minute, aligned to the epoch).
pub const MINUTE_MS: i64 = 60_000;

/// One column of a rollup table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollupColumn {
    /// Column name (e.g. `used_pct`).
    pub name: &'static str,
    /// Type on every server.
    pub ty: &'static str,
    /// Stored as `LowCardinality(String)` where the server has it (19.9+).
    pub low_cardinality: bool,
}

const fn col(name: &'static str, ty: &'static str) -> RollupColumn {
    RollupColumn { name, ty, low_cardinality: false }
}

const fn lc(name: &'static str) -> RollupColumn {
    RollupColumn { name, ty: "String", low_cardinality: true }
}

/// A rollup table and the materialized view that fills it from its source table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupSpec {
    /// Table name (`gpu_minutes`).
    pub name: &'static str,
    /// The sample table the view reads (`gpu_samples`).
    pub source: &'static str,
    /// Columns: the key columns, then the aggregate states.
    pub columns: Vec<RollupColumn>,
    /// `ORDER BY` key (the aggregation key).
    pub order_by: &'static str,
    /// The view's `SELECT` list (grouped by `order_by`).
    select: String,
    /// Rows of the source that enter the rollup.
    filter: &'static str,
}

/// used / total of a GPU sample, as the view computes it.
const GPU_RATIO: &str =
    "toFloat64(assumeNotNull(memory_used_bytes)) / toFloat64(assumeNotNull(memory_total_bytes))";

/// Sub-buckets of 0.1 % per `used_pct` row: one seconds mask each.
pub const SUB_BUCKETS: u32 = 10;

/// The view's `SELECT` list of `gpu_minutes`: per row of `gpu_samples` the minute, the 1 % bucket
/// `used_pct` and, in `seconds`, a one-bit mask (bit = second of the minute) in the slot of its
/// 0.1 % sub-bucket, OR-ed together per key.
fn gpu_select() -> String {
    let permille = format!("toUInt16(least(floor({GPU_RATIO} * 1000), 65535))");
    let bit = "bitShiftLeft(toUInt64(1), toUInt8(intDiv(ts_ms - intDiv(ts_ms, 60000) * 60000, 1000)))";
    let slots: Vec<String> = (0..SUB_BUCKETS)
        .map(|j| format!("if({permille} % {SUB_BUCKETS} = {j}, {bit}, toUInt64(0))"))
        .collect();
    format!(
        "cluster, node, gpu_index, cityHash64(cluster, node, gpu_index) AS gpu_key, \
         intDiv(ts_ms, 60000) * 60000 AS minute_ms, \
         intDiv({permille}, {SUB_BUCKETS}) AS used_pct, \
         groupBitOrForEachState([{}]) AS seconds, \
         maxState({GPU_RATIO}) AS used_max, \
         minState(ts_ms) AS first_ts_ms, \
         maxState(ts_ms) AS last_ts_ms",
        slots.join(", ")
    )
}

/// The `namespace` label of a process sample ('' without one).
const NAMESPACE: &str = "label_values[indexOf(label_keys, 'namespace')]";

/// What ranks the processes of a GPU minute: the largest `used_bytes`, ties to the greatest
/// (workload, namespace) — so the answer never depends on the order rows arrived in.
const TOP_BY: &str =
    "(ifNull(used_bytes, 0), toString(workload), label_values[indexOf(label_keys, 'namespace')])";

/// The state type of `process_minutes.top_workload` / `top_namespace`.
const TOP_STATE: &str = "AggregateFunction(argMax, String, Tuple(UInt64, String, String))";

/// The rollups, in creation order.
pub fn rollups() -> Vec<RollupSpec> {
    vec![
        RollupSpec {
            name: "gpu_minutes",
            source: "gpu_samples",
            columns: vec![
                lc("cluster"),
                lc("node"),
                col("gpu_index", "UInt32"),
                col("gpu_key", "UInt64"),
                col("minute_ms", "Int64"),
                col("used_pct", "UInt16"),
                col("seconds", "AggregateFunction(groupBitOrForEach, Array(UInt64))"),
                col("used_max", "AggregateFunction(max, Float64)"),
                col("first_ts_ms", "AggregateFunction(min, Int64)"),
                col("last_ts_ms", "AggregateFunction(max, Int64)"),
            ],
            order_by: "cluster, node, gpu_index, gpu_key, minute_ms, used_pct",
            select: gpu_select(),
            filter: "memory_total_bytes > 0 AND isNotNull(memory_used_bytes)",
        },
        RollupSpec {
            name: "process_minutes",
            source: "process_samples",
            columns: vec![
                lc("cluster"),
                lc("node"),
                col("gpu_index", "UInt32"),
                col("gpu_key", "UInt64"),
                col("minute_ms", "Int64"),
                col("top_workload", TOP_STATE),
                col("top_namespace", TOP_STATE),
            ],
            order_by: "cluster, node, gpu_index, gpu_key, minute_ms",
            select: format!(
                "cluster, node, gpu_index, cityHash64(cluster, node, gpu_index) AS gpu_key, \
                 intDiv(ts_ms, 60000) * 60000 AS minute_ms, \
                 argMaxState(toString(workload), {TOP_BY}) AS top_workload, \
                 argMaxState({NAMESPACE}, {TOP_BY}) AS top_namespace"
            ),
            filter: "1",
        },
    ]
}

/// The `DateTime` of a rollup row's minute, for partitions and TTL.
const MINUTE_SECONDS_EXPR: &str = "toDateTime(intDiv(minute_ms, 1000), 'UTC')";

impl RollupSpec {
    /// Retention in days: the samples'.
    pub fn retention_days(&self, retention: Retention) -> u32 {
        retention.samples_days
    }

    /// The view's name, `<table>_mv`.
    pub fn view_name(&self) -> String {
        format!("{}_mv", self.name)
    }

    /// The per-shard storage table's name, `<table>_local`.
    pub fn local_name(&self) -> String {
        format!("{}{LOCAL_SUFFIX}", self.name)
    }

    fn column_type(c: &RollupColumn, caps: ServerCaps) -> String {
        if c.low_cardinality && caps.low_cardinality {
            format!("LowCardinality({})", c.ty)
        } else {
            c.ty.to_owned()
        }
    }

    fn column_definitions(&self, caps: ServerCaps) -> Vec<String> {
        self.columns.iter().map(|c| format!("{} {}", c.name, Self::column_type(c, caps))).collect()
    }

    fn render_create(
        &self,
        table: &str,
        on_cluster: Option<&str>,
        engine: &str,
        caps: ServerCaps,
        retention: Retention,
    ) -> String {
        super::create_table_sql(
            table,
            on_cluster,
            &self.column_definitions(caps),
            engine,
            &format!("toYYYYMMDD({MINUTE_SECONDS_EXPR})"),
            self.order_by,
            MINUTE_SECONDS_EXPR,
            caps.ttl.then(|| self.retention_days(retention)),
        )
    }

    /// `CREATE TABLE IF NOT EXISTS <db>.<table>` (one server).
    pub fn create_sql(&self, database: &str, caps: ServerCaps, retention: Retention) -> String {
        self.render_create(
            &format!("{database}.{}", self.name),
            None,
            "AggregatingMergeTree()",
            caps,
            retention,
        )
    }

    /// `CREATE TABLE IF NOT EXISTS <db>.<table>_local` — the storage table on each shard
    /// (`ReplicatedAggregatingMergeTree` with `cluster.replicated`).
    pub fn create_local_sql(
        &self,
        database: &str,
        caps: ServerCaps,
        retention: Retention,
        cluster: &ClusterDdl,
    ) -> String {
        let engine = if cluster.replicated {
            format!(
                "ReplicatedAggregatingMergeTree('/clickhouse/tables/{{shard}}/{database}/{}', '{{replica}}')",
                self.name
            )
        } else {
            "AggregatingMergeTree()".to_owned()
        };
        self.render_create(
            &format!("{database}.{}", self.local_name()),
            cluster.on_cluster.then_some(cluster.name.as_str()),
            &engine,
            caps,
            retention,
        )
    }

    /// `CREATE TABLE IF NOT EXISTS <db>.<table>` as `Distributed` over `<table>_local`, with the
    /// same sharding key as the sample tables (a node's rows stay on one shard).
    pub fn create_distributed_sql(&self, database: &str, caps: ServerCaps, cluster: &ClusterDdl) -> String {
        let mut sql = super::create_table_head(
            &format!("{database}.{}", self.name),
            cluster.on_cluster(),
            &self.column_definitions(caps),
        );
        let _ = write!(
            sql,
            "\nENGINE = Distributed({}, {database}, {}, {SHARDING_KEY})",
            cluster.name,
            self.local_name()
        );
        sql
    }

    /// The view's query over `<db>.<source><suffix>` restricted by `extra` (a boolean SQL
    /// expression, `1` for everything).
    pub fn select_sql(&self, database: &str, suffix: &str, extra: &str) -> String {
        format!(
            "SELECT {}\nFROM {database}.{}{suffix}\nWHERE {} AND {extra}\nGROUP BY {}",
            self.select, self.source, self.filter, self.order_by
        )
    }

    /// `CREATE MATERIALIZED VIEW IF NOT EXISTS <db>.<table>_mv [ON CLUSTER c] TO
    /// <db>.<table><suffix> AS SELECT … FROM <db>.<source><suffix>` — `suffix` is `""` on one
    /// server and [`LOCAL_SUFFIX`] on the shards.
    pub fn create_view_sql(&self, database: &str, suffix: &str, on_cluster: Option<&str>) -> String {
        let on = on_cluster.map(|c| format!(" ON CLUSTER {c}")).unwrap_or_default();
        format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.{}{on} TO {database}.{}{suffix} AS\n{}",
            self.view_name(),
            self.name,
            self.select_sql(database, suffix, "1")
        )
    }

    /// `INSERT INTO <db>.<table><suffix> SELECT …` over the source rows with `ts_ms` in
    /// `[since_ms, until_ms)`: the backfill of rows stored before the view existed. Safe to
    /// overlap with rows the view already rolled up (the states are idempotent).
    pub fn backfill_sql(&self, database: &str, suffix: &str, since_ms: i64, until_ms: i64) -> String {
        format!(
            "INSERT INTO {database}.{}{suffix} {}",
            self.name,
            self.select_sql(database, suffix, &format!("ts_ms >= {since_ms} AND ts_ms < {until_ms}"))
        )
    }
}

/// Every rollup statement for one server (`cluster` None) or a cluster: per rollup the table(s)
/// and then the view (which needs its source and target to exist).
pub fn rollups_sql(
    database: &str,
    caps: ServerCaps,
    retention: Retention,
    cluster: Option<&ClusterDdl>,
) -> Vec<String> {
    rollups()
        .iter()
        .flat_map(|r| match cluster {
            None => vec![r.create_sql(database, caps, retention), r.create_view_sql(database, "", None)],
            Some(c) => vec![
                r.create_local_sql(database, caps, retention, c),
                r.create_distributed_sql(database, caps, c),
                r.create_view_sql(database, LOCAL_SUFFIX, c.on_cluster.then_some(c.name.as_str())),
            ],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddl::ServerVersion;

    fn caps(v: &str) -> ServerCaps {
        v.parse::<ServerVersion>().unwrap().caps()
    }

    #[test]
    fn one_server_tables_then_views() {
        let stmts = rollups_sql("db1", caps("18.16.1"), Retention::default(), None);
        assert_eq!(stmts.len(), 4);
        assert!(stmts[0].starts_with("CREATE TABLE IF NOT EXISTS db1.gpu_minutes ("), "{}", stmts[0]);
        assert!(stmts[0].contains("ENGINE = AggregatingMergeTree()"), "{}", stmts[0]);
        assert!(!stmts[0].contains("LowCardinality") && !stmts[0].contains("TTL"), "{}", stmts[0]);
        assert!(
            stmts[1].starts_with(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS db1.gpu_minutes_mv TO db1.gpu_minutes AS\nSELECT"
            ),
            "{}",
            stmts[1]
        );
        assert!(stmts[1].contains("FROM db1.gpu_samples\n"), "{}", stmts[1]);
        assert!(stmts[3].contains("FROM db1.process_samples\n"), "{}", stmts[3]);
        for s in &stmts {
            assert!(!s.contains(';'), "one statement each: {s}");
        }
    }

    #[test]
    fn modern_rollups_have_low_cardinality_and_ttl() {
        let sql = rollups()[1].create_sql("oomlens", caps("26.9.1"), Retention::default());
        assert!(sql.contains("node LowCardinality(String)"), "{sql}");
        assert!(
            sql.contains("top_workload AggregateFunction(argMax, String, Tuple(UInt64, String, String))")
        );
        assert!(sql.contains("TTL toDateTime(intDiv(minute_ms, 1000), 'UTC') + INTERVAL 30 DAY"), "{sql}");
        let keep = Retention { samples_days: 0, events_days: 0 };
        assert!(!rollups()[1].create_sql("oomlens", caps("26.9.1"), keep).contains("TTL"));
    }

    #[test]
    fn cluster_views_read_and_write_the_local_tables() {
        let c = ClusterDdl { name: "prod".into(), on_cluster: true, replicated: true };
        let stmts = rollups_sql("oomlens", caps("26.9.1"), Retention::default(), Some(&c));
        assert_eq!(stmts.len(), 6);
        assert!(
            stmts[0].starts_with("CREATE TABLE IF NOT EXISTS oomlens.gpu_minutes_local ON CLUSTER prod (")
        );
        assert!(stmts[0].contains(
            "ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/oomlens/gpu_minutes', '{replica}')"
        ));
        assert!(
            stmts[1].ends_with(
                "ENGINE = Distributed(prod, oomlens, gpu_minutes_local, cityHash64(cluster, node))"
            )
        );
        assert!(stmts[2].starts_with(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS oomlens.gpu_minutes_mv ON CLUSTER prod TO oomlens.gpu_minutes_local AS"
        ));
        assert!(stmts[2].contains("FROM oomlens.gpu_samples_local\n"), "{}", stmts[2]);
    }

    #[test]
    fn backfill_selects_a_time_range_of_the_source() {
        let sql = rollups()[0].backfill_sql("oomlens", "_local", 10, 20);
        assert!(sql.starts_with("INSERT INTO oomlens.gpu_minutes_local SELECT "), "{sql}");
        assert!(
            sql.contains(
                "WHERE memory_total_bytes > 0 AND isNotNull(memory_used_bytes) AND ts_ms >= 10 AND ts_ms < 20"
            ),
            "{sql}"
        );
        assert!(rollups()[0].select.contains(GPU_RATIO));
        assert!(rollups()[0].select.contains("groupBitOrForEachState([if("), "{sql}");
    }
}
