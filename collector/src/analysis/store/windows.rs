//! The readers' side: the attributions of a time window from the stored rows (the latest row
//! of each event; the current rules re-run on the stored features) plus the events not stored
//! yet, computed live over the narrow spans they cover.

use std::collections::HashSet;

use oomlens_schema::Scenario;
use serde::{Deserialize, Serialize};

use super::backfill::{chunks, compute_chunk, fetch_pending};
use super::rows::{fetch_stored, into_parts, table, zip_neighbours};
use super::{
    DEFAULT_CHUNK_EVENTS, DEFAULT_CHUNK_SPAN_MS, Key, RankedNeighbour, STORED_NEIGHBOURS, key_of,
    latest_per_event, sort_newest_first, without_stored,
};
use crate::analysis::features::{FeatureWindow, OomFeatures};
use crate::analysis::rules::{RULES_VERSION, attribute};
use crate::analysis::{AttributedEvent, AttributionError};

/// The features of every event of a window and (when asked for) their ranked neighbours.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowFeatures {
    /// Every event of the window, newest first (as `oom_features` orders them).
    pub features: Vec<OomFeatures>,
    /// Their top-ranked neighbours, best first per event, in the order of `features` (empty
    /// unless asked for).
    pub neighbours: Vec<RankedNeighbour>,
    /// How many events came from the stored table.
    pub stored: u64,
    /// How many were computed live (not stored yet, or stored with another look-back).
    pub live: u64,
}

/// The attributed events of a window and (when asked for) their ranked neighbours.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowAttribution {
    /// Every event of the window, newest first (as `oom_features` orders them).
    pub events: Vec<AttributedEvent>,
    /// Their top-ranked neighbours, best first per event (empty unless asked for).
    pub neighbours: Vec<RankedNeighbour>,
    /// How many events came from the stored table.
    pub stored: u64,
    /// How many were computed live (not stored yet, or stored with another look-back).
    pub live: u64,
}

/// The features of every event of `window`: the stored rows plus the events not stored yet,
/// computed live in chunks; with `neighbours`, also the top [`STORED_NEIGHBOURS`] neighbours of
/// each event.
pub async fn read_window_features(
    client: &clickhouse::Client,
    db: &str,
    window: &FeatureWindow,
    neighbours: bool,
) -> Result<WindowFeatures, AttributionError> {
    let window_ms = window.window_ms.max(0);
    // The unstored events first, then the stored rows: an event the attributor stores in between
    // is then in both lists (and counted once, below) rather than in neither.
    let missing =
        fetch_pending(client, db, window.since_ms, window.until_ms, i64::MAX, i64::MAX, window_ms, false)
            .await?;
    let stored = fetch_stored(client, db, window.since_ms, window.until_ms, window_ms).await?;
    let missing = without_stored(missing, &stored);
    let (n_stored, n_live) = (stored.len() as u64, missing.len() as u64);
    let mut rows: Vec<(OomFeatures, Vec<RankedNeighbour>)> =
        stored.into_iter().map(|r| into_parts(r, neighbours)).collect();
    let top_n = if neighbours { STORED_NEIGHBOURS } else { 0 };
    for chunk in chunks(&missing, DEFAULT_CHUNK_EVENTS, DEFAULT_CHUNK_SPAN_MS) {
        rows.extend(compute_chunk(client, db, chunk, window_ms, top_n).await?);
    }
    // Newest first, like oom_features; several stored rows of one event were collapsed above,
    // and an event is either stored or missing.
    sort_newest_first(&mut rows);
    tracing::debug!(stored = n_stored, live = n_live, "features of a window");
    let mut out = WindowFeatures { stored: n_stored, live: n_live, ..WindowFeatures::default() };
    out.features.reserve(rows.len());
    for (features, n) in rows {
        out.neighbours.extend(n);
        out.features.push(features);
    }
    Ok(out)
}

/// Every event of `window` attributed by the current rules ([`read_window_features`]).
pub async fn read_window(
    client: &clickhouse::Client,
    db: &str,
    window: &FeatureWindow,
    neighbours: bool,
) -> Result<WindowAttribution, AttributionError> {
    let w = read_window_features(client, db, window, neighbours).await?;
    Ok(WindowAttribution {
        events: w
            .features
            .into_iter()
            .map(|features| {
                let attribution = attribute(&features);
                AttributedEvent { features, attribution }
            })
            .collect(),
        neighbours: w.neighbours,
        stored: w.stored,
        live: w.live,
    })
}

/// The stored columns a scenario count needs: the key, the answer and its rules version, the
/// neighbours.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub(super) struct StoredAnswer {
    pub(super) cluster: String,
    pub(super) node: String,
    pub(super) event_id: u64,
    pub(super) ts_ms: i64,
    pub(super) attributed_ms: i64,
    pub(super) rules_version: u32,
    pub(super) scenario: String,
    pub(super) neighbour_workloads: Vec<String>,
    pub(super) neighbour_pids: Vec<u32>,
    pub(super) neighbour_used_bytes: Vec<u64>,
    pub(super) neighbour_growth_bytes: Vec<i64>,
}

/// One event's scenario by the current rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventScenario {
    /// Cluster.
    pub cluster: String,
    /// Node.
    pub node: String,
    /// Event id.
    pub event_id: u64,
    /// Failure time.
    pub ts_ms: i64,
    /// The scenario.
    pub scenario: Scenario,
}

