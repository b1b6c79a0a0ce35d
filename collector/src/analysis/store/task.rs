//! The collector's periodic attributor: one [`attribute_pending_notify`] pass every interval over
//! the recent events, failures logged and retried at the next tick; the rows of newly attributed
//! events go to an optional [`AttributedHook`].

use std::time::{Duration, Instant};

use oomlens_schema::rows::OomAttributionRow;

use super::backfill::{AttributeOptions, AttributeReport, attribute_pending_notify};
use crate::analysis::AttributionError;

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

/// Called by [`spawn_attributor`] with the rows of events attributed for the first time, right
/// after each chunk is stored (see [`attribute_pending_notify`]). It runs inside the pass: it
/// must return at once (hand the rows to a queue, never wait on the network).
pub type AttributedHook = Box<dyn FnMut(&[OomAttributionRow]) + Send>;

/// Runs [`attribute_pending_notify`] every `settings.interval` (first after one interval) over the
/// events of the last `lookback_ms`, until the task is aborted. Failures are logged, reported to
/// `observer` and retried at the next tick. `on_attributed` receives the rows of newly attributed
/// events.
pub fn spawn_attributor(
    client: clickhouse::Client,
    db: String,
    settings: AttributorSettings,
    observer: PassObserver,
    mut on_attributed: Option<AttributedHook>,
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
            let mut hook = |rows: &[OomAttributionRow]| {
                if let Some(h) = on_attributed.as_mut() {
                    h(rows);
                }
            };
            let result = attribute_pending_notify(&client, &db, &opts, &mut |_| {}, &mut hook).await;
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
