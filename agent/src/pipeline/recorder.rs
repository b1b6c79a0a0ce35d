//! The flight recorder: decides which samples are sent, and keeps the
//! rest of the recent past so that the curve before every OOM reaches ClickHouse at full rate.
//!
//! The sampler reads the source at the *fast* interval. For every GPU the recorder then
//!
//! * **sends** a sample (the GPU's and its processes') when it is the first one of a new *normal*
//!   interval (buckets of `normal_interval_ms` on the source clock, so one sample per GPU per
//!   second by default, aligned to whole seconds), or when the GPU is **hot** (`memory used ≥
//!   hot_threshold_pct` of its total): a GPU close to its capacity streams at the fast rate;
//! * **holds** every other sample in a per-GPU ring of the last `window_ms` of source time (plus
//!   `event_delay_ms`: the event merger holds an event back up to its grace window before it
//!   reaches the recorder, and the window before it must still be there);
//! * **flushes**, when an OOM event passes the batcher, the held samples before it from
//!   `event.ts − window` to `event.ts + fast_interval` (the upper bound takes in the reading that
//!   reported the failure, the state right after it): the GPU and process samples of the event's
//!   GPU; for an event naming no GPU (a host OOM kill) the GPU samples of every GPU and the
//!   process samples of the GPUs where the victim pid had processes (of every GPU when the event
//!   names no pid either).
//!
//! A flush is planned ([`FlightRecorder::plan_flush`]) and then taken in bounded chunks
//! ([`FlightRecorder::flush_chunk`]): the batcher encodes and spools each chunk before it asks for
//! the next, so a flushed window (up to 120 s × 10 Hz × every process of a GPU) is never
//! materialised as wire rows all at once — only one chunk of owned rows exists at a time, which
//! is what keeps the agent's peak memory near its steady state.
//!
//! A held sample leaves the ring exactly once — flushed or evicted — and a sent sample is never
//! held, so no sample is sent twice. Memory is bounded: a ring keeps at most
//! `window / fast_interval` (+25 %) GPU samples and `MAX_HELD_PROCESSES_PER_SAMPLE` times as many
//! process samples, at most [`limits::MAX_GPUS`] rings exist (further GPU indexes pass through
//! unrecorded), and held process samples share their name and labels (one `Arc` per process)
//! instead of copying them every 100 ms.

use std::collections::VecDeque;
use std::sync::Arc;

use oomlens_schema::{Batch, GpuSample, Label, OomEvent, ProcessSample, limits};

/// Longest window accepted (one hour).
pub const MAX_WINDOW_MS: i64 = 3_600_000;
/// Most GPU samples one ring may hold (`window / fast_interval`).
pub const MAX_SAMPLES_PER_GPU: i64 = 36_000;
/// Shortest fast interval accepted.
pub const MIN_FAST_INTERVAL_MS: i64 = 10;
/// Average processes per held GPU sample the process ring is sized for (more are evicted oldest first).
pub const MAX_HELD_PROCESSES_PER_SAMPLE: usize = 64;

/// Recorder settings (from `[recorder]` and `source.interval_ms`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecorderSettings {
    /// Off: the source is read at the normal interval and every sample is sent.
    pub enabled: bool,
    /// Source time kept per GPU, ms.
    pub window_ms: i64,
    /// Interval the source is read at, ms.
    pub fast_interval_ms: i64,
    /// Interval of the normal stream, ms.
    pub normal_interval_ms: i64,
    /// A GPU at or above this share of its memory used (percent) streams at the fast rate.
    pub hot_threshold_pct: f64,
    /// Source time an event may be held back before it reaches the recorder (the event merger's
    /// grace window, `detect.merge_grace_ms`), ms: the rings keep `window_ms + event_delay_ms`,
    /// so an event released that late still finds the whole window before it.
    pub event_delay_ms: i64,
}

impl Default for RecorderSettings {
    fn default() -> Self {
        RecorderSettings {
            enabled: true,
            window_ms: 120_000,
            fast_interval_ms: 100,
            normal_interval_ms: 1000,
            hot_threshold_pct: 90.0,
            event_delay_ms: 0,
        }
    }
}

/// Settings the recorder cannot run with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecorderError {
    /// A value is out of range; the message names the key.
    #[error("invalid flight recorder setting: {0}")]
    Invalid(String),
}

