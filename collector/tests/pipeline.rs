//! End-to-end: simulated agents → QUIC (mutual TLS) → collector → a real ClickHouse.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use oomlens_agent::source::Source;
use oomlens_agent::source::sim::Simulator;
use oomlens_collector::ingest::certs::DevPki;
use oomlens_collector::service::RunningCollector;
use oomlens_devkit::devch::DevClickHouse;
use oomlens_schema::OomEvent;

/// Replays the simulator exactly as the agent's sampler drives it and returns its events.
fn expected_events(node: &str, seed: u64, duration_s: u64) -> Vec<OomEvent> {
    let cfg = agent_config_for_replay(seed);
    let mut sim = Simulator::new(node, cfg, START_MS).unwrap();
    (0..duration_s as i64).flat_map(|k| sim.sample(START_MS + k * 1000).events).collect()
}

fn agent_config_for_replay(seed: u64) -> oomlens_agent::source::sim::SimConfig {
    oomlens_agent::source::sim::SimConfig { gpus: 4, seed, ..Default::default() }
}

/// A throw-away ClickHouse, a temp directory, certificates for `node` and a collector on a free
/// loopback port: what every single-agent test here starts with.
async fn one_node_collector(
    node: &str,
) -> (DevClickHouse, tempfile::TempDir, DevPki, RunningCollector, tokio::sync::watch::Sender<bool>) {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &[node]);
    let (collector, stop) =
        start_collector(collector_config(&pki, &ch.url(), SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    (ch, dir, pki, collector, stop)
}

#[derive(Debug, clickhouse::Row, serde::Deserialize)]
struct EventRow {
    node: String,
    event_id: u64,
    ts_ms: i64,
    kind: String,
    gpu_index: Option<u32>,
    pid: Option<u32>,
    requested_bytes: Option<u64>,
    capacity_bytes: Option<u64>,
    free_bytes: Option<u64>,
    allocated_bytes: Option<u64>,
    reserved_bytes: Option<u64>,
    process_used_bytes: Option<u64>,
    other_pids: Vec<u32>,
    other_used_bytes: Vec<u64>,
    phase: String,
    truth_scenario: String,
    raw_message: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_agents_deliver_every_row_and_event_intact() {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["node-a", "node-b", "node-c"];
    let pki = pki(dir.path(), &nodes);
    let (collector, _stop) =
        start_collector(collector_config(&pki, &ch.url(), SocketAddr::from(([127, 0, 0, 1], 0)))).await;

    let duration_s = 240;
    let agents: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| spawn_agent(agent_config(&pki, n, collector.addr, 10 + i as u64, duration_s, 400.0)))
        .collect();
    let mut sent = Vec::new();
    for a in agents {
        sent.push(tokio::time::timeout(Duration::from_secs(120), a).await.unwrap().unwrap());
    }
    collector.shutdown().await;

    let db = client(&ch.url());
    for (i, node) in nodes.iter().enumerate() {
        let t = sent[i];
        assert_eq!(t.pending_batches, 0, "{node}: everything acknowledged");
        assert_eq!(t.acked_batches, t.batches, "{node}");
        let q = |table: &str| format!("SELECT count() FROM oomlens.{table} WHERE node = '{node}'");
        assert_eq!(count(&db, &q("gpu_samples")).await, t.gpu_samples, "{node} gpu_samples");
        assert_eq!(t.gpu_samples, 4 * duration_s, "{node}: one sample per GPU per simulated second");
        assert_eq!(count(&db, &q("process_samples")).await, t.process_samples, "{node} process_samples");
        assert_eq!(count(&db, &q("oom_events")).await, t.events, "{node} oom_events");
        assert_eq!(
            count(&db, &format!("SELECT max(last_seq) FROM oomlens.agents WHERE node = '{node}'")).await,
            t.batches,
            "{node} agents.last_seq"
        );
        assert_eq!(
            count(
                &db,
                &format!(
                    "SELECT count() FROM oomlens.gpu_samples WHERE node = '{node}' AND cluster != '{CLUSTER}'"
                )
            )
            .await,
            0
        );

        // Every event arrives with its fields intact.
        let expected = expected_events(node, 10 + i as u64, duration_s);
        assert_eq!(expected.len() as u64, t.events, "{node}: replay matches what the agent sent");
        let rows: BTreeMap<u64, EventRow> = db
            .query("SELECT ?fields FROM oomlens.oom_events WHERE node = ?")
            .bind(*node)
            .fetch_all::<EventRow>()
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.event_id, r))
            .collect();
        for e in &expected {
            let r = rows.get(&e.event_id).unwrap_or_else(|| panic!("{node}: event {} missing", e.event_id));
            assert_eq!(r.node, *node);
            assert_eq!(r.ts_ms, e.ts_ms);
            assert_eq!(r.kind, e.kind.as_str());
            assert_eq!(r.gpu_index, e.gpu_index);
            assert_eq!(r.pid, e.pid);
            assert_eq!(r.requested_bytes, e.requested_bytes);
            assert_eq!(r.capacity_bytes, e.capacity_bytes);
            assert_eq!(r.free_bytes, e.free_bytes);
            assert_eq!(r.allocated_bytes, e.allocated_bytes);
            assert_eq!(r.reserved_bytes, e.reserved_bytes);
            assert_eq!(r.process_used_bytes, e.process_used_bytes);
            assert_eq!(r.other_pids, e.other_processes.iter().map(|o| o.pid).collect::<Vec<_>>());
            assert_eq!(
                r.other_used_bytes,
                e.other_processes.iter().map(|o| o.used_bytes).collect::<Vec<_>>()
            );
            assert_eq!(r.phase, e.phase.as_str());
            assert_eq!(r.truth_scenario, e.truth.map(|s| s.as_str()).unwrap_or(""));
            assert_eq!(r.raw_message, e.raw_message);
        }
    }
    let total_events: u64 = sent.iter().map(|t| t.events).sum();
    assert!(total_events > 0, "the simulator produced OOMs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn collector_restart_mid_run_loses_no_batch() {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["node-r1", "node-r2"];
    let pki = pki(dir.path(), &nodes);
    // Reserve a port, so the restarted collector listens where the agents reconnect.
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let (collector, _stop) = start_collector(collector_config(&pki, &ch.url(), listen)).await;

    let duration_s = 300;
    let agents: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| spawn_agent(agent_config(&pki, n, listen, 30 + i as u64, duration_s, 60.0)))
        .collect();
    // Let the agents stream, then crash the collector (no flush, no goodbye).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stored_before = collector.sink_stats.batches_stored.load(std::sync::atomic::Ordering::Relaxed);
    assert!(stored_before > 0, "batches were flowing before the crash");
    collector.abort();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (collector, _stop2) = start_collector(collector_config(&pki, &ch.url(), listen)).await;

    let mut sent = Vec::new();
    for a in agents {
        sent.push(tokio::time::timeout(Duration::from_secs(120), a).await.unwrap().unwrap());
    }
    collector.shutdown().await;
    let db = client(&ch.url());
    for (i, node) in nodes.iter().enumerate() {
        let t = sent[i];
        assert_eq!(t.pending_batches, 0, "{node}");
        // Every sample is there (a batch stored just before the crash may have been re-sent: count distinct keys).
        let distinct = count(
            &db,
            &format!("SELECT uniqExact(gpu_index, ts_ms) FROM oomlens.gpu_samples WHERE node = '{node}'"),
        )
        .await;
        if distinct != t.gpu_samples {
            let ts: Vec<i64> = db
                .query(
                    "SELECT ts_ms FROM oomlens.gpu_samples WHERE node = ? AND gpu_index = 0 ORDER BY ts_ms",
                )
                .bind(*node)
                .fetch_all::<i64>()
                .await
                .unwrap();
            let secs: Vec<i64> = ts.iter().map(|t| (t - START_MS) / 1000).collect();
            let missing: Vec<i64> = (0..duration_s as i64).filter(|s| !secs.contains(s)).collect();
            eprintln!("{node}: {t:?} missing seconds {missing:?}");
        }
        assert_eq!(distinct, t.gpu_samples, "{node}: no batch missing after the restart");
        let events =
            count(&db, &format!("SELECT uniqExact(event_id) FROM oomlens.oom_events WHERE node = '{node}'"))
                .await;
        assert_eq!(events, t.events, "{node}: every event present");
    }
}

