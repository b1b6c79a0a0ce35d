//! The QUIC ingest server: accepts agent connections (mutual TLS), runs one task per connection,
//! validates every frame, stamps rows with the certificate's identity, hands batches to the
//! ClickHouse [`Sink`] and acknowledges each batch only after its rows are stored.
//!
//! Per connection: `Hello` → `Welcome { last_acked_seq }` (looked up in ClickHouse, so a restarted
//! collector knows what is stored), then a pipeline of `Batch` frames — at most
//! `max_batches_in_flight` stored concurrently — answered by cumulative `Ack { seq }` in order.
//! A batch whose `seq` is already stored is acknowledged without a second insert. A bad frame gets
//! an `ErrorReply`, is counted, and closes that connection only.
//!
//! **Bytes in flight.** Every frame, the `Hello` included, is charged its size (header + payload,
//! at most the cap) against a per-connection and a global [`Semaphore`] of bytes *before* its
//! payload is read, and its buffer grows only as the payload arrives; the charge is released when the batch is stored (or dropped: duplicate, error, closed
//! connection). When a cap is reached the connection's reader stops reading its stream, quinn's
//! flow-control window fills, and the agent's writes block: it keeps its batches in its spool.
//! Frames accepted but not stored — and everything derived from them (decoded batch, rows, insert
//! buffers) — are therefore bounded by `max_bytes_in_flight` for the whole collector.
//!
//! **One session per agent run at a time.** Sessions of the same (cluster, node, agent id, boot
//! id) are serialised by an [`AgentLocks`] entry held until every batch of the session is stored or
//! failed: a reconnecting agent gets its `Welcome` only after the batches of its previous session
//! are settled, so `last_acked_seq` covers them and their re-sent copies are not inserted again.
//! A new session also tells the earlier one to stop (it ends as `superseded`), so an agent that
//! reconnects after losing its connection need not wait for the old one's idle timeout.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oomlens_schema::tls::{TlsError, TlsFiles};
use oomlens_schema::transport::{TransportError, read_payload, write_frame};
use oomlens_schema::{Ack, ErrorCode, ErrorReply, Frame, Hello, Welcome, limits};
use oomlens_schema::{FrameHeader, FrameKind, HEADER_LEN};
use prometheus_client::metrics::gauge::Gauge;
use rustls::pki_types::CertificateDer;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::clickhouse::sink::{Sink, SinkError};
use crate::identity::AgentIdentity;
use crate::ingest::auth::TlsReloader;
use crate::ingest::certs::identity_from_der;
use crate::ingest::warnlimit::WarnLimiter;
use crate::metrics::CollectorMetrics;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// UDP address to listen on.
    pub listen: SocketAddr,
    /// CA (for agents), certificate and key.
    pub tls: TlsFiles,
    /// QUIC idle timeout.
    pub idle_timeout: Duration,
    /// Time allowed for TLS + `Hello`.
    pub handshake_timeout: Duration,
    /// Most concurrent agent connections.
    pub max_connections: usize,
    /// Most concurrent connections with one certificate identity (cluster, node).
    pub max_connections_per_certificate: usize,
    /// Most batches of one connection being stored at once.
    pub max_batches_in_flight: usize,
    /// Cap on frame bytes accepted from all connections and not yet stored.
    pub max_bytes_in_flight: u64,
    /// Cap on frame bytes accepted from one connection and not yet stored.
    pub max_connection_bytes_in_flight: u64,
    /// This collector's id (logs, `agents` table).
    pub collector_id: String,
    /// Clusters (certificate OU) allowed to connect; empty: all.
    pub allowed_clusters: Vec<String>,
    /// How often the TLS files are checked for changes (`None`: only on request).
    pub tls_reload_interval: Option<Duration>,
}

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// TLS material is unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The UDP socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The configured `collector.listen` UDP address.
        addr: SocketAddr,
        /// Why binding it failed (e.g. address in use).
        source: std::io::Error,
    },
}

