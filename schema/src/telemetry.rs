//! The HTTP telemetry endpoint (feature `telemetry`): `GET /metrics` (Prometheus text exposition of
//! a `prometheus-client` registry), `GET /healthz` (alive: 200 unless the owner's [`Heartbeat`]
//! has not beaten for its maximum age — a wedged main loop) and `GET /readyz` (200 only
//! while the owner says it is ready, e.g. connected to ClickHouse / the collector, and nothing is
//! [`Degraded`]) — plus the process-level plumbing every binary shares: log set-up and the stop
//! signal.
//!
//! A degraded component (the agent's spool on a disk that refuses writes) keeps `/healthz` at 200
//! — restarting the process would lose what it holds in memory — and names itself in the body
//! (`ok, degraded: spool: …`); `/readyz` answers 503 with the same reason, so the state shows in
//! `kubectl get pods` and in load-balancer health checks.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Readiness flag shared between the owner and the endpoint.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Sets readiness.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    /// Current readiness.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Components working in a degraded mode, with the reason (shared between the owner and the
/// endpoint).
#[derive(Debug, Clone, Default)]
pub struct Degraded(Arc<Mutex<BTreeMap<&'static str, String>>>);

impl Degraded {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, String>> {
        // The map is always consistent: keep using it after a panic elsewhere.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `component` degraded for `reason` (replacing an earlier reason).
    pub fn set(&self, component: &'static str, reason: impl Into<String>) {
        self.lock().insert(component, reason.into());
    }

    /// `component` works normally again.
    pub fn clear(&self, component: &'static str) {
        self.lock().remove(component);
    }

    /// `component: reason; …` of every degraded component, `None` when none is.
    pub fn summary(&self) -> Option<String> {
        let m = self.lock();
        (!m.is_empty()).then(|| m.iter().map(|(c, r)| format!("{c}: {r}")).collect::<Vec<_>>().join("; "))
    }
}

/// Liveness for `/healthz`: the owner's main loop calls [`beat`](Self::beat) on every turn, and
/// `/healthz` answers 503 once the last beat (or the creation) is older than the maximum age.
/// [`Heartbeat::always`] has no loop to watch: `/healthz` answers 200 while the endpoint serves.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat(Option<Arc<HeartbeatState>>);

#[derive(Debug)]
struct HeartbeatState {
    started: Instant,
    /// Milliseconds after `started` of the last beat.
    last_ms: AtomicU64,
    max_age_ms: u64,
}

impl Heartbeat {
    /// No loop to watch.
    pub fn always() -> Self {
        Heartbeat(None)
    }

    /// Alive while a beat comes at least every `max_age` (creation counts as the first beat).
    pub fn watching(max_age: Duration) -> Self {
        Heartbeat(Some(Arc::new(HeartbeatState {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            max_age_ms: u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX),
        })))
    }

    /// The watched loop made progress.
    pub fn beat(&self) {
        if let Some(s) = &self.0 {
            s.last_ms.store(elapsed_ms(s.started), Ordering::Relaxed);
        }
    }

    /// Time since the last beat, `None` without a loop to watch.
    pub fn since_last_beat(&self) -> Option<Duration> {
        self.0.as_ref().map(|s| {
            Duration::from_millis(elapsed_ms(s.started).saturating_sub(s.last_ms.load(Ordering::Relaxed)))
        })
    }

    /// False once the last beat is older than the maximum age.
    pub fn alive(&self) -> bool {
        match (&self.0, self.since_last_beat()) {
            (Some(s), Some(age)) => age.as_millis() <= u128::from(s.max_age_ms),
            _ => true,
        }
    }
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    ready: Readiness,
    health: Heartbeat,
    degraded: Degraded,
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("cannot encode metrics: {e}\n"),
        ),
    }
}

async fn healthz(State(state): State<AppState>) -> (StatusCode, String) {
    if state.health.alive() {
        match state.degraded.summary() {
            Some(d) => (StatusCode::OK, format!("ok, degraded: {d}\n")),
            None => (StatusCode::OK, "ok\n".to_owned()),
        }
    } else {
        let age = state.health.since_last_beat().unwrap_or_default();
        (StatusCode::SERVICE_UNAVAILABLE, format!("stalled: no progress for {} ms\n", age.as_millis()))
    }
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    match (state.ready.get(), state.degraded.summary()) {
        (_, Some(d)) => (StatusCode::SERVICE_UNAVAILABLE, format!("degraded: {d}\n")),
        (true, None) => (StatusCode::OK, "ready\n".to_owned()),
        (false, None) => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n".to_owned()),
    }
}

/// Binds `addr` and serves the endpoint until the returned task is aborted.
/// Returns the bound address (useful with port 0).
pub async fn serve(
    addr: SocketAddr,
    registry: Arc<Registry>,
    ready: Readiness,
    health: Heartbeat,
    degraded: Degraded,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState { registry, ready, health, degraded });
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "telemetry endpoint stopped");
        }
    });
    Ok((local, task))
}

/// Logs to stderr; the filter comes from `OOMLENS_LOG` (e.g. `debug`, `oomlens_collector=debug`),
/// default `info`.
pub fn init_logging() {
    init_logging_with_default("info");
}

/// Like [`init_logging`] with another default filter (e.g. `warn` for interactive commands).
pub fn init_logging_with_default(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("OOMLENS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn stop_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// A watch channel that turns true on Ctrl-C or SIGTERM.
pub fn stop_on_signal() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if let Err(e) = stop_signal().await {
            tracing::error!(error = %e, "cannot listen for stop signals");
            return;
        }
        tracing::info!("stop signal received");
        let _ = tx.send(true);
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn heartbeat_ages_and_beats() {
        assert!(Heartbeat::always().alive());
        assert_eq!(Heartbeat::always().since_last_beat(), None);
        let h = Heartbeat::watching(Duration::from_millis(50));
        assert!(h.alive(), "creation counts as a beat");
        std::thread::sleep(Duration::from_millis(80));
        assert!(!h.alive(), "no beat for longer than the maximum age");
        h.clone().beat();
        assert!(h.alive(), "clones share the beat");
    }

    #[tokio::test]
    async fn endpoint_answers_metrics_health_and_readiness() {
        let ready = Readiness::default();
        let health = Heartbeat::watching(Duration::from_millis(100));
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let degraded = Degraded::default();
        let (addr, task) =
            serve(any, Arc::new(Registry::default()), ready.clone(), health.clone(), degraded.clone())
                .await
                .unwrap();
        assert!(get(addr, "/metrics").await.starts_with("HTTP/1.0 200"));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.0 503"));
        ready.set(true);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.0 200"));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.0 200"));
        tokio::time::sleep(Duration::from_millis(150)).await;
        let stalled = get(addr, "/healthz").await;
        assert!(stalled.starts_with("HTTP/1.0 503") && stalled.contains("stalled"), "{stalled}");
        health.beat();
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.0 200"));
        // Degraded: alive (200, named in the body), not ready (503 with the reason).
        degraded.set("spool", "the disk refused a write");
        let h = get(addr, "/healthz").await;
        assert!(
            h.starts_with("HTTP/1.0 200") && h.contains("ok, degraded: spool: the disk refused a write"),
            "{h}"
        );
        let r = get(addr, "/readyz").await;
        assert!(
            r.starts_with("HTTP/1.0 503") && r.contains("degraded: spool: the disk refused a write"),
            "{r}"
        );
        degraded.clear("spool");
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.0 200"));
        task.abort();
    }
}
