//! The per-minute rollups (`gpu_minutes`, `process_minutes`) against a real ClickHouse: filled by
//! their materialized views on insert, equal to an independent computation from the fixture
//! files, unchanged when the same rows are inserted again (the collector is at-least-once), before
//! and after merges; backfilled when a migration creates the views over existing rows; the
//! `capacity_headroom` answer computed from them equal to one computed from the raw samples; and
//! the unit they count, the sampled second per 0.1 % bucket (10 Hz samples count once a second).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use oomlens_cli::capacity::HeadroomRow;
use oomlens_collector::analysis::queries::{self, ParamValue};
use oomlens_collector::clickhouse::Ch;
use serde::Deserialize;
use serde_json::Value;

type GpuKey = (String, String, u32, i64, u16);
/// Sub-buckets (0.1 %) per `used_pct` row of `gpu_minutes`.
const SUB: usize = 10;
type ProcessKey = (String, String, u32, i64);

/// One merged `gpu_minutes` row: per 0.1 % sub-bucket the mask of seconds with a sample, max
/// used/total, first and last time.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Deserialize)]
struct GpuMinute {
    cluster: String,
    node: String,
    gpu_index: u32,
    minute_ms: i64,
    used_pct: u16,
    seconds: Vec<u64>,
    used_max: f64,
    first_ts_ms: i64,
    last_ts_ms: i64,
}

/// One merged `process_minutes` row: the top process of a GPU minute.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Deserialize)]
struct ProcessMinute {
    cluster: String,
    node: String,
    gpu_index: u32,
    minute_ms: i64,
    workload: String,
    namespace: String,
}

/// `gpu_minutes` computed from the fixture file: per GPU, minute and ⌊100 × used/total⌋ the
/// seconds with a sample in each 0.1 % sub-bucket (a re-sent sample sets the same bit), the max
/// ratio and the time range.
fn expected_gpu_minutes() -> Vec<GpuMinute> {
    let mut by: BTreeMap<GpuKey, ([u64; SUB], BTreeSet<i64>, f64)> = BTreeMap::new();
    for (r, used, total) in fixture_gpu_usage() {
        let ts = r["ts_ms"].as_i64().unwrap();
        let ratio = used as f64 / total as f64;
        let permille = (ratio * 1000.0).floor().min(65_535.0) as u16;
        let key = (
            r["cluster"].as_str().unwrap().to_owned(),
            r["node"].as_str().unwrap().to_owned(),
            u32::try_from(r["gpu_index"].as_u64().unwrap()).unwrap(),
            ts.div_euclid(60_000) * 60_000,
            permille / 10,
        );
        let e = by.entry(key).or_insert_with(|| ([0; SUB], BTreeSet::new(), f64::MIN));
        e.0[usize::from(permille % 10)] |= 1 << (ts.rem_euclid(60_000) / 1000);
        e.1.insert(ts);
        e.2 = e.2.max(ratio);
    }
    by.into_iter()
        .map(|((cluster, node, gpu_index, minute_ms, used_pct), (masks, times, used_max))| GpuMinute {
            cluster,
            node,
            gpu_index,
            minute_ms,
            used_pct,
            seconds: masks.to_vec(),
            used_max,
            first_ts_ms: *times.first().unwrap(),
            last_ts_ms: *times.last().unwrap(),
        })
        .collect()
}

