//! Events held in the agent's merge window survive `kill -9`: the real agent binary
//! with a disk spool journals every event before it enters the merger; killed while events are
//! held, a restarted agent replays them, and each reaches ClickHouse exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::*;
use oomlens_agent::detect::merge::{DetectConfig, EventMerger};
use oomlens_agent::spool::journal;

/// Event ids in the spool's segment files.
fn spooled_event_ids(dir: &Path) -> BTreeSet<u64> {
    spooled_batches(dir).iter().flat_map(|(_, b)| b.events.iter().map(|e| e.event_id)).collect()
}

/// Every `oom_events` row of `node` in `[lo, hi)` (raw rows: before any ReplacingMergeTree merge).
async fn stored_event_ids(db: &clickhouse::Client, node: &str, lo: i64, hi: i64) -> Vec<u64> {
    let mut ids = db
        .query(&format!(
            "SELECT event_id FROM oomlens.oom_events WHERE node = '{node}' AND ts_ms >= {lo} AND ts_ms < {hi}"
        ))
        .fetch_all::<u64>()
        .await
        .unwrap();
    ids.sort_unstable();
    ids
}

/// Event ids a restarted agent sends for the events its journal holds (merged the way the agent
/// merges them when it replays the journal).
fn journaled_event_ids(spool_dir: &Path) -> BTreeSet<u64> {
    let mut merger = EventMerger::new(DetectConfig::default().merge_grace_ms as i64);
    let mut out = BTreeSet::new();
    for e in journal::read_pending(spool_dir).unwrap() {
        out.extend(merger.restore(e, Vec::new()).into_iter().map(|r| r.event.event_id));
    }
    out.extend(merger.drain().iter().map(|e| e.event_id));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_held_for_merging_survive_kill_9_and_arrive_exactly_once() {
    let t0 = std::time::Instant::now();
    let ch = start_clickhouse();
    step!(t0, "ClickHouse up");
    let dir = tempfile::tempdir().unwrap();
    let node = "node-journal";
    let pki = pki(dir.path(), &[node]);
    let addr = reserve_addr();
    let (collector, _stop) = start_collector(collector_config(&pki, &ch.url(), addr)).await;
    let db = client(&ch.url());
    let spool_dir = dir.path().join("spool");

    // Events with a pid wait an hour of source time for a matching report: all of them are held
    // (only in the journal) when the agent is killed.
    let mut cfg = agent_config(&pki, node, addr, 54, 3600, 20.0);
    cfg.spool.dir = Some(spool_dir.clone());
    cfg.spool.fsync = oomlens_agent::spool::FsyncPolicy::Interval;
    cfg.detect.merge_grace_ms = 3_600_000;
    let mut first = AgentProcess::spawn(&cfg, dir.path(), "first");
    step!(t0, "first agent started");
    let mut held = Vec::new();
    for _ in 0..600 {
        held = journal::read_pending(&spool_dir).unwrap();
        if held.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(held.len() >= 2, "no event was held; log:\n{}", first.log_text());
    let (lo, hi) = (START_MS, START_MS + 1_000_000_000);
    // Let the batches around the held events be acknowledged, so that only the journal has them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.kill9();
    step!(t0, "first agent killed");
    let held: Vec<u64> = journal::read_pending(&spool_dir).unwrap().iter().map(|e| e.event_id).collect();
    let replayed = journaled_event_ids(&spool_dir);
    let stored_before: BTreeSet<u64> = stored_event_ids(&db, node, lo, hi).await.into_iter().collect();
    let spooled = spooled_event_ids(&spool_dir);
    assert!(!held.is_empty());
    for id in &held {
        assert!(
            !stored_before.contains(id) && !spooled.contains(id),
            "held event {id} was only in the journal at the kill"
        );
    }

    // The restarted agent (default grace) replays the journal.
    let start2 = START_MS + 10_000_000;
    let mut cfg2 = agent_config(&pki, node, addr, 54, 20, 20.0);
    cfg2.source.start_ms = start2;
    cfg2.spool = cfg.spool.clone();
    let mut second = AgentProcess::spawn(&cfg2, dir.path(), "second");
    step!(t0, "second agent started");
    let status = second.wait(Duration::from_secs(60)).await;
    step!(t0, "second agent exited");
    assert!(status.success(), "restarted agent failed: {status}; log:\n{}", second.log_text());
    collector.shutdown().await;
    let log = second.log_text();
    assert!(log.contains("replaying journaled events"), "{log}");

    // Every event of the first run that was stored, spooled or journaled: each exactly once.
    let ids = stored_event_ids(&db, node, lo, start2).await;
    let unique: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "no event stored twice: {ids:?}");
    assert!(!replayed.is_empty() && replayed.is_subset(&held.iter().copied().collect()));
    let want: BTreeSet<u64> = stored_before.union(&spooled).chain(replayed.iter()).copied().collect();
    assert_eq!(unique, want, "the first run's events, the held ones included");
    // The journal is empty again once everything is spooled and acknowledged.
    assert!(journal::read_pending(&spool_dir).unwrap().is_empty());
    assert_eq!(std::fs::metadata(spool_dir.join(journal::JOURNAL_FILE)).unwrap().len(), 0);
    // The second run's own events too, once each.
    let ids2 = stored_event_ids(&db, node, start2, hi).await;
    assert_eq!(ids2.len(), ids2.iter().collect::<BTreeSet<_>>().len());
}
