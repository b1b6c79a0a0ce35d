//! At-least-once with the real agent binary and its disk spool: a collector outage, `kill -9` of
//! the agent, and a torn/corrupt spool — every spooled row reaches ClickHouse exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::*;
use oomlens_agent::source::Source;
use oomlens_agent::source::sim::{SimConfig, Simulator};
use oomlens_agent::spool::segment;

/// What the simulator produces at each simulated second (the agent samples once per second).
#[derive(Debug, Default, Clone)]
struct Second {
    gpu: u64,
    process: u64,
    events: Vec<u64>,
}

fn replay(node: &str, seed: u64, start_ms: i64, seconds: i64) -> Vec<Second> {
    let mut sim = Simulator::new(node, SimConfig { gpus: 4, seed, ..Default::default() }, start_ms).unwrap();
    (0..seconds)
        .map(|k| {
            let r = sim.sample(start_ms + k * 1000);
            Second {
                gpu: r.gpu_samples.len() as u64,
                process: r.process_samples.len() as u64,
                events: r.events.iter().map(|e| e.event_id).collect(),
            }
        })
        .collect()
}

/// Which events of a run must be stored.
enum Events {
    /// Those the simulator produced in the stored seconds.
    OfSeconds,
    /// Exactly these among the events before the given time (an event may be held by the
    /// merger's grace window past its second's batch, so after a `kill -9` the set is what was
    /// stored, spooled or journaled, not what was sampled — and a journaled event of the second
    /// the agent was killed in lies after the last spooled second).
    Exactly(BTreeSet<u64>, i64),
}

/// Asserts that exactly the given simulated seconds of a run are stored, each row exactly once.
async fn assert_exactly_once(
    db: &clickhouse::Client,
    node: &str,
    seed: u64,
    start_ms: i64,
    seconds: &BTreeSet<i64>,
    span: i64,
    events: Events,
) {
    let expected = replay(node, seed, start_ms, span);
    let (lo, hi) = (start_ms, start_ms + span * 1000);
    let w = format!("node = '{node}' AND ts_ms >= {lo} AND ts_ms < {hi}");
    let stored: BTreeSet<i64> = db
        .query(&format!("SELECT DISTINCT ts_ms FROM oomlens.gpu_samples WHERE {w}"))
        .fetch_all::<i64>()
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t - start_ms) / 1000)
        .collect();
    assert_eq!(&stored, seconds, "{node}: the simulated seconds stored");
    let want = |f: &dyn Fn(&Second) -> u64| seconds.iter().map(|s| f(&expected[*s as usize])).sum::<u64>();
    let gpu = count(db, &format!("SELECT count() FROM oomlens.gpu_samples WHERE {w}")).await;
    let gpu_keys =
        count(db, &format!("SELECT uniqExact(gpu_index, ts_ms) FROM oomlens.gpu_samples WHERE {w}")).await;
    assert_eq!((gpu, gpu_keys), (want(&|s| s.gpu), want(&|s| s.gpu)), "{node}: gpu_samples exactly once");
    let procs = count(db, &format!("SELECT count() FROM oomlens.process_samples WHERE {w}")).await;
    let proc_keys =
        count(db, &format!("SELECT uniqExact(gpu_index, pid, ts_ms) FROM oomlens.process_samples WHERE {w}"))
            .await;
    let want_procs = want(&|s| s.process);
    assert!(want_procs > 0);
    assert_eq!((procs, proc_keys), (want_procs, want_procs), "{node}: process_samples exactly once");
    // Raw rows, before any merge of the ReplacingMergeTree: no duplicate was inserted at all.
    let (mut ids, mut want_ids): (Vec<u64>, Vec<u64>) = match events {
        Events::OfSeconds => (
            event_ids(db, node, lo, hi).await,
            seconds.iter().flat_map(|s| expected[*s as usize].events.clone()).collect(),
        ),
        Events::Exactly(set, until_ms) => {
            (event_ids(db, node, lo, until_ms).await, set.into_iter().collect())
        }
    };
    ids.sort_unstable();
    want_ids.sort_unstable();
    assert_eq!(ids, want_ids, "{node}: oom_events exactly once");
}

async fn event_ids(db: &clickhouse::Client, node: &str, lo: i64, hi: i64) -> Vec<u64> {
    db.query(&format!(
        "SELECT event_id FROM oomlens.oom_events WHERE node = '{node}' AND ts_ms >= {lo} AND ts_ms < {hi}"
    ))
    .fetch_all::<u64>()
    .await
    .unwrap()
}

