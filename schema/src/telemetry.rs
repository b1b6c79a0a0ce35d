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

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human line per event (`2026-12-02T10:00:00Z  INFO oomlens_collector: collector listening
    /// listen=…`), coloured only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields`, the span list): for log
    /// shippers.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" | "human" | "pretty" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format {other:?} (expected text or json)")),
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// The logging flags every binary takes (`--log-format`, or `OOMLENS_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct LogArgs {
    /// Log lines on stderr: `text` (one human line each; colour only on a terminal) or `json` (one
    /// object per line, for log shippers). The filter is `OOMLENS_LOG` (e.g. `debug`).
    #[arg(long, global = true, env = "OOMLENS_LOG_FORMAT", default_value = "text", value_name = "text|json")]
    pub log_format: LogFormat,
}

/// Logs to stderr in `format`, filtered by `OOMLENS_LOG` (e.g. `debug`, `oomlens_collector=debug`)
/// or else `default` (`info` for services, `warn` for interactive commands). Text carries ANSI
/// colour only when stderr is a terminal (never into a file, a pipe or journald).
pub fn init_logging_with(format: LogFormat, default: &str) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("OOMLENS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).flatten_event(false).try_init(),
    };
}

/// A binary's exit for the outcome of its work: on an error, `error: <what>` and one
/// `  caused by: <why>` line per cause on stderr, and exit status 1. Never a backtrace: a refused
/// config, a missing file or an unreachable server is the user's to fix, not a crash (a panic still
/// prints one under `RUST_BACKTRACE`).
pub fn exit_status<E>(outcome: Result<(), E>) -> std::process::ExitCode
where
    E: AsRef<dyn std::error::Error + 'static>,
{
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", error_report(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `error: <what>` then `  caused by: <why>` per cause (repeated messages skipped: some errors
/// repeat their source in their own text).
pub fn error_report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = format!("error: {e}");
    let mut last = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !last.contains(&text) {
            out.push_str("\n  caused by: ");
            out.push_str(&text);
        }
        last = text;
        source = cause.source();
    }
    out
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
    fn log_formats_parse_and_print() {
        assert_eq!("JSON".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert_eq!(LogFormat::Json.to_string(), "json");
        let err = "yaml".parse::<LogFormat>().unwrap_err();
        assert!(err.contains("text or json"), "{err}");
    }

    #[derive(Debug)]
    struct Chained(&'static str, Option<Box<Chained>>);

    impl std::fmt::Display for Chained {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Chained {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|c| c as &(dyn std::error::Error + 'static))
        }
    }

    #[test]
    fn error_reports_name_each_cause_once() {
        let e = Chained(
            "cannot read the config /etc/x.toml",
            Some(Box::new(Chained("No such file", Some(Box::new(Chained("No such file", None)))))),
        );
        assert_eq!(error_report(&e), "error: cannot read the config /etc/x.toml\n  caused by: No such file");
        assert_eq!(error_report(&Chained("plain", None)), "error: plain");
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
