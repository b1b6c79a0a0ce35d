//! Exactly-once results from at-least-once delivery. A test-only fault point (feature
//! `fault-injection`) crashes the collector's writer after an insert committed and before the
//! acknowledgement; the collector is then aborted (a crash: no flush, no goodbye) and a new one
//! starts on the same address. The real agent process reconnects and re-sends what was not
//! acknowledged. Every built-in query (`collector/sql`) must answer exactly as over a reference
//! run of the same simulated node without the fault (its own database, same ClickHouse), and the
//! raw `count()`s show what is stored.
//!
//! * `AfterStoreBeforeAck`: the whole flush, `agents` row included, is stored; the re-sent batches
//!   are covered by `Welcome.last_acked_seq` or acknowledged without an insert — raw rows are
//!   exactly once.
//! * `AfterSamplesBeforeAgents`: samples and events are stored but not the `agents` row (the
//!   commit record), so the re-sent batches are inserted again — raw duplicates exist on every
//!   server version (a restarted collector groups batches differently, so insert tokens differ),
//!   and the built-in queries must still answer the same.
//!
//! Before the answers are compared, the attributor (`attribution::store`) runs over both
//! databases: it must store every event once, duplicates or not, and the queries over the stored
//! attributions answer like the others.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::exact::{Expected, Stored, assert_exactly_once, replay, stored};
use common::*;
use oomlens_collector::analysis::queries::{self, ParamValue};
use oomlens_collector::analysis::store;
use oomlens_collector::config::CollectorConfig;
use oomlens_collector::fault::{self, FaultPoint};

/// Every built-in query's answer (TSV) over `database`; `gpu_memory_curve` for GPU 0 of `node`.
async fn answers(db: &clickhouse::Client, database: &str, node: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for q in queries::all() {
        let args: Vec<ParamValue> = if q.name == "gpu_memory_curve" {
            vec![CLUSTER.into(), node.into(), 0u32.into(), 0i64.into(), i64::MAX.into()]
        } else if q.name == "oom_gpu_curve" || q.name == "oom_process_curve" {
            vec![10_000i64.into(), CLUSTER.into(), node.into(), 0u32.into(), 0i64.into(), i64::MAX.into()]
        } else {
            q.example_args()
        };
        let bytes = q
            .bind(db, database, &args)
            .unwrap()
            .fetch_bytes("TSV")
            .unwrap()
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", q.name));
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        // Every event is attributed by now (`scenario`), so nothing is pending: still compared.
        // The simulated fleet sends no hook allocator summaries, so `alloc_sites` has no rows here
        // (the SQL check runs it over fixtures that have some); the examples of `fit_*` name job
        // shapes of those fixtures, not ones the simulator runs.
        if !matches!(
            q.name.as_str(),
            "attribution_pending" | "alloc_sites" | "fit_shape_events" | "fit_workload_peaks"
        ) {
            assert!(!text.trim().is_empty(), "{} answers something over {database}", q.name);
        }
        out.push((q.name.clone(), text));
    }
    out
}

fn config(
    pki: &oomlens_collector::ingest::certs::DevPki,
    url: &str,
    addr: SocketAddr,
    database: &str,
    id: &str,
) -> CollectorConfig {
    let mut cfg = collector_config(pki, url, addr);
    cfg.clickhouse.database = database.to_owned();
    cfg.collector.collector_id = id.to_owned();
    cfg
}

