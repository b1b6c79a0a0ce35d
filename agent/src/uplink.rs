//! The QUIC uplink: one session at a time to one of the configured collectors.
//!
//! Session: open a bidirectional stream, send `Hello`, read `Welcome` (which says the highest
//! sequence number the collector already stored for this agent and boot id), then stream every
//! pending batch from the spool in order — at most `max_in_flight` un-acknowledged — while a reader
//! task turns `Ack { seq }` frames (cumulative) into spool deletions. On any failure the session
//! ends, the agent backs off and reconnects (to the next collector when several are listed) and
//! re-sends whatever is still pending: at-least-once delivery, made idempotent by (agent, boot id,
//! seq) on the collector.
//!
//! Several collectors: each agent starts at the endpoint [`first_collector`] picks from a hash of
//! its agent id (a fleet spreads evenly over the list, and one agent always starts at the same
//! one), stays there while sessions succeed, and moves to the next endpoint in the list after a
//! failed session — so when a collector dies its agents spread over the rest.
//!
//! Session state: [`UplinkHandle::connected`], the `connected` gauge and, when given
//! ([`Uplink::with_readiness`]), the telemetry readiness flag (`/readyz`) are true exactly while a
//! session is live — from the collector's `Welcome` until the session ends (error, close, stop).
//!
//! TLS reload: before every connection attempt the CA bundle, certificate and key are re-read;
//! when their content changed the next connection uses the new material (a broken file is logged
//! and counted once, and the previous material stays in use).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use oomlens_schema::retry::Backoff;
use oomlens_schema::telemetry::Readiness;
use oomlens_schema::tls::{Reload, TlsError, TlsFiles, TlsMaterial, TlsWatch, client_config_from};
use oomlens_schema::transport::{TransportError, read_frame, write_frame};
use oomlens_schema::{Batch, Frame, FrameError, Hello};
use tokio::sync::{Notify, mpsc, watch};
use tracing::{debug, info, warn};

use crate::metrics::AgentMetrics;
use crate::spool::{PendingBatch, RowCounts, Spool, SpoolError};

/// Uplink settings.
#[derive(Debug, Clone)]
pub struct UplinkConfig {
    /// Collector endpoints, `host:port`; tried in turn.
    pub collectors: Vec<String>,
    /// TLS server name the collector certificate must carry.
    pub server_name: String,
    /// CA, certificate and key.
    pub tls: TlsFiles,
    /// Connection attempt timeout.
    pub connect_timeout: Duration,
    /// QUIC idle timeout (keep-alives are sent at a third of it).
    pub idle_timeout: Duration,
    /// Most batches sent but not yet acknowledged.
    pub max_in_flight: u64,
    /// First reconnect delay.
    pub backoff_initial: Duration,
    /// Longest reconnect delay.
    pub backoff_max: Duration,
}