async fn seconds_stored(db: &clickhouse::Client, node: &str, start_ms: i64) -> BTreeSet<i64> {
    db.query(&format!(
        "SELECT DISTINCT ts_ms FROM oomlens.gpu_samples WHERE node = '{node}' AND ts_ms >= {start_ms} AND ts_ms < {}",
        start_ms + 1_000_000_000
    ))
    .fetch_all::<i64>()
    .await
    .unwrap()
    .into_iter()
    .map(|t| (t - start_ms) / 1000)
    .collect()
}

/// What a spool record holds: simulated seconds of its samples, and its event ids.
#[derive(Debug, Clone, Default)]
struct Spooled {
    seconds: BTreeSet<i64>,
    events: BTreeSet<u64>,
}

/// The records in the spool's segment files, by seq.
fn spooled(dir: &Path, start_ms: i64) -> BTreeMap<u64, Spooled> {
    spooled_batches(dir)
        .into_iter()
        .map(|(seq, b)| {
            let seconds = b.gpu_samples.iter().map(|g| (g.ts_ms - start_ms) / 1000).collect();
            (seq, Spooled { seconds, events: b.events.iter().map(|e| e.event_id).collect() })
        })
        .collect()
}

/// Event ids a restarted agent sends for the events its journal held at a `kill -9` (merged the
/// way the agent merges them when it replays the journal).
fn journaled_event_ids(spool_dir: &Path) -> BTreeSet<u64> {
    let grace = oomlens_agent::detect::merge::DetectConfig::default().merge_grace_ms as i64;
    let mut merger = oomlens_agent::detect::merge::EventMerger::new(grace);
    let mut out = BTreeSet::new();
    for e in oomlens_agent::spool::journal::read_pending(spool_dir).unwrap() {
        out.extend(merger.restore(e, Vec::new()).into_iter().map(|r| r.event.event_id));
    }
    out.extend(merger.drain().iter().map(|e| e.event_id));
    out
}

