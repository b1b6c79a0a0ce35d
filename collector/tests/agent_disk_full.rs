//! A full disk under the real agent's spool: the collector is down, the simulator produces far
//! more than the spool's tmpfs holds, the disk refuses writes. No OOM event may be lost: batches
//! wait in memory (`spool.memory_fallback_bytes`), only the oldest samples are dropped, every
//! dropped row is counted (`/metrics`, the run report), and `/readyz` says the spool is degraded.
//! When the collector comes back, every event reaches ClickHouse exactly once and the samples
//! stored plus those counted as dropped are exactly what the simulator produced.
//!
//! Needs a tmpfs (root or CAP_SYS_ADMIN); skipped with a message where it cannot mount one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::time::Duration;

use common::exact::http_get;
use common::*;
use oomlens_agent::source::Source;
use oomlens_agent::source::sim::Simulator;
use oomlens_devkit::tinyfs::TinyFs;

/// Rows the simulator of `cfg` produces in `seconds` (one reading per second).
fn produced(node: &str, cfg: &oomlens_agent::source::sim::SimConfig, seconds: i64) -> (u64, u64, Vec<u64>) {
    let mut sim = Simulator::new(node, cfg.clone(), START_MS).unwrap();
    let (mut gpu, mut procs, mut events) = (0, 0, Vec::new());
    for k in 0..seconds {
        let r = sim.sample(START_MS + k * 1000);
        gpu += r.gpu_samples.len() as u64;
        procs += r.process_samples.len() as u64;
        events.extend(r.events.iter().map(|e| e.event_id));
    }
    events.sort_unstable();
    (gpu, procs, events)
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next().and_then(|v| v.parse().ok()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_spool_disk_loses_no_event_and_counts_every_dropped_sample() {
    let Some(disk) = TinyFs::mount(3 * 1024 * 1024) else { return };
    let t0 = std::time::Instant::now();
    let ch = start_clickhouse();
    step!(t0, "ClickHouse up");
    let dir = tempfile::tempdir().unwrap();
    let node = "node-disk-full";
    let pki = pki(dir.path(), &[node]);
    let addr = reserve_addr();
    let telemetry = reserve_tcp_addr();
    let db = client(&ch.url());

    // A busy node: 8 GPUs with 24 more processes each, 600 simulated s at 40x: ~15 s of sampling
    // producing several times the 3 MiB disk plus the 1 MiB of memory.
    let (seed, duration, speed) = (61, 600u64, 40.0);
    let mut cfg = agent_config(&pki, node, addr, seed, duration, speed);
    cfg.simulator.gpus = 8;
    cfg.simulator.extra_processes_per_gpu = 24;
    cfg.spool.dir = Some(disk.path().join("spool"));
    cfg.spool.max_bytes = Some(64 << 20);
    cfg.spool.memory_fallback_bytes = 1 << 20;
    cfg.telemetry.listen = Some(telemetry);
    let (want_gpu, want_procs, want_events) = produced(node, &cfg.simulator, duration as i64);
    assert!(!want_events.is_empty(), "the run has OOM events");

    let mut agent = AgentProcess::spawn(&cfg, dir.path(), "agent");
    step!(t0, "agent started, collector down");
    // While it samples: the disk fills up and the spool says so.
    let (mut degraded_ready, mut degraded_health, mut degraded_metric) = (None, None, None);
    let sampling_ends = tokio::time::Instant::now() + Duration::from_secs_f64(duration as f64 / speed);
    while tokio::time::Instant::now() < sampling_ends {
        if let Some(r) = http_get(telemetry, "/readyz").await
            && r.contains("degraded: spool: the disk refused a write")
        {
            assert!(r.starts_with("HTTP/1.1 503") || r.starts_with("HTTP/1.0 503"), "{r}");
            degraded_ready.get_or_insert(r);
        }
        if let Some(h) = http_get(telemetry, "/healthz").await
            && h.contains("ok, degraded: spool")
        {
            assert!(h.starts_with("HTTP/1.1 200") || h.starts_with("HTTP/1.0 200"), "{h}");
            degraded_health.get_or_insert(h);
        }
        if let Some(m) = http_get(telemetry, "/metrics").await
            && metric(&m, "oomlens_agent_spool_degraded") == Some(1.0)
        {
            degraded_metric.get_or_insert(m);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    step!(t0, "sampling done");
    assert!(degraded_ready.is_some(), "/readyz never said the spool is degraded; log:\n{}", agent.log_text());
    assert!(degraded_health.is_some(), "/healthz never named the degraded spool");
    let m = degraded_metric.expect("oomlens_agent_spool_degraded never 1");
    assert!(metric(&m, "oomlens_agent_spool_write_errors_total").unwrap_or(0.0) >= 1.0, "{m}");

    let (collector, _stop) = start_collector(collector_config(&pki, &ch.url(), addr)).await;
    step!(t0, "collector up");
    let status = agent.wait(Duration::from_secs(120)).await;
    step!(t0, "agent exited");
    collector.shutdown().await;
    let log = agent.log_text();
    assert!(status.success(), "agent failed: {status}; log:\n{log}");
    assert!(log.contains("the disk refused a write"), "{log}");

    // Every event, exactly once (raw rows, before any merge).
    let mut ids: Vec<u64> = db
        .query(&format!("SELECT event_id FROM oomlens.oom_events WHERE node = '{node}'"))
        .fetch_all::<u64>()
        .await
        .unwrap();
    ids.sort_unstable();
    assert_eq!(ids, want_events, "every OOM event stored exactly once");

    // Samples: stored + counted as dropped = produced; some were dropped, none twice.
    let report = agent.report();
    let dropped = |k: &str| report[k].as_u64().unwrap();
    assert_eq!(dropped("dropped_events"), 0, "{report}");
    let w = format!("node = '{node}'");
    let gpu = count(&db, &format!("SELECT count() FROM oomlens.gpu_samples WHERE {w}")).await;
    let gpu_keys =
        count(&db, &format!("SELECT uniqExact(gpu_index, ts_ms) FROM oomlens.gpu_samples WHERE {w}")).await;
    let procs = count(&db, &format!("SELECT count() FROM oomlens.process_samples WHERE {w}")).await;
    let proc_keys = count(
        &db,
        &format!("SELECT uniqExact(gpu_index, pid, ts_ms) FROM oomlens.process_samples WHERE {w}"),
    )
    .await;
    eprintln!(
        "produced gpu {want_gpu} / process {want_procs} / events {}; stored {gpu} / {procs} / {}; dropped {} / {}",
        want_events.len(),
        ids.len(),
        dropped("dropped_gpu_samples"),
        dropped("dropped_process_samples")
    );
    assert_eq!((gpu, procs), (gpu_keys, proc_keys), "no sample stored twice");
    assert!(dropped("dropped_process_samples") > 0, "the run overflowed disk and memory: {report}");
    assert_eq!(gpu + dropped("dropped_gpu_samples"), want_gpu, "gpu samples: stored + dropped = produced");
    assert_eq!(
        procs + dropped("dropped_process_samples"),
        want_procs,
        "process samples: stored + dropped = produced"
    );
}
