//! The deterministic fleet simulator: a [`Source`] whose GPUs run simulated jobs whose
//! memory follows the transformer memory model of `memory.rs`, and whose OOMs carry ground truth for attribution.
//!
//! Files:
//!
//! * `mod.rs` — [`SimConfig`], [`ScenarioMix`], [`SimError`], [`Simulator`]: the clock, placement
//!   scheduling per GPU, the host-RAM check, events and readings.
//! * `gpu_models.rs` — the GPU catalog ([`GpuModel`]): names, NVML totals, driver reservations,
//!   power and clocks.
//! * `memory.rs` — model catalog, job shape, static / activation / attention / logits sizes and the
//!   exact allocation sequence of each phase.
//! * `allocator.rs` — the caching allocator: allocated vs reserved, c10 rounding, fragmentation,
//!   release-and-retry before an OOM.
//! * `job.rs` — one process's life (load → optimizer init → forward/backward steps → eval → exit,
//!   or an inference server's KV-cache pool), one 100 ms tick at a time.
//! * `templates.rs` — the placement templates (healthy, static, batch, sequence, contention,
//!   fragmentation, host OOM) sized against each GPU.
//! * `truth.rs` — the ordered ground-truth rules.
//! * `host.rs` — host RAM, dataloader workers and the OOM killer.
//! * `messages.rs` — the exact PyTorch 1.x / 2.x OOM messages, tracebacks, training lines and
//!   kernel lines.
//! * `logs.rs` — job log files under `log_dir`.
//! * `rng.rs` — FNV-1a node hash, the seeded ChaCha8 RNG, hash-based reading noise.
//!
//! **Time.** The simulation advances in fixed 100 ms ticks from `start_ts_ms`; `sample(ts)` runs
//! every tick up to `ts` and reports the state then, so the sampling interval changes what is
//! observed, never what happens. At most one simulated hour is replayed per call; a larger jump
//! skips the gap (the fleet stands still over it). A timestamp that is not ahead of the last one
//! only reads the state again.
//!
//! **Determinism.** Same seed, node name, configuration and sequence of `sample` timestamps ⇒
//! identical readings: all state changes draw from one ChaCha8 RNG seeded from the seed and the
//! FNV-1a hash of the node name, in a fixed order; reading jitter is a pure hash.
//!
//! **Default job mix.** The first placement of each GPU goes round-robin over the enabled
//! templates in the order static, batch, sequence, contention, fragmentation, host_oom, healthy,
//! starting at an offset derived from the node name, so an 8-GPU node with the default mix hits
//! every scenario within its first minutes. Later placements are drawn from the [`ScenarioMix`]
//! weights (default: healthy 8, batch 2, contention 2, static 1, sequence 1, fragmentation 1,
//! host_oom 1).
//!
//! **Ground truth** (`truth.rs`), first match wins: static (context + static state exceed the
//! GPU) → fragmentation (`reserved − allocated ≥ requested`) → if the process would have fit alone
//! at its peak: contention when other processes hold memory, else fragmentation → sequence (the
//! failing allocation is an attention score matrix or KV-cache block) → batch. Host OOM kills are
//! host_oom.

mod allocator;
mod gpu_models;
mod host;
mod job;
mod logs;
mod memory;
mod messages;
mod rng;
mod templates;
mod truth;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

use oomlens_schema::{
    EventSource, GpuInfo, GpuSample, OomEvent, OomKind, OtherProcess, Phase, ProcessSample, Scenario,
};
use rand::Rng;

pub use gpu_models::{GPU_MODELS, GpuModel};

use crate::source::{Reading, Source};
use job::{Job, JobSpec, Outcome, TickCtx};
use logs::LogSink;
use messages::{CudaOom, kernel_log, torch_oom_message, traceback};
use rng::{SimRng, fnv1a64, noise, sim_rng, splitmix64};
use templates::{Env, Template};
use truth::{FailureFacts, classify};