/// Uplink failures.
#[derive(Debug, thiserror::Error)]
pub enum UplinkError {
    /// No collector endpoint configured.
    #[error("no collector endpoint configured (set uplink.collectors or --collector)")]
    NoCollectors,
    /// A collector endpoint is not `host:port`.
    #[error("collector endpoint {0:?} is not host:port (e.g. collector.example:4433)")]
    BadEndpoint(String),
    /// No collector endpoint resolves.
    #[error("no collector endpoint resolves: {0} (check uplink.collectors / --collector and the node's DNS)")]
    Unresolvable(String),
    /// TLS material is unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The local QUIC endpoint could not be created.
    #[error("cannot create the QUIC endpoint: {0}")]
    Endpoint(std::io::Error),
    /// A batch could not be encoded.
    #[error(transparent)]
    Encode(#[from] FrameError),
    /// The spool could not keep a batch.
    #[error(transparent)]
    Spool(#[from] SpoolError),
}

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("cannot resolve {0}: {1}")]
    Resolve(String, String),
    #[error("connect to {0}: {1}")]
    Connect(SocketAddr, String),
    #[error("timed out connecting to {0}")]
    ConnectTimeout(SocketAddr),
    #[error("connection lost: {0}")]
    Connection(#[from] quinn::ConnectionError),
    #[error("TLS handshake with {0} failed: {1}")]
    Tls(SocketAddr, quinn::ConnectionError),
    #[error("stream: {0}")]
    Write(#[from] quinn::WriteError),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("collector refused: {0}")]
    Refused(String),
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("collector closed the stream")]
    Closed,
    #[error("spool: {0}")]
    Spool(#[from] SpoolError),
}

impl SessionError {
    fn reason(&self) -> &'static str {
        match self {
            SessionError::Resolve(..) => "resolve",
            SessionError::Connect(..) => "connect",
            SessionError::ConnectTimeout(_) => "connect_timeout",
            // With mutual TLS a refused client certificate shows after `connect()` returned.
            SessionError::Connection(e) if is_tls_failure(e) => "tls",
            SessionError::Connection(_) => "connection",
            SessionError::Tls(..) => "tls",
            SessionError::Write(_) => "write",
            SessionError::Transport(_) => "transport",
            SessionError::Refused(_) => "refused",
            SessionError::Protocol(_) => "protocol",
            SessionError::Closed => "closed",
            SessionError::Spool(_) => "spool",
        }
    }
}

struct SpoolState {
    spool: Box<dyn Spool>,
    /// Sequence number of the last batch pushed.
    last_pushed: u64,
    /// Set once no more batches will come: the uplink drains and stops.
    finishing: bool,
    /// Rows handed to the spool, and rows acknowledged.
    pushed: RowCounts,
    acked_batches: u64,
    /// Rows dropped: samples over the spool's caps, whole batches it could not take.
    dropped: RowCounts,
}

struct Shared {
    state: Mutex<SpoolState>,
    changed: Notify,
    drained: Notify,
    metrics: Arc<AgentMetrics>,
    /// A session is live (set with the `connected` gauge).
    live: Readiness,
}

impl Shared {
    /// Records whether a session is live: the flag behind [`UplinkHandle::connected`], the
    /// `connected` gauge and the readiness flag `ready` (when the agent serves `/readyz`).
    fn set_live(&self, ready: Option<&Readiness>, live: bool) {
        self.live.set(live);
        self.metrics.connected.set(i64::from(live));
        if let Some(r) = ready {
            r.set(live);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SpoolState> {
        // A panic while holding the lock cannot leave the spool half-updated in a way that matters
        // more than stopping the agent would; keep going with the inner value.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts dropped rows in the totals and in `dropped_rows{table}`.
    fn count_dropped(&self, st: &mut SpoolState, rows: RowCounts) {
        st.dropped.add(rows);
        for (table, n) in [
            ("gpu_samples", rows.gpu_samples),
            ("process_samples", rows.process_samples),
            ("oom_events", rows.events),
        ] {
            if n > 0 {
                self.metrics.dropped_rows.get_or_create(&vec![("table", table.into())]).inc_by(n);
            }
        }
    }

    fn update_gauges(&self, st: &SpoolState) {
        self.metrics.unacked_batches.set(st.spool.len() as i64);
        self.metrics.spool_bytes.set(st.spool.bytes() as i64);
    }
}

/// Cheap handle to hand batches to the uplink.
#[derive(Clone)]
pub struct UplinkHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for UplinkHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UplinkHandle").finish_non_exhaustive()
    }
}

/// Totals for the agent's report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct UplinkTotals {
    /// Batches pushed.
    pub batches: u64,
    /// Batches acknowledged.
    pub acked_batches: u64,
    /// Batches still pending.
    pub pending_batches: u64,
    /// GPU samples pushed.
    pub gpu_samples: u64,
    /// Process samples pushed.
    pub process_samples: u64,
    /// Events pushed.
    pub events: u64,
    /// GPU samples dropped (spool caps, a full disk with its memory fallback full, a batch the
    /// spool could not take).
    pub dropped_gpu_samples: u64,
    /// Process samples dropped.
    pub dropped_process_samples: u64,
    /// Events dropped: only a batch the spool could not take at all (never to make room).
    pub dropped_events: u64,
}

impl UplinkHandle {
    /// True while a session with a collector is live.
    pub fn connected(&self) -> bool {
        self.shared.live.get()
    }

