//! Stored attributions (`oom_attributions`) on a real ClickHouse over the SQL fixtures
//! (`collector/tests/fixtures/sql`, loaded twice so re-sent copies exist): the attributor stores one
//! row per event, in chunks, idempotently; the readers give exactly the live answer (features,
//! attribution, ranked neighbours, the capacity report) with everything stored, with part of it
//! stored, before and after merges, after a forced re-attribution; the rules are re-run on read;
//! the settle delay holds back fresh events; `attribution_breakdown` counts the stored rows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;

use common::*;
use oomlens_cli::capacity::{self, GroupBy};
use oomlens_collector::analysis::queries::{self, ParamValue};
use oomlens_collector::analysis::store::{self, AttributeOptions, RankedNeighbour};
use oomlens_collector::analysis::{self, FeatureWindow};
use oomlens_collector::clickhouse::{Ch, ChConfig};

/// The live answer: features + rules from the samples, the top 3 neighbours from oom_neighbours.
async fn live(
    db: &clickhouse::Client,
    window: &FeatureWindow,
) -> (Vec<analysis::AttributedEvent>, Vec<RankedNeighbour>) {
    let events = analysis::attribute_window_live(db, "oomlens", window).await.unwrap();
    let neighbours = analysis::features::fetch_neighbours(db, "oomlens", window, store::STORED_NEIGHBOURS)
        .await
        .unwrap()
        .iter()
        .map(RankedNeighbour::from)
        .collect();
    (events, neighbours)
}

/// The capacity report by node over `window` (its look-back too).
async fn capacity_by_node(db: &clickhouse::Client, window: &FeatureWindow) -> capacity::CapacityReport {
    let opts = capacity::ReportOptions {
        window_ms: window.window_ms,
        ..capacity::ReportOptions::new(GroupBy::Node, window.since_ms, window.until_ms)
    };
    capacity::build(db, "oomlens", &opts).await.unwrap()
}

async fn stored_rows(db: &clickhouse::Client) -> u64 {
    count(db, "SELECT count() FROM oomlens.oom_attributions").await
}

