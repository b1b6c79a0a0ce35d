//! The load generator's engine: many simulated agents speaking the real protocol over real QUIC.
//!
//! * [`build_pool`] — realistic `Batch` frames from the fleet simulator (`oomlens_agent::source::sim`),
//!   generated and encoded **before** the run so the generator is not the bottleneck. Each frame is
//!   a [`FrameTemplate`]: the encoded bytes plus the offset of the batch's `seq` in the archive
//!   (found by encoding the batch twice with different sequence numbers and diffing), so an agent
//!   sends the template with its own `seq` patched in — zero-copy (`Bytes` slices), no re-encoding.
//! * [`run_agent`] — one agent session: QUIC connect with its own client certificate, `Hello` →
//!   `Welcome`, then `Batch` frames with at most `max_in_flight` unacknowledged and cumulative
//!   `Ack`s read on their own task (as `oomlens_agent::uplink` does), either as fast as the acks
//!   allow ([`Mode::Throughput`]) or at a fixed rate per agent ([`Mode::Rate`]). When told to stop
//!   it stops sending, waits for the outstanding acks, finishes its stream and closes.
//! * [`Shared`] — counters of every agent (sent, acknowledged rows and frame bytes, sessions held,
//!   failures) and the ack latencies observed while [`Shared::measuring`] is on.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use oomlens_agent::source::Source as _;
use oomlens_agent::source::sim::{SimConfig, Simulator};
use oomlens_schema::transport::{TransportError, read_frame, write_frame};
use oomlens_schema::{Batch, Frame, FrameError, GpuInfo, Hello};
use tokio::sync::{mpsc, watch};

/// Something the load generator could not do.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    /// Encoding a batch failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The batch's `seq` could not be located in its encoding.
    #[error("cannot locate the batch sequence number in its rkyv encoding ({0})")]
    SeqNotFound(String),
    /// The simulator refused its configuration.
    #[error("simulator: {0}")]
    Sim(String),
    /// A session failed.
    #[error("agent {agent}: {reason}")]
    Session {
        /// Agent name.
        agent: String,
        /// What happened.
        reason: String,
    },
}

/// One pre-encoded `Batch` frame whose sequence number can be replaced.
#[derive(Debug, Clone)]
pub struct FrameTemplate {
    bytes: Bytes,
    seq_offset: usize,
    /// Rows of the batch: GPU samples, process samples, events.
    pub rows: RowCounts,
    /// Ids of the batch's events (an agent cycling through its pool re-sends the same events,
    /// which `oom_events`, a ReplacingMergeTree, collapses).
    pub event_ids: Vec<u64>,
}

/// Rows per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RowCounts {
    /// `gpu_samples` rows.
    pub gpu: u64,
    /// `process_samples` rows.
    pub process: u64,
    /// `oom_events` rows.
    pub events: u64,
}

impl RowCounts {
    /// Rows in all three tables.
    pub fn total(&self) -> u64 {
        self.gpu + self.process + self.events
    }
}

const PROBE_A: u64 = 0x0123_4567_89ab_cdef;
const PROBE_B: u64 = 0xfedc_ba98_7654_3210;

impl FrameTemplate {
    /// Encodes `batch` and locates its `seq` field in the frame.
    pub fn new(mut batch: Batch) -> Result<FrameTemplate, LoadgenError> {
        let rows = RowCounts {
            gpu: batch.gpu_samples.len() as u64,
            process: batch.process_samples.len() as u64,
            events: batch.events.len() as u64,
        };
        let event_ids = batch.events.iter().map(|e| e.event_id).collect();
        batch.seq = PROBE_A;
        let frame = Frame::Batch(batch);
        let a = frame.encode()?;
        let Frame::Batch(mut batch) = frame else { unreachable!("constructed as a batch") };
        batch.seq = PROBE_B;
        let b = Frame::Batch(batch).encode()?;
        if a.len() != b.len() {
            return Err(LoadgenError::SeqNotFound("the two encodings differ in length".into()));
        }
        // Exactly the 8 little-endian bytes of the sequence number may differ.
        let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
        let pos = a
            .windows(8)
            .enumerate()
            .find(|(i, w)| *w == PROBE_A.to_le_bytes() && b[*i..*i + 8] == PROBE_B.to_le_bytes())
            .map(|(i, _)| i)
            .ok_or_else(|| {
                LoadgenError::SeqNotFound(format!("{} differing bytes, no seq field", diff.len()))
            })?;
        if diff.iter().any(|&i| i < pos || i >= pos + 8) {
            return Err(LoadgenError::SeqNotFound(format!(
                "{} bytes differ outside the seq field",
                diff.len()
            )));
        }
        Self::checked(a, pos, rows, event_ids)
    }