/// Simulated time per tick.
pub const TICK_MS: i64 = 100;
/// Most ticks replayed by one `sample` call (one simulated hour).
pub const MAX_CATCHUP_TICKS: u64 = 36_000;
/// Most events kept between two `sample` calls (the oldest are dropped beyond).
pub const MAX_PENDING_EVENTS: usize = 4096;
/// Most processes started per GPU placement.
pub const MAX_PROCESSES_PER_GPU: usize = 3;
/// Most `extra_processes_per_gpu`.
pub const MAX_EXTRA_PROCESSES_PER_GPU: u32 = 64;
/// GPU memory each extra process holds.
pub const EXTRA_PROCESS_BYTES: u64 = 64 << 20;
/// Highest `pid_base` accepted (Linux `pid_max` is 4194304).
pub const MAX_PID_BASE: u32 = 4_000_000;
const PID_MAX: u64 = 4_194_304;
const GIB: u64 = 1 << 30;

/// Relative weights of the placement templates (0 disables one). Serde names: `static`, `batch`,
/// `sequence`, `contention`, `fragmentation`, `host_oom`, `healthy`.
#[derive(Debug, Clone, Copy, serde::Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ScenarioMix {
    /// A model whose static state exceeds the GPU.
    #[serde(rename = "static")]
    pub static_model: u32,
    /// A batch ramp until the activations no longer fit.
    pub batch: u32,
    /// Long-document training whose rare long sample's attention does not fit.
    pub sequence: u32,
    /// A healthy job and a neighbour that grows into its memory.
    pub contention: u32,
    /// A variable-shape job whose cache fragments.
    pub fragmentation: u32,
    /// Dataloader host-RAM growth until the OOM killer strikes.
    pub host_oom: u32,
    /// Jobs (with co-scheduled tenants) that never fail.
    pub healthy: u32,
}

impl Default for ScenarioMix {
    fn default() -> Self {
        ScenarioMix {
            static_model: 1,
            batch: 2,
            sequence: 1,
            contention: 2,
            fragmentation: 1,
            host_oom: 1,
            healthy: 8,
        }
    }
}

impl ScenarioMix {
    /// Nothing enabled (invalid on its own; a start for struct updates).
    pub const NONE: ScenarioMix = ScenarioMix {
        static_model: 0,
        batch: 0,
        sequence: 0,
        contention: 0,
        fragmentation: 0,
        host_oom: 0,
        healthy: 0,
    };

    /// Only healthy jobs: no OOM ever happens.
    pub fn healthy_only() -> Self {
        ScenarioMix { healthy: 1, ..Self::NONE }
    }

    /// Only the template that provokes `scenario` (`Unknown` enables nothing).
    pub fn only(scenario: Scenario) -> Self {
        let mut mix = Self::NONE;
        if let Some(t) = Template::from_scenario(scenario) {
            *mix.weight_mut(t) = 1;
        }
        mix
    }

    fn weight_mut(&mut self, t: Template) -> &mut u32 {
        match t {
            Template::Static => &mut self.static_model,
            Template::Batch => &mut self.batch,
            Template::Sequence => &mut self.sequence,
            Template::Contention => &mut self.contention,
            Template::Fragmentation => &mut self.fragmentation,
            Template::HostOom => &mut self.host_oom,
            Template::Healthy => &mut self.healthy,
        }
    }

    fn weight(&self, t: Template) -> u32 {
        let mut copy = *self;
        *copy.weight_mut(t)
    }

    fn total(&self) -> u64 {
        Template::ORDER.iter().map(|t| u64::from(self.weight(*t))).sum()
    }

    /// Errors when every weight is zero.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.total() == 0 { Err(SimError::EmptyMix) } else { Ok(()) }
    }
}

