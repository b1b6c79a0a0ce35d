//! Stored attributions (`oom_attributions`): each OOM event's features, the rules'
//! answer and its top-ranked neighbours are computed **once**, after the event has settled, and
//! reports read that table instead of re-reading every process sample at query time.
//!
//! * [`attribute_pending`] — the attributor: finds the events of a time range that have no stored
//!   row yet (`collector/sql/attribution_pending.sql`) and are older than the settle delay,
//!   computes their features (`oom_features`) and neighbours (`oom_neighbours`) in bounded chunks
//!   of events and time, runs the rules and inserts one row per event. Idempotent: a second pass
//!   finds nothing pending. The collector runs it periodically ([`spawn_attributor`], whose
//!   [`AttributedHook`] hands the rows of newly attributed events on — to the alerts, without
//!   this module knowing them); `oomlens attribute` runs it on demand (backfill, no hook).
//! * [`read_window`] — the readers' side: the stored rows of a window (deduplicated by event key
//!   before merges, the latest `attributed_ms` wins; the **current** rules re-run on the stored
//!   features, so a rules upgrade needs no recompute) plus the events of the window not stored
//!   yet, computed live over the narrow time spans they cover. [`read_window_features`] stops
//!   before the rules; [`read_window_scenarios`] (the capacity report) reads only the key, the
//!   stored scenario and the neighbours of rows written by the current rules version.
//!
//! Stored rows are used only when they were computed with the look-back the reader asks for
//! (`window_ms`); otherwise everything is computed live, as before the table existed.
//!
//! One file per job: `rows` (a stored row ↔ an event's evidence, reading and writing the
//! table), `backfill` (the attributor's pass: pending events, chunks, re-scoring after a rules
//! upgrade), `windows` (the readers), `task` (the collector's periodic pass).

mod backfill;
mod rows;
mod task;
mod windows;

use std::collections::HashSet;

use oomlens_schema::rows::OomAttributionRow;
use serde::{Deserialize, Serialize};

use super::features::{Neighbour, OomFeatures};

pub use backfill::{
    AttributeOptions, AttributeReport, Progress, attribute_pending, attribute_pending_notify,
    attribute_pending_with_progress, chunks, fetch_pending,
};
pub use rows::{features_of, fetch_stored, neighbours_of, to_row};
pub use task::{AttributedHook, AttributorSettings, PassObserver, spawn_attributor};
pub use windows::{
    EventScenario, WindowAttribution, WindowFeatures, WindowScenarios, read_window, read_window_features,
    read_window_scenarios,
};

/// Neighbours stored per event (the capacity report ranks the top 3).
pub const STORED_NEIGHBOURS: u32 = 3;

/// Default settle delay: an event is attributed once it and its latest copy are this old, so the
/// samples up to the failure have arrived.
pub const DEFAULT_SETTLE_MS: i64 = 120_000;

/// Default most events per chunk (one `oom_features` + one `oom_neighbours` query each).
pub const DEFAULT_CHUNK_EVENTS: usize = 5_000;

/// Default longest time span of one chunk.
pub const DEFAULT_CHUNK_SPAN_MS: i64 = 6 * 3_600_000;

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

/// A row that names one OOM event (by cluster, node and event id) and its failure time.
pub(super) trait EventRow {
    /// `(cluster, node, event_id)`.
    fn key(&self) -> (&str, &str, u64);
    /// Failure time, Unix epoch ms.
    fn ts_ms(&self) -> i64;
}

macro_rules! event_row {
    ($($t:ty),*) => {$(
        impl EventRow for $t {
            fn key(&self) -> (&str, &str, u64) {
                (&self.cluster, &self.node, self.event_id)
            }
            fn ts_ms(&self) -> i64 {
                self.ts_ms
            }
        }
    )*};
}
event_row!(EventKey, OomFeatures, OomAttributionRow, EventScenario, windows::StoredAnswer);

/// One row per event: the one with the highest `attributed_ms` (before merges several stored
/// rows of one event may exist).
pub(super) fn latest_per_event<T: EventRow>(mut rows: Vec<T>, attributed_ms: impl Fn(&T) -> i64) -> Vec<T> {
    rows.sort_unstable_by(|a, b| a.key().cmp(&b.key()).then(attributed_ms(b).cmp(&attributed_ms(a))));
    rows.dedup_by(|later, kept| later.key() == kept.key());
    rows
}

/// `missing` without the events `stored` holds. The caller lists the unstored events first and
/// reads the stored rows after, so an event the attributor stores in between is in both lists
/// (and kept once, as stored) rather than in neither.
pub(super) fn without_stored<'a, T: EventRow + 'a>(
    missing: Vec<EventKey>,
    stored: impl IntoIterator<Item = &'a T>,
) -> Vec<EventKey> {
    let (Some(lo), Some(hi)) = (missing.iter().map(|e| e.ts_ms).min(), missing.iter().map(|e| e.ts_ms).max())
    else {
        return missing;
    };
    let stored: HashSet<Key> = stored
        .into_iter()
        .filter(|r| (lo..=hi).contains(&r.ts_ms()))
        .map(|r| {
            let (c, n, id) = r.key();
            key_of(c, n, id)
        })
        .collect();
    missing.into_iter().filter(|e| !stored.contains(&key_of(&e.cluster, &e.node, e.event_id))).collect()
}

/// Newest first (as `oom_features` orders events), ties by event key.
pub(super) fn sort_newest_first<T: EventRow, N>(rows: &mut [(T, N)]) {
    rows.sort_unstable_by(|(a, _), (b, _)| b.ts_ms().cmp(&a.ts_ms()).then_with(|| a.key().cmp(&b.key())));
}