/// The scenario of every event of a window and (when asked for) their ranked neighbours.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowScenarios {
    /// Every event of the window, newest first.
    pub events: Vec<EventScenario>,
    /// Their top-ranked neighbours, best first per event, in the order of `events`.
    pub neighbours: Vec<RankedNeighbour>,
    /// Events answered from the stored scenario (stored by the current rules version).
    pub stored: u64,
    /// Events whose stored features were re-scored (stored by another rules version).
    pub rescored: u64,
    /// Events computed live.
    pub live: u64,
}

/// The scenario of every event of `window` by the current rules, reading as little as possible:
/// a stored row written by the current [`RULES_VERSION`] answers with its stored scenario (the
/// same rules on the same features), one written by another version is re-scored from its stored
/// features, and events not stored yet are computed live. Equal to the scenarios of
/// [`read_window`] (the integration test checks it); used by the capacity report.
pub async fn read_window_scenarios(
    client: &clickhouse::Client,
    db: &str,
    window: &FeatureWindow,
    neighbours: bool,
) -> Result<WindowScenarios, AttributionError> {
    let window_ms = window.window_ms.max(0);
    // As in read_window_features: unstored first, then stored; an event in both counts as stored.
    let missing =
        fetch_pending(client, db, window.since_ms, window.until_ms, i64::MAX, i64::MAX, window_ms, false)
            .await?;
    let mut columns = <StoredAnswer as clickhouse::Row>::COLUMN_NAMES.to_vec();
    if !neighbours {
        // Empty arrays in their place: same row layout, nothing read.
        columns.truncate(columns.len() - 4);
        columns.extend([
            "CAST([] AS Array(String))",
            "CAST([] AS Array(UInt32))",
            "CAST([] AS Array(UInt64))",
            "CAST([] AS Array(Int64))",
        ]);
    }
    let sql = format!(
        "SELECT {} FROM {} WHERE ts_ms >= ? AND ts_ms < ? AND window_ms = ?",
        columns.join(", "),
        table(db)?
    );
    let answers = client
        .query(&sql)
        .bind(window.since_ms)
        .bind(window.until_ms)
        .bind(window_ms)
        .fetch_all::<StoredAnswer>()
        .await?;
    let answers = latest_per_event(answers, |a| a.attributed_ms);
    let mut out = WindowScenarios::default();
    let mut rows: Vec<(EventScenario, Vec<RankedNeighbour>)> = Vec::with_capacity(answers.len());
    let mut outdated: Vec<StoredAnswer> = Vec::new();
    for a in answers {
        match a.scenario.parse::<Scenario>() {
            Ok(scenario) if a.rules_version == RULES_VERSION => {
                let ranked = if neighbours { answer_neighbours(&a) } else { Vec::new() };
                let ev = EventScenario {
                    cluster: a.cluster,
                    node: a.node,
                    event_id: a.event_id,
                    ts_ms: a.ts_ms,
                    scenario,
                };
                rows.push((ev, ranked));
            }
            _ => outdated.push(a),
        }
    }
    out.stored = rows.len() as u64;
    if let (Some(lo), Some(hi)) =
        (outdated.iter().map(|a| a.ts_ms).min(), outdated.iter().map(|a| a.ts_ms).max())
    {
        let wanted: HashSet<Key> = outdated.iter().map(|a| key_of(&a.cluster, &a.node, a.event_id)).collect();
        for r in fetch_stored(client, db, lo, hi.saturating_add(1), window_ms).await? {
            if wanted.contains(&key_of(&r.cluster, &r.node, r.event_id)) {
                let (f, ranked) = into_parts(r, neighbours);
                rows.push((scenario_row(&f), ranked));
                out.rescored += 1;
            }
        }
    }
    let missing = without_stored(missing, rows.iter().map(|(e, _)| e));
    let top_n = if neighbours { STORED_NEIGHBOURS } else { 0 };
    for chunk in chunks(&missing, DEFAULT_CHUNK_EVENTS, DEFAULT_CHUNK_SPAN_MS) {
        for (f, ranked) in compute_chunk(client, db, chunk, window_ms, top_n).await? {
            rows.push((scenario_row(&f), ranked));
            out.live += 1;
        }
    }
    sort_newest_first(&mut rows);
    out.events.reserve(rows.len());
    for (ev, ranked) in rows {
        out.neighbours.extend(ranked);
        out.events.push(ev);
    }
    tracing::debug!(stored = out.stored, rescored = out.rescored, live = out.live, "scenarios of a window");
    Ok(out)
}

fn scenario_row(f: &OomFeatures) -> EventScenario {
    EventScenario {
        cluster: f.cluster.clone(),
        node: f.node.clone(),
        event_id: f.event_id,
        ts_ms: f.ts_ms,
        scenario: attribute(f).scenario,
    }
}

fn answer_neighbours(a: &StoredAnswer) -> Vec<RankedNeighbour> {
    zip_neighbours(
        (&a.cluster, &a.node, a.event_id),
        &a.neighbour_workloads,
        &a.neighbour_pids,
        &a.neighbour_used_bytes,
        &a.neighbour_growth_bytes,
    )
}