/// Simulator configuration (the `[sim]` section of the agent's configuration).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// RNG seed.
    pub seed: u64,
    /// Number of GPUs on the node.
    pub gpus: u32,
    /// GPU models, cycled over the GPUs (see [`GPU_MODELS`] for the names).
    pub gpu_models: Vec<String>,
    /// Which placement templates run, and how often.
    pub mix: ScenarioMix,
    /// When set, each job appends its log to `<log_dir>/<job_name>.log` (kernel lines go to
    /// `<log_dir>/kern.log`).
    pub log_dir: Option<PathBuf>,
    /// Node RAM, bytes.
    pub host_memory_bytes: u64,
    /// First simulated PID.
    pub pid_base: u32,
    /// Always-on small processes per GPU (inference workers, sidecars, MPS clients), each holding
    /// [`EXTRA_PROCESS_BYTES`] and never failing; PIDs from the top of the PID range. A load knob
    /// (the footprint benchmark runs 16 per GPU); 0 keeps the default simulation unchanged.
    pub extra_processes_per_gpu: u32,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            gpus: 8,
            gpu_models: vec!["H100-80GB".to_owned()],
            mix: ScenarioMix::default(),
            log_dir: None,
            host_memory_bytes: 512 * GIB,
            pid_base: 10_000,
            extra_processes_per_gpu: 0,
        }
    }
}

impl SimConfig {
    /// Checks every field; returns the GPU model of each GPU.
    pub fn validate(&self) -> Result<Vec<&'static GpuModel>, SimError> {
        let max = oomlens_schema::limits::MAX_GPUS as u32;
        if self.gpus == 0 || self.gpus > max {
            return Err(SimError::GpuCount { got: self.gpus, max });
        }
        if self.gpu_models.is_empty() {
            return Err(SimError::NoGpuModels { supported: gpu_models::supported() });
        }
        let models = self
            .gpu_models
            .iter()
            .map(|name| {
                gpu_models::lookup(name).ok_or_else(|| SimError::UnknownGpuModel {
                    name: name.clone(),
                    supported: gpu_models::supported(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.mix.validate()?;
        if self.host_memory_bytes < 8 * GIB {
            return Err(SimError::HostMemory(self.host_memory_bytes));
        }
        if self.pid_base == 0 || self.pid_base > MAX_PID_BASE {
            return Err(SimError::PidBase(self.pid_base));
        }
        if self.extra_processes_per_gpu > MAX_EXTRA_PROCESSES_PER_GPU {
            return Err(SimError::ExtraProcesses(self.extra_processes_per_gpu));
        }
        Ok((0..self.gpus as usize).map(|i| models[i % models.len()]).collect())
    }
}

/// A configuration the simulator cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A name in `gpu_models` is not in the catalog.
    #[error("unknown simulated GPU model {name:?} (supported: {supported})")]
    UnknownGpuModel {
        /// The name given.
        name: String,
        /// The supported names.
        supported: String,
    },
    /// `gpu_models` is empty.
    #[error("gpu_models is empty: name at least one simulated GPU model (supported: {supported})")]
    NoGpuModels {
        /// The supported names.
        supported: String,
    },
    /// `gpus` out of range.
    #[error("gpus must be between 1 and {max}, got {got}")]
    GpuCount {
        /// The value given.
        got: u32,
        /// The limit.
        max: u32,
    },
    /// Every mix weight is zero.
    #[error(
        "the scenario mix enables nothing: give at least one of static, batch, sequence, contention, \
         fragmentation, host_oom, healthy a weight above zero"
    )]
    EmptyMix,
    /// Too little host RAM to simulate.
    #[error("host_memory_bytes must be at least 8 GiB (8589934592), got {0}")]
    HostMemory(u64),
    /// `pid_base` out of range.
    #[error("pid_base must be between 1 and {MAX_PID_BASE}, got {0}")]
    PidBase(u32),
    /// `extra_processes_per_gpu` out of range.
    #[error("extra_processes_per_gpu must be at most {MAX_EXTRA_PROCESSES_PER_GPU}, got {0}")]
    ExtraProcesses(u32),
    /// The log directory cannot be created or written.
    #[error("cannot write simulator job logs to {}: {source}", path.display())]
    LogDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error from creating or writing it.
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug)]
struct GpuState {
    index: u32,
    model: &'static GpuModel,
    uuid: String,
    jobs: Vec<Job>,
    waiting: Vec<(u64, JobSpec)>,
    next_placement: Option<u64>,
    placements: u64,
    first_attempts: u32,
    temp_c: f64,
    /// The `extra_processes_per_gpu` processes (their `ts_ms` is set per reading).
    extras: Vec<ProcessSample>,
}

