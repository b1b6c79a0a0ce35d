//! The batched ClickHouse writer behind "acknowledge only after the rows are stored".
//!
//! [`Sink::store`] encodes a batch's samples to RowBinary and its events into rows (stamped with
//! the authenticated identity), puts them on a bounded queue (awaiting space: that is the
//! backpressure towards the QUIC sessions) and resolves once the rows *and* the `agents` row
//! recording `last_seq` are in ClickHouse.
//!
//! One writer task ([`SinkTask`]) gathers rows from many `store` calls until `insert_max_rows` rows
//! or `insert_max_delay` have accumulated, then runs RowBinary `INSERT`s per table — the samples
//! split by batch into `insert_lanes` inserts per table that run at once (`gpu_samples` then
//! `process_samples` in each lane), then `oom_events`, then `agents` — and completes every waiting
//! `store`. Up to `insert_concurrency` flushes insert at once; each writes its `agents` rows only
//! after the previous flush wrote its own, and completes its waiters after that. When an insert fails (ClickHouse down or slow) it retries the same rows with
//! exponential backoff with jitter (100 ms → 5 s), keeps the waiters pending and stops taking batches from the
//! queue: rows are never dropped, and nothing is acknowledged that is not stored. Tables whose
//! insert already succeeded are not written again on retry. Each `INSERT` stays below
//! ClickHouse's block size and is therefore atomic; only an insert whose response is lost after
//! the server committed it (a timeout or crash at that instant) can be written twice — the usual
//! at-least-once window, harmless for `oom_events`/`agents` (ReplacingMergeTree).
//!
//! **Exactly-once results** (see `docs/architecture.md`): the `agents` row written at the end of
//! each flush is the commit record — a re-sent batch whose seq it covers is acknowledged without an
//! insert (`server`). On servers with insert deduplication tokens ([`ServerCaps::dedup_token`])
//! every `INSERT` carries a token derived from the table and the exact set of (agent, boot id, seq)
//! in the flush, so a retried insert whose first attempt was committed is dropped by the server
//! (`non_replicated_deduplication_window` on the tables). A re-sent batch grouped differently after
//! a collector crash between the data inserts and the `agents` row can still be stored twice; the
//! built-in queries collapse such rows by their natural key, so answers do not change.
//!
//! When every [`Sink`] handle is dropped the writer flushes what is pending and exits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clickhouse::{RowOwned, RowWrite};
use oomlens_schema::Batch;
use oomlens_schema::ddl::ServerCaps;
use oomlens_schema::retry::Backoff;
use oomlens_schema::rows::{AgentRow, GpuSampleRow, OomEventRow, ProcessSampleRow, TableRow};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::sync::{mpsc, oneshot};

use super::client::{Ch, ChError};
use super::config::ChConfig;
use super::convert::{agent_row, event_row};
use super::rowbinary::{EncodedRows, EncodedSamples, encode_batch};
use crate::identity::AgentIdentity;

/// First retry delay after a failed insert.
pub const BACKOFF_START: Duration = Duration::from_millis(100);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

pub use oomlens_schema::text::now_ms;

/// Why a batch was not stored.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The writer task is gone (shut down or failed); the batch is not acknowledged.
    #[error("the ClickHouse writer has stopped; the batch was not stored")]
    Closed,
    /// A direct query failed.
    #[error(transparent)]
    ClickHouse(#[from] ChError),
    /// The writer task ended abnormally.
    #[error("the ClickHouse writer task failed: {0}")]
    Writer(String),
}

