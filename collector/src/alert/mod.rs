//! OOM alerts with their cause: each OOM event the attributor attributes for the first time is
//! sent to Alertmanager (API v2) and to webhooks (generic JSON or Slack-compatible) as one alert
//! carrying who failed (cluster, node, GPU, namespace / pod / job), the attributed scenario, and
//! the evidence, remedy and postmortem command. Data flows one way:
//!
//! ```text
//! attributor (analysis::store) ──rows it just stored──▶ notify (filter, queue) ──▶ labels (ClickHouse lookup)
//!     ──▶ document (the alert) ──▶ dispatch (per-target bounded queue, dedup, retries) ──▶ alertmanager / webhook bodies ──▶ http
//! ```
//!
//! * [`config`] — `[alerts]`: targets, filters, queue and retry settings, templates, TLS.
//! * [`notify`] — the attributor's hook: which events alert, the bounded hand-over queue, the
//!   task that looks up labels and builds alerts.
//! * [`labels`] — the events' labels (pod, namespace, job) and GPU UUIDs, from ClickHouse.
//! * [`document`] — the alert of one event: labels, annotations, times, the event itself.
//! * [`template`] — the `postmortem_command` and `generator_url` templates.
//! * [`alertmanager`] — Alertmanager's endpoint and body; [`webhook`] — the webhooks' bodies.
//! * [`dispatch`] — targets, per-target queues and deduplication, sending with retries.
//! * [`queue`] — the bounded queue (drops the oldest when full); [`dedup`] — the bounded set of
//!   events already sent.
//! * [`http`] — the HTTP(S) client and how answers are classified.
//!
//! Only events attributed for the first time alert: not re-scored rows after a rules upgrade,
//! not `oomlens attribute` (the CLI has no hook), not a `--force` recompute. An event attributed
//! twice (two collectors on one ClickHouse) is deduplicated: by each target's set of sent events
//! here, and by Alertmanager through the event's stable label set (`event_id`). Delivery is at
//! most once across a collector restart: alerts still queued when the collector stops (after a
//! grace period to send them) are lost, and the restarted attributor does not attribute the event
//! again.

pub mod alertmanager;
pub mod config;
pub mod dedup;
pub mod dispatch;
pub mod document;
pub mod http;
pub mod labels;
pub mod notify;
pub mod queue;
pub mod template;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use oomlens_schema::rows::OomAttributionRow;
use tokio::task::JoinHandle;

pub use config::{AlertsSection, WebhookConfig, WebhookFormat};
pub use dispatch::{DispatchSettings, Dispatcher, RetryPolicy, Target, TargetKind};
pub use document::{AlertBuilder, OomAlert};
pub use labels::LabelSource;
pub use notify::{AlertFilter, Notifier};

use crate::https::{ClientTlsFiles, HttpsTlsError};
use crate::metrics::AlertMetrics;

/// Calls `log` when `limiter` lets a warning of `kind` through now (after logging what it held
/// back in the last window): a failing target or an OOM storm must not flood the log (every
/// event is still counted in the metrics).
fn warn_limited(limiter: &crate::ingest::warnlimit::WarnLimiter, kind: &'static str, log: impl FnOnce()) {
    let (allowed, summary) = limiter.allow(kind);
    if let Some(summary) = summary {
        tracing::warn!(suppressed = %summary, "alert warnings not logged in the last minute");
    }
    if allowed {
        log();
    }
}

/// The alerts could not start.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    /// A setting cannot be used (an unset `env:` variable, a bad URL).
    #[error("{0}")]
    Config(String),
    /// The TLS files cannot be used.
    #[error(transparent)]
    Tls(#[from] HttpsTlsError),
}

/// Running alerts: the notifier the attributor calls, the task looking up labels, the senders.
#[derive(Debug)]
pub struct Alerting {
    notifier: Arc<Notifier>,
    input: Arc<queue::BoundedQueue<notify::PendingEvent>>,
    builder: AlertBuilder,
    dispatcher: Arc<Dispatcher>,
    enricher: JoinHandle<()>,
}

impl Alerting {
    /// Starts the senders of `cfg`'s targets (checked configuration; `env:` secrets and TLS files
    /// are read now). `labels`: where events' labels are looked up (`None`: not at all).
    pub fn start(
        cfg: &AlertsSection,
        labels: Option<LabelSource>,
        metrics: Arc<AlertMetrics>,
    ) -> Result<Alerting, AlertError> {
        let targets = Target::all(cfg)?;
        let tls = cfg.any_https().then_some(ClientTlsFiles {
            section: "alerts",
            ca: cfg.tls_ca.as_deref(),
            cert: cfg.tls_cert.as_deref(),
            key: cfg.tls_key.as_deref(),
        });
        let http = http::AlertHttp::new(tls, Duration::from_millis(cfg.timeout_ms))?;
        let builder = AlertBuilder::new(cfg).map_err(AlertError::Config)?;
        let mut kinds: Vec<&'static str> = targets.iter().map(|t| t.kind.label()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        let settings = DispatchSettings {
            queue_capacity: cfg.queue_capacity,
            dedup_entries: cfg.dedup_entries,
            dedup_ttl: Duration::from_millis(cfg.dedup_ttl_ms),
            retry: RetryPolicy::of(cfg),
        };
        let dispatcher = Arc::new(Dispatcher::start(targets, http, &settings, metrics.clone()));
        let input = Arc::new(queue::BoundedQueue::new(cfg.queue_capacity));
        let notifier = Arc::new(Notifier::new(AlertFilter::of(cfg), input.clone(), metrics, kinds));
        let enricher =
            tokio::spawn(notify::run_enricher(input.clone(), labels, builder.clone(), dispatcher.clone()));
        Ok(Alerting { notifier, input, builder, dispatcher, enricher })
    }

    /// The attributor's hook: [`Notifier::offer`].
    pub fn notifier(&self) -> Arc<Notifier> {
        self.notifier.clone()
    }

    /// Offers rows as the attributor would (see [`Notifier::offer`]).
    pub fn offer(&self, rows: &[OomAttributionRow]) {
        self.notifier.offer(rows);
    }

    /// The builder of this configuration's alerts.
    pub fn builder(&self) -> &AlertBuilder {
        &self.builder
    }

    /// Sends a built alert to every target (deduplicated like the attributor's).
    pub fn send(&self, alert: OomAlert) {
        self.dispatcher.enqueue(Arc::new(alert));
    }

    /// Alerts and events waiting, all queues together.
    pub fn queued(&self) -> usize {
        self.input.len() + self.dispatcher.queued()
    }

    /// Stops at once: what waits is lost (a crash, in tests).
    pub fn abort(self) {
        self.enricher.abort();
        self.dispatcher.abort();
    }

    /// Stops taking events and gives what waits up to `grace` to be delivered; the rest is dropped.
    pub async fn shutdown(self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        self.input.close();
        let mut enricher = self.enricher;
        if tokio::time::timeout_at(deadline, &mut enricher).await.is_err() {
            enricher.abort();
        }
        self.dispatcher.shutdown(deadline).await;
    }
}
