#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The ClickHouse layer against a real throw-away server ([`DevClickHouse`]): migrations, the schema
//! check, the batched sink (concurrency, exact row counts, NULLs, last acked seq, an outage with
//! kill + restart), unreachable servers and retention without TTL. No fakes of ClickHouse.

use std::time::Duration;

use oomlens_collector::clickhouse::{Ch, ChConfig, ChError, Sink};
use oomlens_collector::identity::AgentIdentity;
use oomlens_devkit::devch::DevClickHouse;
use oomlens_schema::ddl::{Retention, SchemaMismatch};
use oomlens_schema::rows::{AgentRow, GpuSampleRow, OomEventRow, ProcessSampleRow};
use oomlens_schema::{
    Batch, EventSource, GpuInfo, GpuSample, JobShape, Label, OomEvent, OomKind, Phase, ProcessSample,
};

fn server() -> DevClickHouse {
    DevClickHouse::start().expect("start a throw-away ClickHouse (apt-get install -y clickhouse-server)")
}

fn config(ch: &DevClickHouse) -> ChConfig {
    ChConfig { insert_max_delay_ms: 50, request_timeout_ms: 5_000, ..ChConfig::new(ch.url()) }
}

async fn migrated(cfg: &ChConfig) -> Ch {
    let ch = Ch::connect(cfg).await.expect("connect");
    ch.migrate().await.expect("migrate");
    ch
}

fn identity(node: &str) -> AgentIdentity {
    AgentIdentity {
        cluster: "prod".into(),
        node: node.into(),
        agent_id: format!("agent-{node}"),
        boot_id: 42,
        agent_version: "0.1.0".into(),
        gpus: vec![GpuInfo {
            index: 0,
            uuid: format!("GPU-{node}"),
            name: "NVIDIA H200".into(),
            memory_total_bytes: 141 << 30,
            mig: false,
        }],
    }
}

const NOW: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

/// Batch `seq`: 3 GPU samples, 2 process samples, 1 event; values derived from `seq`.
fn batch(seq: u64, ts_ms: i64) -> Batch {
    let t = ts_ms + seq as i64 * 1_000;
    Batch {
        seq,
        gpu_samples: (0..3)
            .map(|i| GpuSample {
                ts_ms: t + i,
                gpu_index: i as u32,
                memory_used_bytes: if i == 0 { Some(0) } else { Some(seq * 1_000 + i as u64) },
                memory_free_bytes: None,
                memory_total_bytes: Some(141 << 30),
                memory_reserved_bytes: None,
                util_gpu_pct: if i == 1 { None } else { Some(0) },
                util_mem_pct: Some(100),
                power_mw: Some(700_000),
                temperature_c: Some(-3),
                sm_clock_mhz: None,
                mem_clock_mhz: Some(2_619),
            })
            .collect(),
        process_samples: (0..2)
            .map(|i| ProcessSample {
                ts_ms: t + i,
                gpu_index: 0,
                pid: 1_000 + i as u32,
                name: "python3".into(),
                used_bytes: if i == 0 { None } else { Some(0) },
                labels: vec![
                    Label { key: "k8s.namespace".into(), value: "ml".into() },
                    Label { key: "k8s.pod".into(), value: format!("trainer-{seq}") },
                ],
            })
            .collect(),
        events: vec![OomEvent {
            event_id: seq * 7_919,
            ts_ms: t,
            kind: OomKind::CudaOom,
            source: EventSource::Log,
            framework: "pytorch".into(),
            gpu_index: Some(0),
            pid: Some(1_000),
            requested_bytes: Some(2 << 30),
            free_bytes: Some(0),
            phase: Phase::Backward,
            job: JobShape { batch: Some(64), activation_checkpointing: Some(false), ..JobShape::default() },
            raw_message:
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nline 2 'quoted' \\"
                    .into(),
            ..OomEvent::default()
        }],
    }
}

/// Drops the last client, lets its connection tasks close, then stops the server. (18.16 waits for
/// open keep-alive connections when it shuts down; a client whose runtime thread is blocked in
/// `DevClickHouse::drop` would hold the server up until the SIGKILL after 10 s.)
async fn shut_down(dev: DevClickHouse, ch: Ch) {
    drop(ch);
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(dev);
}

async fn count(ch: &Ch, table: &str, node: &str) -> u64 {
    ch.client()
        .query(&format!("SELECT count() FROM {} WHERE node = ?", ch.table(table)))
        .bind(node)
        .fetch_one::<u64>()
        .await
        .unwrap()
}

