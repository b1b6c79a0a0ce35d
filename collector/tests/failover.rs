//! Scale-out: agents configured with two collectors spread over both, and when one collector is
//! killed mid-stream its agents fail over to the other without losing or doubling a row, checked
//! against the simulator's deterministic replay in one real ClickHouse.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use oomlens_agent::source::Source;
use oomlens_agent::source::sim::{SimConfig, Simulator};
use oomlens_agent::uplink::first_collector;

/// What the simulator of `node` produces in `seconds` simulated seconds (4 GPUs, one reading per
/// second, as `agent_config` runs it): GPU rows, process rows, event ids.
fn replay(node: &str, seed: u64, seconds: i64) -> (u64, u64, BTreeSet<u64>) {
    let mut sim = Simulator::new(node, SimConfig { gpus: 4, seed, ..Default::default() }, START_MS).unwrap();
    let (mut gpu, mut process, mut events) = (0, 0, BTreeSet::new());
    for k in 0..seconds {
        let r = sim.sample(START_MS + k * 1000);
        gpu += r.gpu_samples.len() as u64;
        process += r.process_samples.len() as u64;
        events.extend(r.events.iter().map(|e| e.event_id));
    }
    (gpu, process, events)
}

/// Node names whose agents start on endpoint 0 and on endpoint 1 of a two-collector list, two each.
fn spread_nodes() -> Vec<String> {
    let (mut on_a, mut on_b) = (Vec::new(), Vec::new());
    for i in 0.. {
        let node = format!("fo-node-{i}");
        let side = if first_collector(&node, 2) == 0 { &mut on_a } else { &mut on_b };
        if side.len() < 2 {
            side.push(node);
        }
        if on_a.len() == 2 && on_b.len() == 2 {
            break;
        }
    }
    on_a.into_iter().chain(on_b).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agents_spread_over_two_collectors_and_fail_over_when_one_dies() {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let nodes = spread_nodes();
    let node_refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let pki = pki(dir.path(), &node_refs);
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let collector = |id: &str| {
        let mut cfg = collector_config(&pki, &ch.url(), any);
        cfg.collector.collector_id = id.to_owned();
        cfg
    };
    let (a, _stop_a) = start_collector(collector("collector-a")).await;
    let (b, _stop_b) = start_collector(collector("collector-b")).await;

    // Every agent gets the same list [a, b]; the hash of its id picks where it starts.
    let duration_s = 300;
    let agents: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let mut cfg = agent_config(&pki, node, a.addr, 50 + i as u64, duration_s, 60.0);
            cfg.uplink.collectors = vec![a.addr.to_string(), b.addr.to_string()];
            spawn_agent(cfg)
        })
        .collect();

    // Both collectors take their half of the fleet and store batches.
    let spread = wait_until(Duration::from_secs(10), || {
        a.metrics.sessions.get() >= 2
            && b.metrics.sessions.get() >= 2
            && a.sink_stats.batches_stored.load(Ordering::Relaxed) >= 10
    })
    .await;
    assert!(
        spread,
        "sessions a={} b={}, batches stored on a={}",
        a.metrics.sessions.get(),
        b.metrics.sessions.get(),
        a.sink_stats.batches_stored.load(Ordering::Relaxed)
    );
    assert_eq!((a.metrics.connected_agents.get(), b.metrics.connected_agents.get()), (2, 2), "even spread");

    // Kill collector a mid-stream: no flush, no goodbye; its writer may die between inserts.
    let stored_on_a = a.sink_stats.batches_stored.load(Ordering::Relaxed);
    a.abort();

    let mut sent = Vec::new();
    for agent in agents {
        sent.push(tokio::time::timeout(Duration::from_secs(90), agent).await.unwrap().unwrap());
    }
    let sessions_b = b.metrics.sessions.get();
    let resent_acked_by_b = b.metrics.duplicate_batches.get();
    b.shutdown().await;
    assert!(sessions_b >= 4, "every agent ended up on collector b ({sessions_b} sessions)");

    let db = client(&ch.url());
    let mut duplicates = 0;
    for (i, node) in nodes.iter().enumerate() {
        let t = sent[i];
        assert_eq!(t.pending_batches, 0, "{node}: everything acknowledged");
        let (gpu, process, events) = replay(node, 50 + i as u64, duration_s as i64);
        assert_eq!(t.gpu_samples, gpu, "{node}: the agent sent what the replay produces");
        let q = |sql: String| {
            let db = db.clone();
            async move { count(&db, &sql).await }
        };
        let w = format!("node = '{node}' AND cluster = '{CLUSTER}'");
        // Nothing lost: every (GPU, second) and (GPU, second, pid) key and every event id is there.
        let gpu_keys =
            q(format!("SELECT uniqExact(gpu_index, ts_ms) FROM oomlens.gpu_samples WHERE {w}")).await;
        assert_eq!(gpu_keys, gpu, "{node}: gpu_samples complete");
        let process_keys =
            q(format!("SELECT uniqExact(gpu_index, ts_ms, pid) FROM oomlens.process_samples WHERE {w}"))
                .await;
        assert_eq!(process_keys, process, "{node}: process_samples complete");
        let stored_events: BTreeSet<u64> = db
            .query(&format!("SELECT DISTINCT event_id FROM oomlens.oom_events WHERE {w}"))
            .fetch_all::<u64>()
            .await
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(stored_events, events, "{node}: oom_events complete");
        // Nothing doubled where users look: events collapse by id (ReplacingMergeTree + FINAL).
        assert_eq!(
            q(format!("SELECT count() FROM oomlens.oom_events FINAL WHERE {w}")).await,
            events.len() as u64,
            "{node}: one event row per id"
        );
        // The commit record: the last batch of this boot is stored, wherever it went.
        assert_eq!(
            q(format!("SELECT max(last_seq) FROM oomlens.agents WHERE {w}")).await,
            t.batches,
            "{node}: agents.last_seq"
        );
        // Raw sample rows: a batch whose rows collector a inserted just before dying, without its
        // commit record, is inserted again through b (the at-least-once window of a crash; the
        // built-in queries collapse such rows by key). Count them; they are bounded by the
        // agent's unacknowledged window.
        let raw = q(format!("SELECT count() FROM oomlens.gpu_samples WHERE {w}")).await;
        duplicates += raw - gpu_keys;
    }
    let window = 4 * 32 * 4 * 60 / 10; // agents × max_in_flight × GPUs × simulated s per 100 ms batch
    assert!(duplicates <= window, "raw duplicate gpu rows {duplicates} exceed the in-flight window");
    eprintln!(
        "failover: {} agents, collector a stored {stored_on_a} batches before the kill, \
         b {sessions_b} sessions and {resent_acked_by_b} re-sent batches acknowledged without insert; \
         raw duplicate gpu rows after the crash: {duplicates}",
        nodes.len()
    );
}