/// Why one session ended.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("TLS handshake: {0}")]
    Handshake(quinn::ConnectionError),
    #[error("no client certificate")]
    NoCertificate,
    #[error("client certificate: {0}")]
    Certificate(String),
    #[error("{0}")]
    ClusterNotAllowed(String),
    #[error("no Hello within the handshake timeout")]
    HelloTimeout,
    #[error("connection: {0}")]
    Connection(#[from] quinn::ConnectionError),
    #[error("bad frame: {0}")]
    BadFrame(TransportError),
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("write: {0}")]
    Write(TransportError),
    #[error("storage: {0}")]
    Storage(#[from] SinkError),
    #[error("superseded by a newer session of the same agent run")]
    Superseded,
    #[error("the peer reset its stream")]
    StreamReset,
    #[error("{0}")]
    TooManyConnections(String),
}

impl SessionError {
    /// Classifies a failed read: the peer going away between frames (connection closed or timed
    /// out, stream reset) is not a bad frame.
    fn read(e: TransportError) -> SessionError {
        if let TransportError::Io(io) = &e
            && let Some(r) = io.get_ref().and_then(|i| i.downcast_ref::<quinn::ReadError>())
        {
            match r {
                quinn::ReadError::ConnectionLost(c) => return SessionError::Connection(c.clone()),
                quinn::ReadError::Reset(_) => return SessionError::StreamReset,
                _ => {}
            }
        }
        SessionError::BadFrame(e)
    }
}

impl SessionError {
    fn reason(&self) -> &'static str {
        match self {
            SessionError::Handshake(e) => crate::ingest::auth::handshake_reject_reason(e),
            SessionError::NoCertificate => "no_certificate",
            SessionError::Certificate(_) => "certificate",
            SessionError::ClusterNotAllowed(_) => "cluster_not_allowed",
            SessionError::HelloTimeout => "hello_timeout",
            SessionError::Connection(_) => "connection",
            SessionError::BadFrame(TransportError::Frame(e)) => e.reason(),
            SessionError::BadFrame(TransportError::TruncatedStream { .. }) => "truncated_stream",
            SessionError::BadFrame(TransportError::UnexpectedKind { .. }) => "protocol",
            SessionError::BadFrame(TransportError::Io(_)) => "stream_io",
            SessionError::StreamReset => "stream_reset",
            SessionError::TooManyConnections(_) => "too_many_connections_per_certificate",
            SessionError::Protocol(_) => "protocol",
            SessionError::Write(_) => "write",
            SessionError::Storage(_) => "storage",
            SessionError::Superseded => "superseded",
        }
    }

    /// The error reply the peer gets, if any.
    fn reply(&self) -> Option<ErrorReply> {
        let (code, message) = match self {
            SessionError::BadFrame(e) => (ErrorCode::BadFrame, e.to_string()),
            SessionError::Protocol(m) => (ErrorCode::ProtocolViolation, m.clone()),
            SessionError::Certificate(m) | SessionError::ClusterNotAllowed(m) => {
                (ErrorCode::Unauthorized, m.clone())
            }
            SessionError::Storage(e) => (ErrorCode::Unavailable, e.to_string()),
            _ => return None,
        };
        // The agent refuses error texts over the limit: cut long ones (at a character boundary).
        let message = oomlens_schema::text::truncate(message, limits::MAX_RAW_MESSAGE);
        Some(ErrorReply { code: code as u16, message })
    }
}

/// A bound, not yet running server.
#[derive(Debug)]
pub struct Server {
    cfg: ServerConfig,
    endpoint: quinn::Endpoint,
    sink: Sink,
    metrics: Arc<CollectorMetrics>,
    bytes_in_flight: ByteBudget,
    agent_locks: AgentLocks,
    per_certificate: CertConnections,
    warnings: Arc<WarnLimiter>,
    tls: TlsReloader,
}