/// The fleet simulator for one node. See the module docs.
#[derive(Debug)]
pub struct Simulator {
    node: String,
    cfg: SimConfig,
    key: u64,
    node_tag: String,
    rng: SimRng,
    start_ms: i64,
    tick: u64,
    gpus: Vec<GpuState>,
    first_order: Vec<Template>,
    first_offset: usize,
    pending: Vec<OomEvent>,
    logs: Option<LogSink>,
    pid_counter: u64,
    job_counter: u64,
    scratch: Vec<(u32, u64)>,
}

impl Simulator {
    /// A simulator for `node`, starting at `start_ts_ms` (Unix epoch ms).
    pub fn new(node: &str, cfg: SimConfig, start_ts_ms: i64) -> Result<Self, SimError> {
        let models = cfg.validate()?;
        let logs = cfg.log_dir.as_deref().map(LogSink::open).transpose()?;
        let node_hash = fnv1a64(node.as_bytes());
        let mut rng = sim_rng(cfg.seed, node_hash);
        let first_order: Vec<Template> =
            Template::ORDER.into_iter().filter(|t| cfg.mix.weight(*t) > 0).collect();
        let first_offset = (node_hash % first_order.len().max(1) as u64) as usize;
        let gpus = models
            .iter()
            .enumerate()
            .map(|(i, model)| {
                let h = splitmix64(node_hash ^ splitmix64(i as u64 + 1));
                let h2 = splitmix64(h);
                GpuState {
                    index: i as u32,
                    model,
                    uuid: format!(
                        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                        h >> 32,
                        (h >> 16) & 0xffff,
                        h & 0xffff,
                        h2 >> 48,
                        h2 & 0xffff_ffff_ffff
                    ),
                    jobs: Vec::with_capacity(MAX_PROCESSES_PER_GPU),
                    waiting: Vec::with_capacity(MAX_PROCESSES_PER_GPU),
                    next_placement: Some(rng.random_range(0..=30)),
                    placements: 0,
                    first_attempts: 0,
                    temp_c: 30.0 + 4.0 * noise(&[node_hash, i as u64]),
                    extras: (0..cfg.extra_processes_per_gpu)
                        .map(|k| ProcessSample {
                            ts_ms: 0,
                            gpu_index: i as u32,
                            pid: extra_pid(i as u32, k),
                            name: "python3".to_owned(),
                            used_bytes: Some(EXTRA_PROCESS_BYTES),
                            labels: vec![oomlens_schema::Label {
                                key: "job".to_owned(),
                                value: format!("worker-{:04x}-{i}-{k}", node_hash & 0xffff),
                            }],
                        })
                        .collect(),
                }
            })
            .collect();
        Ok(Simulator {
            node: node.to_owned(),
            key: splitmix64(cfg.seed ^ node_hash),
            node_tag: format!("{:04x}", node_hash & 0xffff),
            rng,
            start_ms: start_ts_ms,
            tick: 0,
            gpus,
            first_order,
            first_offset,
            pending: Vec::new(),
            logs,
            pid_counter: 0,
            job_counter: 0,
            scratch: Vec::with_capacity(MAX_PROCESSES_PER_GPU),
            cfg,
        })
    }

    /// The node this simulator plays.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Simulated time reached so far (Unix epoch ms).
    pub fn now_ms(&self) -> i64 {
        self.start_ms + self.tick as i64 * TICK_MS
    }

    /// Host RAM in use (system share + every job's processes), bytes.
    pub fn host_used_bytes(&self) -> u64 {
        host::system_reserved(self.cfg.host_memory_bytes)
            + self.gpus.iter().flat_map(|g| g.jobs.iter()).map(|j| j.host.total()).sum::<u64>()
    }

    /// GPU memory held on each GPU by the extra processes.
    fn extra_bytes(&self) -> u64 {
        u64::from(self.cfg.extra_processes_per_gpu) * EXTRA_PROCESS_BYTES
    }