/// Counters of the sink, shared with `/metrics`.
#[derive(Debug, Default)]
pub struct SinkStats {
    /// Batches accepted by `store`.
    pub batches_in: AtomicU64,
    /// Batches stored and acknowledged.
    pub batches_stored: AtomicU64,
    /// `gpu_samples` rows received.
    pub gpu_rows_in: AtomicU64,
    /// `process_samples` rows received.
    pub process_rows_in: AtomicU64,
    /// `oom_events` rows received.
    pub event_rows_in: AtomicU64,
    /// Rows written, all tables including `agents`.
    pub rows_written: AtomicU64,
    /// Flushes completed (each one `INSERT` per non-empty table).
    pub insert_batches: AtomicU64,
    /// Failed `INSERT` attempts (each is retried).
    pub insert_errors: AtomicU64,
    /// Durations of the successful `INSERT` statements, seconds (exposed as the
    /// `oomlens_collector_insert_duration_seconds` histogram).
    pub insert_duration: InsertDuration,
    /// Batches waiting in the queue for the writer.
    pub queue_depth: AtomicU64,
    /// Batches taken by the writer and not yet stored.
    pub pending_batches: AtomicU64,
    /// True from a failed insert until the next successful flush (readiness follows it).
    pub insert_failing: std::sync::atomic::AtomicBool,
    /// True once the writer task has stopped (shut down, aborted or crashed).
    pub writer_stopped: std::sync::atomic::AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl SinkStats {
    /// Batches taken by `store` and not stored yet: queued, or with the writer.
    pub fn unstored(&self) -> u64 {
        self.queue_depth.load(Ordering::Relaxed) + self.pending_batches.load(Ordering::Relaxed)
    }

    /// The most recent insert error (kept after recovery, for diagnostics).
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set_last_error(&self, e: &ChError) {
        *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
    }

    fn record_insert(&self, took: Duration, rows: usize) {
        self.insert_duration.observe(took);
        self.rows_written.fetch_add(rows as u64, Ordering::Relaxed);
    }
}

/// `INSERT` durations: the histogram `/metrics` exposes (buckets from 1 ms to ~65 s, doubling)
/// plus the count and total this process reads back (the histogram has no read accessors).
#[derive(Debug)]
pub struct InsertDuration {
    /// The exposed histogram, seconds.
    pub histogram: Histogram,
    count: AtomicU64,
    total_us: AtomicU64,
}

impl Default for InsertDuration {
    fn default() -> Self {
        InsertDuration {
            histogram: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            count: AtomicU64::new(0),
            total_us: AtomicU64::new(0),
        }
    }
}

impl InsertDuration {
    fn observe(&self, took: Duration) {
        self.histogram.observe(took.as_secs_f64());
        self.count.fetch_add(1, Ordering::Relaxed);
        self.total_us.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Inserts timed so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Their mean duration, `None` before the first.
    pub fn mean(&self) -> Option<Duration> {
        let n = self.count();
        (n > 0).then(|| Duration::from_micros(self.total_us.load(Ordering::Relaxed) / n))
    }
}

/// Bytes of RowBinary sent per compressed block of an `INSERT` body.
const INSERT_CHUNK_BYTES: usize = 1 << 20;

/// One `store` call on its way to the writer.
struct Job {
    samples: EncodedSamples,
    events: Vec<OomEventRow>,
    agent: AgentRow,
    done: oneshot::Sender<()>,
}

/// The deduplication token of one table's insert in a flush: the table and the sorted
/// (cluster, node, agent id, boot id, seq) of every batch in the flush, hashed (FNV-1a, 2 × 64
/// bits). Deterministic across collector runs and versions: the same batches give the same token.
fn dedup_token(table: &str, batches: &[(AgentKey, u64)]) -> String {
    let mut sorted: Vec<&(AgentKey, u64)> = batches.iter().collect();
    sorted.sort_unstable();
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x8422_2325_cbf2_9ce4;
    let mut feed = |bytes: &[u8]| {
        for &byte in bytes {
            a = (a ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            b = (b ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3 ^ 0x5bd1_e995);
        }
        // Field separator (not a valid UTF-8 byte).
        a = (a ^ 0xff).wrapping_mul(0x0100_0000_01b3);
        b = (b ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3 ^ 0x5bd1_e995);
    };
    feed(table.as_bytes());
    for ((cluster, node, agent_id, boot_id), seq) in sorted {
        feed(cluster.as_bytes());
        feed(node.as_bytes());
        feed(agent_id.as_bytes());
        feed(&boot_id.to_le_bytes());
        feed(&seq.to_le_bytes());
    }
    format!("oomlens-{table}-{}-{a:016x}{b:016x}", batches.len())
}

/// Clone-able handle of the writer.
#[derive(Debug, Clone)]
pub struct Sink {
    tx: mpsc::Sender<Job>,
    ch: Ch,
    collector_id: Arc<str>,
    stats: Arc<SinkStats>,
}

/// The writer task; finishes after every [`Sink`] handle is dropped and pending rows are stored.
#[derive(Debug)]
pub struct SinkTask {
    handle: tokio::task::JoinHandle<()>,
}

impl SinkTask {
    /// Waits for the writer to flush and exit.
    pub async fn join(self) -> Result<(), SinkError> {
        self.handle.await.map_err(|e| SinkError::Writer(e.to_string()))
    }

    /// [`Self::join`] for at most `limit`; then the writer is stopped. `Ok(false)`: it was stopped
    /// with rows not stored (ClickHouse down or refusing them). Those batches were never
    /// acknowledged: their agents keep them and send them again.
    pub async fn join_within(mut self, limit: Duration) -> Result<bool, SinkError> {
        match tokio::time::timeout(limit, &mut self.handle).await {
            Ok(joined) => joined.map(|()| true).map_err(|e| SinkError::Writer(e.to_string())),
            Err(_) => {
                self.handle.abort();
                Ok(false)
            }
        }
    }

    /// True once the writer has exited.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Stops the writer at once; pending batches are not stored (their `store` calls fail).
    pub fn abort(&self) {
        self.handle.abort();
    }
}

impl Sink {
    /// Starts the writer task (on the current tokio runtime).
    pub fn spawn(ch: Ch, cfg: &ChConfig, collector_id: String) -> (Sink, SinkTask) {
        let (tx, rx) = mpsc::channel(cfg.queue_capacity.max(1));
        let stats = Arc::new(SinkStats::default());
        let flusher = Flusher {
            ch: ch.clone(),
            collector_id: collector_id.clone(),
            caps: ch.caps(),
            stats: Arc::clone(&stats),
        };
        let writer = Writer {
            flusher: Arc::new(flusher),
            rx,
            max_rows: cfg.insert_max_rows.max(1),
            max_delay: cfg.insert_max_delay(),
            concurrency: cfg.insert_concurrency.max(1),
            lanes: cfg.insert_lanes.max(1),
        };
        let handle = tokio::spawn(writer.run());
        (Sink { tx, ch, collector_id: collector_id.into(), stats }, SinkTask { handle })
    }

    /// Resolves `Ok` only after the batch's rows (all tables) and the `agents` row recording
    /// `last_seq = batch.seq` are in ClickHouse. Waits while the queue is full (backpressure) and
    /// while ClickHouse is unavailable (the writer retries); fails only if the writer stopped.
    pub async fn store(&self, identity: &AgentIdentity, batch: Batch) -> Result<(), SinkError> {
        self.store_after(identity, batch, None, None).await
    }

    /// [`Self::store`] for one of several batches of one agent stored at once (a session's
    /// pipeline): the batch is encoded at once but enters the writer's queue only after `after`
    /// fires (the previous batch's `queued`, or its sender is dropped), and fires `queued` when it
    /// is in. Each agent's batches thus reach the writer in `seq` order, so a flush's commit
    /// record — the highest `seq` it stored per agent — never covers a lower `seq` still waiting
    /// to be queued.
    pub async fn store_after(
        &self,
        identity: &AgentIdentity,
        batch: Batch,
        after: Option<oneshot::Receiver<()>>,
        queued: Option<oneshot::Sender<()>>,
    ) -> Result<(), SinkError> {
        let received = now_ms();
        let agent = agent_row(identity, &self.collector_id, batch.seq, received);
        // The samples go straight to RowBinary (no row structs: benches `ingest`); the batch's
        // strings are freed here, on the session's task, not on the writer.
        let samples = encode_batch(identity, &batch);
        let events: Vec<OomEventRow> =
            batch.events.iter().map(|e| event_row(identity, e, received)).collect();
        drop(batch);
        let stats = &self.stats;
        stats.batches_in.fetch_add(1, Ordering::Relaxed);
        stats.gpu_rows_in.fetch_add(samples.gpu.rows as u64, Ordering::Relaxed);
        stats.process_rows_in.fetch_add(samples.process.rows as u64, Ordering::Relaxed);
        stats.event_rows_in.fetch_add(events.len() as u64, Ordering::Relaxed);
        let (done, stored) = oneshot::channel();
        if let Some(previous) = after {
            // An error only says the previous batch's store ended without queueing (it failed).
            let _ = previous.await;
        }
        stats.queue_depth.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(Job { samples, events, agent, done }).await.is_err() {
            stats.queue_depth.fetch_sub(1, Ordering::Relaxed);
            return Err(SinkError::Closed);
        }
        if let Some(queued) = queued {
            let _ = queued.send(());
        }
        stored.await.map_err(|_| SinkError::Closed)
    }

    /// Highest sequence number already stored for this agent run (cluster, node, agent id, boot
    /// id); 0 if none. Uses `max()`, so it is right before ReplacingMergeTree merges.
    pub async fn last_acked_seq(&self, identity: &AgentIdentity) -> Result<u64, SinkError> {
        let sql = format!(
            "SELECT max(last_seq) FROM {} WHERE cluster = ? AND node = ? AND agent_id = ? AND boot_id = ?",
            self.ch.table(AgentRow::TABLE)
        );
        let query = self
            .ch
            .client()
            .query(&sql)
            .bind(identity.cluster.as_str())
            .bind(identity.node.as_str())
            .bind(identity.agent_id.as_str())
            .bind(identity.boot_id)
            .fetch_one::<u64>();
        Ok(self.ch.run("reading the last stored sequence number", query).await?)
    }

    /// The sink's counters.
    pub fn stats(&self) -> Arc<SinkStats> {
        Arc::clone(&self.stats)
    }

    /// The ClickHouse client the sink writes with.
    pub fn ch(&self) -> &Ch {
        &self.ch
    }
}

type AgentKey = (String, String, String, u64);

/// The writer stopped at an injected fault point.
#[derive(Debug)]
struct Crashed;

/// Why one write attempt failed.
#[derive(Debug)]
enum WriteError {
    /// ClickHouse failed; retried.
    Ch(ChError),
    /// An injected fault crashed the writer.
    Crashed,
}

impl From<ChError> for WriteError {
    fn from(e: ChError) -> Self {
        WriteError::Ch(e)
    }
}

use crate::fault::FaultPoint;

/// The sample rows of one flush that one `INSERT` per table carries (see [`Pending::lanes`]).
#[derive(Default)]
struct Lane {
    gpu: EncodedRows,
    process: EncodedRows,
    /// (agent, seq) of the batches in this lane: its insert deduplication tokens.
    batches: Vec<(AgentKey, u64)>,
}

impl Lane {
    fn rows(&self) -> usize {
        self.gpu.rows + self.process.rows
    }
}

/// Rows gathered for one flush.
struct Pending {
    /// The flush's sample rows split into `insert_lanes` parts by batch (each batch whole in the
    /// lane holding the fewest rows when it arrived); the lanes are inserted at once.
    lanes: Vec<Lane>,
    events: Vec<OomEventRow>,
    agents: HashMap<AgentKey, AgentRow>,
    /// (agent, seq) of every batch in the flush: the insert deduplication tokens.
    batches: Vec<(AgentKey, u64)>,
    waiters: Vec<oneshot::Sender<()>>,
    rows: usize,
}

impl Pending {
    fn new(lanes: usize) -> Self {
        Pending {
            lanes: std::iter::repeat_with(Lane::default).take(lanes.max(1)).collect(),
            events: Vec::new(),
            agents: HashMap::new(),
            batches: Vec::new(),
            waiters: Vec::new(),
            rows: 0,
        }
    }

    fn push(&mut self, job: Job) {
        let Job { samples, mut events, agent, done } = job;
        self.rows += samples.gpu.rows + samples.process.rows + events.len() + 1;
        let key = (agent.cluster.clone(), agent.node.clone(), agent.agent_id.clone(), agent.boot_id);
        if let Some(lane) = self.lanes.iter_mut().min_by_key(|lane| lane.rows()) {
            lane.gpu.append(&samples.gpu);
            lane.process.append(&samples.process);
            lane.batches.push((key.clone(), agent.last_seq));
        }
        self.events.append(&mut events);
        self.batches.push((key.clone(), agent.last_seq));
        match self.agents.get_mut(&key) {
            Some(existing) if existing.last_seq >= agent.last_seq => {
                existing.ts_ms = existing.ts_ms.max(agent.ts_ms);
            }
            Some(existing) => {
                let ts = existing.ts_ms.max(agent.ts_ms);
                *existing = AgentRow { ts_ms: ts, ..agent };
            }
            None => {
                self.agents.insert(key, agent);
            }
        }
        self.waiters.push(done);
    }
}

/// Receives jobs, gathers them into flushes and runs up to `concurrency` flushes at once.
struct Writer {
    flusher: Arc<Flusher>,
    rx: mpsc::Receiver<Job>,
    max_rows: usize,
    max_delay: Duration,
    concurrency: usize,
    /// Parallel `INSERT`s per sample table in one flush.
    lanes: usize,
}

/// Writes one flush (shared by the concurrent flush tasks).
struct Flusher {
    ch: Ch,
    collector_id: String,
    caps: ServerCaps,
    stats: Arc<SinkStats>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.flusher.stats.writer_stopped.store(true, Ordering::Relaxed);
    }
}

/// True when a finished flush task crashed (injected fault) or was torn down.
fn flush_stopped(result: Option<Result<Result<(), Crashed>, tokio::task::JoinError>>) -> bool {
    matches!(result, Some(Err(_) | Ok(Err(Crashed))))
}

impl Writer {
    fn take(&self, pending: &mut Pending, job: Job) {
        self.flusher.stats.queue_depth.fetch_sub(1, Ordering::Relaxed);
        self.flusher.stats.pending_batches.fetch_add(1, Ordering::Relaxed);
        pending.push(job);
    }

