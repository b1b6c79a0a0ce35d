//! The sampler: runs a [`Source`] on its own thread at a fixed interval, and the batcher that turns
//! its readings into sequenced [`Batch`]es for the uplink.
//!
//! The sampler owns the clock. With [`Clock::Real`] each reading is stamped "now"; with
//! [`Clock::Simulated`] readings are stamped `start + k × interval` and paced `speed` times faster
//! than real time, so the simulator can play minutes of a fleet in seconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use oomlens_schema::Batch;
use tokio::sync::mpsc;
use tracing::{error, warn};

use crate::metrics::AgentMetrics;
use crate::source::{Reading, Source};
use crate::uplink::UplinkHandle;

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

/// Current Unix epoch milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Starts the sampler thread. It stops when `stop` is set, when `duration` is reached, or when the
/// receiving side is gone; dropping `tx` then tells the batcher that no more readings come.
pub fn spawn_sampler(
    mut source: Box<dyn Source>,
    cfg: SamplerConfig,
    tx: mpsc::Sender<Reading>,
    stop: Arc<AtomicBool>,
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
            let reading = source.sample(ts);
            if tx.blocking_send(reading).is_err() {
                break;
            }
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

/// Receives readings until the sampler is done, pushes sequenced batches to the uplink.
pub async fn run_batcher(
    mut rx: mpsc::Receiver<Reading>,
    uplink: UplinkHandle,
    cfg: BatcherConfig,
    metrics: Arc<AgentMetrics>,
) {
    let mut seq = cfg.first_seq;
    let mut batch = Batch { seq, ..Batch::default() };
    let mut ticker = tokio::time::interval(cfg.flush_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let flush = tokio::select! {
            reading = rx.recv() => match reading {
                Some(r) => {
                    record(&metrics, &r);
                    batch.gpu_samples.extend(r.gpu_samples);
                    batch.process_samples.extend(r.process_samples);
                    batch.events.extend(r.events);
                    batch.row_count() >= cfg.max_rows
                }
                None => break,
            },
            _ = ticker.tick() => !batch.is_empty(),
        };
        if flush {
            let full = std::mem::replace(&mut batch, Batch { seq: seq + 1, ..Batch::default() });
            if let Err(e) = uplink.push(full) {
                error!(error = %e, "cannot queue a batch");
            }
            seq += 1;
        }
    }
    if !batch.is_empty()
        && let Err(e) = uplink.push(batch)
    {
        error!(error = %e, "cannot queue the last batch");
    }
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
