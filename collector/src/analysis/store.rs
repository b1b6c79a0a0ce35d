//! Stored attributions (`oom_attributions`): each OOM event's features, the rules'
//! answer and its top-ranked neighbours are computed **once**, after the event has settled, and
//! reports read that table instead of re-reading every process sample at query time.
//!
//! * [`attribute_pending`] — the attributor: finds the events of a time range that have no stored
//!   row yet (`collector/sql/attribution_pending.sql`) and are older than the settle delay,
//!   computes their features (`oom_features`) and neighbours (`oom_neighbours`) in bounded chunks
//!   of events and time, runs the rules and inserts one row per event. Idempotent: a second pass
//!   finds nothing pending. The collector runs it periodically ([`spawn_attributor`]);
//!   `oomlens attribute` runs it on demand (backfill).
//! * [`read_window`] — the readers' side: the stored rows of a window (deduplicated by event key
//!   before merges, the latest `attributed_ms` wins; the **current** rules re-run on the stored
//!   features, so a rules upgrade needs no recompute) plus the events of the window not stored
//!   yet, computed live over the narrow time spans they cover. [`read_window_features`] stops
//!   before the rules; [`read_window_scenarios`] (the capacity report) reads only the key, the
//!   stored scenario and the neighbours of rows written by the current rules version.
//!
//! Stored rows are used only when they were computed with the look-back the reader asks for
//! (`window_ms`); otherwise everything is computed live, as before the table existed.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use oomlens_schema::Scenario;
use oomlens_schema::rows::{OomAttributionRow, TableRow};
use serde::{Deserialize, Serialize};

use super::features::{self, DEFAULT_WINDOW_MS, EventEvidence, FeatureWindow, Neighbour, OomFeatures};
use super::rules::{RULES_VERSION, attribute};
use super::{AttributedEvent, AttributionError};
use crate::analysis::queries::{self, ParamValue, QueryError};

/// Neighbours stored per event (the capacity report ranks the top 3).
pub const STORED_NEIGHBOURS: u32 = 3;

/// Default settle delay: an event is attributed once it and its latest copy are this old, so the
/// samples up to the failure have arrived.
pub const DEFAULT_SETTLE_MS: i64 = 120_000;

/// Default most events per chunk (one `oom_features` + one `oom_neighbours` query each).
pub const DEFAULT_CHUNK_EVENTS: usize = 5_000;

/// Default longest time span of one chunk.
pub const DEFAULT_CHUNK_SPAN_MS: i64 = 6 * 3_600_000;

/// What [`attribute_pending`] attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributeOptions {
    /// Events at or after this time (Unix epoch ms).
    pub since_ms: i64,
    /// Events before this time.
    pub until_ms: i64,
    /// The current time (Unix epoch ms); with `settle_ms` it decides which events have settled.
    pub now_ms: i64,
    /// Only events that failed, and whose latest copy arrived, at least this long before `now_ms`.
    pub settle_ms: i64,
    /// Look-back before each failure for the features and neighbours.
    pub window_ms: i64,
    /// Most events per chunk.
    pub chunk_events: usize,
    /// Longest time span of a chunk (from its first to its last event).
    pub chunk_span_ms: i64,
    /// Re-attribute stored events too (their rows are replaced).
    pub force: bool,
}

impl AttributeOptions {
    /// Every settled event of `[since_ms, until_ms)` at `now_ms`, with the defaults.
    pub fn new(since_ms: i64, until_ms: i64, now_ms: i64) -> Self {
        AttributeOptions {
            since_ms,
            until_ms,
            now_ms,
            settle_ms: DEFAULT_SETTLE_MS,
            window_ms: DEFAULT_WINDOW_MS,
            chunk_events: DEFAULT_CHUNK_EVENTS,
            chunk_span_ms: DEFAULT_CHUNK_SPAN_MS,
            force: false,
        }
    }
}

