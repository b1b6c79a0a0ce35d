//! The answer of `oomlens fit`: the breakdown, the peak against the capacity, the largest batch
//! and sequence that fit, the model-state estimators' figures and the fleet's correction, as text
//! and as one JSON document.

use std::io::{self, Write};

use serde::Serialize;

use super::calibrate::Calibration;
use super::{Anchors, ArchSource, Checkpointing, Estimate, Gpu, Job, Mode, ParamsSource};

/// Everything `oomlens fit` says about one job on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitReport {
    /// The job as understood (shape, parallelism, options).
    pub job: Job,
    /// The GPU.
    pub gpu: Gpu,
    /// The model's breakdown and peak.
    pub estimate: Estimate,
    /// The peak the verdict uses: the model's, or the fleet-corrected one with `--calibrate`.
    pub peak_bytes: u64,
    /// What CUDA can hand out on the GPU.
    pub capacity_bytes: u64,
    /// capacity − peak (negative when it does not fit).
    pub headroom_bytes: i64,
    /// headroom / capacity, percent.
    pub headroom_pct: f64,
    /// Whether the peak fits.
    pub fits: bool,
    /// The largest micro-batch that fits at this sequence length (0: not even 1).
    pub largest_batch: u64,
    /// The longest sequence that fits at this micro-batch (0: not even 1 token).
    pub largest_seq: u64,
    /// What accelerate's and DeepSpeed's model-state estimators say.
    pub anchors: Anchors,
    /// The fleet's correction (`--calibrate`).
    pub calibration: Option<Calibration>,
}

impl FitReport {
    /// Runs the model (and the searches) for `job` on `gpu`, corrected by `calibration`.
    pub fn build(job: Job, gpu: Gpu, calibration: Option<Calibration>) -> FitReport {
        let estimate = job.estimate();
        let factor = calibration.as_ref().map_or(1.0, Calibration::factor);
        let peak_bytes = calibration.as_ref().map_or(estimate.peak_bytes, |c| c.corrected_bytes);
        let capacity_bytes = gpu.capacity_bytes;
        let headroom_bytes =
            i64::try_from(i128::from(capacity_bytes) - i128::from(peak_bytes)).unwrap_or(i64::MIN);
        let headroom_pct =
            if capacity_bytes == 0 { 0.0 } else { headroom_bytes as f64 * 100.0 / capacity_bytes as f64 };
        let largest_batch = job.largest_batch(capacity_bytes, factor);
        let largest_seq = job.largest_seq(capacity_bytes, factor);
        let anchors = job.anchors();
        FitReport {
            fits: peak_bytes <= capacity_bytes,
            job,
            gpu,
            estimate,
            peak_bytes,
            capacity_bytes,
            headroom_bytes,
            headroom_pct,
            largest_batch,
            largest_seq,
            anchors,
            calibration,
        }
    }