    /// Encodes a batch and queues it for delivery.
    pub fn push(&self, batch: Batch) -> Result<(), UplinkError> {
        let rows = RowCounts::of(&batch);
        let pending = match PendingBatch::encode(batch) {
            Ok(p) => p,
            Err(e) => {
                let mut st = self.shared.lock();
                self.shared.count_dropped(&mut st, rows);
                return Err(e.into());
            }
        };
        let mut st = self.shared.lock();
        st.last_pushed = pending.seq;
        st.pushed.add(pending.rows);
        let dropped = match st.spool.push(pending) {
            Ok(d) => d,
            Err(e) => {
                self.shared.count_dropped(&mut st, rows);
                self.shared.update_gauges(&st);
                return Err(e.into());
            }
        };
        if dropped.rows != RowCounts::default() {
            warn!(
                gpu_samples = dropped.rows.gpu_samples,
                process_samples = dropped.rows.process_samples,
                "spool full: dropped the oldest samples (events are kept)"
            );
            self.shared.count_dropped(&mut st, dropped.rows);
        }
        self.shared.update_gauges(&st);
        drop(st);
        self.shared.metrics.batches_built.inc();
        self.shared.changed.notify_one();
        Ok(())
    }

    /// No more batches will be pushed: deliver what is pending, then stop.
    pub fn finish(&self) {
        self.shared.lock().finishing = true;
        self.shared.changed.notify_one();
    }

    /// Totals so far.
    pub fn totals(&self) -> UplinkTotals {
        let st = self.shared.lock();
        UplinkTotals {
            batches: st.last_pushed,
            acked_batches: st.acked_batches,
            pending_batches: st.spool.len() as u64,
            gpu_samples: st.pushed.gpu_samples,
            process_samples: st.pushed.process_samples,
            events: st.pushed.events,
            dropped_gpu_samples: st.dropped.gpu_samples,
            dropped_process_samples: st.dropped.process_samples,
            dropped_events: st.dropped.events,
        }
    }

    /// Waits until nothing is pending and `finish` was called.
    pub async fn drained(&self) {
        loop {
            let notified = self.shared.drained.notified();
            {
                let st = self.shared.lock();
                if st.finishing && st.spool.is_empty() {
                    return;
                }
            }
            notified.await;
        }
    }
}

/// The uplink task.
pub struct Uplink {
    cfg: UplinkConfig,
    hello: Hello,
    client_config: quinn::ClientConfig,
    tls: Mutex<TlsWatch>,
    shared: Arc<Shared>,
    ready: Option<Readiness>,
}

impl std::fmt::Debug for Uplink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uplink").field("collectors", &self.cfg.collectors).finish_non_exhaustive()
    }
}

/// Checks the collector endpoints at start-up: each must be `host:port`, and at least one must
/// resolve (the others are warned about and retried in turn, as DNS may come back). An agent
/// whose every collector name is wrong would otherwise retry "cannot resolve" forever.
pub async fn check_collectors(collectors: &[String]) -> Result<(), UplinkError> {
    if collectors.is_empty() {
        return Err(UplinkError::NoCollectors);
    }
    let mut failures = Vec::new();
    for c in collectors {
        let port_ok = c
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
        if !port_ok {
            return Err(UplinkError::BadEndpoint(c.clone()));
        }
        match tokio::net::lookup_host(c.as_str()).await.map(|mut a| a.next()) {
            Ok(Some(_)) => {}
            Ok(None) => failures.push(format!("{c}: no address")),
            Err(e) => failures.push(format!("{c}: {e}")),
        }
    }
    if failures.len() == collectors.len() {
        return Err(UplinkError::Unresolvable(failures.join("; ")));
    }
    for f in failures {
        warn!(collector = %f, "a collector endpoint does not resolve now; it stays in the rotation");
    }
    Ok(())
}

