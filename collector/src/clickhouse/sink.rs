//! The batched ClickHouse writer behind "acknowledge only after the rows are stored".
//!
//! [`Sink::store`] converts a batch into rows (stamped with the authenticated identity), puts them
//! on a bounded queue (awaiting space: that is the backpressure towards the QUIC sessions) and
//! resolves once the rows *and* the `agents` row recording `last_seq` are in ClickHouse.
//!
//! One writer task ([`SinkTask`]) gathers rows from many `store` calls until `insert_max_rows` rows
//! or `insert_max_delay` have accumulated, then runs one RowBinary `INSERT` per table
//! (`gpu_samples`, `process_samples`, `oom_events`, then `agents`) and completes every waiting
//! `store`. When an insert fails (ClickHouse down or slow) it retries the same rows with
//! exponential backoff (100 ms → 5 s), keeps the waiters pending and stops taking batches from the
//! queue: rows are never dropped, and nothing is acknowledged that is not stored. Tables whose
//! insert already succeeded are not written again on retry. Each `INSERT` stays below
//! ClickHouse's block size and is therefore atomic; only an insert whose response is lost after
//! the server committed it (a timeout or crash at that instant) can be written twice — the usual
//! at-least-once window, harmless for `oom_events`/`agents` (ReplacingMergeTree).
//!
//! When every [`Sink`] handle is dropped the writer flushes what is pending and exits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clickhouse::{RowOwned, RowWrite};
use oomlens_schema::Batch;
use oomlens_schema::rows::{AgentRow, GpuSampleRow, OomEventRow, ProcessSampleRow, TableRow};
use tokio::sync::{mpsc, oneshot};

use super::client::{Ch, ChError};
use super::config::ChConfig;
use super::convert::{BatchRows, agent_row, batch_rows};
use crate::identity::AgentIdentity;

/// First retry delay after a failed insert.
pub const BACKOFF_START: Duration = Duration::from_millis(100);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Current Unix time in epoch milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

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
    /// Sum of successful `INSERT` latencies, µs.
    pub insert_latency_us_sum: AtomicU64,
    /// Number of successful `INSERT`s.
    pub insert_latency_count: AtomicU64,
    /// Slowest successful `INSERT`, µs.
    pub insert_latency_us_max: AtomicU64,
    /// Batches waiting in the queue for the writer.
    pub queue_depth: AtomicU64,
    /// Batches taken by the writer and not yet stored.
    pub pending_batches: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl SinkStats {
    /// The most recent insert error (kept after recovery, for diagnostics).
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set_last_error(&self, e: &ChError) {
        *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
    }

    /// Mean latency of successful inserts.
    pub fn mean_insert_latency(&self) -> Option<Duration> {
        let n = self.insert_latency_count.load(Ordering::Relaxed);
        (n > 0).then(|| Duration::from_micros(self.insert_latency_us_sum.load(Ordering::Relaxed) / n))
    }

    fn record_insert(&self, took: Duration, rows: usize) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.insert_latency_us_sum.fetch_add(us, Ordering::Relaxed);
        self.insert_latency_count.fetch_add(1, Ordering::Relaxed);
        self.insert_latency_us_max.fetch_max(us, Ordering::Relaxed);
        self.rows_written.fetch_add(rows as u64, Ordering::Relaxed);
    }
}

