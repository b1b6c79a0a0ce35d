//! The senders: one bounded queue ([`BoundedQueue`], oldest dropped when full) and one task per
//! target (each Alertmanager URL, each webhook), so a slow or dead target delays nobody else.
//! [`Dispatcher::enqueue`] puts an alert on every target's queue that has not had its event yet
//! ([`RecentKeys`]); each task takes what waits (Alertmanager: up to [`alertmanager::BATCH`]
//! alerts per request, webhooks: one), sends it and retries per [`RetryPolicy`] — exponential
//! backoff with jitter on connection errors, timeouts, 5xx, 408 and 429, none on other 4xx. Every
//! outcome is counted in [`AlertMetrics`] by target kind; failures are logged (rate-limited).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use oomlens_schema::retry::jittered;
use tokio::task::JoinHandle;

use super::AlertError;
use super::config::{AlertsSection, WebhookFormat, check_url, resolve_secret};
use super::dedup::RecentKeys;
use super::document::{AlertKey, OomAlert};
use super::http::{AlertHttp, Delivery};
use super::queue::BoundedQueue;
use super::{alertmanager, webhook};
use crate::ingest::warnlimit::WarnLimiter;
use crate::metrics::{AlertMetrics, failed_labels, target_labels};

/// What a target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// An Alertmanager (API v2).
    Alertmanager,
    /// A webhook in one of its formats.
    Webhook(WebhookFormat),
}

impl TargetKind {
    /// The metrics' `target` label: `alertmanager`, `webhook`.
    pub const fn label(self) -> &'static str {
        match self {
            TargetKind::Alertmanager => "alertmanager",
            TargetKind::Webhook(_) => "webhook",
        }
    }
}

/// One place alerts go.
#[derive(Debug, Clone)]
pub struct Target {
    /// Kind and body format.
    pub kind: TargetKind,
    /// Where to `POST`.
    pub uri: Uri,
    /// Extra headers (secrets resolved).
    pub headers: HeaderMap,
    /// How logs name it (no secret: a webhook shows only its host).
    pub name: String,
}

fn header_map(
    key: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<HeaderMap, AlertError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let bad = |why: &str| AlertError::Config(format!("{key}.{name}: {why}"));
        let value = resolve_secret(&format!("{key}.{name}"), value).map_err(AlertError::Config)?;
        map.insert(
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad("not a header name"))?,
            HeaderValue::from_str(&value).map_err(|_| bad("not a header value"))?,
        );
    }
    Ok(map)
}

impl Target {
    /// Every target of `cfg` (secrets read from the environment now).
    pub fn all(cfg: &AlertsSection) -> Result<Vec<Target>, AlertError> {
        let mut out = Vec::new();
        let am_headers = header_map("alerts.alertmanager_headers", &cfg.alertmanager_headers)?;
        for (i, url) in cfg.alertmanager_urls.iter().enumerate() {
            let base =
                check_url(&format!("alerts.alertmanager_urls[{i}]"), url).map_err(AlertError::Config)?;
            let uri = alertmanager::endpoint(&base)
                .map_err(|e| AlertError::Config(format!("alerts.alertmanager_urls[{i}]: {e}")))?;
            out.push(Target {
                kind: TargetKind::Alertmanager,
                name: format!("alertmanager {uri}"),
                uri,
                headers: am_headers.clone(),
            });
        }
        for (i, hook) in cfg.webhooks.iter().enumerate() {
            let key = format!("alerts.webhooks[{i}].url");
            let url = resolve_secret(&key, &hook.url).map_err(AlertError::Config)?;
            let uri = check_url(&key, &url).map_err(AlertError::Config)?;
            let host = uri.host().unwrap_or_default();
            out.push(Target {
                kind: TargetKind::Webhook(hook.format),
                name: format!("webhook #{i} ({host}, {})", hook.format.as_str()),
                headers: header_map(&format!("alerts.webhooks[{i}].headers"), &hook.headers)?,
                uri,
            });
        }
        Ok(out)
    }

    /// Alerts per request.
    pub fn batch_size(&self) -> usize {
        match self.kind {
            TargetKind::Alertmanager => alertmanager::BATCH,
            TargetKind::Webhook(_) => 1,
        }
    }

    /// The request body of `batch` (at most [`Self::batch_size`] alerts).
    pub fn body(&self, batch: &[Arc<OomAlert>]) -> Result<Bytes, serde_json::Error> {
        match self.kind {
            TargetKind::Alertmanager => alertmanager::body(batch).map(Bytes::from),
            TargetKind::Webhook(format) => match batch {
                [alert] => webhook::body(alert, format).map(Bytes::from),
                _ => Err(serde::ser::Error::custom("a webhook takes one alert per request")),
            },
        }
    }
}

/// How often and how patiently a request is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first try.
    pub max_retries: u32,
    /// First backoff.
    pub initial: Duration,
    /// Longest backoff (and longest `Retry-After` honoured).
    pub max: Duration,
}