impl RecorderSettings {
    /// Checks the ranges (the messages name the configuration keys).
    pub fn validate(&self) -> Result<(), RecorderError> {
        let bad = |m: String| Err(RecorderError::Invalid(m));
        if self.normal_interval_ms <= 0 {
            return bad(format!("source.interval_ms must be > 0, got {}", self.normal_interval_ms));
        }
        if !self.enabled {
            return Ok(());
        }
        if !(MIN_FAST_INTERVAL_MS..self.normal_interval_ms).contains(&self.fast_interval_ms) {
            return bad(format!(
                "recorder.fast_interval_ms must be at least {MIN_FAST_INTERVAL_MS} and below source.interval_ms \
                 ({}), got {} (set recorder.enabled = false to sample at the normal interval only)",
                self.normal_interval_ms, self.fast_interval_ms
            ));
        }
        if !(1..=MAX_WINDOW_MS).contains(&self.window_ms) {
            return bad(format!(
                "recorder.window_s must be between 1 and {}, got {} ms",
                MAX_WINDOW_MS / 1000,
                self.window_ms
            ));
        }
        if !(0..=MAX_WINDOW_MS).contains(&self.event_delay_ms) {
            return bad(format!(
                "detect.merge_grace_ms must be at most {MAX_WINDOW_MS} with the flight recorder on, got {}",
                self.event_delay_ms
            ));
        }
        if self.retention_ms() / self.fast_interval_ms > MAX_SAMPLES_PER_GPU {
            return bad(format!(
                "(recorder.window_s + detect.merge_grace_ms) / recorder.fast_interval_ms must be at most \
                 {MAX_SAMPLES_PER_GPU} samples per GPU, got {}",
                self.retention_ms() / self.fast_interval_ms
            ));
        }
        if !(self.hot_threshold_pct.is_finite()
            && self.hot_threshold_pct > 0.0
            && self.hot_threshold_pct <= 100.0)
        {
            return bad(format!(
                "recorder.hot_threshold_pct must be in (0, 100], got {}",
                self.hot_threshold_pct
            ));
        }
        Ok(())
    }

    /// The interval the sampler reads the source at.
    pub fn sample_interval_ms(&self) -> i64 {
        if self.enabled { self.fast_interval_ms } else { self.normal_interval_ms }
    }

    /// Source time each ring keeps: the window plus how late an event may arrive.
    pub fn retention_ms(&self) -> i64 {
        self.window_ms.saturating_add(self.event_delay_ms.max(0))
    }

    /// Most GPU samples held per GPU.
    pub fn max_held_gpu_samples(&self) -> usize {
        let n = (self.retention_ms() / self.fast_interval_ms.max(1)).clamp(1, MAX_SAMPLES_PER_GPU) as usize;
        n + n / 4 + 1
    }
}

/// Rows moved into a batch by one flush.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flushed {
    /// GPU samples.
    pub gpu_samples: usize,
    /// Process samples.
    pub process_samples: usize,
}

impl Flushed {
    /// GPU and process samples.
    pub fn rows(&self) -> usize {
        self.gpu_samples + self.process_samples
    }

    fn add(&mut self, other: Flushed) {
        self.gpu_samples += other.gpu_samples;
        self.process_samples += other.process_samples;
    }
}

/// What one event flushes, taken chunk by chunk with [`FlightRecorder::flush_chunk`]. Valid until
/// the next [`FlightRecorder::record`] (which may evict what it points at: then less comes out).
#[derive(Debug, Clone, Default)]
pub struct FlushPlan {
    spans: VecDeque<Span>,
}

impl FlushPlan {
    /// True when nothing is left to flush.
    pub fn is_done(&self) -> bool {
        self.spans.is_empty()
    }
}

/// Held samples of one ring in `[lo, hi]`: its GPU samples first, then (when `procs`) its
/// process samples.
#[derive(Debug, Clone, Copy)]
struct Span {
    ring: usize,
    lo: i64,
    hi: i64,
    gpus_done: bool,
    procs: bool,
}

/// What the recorder holds and has done (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// GPU samples held now.
    pub held_gpu_samples: usize,
    /// Process samples held now.
    pub held_process_samples: usize,
    /// GPU samples sent because their GPU was hot (beyond the normal stream), in total.
    pub hot_gpu_samples: u64,
    /// Held samples that aged out of the window or the caps unsent (GPU + process), in total.
    pub evicted_samples: u64,
    /// Held samples forgotten because the source clock went backwards (GPU + process), in total.
    pub clock_resets: u64,
}

/// Name and labels of a process, shared by its held samples.
#[derive(Debug, PartialEq)]
struct ProcIdent {
    pid: u32,
    name: String,
    labels: Vec<Label>,
}

/// A held process sample (24 bytes plus its shared identity).
#[derive(Debug)]
struct HeldProcess {
    ts_ms: i64,
    /// `u64::MAX` = unknown (no process holds 16 EiB).
    used: u64,
    ident: Arc<ProcIdent>,
}

const USED_UNKNOWN: u64 = u64::MAX;

#[derive(Debug)]
struct Ring {
    gpu_index: u32,
    /// Normal-interval bucket of the last sample sent.
    last_sent_bucket: Option<i64>,
    /// Newest source timestamp seen.
    newest_ts: i64,
    gpus: VecDeque<GpuSample>,
    procs: VecDeque<HeldProcess>,
    /// Identities of recently held processes, with the cycle they were last used in.
    idents: Vec<(Arc<ProcIdent>, u64)>,
    /// Cycle in which this ring last held a process sample.
    held_cycle: u64,
}

impl Ring {
    fn new(gpu_index: u32) -> Self {
        Ring {
            gpu_index,
            last_sent_bucket: None,
            newest_ts: i64::MIN,
            gpus: VecDeque::new(),
            procs: VecDeque::new(),
            idents: Vec::new(),
            held_cycle: 0,
        }
    }

    /// Forgets the held window when the clock went backwards (it could no longer be kept in
    /// order); returns how many samples were forgotten.
    fn observe(&mut self, ts_ms: i64) -> usize {
        if ts_ms >= self.newest_ts {
            self.newest_ts = ts_ms;
            return 0;
        }
        let n = self.gpus.len() + self.procs.len();
        self.gpus.clear();
        self.procs.clear();
        self.newest_ts = ts_ms;
        self.last_sent_bucket = None;
        n
    }