    fn checked(
        bytes: Vec<u8>,
        seq_offset: usize,
        rows: RowCounts,
        event_ids: Vec<u64>,
    ) -> Result<FrameTemplate, LoadgenError> {
        let t = FrameTemplate { bytes: Bytes::from(bytes), seq_offset, rows, event_ids };
        // Prove the patch: the frame with another seq decodes to that seq and the same rows.
        match Frame::decode(&t.with_seq(42))? {
            Frame::Batch(b) if b.seq == 42 && b.row_count() as u64 == rows.total() => Ok(t),
            _ => Err(LoadgenError::SeqNotFound("the patched frame does not decode to the new seq".into())),
        }
    }

    /// Encoded length (header + payload), bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Never empty (a frame has at least its header); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The frame with `seq` patched in, as three zero-copy chunks for `write_all_chunks`.
    pub fn chunks(&self, seq: u64) -> [Bytes; 3] {
        [
            self.bytes.slice(..self.seq_offset),
            Bytes::copy_from_slice(&seq.to_le_bytes()),
            self.bytes.slice(self.seq_offset + 8..),
        ]
    }

    /// The frame with `seq` patched in, as one buffer.
    pub fn with_seq(&self, seq: u64) -> Vec<u8> {
        let mut v = self.bytes.to_vec();
        v[self.seq_offset..self.seq_offset + 8].copy_from_slice(&seq.to_le_bytes());
        v
    }
}

/// The frames of one simulated node; agents are assigned to nodes round-robin.
#[derive(Debug)]
pub struct NodePool {
    /// The node's GPUs (sent in `Hello`).
    pub inventory: Vec<GpuInfo>,
    /// Consecutive batches of the node.
    pub frames: Vec<FrameTemplate>,
}

/// What the frame pool holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolSpec {
    /// Simulated nodes (distinct data); agents share them round-robin.
    pub nodes: usize,
    /// Batches per node (agents cycle through them).
    pub batches_per_node: usize,
    /// Seconds of 1 Hz readings per batch (1 = what the agent sends with its defaults).
    pub batch_seconds: u32,
    /// GPUs per node.
    pub gpus: u32,
    /// Always-on extra processes per GPU (the simulated jobs add 1–3 more).
    pub procs_per_gpu: u32,
    /// Simulator seed.
    pub seed: u64,
    /// First timestamp, Unix ms.
    pub start_ms: i64,
}

/// Simulated time skipped before the first batch, so that the jobs are placed and running.
const SIM_WARMUP_MS: i64 = 120_000;

/// Generates and encodes the frame pool (one simulator per node, `batch_seconds` readings per batch).
pub fn build_pool(spec: &PoolSpec) -> Result<Vec<NodePool>, LoadgenError> {
    (0..spec.nodes.max(1))
        .map(|n| {
            let cfg = SimConfig {
                seed: spec.seed,
                gpus: spec.gpus,
                extra_processes_per_gpu: spec.procs_per_gpu,
                ..SimConfig::default()
            };
            let mut sim = Simulator::new(&format!("loadgen-sim-{n:03}"), cfg, spec.start_ms)
                .map_err(|e| LoadgenError::Sim(e.to_string()))?;
            let inventory = sim.inventory();
            let mut ts = spec.start_ms + SIM_WARMUP_MS;
            let _ = sim.sample(ts);
            let mut frames = Vec::with_capacity(spec.batches_per_node);
            for _ in 0..spec.batches_per_node.max(1) {
                let mut batch = Batch::default();
                for _ in 0..spec.batch_seconds.max(1) {
                    ts += 1_000;
                    let r = sim.sample(ts);
                    batch.gpu_samples.extend(r.gpu_samples);
                    batch.process_samples.extend(r.process_samples);
                    batch.events.extend(r.events);
                }
                frames.push(FrameTemplate::new(batch)?);
            }
            Ok(NodePool { inventory, frames })
        })
        .collect()
}

/// How agents send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// As fast as acknowledgements allow (`max_in_flight` unacknowledged per agent).
    Throughput,
    /// One batch every `1 / hz` seconds per agent (phases spread over the period).
    Rate {
        /// Batches per second per agent.
        hz: f64,
    },
}