/// What one [`attribute_pending`] pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AttributeReport {
    /// Settled events without a stored row (all settled events with `force`).
    pub pending: u64,
    /// Rows inserted.
    pub attributed: u64,
    /// Chunks computed.
    pub chunks: u64,
    /// Stored rows written by an older rules version, re-scored from their stored features
    /// (no samples read) and stored again with the current rules' answer.
    pub rescored: u64,
}

/// One event key with its failure time, as `attribution_pending` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, clickhouse::Row, Serialize, Deserialize)]
pub struct EventKey {
    /// Cluster.
    pub cluster: String,
    /// Node.
    pub node: String,
    /// Event id.
    pub event_id: u64,
    /// Failure time.
    pub ts_ms: i64,
}

type Key = (String, String, u64);

fn key_of(cluster: &str, node: &str, event_id: u64) -> Key {
    (cluster.to_owned(), node.to_owned(), event_id)
}

/// One ranked neighbour of an event as the reports use it (stored or computed live).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankedNeighbour {
    /// Cluster of the event.
    pub cluster: String,
    /// Node of the event.
    pub node: String,
    /// The event.
    pub event_id: u64,
    /// The neighbour's workload.
    pub workload: String,
    /// Its pid.
    pub pid: u32,
    /// Its GPU memory at its last sample before the failure.
    pub used_bytes: u64,
    /// Its growth in the window.
    pub growth_bytes: i64,
}

impl From<&Neighbour> for RankedNeighbour {
    fn from(n: &Neighbour) -> Self {
        RankedNeighbour {
            cluster: n.cluster.clone(),
            node: n.node.clone(),
            event_id: n.event_id,
            workload: n.neighbour_workload.clone(),
            pid: n.neighbour_pid,
            used_bytes: n.last_used_bytes,
            growth_bytes: n.growth_bytes,
        }
    }
}

/// Conversions between [`EventEvidence`] and [`OomAttributionRow`]: the list names every field of
/// `EventEvidence` once; both struct literals are exhaustive, so a field added to one struct and
/// not to the other does not compile. The derived columns are written for SQL readers and never
/// read back: the features are derived again from the evidence ([`OomFeatures::derive`]), so
/// a rules or derivation upgrade applies to stored rows at once.
macro_rules! evidence_fields {
    ($($field:ident),* $(,)?) => {
        /// The stored row of one event: its evidence and derived features, the rules' answer,
        /// its neighbours.
        pub fn to_row(
            f: OomFeatures,
            neighbours: &[RankedNeighbour],
            attributed_ms: i64,
        ) -> OomAttributionRow {
            let a = attribute(&f);
            let OomFeatures {
                evidence: e,
                phase_effective,
                phase_source,
                context_bytes,
                cached_free_bytes,
                outside_bytes,
                others_bytes,
                others_from,
                need_alone_bytes,
                need_alone_from,
                static_estimate_bytes,
                attention_bytes,
                ..
            } = f;
            OomAttributionRow {
                phase_effective,
                phase_source,
                context_bytes,
                cached_free_bytes,
                outside_bytes,
                others_bytes,
                others_from,
                need_alone_bytes,
                need_alone_from,
                static_estimate_bytes,
                attention_bytes,
                scenario: a.scenario.as_str().to_owned(),
                rule: a.rule.id().to_owned(),
                confidence_pct: a.confidence_pct,
                alternative_scenarios: a.alternatives.iter().map(|x| x.scenario.as_str().to_owned()).collect(),
                alternative_confidence_pct: a.alternatives.iter().map(|x| x.confidence_pct).collect(),
                rules_version: RULES_VERSION,
                attributed_ms,
                neighbour_workloads: neighbours.iter().map(|n| n.workload.clone()).collect(),
                neighbour_pids: neighbours.iter().map(|n| n.pid).collect(),
                neighbour_used_bytes: neighbours.iter().map(|n| n.used_bytes).collect(),
                neighbour_growth_bytes: neighbours.iter().map(|n| n.growth_bytes).collect(),
                $($field: e.$field,)*
            }
        }

        /// The features of a stored row, derived again from its evidence.
        pub fn features_of(r: &OomAttributionRow) -> OomFeatures {
            OomFeatures::derive(EventEvidence { $($field: r.$field.clone(),)* })
        }

        /// A stored row taken apart into its features and (with `neighbours`) its ranked
        /// neighbours, without copying.
        fn into_parts(r: OomAttributionRow, neighbours: bool) -> (OomFeatures, Vec<RankedNeighbour>) {
            let ranked = if neighbours { neighbours_of(&r) } else { Vec::new() };
            (OomFeatures::derive(EventEvidence { $($field: r.$field,)* }), ranked)
        }

        #[cfg(test)]
        const EVIDENCE_FIELDS: &[&str] = &[$(stringify!($field)),*];
    };
}