impl RetryPolicy {
    /// The policy of `[alerts]`.
    pub fn of(cfg: &AlertsSection) -> RetryPolicy {
        RetryPolicy {
            max_retries: cfg.max_retries,
            initial: Duration::from_millis(cfg.retry_initial_ms),
            max: Duration::from_millis(cfg.retry_max_ms),
        }
    }

    /// The wait before retry `retry` (0 = the first retry): `initial × 2^retry` capped at `max`,
    /// a random point in its upper half (jitter: collectors retrying together spread out); a
    /// server's `Retry-After` instead when it asked for longer (capped at `max` too).
    pub fn backoff(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let ceiling = self.initial.saturating_mul(1u32 << retry.min(20)).min(self.max);
        let jittered = jittered(ceiling, rand::random());
        match retry_after {
            Some(asked) if asked > jittered => asked.min(self.max),
            _ => jittered,
        }
    }
}

/// One target's queue and what it already got.
#[derive(Debug)]
struct Lane {
    target: Arc<Target>,
    queue: Arc<BoundedQueue<Arc<OomAlert>>>,
    recent: Mutex<RecentKeys<AlertKey>>,
}

/// The senders of every target.
#[derive(Debug)]
pub struct Dispatcher {
    lanes: Vec<Lane>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    metrics: Arc<AlertMetrics>,
    drop_warnings: WarnLimiter,
}

/// What the dispatcher needs besides its targets.
#[derive(Debug, Clone)]
pub struct DispatchSettings {
    /// Alerts waiting per target.
    pub queue_capacity: usize,
    /// Events remembered per target.
    pub dedup_entries: usize,
    /// How long an event is remembered.
    pub dedup_ttl: Duration,
    /// Retries.
    pub retry: RetryPolicy,
}

impl Dispatcher {
    /// Starts one sender task per target.
    pub fn start(
        targets: Vec<Target>,
        http: AlertHttp,
        settings: &DispatchSettings,
        metrics: Arc<AlertMetrics>,
    ) -> Dispatcher {
        let mut lanes = Vec::new();
        let mut tasks = Vec::new();
        for target in targets {
            metrics.init_target(target.kind.label());
            let target = Arc::new(target);
            let queue = Arc::new(BoundedQueue::new(settings.queue_capacity));
            let sender = Sender {
                target: target.clone(),
                queue: queue.clone(),
                http: http.clone(),
                retry: settings.retry,
                metrics: metrics.clone(),
                warnings: WarnLimiter::default(),
            };
            tracing::info!(target = %target.name, "alert target ready");
            tasks.push(tokio::spawn(sender.run()));
            lanes.push(Lane {
                target,
                queue,
                recent: Mutex::new(RecentKeys::new(settings.dedup_entries, settings.dedup_ttl)),
            });
        }
        Dispatcher { lanes, tasks: Mutex::new(tasks), metrics, drop_warnings: WarnLimiter::default() }
    }

    /// Queues `alert` for every target that has not had its event yet (counted as deduplicated
    /// otherwise); a full queue drops its oldest alert (counted). Never waits.
    pub fn enqueue(&self, alert: Arc<OomAlert>) {
        let key = alert.key();
        let now = Instant::now();
        for lane in &self.lanes {
            let labels = target_labels(lane.target.kind.label());
            let new = lane.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(&key, now);
            if !new {
                self.metrics.alerts_deduplicated.get_or_create(&labels).inc();
                tracing::debug!(target = %lane.target.name, event_id = key.2, "event already alerted; not sent again");
                continue;
            }
            match lane.queue.push(alert.clone()) {
                Some(dropped) => {
                    self.metrics.alerts_dropped.get_or_create(&labels).inc();
                    super::warn_limited(&self.drop_warnings, "queue_full", || {
                        tracing::warn!(
                            target = %lane.target.name,
                            dropped_event_id = %dropped.event.event_id,
                            "alert queue full (alerts.queue_capacity): dropped the oldest waiting alert"
                        );
                    });
                }
                None => {
                    self.metrics.alerts_queued.get_or_create(&labels).inc();
                }
            }
        }
    }

    /// Alerts waiting, all targets together.
    pub fn queued(&self) -> usize {
        self.lanes.iter().map(|l| l.queue.len()).sum()
    }

    /// Stops the senders at once.
    pub fn abort(&self) {
        for task in self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
            task.abort();
        }
    }

    /// Stops taking alerts and gives the senders until `deadline` to deliver what waits; then
    /// stops them (what still waits is lost, and logged).
    pub async fn shutdown(&self, deadline: tokio::time::Instant) {
        for lane in &self.lanes {
            lane.queue.close();
        }
        let tasks =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for mut task in tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
            }
        }
        let left = self.queued();
        if left > 0 {
            tracing::warn!(alerts = left, "alerts still waiting at shutdown were not sent");
        }
    }
}

/// The task sending one target's alerts.
#[derive(Debug)]
struct Sender {
    target: Arc<Target>,
    queue: Arc<BoundedQueue<Arc<OomAlert>>>,
    http: AlertHttp,
    retry: RetryPolicy,
    metrics: Arc<AlertMetrics>,
    warnings: WarnLimiter,
}