    /// Runs ticks up to `ts_ms`.
    fn advance_to(&mut self, ts_ms: i64) {
        let Some(target) = ts_ms.checked_sub(self.start_ms).map(|d| d / TICK_MS) else {
            return;
        };
        let Ok(target) = u64::try_from(target) else {
            return;
        };
        if target > self.tick + MAX_CATCHUP_TICKS {
            self.tick = target - MAX_CATCHUP_TICKS;
        }
        while self.tick < target {
            self.step();
        }
    }

    fn step(&mut self) {
        self.tick += 1;
        let now = self.now_ms();
        let host_free = self.cfg.host_memory_bytes.saturating_sub(self.host_used_bytes());
        for g in 0..self.gpus.len() {
            self.schedule(g);
            self.start_waiting(g);
            self.tick_jobs(g, now, host_free);
        }
        self.host_check(now);
        if self.pending.len() > MAX_PENDING_EVENTS {
            let excess = self.pending.len() - MAX_PENDING_EVENTS;
            self.pending.drain(..excess);
            tracing::warn!(dropped = excess, "simulator: events not collected in time were dropped");
        }
    }

    fn schedule(&mut self, g: usize) {
        let tick = self.tick;
        let gpu = &mut self.gpus[g];
        if !gpu.jobs.is_empty() || !gpu.waiting.is_empty() {
            return;
        }
        match gpu.next_placement {
            None => gpu.next_placement = Some(tick + self.rng.random_range(20..=100)),
            Some(t) if t <= tick => {
                let template = if gpu.placements == 0 && !self.first_order.is_empty() {
                    self.first_order[(g + self.first_offset) % self.first_order.len()]
                } else {
                    let total = self.cfg.mix.total().max(1);
                    let mut r = self.rng.random_range(0..total);
                    let mut chosen = Template::Healthy;
                    for t in Template::ORDER {
                        let w = u64::from(self.cfg.mix.weight(t));
                        if r < w {
                            chosen = t;
                            break;
                        }
                        r -= w;
                    }
                    chosen
                };
                let mut env = Env {
                    rng: &mut self.rng,
                    model: gpu.model,
                    host_slot: self.cfg.host_memory_bytes / 2 / (u64::from(self.cfg.gpus) * 3),
                    node_tag: &self.node_tag,
                    counter: &mut self.job_counter,
                };
                let jobs = templates::placement(template, &mut env);
                gpu.next_placement = None;
                if jobs.is_empty() && gpu.placements == 0 && gpu.first_attempts < 5 {
                    gpu.first_attempts += 1;
                    return;
                }
                gpu.placements += 1;
                gpu.waiting.extend(jobs.into_iter().map(|(delay, spec)| (tick + delay, spec)));
            }
            Some(_) => {}
        }
    }

    fn start_waiting(&mut self, g: usize) {
        let tick = self.tick;
        let extra = self.extra_bytes();
        let reserved_pids =
            if extra > 0 { u64::from(self.cfg.gpus) * u64::from(MAX_EXTRA_PROCESSES_PER_GPU) } else { 0 };
        let gpu = &mut self.gpus[g];
        let mut i = 0;
        while i < gpu.waiting.len() {
            let (at, ref spec) = gpu.waiting[i];
            let used: u64 = gpu.jobs.iter().map(Job::used).sum::<u64>() + extra;
            let free = gpu.model.capacity_bytes().saturating_sub(used);
            if at > tick || gpu.jobs.len() >= MAX_PROCESSES_PER_GPU {
                i += 1;
                continue;
            }
            if free < spec.context {
                // CUDA could not create a context; the launcher retries, for a minute at most.
                if tick > at + 600 {
                    gpu.waiting.remove(i);
                } else {
                    i += 1;
                }
                continue;
            }
            let (_, spec) = gpu.waiting.remove(i);
            let span = (PID_MAX - reserved_pids).saturating_sub(u64::from(self.cfg.pid_base)).max(1024);
            let pid = (u64::from(self.cfg.pid_base) + self.pid_counter % span) as u32;
            self.pid_counter += 1 + u64::from(spec.host.workers);
            let mut job = Job::new(spec, pid);
            job.start_log(&mut self.logs.as_mut(), gpu.index, gpu.model.name);
            gpu.jobs.push(job);
        }
    }