/// Settings shared by every agent of a run.
#[derive(Debug, Clone)]
pub struct DriveConfig {
    /// The collector's QUIC address.
    pub collector: SocketAddr,
    /// Name the collector's certificate carries.
    pub server_name: String,
    /// Cluster announced in `Hello` (the certificate's OU wins at the collector).
    pub cluster: String,
    /// Sending mode.
    pub mode: Mode,
    /// Most batches sent and not yet acknowledged, per agent.
    pub max_in_flight: usize,
    /// Time allowed for the QUIC + TLS handshake and `Welcome`.
    pub connect_timeout: Duration,
    /// Time allowed, after stop, for the outstanding acks.
    pub drain_timeout: Duration,
    /// Identifies this run (boot ids derive from it, so every run is a new sequence space).
    pub run_id: u64,
}

/// Counters of all agents.
#[derive(Debug, Default)]
pub struct Shared {
    /// Sessions that reached `Welcome`.
    pub connected: AtomicU64,
    /// Sessions open now.
    pub open: AtomicU64,
    /// Sessions that failed (connect or later).
    pub failed: AtomicU64,
    /// Agents whose connection attempt has finished (either way).
    pub connect_done: AtomicU64,
    /// Batches sent.
    pub sent_batches: AtomicU64,
    /// Batches acknowledged.
    pub acked_batches: AtomicU64,
    /// Rows acknowledged (all three tables).
    pub acked_rows: AtomicU64,
    /// `gpu_samples` rows acknowledged.
    pub acked_gpu_rows: AtomicU64,
    /// `process_samples` rows acknowledged.
    pub acked_process_rows: AtomicU64,
    /// `oom_events` rows acknowledged.
    pub acked_event_rows: AtomicU64,
    /// Frame bytes acknowledged.
    pub acked_bytes: AtomicU64,
    /// Distinct (agent, event id) pairs acknowledged (added when an agent's session ends).
    pub acked_distinct_events: AtomicU64,
    /// Rate mode: ticks at which the window was full (the batch went out late).
    pub late_ticks: AtomicU64,
    /// While true, ack latencies are recorded.
    pub measuring: AtomicBool,
    latencies_us: Mutex<Vec<u32>>,
    errors: Mutex<Vec<String>>,
}

impl Shared {
    /// Every recorded ack latency, µs (unsorted).
    pub fn take_latencies(&self) -> Vec<u32> {
        std::mem::take(&mut *self.latencies_us.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The first few session errors.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn error(&self, e: &LoadgenError) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        if errors.len() < 16 {
            errors.push(e.to_string());
        }
    }

    fn flush_latencies(&self, local: &mut Vec<u32>) {
        if !local.is_empty() {
            self.latencies_us.lock().unwrap_or_else(PoisonError::into_inner).append(local);
        }
    }
}

/// One agent of the run.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// Index (0-based).
    pub index: usize,
    /// Agent id and node name (the certificate's CN is what the collector stores).
    pub name: String,
    /// QUIC client config with this agent's certificate.
    pub client_config: quinn::ClientConfig,
    /// The frames it sends (cycled from `start`).
    pub pool: Arc<NodePool>,
    /// First frame of the pool it sends.
    pub start: usize,
}

