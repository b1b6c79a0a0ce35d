//! Analysis: why did each OOM happen, how sure are we, what would decide, what to do.
//!
//! * [`queries`] — the built-in SQL (`collector/sql/*.sql`), the one registry every reader uses.
//! * [`features`] — an event's evidence ([`EventEvidence`]: the `oom_features` row, or a parsed
//!   message offline) and the features derived from it ([`OomFeatures::derive`], the one place).
//! * [`rules`] — the ordered rule set: features → scenario, calibrated confidence, alternatives,
//!   evidence, remedy, what would decide.
//! * [`json`] — the JSON document of an attributed event (postmortem and explain).
//! * [`accuracy`] — confusion matrix, per-rule precision and the reliability table.
//! * [`explain`] — a message parsed and attributed offline (`oomlens explain`), the same way.
//! * [`store`] — `oom_attributions`: each event's evidence, answer and top neighbours stored once
//!   by the attributor (periodic in the collector, `oomlens attribute` on demand), read by reports.
//!
//! [`attribute_window`] is the entry point for reports: every event of a time window with its
//! features and attribution, newest first — stored rows (re-derived and re-scored by the current
//! rules) plus the events not stored yet, computed live; [`explain_event`] is the one for a
//! postmortem of one event (with its ranked neighbours), always computed live. The rules never
//! read `truth_scenario`. `docs/attribution.md` describes the method.

pub mod accuracy;
pub mod explain;
pub mod features;
pub mod json;
pub mod queries;
pub mod rules;
pub mod store;

pub use accuracy::ConfusionMatrix;
pub use features::{EventEvidence, FeatureWindow, Neighbour, OomFeatures};
pub use json::EventJson;
pub use rules::{Alternative, Attribution, Rule, attribute};

use crate::analysis::queries::QueryError;

/// Fetching or attributing events failed.
#[derive(Debug, thiserror::Error)]
pub enum AttributionError {
    /// A query or its arguments are wrong.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// ClickHouse failed.
    #[error("ClickHouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
}

/// One OOM event with its features and what the rules concluded.
#[derive(Debug, Clone, PartialEq)]
pub struct AttributedEvent {
    /// The `oom_features` row.
    pub features: OomFeatures,
    /// The rules' answer.
    pub attribution: Attribution,
}

/// Every event of `window` (deduplicated), attributed, newest first: the stored attributions of
/// the window computed with the same look-back (the rules re-run on the stored features) and the
/// others computed live ([`store::read_window`]).
pub async fn attribute_window(
    client: &clickhouse::Client,
    db: &str,
    window: &FeatureWindow,
) -> Result<Vec<AttributedEvent>, AttributionError> {
    Ok(store::read_window(client, db, window, false).await?.events)
}

/// Every event of `window` (deduplicated), attributed from features computed now from the
/// samples (`oom_features`), newest first; ignores the stored attributions.
pub async fn attribute_window_live(
    client: &clickhouse::Client,
    db: &str,
    window: &FeatureWindow,
) -> Result<Vec<AttributedEvent>, AttributionError> {
    let rows = features::fetch_features(client, db, window).await?;
    tracing::debug!(events = rows.len(), "attributing OOM events");
    Ok(rows
        .into_iter()
        .map(|features| {
            let attribution = attribute(&features);
            AttributedEvent { features, attribution }
        })
        .collect())
}

/// One event explained: features, attribution and the ranked neighbours.
#[derive(Debug, Clone, PartialEq)]
pub struct ExplainedEvent {
    /// The event with its features and attribution.
    pub event: AttributedEvent,
    /// The other processes on its GPU (host OOM: node) in the window, ranked.
    pub neighbours: Vec<Neighbour>,
}

/// The event `(cluster, node, event_id)` that failed at `ts_ms`, explained with a look-back of
/// `window_ms` and at most `top_n` neighbours; `None` when no such event is stored.
#[allow(clippy::too_many_arguments)]
pub async fn explain_event(
    client: &clickhouse::Client,
    db: &str,
    cluster: &str,
    node: &str,
    event_id: u64,
    ts_ms: i64,
    window_ms: i64,
    top_n: u32,
) -> Result<Option<ExplainedEvent>, AttributionError> {
    let window = FeatureWindow { since_ms: ts_ms, until_ms: ts_ms.saturating_add(1), window_ms };
    let is_it = |c: &str, n: &str, id: u64| c == cluster && n == node && id == event_id;
    // The two queries read the same minutes and do not depend on each other: run them at once.
    let (events, neighbours) = tokio::try_join!(
        attribute_window_live(client, db, &window),
        features::fetch_neighbours(client, db, &window, top_n)
    )?;
    let Some(event) =
        events.into_iter().find(|e| is_it(&e.features.cluster, &e.features.node, e.features.event_id))
    else {
        return Ok(None);
    };
    let neighbours = neighbours.into_iter().filter(|n| is_it(&n.cluster, &n.node, n.event_id)).collect();
    Ok(Some(ExplainedEvent { event, neighbours }))
}