/// The flight recorder end to end: with the agent's defaults (recorder on, 100 ms
/// fast readings), every 100 ms reading of the 30 s before each OOM of the GPU that failed (every
/// GPU of the node for a host OOM) is in ClickHouse, and far from the OOMs a cold GPU is stored
/// at the normal 1 s interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fast_curve_before_every_oom_is_stored() {
    let node = "node-rec";
    let (ch, _dir, pki, collector, _stop) = one_node_collector(node).await;
    let duration_s = 240;
    let mut cfg = agent_config(&pki, node, collector.addr, 11, duration_s, 200.0);
    cfg.recorder.enabled = true;
    cfg.recorder.window_s = 30;
    cfg.recorder.fast_interval_ms = 100;
    let sent = tokio::time::timeout(Duration::from_secs(120), spawn_agent(cfg)).await.unwrap().unwrap();
    collector.shutdown().await;
    assert_eq!(sent.pending_batches, 0, "everything acknowledged");

    let db = client(&ch.url());
    let stored: std::collections::BTreeSet<(u32, i64)> = db
        .query("SELECT gpu_index, ts_ms FROM oomlens.gpu_samples WHERE node = ?")
        .bind(node)
        .fetch_all::<(u32, i64)>()
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(stored.len() as u64, sent.gpu_samples, "every GPU sample sent is stored once");
    let events: Vec<(i64, Option<u32>)> = db
        .query("SELECT ts_ms, gpu_index FROM oomlens.oom_events WHERE node = ? ORDER BY ts_ms")
        .bind(node)
        .fetch_all::<(i64, Option<u32>)>()
        .await
        .unwrap();
    assert!(!events.is_empty(), "the simulator produced OOMs");
    let mut fast_window = std::collections::BTreeSet::new();
    for (ts, gpu) in &events {
        let gpus: Vec<u32> = gpu.map_or_else(|| (0..4).collect(), |g| vec![g]);
        for g in gpus {
            let mut t = (ts - 30_000).max(START_MS);
            while t <= *ts {
                assert!(stored.contains(&(g, t)), "OOM at {ts}: GPU {g} reading at {t} not stored");
                fast_window.insert((g, t));
                t += 100;
            }
        }
    }
    // Far from the OOMs and below the hot threshold, a GPU keeps the 1 s interval: far fewer rows
    // than 10 readings per second on every GPU.
    assert!(
        stored.len() < 4 * duration_s as usize * 10 / 2,
        "{} rows: the fast rate is only kept around OOMs and on hot GPUs",
        stored.len()
    );
    assert!(fast_window.len() >= 300, "at least one 30 s window of 100 ms readings");
}