impl Server {
    /// Loads the TLS material and binds the UDP socket.
    pub fn bind(
        cfg: ServerConfig,
        sink: Sink,
        metrics: Arc<CollectorMetrics>,
    ) -> Result<Server, ServerError> {
        let material = oomlens_schema::tls::TlsMaterial::read(&cfg.tls)?;
        let server_config = oomlens_schema::tls::server_config_from(&material, &cfg.tls, cfg.idle_timeout)?;
        let endpoint = quinn::Endpoint::server(server_config, cfg.listen)
            .map_err(|source| ServerError::Bind { addr: cfg.listen, source })?;
        let tls =
            TlsReloader::new(endpoint.clone(), cfg.tls.clone(), material, cfg.idle_timeout, metrics.clone());
        let bytes_in_flight = ByteBudget::new(cfg.max_bytes_in_flight);
        Ok(Server {
            cfg,
            endpoint,
            sink,
            metrics,
            bytes_in_flight,
            agent_locks: AgentLocks::default(),
            per_certificate: CertConnections::default(),
            warnings: Arc::new(WarnLimiter::default()),
            tls,
        })
    }

    /// Reloads the TLS material on request (SIGHUP, tests); a timer does it too when configured.
    pub fn tls_reloader(&self) -> TlsReloader {
        self.tls.clone()
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// Accepts connections until `shutdown` turns true; then closes every connection with
    /// `ShuttingDown` and waits for the connection tasks.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let limit = Arc::new(Semaphore::new(self.cfg.max_connections.max(1)));
        // Connection tasks live in a JoinSet: if this future is dropped (aborted), they go with it.
        let mut tasks = tokio::task::JoinSet::new();
        // The poll task holds the endpoint: it must not outlive the server (abort on drop).
        let _tls_poll = self.cfg.tls_reload_interval.map(|every| AbortOnDrop(self.tls.spawn_poll(every)));
        let listen = self.endpoint.local_addr().map_or_else(|e| format!("unknown ({e})"), |a| a.to_string());
        info!(%listen, collector_id = %self.cfg.collector_id, "collector listening");
        // Summarises the peer-caused warnings suppressed in a window that ended quietly.
        let mut summary_tick = tokio::time::interval(crate::ingest::warnlimit::WINDOW);
        loop {
            let incoming = tokio::select! {
                i = self.endpoint.accept() => i,
                _ = shutdown.changed() => break,
                _ = summary_tick.tick() => {
                    log_suppressed(self.warnings.take_summary());
                    continue;
                }
            };
            let Some(incoming) = incoming else { break };
            while tasks.try_join_next().is_some() {}
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                self.metrics.reject("too_many_connections");
                incoming.refuse();
                continue;
            };
            let ctx = SessionCtx {
                cfg: self.cfg.clone(),
                sink: self.sink.clone(),
                metrics: self.metrics.clone(),
                shutdown: shutdown.clone(),
                bytes_in_flight: self.bytes_in_flight.clone(),
                agent_locks: self.agent_locks.clone(),
                per_certificate: self.per_certificate.clone(),
                warnings: self.warnings.clone(),
            };
            tasks.spawn(async move {
                ctx.handle(incoming).await;
                drop(permit);
            });
        }
        self.endpoint.close((ErrorCode::ShuttingDown as u32).into(), b"collector shutting down");
        while tasks.join_next().await.is_some() {}
        self.endpoint.wait_idle().await;
    }
}

/// Aborts a background task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A batch being stored: its seq, when it arrived, and the store task.
type InFlight = (u64, Instant, JoinHandle<Result<(), SinkError>>);

/// A semaphore of bytes and its size.
#[derive(Debug, Clone)]
struct ByteBudget {
    semaphore: Arc<Semaphore>,
    cap: u64,
}

impl ByteBudget {
    fn new(cap: u64) -> ByteBudget {
        let cap = cap.clamp(1, Semaphore::MAX_PERMITS as u64);
        ByteBudget { semaphore: Arc::new(Semaphore::new(cap as usize)), cap }
    }

    /// The charge of a frame of `len` bytes: its size, at most the cap (so any frame fits).
    fn charge(&self, len: u64) -> u32 {
        u32::try_from(len.min(self.cap)).unwrap_or(u32::MAX)
    }
}

/// One frame's bytes, counted against its connection's and the global cap until dropped.
struct BytePermit {
    _connection: OwnedSemaphorePermit,
    _global: OwnedSemaphorePermit,
    bytes: i64,
    gauge: Gauge,
}