/// p-quantile (0..=1) of sorted values.
pub fn quantile(sorted: &[u32], q: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let idx = ((sorted.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    sorted.get(idx).copied()
}

/// Runs one agent until `stop` turns true and its outstanding batches are acknowledged. Failures
/// are counted in `shared` (and returned).
pub async fn run_agent(
    endpoint: quinn::Endpoint,
    spec: AgentSpec,
    cfg: Arc<DriveConfig>,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) -> Result<(), LoadgenError> {
    let fail = |reason: String| LoadgenError::Session { agent: spec.name.clone(), reason };
    let connecting = endpoint
        .connect_with(spec.client_config.clone(), cfg.collector, &cfg.server_name)
        .map_err(|e| fail(format!("connect: {e}")));
    let conn = match connecting {
        Ok(c) => tokio::time::timeout(cfg.connect_timeout, c)
            .await
            .map_err(|_| fail("handshake timed out".into()))
            .and_then(|r| r.map_err(|e| fail(format!("handshake: {e}")))),
        Err(e) => Err(e),
    };
    let conn = match conn {
        Ok(c) => c,
        Err(e) => {
            shared.connect_done.fetch_add(1, Ordering::Relaxed);
            shared.error(&e);
            return Err(e);
        }
    };
    let result = session(&conn, &spec, &cfg, &shared, stop).await;
    match &result {
        Ok(()) => {
            // The collector closes the connection once it has seen our stream end.
            let _ = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await;
        }
        Err(e) => {
            shared.error(e);
            conn.close(1u32.into(), b"loadgen error");
        }
    }
    result
}

async fn session(
    conn: &quinn::Connection,
    spec: &AgentSpec,
    cfg: &DriveConfig,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) -> Result<(), LoadgenError> {
    let fail = |reason: String| LoadgenError::Session { agent: spec.name.clone(), reason };
    let handshake = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| fail(format!("open stream: {e}")))?;
        let hello = Frame::Hello(Hello {
            agent_id: spec.name.clone(),
            node: spec.name.clone(),
            cluster: cfg.cluster.clone(),
            boot_id: cfg.run_id ^ (spec.index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            agent_version: concat!("loadgen/", env!("CARGO_PKG_VERSION")).to_owned(),
            gpus: spec.pool.inventory.clone(),
        });
        let mut buf = Vec::new();
        write_frame(&mut send, &hello, &mut buf).await.map_err(|e| fail(format!("Hello: {e}")))?;
        match read_frame(&mut recv, &mut buf).await {
            Ok(Some(Frame::Welcome(w))) => Ok((send, recv, w.last_acked_seq)),
            Ok(Some(Frame::Error(e))) => Err(fail(format!("refused: {} (code {})", e.message, e.code))),
            Ok(other) => Err(fail(format!("expected Welcome, got {other:?}"))),
            Err(e) => Err(fail(format!("Welcome: {e}"))),
        }
    };
    let hs = tokio::time::timeout(cfg.connect_timeout, handshake)
        .await
        .map_err(|_| fail("no Welcome in time".into()))
        .and_then(|r| r);
    shared.connect_done.fetch_add(1, Ordering::Relaxed);
    let (mut send, mut recv, last_acked) = hs?;
    shared.connected.fetch_add(1, Ordering::Relaxed);
    shared.open.fetch_add(1, Ordering::Relaxed);

    // Acks are read on their own task, time-stamped on arrival.
    let (ack_tx, mut acks) = mpsc::unbounded_channel::<Result<(u64, Instant), String>>();
    let reader = tokio::spawn(async move {
        let mut buf = Vec::new();
        loop {
            let item = match read_frame(&mut recv, &mut buf).await {
                Ok(Some(Frame::Ack(a))) => Ok((a.seq, Instant::now())),
                Ok(Some(Frame::Error(e))) => Err(format!("collector error {}: {}", e.code, e.message)),
                Ok(Some(other)) => Err(format!("unexpected {} frame", other.kind().as_str())),
                Ok(None) => Err("collector closed the stream".to_owned()),
                Err(TransportError::Io(e)) => Err(format!("reading acks: {e}")),
                Err(e) => Err(format!("bad frame from the collector: {e}")),
            };
            let end = item.is_err();
            if ack_tx.send(item).is_err() || end {
                break;
            }
        }
    });

    let result = pump(&mut send, &mut acks, spec, cfg, shared, &mut stop, last_acked).await;
    if result.is_ok() {
        let _ = send.finish();
    }
    reader.abort();
    shared.open.fetch_sub(1, Ordering::Relaxed);
    result
}

struct InFlight {
    seq: u64,
    sent: Instant,
    /// Index into the pool (modulo its length).
    frame: usize,
    bytes: usize,
}

#[allow(clippy::too_many_arguments)]
async fn pump(
    send: &mut quinn::SendStream,
    acks: &mut mpsc::UnboundedReceiver<Result<(u64, Instant), String>>,
    spec: &AgentSpec,
    cfg: &DriveConfig,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
    last_acked: u64,
) -> Result<(), LoadgenError> {
    let fail = |reason: String| LoadgenError::Session { agent: spec.name.clone(), reason };
    let frames = &spec.pool.frames;
    let mut next_frame = spec.start;
    let mut seq = last_acked + 1;
    let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(cfg.max_in_flight);
    let max_in_flight = cfg.max_in_flight.max(1);
    let mut local_latencies: Vec<u32> = Vec::new();
    let mut events_seen: std::collections::HashSet<u64> = std::collections::HashSet::new();
    let mut sending = !*stop.borrow();
    let mut owed: u64 = 0;
    let (period, phase) = match cfg.mode {
        Mode::Throughput => (Duration::from_secs(3600), Duration::ZERO),
        Mode::Rate { hz } => {
            let period = Duration::from_secs_f64(1.0 / hz.max(1e-3));
            // Spread the agents' phases evenly over the period (deterministic per agent).
            let frac = (spec.index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) as f64 / u64::MAX as f64;
            (period, period.mul_f64(frac))
        }
    };
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + phase, period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let rate = matches!(cfg.mode, Mode::Rate { .. });
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    loop {
        if sending {
            let want = if rate { owed } else { u64::MAX };
            let mut sent = 0u64;
            while sent < want && in_flight.len() < max_in_flight {
                let t = &frames[next_frame % frames.len()];
                next_frame += 1;
                let mut chunks = t.chunks(seq);
                let started = Instant::now();
                send.write_all_chunks(&mut chunks).await.map_err(|e| fail(format!("write: {e}")))?;
                in_flight.push_back(InFlight { seq, sent: started, frame: next_frame - 1, bytes: t.len() });
                shared.sent_batches.fetch_add(1, Ordering::Relaxed);
                seq += 1;
                sent += 1;
            }
            if rate {
                owed -= sent;
            }
        } else if in_flight.is_empty() {
            shared.flush_latencies(&mut local_latencies);
            shared.acked_distinct_events.fetch_add(events_seen.len() as u64, Ordering::Relaxed);
            return Ok(());
        }
        let deadline =
            drain_deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400));
        tokio::select! {
            item = acks.recv() => {
                let (acked, at) = match item {
                    Some(Ok(a)) => a,
                    Some(Err(e)) => return Err(fail(e)),
                    None => return Err(fail("ack reader ended".into())),
                };
                let measuring = shared.measuring.load(Ordering::Relaxed);
                while in_flight.front().is_some_and(|f| f.seq <= acked) {
                    let Some(f) = in_flight.pop_front() else { break };
                    let t = &frames[f.frame % frames.len()];
                    events_seen.extend(t.event_ids.iter().copied());
                    shared.acked_batches.fetch_add(1, Ordering::Relaxed);
                    shared.acked_rows.fetch_add(t.rows.total(), Ordering::Relaxed);
                    shared.acked_gpu_rows.fetch_add(t.rows.gpu, Ordering::Relaxed);
                    shared.acked_process_rows.fetch_add(t.rows.process, Ordering::Relaxed);
                    shared.acked_event_rows.fetch_add(t.rows.events, Ordering::Relaxed);
                    shared.acked_bytes.fetch_add(f.bytes as u64, Ordering::Relaxed);
                    if measuring {
                        let us = at.saturating_duration_since(f.sent).as_micros();
                        local_latencies.push(u32::try_from(us).unwrap_or(u32::MAX));
                    }
                }
                if local_latencies.len() >= 4096 {
                    shared.flush_latencies(&mut local_latencies);
                }
            }
            _ = ticker.tick(), if rate && sending => {
                if in_flight.len() >= max_in_flight {
                    shared.late_ticks.fetch_add(1, Ordering::Relaxed);
                }
                owed += 1;
            }
            _ = stop.changed(), if sending => {
                sending = false;
                drain_deadline = Some(tokio::time::Instant::now() + cfg.drain_timeout);
            }
            () = tokio::time::sleep_until(deadline), if drain_deadline.is_some() => {
                return Err(fail(format!("{} batches still unacknowledged after the drain timeout", in_flight.len())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PoolSpec {
        PoolSpec {
            nodes: 2,
            batches_per_node: 3,
            batch_seconds: 2,
            gpus: 2,
            procs_per_gpu: 1,
            seed: 7,
            start_ms: 1_754_000_000_000,
        }
    }

    #[test]
    fn templates_carry_any_seq_and_the_simulated_rows() {
        let pool = build_pool(&spec()).unwrap();
        assert_eq!(pool.len(), 2);
        for node in &pool {
            assert_eq!(node.inventory.len(), 2);
            assert_eq!(node.frames.len(), 3);
            for t in &node.frames {
                // 2 GPUs × 2 s of GPU samples, and at least the extra process on each GPU each second.
                assert_eq!(t.rows.gpu, 4);
                assert!(t.rows.process >= 4, "{:?}", t.rows);
                for seq in [1, 2, 1 << 40, u64::MAX] {
                    let bytes = t.with_seq(seq);
                    let chunks: Vec<u8> = t.chunks(seq).iter().flat_map(|c| c.iter().copied()).collect();
                    assert_eq!(bytes, chunks);
                    let Frame::Batch(b) = Frame::decode(&bytes).unwrap() else { panic!("not a batch") };
                    assert_eq!(b.seq, seq);
                    assert_eq!(b.row_count() as u64, t.rows.total());
                }
            }
        }
        // Different nodes simulate different data.
        assert_ne!(pool[0].frames[0].with_seq(1), pool[1].frames[0].with_seq(1));
    }

    #[test]
    fn quantiles() {
        assert_eq!(quantile(&[], 0.5), None);
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.0), Some(1));
        assert_eq!(quantile(&v, 0.5), Some(51));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 1.0), Some(100));
    }
}
