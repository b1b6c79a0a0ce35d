//! The `Source` trait: where GPU readings come from (NVML on a real node, the simulator elsewhere).
//!
//! A source is synchronous and may block (NVML calls can hang in the driver); the sampler runs it
//! on a dedicated thread, never on the async runtime. The sampler owns the clock and tells the
//! source the timestamp of each reading, so the simulator can run faster than real time while NVML
//! simply reads "now".

//!
//! * [`nvml`] — real NVIDIA GPUs through `nvml-wrapper` (and the `nvml-smoke` report);
//!   [`watchdog`] runs its calls on a worker thread with a timeout.
//! * [`sim`] — the deterministic fleet simulator.
//! * [`pods`] — any source, with pod names added from the kubelet's device assignments.
//! * [`NoGpus`] — no readings at all (`source.kind = "none"`).

pub mod nvml;
pub mod pods;
pub mod sim;
pub mod watchdog;

use oomlens_schema::{GpuInfo, GpuSample, OomEvent, ProcessSample};

/// Everything one poll of a source produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// One sample per GPU (or MIG instance).
    pub gpu_samples: Vec<GpuSample>,
    /// One sample per process per GPU.
    pub process_samples: Vec<ProcessSample>,
    /// Failures the source itself detected (the simulator's OOMs; NVML's vanished processes).
    pub events: Vec<OomEvent>,
    /// Number of fields that could not be read this time (recorded as `None`, never as zero).
    pub missing_fields: u32,
    /// Number of driver calls that timed out this time.
    pub timed_out_calls: u32,
    /// The reading's time (Unix epoch ms, source time) when the sampler took it; `None` for the
    /// detectors' readings. Source time advances with it even without samples (`source.kind =
    /// "none"`), so events held for merging are released.
    pub ts_ms: Option<i64>,
}

impl Reading {
    /// Appends another reading.
    pub fn extend(&mut self, other: Reading) {
        self.gpu_samples.extend(other.gpu_samples);
        self.process_samples.extend(other.process_samples);
        self.events.extend(other.events);
        self.missing_fields += other.missing_fields;
        self.timed_out_calls += other.timed_out_calls;
        self.ts_ms = self.ts_ms.max(other.ts_ms);
    }
}

/// A source of GPU readings.
pub trait Source: Send {
    /// Short name for logs and metrics (`nvml`, `simulator`).
    fn name(&self) -> &'static str;

    /// The GPUs (and MIG instances) this source reports on.
    fn inventory(&self) -> Vec<GpuInfo>;

    /// Takes one reading stamped `ts_ms` (Unix epoch ms). Per-field failures are `None` in the
    /// samples and counted in [`Reading::missing_fields`]; this call itself never fails.
    fn sample(&mut self, ts_ms: i64) -> Reading;
}

/// The source of a node without GPU readings (`source.kind = "none"`): no GPUs, empty readings.
/// The detectors (job logs, kernel log, hook) still report failures.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoGpus;

impl Source for NoGpus {
    fn name(&self) -> &'static str {
        "none"
    }

    fn inventory(&self) -> Vec<GpuInfo> {
        Vec::new()
    }

    fn sample(&mut self, _ts_ms: i64) -> Reading {
        Reading::default()
    }
}