/// The agent's `/metrics` while it streams to a real collector: readings, events by
/// kind and detector, batches built / sent / acknowledged, the session, the ack latency and the
/// spool, consistent with each other and with what reached ClickHouse.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agent_metrics_report_what_the_agent_did() {
    let node = "node-metrics";
    let (ch, dir, pki, collector, _stop) = one_node_collector(node).await;
    let telemetry = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut cfg = agent_config(&pki, node, collector.addr, 12, 3600, 50.0);
    cfg.telemetry.listen = Some(telemetry);
    cfg.spool.dir = Some(dir.path().join("spool"));
    let cfg = cfg.finish().unwrap();
    let (stop_agent, stop_rx) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(oomlens_agent::runner::run_agent(cfg, stop_rx));

    let value = |text: &str, series: &str| -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
    };
    let mut scraped = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if let Some(r) = exact::http_get(telemetry, "/metrics").await {
            let events = value(&r, "oomlens_agent_events_total{kind=\"cuda_oom\",source=\"simulator\"}");
            let acked = value(&r, "oomlens_agent_batches_acked_total");
            if events.unwrap_or(0.0) >= 1.0 && acked.unwrap_or(0.0) >= 10.0 {
                scraped = r;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!scraped.is_empty(), "no OOM event or no acknowledged batch within 60 s");
    let m = |series: &str| value(&scraped, series).unwrap_or_else(|| panic!("{series} missing:\n{scraped}"));
    assert_eq!(m("oomlens_agent_connected"), 1.0);
    assert!(exact::ready(telemetry).await, "/readyz: a session with the collector is live");
    let health = exact::http_get(telemetry, "/healthz").await.unwrap_or_default();
    assert!(health.starts_with("HTTP/1.0 200"), "/healthz while sampling: {health}");
    assert!(m("oomlens_agent_connects_total") >= 1.0);
    let (built, sent, acked) = (
        m("oomlens_agent_batches_built_total"),
        m("oomlens_agent_batches_sent_total"),
        m("oomlens_agent_batches_acked_total"),
    );
    assert!(acked <= sent && sent <= built + 1.0, "built {built} ≥ sent {sent} ≥ acked {acked}");
    assert!(m("oomlens_agent_ack_latency_seconds_count") >= 1.0, "every ack is timed");
    let readings = m("oomlens_agent_gpu_samples_total");
    assert!(readings >= 4.0 * 10.0, "4 GPUs read every simulated second: {readings}");
    assert!(m("oomlens_agent_spool_bytes") >= 0.0);
    // A labelled family has no series until something is dropped.
    assert!(!scraped.contains("oomlens_agent_dropped_rows_total{"), "nothing dropped:\n{scraped}");
    // The series are read one after another while the agent runs: bounds, not equalities.
    let unacked = m("oomlens_agent_unacked_batches");
    assert!((0.0..=built).contains(&unacked), "unacknowledged {unacked} of {built} built");

    let _ = stop_agent.send(true);
    let totals = tokio::time::timeout(Duration::from_secs(60), agent).await.unwrap().unwrap().unwrap();
    collector.shutdown().await;
    // What the scrape counted is a prefix of what the agent ended up sending and storing.
    assert!(totals.gpu_samples as f64 >= readings);
    assert!(totals.acked_batches as f64 >= acked);
    let db = client(&ch.url());
    let stored = count(&db, &format!("SELECT count() FROM oomlens.gpu_samples WHERE node = '{node}'")).await;
    assert_eq!(stored, totals.gpu_samples, "every sample the agent counted as sent is stored");
    let events = count(&db, &format!("SELECT count() FROM oomlens.oom_events WHERE node = '{node}'")).await;
    assert!(events as f64 >= m("oomlens_agent_events_total{kind=\"cuda_oom\",source=\"simulator\"}"));
}