impl Uplink {
    /// Prepares the uplink (loads the TLS material now, so a bad path fails at start-up).
    pub fn new(
        cfg: UplinkConfig,
        hello: Hello,
        spool: Box<dyn Spool>,
        metrics: Arc<AgentMetrics>,
    ) -> Result<(Uplink, UplinkHandle), UplinkError> {
        if cfg.collectors.is_empty() {
            return Err(UplinkError::NoCollectors);
        }
        let material = TlsMaterial::read(&cfg.tls)?;
        let client_config = client_config_from(&material, &cfg.tls, cfg.idle_timeout)?;
        let tls = Mutex::new(TlsWatch::new(cfg.tls.clone(), Some(material)));
        let last_pushed = spool.first_seq().map_or(0, |s| s.saturating_sub(1));
        let shared = Arc::new(Shared {
            state: Mutex::new(SpoolState {
                spool,
                last_pushed,
                finishing: false,
                pushed: RowCounts::default(),
                acked_batches: 0,
                dropped: RowCounts::default(),
            }),
            changed: Notify::new(),
            drained: Notify::new(),
            metrics,
            live: Readiness::default(),
        });
        let handle = UplinkHandle { shared: shared.clone() };
        Ok((Uplink { cfg, hello, client_config, tls, shared, ready: None }, handle))
    }

    /// Mirrors the session state into `ready` (the telemetry `/readyz` flag): true while a
    /// session with a collector is live, false before the first one, between sessions and after
    /// the uplink stopped.
    pub fn with_readiness(mut self, ready: Readiness) -> Self {
        ready.set(false);
        self.ready = Some(ready);
        self
    }

