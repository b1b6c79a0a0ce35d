//! Calibration by the fleet: what ClickHouse saw of the same job shape corrects the model.
//!
//! The observations (`collector/sql/fit_shape_events.sql`, `fit_workload_peaks.sql`):
//!
//! * every stored attribution of an OOM event of the same shape (params within a tolerance,
//!   precision, optimizer, micro-batch, sequence, ZeRO stage, TP / PP / DP, checkpointing,
//!   FlashAttention): what the failing process needed alone at the failure (context + allocated +
//!   requested) and its sampled floor and peak in the look-back window;
//! * the process samples of the workloads those events belong to: the most and the least memory
//!   one of their processes held on a GPU.
//!
//! Every observation is a lower bound of the shape's true peak: a failed job needed at least what
//! it asked for, and a sample sees at most the peak. So the **floor** is the largest need at a
//! failure, the **peak** the largest sampled memory, and the observed figure the larger of the
//! two. The correction only raises the estimate: the corrected peak is `max(model, observed)`. A
//! fleet that saw less than the model predicts is reported (a ratio below 1) but does not lower
//! the answer — the samples cannot prove the job never went higher.

use oomlens_collector::analysis::queries::{self, ParamValue};
use oomlens_schema::memory::Optimizer;
use serde::{Deserialize, Serialize};

use super::{Gpu, Job, Mode};

/// Reading the fleet's observations failed.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// A built-in query or its arguments are wrong.
    #[error(transparent)]
    Query(#[from] queries::QueryError),
    /// ClickHouse failed.
    #[error("ClickHouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
}

/// One row of `fit_shape_events`.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct ShapeEvent {
    /// Cluster.
    pub cluster: String,
    /// Node.
    pub node: String,
    /// Event id.
    pub event_id: u64,
    /// Failure time, epoch ms.
    pub ts_ms: i64,
    /// Workload ('' when unknown).
    pub workload: String,
    /// Event kind.
    pub kind: String,
    /// Attributed scenario.
    pub scenario: String,
    /// The GPU's capacity as the message or NVML said.
    pub capacity_bytes: Option<u64>,
    /// What the process needed alone at the failure.
    pub need_alone_bytes: Option<u64>,
    /// Its samples in the look-back window.
    pub own_samples: u64,
    /// Its floor in the window.
    pub own_min_used: u64,
    /// Its peak in the window.
    pub own_max_used: u64,
}

/// One row of `fit_workload_peaks`.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct WorkloadPeak {
    /// Workload.
    pub workload: String,
    /// Distinct processes (node, GPU, pid).
    pub processes: u64,
    /// Distinct samples.
    pub samples: u64,
    /// The most memory one of its processes held on a GPU.
    pub peak_bytes: u64,
    /// The least.
    pub floor_bytes: u64,
}

/// The query arguments that select a shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeQuery {
    /// Events at or after, epoch ms.
    pub since_ms: i64,
    /// Events before, epoch ms.
    pub until_ms: i64,
    /// Parameter counts within this fraction of the job's count match (0.03 = ±3 %).
    pub params_tolerance: f64,
}

impl ShapeQuery {
    /// The shape's arguments in the queries' order (after the window).
    fn shape_args(&self, job: &Job) -> Vec<ParamValue> {
        let p = job.params as f64;
        let lo = (p * (1.0 - self.params_tolerance)).floor().max(0.0) as u64;
        let hi = (p * (1.0 + self.params_tolerance)).ceil().min(u64::MAX as f64) as u64;
        // Events of inference jobs carry no optimizer ('').
        let optimizer = match (job.mode, job.optimizer) {
            (Mode::Inference, _) | (_, Optimizer::None) => "",
            (_, o) => o.as_str(),
        };
        vec![
            ParamValue::Int(self.since_ms),
            ParamValue::Int(self.until_ms),
            ParamValue::UInt(lo),
            ParamValue::UInt(hi),
            ParamValue::String(job.precision.as_str().to_owned()),
            ParamValue::String(optimizer.to_owned()),
            ParamValue::UInt(job.batch.min(u64::from(u32::MAX))),
            ParamValue::UInt(job.seq.min(u64::from(u32::MAX))),
            ParamValue::UInt(u64::from(if job.mode == Mode::Train { job.zero_stage } else { 0 })),
            ParamValue::UInt(u64::from(job.tp)),
            ParamValue::UInt(u64::from(job.pp)),
            ParamValue::UInt(u64::from(job.dp)),
            ParamValue::UInt(u64::from(job.checkpointing != super::Checkpointing::None)),
            ParamValue::UInt(u64::from(job.flash_attention)),
        ]
    }
}

