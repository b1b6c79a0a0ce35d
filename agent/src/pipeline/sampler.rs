//! The sampler: runs a [`Source`] on its own thread at a fixed interval (the flight recorder's fast
//! interval), and the batcher that passes its readings through the flight recorder into sequenced
//! [`Batch`]es for the uplink (split so that no batch exceeds the frame limits).
//!
//! The sampler owns the clock. With [`Clock::Real`] each reading is stamped "now"; with
//! [`Clock::Simulated`] readings are stamped `start + k × interval` and paced `speed` times faster
//! than real time, so the simulator can play minutes of a fleet in seconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use oomlens_schema::telemetry::Heartbeat;
use oomlens_schema::{Batch, OomEvent, limits};
use tokio::sync::mpsc;
use tracing::{error, warn};

use crate::metrics::AgentMetrics;
use crate::pipeline::recorder::{FlightRecorder, RecorderStats};
use crate::source::{Reading, Source};
use crate::uplink::{UplinkError, UplinkHandle};

/// Where timestamps come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clock {
    /// Wall-clock time.
    Real,
    /// Simulated time starting at `start_ms`, running `speed` times faster than real time.
    Simulated {
        /// First timestamp, Unix epoch ms.
        start_ms: i64,
        /// Real-time multiplier (> 0).
        speed: f64,
    },
}

/// Sampler settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerConfig {
    /// Time between readings (in source time).
    pub interval: Duration,
    /// The clock.
    pub clock: Clock,
    /// Stop after this much source time (None: run until stopped).
    pub duration: Option<Duration>,
}

pub use oomlens_schema::text::now_ms;

/// Starts the sampler thread. It stops when `stop` is set, when `duration` is reached, or when the
/// receiving side is gone; dropping `tx` then tells the batcher that no more readings come.
pub fn spawn_sampler(
    mut source: Box<dyn Source>,
    cfg: SamplerConfig,
    tx: mpsc::Sender<Reading>,
    stop: Arc<AtomicBool>,
    heartbeat: Heartbeat,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("oomlens-sampler".to_owned()).spawn(move || {
        let interval_ms = cfg.interval.as_millis().max(1) as i64;
        let real_step = match cfg.clock {
            Clock::Real => cfg.interval,
            Clock::Simulated { speed, .. } => cfg.interval.div_f64(speed.max(1e-3)),
        };
        let limit_ticks = cfg.duration.map(|d| (d.as_millis() as i64 / interval_ms).max(1));
        let started = Instant::now();
        let mut tick: i64 = 0;
        while !stop.load(Ordering::Relaxed) {
            if limit_ticks.is_some_and(|n| tick >= n) {
                break;
            }
            let ts = match cfg.clock {
                Clock::Real => now_ms(),
                Clock::Simulated { start_ms, .. } => start_ms + tick * interval_ms,
            };
            let mut reading = source.sample(ts);
            reading.ts_ms = Some(ts);
            if tx.blocking_send(reading).is_err() {
                break;
            }
            // The reading was taken and the batcher took it: both loops are alive (`/healthz`).
            heartbeat.beat();
            tick += 1;
            let deadline = started + real_step.mul_f64(tick as f64);
            let now = Instant::now();
            if deadline > now {
                std::thread::sleep(deadline - now);
            } else if now - deadline > real_step * 10 && matches!(cfg.clock, Clock::Real) {
                warn!(behind_ms = (now - deadline).as_millis() as u64, "sampler is falling behind");
            }
        }
    })
}

/// Batcher settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatcherConfig {
    /// Send a batch at least this often (real time) while data arrives.
    pub flush_every: Duration,
    /// Send a batch as soon as it holds this many rows.
    pub max_rows: usize,
    /// Sequence number of the first batch.
    pub first_seq: u64,
}