#[tokio::test]
async fn migrate_is_idempotent_and_adds_missing_columns() {
    let dev = server();
    let cfg = config(&dev);
    let ch = Ch::connect(&cfg).await.unwrap();
    assert!(ch.version().major >= 18, "{:?}", ch.version());
    let first = ch.migrate().await.unwrap();
    assert_eq!(first.created, ["gpu_samples", "process_samples", "oom_events", "agents", "oom_attributions"]);
    let second = ch.migrate().await.unwrap();
    assert!(second.created.is_empty() && second.added_columns.is_empty(), "{second}");
    assert_eq!(second.existing.len(), 5);
    ch.check_schema().await.unwrap();

    // A table from an older collector lacks a column: migrate adds it.
    ch.execute(&format!("ALTER TABLE {} DROP COLUMN gpu_mig", ch.table("agents"))).await.unwrap();
    assert!(matches!(ch.check_schema().await, Err(ChError::SchemaMismatch(_))));
    let third = ch.migrate().await.unwrap();
    assert_eq!(third.added_columns, ["agents.gpu_mig"]);
    ch.check_schema().await.unwrap();
    shut_down(dev, ch).await;
}

#[tokio::test]
async fn wrong_table_is_a_schema_mismatch_naming_the_column() {
    let dev = server();
    let cfg = ChConfig { database: "wrongdb".into(), ..config(&dev) };
    let ch = Ch::connect(&cfg).await.unwrap();
    ch.execute("CREATE DATABASE wrongdb").await.unwrap();
    ch.execute(
        "CREATE TABLE wrongdb.gpu_samples (cluster String, node String, gpu_index UInt32, ts_ms Int32) \
         ENGINE = MergeTree() PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ms, 1000), 'UTC')) \
         ORDER BY (cluster, node, gpu_index, ts_ms)",
    )
    .await
    .unwrap();
    let Err(ChError::SchemaMismatch(problems)) = ch.migrate().await else { panic!("expected a mismatch") };
    assert_eq!(
        problems,
        [SchemaMismatch::WrongType {
            table: "gpu_samples".into(),
            column: "ts_ms".into(),
            expected: "Int64".into(),
            actual: "Int32".into(),
        }]
    );
    let text = ChError::SchemaMismatch(problems).to_string();
    assert!(text.contains("gpu_samples") && text.contains("ts_ms") && text.contains("Int32"), "{text}");
    shut_down(dev, ch).await;
}