    fn tick_jobs(&mut self, g: usize, now: i64, host_free: u64) {
        let cap = self.gpus[g].model.capacity_bytes();
        let mut total: u64 = self.gpus[g].jobs.iter().map(Job::used).sum::<u64>() + self.extra_bytes();
        let mut i = 0;
        while i < self.gpus[g].jobs.len() {
            let gpu = &mut self.gpus[g];
            let job = &mut gpu.jobs[i];
            let others = total - job.used();
            let ctx = TickCtx {
                limit: cap.saturating_sub(others).saturating_sub(job.spec.context),
                host_free,
                rng: &mut self.rng,
                logs: self.logs.as_mut(),
                key: self.key,
            };
            match job.tick(ctx) {
                Outcome::Running => {
                    total = others + job.used();
                    i += 1;
                }
                Outcome::Finished => {
                    gpu.jobs[i].exit();
                    gpu.jobs.remove(i);
                    total = others;
                }
                Outcome::Oom(failure) => {
                    self.cuda_oom(g, i, others, failure, now);
                    let gpu = &mut self.gpus[g];
                    gpu.jobs[i].exit();
                    gpu.jobs.remove(i);
                    total = others;
                }
            }
        }
        // Thermal lag toward the utilisation-driven target (time constant ~10 s).
        let util = self.gpu_util(g).0;
        let gpu = &mut self.gpus[g];
        let target = 29.0 + 0.5 * util;
        gpu.temp_c += (target - gpu.temp_c) * 0.01;
    }

    fn cuda_oom(&mut self, g: usize, i: usize, others: u64, failure: job::Failure, now: i64) {
        let gpu = &self.gpus[g];
        let cap = gpu.model.capacity_bytes();
        let job = &gpu.jobs[i];
        let used = job.used();
        let free = cap.saturating_sub(others + used);
        self.scratch.clear();
        self.scratch.extend(gpu.jobs.iter().map(|j| (j.pid, j.used())));
        self.scratch.extend(gpu.extras.iter().map(|p| (p.pid, EXTRA_PROCESS_BYTES)));
        self.scratch.sort_unstable();
        let facts = FailureFacts {
            capacity: cap,
            context: job.spec.context,
            static_bytes: if matches!(job.spec.program, job::Program::Serve(_)) {
                job.shape.weights_bytes()
            } else {
                job.shape.static_bytes()
            },
            peak_alone: job.spec.peak_alone(&job.shape),
            requested: failure.requested,
            allocated: job.alloc.allocated(),
            reserved: job.alloc.reserved(),
            split: job.alloc.split(),
            others_used: others,
            kind: failure.kind,
        };
        let truth = classify(&facts);
        let oom = CudaOom {
            device: gpu.index,
            pid: job.pid,
            requested: failure.requested,
            capacity: cap,
            free,
            allocated: facts.allocated,
            reserved: facts.reserved,
            process_used: used,
            processes: &self.scratch,
        };
        let message = torch_oom_message(job.spec.torch, &oom);
        let script = if job.spec.labels.iter().any(|l| l.key.starts_with("k8s.")) {
            "/workspace/train.py"
        } else {
            "/home/user/project/train.py"
        };
        let text = format!("{}{message}\n", traceback(job.spec.torch, failure.phase, failure.kind, script));
        let event = OomEvent {
            event_id: self.rng.random(),
            ts_ms: now,
            kind: OomKind::CudaOom,
            source: EventSource::Simulator,
            framework: "pytorch".to_owned(),
            gpu_index: Some(gpu.index),
            pid: Some(job.pid),
            requested_bytes: Some(failure.requested),
            capacity_bytes: Some(cap),
            free_bytes: Some(free),
            allocated_bytes: Some(facts.allocated),
            reserved_bytes: Some(facts.reserved),
            process_used_bytes: Some(used),
            other_processes: self
                .scratch
                .iter()
                .filter(|(pid, _)| *pid != job.pid)
                .map(|&(pid, used_bytes)| OtherProcess { pid, used_bytes })
                .collect(),
            phase: failure.phase,
            job: job.shape.to_wire(),
            xid: None,
            host_rss_bytes: None,
            labels: job.spec.labels.clone(),
            truth: Some(truth),
            raw_message: message,
        };
        self.pending.push(event);
        let mut logs = self.logs.as_mut();
        self.gpus[g].jobs[i].log_failure(&mut logs, &text);
    }