/// Receives readings until every sender is gone, pushes sequenced batches to the uplink. The
/// flight recorder decides which samples go into the batches and adds the held window before
/// every event (see `recorder.rs`), in chunks of at most `max_rows` rows, each pushed (encoded
/// and spooled) before the next is taken. After every push the event stage learns which events
/// are spooled (their journal records are done).
pub async fn run_batcher<S: BatchSink>(
    mut rx: mpsc::Receiver<Reading>,
    uplink: S,
    cfg: BatcherConfig,
    metrics: Arc<AgentMetrics>,
    mut recorder: FlightRecorder,
    mut detect: crate::pipeline::event_stage::EventStage,
) {
    let mut out = Output {
        uplink,
        seq: cfg.first_seq,
        batch: Batch::default(),
        max_rows: cfg.max_rows.clamp(1, MAX_ROWS_PER_BATCH),
    };
    let mut ticker = tokio::time::interval(cfg.flush_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_stats = recorder.stats();
    loop {
        let flush = tokio::select! {
            reading = rx.recv() => match reading {
                Some(mut r) => {
                    record(&metrics, &r);
                    let events = detect.on_reading(&mut r); // vanish detection + merging
                    recorder.record(r.gpu_samples, r.process_samples, &mut out.batch);
                    for event in events {
                        out.admit(&mut recorder, event, &metrics, &mut detect);
                    }
                    last_stats = record_recorder(&metrics, &recorder, last_stats);
                    out.batch.row_count() >= out.max_rows
                }
                None => break,
            },
            _ = ticker.tick() => {
                for event in detect.poll() {
                    out.admit(&mut recorder, event, &metrics, &mut detect);
                }
                detect.sync_journal();
                !out.batch.is_empty()
            }
        };
        if flush {
            out.push(&mut detect);
        }
    }
    for event in detect.drain() {
        out.admit(&mut recorder, event, &metrics, &mut detect);
    }
    if !out.batch.is_empty() {
        out.push(&mut detect);
    }
    detect.sync_journal();
}

/// The batch being built and where it goes.
struct Output<S> {
    uplink: S,
    seq: u64,
    batch: Batch,
    max_rows: usize,
}

impl<S: BatchSink> Output<S> {
    /// Pushes the batch being built (split within the limits) and tells `detect` which of its
    /// events the spool took.
    fn push(&mut self, detect: &mut crate::pipeline::event_stage::EventStage) {
        let batch = std::mem::take(&mut self.batch);
        for mut part in split_batch(batch, self.max_rows) {
            part.seq = self.seq;
            let events = part.events.len();
            let ok = match self.uplink.push_batch(part) {
                Ok(()) => true,
                Err(e) => {
                    error!(seq = self.seq, error = %e, "cannot queue a batch");
                    false
                }
            };
            detect.spooled(events, ok);
            self.seq += 1;
        }
    }

    /// Adds `event` and the held window before it, pushing the batch whenever it is full so that
    /// at most one batch of rows is materialised at a time.
    fn admit(
        &mut self,
        recorder: &mut FlightRecorder,
        event: OomEvent,
        metrics: &AgentMetrics,
        detect: &mut crate::pipeline::event_stage::EventStage,
    ) {
        let mut plan = recorder.plan_flush(&event);
        self.batch.events.push(event);
        let mut total = crate::pipeline::recorder::Flushed::default();
        let cap = self.max_rows.min(FLUSH_CHUNK_ROWS);
        while !plan.is_done() {
            let room = cap.saturating_sub(self.batch.row_count());
            if room == 0 {
                self.push(detect);
                continue;
            }
            let f = recorder.flush_chunk(&mut plan, room, &mut self.batch);
            total.gpu_samples += f.gpu_samples;
            total.process_samples += f.process_samples;
        }
        count_flush(metrics, total);
    }
}

/// Where the batcher hands finished batches: the uplink (a test collects them instead).
pub trait BatchSink {
    /// Queues one batch for delivery.
    fn push_batch(&self, batch: Batch) -> Result<(), UplinkError>;
}

impl BatchSink for UplinkHandle {
    fn push_batch(&self, batch: Batch) -> Result<(), UplinkError> {
        self.push(batch)
    }
}

fn count_flush(metrics: &AgentMetrics, f: crate::pipeline::recorder::Flushed) {
    if f.gpu_samples + f.process_samples > 0 {
        metrics.recorder_flushes.inc();
        metrics
            .recorder_flushed_samples
            .get_or_create(&vec![("table", "gpu_samples".into())])
            .inc_by(f.gpu_samples as u64);
        metrics
            .recorder_flushed_samples
            .get_or_create(&vec![("table", "process_samples".into())])
            .inc_by(f.process_samples as u64);
    }
}

fn record_recorder(m: &AgentMetrics, recorder: &FlightRecorder, last: RecorderStats) -> RecorderStats {
    let now = recorder.stats();
    m.recorder_held_samples
        .get_or_create(&vec![("table", "gpu_samples".into())])
        .set(now.held_gpu_samples as i64);
    m.recorder_held_samples
        .get_or_create(&vec![("table", "process_samples".into())])
        .set(now.held_process_samples as i64);
    m.recorder_hot_samples.inc_by(now.hot_gpu_samples - last.hot_gpu_samples);
    m.recorder_evicted_samples.inc_by(now.evicted_samples - last.evicted_samples);
    m.recorder_clock_resets.inc_by(now.clock_resets - last.clock_resets);
    now
}

/// Most rows of a batch that carries a flushed window: the flush materialises its held samples
/// as owned wire rows (a process sample with its name and labels is a few hundred bytes) one
/// such batch at a time, so this bounds the agent's extra memory during a flush (≈ 1–2 MiB with
/// the encoded frame), whatever `batch_max_rows` says.
pub const FLUSH_CHUNK_ROWS: usize = 4096;

/// Most rows per batch whatever `batch_max_rows` says: a flushed window (120 s × 10 Hz × every
/// GPU and process) must still fit the 8 MiB frame limit, at up to 512 encoded bytes per row.
pub const MAX_ROWS_PER_BATCH: usize = 16 * 1024;

/// Splits a batch into parts within the row limits: events first (in order), then GPU samples,
/// then process samples. The parts' `seq` is left for the caller.
pub fn split_batch(batch: Batch, max_rows: usize) -> Vec<Batch> {
    let max_rows = max_rows.clamp(1, MAX_ROWS_PER_BATCH);
    if batch.row_count() <= max_rows && batch.events.len() <= limits::MAX_EVENTS {
        return vec![batch];
    }
    let mut parts = vec![Batch::default()];
    let room = |b: &Batch| max_rows - b.row_count();
    let mut events = batch.events.into_iter().peekable();
    let mut gpus = batch.gpu_samples.into_iter().peekable();
    let mut procs = batch.process_samples.into_iter().peekable();
    while events.peek().is_some() || gpus.peek().is_some() || procs.peek().is_some() {
        let last = parts.len() - 1;
        if room(&parts[last]) == 0 {
            parts.push(Batch::default());
            continue;
        }
        let part = &mut parts[last];
        if events.peek().is_some() {
            let n = room(part).min(limits::MAX_EVENTS - part.events.len());
            if n == 0 {
                parts.push(Batch::default());
                continue;
            }
            part.events.extend(events.by_ref().take(n));
        } else if gpus.peek().is_some() {
            let n = room(part);
            part.gpu_samples.extend(gpus.by_ref().take(n));
        } else {
            let n = room(part);
            part.process_samples.extend(procs.by_ref().take(n));
        }
    }
    parts
}

fn record(m: &AgentMetrics, r: &Reading) {
    m.gpu_samples.inc_by(r.gpu_samples.len() as u64);
    m.process_samples.inc_by(r.process_samples.len() as u64);
    m.missing_fields.inc_by(u64::from(r.missing_fields));
    m.timed_out_calls.inc_by(u64::from(r.timed_out_calls));
    for e in &r.events {
        m.events
            .get_or_create(&vec![
                ("kind", e.kind.as_str().to_owned()),
                ("source", e.source.as_str().to_owned()),
            ])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    use oomlens_schema::{GpuSample, OomKind, ProcessSample};
    use prometheus_client::registry::Registry;

    use super::*;
    use crate::pipeline::recorder::RecorderSettings;
    use crate::source::sim::{SimConfig, Simulator};

    #[derive(Default)]
    struct Collect(Mutex<Vec<Batch>>);

    impl BatchSink for Arc<Collect> {
        fn push_batch(&self, batch: Batch) -> Result<(), UplinkError> {
            self.0.lock().unwrap().push(batch);
            Ok(())
        }
    }

    #[test]
    fn split_batch_keeps_every_row_in_order_within_the_limits() {
        let batch = Batch {
            seq: 9,
            events: (0..limits::MAX_EVENTS as u64 + 3)
                .map(|i| OomEvent { event_id: i, ..OomEvent::default() })
                .collect(),
            gpu_samples: (0..30_000).map(|i| GpuSample { ts_ms: i, ..GpuSample::default() }).collect(),
            process_samples: (0..5).map(|i| ProcessSample { pid: i, ..ProcessSample::default() }).collect(),
        };
        let parts = split_batch(batch.clone(), 100_000);
        assert!(
            parts.iter().all(|p| p.row_count() <= MAX_ROWS_PER_BATCH && p.events.len() <= limits::MAX_EVENTS)
        );
        assert_eq!(parts.len(), 3);
        let events: Vec<_> = parts.iter().flat_map(|p| p.events.clone()).collect();
        let gpus: Vec<_> = parts.iter().flat_map(|p| p.gpu_samples.clone()).collect();
        let procs: Vec<_> = parts.iter().flat_map(|p| p.process_samples.clone()).collect();
        assert_eq!((events, gpus, procs), (batch.events, batch.gpu_samples, batch.process_samples));
        assert_eq!(split_batch(Batch { seq: 1, ..Batch::default() }, 10).len(), 1);
        let small =
            split_batch(Batch { gpu_samples: vec![GpuSample::default(); 25], ..Batch::default() }, 10);
        assert_eq!(small.iter().map(Batch::row_count).collect::<Vec<_>>(), vec![10, 10, 5]);
    }

    /// The simulator through the sampler thread and the batcher: the fast curve before every OOM
    /// is sent, nothing twice, and cold GPUs otherwise stream once per second.
    #[tokio::test]
    async fn the_fast_window_before_every_simulator_oom_is_sent() {
        const START: i64 = 1_767_225_600_000;
        let settings = RecorderSettings { window_ms: 30_000, ..RecorderSettings::default() };
        let sim = Simulator::new("rec-node", SimConfig { seed: 5, gpus: 8, ..SimConfig::default() }, START)
            .unwrap();
        let (tx, rx) = mpsc::channel(64);
        // Created long ago as far as `/healthz` is concerned: only the sampler's beats revive it.
        let heartbeat = Heartbeat::watching(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        assert!(!heartbeat.alive());
        let sampler = spawn_sampler(
            Box::new(sim),
            SamplerConfig {
                interval: Duration::from_millis(settings.sample_interval_ms() as u64),
                clock: Clock::Simulated { start_ms: START, speed: 50_000.0 },
                duration: Some(Duration::from_secs(600)),
            },
            tx,
            Arc::new(AtomicBool::new(false)),
            heartbeat.clone(),
        )
        .unwrap();
        let sink = Arc::new(Collect::default());
        let metrics = AgentMetrics::register(&mut Registry::default());
        let cfg = BatcherConfig { flush_every: Duration::from_millis(50), max_rows: 2_000, first_seq: 1 };
        let recorder = FlightRecorder::new(settings).unwrap();
        let detect = crate::pipeline::event_stage::EventStage::new(95.0, 0, 1024, None);
        run_batcher(rx, sink.clone(), cfg, metrics.clone(), recorder, detect).await;
        sampler.join().unwrap();
        assert!(
            heartbeat.since_last_beat().is_some_and(|age| age < Duration::from_secs(5)),
            "the sampler beat"
        );

        let batches = sink.0.lock().unwrap();
        let seqs: Vec<u64> = batches.iter().map(|b| b.seq).collect();
        assert_eq!(seqs, (1..=batches.len() as u64).collect::<Vec<_>>(), "consecutive sequence numbers");
        assert!(batches.iter().all(|b| b.row_count() <= 2_000));
        let mut sent = BTreeSet::new();
        for s in batches.iter().flat_map(|b| &b.gpu_samples) {
            assert!(sent.insert((s.gpu_index, s.ts_ms)), "GPU {} at {} sent twice", s.gpu_index, s.ts_ms);
        }
        let mut procs = BTreeSet::new();
        for p in batches.iter().flat_map(|b| &b.process_samples) {
            assert!(procs.insert((p.gpu_index, p.ts_ms, p.pid)), "process sample sent twice");
            assert!(sent.contains(&(p.gpu_index, p.ts_ms)), "a process sample travels with its GPU sample");
        }
        let events: Vec<&OomEvent> = batches.iter().flat_map(|b| &b.events).collect();
        assert!(events.iter().any(|e| e.kind == OomKind::CudaOom), "the simulator produced CUDA OOMs");
        for e in &events {
            let gpus: Vec<u32> = match e.gpu_index {
                Some(g) => vec![g],
                None => (0..8).collect(),
            };
            for g in gpus {
                let mut t = (e.ts_ms - 30_000).max(START);
                while t <= e.ts_ms {
                    assert!(
                        sent.contains(&(g, t)),
                        "{:?} at {}: GPU {g} sample at {t} missing",
                        e.kind,
                        e.ts_ms
                    );
                    t += 100;
                }
            }
        }
        // Far from any OOM, a cold GPU sends one sample per second.
        let total = sent.len() as u64;
        let taken = metrics.gpu_samples.get();
        assert_eq!(taken, 8 * 6_000);
        assert!(total >= 8 * 600 && total < taken / 2, "sent {total} of {taken}");
        assert!(metrics.recorder_flushes.get() > 0);
    }
}
