//! From the attributor to the senders. [`Notifier::offer`] is the attributor's hook: it gets the
//! rows of newly attributed events, keeps those that should alert (`alerts.min_confidence`,
//! `alerts.scenarios`, `alerts.max_event_age_ms`; the others counted by reason), turns each into
//! its attributed event ([`EventJson`]: features re-derived, rules re-run for the evidence) and
//! queues it — never waiting, so alerting can never slow the attributor down (a full queue drops
//! its oldest event, counted for every target). A task ([`run_enricher`]) takes the queued events
//! in batches, looks up their labels ([`LabelSource`]), builds their alerts and hands them to the
//! [`Dispatcher`].

use std::sync::Arc;

use oomlens_schema::Scenario;
use oomlens_schema::rows::OomAttributionRow;

use super::config::AlertsSection;
use super::dispatch::Dispatcher;
use super::document::{AlertBuilder, key_of};
use super::labels::LabelSource;
use super::queue::BoundedQueue;
use crate::analysis::attribute;
use crate::analysis::json::EventJson;
use crate::analysis::store::features_of;
use crate::ingest::warnlimit::WarnLimiter;
use crate::metrics::{AlertMetrics, target_labels};

/// Events per label lookup.
pub const LOOKUP_BATCH: usize = 256;

/// An attributed event waiting for its labels.
#[derive(Debug)]
pub struct PendingEvent {
    /// The event.
    pub event: EventJson,
    /// When its attribution was stored.
    pub attributed_ms: i64,
}

/// Which attributed events alert.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertFilter {
    /// Lowest confidence, percent.
    pub min_confidence_pct: f64,
    /// The scenarios that alert (`None`: all).
    pub scenarios: Option<Vec<Scenario>>,
    /// Oldest event (failure time before attribution), ms; 0: any.
    pub max_age_ms: i64,
}

impl AlertFilter {
    /// The filter of `[alerts]`.
    pub fn of(cfg: &AlertsSection) -> AlertFilter {
        AlertFilter {
            min_confidence_pct: cfg.min_confidence * 100.0,
            scenarios: cfg.scenario_filter(),
            max_age_ms: i64::try_from(cfg.max_event_age_ms).unwrap_or(i64::MAX),
        }
    }

    /// Why `row` does not alert at `now_ms` (`confidence`, `scenario`, `age`), `None` when it does.
    pub fn reject(&self, row: &OomAttributionRow, now_ms: i64) -> Option<&'static str> {
        if f64::from(row.confidence_pct) + 1e-9 < self.min_confidence_pct {
            return Some("confidence");
        }
        if let Some(allowed) = &self.scenarios
            && !allowed.iter().any(|s| s.as_str() == row.scenario)
        {
            return Some("scenario");
        }
        if self.max_age_ms > 0 && now_ms.saturating_sub(row.ts_ms) > self.max_age_ms {
            return Some("age");
        }
        None
    }
}

/// The attributor's side of the alerts.
#[derive(Debug)]
pub struct Notifier {
    filter: AlertFilter,
    input: Arc<BoundedQueue<PendingEvent>>,
    metrics: Arc<AlertMetrics>,
    target_kinds: Vec<&'static str>,
    drop_warnings: WarnLimiter,
}

impl Notifier {
    /// A notifier queueing into `input`; `target_kinds` are counted when the queue drops an event.
    pub fn new(
        filter: AlertFilter,
        input: Arc<BoundedQueue<PendingEvent>>,
        metrics: Arc<AlertMetrics>,
        target_kinds: Vec<&'static str>,
    ) -> Notifier {
        Notifier { filter, input, metrics, target_kinds, drop_warnings: WarnLimiter::default() }
    }

    /// Queues the events of `rows` (just stored by the attributor) that should alert. Never waits.
    pub fn offer(&self, rows: &[OomAttributionRow]) {
        let now = oomlens_schema::text::now_ms();
        for row in rows {
            if let Some(reason) = self.filter.reject(row, now) {
                self.metrics.alerts_filtered.get_or_create(&vec![("reason", reason.to_owned())]).inc();
                continue;
            }
            let features = features_of(row);
            let attribution = attribute(&features);
            let event = EventJson::new(&features, &attribution, &[]);
            if let Some(dropped) = self.input.push(PendingEvent { event, attributed_ms: row.attributed_ms }) {
                for kind in &self.target_kinds {
                    self.metrics.alerts_dropped.get_or_create(&target_labels(kind)).inc();
                }
                super::warn_limited(&self.drop_warnings, "queue_full", || {
                    tracing::warn!(
                        dropped_event_id = %dropped.event.event_id,
                        "alert queue full (alerts.queue_capacity): dropped the oldest attributed event waiting"
                    );
                });
            }
        }
    }
}

/// Takes queued events in batches until the queue is closed: labels looked up, alerts built
/// (sent now: their resolve time starts now) and handed to `dispatcher`.
pub async fn run_enricher(
    input: Arc<BoundedQueue<PendingEvent>>,
    labels: Option<LabelSource>,
    builder: AlertBuilder,
    dispatcher: Arc<Dispatcher>,
) {
    while let Some(batch) = input.pop_batch(LOOKUP_BATCH).await {
        let (mut events, attributed): (Vec<EventJson>, Vec<i64>) =
            batch.into_iter().map(|p| (p.event, p.attributed_ms)).unzip();
        let uuids = match &labels {
            Some(source) => source.fill(&mut events).await,
            None => Default::default(),
        };
        let now = oomlens_schema::text::now_ms();
        for (event, attributed_ms) in events.into_iter().zip(attributed) {
            let uuid = uuids.get(&key_of(&event)).cloned();
            let alert = builder.build(event, uuid.as_deref(), attributed_ms, now);
            dispatcher.enqueue(Arc::new(alert));
        }
    }
}

/// The rows' scenarios, for [`AlertMetrics::count_attributed`].
pub fn scenarios(rows: &[OomAttributionRow]) -> impl Iterator<Item = &str> {
    rows.iter().map(|r| r.scenario.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scenario: &str, pct: u8, ts_ms: i64) -> OomAttributionRow {
        OomAttributionRow {
            scenario: scenario.into(),
            confidence_pct: pct,
            ts_ms,
            ..OomAttributionRow::default()
        }
    }

    #[test]
    fn the_filter_says_why_an_event_does_not_alert() {
        let mut cfg =
            AlertsSection { min_confidence: 0.5, max_event_age_ms: 1000, ..AlertsSection::default() };
        cfg.scenarios = vec!["batch".into(), "contention".into()];
        let f = AlertFilter::of(&cfg);
        assert_eq!(f.reject(&row("batch", 50, 5000), 5500), None);
        assert_eq!(f.reject(&row("batch", 49, 5000), 5500), Some("confidence"));
        assert_eq!(f.reject(&row("static", 90, 5000), 5500), Some("scenario"));
        assert_eq!(f.reject(&row("contention", 90, 5000), 7000), Some("age"));
        let any = AlertFilter::of(&AlertsSection { max_event_age_ms: 0, ..AlertsSection::default() });
        assert_eq!(any.reject(&row("unknown", 0, 0), i64::MAX), None);
    }
}
