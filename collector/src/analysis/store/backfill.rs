//! The attributor's pass: the settled events of a range without a stored row, computed in
//! bounded chunks of events and time and stored one row each; then the rows of an older rules
//! version re-scored from their stored features. Idempotent and resumable.

use std::collections::{HashMap, HashSet};

use oomlens_schema::rows::OomAttributionRow;
use serde::Serialize;

use super::rows::{insert_rows, into_parts, table, to_row};
use super::{
    DEFAULT_CHUNK_EVENTS, DEFAULT_CHUNK_SPAN_MS, DEFAULT_SETTLE_MS, EventKey, Key, RankedNeighbour,
    STORED_NEIGHBOURS, key_of,
};
use crate::analysis::AttributionError;
use crate::analysis::features::{self, DEFAULT_WINDOW_MS, FeatureWindow, OomFeatures};
use crate::analysis::queries::{self, ParamValue};
use crate::analysis::rules::RULES_VERSION;

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
pub(super) async fn compute_chunk(
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

/// [`attribute_pending_notify`] without telling anyone about the new rows (`oomlens attribute`).
pub async fn attribute_pending_with_progress(
    client: &clickhouse::Client,
    db: &str,
    opts: &AttributeOptions,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<AttributeReport, AttributionError> {
    attribute_pending_notify(client, db, opts, progress, &mut |_| {}).await
}

/// The attributor: computes and stores the attribution of every settled event of the range that
/// has none yet (every settled event with `force`), chunk by chunk (each chunk is inserted before
/// the next is computed, so an interrupted pass keeps what it did and the next pass resumes).
/// `progress` is called after each chunk.
///
/// `attributed` receives the rows of each chunk right after they are stored, and only rows of
/// events attributed for the first time: never the rows of a `force` pass (a recompute) nor the
/// re-scored rows of an older rules version. The collector's alerts start there; an event two
/// collectors attribute at once reaches both hooks (the alert senders deduplicate).
pub async fn attribute_pending_notify(
    client: &clickhouse::Client,
    db: &str,
    opts: &AttributeOptions,
    progress: &mut (dyn FnMut(Progress) + Send),
    attributed: &mut (dyn FnMut(&[OomAttributionRow]) + Send),
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
        if !opts.force {
            attributed(&rows);
        }
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
}