    /// Runs sessions until `finish` was called and everything is acknowledged, or `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) -> Result<(), UplinkError> {
        let bind: SocketAddr = SocketAddr::from(([0, 0, 0, 0], 0));
        let mut endpoint = quinn::Endpoint::client(bind).map_err(UplinkError::Endpoint)?;
        endpoint.set_default_client_config(self.client_config.clone());
        let n = self.cfg.collectors.len();
        let mut next = first_collector(&self.hello.agent_id, n);
        // Jittered: agents that lost the same collector do not all come back at once.
        let mut backoff = Backoff::new(self.cfg.backoff_initial, self.cfg.backoff_max);
        loop {
            if self.is_drained() || *stop.borrow() {
                break;
            }
            self.reload_tls(&mut endpoint);
            let target = self.cfg.collectors[next].clone();
            let started = Instant::now();
            let outcome = tokio::select! {
                r = self.session(&endpoint, &target) => r,
                _ = stop.changed() => break,
            };
            self.shared.set_live(self.ready.as_ref(), false);
            // A session that lasted a while was a success: start the back-off again.
            if started.elapsed() > Duration::from_secs(10) {
                backoff.reset();
            }
            let wait = backoff.wait(rand::random());
            match outcome {
                Ok(()) => break,
                Err(e) => {
                    self.shared.metrics.connect_failed(e.reason());
                    warn!(collector = %target, error = %e, retry_in_ms = wait.as_millis() as u64, "uplink session ended");
                }
            }
            next = (next + 1) % n;
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => break,
            }
        }
        self.shared.set_live(self.ready.as_ref(), false);
        // A session cut short by `stop` may still be open (its batches unacknowledged, kept alive
        // by keep-alives): close it, so the wait below is the close's, not the collector's.
        endpoint.close(0u32.into(), b"agent stopping");
        endpoint.wait_idle().await;
        Ok(())
    }

    /// Uses rotated TLS files for the next connection when their content changed.
    fn reload_tls(&self, endpoint: &mut quinn::Endpoint) {
        let mut watch = self.tls.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let idle = self.cfg.idle_timeout;
        match watch.check(false, |m, f| client_config_from(m, f, idle)) {
            Reload::Unchanged => {}
            Reload::Reloaded(cfg) => {
                endpoint.set_default_client_config(cfg);
                self.shared.metrics.tls_reloads.get_or_create(&vec![("result", "ok".to_owned())]).inc();
                info!(cert = %watch.files().cert.display(), "TLS material changed; the next connection uses it");
            }
            Reload::Failed { error, repeated } => {
                if !repeated {
                    self.shared
                        .metrics
                        .tls_reloads
                        .get_or_create(&vec![("result", "error".to_owned())])
                        .inc();
                    warn!(error = %error, "cannot use the changed TLS files; keeping the previous material");
                }
            }
        }
    }

    fn is_drained(&self) -> bool {
        let st = self.shared.lock();
        st.finishing && st.spool.is_empty()
    }

    async fn session(&self, endpoint: &quinn::Endpoint, target: &str) -> Result<(), SessionError> {
        let addr = tokio::net::lookup_host(target)
            .await
            .map_err(|e| SessionError::Resolve(target.to_owned(), e.to_string()))?
            .next()
            .ok_or_else(|| SessionError::Resolve(target.to_owned(), "no address".to_owned()))?;
        let connecting = endpoint
            .connect(addr, &self.cfg.server_name)
            .map_err(|e| SessionError::Connect(addr, e.to_string()))?;
        let conn = match tokio::time::timeout(self.cfg.connect_timeout, connecting).await {
            Err(_) => return Err(SessionError::ConnectTimeout(addr)),
            // The collector's certificate is not trusted or not valid for `server_name`, or the
            // collector refused ours during the handshake.
            Ok(Err(e)) if is_tls_failure(&e) => return Err(SessionError::Tls(addr, e)),
            Ok(r) => r?,
        };
        let result = self.converse(&conn).await;
        match &result {
            Ok(()) => conn.close(0u32.into(), b"done"),
            Err(e) => conn.close(1u32.into(), e.reason().as_bytes()),
        }
        result
    }

    async fn converse(&self, conn: &quinn::Connection) -> Result<(), SessionError> {
        let (mut send, mut recv) = conn.open_bi().await?;
        let mut buf = Vec::new();
        write_frame(&mut send, &Frame::Hello(self.hello.clone()), &mut buf).await?;
        let welcome = tokio::time::timeout(self.cfg.connect_timeout, read_frame(&mut recv, &mut buf))
            .await
            .map_err(|_| SessionError::Protocol("no Welcome within the connect timeout".to_owned()))??;
        let welcome = match welcome {
            Some(Frame::Welcome(w)) => w,
            Some(Frame::Error(e)) => {
                return Err(SessionError::Refused(format!("{} (code {})", e.message, e.code)));
            }
            Some(other) => {
                return Err(SessionError::Protocol(format!("expected Welcome, got {:?}", other.kind())));
            }
            None => return Err(SessionError::Closed),
        };
        self.shared.metrics.connects.inc();
        self.shared.set_live(self.ready.as_ref(), true);
        info!(collector = %conn.remote_address(), collector_id = %welcome.collector_id, last_acked_seq = welcome.last_acked_seq, "connected");
        self.acknowledge(welcome.last_acked_seq);

        // Acks arrive on their own task so that a blocked write never stalls them (and reads are
        // never cancelled half-way through a frame).
        let (ack_tx, mut ack_rx) = mpsc::channel::<Result<Frame, SessionError>>(64);
        let reader = AbortOnDrop(tokio::spawn(async move {
            let mut buf = Vec::new();
            loop {
                let item = match read_frame(&mut recv, &mut buf).await {
                    Ok(Some(frame)) => Ok(frame),
                    Ok(None) => Err(SessionError::Closed),
                    Err(e) => Err(SessionError::Transport(e)),
                };
                let stop = item.is_err();
                if ack_tx.send(item).await.is_err() || stop {
                    break;
                }
            }
        }));
        let result = self.stream_batches(&mut send, &mut ack_rx, welcome.last_acked_seq).await;
        if result.is_ok() {
            // Finish our side and let the collector close the connection once it has seen the end
            // of the stream, so neither side mistakes a clean end for a lost connection.
            let _ = send.finish();
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.closed()).await;
        }
        drop(reader);
        result
    }

    async fn stream_batches(
        &self,
        send: &mut quinn::SendStream,
        acks: &mut mpsc::Receiver<Result<Frame, SessionError>>,
        acked_at_welcome: u64,
    ) -> Result<(), SessionError> {
        let mut last_acked = acked_at_welcome;
        let mut last_sent = acked_at_welcome;
        {
            // Resend from the first pending batch.
            let st = self.shared.lock();
            if let Some(first) = st.spool.first_seq() {
                last_sent = last_sent.max(first.saturating_sub(1));
            }
        }
        let mut sent_at: std::collections::VecDeque<(u64, Instant)> = Default::default();
        loop {
            // Fill the window.
            loop {
                if last_sent.saturating_sub(last_acked) >= self.cfg.max_in_flight {
                    break;
                }
                let frame = {
                    let mut st = self.shared.lock();
                    match st.spool.next_after(last_sent)? {
                        Some(b) => (b.seq, b.frame),
                        None => break,
                    }
                };
                send.write_all(&frame.1).await?;
                last_sent = frame.0;
                sent_at.push_back((frame.0, Instant::now()));
                self.shared.metrics.batches_sent.inc();
                debug!(seq = frame.0, "batch sent");
            }
            if self.is_drained() {
                return Ok(());
            }
            tokio::select! {
                item = acks.recv() => {
                    let frame = item.ok_or(SessionError::Closed)??;
                    match frame {
                        Frame::Ack(ack) => {
                            if ack.seq > last_sent {
                                return Err(SessionError::Protocol(format!("ack {} for a batch never sent (last sent {last_sent})", ack.seq)));
                            }
                            last_acked = last_acked.max(ack.seq);
                            while sent_at.front().is_some_and(|(s, _)| *s <= ack.seq) {
                                if let Some((_, at)) = sent_at.pop_front() {
                                    self.shared.metrics.ack_latency_seconds.observe(at.elapsed().as_secs_f64());
                                }
                            }
                            self.acknowledge(ack.seq);
                        }
                        Frame::Error(e) => return Err(SessionError::Refused(format!("{} (code {})", e.message, e.code))),
                        other => return Err(SessionError::Protocol(format!("unexpected {:?} frame", other.kind()))),
                    }
                }
                _ = self.shared.changed.notified() => {}
            }
        }
    }

    fn acknowledge(&self, seq: u64) {
        let mut st = self.shared.lock();
        let n = st.spool.ack_through(seq);
        st.acked_batches += n as u64;
        self.shared.update_gauges(&st);
        let drained = st.finishing && st.spool.is_empty();
        drop(st);
        self.shared.metrics.batches_acked.inc_by(n as u64);
        if drained {
            self.shared.drained.notify_waiters();
        }
    }
}