evidence_fields!(
    cluster,
    node,
    event_id,
    ts_ms,
    kind,
    source,
    framework,
    gpu_index,
    pid,
    workload,
    truth_scenario,
    phase,
    phase_label,
    phase_clue,
    host_evidence,
    message_hint,
    capacity_source,
    requested_bytes,
    capacity_bytes,
    free_bytes,
    allocated_bytes,
    reserved_bytes,
    process_used_bytes,
    other_pids,
    other_used_bytes,
    xid,
    host_rss_bytes,
    params,
    batch_size,
    seq_len,
    hidden,
    layers,
    heads,
    precision,
    optimizer,
    zero_stage,
    tensor_parallel,
    pipeline_parallel,
    data_parallel,
    activation_checkpointing,
    flash_attention,
    window_ms,
    own_samples,
    own_first_ts,
    own_first_used,
    own_min_used,
    own_max_used,
    own_last_used,
    others_seen,
    others_first_bytes,
    others_last_bytes,
    own_sampled_bytes,
    others_growth_bytes,
    top_neighbour_growth_bytes
);

/// The stored neighbours of a row, best first.
pub fn neighbours_of(r: &OomAttributionRow) -> Vec<RankedNeighbour> {
    zip_neighbours(
        (&r.cluster, &r.node, r.event_id),
        &r.neighbour_workloads,
        &r.neighbour_pids,
        &r.neighbour_used_bytes,
        &r.neighbour_growth_bytes,
    )
}

/// One event's neighbours from its parallel columns (as stored and as queried), best first; a
/// ragged set of columns gives the neighbours all of them describe.
fn zip_neighbours(
    (cluster, node, event_id): (&str, &str, u64),
    workloads: &[String],
    pids: &[u32],
    used_bytes: &[u64],
    growth_bytes: &[i64],
) -> Vec<RankedNeighbour> {
    workloads
        .iter()
        .zip(pids)
        .zip(used_bytes)
        .zip(growth_bytes)
        .map(|(((workload, &pid), &used_bytes), &growth_bytes)| RankedNeighbour {
            cluster: cluster.to_owned(),
            node: node.to_owned(),
            event_id,
            workload: workload.clone(),
            pid,
            used_bytes,
            growth_bytes,
        })
        .collect()
}

/// Events of `[since_ms, until_ms)` without a stored row for `window_ms` (every event with
/// `force`) that failed before `settled_ts_before_ms` and arrived before
/// `settled_received_before_ms`, oldest first.
#[allow(clippy::too_many_arguments)]
pub async fn fetch_pending(
    client: &clickhouse::Client,
    db: &str,
    since_ms: i64,
    until_ms: i64,
    settled_ts_before_ms: i64,
    settled_received_before_ms: i64,
    window_ms: i64,
    force: bool,
) -> Result<Vec<EventKey>, AttributionError> {
    let args = [
        ParamValue::Int(since_ms),
        ParamValue::Int(until_ms),
        ParamValue::Int(settled_ts_before_ms),
        ParamValue::Int(settled_received_before_ms),
        ParamValue::UInt(u64::from(force)),
        ParamValue::Int(since_ms),
        ParamValue::Int(until_ms),
        ParamValue::Int(window_ms),
    ];
    Ok(queries::builtin("attribution_pending")?.bind(client, db, &args)?.fetch_all::<EventKey>().await?)
}