#[tokio::test]
async fn concurrent_stores_land_exactly_with_fields_intact() {
    let dev = server();
    let cfg = config(&dev);
    let ch = migrated(&cfg).await;
    let (sink, task) = Sink::spawn(ch.clone(), &cfg, "collector-1".into());
    let (a, b) = (identity("node-a"), identity("node-b"));
    assert_eq!(sink.last_acked_seq(&a).await.unwrap(), 0);

    let mut set = tokio::task::JoinSet::new();
    for seq in 1..=6 {
        for id in [&a, &b] {
            let (sink, id) = (sink.clone(), id.clone());
            set.spawn(async move { sink.store(&id, batch(seq, NOW)).await });
        }
    }
    while let Some(res) = set.join_next().await {
        res.unwrap().unwrap();
    }

    for node in ["node-a", "node-b"] {
        assert_eq!(count(&ch, "gpu_samples", node).await, 18);
        assert_eq!(count(&ch, "process_samples", node).await, 12);
        assert_eq!(count(&ch, "oom_events", node).await, 6);
    }
    assert_eq!(sink.last_acked_seq(&a).await.unwrap(), 6);
    assert_eq!(sink.last_acked_seq(&b).await.unwrap(), 6);
    assert_eq!(sink.last_acked_seq(&AgentIdentity { boot_id: 43, ..a.clone() }).await.unwrap(), 0);

    // Fields round-trip, NULL stays NULL and 0 stays 0.
    let gpu: Vec<GpuSampleRow> = ch
        .client()
        .query(&format!(
            "SELECT ?fields FROM {} WHERE node = ? ORDER BY ts_ms, gpu_index",
            ch.table("gpu_samples")
        ))
        .bind("node-a")
        .fetch_all()
        .await
        .unwrap();
    let expected: Vec<GpuSampleRow> = (1..=6)
        .flat_map(|seq| {
            oomlens_collector::clickhouse::convert::batch_rows(&a, &batch(seq, NOW), 0).gpu_samples
        })
        .collect();
    assert_eq!(gpu, expected);
    assert_eq!(gpu[0].memory_used_bytes, Some(0));
    assert_eq!(gpu[0].memory_free_bytes, None);
    assert_eq!(gpu[1].util_gpu_pct, None);
    assert_eq!(gpu[0].util_gpu_pct, Some(0));

    let procs: Vec<ProcessSampleRow> = ch
        .client()
        .query(&format!(
            "SELECT ?fields FROM {} WHERE node = ? ORDER BY ts_ms, pid",
            ch.table("process_samples")
        ))
        .bind("node-b")
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(procs.len(), 12);
    let expected: Vec<ProcessSampleRow> = (1..=6)
        .flat_map(|seq| {
            oomlens_collector::clickhouse::convert::batch_rows(&b, &batch(seq, NOW), 0).process_samples
        })
        .collect();
    assert_eq!(procs, expected, "the RowBinary written from the batch reads back as the owned conversion");
    assert_eq!((procs[0].used_bytes, procs[1].used_bytes), (None, Some(0)));
    assert_eq!(procs[0].workload, "trainer-1");
    assert_eq!(procs[0].label_keys, ["k8s.namespace", "k8s.pod"]);
    assert_eq!((procs[0].agent_id.as_str(), procs[0].cluster.as_str()), ("agent-node-b", "prod"));

    let events: Vec<OomEventRow> = ch
        .client()
        .query(&format!("SELECT ?fields FROM {} WHERE node = ? ORDER BY ts_ms", ch.table("oom_events")))
        .bind("node-a")
        .fetch_all()
        .await
        .unwrap();
    let want = oomlens_collector::clickhouse::convert::event_row(
        &a,
        &batch(1, NOW).events[0],
        events[0].received_ms,
    );
    assert_eq!(events[0], want);
    assert_eq!((events[0].capacity_bytes, events[0].free_bytes), (None, Some(0)));
    assert!(events[0].received_ms >= NOW);

    let agents: Vec<AgentRow> = ch
        .client()
        .query(&format!("SELECT ?fields FROM {} WHERE node = ? ORDER BY last_seq", ch.table("agents")))
        .bind("node-a")
        .fetch_all()
        .await
        .unwrap();
    assert!(!agents.is_empty());
    let last = agents.last().unwrap();
    assert_eq!((last.last_seq, last.boot_id, last.collector_id.as_str()), (6, 42, "collector-1"));
    assert_eq!(last.gpu_uuids, ["GPU-node-a"]);

    let stats = sink.stats();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(stats.batches_in.load(Relaxed), 12);
    assert_eq!(stats.batches_stored.load(Relaxed), 12);
    assert_eq!(stats.gpu_rows_in.load(Relaxed), 36);
    assert_eq!(stats.insert_errors.load(Relaxed), 0);
    assert_eq!((stats.queue_depth.load(Relaxed), stats.pending_batches.load(Relaxed)), (0, 0));
    assert!(stats.insert_duration.count() >= 4);
    assert!(stats.insert_duration.mean().is_some_and(|m| m > Duration::ZERO));

    drop(sink);
    tokio::time::timeout(Duration::from_secs(10), task.join()).await.unwrap().unwrap();
    shut_down(dev, ch).await;
}

/// `insert_concurrency` > 1: many small flushes insert at once, yet every row lands exactly once
/// and the commit records (`agents` rows) are written in flush order — checked through the block
/// numbers of the unmerged parts (merges stopped), which ClickHouse assigns in insert order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_flushes_commit_in_order() {
    let dev = server();
    let cfg = ChConfig { insert_concurrency: 4, insert_max_rows: 20, insert_max_delay_ms: 5, ..config(&dev) };
    let ch = migrated(&cfg).await;
    ch.execute(&format!("SYSTEM STOP MERGES {}", ch.table("agents"))).await.unwrap();
    let (sink, task) = Sink::spawn(ch.clone(), &cfg, "collector-c".into());
    let ids = [identity("node-a"), identity("node-b"), identity("node-c")];
    const SEQS: u64 = 30;
    let mut set = tokio::task::JoinSet::new();
    for id in &ids {
        let (sink, id) = (sink.clone(), id.clone());
        // Each agent stores with several batches outstanding, chained as a session does.
        set.spawn(async move {
            let mut outstanding = tokio::task::JoinSet::new();
            let mut previous: Option<tokio::sync::oneshot::Receiver<()>> = None;
            for seq in 1..=SEQS {
                let (sink, id) = (sink.clone(), id.clone());
                let (queued, next) = tokio::sync::oneshot::channel();
                let after = previous.replace(next);
                outstanding
                    .spawn(async move { sink.store_after(&id, batch(seq, NOW), after, Some(queued)).await });
                if outstanding.len() >= 8 {
                    outstanding.join_next().await.unwrap().unwrap().unwrap();
                }
            }
            while let Some(r) = outstanding.join_next().await {
                r.unwrap().unwrap();
            }
        });
    }
    while let Some(res) = set.join_next().await {
        res.unwrap();
    }
    let stats = sink.stats();
    assert!(stats.insert_batches.load(std::sync::atomic::Ordering::Relaxed) >= 10, "many flushes");
    for id in &ids {
        assert_eq!(count(&ch, "gpu_samples", &id.node).await, 3 * SEQS);
        assert_eq!(count(&ch, "process_samples", &id.node).await, 2 * SEQS);
        assert_eq!(count(&ch, "oom_events", &id.node).await, SEQS);
        assert_eq!(sink.last_acked_seq(id).await.unwrap(), SEQS);
        let commits: Vec<(u64, String)> = ch
            .client()
            .query(&format!("SELECT last_seq, _part FROM {} WHERE node = ?", ch.table("agents")))
            .bind(id.node.as_str())
            .fetch_all()
            .await
            .unwrap();
        let block = |part: &str| -> u64 { part.split('_').nth(1).unwrap().parse().unwrap() };
        let mut by_block: Vec<(u64, u64)> = commits.iter().map(|(seq, part)| (block(part), *seq)).collect();
        by_block.sort_unstable();
        assert!(by_block.len() > 1, "{by_block:?}");
        assert!(
            by_block.windows(2).all(|w| w[0].1 <= w[1].1),
            "commit records of {} out of order: {by_block:?}",
            id.node
        );
    }
    drop(sink);
    tokio::time::timeout(Duration::from_secs(10), task.join()).await.unwrap().unwrap();
    ch.execute(&format!("SYSTEM START MERGES {}", ch.table("agents"))).await.unwrap();
    shut_down(dev, ch).await;
}