/// Everything of the window through the stored path must equal the live answer.
async fn assert_same_as_live(
    db: &clickhouse::Client,
    window: &FeatureWindow,
    what: &str,
) -> store::WindowAttribution {
    let (events, neighbours) = live(db, window).await;
    let read = store::read_window(db, "oomlens", window, true).await.unwrap();
    assert_eq!(read.events.len(), events.len(), "{what}: event count");
    for (got, want) in read.events.iter().zip(&events) {
        assert_eq!(got, want, "{what}: event {}", want.features.event_id);
    }
    assert_eq!(read.neighbours, neighbours, "{what}: neighbours");
    assert_eq!(analysis::attribute_window(db, "oomlens", window).await.unwrap(), events, "{what}");
    // The scenario-only reader (capacity report): the same scenarios and neighbours.
    let want: Vec<(String, String, u64, i64, &str)> = events
        .iter()
        .map(|e| {
            let f = &e.features;
            (f.cluster.clone(), f.node.clone(), f.event_id, f.ts_ms, e.attribution.scenario.as_str())
        })
        .collect();
    for with_neighbours in [true, false] {
        let sc = store::read_window_scenarios(db, "oomlens", window, with_neighbours).await.unwrap();
        let got: Vec<(String, String, u64, i64, &str)> = sc
            .events
            .iter()
            .map(|e| (e.cluster.clone(), e.node.clone(), e.event_id, e.ts_ms, e.scenario.as_str()))
            .collect();
        assert_eq!(got, want, "{what}: scenarios");
        if with_neighbours {
            assert_eq!(sc.neighbours, neighbours, "{what}: neighbours of the scenario reader");
        } else {
            assert!(sc.neighbours.is_empty());
        }
        assert_eq!(sc.stored + sc.rescored, read.stored, "{what}");
        assert_eq!(sc.live, read.live, "{what}");
    }
    read
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_and_live_attributions_are_identical() {
    let t0 = std::time::Instant::now();
    let (_server, ch) = migrated_clickhouse().await;
    insert_sql_fixtures(&ch, &FIXTURE_TABLES, 2).await;
    let db = ch.client();
    let distinct = count(db, "SELECT uniqExact(cluster, node, event_id) FROM oomlens.oom_events").await;
    assert!(distinct > 40, "{distinct}");
    step!(t0, "fixtures loaded ({distinct} events)");

    let all = FeatureWindow::ALL;
    let capacity_live = capacity_by_node(db, &all).await;
    // Nothing stored: everything is computed live.
    let read = assert_same_as_live(db, &all, "nothing stored").await;
    assert_eq!((read.stored, read.live), (0, distinct));

    // The attributor, in small chunks (by count and by time span).
    let now = oomlens_cli::timearg::now_ms();
    let opts = AttributeOptions {
        chunk_events: 7,
        chunk_span_ms: 3_600_000,
        ..AttributeOptions::new(0, i64::MAX, now)
    };
    let mut seen = Vec::new();
    let report =
        store::attribute_pending_with_progress(db, "oomlens", &opts, &mut |p| seen.push(p)).await.unwrap();
    assert_eq!((report.pending, report.attributed), (distinct, distinct), "{report:?}");
    assert!(report.chunks >= distinct.div_ceil(7), "{report:?}");
    assert_eq!(seen.last().map(|p| (p.done, p.total)), Some((distinct, distinct)));
    assert_eq!(stored_rows(db).await, distinct, "one row per event");
    step!(t0, "attributed {} events in {} chunks", report.attributed, report.chunks);

    let read = assert_same_as_live(db, &all, "all stored").await;
    assert_eq!((read.stored, read.live), (distinct, 0));
    let capacity_stored = capacity_by_node(db, &all).await;
    assert_eq!(capacity_stored, capacity_live, "the capacity report reads the stored neighbours");
    assert!(!capacity_stored.co_scheduling.is_empty(), "the fixtures have co-scheduled workloads");

    // Idempotent: nothing pending, no new rows.
    let again = store::attribute_pending(db, "oomlens", &opts).await.unwrap();
    assert_eq!((again.pending, again.attributed), (0, 0));
    assert_eq!(stored_rows(db).await, distinct);

    // A narrower window and another look-back.
    let events = analysis::attribute_window_live(db, "oomlens", &all).await.unwrap();
    let mid = events[events.len() / 2].features.ts_ms;
    let narrow = FeatureWindow { since_ms: mid - 3_600_000, until_ms: mid + 1, window_ms: all.window_ms };
    let read = assert_same_as_live(db, &narrow, "narrow window").await;
    assert!(read.stored > 0 && read.live == 0, "{} / {}", read.stored, read.live);
    let other = FeatureWindow { window_ms: 30_000, ..all };
    let read = assert_same_as_live(db, &other, "another look-back").await;
    assert_eq!((read.stored, read.live), (0, distinct), "rows of another look-back are not used");

    // Forced re-attribution: a second row per event until merges (stopped here); readers take one.
    ch.execute("SYSTEM STOP MERGES oomlens.oom_attributions").await.unwrap();
    let forced =
        store::attribute_pending(db, "oomlens", &AttributeOptions { force: true, ..opts }).await.unwrap();
    assert_eq!(forced.attributed, distinct);
    assert_eq!(stored_rows(db).await, 2 * distinct, "replaced only on merge");
    let read = assert_same_as_live(db, &all, "re-attributed, not merged").await;
    assert_eq!(read.stored, distinct);
    let breakdown = |db: &clickhouse::Client| {
        let db = db.clone();
        async move {
            let text = queries::builtin("attribution_breakdown")
                .unwrap()
                .bind(&db, "oomlens", &[ParamValue::Int(0), ParamValue::Int(i64::MAX)])
                .unwrap()
                .fetch_bytes("TSV")
                .unwrap()
                .collect()
                .await
                .unwrap();
            let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
            for line in String::from_utf8(text.to_vec()).unwrap().lines() {
                let f: Vec<&str> = line.split('\t').collect();
                counts.insert((f[0].to_owned(), f[1].to_owned()), f[2].parse().unwrap());
            }
            counts
        }
    };
    let mut expected: BTreeMap<(String, String), u64> = BTreeMap::new();
    for e in &events {
        *expected
            .entry((e.attribution.scenario.as_str().to_owned(), e.features.kind.clone()))
            .or_default() += 1;
    }
    assert_eq!(breakdown(db).await, expected, "attribution_breakdown before merges");
    ch.execute("SYSTEM START MERGES oomlens.oom_attributions").await.unwrap();
    ch.execute("OPTIMIZE TABLE oomlens.oom_attributions FINAL").await.unwrap();
    assert_eq!(stored_rows(db).await, distinct, "ReplacingMergeTree(attributed_ms) keeps one row per event");
    assert_eq!(breakdown(db).await, expected, "attribution_breakdown after merges");
    assert_same_as_live(db, &all, "merged").await;

    // The rules are re-run on read: a stored answer that the current rules would not give is
    // ignored by the readers (the SQL breakdown shows what is stored).
    let victim = &events[0].features;
    {
        // A copy of its row with another scenario and a newer attributed_ms.
        let mut rows =
            store::fetch_stored(db, "oomlens", victim.ts_ms, victim.ts_ms + 1, all.window_ms).await.unwrap();
        rows.retain(|r| r.event_id == victim.event_id && r.node == victim.node);
        let mut row = rows.pop().unwrap();
        row.scenario = "bogus".into();
        row.rules_version = 0;
        row.attributed_ms += 1;
        let mut insert = db
            .insert_unescaped::<oomlens_schema::rows::OomAttributionRow>("oomlens.oom_attributions")
            .await
            .unwrap();
        insert.write(&row).await.unwrap();
        insert.end().await.unwrap();
    }
    let read = assert_same_as_live(db, &all, "tampered stored scenario").await;
    assert_eq!(read.stored, distinct);
    let sc = store::read_window_scenarios(db, "oomlens", &all, true).await.unwrap();
    assert_eq!((sc.stored, sc.rescored), (distinct - 1, 1), "a row of another rules version is re-scored");
    assert!(breakdown(db).await.keys().any(|(s, _)| s == "bogus"), "the SQL shows the stored scenario");
    // The attributor re-scores rows of an older rules version from their stored features.
    let rescore = store::attribute_pending(db, "oomlens", &opts).await.unwrap();
    assert_eq!((rescore.pending, rescore.attributed, rescore.rescored), (0, 0, 1), "{rescore:?}");
    assert_eq!(breakdown(db).await, expected, "the stored scenario follows the current rules again");
    let again = store::attribute_pending(db, "oomlens", &opts).await.unwrap();
    assert_eq!(again.rescored, 0, "{again:?}");
    let sc = store::read_window_scenarios(db, "oomlens", &all, true).await.unwrap();
    assert_eq!((sc.stored, sc.rescored), (distinct, 0));
    assert_same_as_live(db, &all, "re-scored").await;

    // Part stored, part live: only the older half of the events is stored.
    ch.execute("TRUNCATE TABLE oomlens.oom_attributions").await.unwrap();
    let half =
        store::attribute_pending(db, "oomlens", &AttributeOptions { until_ms: mid, ..opts }).await.unwrap();
    assert!(half.attributed > 0 && half.attributed < distinct, "{half:?}");
    let read = assert_same_as_live(db, &all, "half stored").await;
    assert_eq!((read.stored, read.live), (half.attributed, distinct - half.attributed));
    assert_eq!(capacity_by_node(db, &all).await, capacity_live);
    step!(t0, "stored, partly stored and live answers agree");

    // The settle delay: an event that just arrived waits; later it is attributed.
    let fresh_ts = now - 1_000;
    ch.execute(&format!(
        "INSERT INTO oomlens.oom_events (cluster, node, ts_ms, event_id, agent_id, received_ms, kind, source, gpu_index, pid) \
         VALUES ('fresh', 'fresh-node', {fresh_ts}, 1, 'a', {now}, 'cuda_oom', 'log', 0, 1)"
    ))
    .await
    .unwrap();
    let pass = |now_ms: i64| {
        let db = db.clone();
        async move {
            store::attribute_pending(
                &db,
                "oomlens",
                &AttributeOptions { settle_ms: 120_000, ..AttributeOptions::new(0, i64::MAX, now_ms) },
            )
            .await
            .unwrap()
        }
    };
    let early = pass(now + 1_000).await;
    assert_eq!(early.pending, distinct - half.attributed, "the fresh event has not settled: {early:?}");
    let fresh = |db: &clickhouse::Client| {
        let db = db.clone();
        async move { count(&db, "SELECT count() FROM oomlens.oom_attributions WHERE cluster = 'fresh'").await }
    };
    assert_eq!(fresh(db).await, 0);
    // Meanwhile readers compute it live.
    let recent = FeatureWindow { since_ms: fresh_ts, until_ms: now + 1, window_ms: all.window_ms };
    let read = assert_same_as_live(db, &recent, "fresh event").await;
    assert_eq!((read.stored, read.live), (0, 1));
    let late = pass(now + 121_000).await;
    assert_eq!((late.pending, late.attributed), (1, 1));
    assert_eq!(fresh(db).await, 1);
    assert_same_as_live(db, &all, "everything stored again").await;
    step!(t0, "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_attributes_in_the_background() {
    let server = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &["gpu-node-01"]);
    let mut cfg = collector_config(&pki, &server.url(), reserve_addr());
    cfg.attribution.interval_ms = 200;
    cfg.attribution.settle_ms = 0;
    // The fixture events lie a year back.
    cfg.attribution.lookback_ms = 20 * 365 * 86_400_000;
    cfg.attribution.chunk_events = 20;
    let (collector, _stop) = start_collector(cfg).await;
    let ch = Ch::connect(&ChConfig { url: server.url(), ..ChConfig::default() }).await.unwrap();
    insert_sql_fixtures(&ch, &FIXTURE_TABLES, 2).await;
    let db = ch.client();
    let distinct = count(db, "SELECT uniqExact(cluster, node, event_id) FROM oomlens.oom_events").await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while stored_rows(db).await < distinct && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(stored_rows(db).await, distinct, "every event attributed once");
    // A few more passes find nothing to do.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert_eq!(stored_rows(db).await, distinct, "no duplicates from later passes");
    let m = &collector.metrics;
    assert_eq!(m.attributed_events.get(), distinct);
    assert_eq!(m.attribution_errors.get(), 0);
    assert_eq!(m.attribution_pending.get(), 0);
    assert_same_as_live(db, &FeatureWindow::ALL, "attributed by the collector").await;
    collector.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oomlens_attribute_backfills_once() {
    let server = start_clickhouse();
    let cfg = ChConfig { url: server.url(), ..ChConfig::default() };
    let ch = Ch::connect(&cfg).await.unwrap();
    ch.migrate().await.unwrap();
    insert_sql_fixtures(&ch, &FIXTURE_TABLES, 2).await;
    let db = ch.client();
    let distinct = count(db, "SELECT uniqExact(cluster, node, event_id) FROM oomlens.oom_events").await;
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oomlens"))
            .arg("attribute")
            .args(args)
            .args(["--clickhouse-url", &server.url()])
            .env_remove("OOMLENS_COLLECTOR_CONFIG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let doc: serde_json::Value =
        serde_json::from_str(run(&["--json", "--chunk-events", "30"]).trim()).unwrap();
    assert_eq!(
        (doc["pending"].as_u64(), doc["attributed"].as_u64()),
        (Some(distinct), Some(distinct)),
        "{doc}"
    );
    assert!(doc["chunks"].as_u64().unwrap() >= 3, "{doc}");
    assert_eq!(stored_rows(db).await, distinct);
    let text = run(&[]);
    assert!(text.starts_with("attributed 0 of 0 pending OOM events"), "{text}");
    assert_eq!(stored_rows(db).await, distinct, "a second run adds nothing");
    // Bad arguments are refused before anything runs.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oomlens"))
        .args(["attribute", "--since", "yesterday-ish", "--clickhouse-url", &server.url()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--since"));
    assert_same_as_live(db, &FeatureWindow::ALL, "backfilled by the CLI").await;
}