/// Aborts its task when dropped: the ack reader ends with its session, also when the session's
/// future is dropped half-way (a stop), instead of holding the connection's stream open.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// True when a connection failed in the TLS handshake (a QUIC `CRYPTO_ERROR`, sent or received).
fn is_tls_failure(e: &quinn::ConnectionError) -> bool {
    // CRYPTO_ERROR codes are 0x100 + the TLS alert (RFC 9001 §4.8).
    let crypto = |code: quinn::TransportErrorCode| (0x100..=0x1ff).contains(&u64::from(code));
    match e {
        quinn::ConnectionError::TransportError(t) => crypto(t.code),
        quinn::ConnectionError::ConnectionClosed(c) => crypto(c.error_code),
        _ => false,
    }
}

/// The index of the collector endpoint an agent starts with: a stable hash of its agent id, so
/// the agents of a fleet spread evenly over `endpoints` (and each one always starts at the same).
pub fn first_collector(agent_id: &str, endpoints: usize) -> usize {
    if endpoints == 0 {
        return 0;
    }
    // FNV-1a (stable across builds, unlike `DefaultHasher`), then the SplitMix64 finaliser so that
    // ids differing only in their last characters (node-001, node-002, …) spread too.
    let mut h = crate::hash::fnv1a64(agent_id.as_bytes());
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h % endpoints as u64) as usize
}

#[cfg(test)]
mod endpoint_tests {
    use super::*;