    /// Whether to send the sample of `ts_ms`, and whether only because the GPU is hot.
    fn decide(&mut self, ts_ms: i64, hot: bool, normal_ms: i64) -> (bool, bool) {
        let bucket = ts_ms.div_euclid(normal_ms);
        let normal = self.last_sent_bucket != Some(bucket);
        let send = hot || normal;
        if send {
            self.last_sent_bucket = Some(bucket);
        }
        (send, send && !normal)
    }

    fn hold_gpu(&mut self, s: GpuSample, max_gpus: usize) {
        grow(&mut self.gpus, max_gpus);
        self.gpus.push_back(s);
    }

    fn hold_process(&mut self, p: ProcessSample, cycle: u64, max_procs: usize) {
        let found =
            self.idents.iter_mut().find(|(i, _)| i.pid == p.pid && i.name == p.name && i.labels == p.labels);
        let ident = match found {
            Some((ident, seen)) => {
                *seen = cycle;
                ident.clone()
            }
            None => {
                let ident = Arc::new(ProcIdent { pid: p.pid, name: p.name, labels: p.labels });
                self.idents.push((ident.clone(), cycle));
                ident
            }
        };
        self.held_cycle = cycle;
        grow(&mut self.procs, max_procs);
        self.procs.push_back(HeldProcess {
            ts_ms: p.ts_ms,
            used: p.used_bytes.unwrap_or(USED_UNKNOWN),
            ident,
        });
    }

    /// Drops what fell out of the window or beyond the caps; returns how many.
    fn evict(&mut self, window_ms: i64, max_gpus: usize, max_procs: usize, cycle: u64) -> usize {
        let floor = self.newest_ts.saturating_sub(window_ms);
        let before = self.gpus.len() + self.procs.len();
        while self.gpus.front().is_some_and(|s| s.ts_ms < floor) || self.gpus.len() > max_gpus {
            self.gpus.pop_front();
        }
        while self.procs.front().is_some_and(|s| s.ts_ms < floor) || self.procs.len() > max_procs {
            self.procs.pop_front();
        }
        if self.held_cycle == cycle {
            // Keep the identities of the processes of this reading only.
            self.idents.retain(|(_, seen)| *seen == cycle);
        }
        before - self.gpus.len() - self.procs.len()
    }

    /// Moves at most `max` held GPU samples of `[lo, hi]` into `out`; returns how many.
    fn flush_gpus(&mut self, lo: i64, hi: i64, max: usize, out: &mut Batch) -> usize {
        let a = self.gpus.partition_point(|s| s.ts_ms < lo);
        let b = self.gpus.partition_point(|s| s.ts_ms <= hi);
        let n = (b - a).min(max);
        out.gpu_samples.extend(self.gpus.drain(a..a + n));
        n
    }

    /// Moves at most `max` held process samples of `[lo, hi]` into `out`; returns how many.
    fn flush_procs(&mut self, lo: i64, hi: i64, max: usize, out: &mut Batch) -> usize {
        let a = self.procs.partition_point(|s| s.ts_ms < lo);
        let b = self.procs.partition_point(|s| s.ts_ms <= hi);
        let n = (b - a).min(max);
        let gpu_index = self.gpu_index;
        out.process_samples.reserve(n);
        out.process_samples.extend(self.procs.drain(a..a + n).map(|h| ProcessSample {
            ts_ms: h.ts_ms,
            gpu_index,
            pid: h.ident.pid,
            name: h.ident.name.clone(),
            used_bytes: (h.used != USED_UNKNOWN).then_some(h.used),
            labels: h.ident.labels.clone(),
        }));
        n
    }

    /// Whether `pid` had a process on this GPU (held in `[lo, hi]`, or in the latest reading).
    fn had_pid(&self, pid: u32, lo: i64, hi: i64) -> bool {
        self.idents.iter().any(|(i, _)| i.pid == pid)
            || self.procs.iter().any(|h| h.ident.pid == pid && (lo..=hi).contains(&h.ts_ms))
    }
}

/// Makes room for one more element in a ring buffer growing towards `cap` elements, by a quarter
/// of its length at a time instead of doubling: a full ring then wastes at most a quarter of its
/// memory (doubling could leave half of it unused), for a few more reallocations while it fills.
fn grow<T>(v: &mut VecDeque<T>, cap: usize) {
    if v.len() < v.capacity() {
        return;
    }
    let extra = (v.len() / 4).max(64).min(cap.saturating_sub(v.len())).max(1);
    v.reserve_exact(extra);
}

/// The flight recorder. See the module docs.
#[derive(Debug)]
pub struct FlightRecorder {
    settings: RecorderSettings,
    max_gpus: usize,
    max_procs: usize,
    rings: Vec<Ring>,
    /// Scratch: (gpu index, ts, send) decided for the current reading.
    decisions: Vec<(u32, i64, bool)>,
    cycle: u64,
    stats: RecorderStats,
}