/// `process_minutes` from the fixture file: per GPU and minute the (workload, namespace label) of
/// the largest (used_bytes, workload, namespace) sample.
fn expected_process_minutes() -> Vec<ProcessMinute> {
    let mut by: BTreeMap<ProcessKey, (u64, String, String)> = BTreeMap::new();
    for line in sql_fixture("process_samples").lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let keys: Vec<&str> =
            r["label_keys"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let values: Vec<&str> =
            r["label_values"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let namespace = keys.iter().position(|k| *k == "namespace").map_or("", |i| values[i]);
        let key = (
            r["cluster"].as_str().unwrap().to_owned(),
            r["node"].as_str().unwrap().to_owned(),
            u32::try_from(r["gpu_index"].as_u64().unwrap()).unwrap(),
            r["ts_ms"].as_i64().unwrap().div_euclid(60_000) * 60_000,
        );
        let rank = (
            r["used_bytes"].as_u64().unwrap_or(0),
            r["workload"].as_str().unwrap().to_owned(),
            namespace.to_owned(),
        );
        let e = by.entry(key).or_insert_with(|| rank.clone());
        if rank > *e {
            *e = rank;
        }
    }
    by.into_iter()
        .map(|((cluster, node, gpu_index, minute_ms), (_, workload, namespace))| ProcessMinute {
            cluster,
            node,
            gpu_index,
            minute_ms,
            workload,
            namespace,
        })
        .collect()
}

async fn gpu_minutes(ch: &Ch) -> Vec<GpuMinute> {
    ch.client()
        .query(
            "SELECT cluster, node, gpu_index, minute_ms, used_pct, \
             groupBitOrForEachMerge(gpu_minutes.seconds) AS seconds, maxMerge(used_max) AS used_max, \
             minMerge(first_ts_ms) AS first_ts_ms, maxMerge(last_ts_ms) AS last_ts_ms \
             FROM oomlens.gpu_minutes GROUP BY cluster, node, gpu_index, minute_ms, used_pct \
             ORDER BY cluster, node, gpu_index, minute_ms, used_pct",
        )
        .fetch_all()
        .await
        .unwrap()
}

async fn process_minutes(ch: &Ch) -> Vec<ProcessMinute> {
    ch.client()
        .query(
            "SELECT cluster, node, gpu_index, minute_ms, argMaxMerge(top_workload) AS workload, \
             argMaxMerge(top_namespace) AS namespace FROM oomlens.process_minutes \
             GROUP BY cluster, node, gpu_index, minute_ms ORDER BY cluster, node, gpu_index, minute_ms",
        )
        .fetch_all()
        .await
        .unwrap()
}

async fn headroom(ch: &Ch, by: &str) -> Vec<HeadroomRow> {
    let (since, until) = (ParamValue::Int(0), ParamValue::Int(i64::MAX));
    let by = ParamValue::String(by.to_owned());
    let args = [by.clone(), since.clone(), until.clone(), since, until, by];
    queries::builtin("capacity_headroom")
        .unwrap()
        .bind(ch.client(), "oomlens", &args)
        .unwrap()
        .fetch_all()
        .await
        .unwrap()
}

/// `capacity_headroom` by node computed straight from the raw `gpu_samples` (no rollup): GPUs,
/// sampled (second, 0.1 % bucket) pairs, quantiles to the bucket, max, pairs ≥ 90 %, first and
/// last time.
async fn raw_headroom_by_node(ch: &Ch) -> Vec<HeadroomRow> {
    ch.client()
        .query(
            "SELECT toString(node) AS group_key, uniqExact(cluster, node, gpu_index) AS gpus, count() AS samples, \
             arrayMap(b -> b / 1000, quantilesExactWeighted(0.5, 0.95, 0.99)(permille, toUInt64(1))) AS used_quantiles, \
             max(second_max) AS used_max, countIf(permille >= 900) AS samples_above_90, \
             min(second_first) AS first_ts_ms, max(second_last) AS last_ts_ms \
             FROM (SELECT cluster, node, gpu_index, intDiv(ts_ms, 1000) AS second, \
                     toUInt16(floor(ratio * 1000)) AS permille, max(ratio) AS second_max, \
                     min(ts_ms) AS second_first, max(ts_ms) AS second_last \
                   FROM (SELECT cluster, node, gpu_index, ts_ms, \
                           toFloat64(assumeNotNull(memory_used_bytes)) / toFloat64(assumeNotNull(memory_total_bytes)) AS ratio \
                         FROM oomlens.gpu_samples WHERE memory_total_bytes > 0 AND isNotNull(memory_used_bytes)) \
                   GROUP BY cluster, node, gpu_index, second, permille) \
             GROUP BY group_key ORDER BY group_key",
        )
        .fetch_all()
        .await
        .unwrap()
}

async fn migrated(server: &oomlens_devkit::devch::DevClickHouse) -> Ch {
    let ch = Ch::connect(&ch_config_without_ttl(server)).await.unwrap();
    let report = ch.migrate().await.unwrap();
    assert!(report.rollups_created.contains(&"gpu_minutes_mv".to_owned()), "{report}");
    ch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollups_equal_the_raw_samples_and_ignore_resent_rows() {
    let server = start_clickhouse();
    let ch = migrated(&server).await;
    let again = ch.migrate().await.unwrap();
    assert!(again.rollups_created.is_empty() && again.backfilled.is_empty(), "idempotent: {again}");

    insert_sql_fixtures(&ch, &["gpu_samples", "process_samples", "agents"], 1).await;
    let want_gpu = expected_gpu_minutes();
    let want_proc = expected_process_minutes();
    assert!(want_gpu.len() > 100 && want_proc.len() > 30, "the fixtures exercise the rollups");
    assert_eq!(gpu_minutes(&ch).await, want_gpu);
    assert_eq!(process_minutes(&ch).await, want_proc);
    let by_node = headroom(&ch, "node").await;
    assert_eq!(by_node, raw_headroom_by_node(&ch).await, "rollup answer = raw-sample answer");
    let by_workload = headroom(&ch, "workload").await;

    // The same batch again (a re-sent batch after a lost acknowledgement): nothing changes,
    // neither before nor after the background merges.
    insert_sql_fixtures(&ch, &["gpu_samples", "process_samples"], 1).await;
    let raw_rows: u64 = count(ch.client(), "SELECT count() FROM oomlens.gpu_samples").await;
    let fixture_rows = sql_fixture("gpu_samples").lines().count() as u64;
    assert_eq!(raw_rows, 2 * fixture_rows, "18.16 keeps the duplicate raw rows");
    assert_eq!(gpu_minutes(&ch).await, want_gpu);
    assert_eq!(process_minutes(&ch).await, want_proc);
    assert_eq!(headroom(&ch, "node").await, by_node);
    assert_eq!(headroom(&ch, "workload").await, by_workload);
    for t in ["gpu_minutes", "process_minutes"] {
        ch.execute(&format!("OPTIMIZE TABLE oomlens.{t} FINAL")).await.unwrap();
    }
    assert_eq!(gpu_minutes(&ch).await, want_gpu);
    assert_eq!(process_minutes(&ch).await, want_proc);
    assert_eq!(headroom(&ch, "node").await, by_node);
    assert_eq!(headroom(&ch, "workload").await, by_workload);
    let stored: u64 = count(ch.client(), "SELECT count() FROM oomlens.gpu_minutes").await;
    assert_eq!(stored, want_gpu.len() as u64, "merged: one row per key");
    drop(ch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_backfills_rows_stored_before_the_views() {
    let server = start_clickhouse();
    let ch = migrated(&server).await;
    // A database from before the rollups: no views, no rollup tables, samples stored.
    for t in ["gpu_minutes_mv", "process_minutes_mv", "gpu_minutes", "process_minutes"] {
        ch.execute(&format!("DROP TABLE oomlens.{t}")).await.unwrap();
    }
    insert_sql_fixtures(&ch, &["gpu_samples", "process_samples"], 1).await;

    let upgrade = ch.migrate().await.unwrap();
    assert_eq!(
        upgrade.rollups_created,
        ["gpu_minutes", "gpu_minutes_mv", "process_minutes", "process_minutes_mv"],
        "{upgrade}"
    );
    assert_eq!(upgrade.backfilled.len(), 2, "{upgrade}");
    assert!(upgrade.backfilled[0].starts_with("gpu_minutes: "), "{upgrade}");
    let want_gpu = expected_gpu_minutes();
    let want_proc = expected_process_minutes();
    assert_eq!(gpu_minutes(&ch).await, want_gpu);
    assert_eq!(process_minutes(&ch).await, want_proc);

    // Rows arriving after the upgrade go through the view; a repeated backfill (after an
    // interrupted upgrade) overlaps both and still counts every sample once.
    insert_sql_fixtures(&ch, &["gpu_samples", "process_samples"], 1).await;
    let done = ch.backfill_rollups().await.unwrap();
    assert_eq!(done.len(), 2, "{done:?}");
    assert_eq!(gpu_minutes(&ch).await, want_gpu);
    assert_eq!(process_minutes(&ch).await, want_proc);
    let next = ch.migrate().await.unwrap();
    assert!(
        next.rollups_created.is_empty() && next.backfilled.is_empty() && next.rollups_rebuilt.is_empty(),
        "{next}"
    );

    // A rollup table of another version (other columns) is derived data: the migration drops it
    // with its view and rebuilds both from the samples.
    ch.execute("DROP TABLE oomlens.gpu_minutes_mv").await.unwrap();
    ch.execute("DROP TABLE oomlens.gpu_minutes").await.unwrap();
    ch.execute(
        "CREATE TABLE oomlens.gpu_minutes (cluster String, node String, gpu_index UInt32, minute_ms Int64, \
         samples AggregateFunction(uniqExact, Int64)) ENGINE = AggregatingMergeTree() \
         ORDER BY (cluster, node, gpu_index, minute_ms)",
    )
    .await
    .unwrap();
    let rebuilt = ch.migrate().await.unwrap();
    assert_eq!(rebuilt.rollups_rebuilt, ["gpu_minutes"], "{rebuilt}");
    assert_eq!(rebuilt.rollups_created, ["gpu_minutes", "gpu_minutes_mv"], "{rebuilt}");
    assert_eq!(gpu_minutes(&ch).await, want_gpu);
    drop(ch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unit_is_the_sampled_second_per_bucket() {
    let server = start_clickhouse();
    let ch = migrated(&server).await;
    // One GPU at 10 Hz (the flight recorder on a hot GPU): second 0 has three samples in the 91.0 %
    // bucket and one in the 92.0 % bucket, second 1 one sample at 50.0 %; then the same rows again.
    let total: u64 = 1_000_000;
    let rows = [(0, 910_000), (100, 910_400), (200, 910_999), (300, 920_000), (1_000, 500_000)];
    let values: Vec<String> = rows
        .iter()
        .map(|(ms, used)| format!("('c', 'hot', 0, {}, 'a', {used}, {total})", 1_767_571_200_000_i64 + ms))
        .collect();
    let sql = format!(
        "INSERT INTO oomlens.gpu_samples (cluster, node, gpu_index, ts_ms, agent_id, memory_used_bytes, \
         memory_total_bytes) VALUES {}",
        values.join(", ")
    );
    ch.execute(&sql).await.unwrap();
    ch.execute(&sql).await.unwrap();
    let rows = headroom(&ch, "node").await;
    let [row] = rows.as_slice() else { panic!("{rows:?}") };
    assert_eq!(row.samples, 3, "(second 0, 91.0 %), (second 0, 92.0 %), (second 1, 50.0 %)");
    assert_eq!(row.samples_above_90, 2);
    assert_eq!(row.used_quantiles, [0.91, 0.92, 0.92]);
    assert_eq!(row.used_max, 0.92);
    assert_eq!((row.first_ts_ms, row.last_ts_ms), (1_767_571_200_000, 1_767_571_201_000));
    drop(ch);
}