/// The fleet's observations of a shape.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observations {
    /// Its attributed OOM events.
    pub events: Vec<ShapeEvent>,
    /// Its workloads' sampled memory.
    pub workloads: Vec<WorkloadPeak>,
}

/// Reads the observations of `job`'s shape.
pub async fn observe(
    client: &clickhouse::Client,
    db: &str,
    job: &Job,
    q: &ShapeQuery,
) -> Result<Observations, CalibrationError> {
    let shape = q.shape_args(job);
    let events =
        queries::builtin("fit_shape_events")?.bind(client, db, &shape)?.fetch_all::<ShapeEvent>().await?;
    let mut args = vec![ParamValue::Int(q.since_ms), ParamValue::Int(q.until_ms)];
    args.extend(shape);
    let workloads =
        queries::builtin("fit_workload_peaks")?.bind(client, db, &args)?.fetch_all::<WorkloadPeak>().await?;
    tracing::debug!(events = events.len(), workloads = workloads.len(), "fleet observations of the shape");
    Ok(Observations { events, workloads })
}

/// What the fleet says about the model's prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    /// OOM events of the shape.
    pub events: u64,
    /// Of them, events on a GPU of this capacity (within 2 %).
    pub events_same_gpu: u64,
    /// Events that said what the process needed.
    pub events_with_need: u64,
    /// Workloads of the shape with process samples.
    pub workloads: u64,
    /// Their process samples (plus the events' own samples in their windows).
    pub samples: u64,
    /// The largest need at a failure: the least the shape is known to need.
    pub floor_bytes: Option<u64>,
    /// The largest sampled memory of the shape's processes.
    pub peak_bytes: Option<u64>,
    /// The larger of the two.
    pub observed_bytes: Option<u64>,
    /// The model's prediction.
    pub predicted_bytes: u64,
    /// observed / predicted.
    pub ratio: Option<f64>,
    /// `max(predicted, observed)`.
    pub corrected_bytes: u64,
    /// corrected − predicted.
    pub correction_bytes: u64,
    /// One sentence for people.
    pub summary: String,
}

impl Calibration {
    /// Whether the fleet had anything on the shape.
    pub fn has_data(&self) -> bool {
        self.observed_bytes.is_some()
    }