impl Drop for BytePermit {
    fn drop(&mut self) {
        self.gauge.dec_by(self.bytes);
    }
}

/// A frame read by the connection's reader task: the frame, its payload length, its byte charge.
type ReadFrame = (Frame, usize, BytePermit);

/// Reads frames from one stream, charging each against the byte budgets before its payload.
struct FrameReader {
    recv: quinn::RecvStream,
    connection: ByteBudget,
    global: ByteBudget,
    metrics: Arc<CollectorMetrics>,
    buf: Vec<u8>,
}

impl FrameReader {
    /// The next frame, which must be of kind `expect` (the session's Hello, then batches);
    /// `Ok(None)` when the stream ends cleanly between frames.
    async fn next(&mut self, expect: FrameKind) -> Result<Option<ReadFrame>, TransportError> {
        let mut header = [0u8; HEADER_LEN];
        let got = read_full(&mut self.recv, &mut header).await?;
        if got == 0 {
            return Ok(None);
        }
        if got < HEADER_LEN {
            return Err(TransportError::TruncatedStream { have: got, need: HEADER_LEN });
        }
        let header = FrameHeader::parse(&header)?;
        if header.kind != expect {
            // Refused before anything is charged or read: one Hello, then batches only.
            return Err(TransportError::UnexpectedKind {
                expected: expect.as_str(),
                got: header.kind.as_str(),
            });
        }
        let size = HEADER_LEN as u64 + u64::from(header.len);
        let permit = self.acquire(size).await?;
        // The buffer grows only as the payload arrives (a peer announcing a large frame and
        // sending nothing holds its charge, not memory).
        let need = header.len as usize;
        let got = read_payload(&mut self.recv, need, &mut self.buf).await?;
        if got < need {
            return Err(TransportError::TruncatedStream { have: got, need });
        }
        let frame = Frame::decode_payload(&header, &self.buf)?;
        // Do not keep a large buffer per idle connection; the decoded frame holds the data now.
        if self.buf.capacity() > READ_BUFFER_KEEP {
            self.buf = Vec::new();
        }
        Ok(Some((frame, header.len as usize, permit)))
    }

    /// Waits until both budgets have room for `size` bytes (connection first, then global).
    async fn acquire(&self, size: u64) -> Result<BytePermit, TransportError> {
        let closed = |_| TransportError::Io(std::io::Error::other("byte budget closed"));
        let (conn_n, global_n) = (self.connection.charge(size), self.global.charge(size));
        let started = Instant::now();
        let mut blocked: Option<Blocked> = None;
        let connection = match self.connection.semaphore.clone().try_acquire_many_owned(conn_n) {
            Ok(p) => p,
            Err(_) => {
                blocked = Some(Blocked::new(&self.metrics));
                self.connection.semaphore.clone().acquire_many_owned(conn_n).await.map_err(closed)?
            }
        };
        let global = match self.global.semaphore.clone().try_acquire_many_owned(global_n) {
            Ok(p) => p,
            Err(_) => {
                blocked.get_or_insert_with(|| Blocked::new(&self.metrics));
                self.global.semaphore.clone().acquire_many_owned(global_n).await.map_err(closed)?
            }
        };
        if blocked.take().is_some() {
            self.metrics.byte_cap_waits.inc();
            self.metrics.byte_cap_wait_seconds.inc_by(started.elapsed().as_secs_f64());
        }
        let bytes = i64::from(global_n);
        self.metrics.bytes_in_flight.inc_by(bytes);
        Ok(BytePermit {
            _connection: connection,
            _global: global,
            bytes,
            gauge: self.metrics.bytes_in_flight.clone(),
        })
    }
}

/// Counts a connection in `byte_cap_blocked` while it waits for a byte budget.
struct Blocked(Gauge);