/// `insert_lanes` > 1: one flush's sample rows are split by batch into that many `INSERT`s run at
/// once — separate parts (merges stopped to see them), every row exactly once, one commit record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_flush_is_split_into_parallel_lanes() {
    let dev = server();
    let cfg = ChConfig { insert_lanes: 3, insert_max_rows: 10_000, insert_max_delay_ms: 300, ..config(&dev) };
    let ch = migrated(&cfg).await;
    for table in ["gpu_samples", "process_samples"] {
        ch.execute(&format!("SYSTEM STOP MERGES {}", ch.table(table))).await.unwrap();
    }
    let (sink, task) = Sink::spawn(ch.clone(), &cfg, "collector-l".into());
    let ids = [identity("node-l1"), identity("node-l2"), identity("node-l3"), identity("node-l4")];
    let mut set = tokio::task::JoinSet::new();
    for id in &ids {
        for seq in 1..=3 {
            let (sink, id) = (sink.clone(), id.clone());
            set.spawn(async move { sink.store(&id, batch(seq, NOW)).await });
        }
    }
    while let Some(res) = set.join_next().await {
        res.unwrap().unwrap();
    }
    let stats = sink.stats();
    assert_eq!(stats.insert_batches.load(std::sync::atomic::Ordering::Relaxed), 1, "one flush");
    for id in &ids {
        assert_eq!(count(&ch, "gpu_samples", &id.node).await, 3 * 3);
        assert_eq!(count(&ch, "process_samples", &id.node).await, 2 * 3);
        assert_eq!(sink.last_acked_seq(id).await.unwrap(), 3);
    }
    for table in ["gpu_samples", "process_samples"] {
        let parts: Vec<String> = ch
            .client()
            .query(&format!("SELECT DISTINCT _part FROM {}", ch.table(table)))
            .fetch_all()
            .await
            .unwrap();
        assert_eq!(parts.len(), 3, "{table}: one part per lane: {parts:?}");
        ch.execute(&format!("SYSTEM START MERGES {}", ch.table(table))).await.unwrap();
    }
    drop(sink);
    tokio::time::timeout(Duration::from_secs(10), task.join()).await.unwrap().unwrap();
    shut_down(dev, ch).await;
}