impl Sender {
    async fn run(self) {
        while let Some(batch) = self.queue.pop_batch(self.target.batch_size()).await {
            let labels = target_labels(self.target.kind.label());
            self.metrics.alerts_queued.get_or_create(&labels).dec_by(batch.len() as i64);
            self.deliver(&batch).await;
        }
    }

    fn warn(&self, kind: &'static str, message: std::fmt::Arguments<'_>) {
        super::warn_limited(&self.warnings, kind, || tracing::warn!(target = %self.target.name, "{message}"));
    }

    async fn deliver(&self, batch: &[Arc<OomAlert>]) {
        let kind = self.target.kind.label();
        let n = batch.len() as u64;
        let body = match self.target.body(batch) {
            Ok(b) => b,
            Err(e) => {
                self.metrics.alerts_failed.get_or_create(&failed_labels(kind, "encode")).inc_by(n);
                self.warn("encode", format_args!("cannot encode {n} alert(s): {e}"));
                return;
            }
        };
        let mut retry = 0;
        loop {
            let started = Instant::now();
            let outcome = self.http.post_json(&self.target.uri, &self.target.headers, body.clone()).await;
            let labels = target_labels(kind);
            self.metrics.alert_send_seconds.get_or_create(&labels).observe(started.elapsed().as_secs_f64());
            match outcome {
                Delivery::Delivered(status) => {
                    self.metrics.alerts_sent.get_or_create(&labels).inc_by(n);
                    let now = oomlens_schema::text::now_ms();
                    let latency = self.metrics.alert_latency_seconds.get_or_create(&labels);
                    for a in batch {
                        latency.observe(now.saturating_sub(a.event.ts_ms).max(0) as f64 / 1000.0);
                    }
                    tracing::debug!(target = %self.target.name, alerts = n, %status, retries = retry, "alerts delivered");
                    return;
                }
                Delivery::Rejected { status, answer } => {
                    self.metrics.alerts_failed.get_or_create(&failed_labels(kind, "rejected")).inc_by(n);
                    self.warn(
                        "rejected",
                        format_args!("refused {n} alert(s) with {status} (not retried): {answer}"),
                    );
                    return;
                }
                Delivery::Retry { reason, retry_after } => {
                    if retry >= self.retry.max_retries {
                        self.metrics.alerts_failed.get_or_create(&failed_labels(kind, "retries")).inc_by(n);
                        self.warn(
                            "retries",
                            format_args!("gave up on {n} alert(s) after {} tries: {reason}", retry + 1),
                        );
                        return;
                    }
                    let wait = self.retry.backoff(retry, retry_after);
                    tracing::debug!(target = %self.target.name, %reason, retry = retry + 1, wait_ms = wait.as_millis() as u64, "alert request failed; retrying");
                    tokio::time::sleep(wait).await;
                    retry += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_honours_retry_after_up_to_the_cap() {
        let p =
            RetryPolicy { max_retries: 5, initial: Duration::from_millis(100), max: Duration::from_secs(1) };
        for _ in 0..50 {
            let b0 = p.backoff(0, None);
            assert!((Duration::from_millis(50)..=Duration::from_millis(100)).contains(&b0), "{b0:?}");
            let b2 = p.backoff(2, None);
            assert!((Duration::from_millis(200)..=Duration::from_millis(400)).contains(&b2), "{b2:?}");
            let b9 = p.backoff(9, None);
            assert!((Duration::from_millis(500)..=Duration::from_secs(1)).contains(&b9), "capped: {b9:?}");
            assert!(p.backoff(40, None) <= Duration::from_secs(1));
        }
        assert_eq!(p.backoff(0, Some(Duration::from_millis(700))), Duration::from_millis(700));
        assert_eq!(p.backoff(0, Some(Duration::from_secs(60))), Duration::from_secs(1), "capped");
    }

    #[test]
    fn targets_resolve_endpoints_secrets_and_safe_names() {
        let cfg: AlertsSection = toml::from_str(
            "alertmanager_urls = ['http://am-0:9093', 'http://am-1:9093/']\n\
             alertmanager_headers = { Authorization = 'Bearer x' }\n\
             [[webhooks]]\nurl = 'https://hooks.example/services/SECRET'\nformat = 'slack'\n",
        )
        .unwrap();
        let t = Target::all(&cfg).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[1].uri.to_string(), "http://am-1:9093/api/v2/alerts");
        assert_eq!(t[0].headers["authorization"], "Bearer x");
        assert_eq!((t[0].batch_size(), t[2].batch_size()), (alertmanager::BATCH, 1));
        assert_eq!(t[2].kind, TargetKind::Webhook(WebhookFormat::Slack));
        assert!(!t[2].name.contains("SECRET"), "{}", t[2].name);
        let unset: AlertsSection =
            toml::from_str("[[webhooks]]\nurl = 'env:OOMLENS_TEST_NO_SUCH_VARIABLE'\n").unwrap();
        unset.validate().unwrap();
        let err = Target::all(&unset).unwrap_err().to_string();
        assert!(
            err.contains("OOMLENS_TEST_NO_SUCH_VARIABLE") && err.contains("alerts.webhooks[0].url"),
            "{err}"
        );
    }
}