impl Blocked {
    fn new(metrics: &CollectorMetrics) -> Blocked {
        metrics.byte_cap_blocked.inc();
        Blocked(metrics.byte_cap_blocked.clone())
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A read buffer larger than this is freed after its frame is decoded.
const READ_BUFFER_KEEP: usize = 256 << 10;

async fn read_full(r: &mut quinn::RecvStream, buf: &mut [u8]) -> Result<usize, std::io::Error> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = tokio::io::AsyncReadExt::read(r, &mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

/// Open connections per certificate identity (cluster, node): one agent needs one (two while it
/// reconnects); a stolen or shared certificate cannot take the collector's connection slots.
#[derive(Debug, Clone, Default)]
struct CertConnections(Arc<std::sync::Mutex<HashMap<CertKey, usize>>>);

/// (cluster, node) of a certificate.
type CertKey = (Option<String>, String);

/// One counted connection; uncounted when dropped.
struct CertSlot {
    map: CertConnections,
    key: CertKey,
}

impl CertConnections {
    /// Counts a connection of `cert`, `None` when it already has `max`.
    fn enter(&self, cert: &crate::ingest::certs::CertIdentity, max: usize) -> Option<CertSlot> {
        let key = (cert.cluster.clone(), cert.node.clone());
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(key.clone()).or_default();
        if *n >= max.max(1) {
            return None;
        }
        *n += 1;
        Some(CertSlot { map: self.clone(), key })
    }
}

impl Drop for CertSlot {
    fn drop(&mut self) {
        let mut map = self.map.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// Per agent run (cluster, node, agent id, boot id): the lock its sessions hold until all their
/// batches are settled, and a generation counter a new session bumps to stop the earlier one.
#[derive(Debug, Clone, Default)]
struct AgentLocks(Arc<std::sync::Mutex<HashMap<AgentRun, Arc<AgentSlot>>>>);

#[derive(Debug)]
struct AgentSlot {
    lock: Arc<tokio::sync::Mutex<()>>,
    generation: watch::Sender<u64>,
}

impl Default for AgentSlot {
    fn default() -> Self {
        AgentSlot { lock: Arc::default(), generation: watch::channel(0).0 }
    }
}

/// (cluster, node, agent id, boot id).
type AgentRun = (String, String, String, u64);

/// Held by a session and each of its store tasks.
type AgentGuard = Arc<tokio::sync::OwnedMutexGuard<()>>;

impl AgentLocks {
    fn get(&self, id: &AgentIdentity) -> Arc<AgentSlot> {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Forget agents nobody holds or waits for.
        map.retain(|_, slot| Arc::strong_count(slot) > 1 || Arc::strong_count(&slot.lock) > 1);
        let key = (id.cluster.clone(), id.node.clone(), id.agent_id.clone(), id.boot_id);
        map.entry(key).or_default().clone()
    }
}

struct SessionCtx {
    cfg: ServerConfig,
    sink: Sink,
    metrics: Arc<CollectorMetrics>,
    shutdown: watch::Receiver<bool>,
    bytes_in_flight: ByteBudget,
    agent_locks: AgentLocks,
    per_certificate: CertConnections,
    warnings: Arc<WarnLimiter>,
}

impl SessionCtx {
    async fn handle(mut self, incoming: quinn::Incoming) {
        let remote = incoming.remote_address();
        let conn = match tokio::time::timeout(self.cfg.handshake_timeout, incoming).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return self.refused(remote, &SessionError::Handshake(e)),
            Err(_) => return self.refused(remote, &SessionError::HelloTimeout),
        };
        let cert = match peer_identity(&conn) {
            Ok(c) => c,
            Err(e) => {
                self.refused(remote, &e);
                conn.close((ErrorCode::Unauthorized as u32).into(), b"unauthorized");
                return;
            }
        };
        let max = self.cfg.max_connections_per_certificate;
        let Some(_slot) = self.per_certificate.enter(&cert, max) else {
            let e = SessionError::TooManyConnections(format!(
                "the certificate of {} already has {max} connections (collector.max_connections_per_certificate)",
                cert.node
            ));
            self.refused(remote, &e);
            conn.close((ErrorCode::Unavailable as u32).into(), b"too many connections for this certificate");
            return;
        };
        self.metrics.connected_agents.inc();
        let result = self.session(&conn, cert).await;
        self.metrics.connected_agents.dec();
        match result {
            Ok(()) => conn.close(0u32.into(), b"bye"),
            Err(e) => {
                self.refused(remote, &e);
                conn.close(1u32.into(), e.reason().as_bytes());
            }
        }
    }

    fn refused(&self, remote: SocketAddr, e: &SessionError) {
        match e {
            // A peer that simply went away is not a reject.
            SessionError::Connection(
                quinn::ConnectionError::ApplicationClosed(_)
                | quinn::ConnectionError::ConnectionClosed(_)
                | quinn::ConnectionError::TimedOut,
            )
            | SessionError::StreamReset => debug!(%remote, error = %e, "session ended"),
            // The agent reconnected (its old connection may not even know it yet).
            SessionError::Superseded => info!(%remote, "session superseded by the agent's new one"),
            _ => {
                self.metrics.reject(e.reason());
                let (log, summary) = self.warnings.allow(e.reason());
                log_suppressed(summary);
                if log {
                    warn!(%remote, error = %e, "session refused or failed");
                }
            }
        }
    }

    async fn session(
        &mut self,
        conn: &quinn::Connection,
        cert: crate::ingest::certs::CertIdentity,
    ) -> Result<(), SessionError> {
        let (mut send, recv) = tokio::time::timeout(self.cfg.handshake_timeout, conn.accept_bi())
            .await
            .map_err(|_| SessionError::HelloTimeout)??;
        let mut out = Vec::new();
        // The Hello is read like every frame: its header checked first (a Hello has the small
        // control-frame limit), its bytes charged against the budgets before they are read, its
        // buffer grown only as they arrive.
        let mut reader = FrameReader {
            recv,
            connection: ByteBudget::new(self.cfg.max_connection_bytes_in_flight),
            global: self.bytes_in_flight.clone(),
            metrics: self.metrics.clone(),
            buf: Vec::new(),
        };
        let first = tokio::time::timeout(self.cfg.handshake_timeout, reader.next(FrameKind::Hello))
            .await
            .map_err(|_| SessionError::HelloTimeout)?;
        let hello = match first {
            Ok(Some((Frame::Hello(h), len, _permit))) => {
                self.count_frame("hello", len);
                h
            }
            Ok(Some((other, _, _))) => {
                return self
                    .fail(
                        &mut send,
                        SessionError::Protocol(format!("expected Hello, got {}", other.kind().as_str())),
                    )
                    .await;
            }
            Ok(None) => return Ok(()),
            Err(e) => return self.fail(&mut send, SessionError::read(e)).await,
        };
        if let Err(message) = crate::ingest::auth::check_cluster(&self.cfg.allowed_clusters, &cert) {
            return self.fail(&mut send, SessionError::ClusterNotAllowed(message)).await;
        }
        let identity = identity(&cert, &hello);
        if identity.node != hello.node || identity.cluster != hello.cluster {
            self.metrics.identity_mismatches.inc();
            let (log, summary) = self.warnings.allow("identity_mismatch");
            log_suppressed(summary);
            if log {
                warn!(claimed_node = %hello.node, claimed_cluster = %hello.cluster, node = %identity.node,
                    cluster = %identity.cluster, "agent claims another node or cluster; using the certificate's");
            }
        }
        // Stop an earlier session of this agent run, then wait until all its batches are settled.
        let slot = self.agent_locks.get(&identity);
        slot.generation.send_modify(|g| *g = g.wrapping_add(1));
        let mut superseded = slot.generation.subscribe();
        let guard: AgentGuard = tokio::select! {
            guard = slot.lock.clone().lock_owned() => Arc::new(guard),
            e = conn.closed() => return Err(SessionError::Connection(e)),
            _ = superseded.changed() => return Err(SessionError::Superseded),
        };
        let last = match self.sink.last_acked_seq(&identity).await {
            Ok(seq) => seq,
            Err(e) => return self.fail(&mut send, SessionError::Storage(e)).await,
        };
        let welcome =
            Frame::Welcome(Welcome { collector_id: self.cfg.collector_id.clone(), last_acked_seq: last });
        write_frame(&mut send, &welcome, &mut out).await.map_err(SessionError::Write)?;
        self.metrics.sessions.inc();
        info!(cluster = %identity.cluster, node = %identity.node, agent_id = %identity.agent_id, boot_id = identity.boot_id, last_acked_seq = last, "agent connected");

        let result = self.stream(&mut send, reader, &identity, last, &guard, &mut superseded).await;
        match result {
            Err(e) => self.fail(&mut send, e).await,
            Ok(()) => {
                let _ = send.finish();
                Ok(())
            }
        }
    }

    /// The batch pipeline of one connection.
    async fn stream(
        &mut self,
        send: &mut quinn::SendStream,
        mut reader: FrameReader,
        identity: &AgentIdentity,
        mut last_stored: u64,
        guard: &AgentGuard,
        superseded: &mut watch::Receiver<u64>,
    ) -> Result<(), SessionError> {
        // Frames are read on their own task: reading is not cancel-safe, and the select below
        // must not drop half a frame when a store completes first. The reader blocks on the byte
        // budgets, so a full budget stops reading and QUIC flow control pushes back on the agent.
        let (frame_tx, mut frames) =
            tokio::sync::mpsc::channel::<Result<Option<ReadFrame>, TransportError>>(4);
        let reader = tokio::spawn(async move {
            loop {
                let item = reader.next(FrameKind::Batch).await;
                let end = !matches!(item, Ok(Some(_)));
                if frame_tx.send(item).await.is_err() || end {
                    break;
                }
            }
        });
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        // Each batch enters the sink's queue after the previous one (`Sink::store_after`).
        let mut previous_queued: Option<tokio::sync::oneshot::Receiver<()>> = None;
        let mut last_received = last_stored;
        let mut out = Vec::new();
        let mut reading = true;
        let result = loop {
            if !reading && in_flight.is_empty() {
                break Ok(());
            }
            let can_read = reading && in_flight.len() < self.cfg.max_batches_in_flight.max(1);
            tokio::select! {
                item = frames.recv(), if can_read => {
                    let (batch, permit) = match item {
                        Some(Ok(Some((Frame::Batch(b), len, permit)))) => { self.count_frame("batch", len); (b, permit) }
                        Some(Ok(Some((other, _, _)))) => break Err(SessionError::Protocol(format!("unexpected {} frame", other.kind().as_str()))),
                        Some(Ok(None)) | None => { reading = false; continue; }
                        Some(Err(e)) => break Err(SessionError::read(e)),
                    };
                    if batch.seq <= last_received {
                        if batch.seq <= last_stored {
                            // Already in ClickHouse (re-sent after a reconnect): acknowledge only.
                            self.metrics.duplicate_batches.inc();
                            if let Err(e) = write_frame(send, &Frame::Ack(Ack { seq: batch.seq }), &mut out).await {
                                break Err(SessionError::Write(e));
                            }
                            continue;
                        }
                        break Err(SessionError::Protocol(format!("batch seq {} not increasing (last {last_received})", batch.seq)));
                    }
                    last_received = batch.seq;
                    let sink = self.sink.clone();
                    let id = identity.clone();
                    let seq = batch.seq;
                    let guard = guard.clone();
                    let (queued, next) = tokio::sync::oneshot::channel();
                    let after = previous_queued.replace(next);
                    in_flight.push_back((seq, Instant::now(), tokio::spawn(async move {
                        let stored = sink.store_after(&id, batch, after, Some(queued)).await;
                        // The batch's bytes count until its rows are stored (or the store failed),
                        // and the agent's next session waits for it.
                        drop(permit);
                        drop(guard);
                        stored
                    })));
                }
                done = async { match in_flight.front_mut() { Some((_, _, h)) => h.await, None => std::future::pending().await } } => {
                    let Some((seq, received, _)) = in_flight.pop_front() else { continue };
                    match done {
                        Ok(Ok(())) => {
                            last_stored = seq;
                            self.metrics.ack_latency_seconds.observe(received.elapsed().as_secs_f64());
                            if let Err(e) = write_frame(send, &Frame::Ack(Ack { seq }), &mut out).await {
                                break Err(SessionError::Write(e));
                            }
                        }
                        Ok(Err(e)) => break Err(SessionError::Storage(e)),
                        Err(e) => break Err(SessionError::Storage(SinkError::Writer(e.to_string()))),
                    }
                }
                _ = self.shutdown.changed() => {
                    reading = false;
                }
                // A newer session of this agent run: stop here; batches being stored finish on
                // their own tasks and the new session waits for them.
                Ok(()) = superseded.changed() => break Err(SessionError::Superseded),
            }
        };
        reader.abort();
        result
    }

    fn count_frame(&self, kind: &str, payload_len: usize) {
        self.metrics.frames_in.get_or_create(&vec![("kind", kind.to_owned())]).inc();
        self.metrics.bytes_in.inc_by((payload_len + oomlens_schema::HEADER_LEN) as u64);
    }

    async fn fail(&self, send: &mut quinn::SendStream, e: SessionError) -> Result<(), SessionError> {
        if let Some(reply) = e.reply() {
            let _ = write_frame(send, &Frame::Error(reply), &mut Vec::new()).await;
            let _ = send.finish();
            // Give the reply a moment to leave before the connection is closed.
            let _ = tokio::time::timeout(Duration::from_millis(200), send.stopped()).await;
        }
        Err(e)
    }
}

fn peer_identity(conn: &quinn::Connection) -> Result<crate::ingest::certs::CertIdentity, SessionError> {
    let certs = conn
        .peer_identity()
        .and_then(|any| any.downcast::<Vec<CertificateDer<'static>>>().ok())
        .ok_or(SessionError::NoCertificate)?;
    let leaf = certs.first().ok_or(SessionError::NoCertificate)?;
    identity_from_der(leaf).map_err(|e| SessionError::Certificate(e.to_string()))
}

/// Logs the summary of the peer-caused warnings a window suppressed.
fn log_suppressed(summary: Option<String>) {
    if let Some(s) = summary {
        warn!(suppressed = %s, "more sessions were refused or misbehaved than are logged (rate limit; all are counted in rejects_total)");
    }
}

/// Merges the certificate identity (authoritative) with the agent's Hello: node = the
/// certificate's CN, cluster = its OU (the Hello's cluster only when the certificate has no OU).
/// A Hello claiming another node or cluster is not refused — rows carry the certificate's
/// identity, and the mismatch is logged and counted (`identity_mismatches`).
pub fn identity(cert: &crate::ingest::certs::CertIdentity, hello: &Hello) -> AgentIdentity {
    AgentIdentity {
        cluster: cert.cluster.clone().unwrap_or_else(|| hello.cluster.clone()),
        node: cert.node.clone(),
        agent_id: hello.agent_id.clone(),
        boot_id: hello.boot_id,
        agent_version: hello.agent_version.clone(),
        gpus: hello.gpus.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_charged_its_size_but_never_more_than_the_cap() {
        let budget = ByteBudget::new(100_000);
        assert_eq!(budget.charge(16), 16);
        assert_eq!(budget.charge(8 << 20), 100_000, "a frame larger than the cap takes the whole cap");
        assert_eq!(budget.semaphore.available_permits(), 100_000);
        assert_eq!(ByteBudget::new(0).cap, 1, "a zero cap still lets one frame through at a time");
    }

    #[test]
    fn sessions_of_one_agent_run_share_a_slot_and_idle_slots_are_forgotten() {
        let locks = AgentLocks::default();
        let id = |boot_id| AgentIdentity {
            cluster: "c".into(),
            node: "n".into(),
            agent_id: "a".into(),
            boot_id,
            ..AgentIdentity::default()
        };
        let a = locks.get(&id(1));
        let b = locks.get(&id(1));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &locks.get(&id(2))));
        drop((a, b));
        let _c = locks.get(&id(3));
        let map = locks.0.lock().unwrap();
        assert_eq!(map.len(), 1, "slots nobody holds are dropped");
    }
}