    /// The factor the model's peaks are multiplied by (≥ 1).
    pub fn factor(&self) -> f64 {
        if self.predicted_bytes == 0 {
            1.0
        } else {
            self.corrected_bytes as f64 / self.predicted_bytes as f64
        }
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Compares the observations with the model's `predicted` peak on `gpu`.
pub fn calibrate(obs: &Observations, predicted: u64, gpu: &Gpu) -> Calibration {
    let floor_bytes = obs.events.iter().filter_map(|e| e.need_alone_bytes).max();
    let sampled = obs
        .events
        .iter()
        .filter(|e| e.own_samples > 0)
        .map(|e| e.own_max_used)
        .chain(obs.workloads.iter().filter(|w| w.samples > 0).map(|w| w.peak_bytes))
        .max();
    let observed_bytes = floor_bytes.max(sampled);
    let same_gpu = |c: u64| {
        (c as f64 / gpu.capacity_bytes.max(1) as f64 - 1.0).abs() <= 0.02
            || (c as f64 / gpu.total_bytes.max(1) as f64 - 1.0).abs() <= 0.02
    };
    let events = obs.events.len() as u64;
    let events_same_gpu = obs.events.iter().filter(|e| e.capacity_bytes.is_some_and(same_gpu)).count() as u64;
    let events_with_need = obs.events.iter().filter(|e| e.need_alone_bytes.is_some()).count() as u64;
    let samples = obs.workloads.iter().map(|w| w.samples).sum::<u64>()
        + obs.events.iter().map(|e| e.own_samples).sum::<u64>();
    let ratio = observed_bytes.filter(|_| predicted > 0).map(|o| o as f64 / predicted as f64);
    let corrected_bytes = observed_bytes.map_or(predicted, |o| o.max(predicted));
    let correction_bytes = corrected_bytes - predicted;
    let summary = match (observed_bytes, ratio) {
        (Some(o), Some(r)) => {
            let basis = format!(
                "{events} OOM event(s) of this shape ({events_same_gpu} on this GPU's capacity, {events_with_need} \
                 saying what they needed) and {} workload(s) with {samples} process sample(s)",
                obs.workloads.len()
            );
            if correction_bytes > 0 {
                format!(
                    "the fleet saw this shape need {} ({r:.2} × the model's {}): corrected to {} (+{}), from {basis}",
                    gib(o),
                    gib(predicted),
                    gib(corrected_bytes),
                    gib(correction_bytes)
                )
            } else {
                format!(
                    "the fleet saw this shape need at most {} ({r:.2} × the model's {}): no correction (observations \
                     are lower bounds), from {basis}",
                    gib(o),
                    gib(predicted)
                )
            }
        }
        _ if events > 0 => {
            format!("{events} OOM event(s) of this shape, none with memory figures: no correction")
        }
        _ => "no fleet data for this shape".to_owned(),
    };
    Calibration {
        events,
        events_same_gpu,
        events_with_need,
        workloads: obs.workloads.len() as u64,
        samples,
        floor_bytes,
        peak_bytes: sampled,
        observed_bytes,
        predicted_bytes: predicted,
        ratio,
        corrected_bytes,
        correction_bytes,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn event(need: Option<u64>, samples: u64, peak: u64, capacity: u64) -> ShapeEvent {
        ShapeEvent {
            cluster: "c".into(),
            node: "n".into(),
            event_id: 1,
            ts_ms: 0,
            workload: "w".into(),
            kind: "cuda_oom".into(),
            scenario: "batch".into(),
            capacity_bytes: Some(capacity),
            need_alone_bytes: need,
            own_samples: samples,
            own_min_used: peak / 2,
            own_max_used: peak,
        }
    }

    #[test]
    fn observations_only_raise_the_estimate() {
        let gpu = Gpu::from_spec(&oomlens_schema::gpu::H100_80GB);
        let none = calibrate(&Observations::default(), 70 * GIB, &gpu);
        assert!(!none.has_data());
        assert_eq!((none.corrected_bytes, none.correction_bytes, none.factor()), (70 * GIB, 0, 1.0));
        assert_eq!(none.summary, "no fleet data for this shape");

        let obs = Observations {
            events: vec![
                event(Some(84 * GIB), 10, 78 * GIB, gpu.capacity_bytes),
                event(None, 0, 0, 40 * GIB),
            ],
            workloads: vec![WorkloadPeak {
                workload: "w".into(),
                processes: 8,
                samples: 100,
                peak_bytes: 79 * GIB,
                floor_bytes: 10 * GIB,
            }],
        };
        let up = calibrate(&obs, 70 * GIB, &gpu);
        assert_eq!((up.events, up.events_same_gpu, up.events_with_need, up.workloads), (2, 1, 1, 1));
        assert_eq!((up.floor_bytes, up.peak_bytes), (Some(84 * GIB), Some(79 * GIB)));
        assert_eq!((up.corrected_bytes, up.correction_bytes), (84 * GIB, 14 * GIB));
        assert!((up.ratio.unwrap() - 1.2).abs() < 1e-9);
        assert!((up.factor() - 1.2).abs() < 1e-9);
        assert!(up.summary.contains("corrected to 84.00 GiB (+14.00 GiB)"), "{}", up.summary);
        assert_eq!(up.samples, 110);

        let down = calibrate(&obs, 100 * GIB, &gpu);
        assert_eq!((down.corrected_bytes, down.correction_bytes), (100 * GIB, 0));
        assert!((down.ratio.unwrap() - 0.84).abs() < 1e-9);
        assert!(down.summary.contains("no correction"), "{}", down.summary);

        let bare = Observations { events: vec![event(None, 0, 0, 1)], workloads: vec![] };
        assert!(calibrate(&bare, GIB, &gpu).summary.contains("none with memory figures"));
    }
}