    fn host_check(&mut self, now: i64) {
        let total = self.cfg.host_memory_bytes;
        let max_kills = self.gpus.iter().map(|g| g.jobs.len()).sum::<usize>();
        for _ in 0..max_kills {
            if self.host_used_bytes() <= total {
                return;
            }
            // The largest process on the node (ties: lowest pid).
            let mut victim: Option<(u64, u32, usize, usize, Option<u32>)> = None;
            for (g, gpu) in self.gpus.iter().enumerate() {
                for (i, job) in gpu.jobs.iter().enumerate() {
                    let (worker, rss) = job.host.largest();
                    let pid = job.pid + worker.map_or(0, |w| w + 1);
                    let better = match victim {
                        None => true,
                        Some((best_rss, best_pid, ..)) => {
                            rss > best_rss || (rss == best_rss && pid < best_pid)
                        }
                    };
                    if better {
                        victim = Some((rss, pid, g, i, worker));
                    }
                }
            }
            let Some((rss, pid, g, i, worker)) = victim else {
                return;
            };
            self.host_kill(g, i, pid, rss, worker, now);
        }
    }

    fn host_kill(&mut self, g: usize, i: usize, pid: u32, rss: u64, worker: Option<u32>, now: i64) {
        let job = &self.gpus[g].jobs[i];
        let kill = host::kill_numbers(pid, rss, worker.is_none(), job.spec.uid, job.spec.oom_score_adj);
        let line = messages::oom_kill_line(&kill);
        let rss_bytes = (kill.anon_rss_kb + kill.file_rss_kb + kill.shmem_rss_kb) * 1024;
        let event = OomEvent {
            event_id: self.rng.random(),
            ts_ms: now,
            kind: OomKind::HostOomKill,
            source: EventSource::Simulator,
            framework: "kernel".to_owned(),
            gpu_index: None,
            pid: Some(pid),
            host_rss_bytes: Some(rss_bytes),
            phase: Phase::DataLoading,
            job: job.shape.to_wire(),
            labels: job.spec.labels.clone(),
            truth: Some(Scenario::HostOom),
            raw_message: line,
            ..OomEvent::default()
        };
        self.pending.push(event);
        let job_text = match worker {
            Some(_) => format!(
                "Traceback (most recent call last):\n  File \"train.py\", line 366, in main\n    \
                 for step, batch in enumerate(loader):\nRuntimeError: DataLoader worker (pid {pid}) is killed by \
                 signal: Killed. \n"
            ),
            None => format!(
                "/bin/bash: line 1: {pid} Killed                  python train.py --config config.yaml\n"
            ),
        };
        let uptime = now - self.start_ms + 3_600_000;
        let kern = kernel_log(&kill, uptime);
        let mut logs = self.logs.as_mut();
        if let Some(sink) = logs.as_deref_mut() {
            sink.append("kern", &kern);
        }
        let gpu = &mut self.gpus[g];
        gpu.jobs[i].log_failure(&mut logs, &job_text);
        gpu.jobs[i].exit();
        gpu.jobs.remove(i);
    }

    /// Utilisation of GPU `g` (SM, memory controller), before noise.
    fn gpu_util(&self, g: usize) -> (f64, f64) {
        let gpu = &self.gpus[g];
        let (mut best, mut rest, mut mem) = (0.0f64, 0.0f64, 0.0f64);
        for j in &gpu.jobs {
            let (u, m) = j.utilisation(self.tick, self.key);
            if u > best {
                rest += best;
                best = u;
            } else {
                rest += u;
            }
            mem += m;
        }
        ((best + 0.25 * rest).min(100.0), mem.min(100.0))
    }

