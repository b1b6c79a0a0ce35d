//! A whole collector: connect to ClickHouse (retrying while it is unreachable), migrate and check
//! the schema, start the batched sink, the retention task, the attributor (`[attribution]`) with
//! the OOM alerts it feeds (`[alerts]`), the telemetry endpoint and the QUIC server; stop them in
//! order. Used by `oomlens-collector serve`, the demo and the tests.
//!
//! Readiness (`/readyz`, gauge `clickhouse_up`) follows ClickHouse: a health task pings it every
//! [`HEALTH_INTERVAL`]; the collector is ready while the ping answers, the writer is running and
//! its last insert did not fail.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use oomlens_schema::telemetry::Readiness;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{error, info};

use crate::alert::{AlertError, Alerting, LabelSource};
use crate::clickhouse::{Ch, ChConfig, ChError, Sink, SinkStats};
use crate::config::ValidConfig;
use crate::ingest::server::{Server, ServerError};
use crate::metrics::{AlertMetrics, CollectorMetrics};

/// The collector could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// ClickHouse refused the migration or schema check.
    #[error(transparent)]
    ClickHouse(#[from] ChError),
    /// The QUIC server could not start.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// The telemetry endpoint could not bind.
    #[error("cannot serve telemetry on {addr}: {source}")]
    Telemetry {
        /// The configured `[telemetry] listen` address.
        addr: SocketAddr,
        /// Why binding it failed (e.g. address in use).
        source: std::io::Error,
    },
    /// Stopped before ClickHouse became reachable.
    #[error("stopped while waiting for ClickHouse at {0}")]
    Stopped(String),
    /// The alerts could not start (TLS files, an unset `env:` variable).
    #[error("alerts: {0}")]
    Alerts(#[from] AlertError),
}

/// How long queued alerts may still be sent when the collector stops.
pub const ALERT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Connects to ClickHouse, retrying with back-off (logging each failure clearly) until it answers
/// or `stop` turns true. Configuration errors are not retried.
pub async fn connect_with_retry(
    cfg: &ChConfig,
    stop: &mut watch::Receiver<bool>,
) -> Result<Ch, ServiceError> {
    let mut delay = Duration::from_millis(200);
    loop {
        match Ch::connect(cfg).await {
            Ok(ch) => return Ok(ch),
            Err(e @ ChError::InvalidConfig(_)) => return Err(e.into()),
            Err(e) => {
                error!(error = %e, retry_in_ms = delay.as_millis() as u64, "ClickHouse is not reachable; retrying")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.changed() => return Err(ServiceError::Stopped(cfg.url.clone())),
        }
        if *stop.borrow() {
            return Err(ServiceError::Stopped(cfg.url.clone()));
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

/// How often the health task pings ClickHouse.
pub const HEALTH_INTERVAL: Duration = Duration::from_millis(500);
/// How long one health ping may take before ClickHouse counts as down.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Keeps `readiness` and `clickhouse_up` in line with ClickHouse and the writer; runs until aborted.
async fn watch_health(ch: Ch, stats: Arc<SinkStats>, readiness: Readiness, metrics: Arc<CollectorMetrics>) {
    use std::sync::atomic::Ordering;
    let mut was_up = true;
    loop {
        let ping =
            tokio::time::timeout(HEALTH_TIMEOUT, ch.client().query("SELECT 1").fetch_one::<u8>()).await;
        let reachable = matches!(ping, Ok(Ok(1)));
        let writing =
            !stats.insert_failing.load(Ordering::Relaxed) && !stats.writer_stopped.load(Ordering::Relaxed);
        let up = reachable && writing;
        readiness.set(up);
        metrics.clickhouse_up.set(i64::from(up));
        if up != was_up {
            if up {
                info!("ClickHouse is reachable and inserts succeed again: ready");
            } else {
                error!(
                    reachable,
                    writing,
                    last_error = stats.last_error().as_deref().unwrap_or("none"),
                    "ClickHouse is down or failing: not ready"
                );
            }
            was_up = up;
        }
        tokio::time::sleep(HEALTH_INTERVAL).await;
    }
}

/// Starts the periodic attributor ([`crate::analysis::store::spawn_attributor`]) with its
/// outcome counted in `metrics`, the newly attributed events counted by scenario and, with
/// `alerts`, offered to them.
fn spawn_attributor(
    ch: &Ch,
    cfg: &crate::config::AttributionSection,
    metrics: Arc<CollectorMetrics>,
    alert_metrics: Arc<AlertMetrics>,
    alerts: Option<&Alerting>,
) -> JoinHandle<()> {
    use crate::analysis::store;
    let observer: store::PassObserver = Box::new(move |result, took| {
        metrics.attribution_pass_seconds.observe(took.as_secs_f64());
        match result {
            Ok(r) => {
                metrics.attributed_events.inc_by(r.attributed);
                metrics.attribution_pending.set(i64::try_from(r.pending).unwrap_or(i64::MAX));
            }
            Err(_) => {
                metrics.attribution_errors.inc();
            }
        }
    });
    let notifier = alerts.map(Alerting::notifier);
    let hook: store::AttributedHook = Box::new(move |rows| {
        alert_metrics.count_attributed(crate::alert::notify::scenarios(rows));
        if let Some(n) = &notifier {
            n.offer(rows);
        }
    });
    info!(interval_ms = cfg.interval_ms, settle_ms = cfg.settle_ms, "attributor started");
    store::spawn_attributor(
        ch.client().clone(),
        ch.database().to_owned(),
        cfg.settings(),
        observer,
        Some(hook),
    )
}

/// A running collector.
#[derive(Debug)]
pub struct RunningCollector {
    /// QUIC address.
    pub addr: SocketAddr,
    /// Telemetry address, when enabled.
    pub telemetry_addr: Option<SocketAddr>,
    /// The sink's counters.
    pub sink_stats: Arc<SinkStats>,
    /// Connection metrics.
    pub metrics: Arc<CollectorMetrics>,
    /// The alerts' metrics and the attributed events by scenario.
    pub alert_metrics: Arc<AlertMetrics>,
    /// Readiness as `/readyz` reports it.
    pub readiness: Readiness,
    shutdown: watch::Sender<bool>,
    tls: crate::ingest::auth::TlsReloader,
    server: JoinHandle<()>,
    sink_task: crate::clickhouse::SinkTask,
    shutdown_flush: Duration,
    background: Vec<JoinHandle<()>>,
    alerts: Option<Alerting>,
}

impl RunningCollector {
    /// Stops accepting, closes connections, flushes the sink and stops every task.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.server.await;
        for t in &self.background {
            t.abort();
        }
        if let Some(alerts) = self.alerts {
            alerts.shutdown(ALERT_SHUTDOWN_GRACE).await;
        }
        // The server's sink handles are gone now; the writer flushes and exits, or is stopped
        // after `collector.shutdown_flush_timeout_ms` (ClickHouse down): what it held was never
        // acknowledged, so the agents send it again.
        match self.sink_task.join_within(self.shutdown_flush).await {
            Ok(true) => {}
            Ok(false) => error!(
                batches = self.sink_stats.unstored(),
                timeout_ms = self.shutdown_flush.as_millis() as u64,
                last_error = self.sink_stats.last_error().unwrap_or_default(),
                "ClickHouse writer stopped before it could store every batch; they were not acknowledged and \
                 their agents send them again"
            ),
            Err(e) => error!(error = %e, "ClickHouse writer ended abnormally"),
        }
        info!("collector stopped");
    }

    /// Re-reads the CA bundle, certificate and key now (SIGHUP) and, when they are valid, uses
    /// them for new connections; open connections keep theirs. A broken file leaves the current
    /// material in force.
    pub fn reload_tls(&self) -> crate::ingest::auth::TlsReloadOutcome {
        self.tls.reload(true)
    }

    /// Stops at once without flushing (simulates a crash in tests).
    pub fn abort(self) {
        self.server.abort();
        self.sink_task.abort();
        for t in &self.background {
            t.abort();
        }
        if let Some(alerts) = self.alerts {
            alerts.abort();
        }
    }
}

/// Starts a collector. Checks its TLS files first (a missing or broken certificate is reported at
/// once, not after ClickHouse answers), then waits (retrying) for ClickHouse; `stop` aborts that
/// wait.
pub async fn start(
    cfg: ValidConfig,
    mut stop: watch::Receiver<bool>,
) -> Result<RunningCollector, ServiceError> {
    let server_cfg = cfg.server();
    oomlens_schema::tls::server_config(&server_cfg.tls, server_cfg.idle_timeout)
        .map_err(ServerError::from)?;
    let ch = connect_with_retry(&cfg.clickhouse, &mut stop).await?;
    let report = ch.migrate().await?;
    info!(%report, "schema ready");
    let mut background = Vec::new();
    if !ch.caps().ttl {
        background.push(ch.spawn_retention(Duration::from_secs(3600)));
    }
    let health_ch = ch.clone();
    let attributor_ch = ch.clone();
    let alerts = cfg.alerts.enabled().then(|| {
        let labels = LabelSource {
            client: ch.client().clone(),
            database: ch.database().to_owned(),
            timeout: Duration::from_millis(cfg.alerts.timeout_ms),
        };
        (cfg.alerts.clone(), labels)
    });
    let (sink, sink_task) = Sink::spawn(ch, &cfg.clickhouse, cfg.collector.collector_id.clone());
    let sink_stats = sink.stats();
    let mut registry = Registry::default();
    let metrics = CollectorMetrics::register(&mut registry, Some(sink_stats.clone()));
    let alert_metrics = AlertMetrics::register(&mut registry);
    let alerts = match alerts {
        Some((section, labels)) => {
            let alerting = Alerting::start(&section, Some(labels), alert_metrics.clone())?;
            info!(
                alertmanagers = section.alertmanager_urls.len(),
                webhooks = section.webhooks.len(),
                "OOM alerts on"
            );
            Some(alerting)
        }
        None => None,
    };
    if cfg.attribution.enabled {
        background.push(spawn_attributor(
            &attributor_ch,
            &cfg.attribution,
            metrics.clone(),
            alert_metrics.clone(),
            alerts.as_ref(),
        ));
    }
    let readiness = Readiness::default();
    let telemetry_addr = match cfg.telemetry.listen {
        Some(addr) => {
            let (bound, task) = oomlens_schema::telemetry::serve(
                addr,
                Arc::new(registry),
                readiness.clone(),
                oomlens_schema::telemetry::Heartbeat::always(),
                oomlens_schema::telemetry::Degraded::default(),
            )
            .await
            .map_err(|source| ServiceError::Telemetry { addr, source })?;
            background.push(task);
            Some(bound)
        }
        None => None,
    };
    let server = Server::bind(cfg.server(), sink, metrics.clone())?;
    let addr =
        server.local_addr().map_err(|source| ServerError::Bind { addr: cfg.collector.listen, source })?;
    let (shutdown, shutdown_rx) = watch::channel(false);
    let tls = server.tls_reloader();
    let server = tokio::spawn(server.run(shutdown_rx));
    readiness.set(true);
    metrics.clickhouse_up.set(1);
    background.push(tokio::spawn(watch_health(
        health_ch,
        sink_stats.clone(),
        readiness.clone(),
        metrics.clone(),
    )));
    Ok(RunningCollector {
        addr,
        telemetry_addr,
        sink_stats,
        metrics,
        alert_metrics,
        readiness,
        shutdown,
        tls,
        server,
        sink_task,
        shutdown_flush: Duration::from_millis(cfg.collector.shutdown_flush_timeout_ms),
        background,
        alerts,
    })
}