    /// Gathers flushes and hands each to its own task. The data inserts of up to `concurrency`
    /// flushes run at once (ClickHouse parses and writes each `INSERT` on one thread, so one at a
    /// time leaves its other cores idle); the commit records (`agents` rows) and the
    /// acknowledgements still happen in flush order: flush *n* writes its `agents` rows only after
    /// flush *n − 1* has written its own, so a stored `last_seq` never covers a batch whose rows
    /// are not stored.
    async fn run(mut self) {
        let mut flushes: tokio::task::JoinSet<Result<(), Crashed>> = tokio::task::JoinSet::new();
        let mut previous: Option<oneshot::Receiver<()>> = None;
        let mut closed = false;
        while !closed {
            let first = tokio::select! {
                job = self.rx.recv() => job,
                done = flushes.join_next(), if !flushes.is_empty() => {
                    if flush_stopped(done) {
                        flushes.abort_all();
                        return;
                    }
                    continue;
                }
            };
            let Some(first) = first else { break };
            let mut pending = Pending::new(self.lanes);
            self.take(&mut pending, first);
            let deadline = tokio::time::Instant::now() + self.max_delay;
            while pending.rows < self.max_rows {
                tokio::select! {
                    biased;
                    job = self.rx.recv() => match job {
                        Some(job) => self.take(&mut pending, job),
                        None => {
                            closed = true;
                            break;
                        }
                    },
                    () = tokio::time::sleep_until(deadline) => break,
                }
            }
            while flushes.len() >= self.concurrency {
                if flush_stopped(flushes.join_next().await) {
                    flushes.abort_all();
                    return;
                }
            }
            let (committed, next) = oneshot::channel();
            let after = previous.replace(next);
            let flusher = Arc::clone(&self.flusher);
            flushes.spawn(async move { flusher.flush(pending, after, committed).await });
        }
        while !flushes.is_empty() {
            if flush_stopped(flushes.join_next().await) {
                flushes.abort_all();
                return;
            }
        }
        tracing::debug!("ClickHouse writer: all sink handles dropped, exiting");
    }
}

impl Flusher {
    /// Writes until it succeeds (the `agents` rows only after the previous flush's, `after`), then
    /// completes the waiters and signals `committed`. `Err` only when an injected fault crashed the
    /// writer (tests with the `fault-injection` feature) or the previous flush was torn down.
    async fn flush(
        &self,
        mut pending: Pending,
        mut after: Option<oneshot::Receiver<()>>,
        committed: oneshot::Sender<()>,
    ) -> Result<(), Crashed> {
        // Jittered: flushes that failed together (two collectors' quorum inserts colliding on a
        // replicated shard) do not retry together.
        let mut backoff = Backoff::new(BACKOFF_START, BACKOFF_MAX);
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            match self.write(&mut pending, &mut after).await {
                Ok(()) => break,
                Err(WriteError::Crashed) => return Err(Crashed),
                Err(WriteError::Ch(e)) => {
                    let wait = backoff.wait(rand::random());
                    self.stats.insert_failing.store(true, Ordering::Relaxed);
                    self.stats.insert_errors.fetch_add(1, Ordering::Relaxed);
                    self.stats.set_last_error(&e);
                    tracing::warn!(
                        error = %e,
                        collector_id = %self.collector_id,
                        attempt,
                        retry_in_ms = wait.as_millis() as u64,
                        batches = pending.waiters.len(),
                        "ClickHouse insert failed; retrying the same rows"
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
        if attempt > 1 {
            tracing::info!(attempts = attempt, "ClickHouse insert succeeded after retries");
        }
        self.stats.insert_failing.store(false, Ordering::Relaxed);
        if self.fault(FaultPoint::AfterStoreBeforeAck) {
            return Err(Crashed);
        }
        let n = pending.waiters.len() as u64;
        self.stats.insert_batches.fetch_add(1, Ordering::Relaxed);
        self.stats.batches_stored.fetch_add(n, Ordering::Relaxed);
        self.stats.pending_batches.fetch_sub(n, Ordering::Relaxed);
        for waiter in pending.waiters.drain(..) {
            // A caller that gave up waiting is fine: its rows are stored all the same.
            let _ = waiter.send(());
        }
        // The next flush may write its commit records now (nobody waiting is fine).
        let _ = committed.send(());
        Ok(())
    }

    /// One attempt; tables already written by an earlier attempt are skipped (their rows cleared).
    /// `after`: the previous flush's commit signal, awaited (once) before the `agents` rows.
    async fn write(
        &self,
        p: &mut Pending,
        after: &mut Option<oneshot::Receiver<()>>,
    ) -> Result<(), WriteError> {
        // Every lane at once (each `INSERT` is parsed and written by one ClickHouse thread); all
        // of them finish before the first error is returned, so a retry only repeats the lanes
        // that failed.
        let lanes = p.lanes.iter_mut().map(|lane| self.insert_lane(lane));
        futures_util::future::join_all(lanes).await.into_iter().collect::<Result<(), ChError>>()?;
        self.insert(&mut p.events, &p.batches).await?;
        if self.fault(FaultPoint::AfterSamplesBeforeAgents) {
            return Err(WriteError::Crashed);
        }
        if let Some(previous) = after.take() {
            // Dropped without a signal: the previous flush crashed or was torn down.
            previous.await.map_err(|_| WriteError::Crashed)?;
        }
        if !p.agents.is_empty() {
            let mut agents: Vec<AgentRow> = p.agents.values().cloned().collect();
            self.insert(&mut agents, &p.batches).await?;
            p.agents.clear();
        }
        Ok(())
    }

    /// The sample rows of one lane: `gpu_samples`, then `process_samples`.
    async fn insert_lane(&self, lane: &mut Lane) -> Result<(), ChError> {
        self.insert_encoded(GpuSampleRow::TABLE, &mut lane.gpu, &lane.batches).await?;
        self.insert_encoded(ProcessSampleRow::TABLE, &mut lane.process, &lane.batches).await
    }

    /// True when an armed fault point fires: the writer stops at once, as if the process died
    /// there (nothing after the point runs, no waiter is completed, nothing is acknowledged).
    #[cfg(any(test, feature = "fault-injection"))]
    fn fault(&self, point: FaultPoint) -> bool {
        let fired = crate::fault::fires(&self.collector_id, point);
        if fired {
            tracing::error!(?point, collector_id = %self.collector_id, "injected fault: the ClickHouse writer crashes here");
        }
        fired
    }

    #[cfg(not(any(test, feature = "fault-injection")))]
    fn fault(&self, _point: FaultPoint) -> bool {
        false
    }

    /// The client for one table's insert of this flush (with its deduplication token).
    fn insert_client(&self, table: &str, batches: &[(AgentKey, u64)]) -> clickhouse::Client {
        let client = self.ch.client().clone();
        if self.caps.dedup_token {
            client.with_setting("insert_deduplication_token", dedup_token(table, batches))
        } else {
            client
        }
    }

    /// `INSERT … FORMAT RowBinary` of pre-encoded rows, sent in compressed blocks of
    /// [`INSERT_CHUNK_BYTES`] (every row is whole inside the body; blocks may split rows).
    async fn insert_encoded(
        &self,
        table_name: &str,
        rows: &mut EncodedRows,
        batches: &[(AgentKey, u64)],
    ) -> Result<(), ChError> {
        if rows.is_empty() {
            return Ok(());
        }
        let table = self.ch.table(table_name);
        let timeout = self.ch.request_timeout();
        let started = Instant::now();
        let client = self.insert_client(table_name, batches);
        let body = Bytes::from(std::mem::take(&mut rows.bytes));
        let work = async {
            let mut insert = client
                .insert_formatted_with(format!("INSERT INTO {table} FORMAT RowBinary"))
                .with_timeouts(Some(timeout), Some(timeout));
            let mut at = 0;
            while at < body.len() {
                let end = (at + INSERT_CHUNK_BYTES).min(body.len());
                insert.send(body.slice(at..end)).await?;
                at = end;
            }
            insert.end().await
        };
        let result = self.ch.run(&format!("INSERT INTO {table}"), work).await;
        if let Err(e) = result {
            // Keep the rows for the retry (`Bytes` of a `Vec` gives the `Vec` back without a copy
            // once the request has dropped its slices).
            rows.bytes = Vec::from(body);
            return Err(e);
        }
        self.stats.record_insert(started.elapsed(), rows.rows);
        *rows = EncodedRows::default();
        Ok(())
    }

    async fn insert<T>(&self, rows: &mut Vec<T>, batches: &[(AgentKey, u64)]) -> Result<(), ChError>
    where
        T: TableRow + RowOwned + RowWrite + Send + Sync,
    {
        if rows.is_empty() {
            return Ok(());
        }
        let table = self.ch.table(T::TABLE);
        let timeout = self.ch.request_timeout();
        let started = Instant::now();
        let client = self.insert_client(T::TABLE, batches);
        let client = &client;
        let work = async {
            let mut insert =
                client.insert_unescaped::<T>(&table).await?.with_timeouts(Some(timeout), Some(timeout));
            for row in rows.iter() {
                insert.write(row).await?;
            }
            insert.end().await
        };
        self.ch.run(&format!("INSERT INTO {table}"), work).await?;
        self.stats.record_insert(started.elapsed(), rows.len());
        rows.clear();
        rows.shrink_to_fit();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(node: &str) -> AgentKey {
        ("c".to_owned(), node.to_owned(), format!("agent-{node}"), 7)
    }

    #[test]
    fn dedup_tokens_depend_on_table_and_batch_set_only() {
        let ab = [(key("a"), 1), (key("b"), 9)];
        let ba = [(key("b"), 9), (key("a"), 1)];
        assert_eq!(dedup_token("gpu_samples", &ab), dedup_token("gpu_samples", &ba), "order does not matter");
        assert_ne!(dedup_token("gpu_samples", &ab), dedup_token("process_samples", &ab));
        assert_ne!(dedup_token("gpu_samples", &ab), dedup_token("gpu_samples", &ab[..1]));
        assert_ne!(
            dedup_token("gpu_samples", &ab),
            dedup_token("gpu_samples", &[(key("a"), 1), (key("b"), 10)])
        );
        // Field boundaries count: ("ab", "c") differs from ("a", "bc").
        let k1 = [(("ab".to_owned(), "c".to_owned(), String::new(), 0), 1)];
        let k2 = [(("a".to_owned(), "bc".to_owned(), String::new(), 0), 1)];
        assert_ne!(dedup_token("t", &k1), dedup_token("t", &k2));
        assert_eq!(
            dedup_token("gpu_samples", &ab),
            dedup_token("gpu_samples", &[(key("a"), 1), (key("b"), 9)]),
            "stable"
        );
    }
}