    fn gpu_sample(&self, g: usize, ts_ms: i64) -> GpuSample {
        let gpu = &self.gpus[g];
        let m = gpu.model;
        let used =
            m.driver_reserved_bytes() + gpu.jobs.iter().map(Job::used).sum::<u64>() + self.extra_bytes();
        let used = used.min(m.total_bytes());
        let (u, mem) = self.gpu_util(g);
        let n = |salt: u64| noise(&[self.key, u64::from(gpu.index), ts_ms as u64, salt]) - 0.5;
        let util = if u > 0.0 { (u + 6.0 * n(1)).clamp(0.0, 100.0) } else { 0.0 };
        let util_mem = if mem > 0.0 { (mem + 4.0 * n(2)).clamp(0.0, 100.0) } else { 0.0 };
        let load = util / 100.0;
        let watts = f64::from(m.idle_w) + f64::from(m.tdp_w - m.idle_w) * load.powf(0.9) * 0.96 + 4.0 * n(3);
        let sm = if util < 3.0 {
            m.idle_sm_mhz
        } else {
            let throttle = if gpu.temp_c > 80.0 { 120.0 } else { 0.0 };
            let mhz = f64::from(m.max_sm_mhz) - throttle - 45.0 * (n(4) + 0.5) * load;
            ((mhz / 15.0).round() * 15.0) as u32
        };
        let mem_clock = if util < 3.0 && m.key == "A10-24GB" { 405 } else { m.mem_mhz };
        GpuSample {
            ts_ms,
            gpu_index: gpu.index,
            memory_used_bytes: Some(used),
            memory_free_bytes: Some(m.total_bytes() - used),
            memory_total_bytes: Some(m.total_bytes()),
            memory_reserved_bytes: Some(m.driver_reserved_bytes()),
            util_gpu_pct: Some(util.round() as u8),
            util_mem_pct: Some(util_mem.round() as u8),
            power_mw: Some((watts.max(f64::from(m.idle_w) * 0.92) * 1000.0) as u32),
            temperature_c: Some(gpu.temp_c.round() as i16),
            sm_clock_mhz: Some(sm),
            mem_clock_mhz: Some(mem_clock),
        }
    }
}

/// PID of extra process `k` of GPU `g`: counted down from the top of the PID range, which job PIDs
/// then leave free.
fn extra_pid(g: u32, k: u32) -> u32 {
    let offset = u64::from(g) * u64::from(MAX_EXTRA_PROCESSES_PER_GPU) + u64::from(k);
    (PID_MAX - 1 - offset) as u32
}

impl Source for Simulator {
    fn name(&self) -> &'static str {
        "simulator"
    }

    fn inventory(&self) -> Vec<GpuInfo> {
        self.gpus
            .iter()
            .map(|g| GpuInfo {
                index: g.index,
                uuid: g.uuid.clone(),
                name: g.model.name.to_owned(),
                memory_total_bytes: g.model.total_bytes(),
                mig: false,
            })
            .collect()
    }

    fn sample(&mut self, ts_ms: i64) -> Reading {
        self.advance_to(ts_ms);
        let mut reading = Reading {
            gpu_samples: Vec::with_capacity(self.gpus.len()),
            process_samples: Vec::with_capacity(
                self.gpus.len() * (2 + self.cfg.extra_processes_per_gpu as usize),
            ),
            events: std::mem::take(&mut self.pending),
            missing_fields: 0,
            timed_out_calls: 0,
            ts_ms: Some(ts_ms),
        };
        for g in 0..self.gpus.len() {
            reading.gpu_samples.push(self.gpu_sample(g, ts_ms));
            let gpu = &self.gpus[g];
            reading.process_samples.extend(gpu.jobs.iter().map(|j| ProcessSample {
                ts_ms,
                gpu_index: gpu.index,
                pid: j.pid,
                name: j.spec.process_name.to_owned(),
                used_bytes: Some(j.used()),
                labels: j.spec.labels.clone(),
            }));
            reading.process_samples.extend(gpu.extras.iter().map(|p| ProcessSample { ts_ms, ..p.clone() }));
        }
        reading
    }
}