    #[tokio::test]
    async fn collector_endpoints_are_checked_at_start_up() {
        let list = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(check_collectors(&list(&["127.0.0.1:4433"])).await.is_ok());
        assert!(check_collectors(&list(&["localhost:4433"])).await.is_ok());
        for bad in ["collector.example", "collector:", ":4433", "collector:0", "collector:99999"] {
            let e = check_collectors(&list(&[bad])).await.unwrap_err();
            assert!(matches!(e, UplinkError::BadEndpoint(_)), "{bad}: {e}");
        }
        let e = check_collectors(&list(&["no-such-host.invalid:4433"])).await.unwrap_err();
        assert!(
            matches!(e, UplinkError::Unresolvable(_)) && e.to_string().contains("no-such-host.invalid"),
            "{e}"
        );
        // One resolvable endpoint is enough; the other stays in the rotation.
        assert!(check_collectors(&list(&["no-such-host.invalid:4433", "127.0.0.1:4433"])).await.is_ok());
        assert!(matches!(check_collectors(&[]).await, Err(UplinkError::NoCollectors)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An uplink whose only collector is `127.0.0.1:9` (nothing answers), with self-signed TLS.
    fn unreachable(dir: &std::path::Path) -> (Uplink, UplinkHandle, Arc<AgentMetrics>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert =
            rcgen::CertificateParams::new(vec!["collector".to_owned()]).unwrap().self_signed(&key).unwrap();
        let tls = TlsFiles { ca: dir.join("ca.pem"), cert: dir.join("cert.pem"), key: dir.join("key.pem") };
        std::fs::write(&tls.ca, cert.pem()).unwrap();
        std::fs::write(&tls.cert, cert.pem()).unwrap();
        std::fs::write(&tls.key, key.serialize_pem()).unwrap();
        let cfg = UplinkConfig {
            collectors: vec!["127.0.0.1:9".to_owned()],
            server_name: "collector".to_owned(),
            tls,
            connect_timeout: Duration::from_millis(100),
            idle_timeout: Duration::from_secs(3),
            max_in_flight: 4,
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_millis(20),
        };
        let metrics = AgentMetrics::register(&mut prometheus_client::registry::Registry::default());
        let spool = Box::new(crate::spool::MemorySpool::new(1 << 20));
        let (u, h) = Uplink::new(cfg, Hello::default(), spool, metrics.clone()).unwrap();
        (u, h, metrics)
    }

    #[tokio::test]
    async fn readiness_is_true_only_while_a_session_is_live() {
        let dir = tempfile::tempdir().unwrap();
        let (uplink, handle, metrics) = unreachable(dir.path());
        let ready = Readiness::default();
        ready.set(true); // whatever it said before, the uplink owns it now
        let uplink = uplink.with_readiness(ready.clone());
        assert!(!ready.get(), "not ready before the first session");
        // The session state drives all three views together.
        uplink.shared.set_live(uplink.ready.as_ref(), true);
        assert!(ready.get() && handle.connected() && metrics.connected.get() == 1);
        uplink.shared.set_live(uplink.ready.as_ref(), false);
        assert!(!ready.get() && !handle.connected() && metrics.connected.get() == 0);
        // A collector that never answers: the uplink keeps trying and is never ready (sampled
        // while it runs); stopping it leaves it not ready.
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(uplink.run(stop_rx));
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert!(!ready.get() && !handle.connected());
        }
        stop_tx.send(true).unwrap();
        task.await.unwrap().unwrap();
        assert!(!ready.get());
    }

    #[test]
    fn agents_spread_evenly_over_collectors_and_keep_their_start() {
        for endpoints in [2usize, 3, 5] {
            let mut per = vec![0usize; endpoints];
            let agents = 3000;
            for i in 0..agents {
                per[first_collector(&format!("gpu-node-{i:04}"), endpoints)] += 1;
            }
            let even = agents / endpoints;
            for (k, n) in per.iter().enumerate() {
                // Within 10 % of an even share (a binomial spread is ~2-3 %).
                assert!(
                    n.abs_diff(even) * 10 <= even,
                    "{endpoints} endpoints: endpoint {k} got {n} of {agents}"
                );
            }
        }
        assert_eq!(first_collector("node-a", 3), first_collector("node-a", 3), "stable");
        assert_eq!(first_collector("node-a", 1), 0);
        assert_eq!(first_collector("node-a", 0), 0);
    }
}