/// One `store` call on its way to the writer.
struct Job {
    rows: BatchRows,
    agent: AgentRow,
    done: oneshot::Sender<()>,
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
        let writer = Writer {
            ch: ch.clone(),
            rx,
            max_rows: cfg.insert_max_rows.max(1),
            max_delay: cfg.insert_max_delay(),
            stats: Arc::clone(&stats),
        };
        let handle = tokio::spawn(writer.run());
        (Sink { tx, ch, collector_id: collector_id.into(), stats }, SinkTask { handle })
    }

    /// Resolves `Ok` only after the batch's rows (all tables) and the `agents` row recording
    /// `last_seq = batch.seq` are in ClickHouse. Waits while the queue is full (backpressure) and
    /// while ClickHouse is unavailable (the writer retries); fails only if the writer stopped.
    pub async fn store(&self, identity: &AgentIdentity, batch: Batch) -> Result<(), SinkError> {
        let received = now_ms();
        let rows = batch_rows(identity, &batch, received);
        let agent = agent_row(identity, &self.collector_id, batch.seq, received);
        drop(batch);
        let stats = &self.stats;
        stats.batches_in.fetch_add(1, Ordering::Relaxed);
        stats.gpu_rows_in.fetch_add(rows.gpu_samples.len() as u64, Ordering::Relaxed);
        stats.process_rows_in.fetch_add(rows.process_samples.len() as u64, Ordering::Relaxed);
        stats.event_rows_in.fetch_add(rows.events.len() as u64, Ordering::Relaxed);
        let (done, stored) = oneshot::channel();
        stats.queue_depth.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(Job { rows, agent, done }).await.is_err() {
            stats.queue_depth.fetch_sub(1, Ordering::Relaxed);
            return Err(SinkError::Closed);
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

/// Rows gathered for one flush.
#[derive(Default)]
struct Pending {
    gpu: Vec<GpuSampleRow>,
    process: Vec<ProcessSampleRow>,
    events: Vec<OomEventRow>,
    agents: HashMap<AgentKey, AgentRow>,
    waiters: Vec<oneshot::Sender<()>>,
    rows: usize,
}

impl Pending {
    fn push(&mut self, job: Job) {
        let Job { mut rows, agent, done } = job;
        self.rows += rows.len() + 1;
        self.gpu.append(&mut rows.gpu_samples);
        self.process.append(&mut rows.process_samples);
        self.events.append(&mut rows.events);
        let key = (agent.cluster.clone(), agent.node.clone(), agent.agent_id.clone(), agent.boot_id);
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

struct Writer {
    ch: Ch,
    rx: mpsc::Receiver<Job>,
    max_rows: usize,
    max_delay: Duration,
    stats: Arc<SinkStats>,
}

impl Writer {
    fn take(&self, pending: &mut Pending, job: Job) {
        self.stats.queue_depth.fetch_sub(1, Ordering::Relaxed);
        self.stats.pending_batches.fetch_add(1, Ordering::Relaxed);
        pending.push(job);
    }

    async fn run(mut self) {
        let mut closed = false;
        while !closed {
            let Some(first) = self.rx.recv().await else { break };
            let mut pending = Pending::default();
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
            self.flush(pending).await;
        }
        tracing::debug!("ClickHouse writer: all sink handles dropped, exiting");
    }

    /// Writes until it succeeds, then completes the waiters.
    async fn flush(&self, mut pending: Pending) {
        let mut backoff = BACKOFF_START;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            match self.write(&mut pending).await {
                Ok(()) => break,
                Err(e) => {
                    self.stats.insert_errors.fetch_add(1, Ordering::Relaxed);
                    self.stats.set_last_error(&e);
                    tracing::warn!(
                        error = %e,
                        attempt,
                        retry_in_ms = backoff.as_millis() as u64,
                        batches = pending.waiters.len(),
                        "ClickHouse insert failed; retrying the same rows"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
        if attempt > 1 {
            tracing::info!(attempts = attempt, "ClickHouse insert succeeded after retries");
        }
        let n = pending.waiters.len() as u64;
        self.stats.insert_batches.fetch_add(1, Ordering::Relaxed);
        self.stats.batches_stored.fetch_add(n, Ordering::Relaxed);
        self.stats.pending_batches.fetch_sub(n, Ordering::Relaxed);
        for waiter in pending.waiters.drain(..) {
            // A caller that gave up waiting is fine: its rows are stored all the same.
            let _ = waiter.send(());
        }
    }

    /// One attempt; tables already written by an earlier attempt are skipped (their rows cleared).
    async fn write(&self, p: &mut Pending) -> Result<(), ChError> {
        self.insert(&mut p.gpu).await?;
        self.insert(&mut p.process).await?;
        self.insert(&mut p.events).await?;
        if !p.agents.is_empty() {
            let mut agents: Vec<AgentRow> = p.agents.values().cloned().collect();
            self.insert(&mut agents).await?;
            p.agents.clear();
        }
        Ok(())
    }

    async fn insert<T>(&self, rows: &mut Vec<T>) -> Result<(), ChError>
    where
        T: TableRow + RowOwned + RowWrite + Send + Sync,
    {
        if rows.is_empty() {
            return Ok(());
        }
        let table = self.ch.table(T::TABLE);
        let timeout = self.ch.request_timeout();
        let started = Instant::now();
        let client = self.ch.client();
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