/// (a) The collector stops and stays down for 30 real seconds while the agent keeps sampling (2×
/// simulated time, the agent's default back-off cap and idle timeout, so reconnection backs off to
/// its cap), then comes back: every sample and event is in ClickHouse exactly once, raw rows
/// included. (A crash at an arbitrary instant instead can repeat the rows of the flush it cut
/// short — the documented at-least-once window that the built-in queries collapse;
/// `exactly_once.rs` crashes the writer at each fault point and checks the answers.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn collector_outage_then_back_delivers_every_row_exactly_once() {
    let t0 = std::time::Instant::now();
    let ch = start_clickhouse();
    step!(t0, "ClickHouse up");
    let dir = tempfile::tempdir().unwrap();
    let node = "node-outage";
    let pki = pki(dir.path(), &[node]);
    let addr = reserve_addr();
    let (collector, _stop) = start_collector(collector_config(&pki, &ch.url(), addr)).await;
    let db = client(&ch.url());

    let (seed, duration, speed) = (51, 100, 2.0);
    let mut cfg = agent_config(&pki, node, addr, seed, duration, speed);
    cfg.spool.dir = Some(dir.path().join("spool"));
    let defaults = oomlens_agent::config::AgentConfig::default().uplink;
    cfg.uplink.backoff_max_ms = defaults.backoff_max_ms;
    cfg.uplink.idle_timeout_ms = defaults.idle_timeout_ms;
    let mut agent = AgentProcess::spawn(&cfg, dir.path(), "agent");
    step!(t0, "agent started");
    let mut streaming = false;
    for _ in 0..200 {
        if !seconds_stored(&db, node, START_MS).await.is_empty() {
            streaming = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(streaming, "agent never delivered; log:\n{}", agent.log_text());
    step!(t0, "streaming");
    collector.shutdown().await;
    step!(t0, "collector down");
    let before = seconds_stored(&db, node, START_MS).await.len();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let (collector, _stop2) = start_collector(collector_config(&pki, &ch.url(), addr)).await;
    step!(t0, "collector back");
    let status = agent.wait(Duration::from_secs(120)).await;
    step!(t0, "agent exited");
    assert!(status.success(), "agent failed: {status}; log:\n{}", agent.log_text());
    collector.shutdown().await;

    assert!(
        before < duration as usize - 30,
        "the outage happened mid-stream ({before} seconds stored before)"
    );
    let log = agent.log_text();
    assert!(log.matches("connected").count() >= 2, "the agent reconnected; log:\n{log}");
    let all = (0..duration as i64).collect();
    assert_exactly_once(&db, node, seed, START_MS, &all, duration as i64, Events::OfSeconds).await;
}

/// (b) `kill -9` of the agent while batches are spooled but not acknowledged; a restart with the
/// same spool delivers them under the same boot id, exactly once, and then its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_and_restart_loses_nothing_spooled_and_duplicates_nothing() {
    let t0 = std::time::Instant::now();
    let ch = start_clickhouse();
    step!(t0, "ClickHouse up");
    let dir = tempfile::tempdir().unwrap();
    let node = "node-kill";
    let pki = pki(dir.path(), &[node]);
    let addr = reserve_addr();
    let (collector, _stop) = start_collector(collector_config(&pki, &ch.url(), addr)).await;
    let db = client(&ch.url());
    let spool_dir = dir.path().join("spool");

    let seed = 52;
    let mut cfg = agent_config(&pki, node, addr, seed, 3600, 20.0);
    cfg.spool.dir = Some(spool_dir.clone());
    cfg.spool.fsync = oomlens_agent::spool::FsyncPolicy::Never;
    let mut first = AgentProcess::spawn(&cfg, dir.path(), "first");
    step!(t0, "first agent started");
    for _ in 0..200 {
        if seconds_stored(&db, node, START_MS).await.len() >= 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Acknowledged batches, then a stretch that can only be spooled, then kill -9 mid-stream.
    step!(t0, "streaming");
    collector.shutdown().await;
    step!(t0, "collector down");
    let acked = seconds_stored(&db, node, START_MS).await.len() as i64;
    assert!(acked >= 10, "agent streamed before the kill; log:\n{}", first.log_text());
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let events_stored: BTreeSet<u64> =
        event_ids(&db, node, START_MS, START_MS + 1_000_000_000).await.into_iter().collect();
    first.kill9();
    step!(t0, "first agent killed");
    let records = spooled(&spool_dir, START_MS);
    let on_disk: BTreeSet<i64> = records.values().flat_map(|r| r.seconds.clone()).collect();
    let events_spooled: BTreeSet<u64> = records.values().flat_map(|r| r.events.clone()).collect();
    // Events held in the merge window at the kill are in the event journal and replayed.
    let events_journaled = journaled_event_ids(&spool_dir);
    let spooled_through = *on_disk.last().unwrap();
    assert!(
        spooled_through >= acked + 10,
        "unacknowledged batches were spooled ({acked} acked, {spooled_through})"
    );

    let (collector, _stop2) = start_collector(collector_config(&pki, &ch.url(), addr)).await;
    let start2 = START_MS + 10_000_000;
    let mut cfg2 = agent_config(&pki, node, addr, seed, 20, 20.0);
    cfg2.source.start_ms = start2;
    cfg2.spool = cfg.spool.clone();
    let mut second = AgentProcess::spawn(&cfg2, dir.path(), "second");
    step!(t0, "second agent started");
    let status = second.wait(Duration::from_secs(60)).await;
    step!(t0, "second agent exited");
    assert!(status.success(), "restarted agent failed: {status}; log:\n{}", second.log_text());
    collector.shutdown().await;

    assert!(second.log_text().contains("disk spool open"), "{}", second.log_text());
    // Everything the killed agent had spooled, and nothing it had not produced.
    let first_run = (0..=spooled_through).collect();
    let events = Events::Exactly(
        events_stored.union(&events_spooled).chain(&events_journaled).copied().collect(),
        start2,
    );
    assert_exactly_once(&db, node, seed, START_MS, &first_run, spooled_through + 1, events).await;
    assert_exactly_once(&db, node, seed, start2, &(0..20).collect(), 20, Events::OfSeconds).await;
    let boots =
        count(&db, &format!("SELECT uniqExact(boot_id) FROM oomlens.agents WHERE node = '{node}'")).await;
    assert_eq!(boots, 1, "the restarted agent kept the spool's boot id");
    assert!(segment_files(&spool_dir).is_empty(), "acknowledged segments are deleted");
}

/// (c) A corrupt record in the middle and a torn tail in the spool: both are skipped with a
/// warning; every other spooled batch replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_torn_and_corrupt_spool_is_repaired_and_the_rest_replays() {
    let t0 = std::time::Instant::now();
    let ch = start_clickhouse();
    step!(t0, "ClickHouse up");
    let dir = tempfile::tempdir().unwrap();
    let node = "node-torn";
    let pki = pki(dir.path(), &[node]);
    let addr = reserve_addr();
    let spool_dir = dir.path().join("spool");

    // No collector: the first agent spools everything and gives up draining.
    let (seed, duration) = (53, 40);
    let mut cfg = agent_config(&pki, node, addr, seed, duration, 40.0);
    cfg.spool.dir = Some(spool_dir.clone());
    cfg.uplink.drain_timeout_ms = 300;
    let mut first = AgentProcess::spawn(&cfg, dir.path(), "first");
    let status = first.wait(Duration::from_secs(30)).await;
    step!(t0, "first agent exited");
    assert!(!status.success(), "nothing could be acknowledged; log:\n{}", first.log_text());
    let records = spooled(&spool_dir, START_MS);
    let all: BTreeSet<i64> = records.values().flat_map(|r| r.seconds.clone()).collect();
    assert_eq!(all, (0..duration as i64).collect(), "every second was spooled");

    // Corrupt one record in the middle of the last segment and append half a record to it.
    let seg = segment_files(&spool_dir).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let scan = segment::scan(&bytes);
    assert!(scan.records.len() >= 3, "{} records", scan.records.len());
    let victim = scan.records[scan.records.len() / 2];
    let lost = records[&victim.header.seq].clone();
    let events: BTreeSet<u64> = records
        .iter()
        .filter(|(seq, _)| **seq != victim.header.seq)
        .flat_map(|(_, r)| r.events.clone())
        .collect();
    bytes[victim.offset as usize + victim.len as usize - 5] ^= 0x41;
    let last = scan.records[scan.records.len() - 1];
    let torn = bytes[last.offset as usize..(last.offset + u64::from(last.len) / 2) as usize].to_vec();
    bytes.extend_from_slice(&torn);
    std::fs::write(&seg, &bytes).unwrap();

    let (collector, _stop) = start_collector(collector_config(&pki, &ch.url(), addr)).await;
    let start2 = START_MS + 10_000_000;
    let mut cfg2 = agent_config(&pki, node, addr, seed, 10, 20.0);
    cfg2.source.start_ms = start2;
    cfg2.spool = cfg.spool.clone();
    let mut second = AgentProcess::spawn(&cfg2, dir.path(), "second");
    step!(t0, "second agent started");
    let status = second.wait(Duration::from_secs(60)).await;
    step!(t0, "second agent exited");
    assert!(status.success(), "restarted agent failed: {status}; log:\n{}", second.log_text());
    collector.shutdown().await;

    let log = second.log_text();
    assert!(log.contains("torn tail truncated"), "{log}");
    assert!(log.contains("corrupt records skipped"), "{log}");
    let db = client(&ch.url());
    let expected: BTreeSet<i64> = all.difference(&lost.seconds).copied().collect();
    assert_exactly_once(
        &db,
        node,
        seed,
        START_MS,
        &expected,
        duration as i64,
        Events::Exactly(events, start2),
    )
    .await;
    assert_exactly_once(&db, node, seed, start2, &(0..10).collect(), 10, Events::OfSeconds).await;
}

