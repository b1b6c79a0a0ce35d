//! The correlation queries on a real ClickHouse over the SQL fixtures
//! (`collector/tests/fixtures/sql`, also used by the 18.16 vs chdb-core check): every row of
//! `oom_features` decodes into `EventEvidence` (one per event, re-sent copies collapsed, every
//! kind), the features derived from it are the ones the collector stores, and each hand-made case
//! of the `attr-lab` node fires the rule it was written for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use oomlens_collector::analysis::{self, FeatureWindow, Rule};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn features_decode_and_each_case_fires_its_rule() {
    let (_server, ch) = migrated_clickhouse().await;
    insert_sql_fixtures(&ch, &FIXTURE_TABLES, 1).await;
    let db = ch.client();

    let events = analysis::attribute_window_live(db, "oomlens", &FeatureWindow::ALL).await.unwrap();
    let distinct: u64 = db
        .query("SELECT uniqExact(cluster, node, event_id) FROM oomlens.oom_events")
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(events.len() as u64, distinct, "one row per event, re-sent copies collapsed");
    let kinds: std::collections::BTreeSet<_> = events.iter().map(|e| e.features.kind.clone()).collect();
    assert_eq!(kinds.len(), 4, "every event kind is covered: {kinds:?}");
    // The stored path (stored rows re-derived and re-scored, the rest live) covers every event.
    let stored = analysis::attribute_window(db, "oomlens", &FeatureWindow::ALL).await.unwrap();
    assert_eq!(stored.len(), events.len());

    // The hand-made cases, one per rule.
    let expected = [
        (1, Rule::StaticEstimate, 95),
        (2, Rule::BatchActivations, 75),
        (3, Rule::SequenceAttention, 90),
        (4, Rule::NeighboursTookIt, 80),
        (5, Rule::FragmentedCache, 75),
        (6, Rule::FragmentedCache, 75),
        (7, Rule::HostOomKill, 95),
        (8, Rule::XidError, 30),
        (9, Rule::SingleHugeRequest, 65),
        (10, Rule::StaticAtLoad, 85),
        (11, Rule::NeighboursTookIt, 80),
        (12, Rule::NoEvidence, 20),
        (13, Rule::BatchActivations, 75),
        (14, Rule::BatchActivations, 75),
        (15, Rule::NeighboursTookIt, 55),
        (16, Rule::NeighboursTookIt, 55),
        (17, Rule::BatchActivations, 75),
        (18, Rule::BatchActivations, 75),
    ];
    for (case, rule, confidence) in expected {
        let e = events
            .iter()
            .find(|e| {
                e.features.node == "gpu-node-21" && e.features.event_id == 7_000_000_000_000_000_000 + case
            })
            .unwrap_or_else(|| panic!("case {case} missing"));
        assert_eq!(
            (e.attribution.rule, e.attribution.confidence_pct),
            (rule, confidence),
            "case {case}: {:#?}",
            e
        );
        assert!(e.attribution.evidence[0].starts_with(&format!("rule {}", rule.id())));
        if !e.features.truth_scenario.is_empty() {
            assert_eq!(e.features.truth_scenario, e.attribution.scenario.as_str(), "case {case}");
        }
    }
    // The largest rise between two readings of the failing process, computed here from the
    // fixture's samples, is what the query computed.
    let samples: Vec<serde_json::Value> =
        sql_fixture("process_samples").lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut with_rise = 0;
    for e in events.iter().map(|e| &e.features) {
        let (Some(pid), Some(gpu)) = (e.pid, e.gpu_index) else { continue };
        let mut curve: Vec<(i64, u64)> = samples
            .iter()
            .filter(|s| {
                (s["cluster"].as_str(), s["node"].as_str(), s["gpu_index"].as_u64(), s["pid"].as_u64())
                    == (
                        Some(e.cluster.as_str()),
                        Some(e.node.as_str()),
                        Some(u64::from(gpu)),
                        Some(u64::from(pid)),
                    )
            })
            .filter_map(|s| Some((s["ts_ms"].as_i64()?, s["used_bytes"].as_u64()?)))
            .filter(|&(ts, _)| ts >= e.ts_ms - e.window_ms && ts <= e.ts_ms)
            .collect();
        curve.sort_unstable();
        let rise = curve.windows(2).map(|w| w[1].1.saturating_sub(w[0].1)).max().unwrap_or(0);
        let expected = (!curve.is_empty()).then_some(rise);
        assert_eq!(e.own_max_rise, expected, "event {} (pid {pid}): {curve:?}", e.event_id);
        with_rise += usize::from(rise > 0);
    }
    assert!(with_rise >= 5, "the fixture has curves that rise: {with_rise}");
    let c18 = events.iter().find(|e| e.features.event_id == 7_000_000_000_000_000_018).unwrap();
    assert_eq!(c18.features.own_max_rise, Some((40 << 30) + (1 << 29)), "its first step, taken at once");
    let case = |n: u64| events.iter().find(|e| e.features.event_id == 7_000_000_000_000_000_000 + n).unwrap();
    // Inferred phase: young process climbing from its context.
    assert_eq!(case(10).features.phase_source, "inferred");
    assert_eq!(case(10).features.phase_effective, "startup");
    // Static estimate: 13.016 B params × (2 + 2 + 12) B.
    assert_eq!(case(1).features.static_estimate_bytes, Some(13_016_000_000 * 16));
    // ZeRO-3 over 4 in fp32 with Adam: (4 + 4 + 8) B / 4 per parameter.
    assert_eq!(case(13).features.static_estimate_bytes, Some(2_775_000_000 * 16 / 4));
    // Contention: the message lists the neighbour; the samples show it grew 34 GiB.
    let c4 = &case(4).features;
    assert_eq!(c4.others_bytes, Some(42 << 30));
    assert_eq!(c4.top_neighbour_growth_bytes, 34 << 30);
    assert!(
        case(4).attribution.evidence.iter().any(|l| l.contains("grew by +33.50 GiB")),
        "{:?}",
        case(4).attribution.evidence
    );
    assert!(case(9).attribution.missing.contains(&"job shape"));
    // Log lines without a pid: the failing process is recognised in the message's process list.
    // (A stored event of an agent that did not pick the failing process out of the list: the
    // features do.)
    assert_eq!((case(14).features.others_listed, case(14).features.context_bytes), (0, Some(1 << 29)));
    assert_eq!((case(15).features.others_listed, case(15).features.others_bytes), (1, Some(28 << 30)));
    assert_eq!(case(15).features.others_from, "message");

    // Neighbours: ranked by growth, the failing process excluded; host OOM: the whole node.
    let neighbours =
        analysis::features::fetch_neighbours(db, "oomlens", &FeatureWindow::ALL, 5).await.unwrap();
    let of = |n: u64| -> Vec<u32> {
        neighbours
            .iter()
            .filter(|x| x.event_id == 7_000_000_000_000_000_000 + n)
            .map(|x| x.neighbour_pid)
            .collect()
    };
    assert_eq!(of(4), [60_004, 60_005], "the growing server first");
    assert_eq!(of(7), [60_007, 60_008], "host OOM: processes on every GPU of the node");
    assert_eq!(of(11), [60_011]);
    let top = neighbours.iter().find(|x| x.event_id == 7_000_000_000_000_000_004).unwrap();
    assert_eq!((top.growth_bytes, top.present, top.neighbour_name.as_str()), (34 << 30, 1, "vllm"));
    let one = analysis::features::fetch_neighbours(db, "oomlens", &FeatureWindow::ALL, 1).await.unwrap();
    assert!(one.iter().filter(|x| x.event_id == 7_000_000_000_000_000_004).count() == 1);
    // One event, as a postmortem asks for it.
    let ts4 = case(4).features.ts_ms;
    let explained = analysis::explain_event(
        db,
        "oomlens",
        "attr-lab",
        "gpu-node-21",
        7_000_000_000_000_000_004,
        ts4,
        60_000,
        3,
    )
    .await
    .unwrap()
    .expect("case 4");
    assert_eq!(explained.event, *case(4));
    assert_eq!(explained.neighbours.iter().map(|n| n.neighbour_pid).collect::<Vec<_>>(), [60_004, 60_005]);
    let none =
        analysis::explain_event(db, "oomlens", "attr-lab", "gpu-node-21", 1, ts4, 60_000, 3).await.unwrap();
    assert!(none.is_none());
    drop(ch);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
}