/// The job-log follower and the hook socket through the running agent, the collector and
/// ClickHouse: a PyTorch 2.x message appended to a followed job log and a report
/// sent to the hook socket become `oom_events` rows with their numbers, source and framework.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn log_and_hook_reports_reach_clickhouse() {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let node = "node-detect";
    let (ch, dir, pki, collector, _stop) = one_node_collector(node).await;
    let jobs = dir.path().join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    let job_log = jobs.join("train-7.log");
    std::fs::write(&job_log, "step 1 loss 2.31\n").unwrap();
    let socket = dir.path().join("hook.sock");
    let mut cfg = agent_config(&pki, node, collector.addr, 14, 3600, 5.0);
    cfg.logs.paths = vec![format!("{}/*.log", jobs.display())];
    cfg.logs.state_file = dir.path().join("log-offsets.json");
    cfg.logs.poll_interval_ms = 50;
    cfg.logs.rescan_interval_ms = 200;
    cfg.hook.enabled = true;
    cfg.hook.path = socket.clone();
    let cfg = cfg.finish().unwrap();
    let (stop_agent, stop_rx) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(oomlens_agent::runner::run_agent(cfg, stop_rx));
    assert!(wait_until(Duration::from_secs(30), || socket.exists()).await, "the hook socket appeared");
    // Let the follower find the file and take its end as the starting point.
    tokio::time::sleep(Duration::from_millis(600)).await;

    let message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total \
                   capacity of 79.11 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has \
                   77.00 GiB memory in use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 6.00 GiB \
                   is reserved by PyTorch but unallocated.\n";
    let mut f = std::fs::OpenOptions::new().append(true).open(&job_log).unwrap();
    std::io::Write::write_all(&mut f, message.as_bytes()).unwrap();
    drop(f);

    // A retry loop failing five times: five identical reports, each accepted with its own id.
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut read = tokio::io::BufReader::new(read);
    let report = serde_json::json!({
        "v": 1, "type": "oom", "gpu_index": 1, "requested_bytes": 1u64 << 30, "phase": "forward",
        "framework": "pytorch", "message": "torch.OutOfMemoryError: CUDA out of memory (hook)",
        "memory_stats": {"allocated_bytes.all.current": 30u64 << 30, "reserved_bytes.all.current": 31u64 << 30},
        "job": {"batch": 64, "seq_len": 2048},
    });
    let mut hook_ids = Vec::new();
    for _ in 0..5 {
        write.write_all(format!("{report}\n").as_bytes()).await.unwrap();
        let mut reply = String::new();
        read.read_line(&mut reply).await.unwrap();
        let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(reply["ok"], true, "{reply}");
        hook_ids.push(reply["event_id"].as_str().unwrap().parse::<u64>().unwrap());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    #[derive(Debug, clickhouse::Row, serde::Deserialize)]
    struct Row {
        source: String,
        framework: String,
        gpu_index: Option<u32>,
        pid: Option<u32>,
        requested_bytes: Option<u64>,
        capacity_bytes: Option<u64>,
        allocated_bytes: Option<u64>,
        reserved_bytes: Option<u64>,
        phase: String,
        batch_size: Option<u32>,
    }
    let db = client(&ch.url());
    let query = "SELECT source, framework, gpu_index, pid, requested_bytes, capacity_bytes, allocated_bytes, \
                 reserved_bytes, phase, batch_size FROM oomlens.oom_events WHERE node = ? AND source IN ('log', 'hook') \
                 ORDER BY source";
    let mut rows = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        rows = db.query(query).bind(node).fetch_all::<Row>().await.unwrap();
        if rows.len() >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = stop_agent.send(true);
    tokio::time::timeout(Duration::from_secs(60), agent).await.unwrap().unwrap().unwrap();
    collector.shutdown().await;

    assert_eq!(rows.len(), 6, "one row per report, every repeat included: {rows:?}");
    // Every id the hook returned is findable.
    let mut stored: Vec<u64> = db
        .query("SELECT event_id FROM oomlens.oom_events WHERE node = ? AND source = 'hook'")
        .bind(node)
        .fetch_all::<u64>()
        .await
        .unwrap();
    stored.sort_unstable();
    hook_ids.sort_unstable();
    assert_eq!(stored, hook_ids, "the hook's event ids are the stored ones");
    let (hook, log) = (&rows[0], &rows[5]);
    assert_eq!((hook.source.as_str(), log.source.as_str()), ("hook", "log"));
    const GIB: f64 = (1u64 << 30) as f64;
    assert_eq!(log.framework, "pytorch");
    assert_eq!(log.gpu_index, Some(3));
    assert_eq!(log.requested_bytes, Some(2 << 30));
    assert_eq!(log.capacity_bytes, Some((79.11 * GIB).round() as u64));
    assert_eq!(log.allocated_bytes, Some(70 << 30));
    assert_eq!(log.reserved_bytes, Some(76 << 30), "allocated + reserved but unallocated");
    assert_eq!(hook.gpu_index, Some(1));
    assert_eq!(hook.pid, Some(std::process::id()), "the kernel's view of the peer (SO_PEERCRED)");
    assert_eq!(hook.requested_bytes, Some(1 << 30));
    assert_eq!((hook.allocated_bytes, hook.reserved_bytes), (Some(30 << 30), Some(31 << 30)));
    assert_eq!((hook.phase.as_str(), hook.batch_size), ("forward", Some(64)));
}