/// Splits events sorted by time into chunks of at most `max_events` events spanning at most
/// `max_span_ms` each.
pub fn chunks(events: &[EventKey], max_events: usize, max_span_ms: i64) -> Vec<&[EventKey]> {
    let max_events = max_events.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=events.len() {
        let close = i == events.len()
            || i - start >= max_events
            || events[i].ts_ms.saturating_sub(events[start].ts_ms) > max_span_ms.max(0);
        if close {
            out.push(&events[start..i]);
            start = i;
        }
    }
    out
}

/// Features (and, with `top_n > 0`, ranked neighbours) of exactly the events of `chunk` (sorted by
/// time), computed live over the time span they cover.
async fn compute_chunk(
    client: &clickhouse::Client,
    db: &str,
    chunk: &[EventKey],
    window_ms: i64,
    top_n: u32,
) -> Result<Vec<(OomFeatures, Vec<RankedNeighbour>)>, AttributionError> {
    let (Some(first), Some(last)) = (chunk.first(), chunk.last()) else { return Ok(Vec::new()) };
    let window = FeatureWindow { since_ms: first.ts_ms, until_ms: last.ts_ms.saturating_add(1), window_ms };
    let wanted: HashSet<Key> = chunk.iter().map(|e| key_of(&e.cluster, &e.node, e.event_id)).collect();
    let rows = features::fetch_features(client, db, &window).await?;
    let mut ranked: HashMap<Key, Vec<RankedNeighbour>> = HashMap::new();
    if top_n > 0 {
        for n in features::fetch_neighbours(client, db, &window, top_n).await? {
            let k = key_of(&n.cluster, &n.node, n.event_id);
            if wanted.contains(&k) {
                ranked.entry(k).or_default().push(RankedNeighbour::from(&n));
            }
        }
    }
    Ok(rows
        .into_iter()
        .filter_map(|f| {
            let k = key_of(&f.cluster, &f.node, f.event_id);
            wanted.contains(&k).then(|| {
                let n = ranked.remove(&k).unwrap_or_default();
                (f, n)
            })
        })
        .collect())
}

fn table(db: &str) -> Result<String, QueryError> {
    if queries::is_identifier(db) {
        Ok(format!("{db}.{}", OomAttributionRow::TABLE))
    } else {
        Err(QueryError::BadDatabase(db.to_owned()))
    }
}

async fn insert_rows(
    client: &clickhouse::Client,
    db: &str,
    rows: &[OomAttributionRow],
) -> Result<(), AttributionError> {
    if rows.is_empty() {
        return Ok(());
    }
    let table = table(db)?;
    let mut insert = client.insert_unescaped::<OomAttributionRow>(&table).await?;
    for row in rows {
        insert.write(row).await?;
    }
    insert.end().await?;
    Ok(())
}

/// Progress of an [`attribute_pending`] pass: events done so far of the total pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Events attributed so far.
    pub done: u64,
    /// Events pending at the start of the pass.
    pub total: u64,
}

/// [`attribute_pending_with_progress`] without progress reports.
pub async fn attribute_pending(
    client: &clickhouse::Client,
    db: &str,
    opts: &AttributeOptions,
) -> Result<AttributeReport, AttributionError> {
    attribute_pending_with_progress(client, db, opts, &mut |_| {}).await
}