#[tokio::test]
async fn dropping_every_handle_flushes_pending_batches_at_once() {
    let dev = server();
    let cfg = ChConfig { insert_max_delay_ms: 60_000, ..config(&dev) };
    let ch = migrated(&cfg).await;
    let (sink, task) = Sink::spawn(ch.clone(), &cfg, "collector-1".into());
    let id = identity("node-c");
    let caller = {
        let (sink, id) = (sink.clone(), id.clone());
        tokio::spawn(async move { sink.store(&id, batch(1, NOW)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!caller.is_finished(), "a 60 s delay must hold the batch");
    // The caller gives up (its connection closed) and the last handle goes away: the writer must
    // not wait for the 60 s window, and must not drop the rows it already took.
    caller.abort();
    drop(sink);
    tokio::time::timeout(Duration::from_secs(10), task.join()).await.unwrap().unwrap();
    assert_eq!(count(&ch, "gpu_samples", "node-c").await, 3);
    assert_eq!(count(&ch, "agents", "node-c").await, 1);
    shut_down(dev, ch).await;
}

#[tokio::test]
async fn unreachable_server_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let cfg = ChConfig { request_timeout_ms: 5_000, ..ChConfig::new(url.clone()) };
    let err = Ch::connect(&cfg).await.unwrap_err();
    assert!(matches!(err, ChError::Unreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&url) && text.contains("running") && !text.contains('\n'), "{text}");

    let bad = ChConfig { database: "x; DROP".into(), ..ChConfig::new(url) };
    assert!(matches!(Ch::connect(&bad).await, Err(ChError::InvalidConfig(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_while_a_store_is_pending_loses_and_duplicates_nothing() {
    let mut dev = server();
    let cfg = ChConfig { insert_max_delay_ms: 500, ..config(&dev) };
    let ch = migrated(&cfg).await;
    let (sink, task) = Sink::spawn(ch.clone(), &cfg, "collector-1".into());
    let id = identity("node-d");
    sink.store(&id, batch(1, NOW)).await.unwrap();

    // Batch 2 is in the writer's gather window when the server dies.
    let pending = {
        let (sink, id) = (sink.clone(), id.clone());
        tokio::spawn(async move { sink.store(&id, batch(2, NOW)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let old_pid = dev.pid();
    dev.kill().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!pending.is_finished(), "nothing may be acknowledged while ClickHouse is down");
    let stats = sink.stats();
    assert!(stats.insert_errors.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert!(stats.last_error().is_some());

    let dev = tokio::task::spawn_blocking(move || {
        dev.restart().unwrap();
        dev
    })
    .await
    .unwrap();
    assert_ne!(dev.pid(), old_pid);
    tokio::time::timeout(Duration::from_secs(30), pending).await.unwrap().unwrap().unwrap();

    assert_eq!(count(&ch, "gpu_samples", "node-d").await, 6);
    assert_eq!(count(&ch, "process_samples", "node-d").await, 4);
    assert_eq!(count(&ch, "oom_events", "node-d").await, 2);
    let distinct: u64 = ch
        .client()
        .query(&format!("SELECT uniqExact(ts_ms, gpu_index) FROM {} WHERE node = ?", ch.table("gpu_samples")))
        .bind("node-d")
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(distinct, 6);
    assert_eq!(sink.last_acked_seq(&id).await.unwrap(), 2);
    drop(sink);
    tokio::time::timeout(Duration::from_secs(10), task.join()).await.unwrap().unwrap();
    shut_down(dev, ch).await;
}

#[tokio::test]
async fn retention_drops_old_day_partitions_without_ttl() {
    let dev = server();
    let cfg = ChConfig { retention: Retention { samples_days: 30, events_days: 365 }, ..config(&dev) };
    let ch = migrated(&cfg).await;
    let (sink, task) = Sink::spawn(ch.clone(), &cfg, "collector-1".into());
    let id = identity("node-e");
    let now = NOW;
    let old = now - 40 * 86_400_000;
    sink.store(&id, batch(1, old)).await.unwrap();
    sink.store(&id, batch(2, now)).await.unwrap();
    assert_eq!(count(&ch, "gpu_samples", "node-e").await, 6);

    drop(sink);
    task.join().await.unwrap();

    let report = ch.drop_expired_partitions(now).await.unwrap();
    if ch.caps().ttl {
        assert!(report.ttl_managed && report.dropped.is_empty());
        shut_down(dev, ch).await;
        return;
    }
    assert_eq!(
        report.dropped,
        [
            ("gpu_samples".to_owned(), "20251122".to_owned()),
            ("process_samples".to_owned(), "20251122".to_owned()),
            // The per-minute rollups expire with the samples.
            ("gpu_minutes".to_owned(), "20251122".to_owned()),
            ("process_minutes".to_owned(), "20251122".to_owned())
        ]
    );
    assert_eq!(count(&ch, "gpu_samples", "node-e").await, 3);
    assert!(count(&ch, "gpu_minutes", "node-e").await > 0, "the recent minutes stay");
    assert_eq!(count(&ch, "process_samples", "node-e").await, 2);
    assert_eq!(count(&ch, "oom_events", "node-e").await, 2, "events keep 365 days");
    // Idempotent.
    assert!(ch.drop_expired_partitions(now).await.unwrap().dropped.is_empty());
    shut_down(dev, ch).await;
}