    /// Writes the report as one JSON document and a newline.
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        serde_json::to_writer(&mut *out, self).map_err(io::Error::other)?;
        writeln!(out)
    }

    /// Writes the report for people.
    pub fn write_text(&self, out: &mut impl Write) -> io::Result<()> {
        let j = &self.job;
        let a = &j.arch;
        let params_from = match (j.params_source, j.arch_source) {
            (ParamsSource::Given, _) => "given",
            (_, ArchSource::Config) => "counted from the config",
            _ => "counted from the dimensions",
        };
        writeln!(out, "model: {:.3} B parameters ({params_from})", j.params as f64 / 1e9)?;
        let arch_from = match j.arch_source {
            ArchSource::Config => "from the config",
            ArchSource::Flags => "from the flags",
            ArchSource::Assumed => {
                "ASSUMED from the nearest reference model: pass --model-config or the dimensions"
            }
        };
        writeln!(out, "  {}; {arch_from}", a.describe())?;
        let mode = match j.mode {
            Mode::Train => {
                format!("train, {} weights, {} optimizer, ZeRO-{}", j.precision, j.optimizer, j.zero_stage)
            }
            Mode::Inference => format!("inference, {} weights", j.precision),
        };
        let ckpt = match j.checkpointing {
            Checkpointing::None => "no activation checkpointing",
            Checkpointing::Selective => "selective recomputation",
            Checkpointing::Full => "full activation checkpointing",
        };
        let attention = if j.flash_attention { "FlashAttention" } else { "eager attention" };
        let sp = if j.tp > 1 && j.sequence_parallel { " + sequence parallel" } else { "" };
        writeln!(out, "job: {mode}; TP {} × PP {} × DP {}{sp}", j.tp, j.pp, j.dp)?;
        writeln!(out, "  micro-batch {} × sequence {}, {ckpt}, {attention}", j.batch, j.seq)?;
        let name = if self.gpu.name.is_empty() { String::new() } else { format!(" ({})", self.gpu.name) };
        writeln!(
            out,
            "GPU: {}{name}: {} usable of {}",
            self.gpu.model,
            gib(self.capacity_bytes),
            gib(self.gpu.total_bytes)
        )?;
        writeln!(out)?;
        writeln!(out, "  {:<16} {:>10} {:>7}  how", "part", "GiB", "share")?;
        let total = self.estimate.peak_bytes.max(1) as f64;
        for p in &self.estimate.parts {
            writeln!(
                out,
                "  {:<16} {:>10.2} {:>6.1}%  {}",
                p.name.replace('_', " "),
                gibf(p.bytes),
                p.bytes as f64 * 100.0 / total,
                p.detail
            )?;
        }
        writeln!(out, "  {:-<16} {:->10}", "", "")?;
        writeln!(out, "  {:<16} {:>10.2}", "predicted peak", gibf(self.estimate.peak_bytes))?;
        if let Some(c) = self.calibration.as_ref().filter(|c| c.has_data()) {
            writeln!(out, "  {:<16} {:>10.2}  {}", "fleet-corrected", gibf(c.corrected_bytes), c.summary)?;
        }
        writeln!(out, "  {:<16} {:>10.2}", "capacity", gibf(self.capacity_bytes))?;
        writeln!(
            out,
            "  {:<16} {:>10.2}  ({:+.1} % of the capacity)",
            "headroom",
            self.headroom_bytes as f64 / (1u64 << 30) as f64,
            self.headroom_pct
        )?;
        writeln!(out)?;
        if self.fits {
            writeln!(
                out,
                "fits: {} of {} ({} to spare)",
                gib(self.peak_bytes),
                gib(self.capacity_bytes),
                gib(self.headroom_bytes.unsigned_abs())
            )?;
        } else {
            writeln!(
                out,
                "does not fit: {} needed, {} usable ({} short)",
                gib(self.peak_bytes),
                gib(self.capacity_bytes),
                gib(self.headroom_bytes.unsigned_abs())
            )?;
        }
        let batch = match self.largest_batch {
            0 => "none (not even a micro-batch of 1)".to_owned(),
            n if n >= super::MAX_BATCH => format!("{n} or more"),
            n => n.to_string(),
        };
        writeln!(out, "largest micro-batch that fits at sequence {}: {batch}", j.seq)?;
        let seq = match self.largest_seq {
            0 => "none (not even 1 token)".to_owned(),
            n if n >= super::MAX_SEQ => format!("{n} or more"),
            n => match a.max_position {
                Some(m) if n > m => format!("{n} (beyond the model's {m}-token context)"),
                _ => n.to_string(),
            },
        };
        writeln!(out, "longest sequence that fits at micro-batch {}: {seq}", j.batch)?;
        let an = &self.anchors;
        let peak = self.estimate.peak_bytes;
        let acc = if j.mode == Mode::Train {
            "\"Training using Adam\", 4 × all the weights"
        } else {
            "\"Total Size\", all the weights"
        };
        let mut line = format!(
            "model-state estimators (no activations, context or slack): accelerate estimate-memory {} ({acc}; {})",
            gib(an.accelerate_bytes),
            versus(an.accelerate_bytes, peak)
        );
        if let (Some(ds), Some(name)) = (an.deepspeed_bytes, an.deepspeed_estimator) {
            line.push_str(&format!(", DeepSpeed {name} {} ({})", gib(ds), versus(ds, peak)));
        }
        writeln!(out, "{line}")?;
        if let Some(c) = &self.calibration
            && !c.has_data()
        {
            writeln!(out, "fleet calibration: {}", c.summary)?;
        }
        Ok(())
    }
}

/// `12.34 GiB below the model's peak` / `above`.
fn versus(anchor: u64, peak: u64) -> String {
    if anchor <= peak {
        format!("{} below the model's peak", gib(peak - anchor))
    } else {
        format!("{} above it", gib(anchor - peak))
    }
}

fn gibf(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", gibf(bytes))
}