/// The attributor: computes and stores the attribution of every settled event of the range that
/// has none yet (every settled event with `force`), chunk by chunk (each chunk is inserted before
/// the next is computed, so an interrupted pass keeps what it did and the next pass resumes).
/// `progress` is called after each chunk.
pub async fn attribute_pending_with_progress(
    client: &clickhouse::Client,
    db: &str,
    opts: &AttributeOptions,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<AttributeReport, AttributionError> {
    let settled = opts.now_ms.saturating_sub(opts.settle_ms.max(0));
    let pending = fetch_pending(
        client,
        db,
        opts.since_ms,
        opts.until_ms,
        settled,
        settled,
        opts.window_ms.max(0),
        opts.force,
    )
    .await?;
    let mut report = AttributeReport { pending: pending.len() as u64, ..AttributeReport::default() };
    progress(Progress { done: 0, total: report.pending });
    for chunk in chunks(&pending, opts.chunk_events, opts.chunk_span_ms) {
        let computed = compute_chunk(client, db, chunk, opts.window_ms.max(0), STORED_NEIGHBOURS).await?;
        let attributed_ms = oomlens_schema::text::now_ms();
        let rows: Vec<OomAttributionRow> =
            computed.into_iter().map(|(f, n)| to_row(f, &n, attributed_ms)).collect();
        insert_rows(client, db, &rows).await?;
        report.chunks += 1;
        report.attributed += rows.len() as u64;
        tracing::debug!(
            events = rows.len(),
            first_ts_ms = chunk[0].ts_ms,
            "attributed a chunk of OOM events"
        );
        progress(Progress { done: report.attributed, total: report.pending });
    }
    report.rescored = rescore_outdated(client, db, opts).await?;
    Ok(report)
}

/// Re-scores the stored rows of `[since_ms, until_ms)` whose latest row (per event and look-back)
/// was written by an older [`RULES_VERSION`]: the current rules run on the stored features and the
/// row is stored again (same features and neighbours, the new answer, a newer `attributed_ms`), so
/// `attribution_breakdown.sql` follows a rules upgrade without reading any sample. Rows of a newer
/// version (a newer collector during a rolling upgrade) are left alone. At most `chunk_events`
/// rows per query.
async fn rescore_outdated(
    client: &clickhouse::Client,
    db: &str,
    opts: &AttributeOptions,
) -> Result<u64, AttributionError> {
    let table = table(db)?;
    // The common case, cheaply: no row of an older version in the range at all. (A column, not a
    // constant, in the subquery: through `Distributed` tables 18.16 loses constant columns whose
    // value differs from the shards' header — "Cannot find column `2` in source stream".)
    let any_old = client
        .query(&format!(
            "SELECT count() FROM (SELECT event_id FROM {table} WHERE ts_ms >= ? AND ts_ms < ? AND rules_version < ? LIMIT 1)"
        ))
        .bind(opts.since_ms)
        .bind(opts.until_ms)
        .bind(RULES_VERSION)
        .fetch_one::<u64>()
        .await?;
    if any_old == 0 {
        return Ok(0);
    }
    let columns = <OomAttributionRow as clickhouse::Row>::COLUMN_NAMES.join(", ");
    let sql = format!(
        "SELECT {columns} FROM {table} WHERE ts_ms >= ? AND ts_ms < ? \
         AND (cluster, node, event_id, window_ms, attributed_ms) IN \
         (SELECT cluster, node, event_id, window_ms, max(attributed_ms) FROM {table} \
          WHERE ts_ms >= ? AND ts_ms < ? GROUP BY cluster, node, event_id, window_ms \
          HAVING argMax(rules_version, attributed_ms) < ?) \
         ORDER BY ts_ms, cluster, node, event_id, window_ms LIMIT ?"
    );
    let mut seen: HashSet<(String, String, u64, i64)> = HashSet::new();
    let mut rescored = 0;
    loop {
        let rows = client
            .query(&sql)
            .bind(opts.since_ms)
            .bind(opts.until_ms)
            .bind(opts.since_ms)
            .bind(opts.until_ms)
            .bind(RULES_VERSION)
            .bind(opts.chunk_events.max(1) as u64)
            .fetch_all::<OomAttributionRow>()
            .await?;
        let now = oomlens_schema::text::now_ms();
        let fresh: Vec<OomAttributionRow> = rows
            .into_iter()
            .filter(|r| seen.insert((r.cluster.clone(), r.node.clone(), r.event_id, r.window_ms)))
            .map(|r| {
                // Newer than the row it replaces, whatever the clocks say.
                let at = now.max(r.attributed_ms.saturating_add(1));
                let (f, n) = into_parts(r, true);
                to_row(f, &n, at)
            })
            .collect();
        // Nothing new: done (or the inserts are not visible yet; the next pass continues).
        if fresh.is_empty() {
            break;
        }
        insert_rows(client, db, &fresh).await?;
        rescored += fresh.len() as u64;
        tracing::debug!(rows = fresh.len(), "re-scored stored attributions of an older rules version");
    }
    Ok(rescored)
}

/// The stored rows of the events of `[since_ms, until_ms)` computed with `window_ms`, one per
/// event (before merges several rows of one event may exist: the latest `attributed_ms` wins).
pub async fn fetch_stored(
    client: &clickhouse::Client,
    db: &str,
    since_ms: i64,
    until_ms: i64,
    window_ms: i64,
) -> Result<Vec<OomAttributionRow>, AttributionError> {
    let columns = <OomAttributionRow as clickhouse::Row>::COLUMN_NAMES.join(", ");
    let sql =
        format!("SELECT {columns} FROM {} WHERE ts_ms >= ? AND ts_ms < ? AND window_ms = ?", table(db)?);
    let rows = client
        .query(&sql)
        .bind(since_ms)
        .bind(until_ms)
        .bind(window_ms)
        .fetch_all::<OomAttributionRow>()
        .await?;
    Ok(latest_per_event(rows))
}

/// One row per event key: the one with the highest `attributed_ms`.
fn latest_per_event(mut rows: Vec<OomAttributionRow>) -> Vec<OomAttributionRow> {
    rows.sort_unstable_by(|a, b| {
        (&a.cluster, &a.node, a.event_id)
            .cmp(&(&b.cluster, &b.node, b.event_id))
            .then(b.attributed_ms.cmp(&a.attributed_ms))
    });
    rows.dedup_by(|later, kept| {
        later.event_id == kept.event_id && later.node == kept.node && later.cluster == kept.cluster
    });
    rows
}

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
    let mut missing =
        fetch_pending(client, db, window.since_ms, window.until_ms, i64::MAX, i64::MAX, window_ms, false)
            .await?;
    let stored = fetch_stored(client, db, window.since_ms, window.until_ms, window_ms).await?;
    if !missing.is_empty() {
        let mut unstored: HashSet<Key> =
            missing.iter().map(|e| key_of(&e.cluster, &e.node, e.event_id)).collect();
        let lo = missing.iter().map(|e| e.ts_ms).min().unwrap_or(i64::MIN);
        let hi = missing.iter().map(|e| e.ts_ms).max().unwrap_or(i64::MAX);
        for r in stored.iter().filter(|r| r.ts_ms >= lo && r.ts_ms <= hi) {
            unstored.remove(&key_of(&r.cluster, &r.node, r.event_id));
        }
        missing.retain(|e| unstored.contains(&key_of(&e.cluster, &e.node, e.event_id)));
    }
    let (n_stored, n_live) = (stored.len() as u64, missing.len() as u64);
    let mut rows: Vec<(OomFeatures, Vec<RankedNeighbour>)> =
        stored.into_iter().map(|r| into_parts(r, neighbours)).collect();
    let top_n = if neighbours { STORED_NEIGHBOURS } else { 0 };
    for chunk in chunks(&missing, DEFAULT_CHUNK_EVENTS, DEFAULT_CHUNK_SPAN_MS) {
        rows.extend(compute_chunk(client, db, chunk, window_ms, top_n).await?);
    }
    // Newest first, like oom_features; several stored rows of one event were collapsed above,
    // and an event is either stored or missing.
    rows.sort_unstable_by(|(a, _), (b, _)| {
        b.ts_ms
            .cmp(&a.ts_ms)
            .then_with(|| (&a.cluster, &a.node, a.event_id).cmp(&(&b.cluster, &b.node, b.event_id)))
    });
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
struct StoredAnswer {
    cluster: String,
    node: String,
    event_id: u64,
    ts_ms: i64,
    attributed_ms: i64,
    rules_version: u32,
    scenario: String,
    neighbour_workloads: Vec<String>,
    neighbour_pids: Vec<u32>,
    neighbour_used_bytes: Vec<u64>,
    neighbour_growth_bytes: Vec<i64>,
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
    let mut answers = client
        .query(&sql)
        .bind(window.since_ms)
        .bind(window.until_ms)
        .bind(window_ms)
        .fetch_all::<StoredAnswer>()
        .await?;
    answers.sort_unstable_by(|a, b| {
        (&a.cluster, &a.node, a.event_id)
            .cmp(&(&b.cluster, &b.node, b.event_id))
            .then(b.attributed_ms.cmp(&a.attributed_ms))
    });
    answers.dedup_by(|later, kept| {
        later.event_id == kept.event_id && later.node == kept.node && later.cluster == kept.cluster
    });
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
    let stored_keys: HashSet<Key> = if missing.is_empty() {
        HashSet::new()
    } else {
        let lo = missing.iter().map(|e| e.ts_ms).min().unwrap_or(i64::MIN);
        let hi = missing.iter().map(|e| e.ts_ms).max().unwrap_or(i64::MAX);
        rows.iter()
            .filter(|(e, _)| e.ts_ms >= lo && e.ts_ms <= hi)
            .map(|(e, _)| key_of(&e.cluster, &e.node, e.event_id))
            .collect()
    };
    let missing: Vec<EventKey> = missing
        .into_iter()
        .filter(|e| !stored_keys.contains(&key_of(&e.cluster, &e.node, e.event_id)))
        .collect();
    let top_n = if neighbours { STORED_NEIGHBOURS } else { 0 };
    for chunk in chunks(&missing, DEFAULT_CHUNK_EVENTS, DEFAULT_CHUNK_SPAN_MS) {
        for (f, ranked) in compute_chunk(client, db, chunk, window_ms, top_n).await? {
            rows.push((scenario_row(&f), ranked));
            out.live += 1;
        }
    }
    rows.sort_unstable_by(|(a, _), (b, _)| {
        b.ts_ms
            .cmp(&a.ts_ms)
            .then_with(|| (&a.cluster, &a.node, a.event_id).cmp(&(&b.cluster, &b.node, b.event_id)))
    });
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

/// The periodic attributor's settings (`[attribution]` of the collector configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributorSettings {
    /// Time between passes.
    pub interval: Duration,
    /// Settle delay, ms.
    pub settle_ms: i64,
    /// How far back each pass looks for unattributed events, ms.
    pub lookback_ms: i64,
    /// Look-back before each failure, ms.
    pub window_ms: i64,
    /// Most events per chunk.
    pub chunk_events: usize,
    /// Longest time span of a chunk, ms.
    pub chunk_span_ms: i64,
}

/// Called after every pass of [`spawn_attributor`] with its outcome and duration.
pub type PassObserver = Box<dyn Fn(Result<&AttributeReport, &AttributionError>, Duration) + Send + Sync>;

/// Runs [`attribute_pending`] every `settings.interval` (first after one interval) over the events
/// of the last `lookback_ms`, until the task is aborted. Failures are logged, reported to
/// `observer` and retried at the next tick.
pub fn spawn_attributor(
    client: clickhouse::Client,
    db: String,
    settings: AttributorSettings,
    observer: PassObserver,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let every = settings.interval.max(Duration::from_millis(1));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = oomlens_schema::text::now_ms();
            let opts = AttributeOptions {
                since_ms: now.saturating_sub(settings.lookback_ms.max(0)),
                until_ms: now.saturating_add(1),
                now_ms: now,
                settle_ms: settings.settle_ms,
                window_ms: settings.window_ms,
                chunk_events: settings.chunk_events,
                chunk_span_ms: settings.chunk_span_ms,
                force: false,
            };
            let started = Instant::now();
            let result = attribute_pending(&client, &db, &opts).await;
            let took = started.elapsed();
            match &result {
                Ok(r) if r.attributed > 0 => tracing::info!(
                    events = r.attributed,
                    chunks = r.chunks,
                    took_ms = took.as_millis() as u64,
                    "attributed OOM events"
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "attribution pass failed; retrying at the next interval")
                }
            }
            observer(result.as_ref(), took);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts_ms: i64) -> EventKey {
        EventKey { cluster: "c".into(), node: "n".into(), event_id: ts_ms as u64, ts_ms }
    }

    #[test]
    fn chunks_bound_events_and_span() {
        let events: Vec<EventKey> = [0, 1, 2, 3, 100, 101, 1000].into_iter().map(ev).collect();
        let sizes = |c: Vec<&[EventKey]>| c.iter().map(|c| c.len()).collect::<Vec<_>>();
        assert_eq!(sizes(chunks(&events, 3, 10_000)), [3, 3, 1]);
        assert_eq!(sizes(chunks(&events, 100, 50)), [4, 2, 1]);
        assert_eq!(sizes(chunks(&events, 0, 0)), [1, 1, 1, 1, 1, 1, 1]);
        assert!(chunks(&[], 10, 10).is_empty());
        let all: usize = chunks(&events, 2, 5).iter().map(|c| c.len()).sum();
        assert_eq!(all, events.len(), "every event in exactly one chunk");
    }

    #[test]
    fn stored_row_holds_the_evidence_in_order() {
        let evidence = <EventEvidence as clickhouse::Row>::COLUMN_NAMES;
        assert_eq!(EVIDENCE_FIELDS, evidence);
        let row = <OomAttributionRow as clickhouse::Row>::COLUMN_NAMES;
        assert_eq!(&row[..evidence.len()], evidence, "the row starts with the evidence, in order");
    }

    #[test]
    fn the_latest_row_of_each_event_wins() {
        let row = |node: &str, id: u64, at: i64| OomAttributionRow {
            cluster: "c".into(),
            node: node.into(),
            event_id: id,
            attributed_ms: at,
            ..OomAttributionRow::default()
        };
        let rows = vec![row("a", 1, 5), row("b", 1, 1), row("a", 1, 9), row("a", 2, 3), row("a", 1, 7)];
        let kept: Vec<(String, u64, i64)> =
            latest_per_event(rows).into_iter().map(|r| (r.node, r.event_id, r.attributed_ms)).collect();
        assert_eq!(kept, [("a".to_owned(), 1, 9), ("a".to_owned(), 2, 3), ("b".to_owned(), 1, 1)]);
    }

    #[test]
    fn rows_round_trip_features_and_neighbours() {
        let f = OomFeatures::derive(EventEvidence {
            cluster: "c".into(),
            node: "n".into(),
            event_id: 7,
            ts_ms: 1000,
            kind: "host_oom_kill".into(),
            host_rss_bytes: Some(5),
            other_pids: vec![3],
            other_used_bytes: vec![4],
            window_ms: 60_000,
            ..EventEvidence::default()
        });
        let n = vec![RankedNeighbour {
            cluster: "c".into(),
            node: "n".into(),
            event_id: 7,
            workload: "w".into(),
            pid: 9,
            used_bytes: 10,
            growth_bytes: -3,
        }];
        let row = to_row(f.clone(), &n, 42);
        assert_eq!(
            (row.scenario.as_str(), row.rule.as_str(), row.rules_version),
            ("host_oom", "host_oom_kill", RULES_VERSION)
        );
        assert_eq!(row.attributed_ms, 42);
        assert_eq!(features_of(&row), f);
        assert_eq!(neighbours_of(&row), n);
    }
}