impl FlightRecorder {
    /// A recorder with validated settings.
    pub fn new(settings: RecorderSettings) -> Result<Self, RecorderError> {
        settings.validate()?;
        let max_gpus = settings.max_held_gpu_samples();
        Ok(FlightRecorder {
            settings,
            max_gpus,
            max_procs: max_gpus * MAX_HELD_PROCESSES_PER_SAMPLE,
            rings: Vec::new(),
            decisions: Vec::new(),
            cycle: 0,
            stats: RecorderStats::default(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &RecorderSettings {
        &self.settings
    }

    /// Counters and what is held now.
    pub fn stats(&self) -> RecorderStats {
        RecorderStats {
            held_gpu_samples: self.rings.iter().map(|r| r.gpus.len()).sum(),
            held_process_samples: self.rings.iter().map(|r| r.procs.len()).sum(),
            ..self.stats
        }
    }

    fn is_hot(&self, s: &GpuSample) -> bool {
        match (s.memory_used_bytes, s.memory_total_bytes) {
            (Some(used), Some(total)) if total > 0 => {
                used as f64 * 100.0 >= total as f64 * self.settings.hot_threshold_pct
            }
            _ => false,
        }
    }

    fn ring(&mut self, gpu_index: u32) -> Option<&mut Ring> {
        let i = match self.rings.iter().position(|r| r.gpu_index == gpu_index) {
            Some(i) => i,
            None if self.rings.len() < limits::MAX_GPUS => {
                self.rings.push(Ring::new(gpu_index));
                self.rings.len() - 1
            }
            None => return None,
        };
        Some(&mut self.rings[i])
    }

    /// Takes one reading's samples: appends those to send to `out`, holds the others.
    pub fn record(
        &mut self,
        gpu_samples: Vec<GpuSample>,
        process_samples: Vec<ProcessSample>,
        out: &mut Batch,
    ) {
        if !self.settings.enabled {
            out.gpu_samples.extend(gpu_samples);
            out.process_samples.extend(process_samples);
            return;
        }
        self.cycle += 1;
        let (cycle, normal) = (self.cycle, self.settings.normal_interval_ms);
        let (max_gpus, max_procs) = (self.max_gpus, self.max_procs);
        let mut decisions = std::mem::take(&mut self.decisions);
        decisions.clear();
        for s in gpu_samples {
            let hot = self.is_hot(&s);
            let Some(ring) = self.ring(s.gpu_index) else {
                out.gpu_samples.push(s);
                continue;
            };
            let reset = ring.observe(s.ts_ms);
            let (send, only_hot) = ring.decide(s.ts_ms, hot, normal);
            decisions.push((s.gpu_index, s.ts_ms, send));
            if send {
                out.gpu_samples.push(s);
            } else {
                ring.hold_gpu(s, max_gpus);
            }
            self.stats.clock_resets += reset as u64;
            self.stats.hot_gpu_samples += u64::from(only_hot);
        }
        let mut resets = 0;
        for p in process_samples {
            let decided = decisions.iter().find(|d| d.0 == p.gpu_index && d.1 == p.ts_ms).map(|d| d.2);
            let Some(ring) = self.ring(p.gpu_index) else {
                out.process_samples.push(p);
                continue;
            };
            let send = match decided {
                Some(send) => send,
                None => {
                    // No GPU sample of this GPU at this time: decide for the processes alone.
                    let reset = ring.observe(p.ts_ms);
                    let (send, _) = ring.decide(p.ts_ms, false, normal);
                    decisions.push((p.gpu_index, p.ts_ms, send));
                    resets += reset as u64;
                    send
                }
            };
            if send {
                out.process_samples.push(p);
            } else {
                ring.hold_process(p, cycle, max_procs);
            }
        }
        self.stats.clock_resets += resets;
        self.decisions = decisions;
        let retention = self.settings.retention_ms();
        for ring in &mut self.rings {
            self.stats.evicted_samples += ring.evict(retention, max_gpus, max_procs, cycle) as u64;
        }
    }

    /// Plans the flush of the held samples before `event` (see the module docs for the span and
    /// the GPUs). Nothing moves until [`flush_chunk`](Self::flush_chunk).
    pub fn plan_flush(&self, event: &OomEvent) -> FlushPlan {
        let mut plan = FlushPlan::default();
        if !self.settings.enabled {
            return plan;
        }
        let lo = event.ts_ms.saturating_sub(self.settings.window_ms);
        let hi = event.ts_ms.saturating_add(self.settings.fast_interval_ms);
        for (i, ring) in self.rings.iter().enumerate() {
            let procs = match (event.gpu_index, event.pid) {
                (Some(g), _) if g != ring.gpu_index => continue,
                (Some(_), _) | (None, None) => true,
                (None, Some(pid)) => ring.had_pid(pid, lo, hi),
            };
            plan.spans.push_back(Span { ring: i, lo, hi, gpus_done: false, procs });
        }
        plan
    }

    /// Moves the next at most `max_rows` (≥ 1) held samples of `plan` into `out`; returns what
    /// moved (nothing once the plan is done). Call it after [`record`](Self::record) of the
    /// reading that carried the event, and until it returns nothing.
    pub fn flush_chunk(&mut self, plan: &mut FlushPlan, max_rows: usize, out: &mut Batch) -> Flushed {
        let max_rows = max_rows.max(1);
        let mut total = Flushed::default();
        while let Some(span) = plan.spans.front_mut() {
            let room = max_rows - total.rows();
            if room == 0 {
                break;
            }
            let Some(ring) = self.rings.get_mut(span.ring) else {
                plan.spans.pop_front();
                continue;
            };
            if !span.gpus_done {
                let n = ring.flush_gpus(span.lo, span.hi, room, out);
                total.gpu_samples += n;
                span.gpus_done = n < room;
            } else if span.procs {
                let n = ring.flush_procs(span.lo, span.hi, room, out);
                total.process_samples += n;
                span.procs = n >= room;
            } else {
                plan.spans.pop_front();
            }
        }
        total
    }

    /// Moves every held sample before `event` into `out` at once (see
    /// [`plan_flush`](Self::plan_flush); the batcher takes it in chunks instead).
    pub fn flush_for(&mut self, event: &OomEvent, out: &mut Batch) -> Flushed {
        let mut plan = self.plan_flush(event);
        let mut total = Flushed::default();
        loop {
            let f = self.flush_chunk(&mut plan, usize::MAX, out);
            if f.rows() == 0 {
                return total;
            }
            total.add(f);
        }
    }

    /// Flushes the window before `event` into `out`, then appends the event.
    pub fn admit(&mut self, event: OomEvent, out: &mut Batch) -> Flushed {
        let flushed = self.flush_for(&event, out);
        out.events.push(event);
        flushed
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use oomlens_schema::{OomKind, limits};
    use proptest::prelude::*;

    use super::*;

    const GIB: u64 = 1 << 30;

    fn settings(window_ms: i64) -> RecorderSettings {
        RecorderSettings { window_ms, ..RecorderSettings::default() }
    }

    fn gpu(gpu_index: u32, ts_ms: i64, used_pct: u64) -> GpuSample {
        GpuSample {
            ts_ms,
            gpu_index,
            memory_used_bytes: Some(80 * GIB * used_pct / 100),
            memory_total_bytes: Some(80 * GIB),
            ..GpuSample::default()
        }
    }

    fn proc(gpu_index: u32, ts_ms: i64, pid: u32) -> ProcessSample {
        ProcessSample {
            ts_ms,
            gpu_index,
            pid,
            name: format!("python-{pid}"),
            used_bytes: Some(u64::from(pid) * 1000 + ts_ms as u64),
            labels: vec![Label { key: "k8s.pod".into(), value: format!("pod-{pid}") }],
        }
    }

    /// One reading of `gpus` GPUs with `procs` processes each, every GPU at `pct` % used.
    fn reading(rec: &mut FlightRecorder, ts: i64, gpus: u32, procs: u32, pct: u64) -> Batch {
        let mut out = Batch::default();
        let g = (0..gpus).map(|i| gpu(i, ts, pct)).collect();
        let p = (0..gpus).flat_map(|i| (0..procs).map(move |k| proc(i, ts, 100 * i + k))).collect();
        rec.record(g, p, &mut out);
        out
    }

    fn event(ts_ms: i64, gpu_index: Option<u32>, kind: OomKind) -> OomEvent {
        OomEvent { ts_ms, gpu_index, kind, event_id: ts_ms as u64, ..OomEvent::default() }
    }

    #[test]
    fn cold_gpus_send_one_sample_per_normal_interval_aligned_to_it() {
        let mut rec = FlightRecorder::new(settings(120_000)).unwrap();
        let mut sent = Batch::default();
        for k in 0..100 {
            let b = reading(&mut rec, 10_050 + k * 100, 2, 3, 50);
            sent.gpu_samples.extend(b.gpu_samples);
            sent.process_samples.extend(b.process_samples);
        }
        // 10.05 s … 19.95 s: buckets 10 … 19.
        let ts: Vec<i64> = sent.gpu_samples.iter().filter(|s| s.gpu_index == 0).map(|s| s.ts_ms).collect();
        assert_eq!(ts, vec![10_050, 11_050, 12_050, 13_050, 14_050, 15_050, 16_050, 17_050, 18_050, 19_050]);
        assert_eq!(sent.gpu_samples.len(), 20);
        assert_eq!(sent.process_samples.len(), 60, "processes follow their GPU");
        let st = rec.stats();
        assert_eq!((st.held_gpu_samples, st.held_process_samples), (180, 540));
        assert_eq!(st.hot_gpu_samples, 0);
    }

    #[test]
    fn a_hot_gpu_streams_at_the_fast_rate_and_cools_down_again() {
        let mut rec = FlightRecorder::new(settings(120_000)).unwrap();
        let mut per_gpu = [0usize; 2];
        for k in 0..30 {
            // GPU 0: cold, hot from 1 s to 2 s (90 % is hot), cold again. GPU 1: always cold.
            let pct0 = if (10..20).contains(&k) { 90 } else { 89 };
            let mut out = Batch::default();
            rec.record(vec![gpu(0, k * 100, pct0), gpu(1, k * 100, 10)], vec![proc(0, k * 100, 7)], &mut out);
            for s in &out.gpu_samples {
                per_gpu[s.gpu_index as usize] += 1;
            }
            if (10..20).contains(&k) {
                assert_eq!(out.process_samples.len(), 1, "the hot GPU's processes stream with it");
            }
        }
        assert_eq!(per_gpu, [1 + 10 + 1, 3], "bucket 0: normal; bucket 1: all hot; bucket 2: normal");
        assert_eq!(rec.stats().hot_gpu_samples, 9, "one of the hot samples was the normal one anyway");
    }

    #[test]
    fn an_event_released_after_the_merge_grace_still_finds_its_whole_window() {
        // The merger holds an event back up to its grace (here 3 s of source time): the event at
        // 6 s reaches the recorder only after the reading at 9 s, yet 5 s → 6.1 s all come out.
        let late =
            RecorderSettings { window_ms: 5_000, event_delay_ms: 3_000, ..RecorderSettings::default() };
        let mut rec = FlightRecorder::new(late).unwrap();
        for k in 0..=90 {
            reading(&mut rec, k * 100, 1, 1, 50);
        }
        let mut out = Batch::default();
        rec.admit(event(6_000, Some(0), OomKind::CudaOom), &mut out);
        let ts: Vec<i64> = out.gpu_samples.iter().map(|s| s.ts_ms).collect();
        let expected: Vec<i64> = (10..=61).map(|k| k * 100).filter(|t| t % 1000 != 0).collect();
        assert_eq!(ts, expected);
        // Without the delay in the settings the oldest 3 s would have been evicted already.
        let mut short = FlightRecorder::new(settings(5_000)).unwrap();
        for k in 0..=90 {
            reading(&mut short, k * 100, 1, 1, 50);
        }
        let mut out = Batch::default();
        short.admit(event(6_000, Some(0), OomKind::CudaOom), &mut out);
        assert!(out.gpu_samples.iter().all(|s| s.ts_ms >= 4_000), "only what the ring still held");
        assert_eq!(late.max_held_gpu_samples(), 80 + 20 + 1);
        let bad = RecorderSettings { event_delay_ms: -1, ..late };
        assert!(bad.validate().unwrap_err().to_string().contains("detect.merge_grace_ms"));
    }

    #[test]
    fn an_oom_flushes_the_unsent_window_of_its_gpu_once() {
        let mut rec = FlightRecorder::new(settings(5_000)).unwrap();
        let mut sent = Batch::default();
        for k in 0..100 {
            let b = reading(&mut rec, k * 100, 2, 2, 50);
            sent.gpu_samples.extend(b.gpu_samples);
        }
        // OOM on GPU 1 at 9.42 s: held samples of GPU 1 up to 9.52 s come out, as far back as the
        // ring reaches (5 s before the newest reading, 9.9 s).
        let mut out = Batch::default();
        let f = rec.admit(event(9_420, Some(1), OomKind::CudaOom), &mut out);
        assert_eq!(out.events.len(), 1);
        assert!(out.gpu_samples.iter().all(|s| s.gpu_index == 1));
        let ts: Vec<i64> = out.gpu_samples.iter().map(|s| s.ts_ms).collect();
        let expected: Vec<i64> = (49..=95).map(|k| k * 100).filter(|t| t % 1000 != 0).collect();
        assert_eq!(ts, expected, "the fast window minus what the normal stream already sent");
        assert_eq!(f, Flushed { gpu_samples: expected.len(), process_samples: 2 * expected.len() });
        // Held processes come back whole.
        let p = out.process_samples.iter().find(|p| p.ts_ms == 5_500 && p.pid == 101).unwrap();
        assert_eq!(*p, proc(1, 5_500, 101));
        // A second event over the same window sends nothing again.
        let mut again = Batch::default();
        assert_eq!(
            rec.flush_for(&event(9_420, Some(1), OomKind::SuspectedOom), &mut again),
            Flushed::default()
        );
        // GPU 0 is untouched: a host OOM kill (no GPU) flushes it.
        let mut host = Batch::default();
        let f = rec.admit(event(9_900, None, OomKind::HostOomKill), &mut host);
        assert!(f.gpu_samples > 40);
        assert!(host.gpu_samples.iter().all(|s| s.gpu_index == 0 || s.ts_ms > 9_500));
    }

    #[test]
    fn a_flush_in_chunks_moves_the_same_rows_in_bounded_pieces() {
        let fill = || {
            let mut rec = FlightRecorder::new(settings(5_000)).unwrap();
            for k in 0..80 {
                reading(&mut rec, k * 100, 3, 5, 50);
            }
            rec
        };
        for e in [event(7_000, Some(1), OomKind::CudaOom), event(7_000, None, OomKind::HostOomKill)] {
            let mut whole = Batch::default();
            let mut a = fill();
            let all = a.flush_for(&e, &mut whole);
            assert!(all.process_samples > 100);
            let mut b = fill();
            let mut plan = b.plan_flush(&e);
            let mut chunks = Batch::default();
            let mut total = Flushed::default();
            let mut n = 0;
            while !plan.is_done() {
                let mut part = Batch::default();
                let f = b.flush_chunk(&mut plan, 37, &mut part);
                assert!(part.row_count() <= 37 && f.rows() == part.row_count());
                total.add(f);
                chunks.gpu_samples.extend(part.gpu_samples);
                chunks.process_samples.extend(part.process_samples);
                n += 1;
            }
            assert_eq!(total, all);
            assert!(n >= all.rows() / 37, "{n} chunks");
            assert_eq!(
                (chunks.gpu_samples, chunks.process_samples),
                (whole.gpu_samples, whole.process_samples)
            );
            assert_eq!(b.stats(), a.stats(), "the same rows left the rings");
            assert_eq!(b.flush_chunk(&mut plan, 37, &mut Batch::default()), Flushed::default());
        }
    }

    #[test]
    fn a_host_oom_flushes_processes_only_of_the_victims_gpus() {
        let mut rec = FlightRecorder::new(settings(5_000)).unwrap();
        for k in 0..50 {
            // `reading` gives GPU i the pids 100 i …: pid 201 runs on GPU 2 only.
            reading(&mut rec, k * 100, 4, 3, 50);
        }
        let mut out = Batch::default();
        let victim = OomEvent { pid: Some(201), ..event(4_900, None, OomKind::HostOomKill) };
        let f = rec.admit(victim, &mut out);
        let gpus: BTreeSet<u32> = out.gpu_samples.iter().map(|s| s.gpu_index).collect();
        let procs: BTreeSet<u32> = out.process_samples.iter().map(|p| p.gpu_index).collect();
        assert_eq!(gpus, (0..4).collect(), "the GPU curves of every GPU");
        assert_eq!(procs, BTreeSet::from([2]), "processes of the victim's GPU only");
        assert_eq!(f.process_samples, 3 * f.gpu_samples / 4);
        // Without a pid, every GPU's processes (what is still held).
        let mut all = Batch::default();
        rec.admit(event(4_900, None, OomKind::HostOomKill), &mut all);
        let procs: BTreeSet<u32> = all.process_samples.iter().map(|p| p.gpu_index).collect();
        assert_eq!(procs, BTreeSet::from([0, 1, 3]));
        assert!(all.gpu_samples.is_empty(), "GPU samples went out with the first event");
    }

    #[test]
    fn no_sample_is_sent_twice_and_every_window_before_an_oom_is_complete() {
        let mut rec = FlightRecorder::new(settings(3_000)).unwrap();
        let mut sent = Vec::new();
        let mut events = Vec::new();
        for k in 0..600i64 {
            let ts = k * 100;
            let pct = if (k / 37) % 3 == 0 { 95 } else { 40 };
            let mut out = reading(&mut rec, ts, 4, 2, pct);
            if k % 97 == 50 {
                let e =
                    event(ts - 30, if k % 2 == 0 { None } else { Some((k % 4) as u32) }, OomKind::CudaOom);
                events.push(e.clone());
                rec.admit(e, &mut out);
            }
            sent.extend(out.gpu_samples.iter().map(|s| (s.gpu_index, s.ts_ms)));
        }
        let unique: BTreeSet<(u32, i64)> = sent.iter().copied().collect();
        assert_eq!(unique.len(), sent.len(), "no duplicates");
        for e in &events {
            for g in 0..4u32 {
                if e.gpu_index.is_some_and(|x| x != g) {
                    continue;
                }
                let lo = (e.ts_ms - 3_000).max(0);
                let mut t = (lo + 99) / 100 * 100;
                while t <= e.ts_ms {
                    assert!(unique.contains(&(g, t)), "GPU {g} at {t} before the OOM at {}", e.ts_ms);
                    t += 100;
                }
            }
        }
    }

    #[test]
    fn memory_is_bounded_by_the_window_and_the_caps() {
        let mut rec = FlightRecorder::new(settings(2_000)).unwrap();
        for k in 0..1000 {
            reading(&mut rec, k * 100, 3, 4, 10);
        }
        let st = rec.stats();
        // 2 s window at 100 ms, minus the one normal sample per second.
        assert!(st.held_gpu_samples <= 3 * 21, "{st:?}");
        assert!(st.held_process_samples <= 3 * 4 * 21, "{st:?}");
        assert!(st.evicted_samples > 0);
        assert!(rec.rings.iter().all(|r| r.idents.len() <= 4), "identities of gone processes are released");
        // A full ring grows by quarters, not by doubling.
        let mut rec = FlightRecorder::new(settings(120_000)).unwrap();
        for k in 0..1300 {
            reading(&mut rec, k * 100, 2, 19, 10);
        }
        for r in &rec.rings {
            assert!(r.procs.len() > 19 * 1000, "{}", r.procs.len());
            assert!(
                r.procs.capacity() <= r.procs.len() * 5 / 4 + 64,
                "{} for {}",
                r.procs.capacity(),
                r.procs.len()
            );
            assert!(
                r.gpus.capacity() <= r.gpus.len() * 5 / 4 + 64,
                "{} for {}",
                r.gpus.capacity(),
                r.gpus.len()
            );
        }

        // Timestamps that never age out (a stuck clock) are capped by count.
        let mut rec = FlightRecorder::new(settings(1_000)).unwrap();
        let cap = rec.settings().max_held_gpu_samples();
        for _ in 0..10 * cap {
            let mut out = Batch::default();
            let procs = (0..200).map(|pid| proc(0, 500, pid)).collect();
            rec.record(vec![gpu(0, 500, 1)], procs, &mut out);
        }
        let st = rec.stats();
        assert!(st.held_gpu_samples <= cap, "{st:?}");
        assert!(st.held_process_samples <= cap * MAX_HELD_PROCESSES_PER_SAMPLE, "{st:?}");

        // More GPU indexes than a node can have pass through unrecorded.
        let mut rec = FlightRecorder::new(settings(1_000)).unwrap();
        let mut out = Batch::default();
        let many: Vec<GpuSample> = (0..limits::MAX_GPUS as u32 + 10).map(|i| gpu(i, 100, 1)).collect();
        rec.record(many, vec![proc(limits::MAX_GPUS as u32 + 5, 100, 1)], &mut out);
        assert_eq!(out.gpu_samples.len(), limits::MAX_GPUS + 10);
        assert_eq!(out.process_samples.len(), 1);
        assert_eq!(rec.rings.len(), limits::MAX_GPUS);
    }

    #[test]
    fn processes_without_a_gpu_sample_and_a_clock_stepping_back() {
        let mut rec = FlightRecorder::new(settings(10_000)).unwrap();
        let mut out = Batch::default();
        rec.record(vec![], vec![proc(3, 1_000, 1), proc(3, 1_000, 2)], &mut out);
        rec.record(vec![], vec![proc(3, 1_100, 1)], &mut out);
        assert_eq!(out.process_samples.len(), 2, "first of the second sent, the rest held");
        assert_eq!(rec.stats().held_process_samples, 1);
        // The clock goes back: the held window is forgotten, the new sample is sent.
        rec.record(vec![gpu(3, 500, 1)], vec![], &mut out);
        assert_eq!(rec.stats().held_process_samples, 0);
        assert_eq!(rec.stats().clock_resets, 1);
        assert_eq!(out.gpu_samples.len(), 1);
    }

    #[test]
    fn disabled_sends_everything_and_flushes_nothing() {
        let s = RecorderSettings { enabled: false, fast_interval_ms: 1000, ..RecorderSettings::default() };
        let mut rec = FlightRecorder::new(s).unwrap();
        assert_eq!(rec.settings().sample_interval_ms(), 1000);
        let mut out = Batch::default();
        for k in 0..5 {
            out.gpu_samples.extend(reading(&mut rec, k * 100, 2, 1, 10).gpu_samples);
        }
        assert_eq!(out.gpu_samples.len(), 10);
        assert_eq!(rec.admit(event(400, None, OomKind::HostOomKill), &mut out), Flushed::default());
        assert_eq!(out.events.len(), 1);
    }

    #[test]
    fn bad_settings_name_their_key() {
        let err = |s: RecorderSettings| FlightRecorder::new(s).unwrap_err().to_string();
        let d = RecorderSettings::default();
        assert!(err(RecorderSettings { fast_interval_ms: 1000, ..d }).contains("recorder.fast_interval_ms"));
        assert!(err(RecorderSettings { fast_interval_ms: 5, ..d }).contains("recorder.fast_interval_ms"));
        assert!(err(RecorderSettings { window_ms: 0, ..d }).contains("recorder.window_s"));
        assert!(err(RecorderSettings { window_ms: 7_200_000, ..d }).contains("recorder.window_s"));
        assert!(err(RecorderSettings { hot_threshold_pct: 0.0, ..d }).contains("hot_threshold_pct"));
        assert!(err(RecorderSettings { hot_threshold_pct: f64::NAN, ..d }).contains("hot_threshold_pct"));
        assert!(err(RecorderSettings { normal_interval_ms: 0, ..d }).contains("source.interval_ms"));
        assert!(
            err(RecorderSettings {
                window_ms: MAX_WINDOW_MS,
                fast_interval_ms: 10,
                normal_interval_ms: 1000,
                ..d
            })
            .contains("samples per GPU")
        );
    }

    proptest! {
        /// Arbitrary readings (any load, jittered and repeated timestamps) and events: nothing is
        /// sent twice, the caps hold, and every held sample in an event's window comes out.
        #[test]
        fn invariants_hold_for_arbitrary_input(
            steps in proptest::collection::vec((1i64..250, 0u64..=100, 0u32..3, any::<bool>(), 0i64..3_000), 1..300)
        ) {
            let mut rec = FlightRecorder::new(settings(2_000)).unwrap();
            let mut sent = BTreeSet::new();
            let mut ts = 0i64;
            for (dt, pct, gpus, oom, back) in steps {
                ts += dt;
                let mut out = reading(&mut rec, ts, gpus + 1, 2, pct);
                if oom {
                    let e = event(ts - back, (pct % 2 == 0).then_some(0), OomKind::CudaOom);
                    rec.admit(e.clone(), &mut out);
                    for r in &rec.rings {
                        if e.gpu_index.is_none_or(|g| g == r.gpu_index) {
                            prop_assert!(r.gpus.iter().all(|s| s.ts_ms < e.ts_ms - 2_000 || s.ts_ms > e.ts_ms + 100));
                        }
                    }
                }
                for s in &out.gpu_samples {
                    prop_assert!(sent.insert((s.gpu_index, s.ts_ms)), "GPU sample sent twice");
                }
                let st = rec.stats();
                prop_assert!(st.held_gpu_samples <= 3 * rec.settings().max_held_gpu_samples());
            }
        }
    }
}