/// (d) A collector that takes the batches but cannot store them (its ClickHouse died after the
/// session began) never acknowledges them: the agent stops at its drain timeout, with the batches
/// still pending, although its session is open (an open session must not hold it past the
/// deadline), and the collector stops after its flush timeout without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_stops_at_its_drain_timeout_while_its_session_waits_for_acks() {
    let t0 = std::time::Instant::now();
    let mut ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let node = "node-unacked";
    let pki = pki(dir.path(), &[node]);
    let addr = reserve_addr();
    let mut ccfg = collector_config(&pki, &ch.url(), addr);
    ccfg.clickhouse.request_timeout_ms = 1_000;
    ccfg.collector.shutdown_flush_timeout_ms = 1_000;
    let (collector, _stop) = start_collector(ccfg).await;
    step!(t0, "collector up");

    // 200 simulated seconds at 20×: ten seconds of streaming, then a drain of two.
    let mut cfg = agent_config(&pki, node, addr, 71, 200, 20.0);
    cfg.uplink.drain_timeout_ms = 2_000;
    let agent = spawn_agent(cfg);
    let db = client(&ch.url());
    let mut stored = 0;
    for _ in 0..100 {
        // The commit record: once it is written the collector acknowledges, whatever happens next.
        stored = count(&db, &format!("SELECT count() FROM oomlens.agents WHERE node = '{node}'")).await;
        if stored > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(stored > 0, "the agent's session never stored a batch");
    ch.kill().unwrap();
    let killed = std::time::Instant::now();
    step!(t0, "ClickHouse killed while the agent streams");
    let totals = tokio::time::timeout(Duration::from_secs(60), agent)
        .await
        .expect("the agent stops once its drain timeout has passed")
        .unwrap();
    step!(t0, "agent stopped {:?} after the kill", killed.elapsed());
    // (Its session was open: the collector had stored and committed some of its batches.)
    assert!(totals.pending_batches > 0, "{totals:?}");
    // The collector too: it stops trying to store what it holds after its flush timeout.
    let stats = collector.sink_stats.clone();
    tokio::time::timeout(Duration::from_secs(60), collector.shutdown())
        .await
        .expect("the collector stops once its flush timeout has passed");
    assert!(stats.unstored() > 0, "the collector held batches it could not store");
    step!(t0, "collector stopped");
}