/// Runs one fault scenario and returns (stored with the fault, stored in the reference, expected).
async fn scenario(
    t0: Instant,
    ch: &oomlens_devkit::devch::DevClickHouse,
    point: FaultPoint,
    tag: &str,
    seed: u64,
) -> (Stored, Stored, Expected) {
    let dir = tempfile::tempdir().unwrap();
    let node = format!("node-{tag}");
    let pki = pki(dir.path(), &[node.as_str()]);
    let (duration, speed) = (120, 20.0);
    let (fault_db, ref_db) = (format!("fault_{tag}"), format!("reference_{tag}"));
    let fault_id = format!("faulty-{tag}");

    // The reference run: same node, seed and duration, no fault.
    let ref_addr = reserve_addr();
    let (reference, _r) =
        start_collector(config(&pki, &ch.url(), ref_addr, &ref_db, &format!("ref-{tag}"))).await;
    let mut ref_agent = AgentProcess::spawn(
        &agent_config(&pki, &node, ref_addr, seed, duration, speed),
        dir.path(),
        "reference",
    );

    // The faulty run: the writer crashes at `point` on its 11th flush.
    fault::arm(&fault_id, point, 10);
    let addr = reserve_addr();
    let (faulty, _f) = start_collector(config(&pki, &ch.url(), addr, &fault_db, &fault_id)).await;
    let mut agent =
        AgentProcess::spawn(&agent_config(&pki, &node, addr, seed, duration, speed), dir.path(), "agent");
    let fired = wait_until(Duration::from_secs(30), || fault::fired(&fault_id, point)).await;
    assert!(fired, "{tag}: the fault fired; agent log:\n{}", agent.log_text());
    step!(t0, "{tag}: fault fired at {point:?}");
    // The process "dies" a moment later: whatever the crashed writer held is lost.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let acked_before = faulty.sink_stats.batches_stored.load(std::sync::atomic::Ordering::Relaxed);
    faulty.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (restarted, _f2) =
        start_collector(config(&pki, &ch.url(), addr, &fault_db, &format!("{fault_id}-restarted"))).await;
    step!(t0, "{tag}: collector restarted ({acked_before} batches stored before the crash)");

    for (a, name) in [(&mut agent, "agent"), (&mut ref_agent, "reference agent")] {
        let status = a.wait(Duration::from_secs(60)).await;
        assert!(status.success(), "{tag}: {name} failed: {status}; log:\n{}", a.log_text());
    }
    let log = agent.log_text();
    assert!(log.matches("connected").count() >= 2, "{tag}: the agent reconnected; log:\n{log}");
    let duplicates = restarted.metrics.duplicate_batches.get();
    restarted.shutdown().await;
    reference.shutdown().await;
    step!(t0, "{tag}: runs done ({duplicates} re-sent batches acknowledged without insert)");

    let db = client(&ch.url());
    let with_fault = stored(&db, &fault_db, &node).await;
    let without = stored(&db, &ref_db, &node).await;
    let expected = replay(&node, seed, START_MS, duration as i64);
    eprintln!(
        "{tag}: raw count() with the fault: gpu_samples {} ({} keys), process_samples {} ({} keys), \
         oom_events {} rows ({} ids); without: {} / {} / {}; simulator: {} / {} / {}",
        with_fault.gpu_rows,
        with_fault.gpu_keys,
        with_fault.process_rows,
        with_fault.process_keys,
        with_fault.event_ids.len(),
        distinct(&with_fault.event_ids),
        without.gpu_rows,
        without.process_rows,
        without.event_ids.len(),
        expected.gpu_samples,
        expected.process_samples,
        expected.event_ids.len()
    );
    assert_exactly_once(&format!("{node} (reference)"), &without, &expected);
    // Nothing is lost: every key of the replay is stored.
    assert_eq!(
        (with_fault.gpu_keys, with_fault.process_keys, distinct(&with_fault.event_ids)),
        (expected.gpu_samples, expected.process_samples, expected.event_ids.len() as u64),
        "{tag}: every sample and event stored"
    );
    // The attributor stores each event's attribution once, re-sent or not (settled at once here:
    // the runs are over), so the stored-attribution queries have something to answer.
    for database in [&fault_db, &ref_db] {
        let opts =
            store::AttributeOptions { settle_ms: 0, ..store::AttributeOptions::new(0, i64::MAX, i64::MAX) };
        let report = store::attribute_pending(&db, database, &opts).await.unwrap();
        assert_eq!(
            report.attributed as usize,
            expected.event_ids.len(),
            "{tag}: {database}: every event attributed once"
        );
    }
    // What users query is unchanged.
    let got = answers(&db, &fault_db, &node).await;
    let want = answers(&db, &ref_db, &node).await;
    for ((name, a), (_, b)) in got.iter().zip(&want) {
        assert_eq!(a, b, "{tag}: built-in query {name} answers as without the fault");
    }
    (with_fault, without, expected)
}

fn distinct(ids: &[u64]) -> u64 {
    let mut v = ids.to_vec();
    v.dedup();
    v.len() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_between_insert_and_ack_does_not_change_any_answer() {
    let t0 = Instant::now();
    let ch = start_clickhouse();
    step!(t0, "ClickHouse up");

    // Crash after the whole flush is stored, before the ack: raw rows stay exactly once.
    // Seeds whose 120 s hold an OOM next to another process, so every query answers something.
    let (with_fault, _, expected) = scenario(t0, &ch, FaultPoint::AfterStoreBeforeAck, "ack", 70).await;
    assert_exactly_once("node-ack", &with_fault, &expected);

    // Crash after the sample/event inserts, before the agents row: raw duplicates are possible,
    // answers are not affected (checked in `scenario`).
    let (with_fault, _, expected) =
        scenario(t0, &ch, FaultPoint::AfterSamplesBeforeAgents, "samples", 72).await;
    assert!(
        with_fault.gpu_rows > expected.gpu_samples,
        "the re-sent batches of the crashed flush were inserted again ({} rows, {} expected): the \
         fault point sits where this test says it does",
        with_fault.gpu_rows,
        expected.gpu_samples
    );
    step!(t0, "done");
}
