//! One simulated GPU process (a training job or an inference server) and its life, one 100 ms tick
//! at a time.
//!
//! Training: **load** (weights, one layer chunk at a time over a few seconds) → **optimizer
//! init** (gradients and optimizer state, at the first step) → **steps**, each a forward pass
//! (activations and attention grow layer by layer), a backward pass (they are freed layer by
//! layer) and an optimizer step, 0.5–3 s in all → every `eval_every` steps an **eval** pass
//! (optionally followed by `empty_cache()`) → done after `total_steps`. Batch and sequence length
//! are chosen per step by the job's policies (fixed, ramping, variable, with rare long samples).
//!
//! Inference server: load → **serve**: the KV-cache pool grows chunk by chunk to its target while
//! every tick runs a transient prefill; the server exits after its lifetime.
//!
//! Any allocation the allocator cannot serve ends the process with a CUDA OOM.

use oomlens_schema::{Label, Phase};
use rand::Rng;

use super::allocator::{CachingAllocator, alloc_size};
use super::host::{HostProcs, HostSpec};
use super::logs::{LogSink, MAX_LINES_PER_JOB};
use super::memory::{AllocKind, Op, Shape};
use super::messages::{TorchVersion, py_sci, step_line};
use super::rng::{SimRng, noise};
use super::templates::Template;

/// Most a KV-cache pool can exceed its target through block rounding.
pub(crate) const KV_ROUNDING: u64 = 20 << 20;

/// How the batch size evolves over steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchPolicy {
    Fixed,
    /// Doubles every `every` steps (a batch-size finder).
    Doubling {
        every: u64,
    },
    /// Grows by `inc` every `every` steps (dynamic batching with a growing token budget).
    Linear {
        every: u64,
        inc: u32,
    },
}

/// How the sequence length is drawn each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeqPolicy {
    pub min: u32,
    pub max: u32,
    pub multiple: u32,
    /// `(seq, step)`: one very long sample at that step.
    pub long: Option<(u32, u64)>,
}

impl SeqPolicy {
    pub(crate) fn fixed(seq: u32) -> Self {
        SeqPolicy { min: seq, max: seq, multiple: 1, long: None }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TrainProgram {
    pub total_steps: u64,
    pub step_ms: (u32, u32),
    pub load_ticks: u32,
    pub opt_init_ticks: u32,
    pub eval_every: u64,
    pub eval_ticks: u32,
    pub eval_batch: u32,
    pub empty_cache_after_eval: bool,
    pub batch: BatchPolicy,
    pub seq: SeqPolicy,
}

impl TrainProgram {
    /// A training run without evaluation at a fixed batch: the shape of every failure template.
    pub(crate) fn without_eval(
        total_steps: u64,
        step_ms: (u32, u32),
        load_ticks: u32,
        opt_init_ticks: u32,
        seq: SeqPolicy,
    ) -> Self {
        TrainProgram {
            total_steps,
            step_ms,
            load_ticks,
            opt_init_ticks,
            eval_every: 0,
            eval_ticks: 1,
            eval_batch: 1,
            empty_cache_after_eval: false,
            batch: BatchPolicy::Fixed,
            seq,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ServeProgram {
    pub load_ticks: u32,
    pub kv_target: u64,
    pub kv_chunk: u64,
    pub prefill: u64,
    pub lifetime_ticks: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Program {
    Train(TrainProgram),
    Serve(ServeProgram),
}

/// Everything needed to start a process.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobSpec {
    pub template: Template,
    pub job_name: String,
    pub process_name: &'static str,
    pub labels: Vec<Label>,
    pub context: u64,
    /// Initial shape (training: the step policies change batch and seq).
    pub shape: Shape,
    pub churn: f64,
    pub min_frac: f64,
    /// Share of the allocated bytes left cached in split blocks (see `allocator`).
    pub slack: f64,
    pub torch: TorchVersion,
    pub host: HostSpec,
    pub program: Program,
    pub uid: u32,
    pub oom_score_adj: i32,
}

impl JobSpec {
    /// Peak memory of the process alone with its current shape, including the split remainders
    /// its allocator cannot release (see `truth`).
    pub(crate) fn peak_alone(&self, shape: &Shape) -> u64 {
        match self.program {
            Program::Train(p) => {
                let step = shape.step_peak().peak;
                let eval = if p.eval_every > 0 {
                    Shape { batch: p.eval_batch, seq: p.seq.max, ..*shape }.eval_peak().peak
                } else {
                    0
                };
                let peak = shape.static_bytes() + step.max(eval);
                self.context + peak + (peak as f64 * self.slack).ceil() as u64
            }
            // The pool's last block may be rounded up by at most one large-buffer block.
            Program::Serve(s) => {
                let peak = shape.weights_bytes() + s.kv_target + KV_ROUNDING + alloc_size(s.prefill);
                self.context + peak + (peak as f64 * self.slack).ceil() as u64
            }
        }
    }

    /// Upper bound of `context + reserved` over the whole life (see `allocator`): used to budget
    /// co-scheduled tenants.
    pub(crate) fn planned_bound(&self) -> u64 {
        match self.program {
            Program::Train(p) => {
                let max_shape = Shape { seq: p.seq.max, ..self.shape };
                let step = max_shape.step_peak();
                let eval = if p.eval_every > 0 {
                    Shape { batch: p.eval_batch, ..max_shape }.eval_peak()
                } else {
                    Default::default()
                };
                let max_alloc = step.max_alloc.max(eval.max_alloc).max(max_shape.max_static_alloc());
                let slack = (max_alloc as f64 / self.min_frac.max(1e-6)).ceil() as u64;
                let peak = max_shape.static_bytes() + step.peak.max(eval.peak);
                self.context + peak + (peak as f64 * self.slack).ceil() as u64 + slack
            }
            Program::Serve(s) => {
                let max_alloc =
                    alloc_size(s.kv_chunk).max(alloc_size(s.prefill)).max(self.shape.max_static_alloc());
                self.peak_alone(&self.shape) + max_alloc
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Load { t: u32, done: u32 },
    OptInit { t: u32, done: u32 },
    Step { t: u32, fwd: u32, bwd: u32 },
    Eval { t: u32, done: u32 },
    Serve { t: u64, kv: u64 },
}

/// A failed allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    pub requested: u64,
    pub kind: AllocKind,
    pub phase: Phase,
}

/// What a tick did to the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Running,
    Finished,
    Oom(Failure),
}

/// Inputs of one tick.
pub(crate) struct TickCtx<'a> {
    /// Most the allocator may reserve: capacity − other processes − own context.
    pub limit: u64,
    /// Node RAM not in use.
    pub host_free: u64,
    pub rng: &'a mut SimRng,
    pub logs: Option<&'a mut LogSink>,
    /// Noise key (seed, node) for log values.
    pub key: u64,
}

/// A running process.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub spec: JobSpec,
    pub pid: u32,
    pub shape: Shape,
    pub alloc: CachingAllocator,
    pub host: HostProcs,
    pub steps: u64,
    stage: Stage,
    log_lines: u32,
}

/// Items `[j·n/parts, (j+1)·n/parts)` of `n` split into `parts` ticks.
fn share(n: u32, parts: u32, j: u32) -> u32 {
    let parts = parts.max(1);
    let (n, j, p) = (u64::from(n), u64::from(j), u64::from(parts));
    (((j + 1) * n / p) - (j * n / p)) as u32
}

impl Job {
    pub(crate) fn new(spec: JobSpec, pid: u32) -> Self {
        let alloc = CachingAllocator::new(spec.churn, spec.min_frac, spec.slack);
        let host = HostProcs::new(spec.host);
        Job {
            shape: spec.shape,
            pid,
            alloc,
            host,
            steps: 0,
            stage: Stage::Load { t: 0, done: 0 },
            log_lines: 0,
            spec,
        }
    }

    /// GPU memory of the process: CUDA context + reserved.
    pub(crate) fn used(&self) -> u64 {
        self.spec.context + self.alloc.reserved()
    }

    pub(crate) fn phase(&self) -> Phase {
        match self.stage {
            Stage::Load { .. } => Phase::Load,
            Stage::OptInit { .. } => Phase::OptimizerInit,
            Stage::Step { t, fwd, bwd } => {
                if t < fwd {
                    Phase::Forward
                } else if t < fwd + bwd {
                    Phase::Backward
                } else {
                    Phase::OptimizerStep
                }
            }
            Stage::Eval { .. } => Phase::Eval,
            Stage::Serve { .. } => Phase::Inference,
        }
    }

    /// SM and memory-controller utilisation in percent (before noise).
    pub(crate) fn utilisation(&self, tick: u64, key: u64) -> (f64, f64) {
        match self.phase() {
            Phase::Load => (6.0, 4.0),
            Phase::OptimizerInit => (22.0, 15.0),
            Phase::Forward => (93.0, 38.0),
            Phase::Backward => (97.0, 52.0),
            Phase::OptimizerStep => (64.0, 71.0),
            Phase::Eval => (74.0, 33.0),
            Phase::Inference => {
                // Request load follows a slow wave plus bursts.
                let wave = 0.5 + 0.5 * ((tick as f64 / 600.0) + f64::from(self.pid % 7)).sin();
                let burst = noise(&[key, u64::from(self.pid), tick / 20]);
                let load = (0.15 + 0.6 * wave + 0.25 * burst).min(1.0);
                (95.0 * load, 60.0 * load)
            }
            _ => (0.0, 0.0),
        }
    }

    fn log(&mut self, logs: &mut Option<&mut LogSink>, text: &str, always: bool) {
        if let Some(sink) = logs.as_deref_mut()
            && (always || self.log_lines < MAX_LINES_PER_JOB)
        {
            self.log_lines = self.log_lines.saturating_add(1);
            sink.append(&self.spec.job_name, text);
        }
    }

    /// First line of the job's log.
    pub(crate) fn start_log(&mut self, logs: &mut Option<&mut LogSink>, gpu: u32, gpu_name: &str) {
        let s = self.shape;
        let text = match self.spec.program {
            Program::Train(_) => format!(
                "torch {} | cuda:{gpu} {gpu_name} | pid {} | model {} ({:.2}B params) {} {} ZeRO-{} dp={} \
                 flash_attention={} activation_checkpointing={} batch={} seq_len={}\n",
                self.spec.torch.version(),
                self.pid,
                s.arch.name,
                s.arch.params as f64 / 1e9,
                s.precision.as_str(),
                s.optimizer.as_str().unwrap_or("none"),
                s.zero_stage,
                s.dp,
                s.flash,
                s.ckpt,
                s.batch,
                s.seq
            ),
            Program::Serve(p) => format!(
                "INFO:     Started server process [{}]\nINFO:     torch {} | cuda:{gpu} {gpu_name} | model {} \
                 ({:.2}B params) {} | KV cache {:.2} GiB | max_model_len={}\n",
                self.pid,
                self.spec.torch.version(),
                s.arch.name,
                s.arch.params as f64 / 1e9,
                s.precision.as_str(),
                p.kv_target as f64 / (1u64 << 30) as f64,
                s.seq
            ),
        };
        self.log(logs, &text, true);
    }

    /// Writes failure output (always, however long the log is).
    pub(crate) fn log_failure(&mut self, logs: &mut Option<&mut LogSink>, text: &str) {
        self.log(logs, text, true);
    }

    /// Releases everything (process exit).
    pub(crate) fn exit(&mut self) {
        self.alloc.reset();
    }

    /// Advances one tick.
    pub(crate) fn tick(&mut self, mut ctx: TickCtx<'_>) -> Outcome {
        self.host.tick();
        let phase = self.phase();
        match self.advance(&mut ctx) {
            Ok(done) => {
                if done {
                    Outcome::Finished
                } else {
                    Outcome::Running
                }
            }
            Err((requested, kind)) => Outcome::Oom(Failure { requested, kind, phase }),
        }
    }

    fn advance(&mut self, ctx: &mut TickCtx<'_>) -> Result<bool, (u64, AllocKind)> {
        let limit = ctx.limit;
        let alloc = &mut self.alloc;
        let mut f = |op: Op| match op {
            Op::Alloc(n, kind) => alloc.malloc(n, limit).map_err(|e| (e.requested, kind)),
            Op::Free(n) => {
                alloc.free(n);
                Ok(())
            }
        };
        let s = self.shape;
        let layers = s.arch.layers;
        match (self.stage, self.spec.program) {
            (Stage::Load { t, done }, program) => {
                let ticks = match program {
                    Program::Train(p) => p.load_ticks,
                    Program::Serve(p) => p.load_ticks,
                }
                .max(1);
                let target = (u64::from(t + 1) * u64::from(layers) / u64::from(ticks)) as u32;
                for _ in done..target.min(layers) {
                    f(Op::Alloc(s.weight_chunk(), AllocKind::Weights))?;
                }
                self.stage = if t + 1 >= ticks {
                    match program {
                        Program::Train(_) => Stage::OptInit { t: 0, done: 0 },
                        Program::Serve(_) => Stage::Serve { t: 0, kv: 0 },
                    }
                } else {
                    Stage::Load { t: t + 1, done: target }
                };
            }
            (Stage::OptInit { t, done }, Program::Train(p)) => {
                let ticks = p.opt_init_ticks.max(1);
                let target = (u64::from(t + 1) * u64::from(layers) / u64::from(ticks)) as u32;
                for _ in done..target.min(layers) {
                    f(Op::Alloc(s.grad_chunk(), AllocKind::Grads))?;
                    f(Op::Alloc(s.optim_chunk(), AllocKind::OptimizerState))?;
                }
                if t + 1 >= ticks {
                    self.start_step(ctx, p);
                } else {
                    self.stage = Stage::OptInit { t: t + 1, done: target };
                }
            }
            (Stage::Step { t, fwd, bwd }, Program::Train(p)) => {
                if t < fwd {
                    for _ in 0..share(layers, fwd, t) {
                        s.forward_layer(&mut f)?;
                    }
                    if t + 1 == fwd {
                        s.forward_end(&mut f)?;
                    }
                } else if t < fwd + bwd {
                    let j = t - fwd;
                    if j == 0 {
                        s.backward_begin(&mut f)?;
                    }
                    for _ in 0..share(layers, bwd, j) {
                        s.backward_layer(&mut f)?;
                    }
                } else {
                    s.optimizer_step(&mut f)?;
                }
                if t < fwd + bwd {
                    self.stage = Stage::Step { t: t + 1, fwd, bwd };
                } else {
                    return Ok(self.end_step(ctx, p));
                }
            }
            (Stage::Eval { t, done }, Program::Train(p)) => {
                let es = Shape { batch: p.eval_batch, seq: p.seq.max, ..s };
                let ticks = p.eval_ticks.max(1);
                let target = (u64::from(t + 1) * u64::from(layers) / u64::from(ticks)) as u32;
                for _ in done..target.min(layers) {
                    es.eval_layer(&mut f)?;
                }
                if t + 1 >= ticks {
                    es.eval_end(&mut f)?;
                    if p.empty_cache_after_eval {
                        self.alloc.empty_cache();
                    }
                    let loss = self.loss(ctx.key) + 0.08;
                    let line = format!("eval step {} loss {loss:.4}\n", self.steps);
                    self.log(&mut ctx.logs, &line, false);
                    self.start_step(ctx, p);
                } else {
                    self.stage = Stage::Eval { t: t + 1, done: target };
                }
            }
            (Stage::Serve { t, kv }, Program::Serve(p)) => {
                let mut kv = kv;
                if kv < p.kv_target {
                    let n = p.kv_chunk.min(p.kv_target - kv);
                    f(Op::Alloc(n, AllocKind::KvCache))?;
                    kv += alloc_size(n);
                }
                f(Op::Alloc(p.prefill, AllocKind::Activation))?;
                f(Op::Free(p.prefill))?;
                if t % 300 == 299 {
                    let usage = noise(&[ctx.key, u64::from(self.pid), t]) * 60.0 + 20.0;
                    let line = format!(
                        "INFO {:>6}s metrics: Running: {} reqs, Pending: 0 reqs, GPU KV cache usage: {usage:.1}%\n",
                        t / 10,
                        (usage / 4.0) as u32
                    );
                    self.log(&mut ctx.logs, &line, false);
                }
                if t + 1 >= p.lifetime_ticks {
                    self.log(&mut ctx.logs, "INFO:     Shutting down\n", true);
                    return Ok(true);
                }
                self.stage = Stage::Serve { t: t + 1, kv };
            }
            // A training stage never pairs with a serving program and vice versa.
            (_, _) => return Ok(true),
        }
        Ok(false)
    }

    fn loss(&self, key: u64) -> f64 {
        let x = self.steps as f64;
        1.9 + 7.5 * (-x / 250.0).exp() + 0.08 * (noise(&[key, u64::from(self.pid), self.steps]) - 0.5)
    }

    fn lr(&self, total: u64) -> f64 {
        let x = self.steps as f64;
        if x < 100.0 {
            3e-4 * (x + 1.0) / 100.0
        } else {
            let progress = ((x - 100.0) / (total.max(101) as f64 - 100.0)).min(1.0);
            3e-5 + 0.5 * (3e-4 - 3e-5) * (1.0 + (std::f64::consts::PI * progress).cos())
        }
    }

    /// Picks the next step's shape and timing.
    fn start_step(&mut self, ctx: &mut TickCtx<'_>, p: TrainProgram) {
        self.host.start_training(ctx.host_free);
        let batch = match p.batch {
            BatchPolicy::Fixed => self.spec.shape.batch,
            BatchPolicy::Doubling { every } => {
                let doublings = (self.steps / every.max(1)).min(20) as u32;
                self.spec.shape.batch.saturating_mul(1 << doublings)
            }
            BatchPolicy::Linear { every, inc } => {
                let n = (self.steps / every.max(1)).min(100_000) as u32;
                self.spec.shape.batch.saturating_add(inc.saturating_mul(n))
            }
        };
        let seq = match p.seq.long {
            Some((long, at)) if self.steps == at => long,
            _ if p.seq.max > p.seq.min => {
                let m = p.seq.multiple.max(1);
                let k = ctx.rng.random_range(p.seq.min / m..=p.seq.max / m);
                (k * m).clamp(p.seq.min, p.seq.max)
            }
            _ => p.seq.max,
        };
        self.shape.batch = batch.max(1);
        self.shape.seq = seq.max(1);
        let ticks = (ctx.rng.random_range(p.step_ms.0..=p.step_ms.1.max(p.step_ms.0)) / 100).max(3);
        let fwd = (ticks / 3).max(1);
        let bwd = (ticks - fwd - 1).max(1);
        self.stage = Stage::Step { t: 0, fwd, bwd };
    }

    /// Finishes a step; true when the job is done.
    fn end_step(&mut self, ctx: &mut TickCtx<'_>, p: TrainProgram) -> bool {
        let prev = (self.shape.batch, self.shape.seq);
        self.steps += 1;
        if self.steps.is_multiple_of(10) {
            let line = step_line(self.steps, self.loss(ctx.key), self.lr(p.total_steps));
            self.log(&mut ctx.logs, &(line + "\n"), false);
        }
        if self.steps >= p.total_steps {
            let line = format!(
                "training finished after {} steps (final lr {})\n",
                self.steps,
                py_sci(self.lr(p.total_steps))
            );
            self.log(&mut ctx.logs, &line, true);
            return true;
        }
        if p.eval_every > 0 && self.steps.is_multiple_of(p.eval_every) {
            self.alloc.end_step(false);
            self.stage = Stage::Eval { t: 0, done: 0 };
        } else {
            self.start_step(ctx, p);
            self.alloc.end_step((self.shape.batch, self.shape.seq) != prev);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_covers_all_layers() {
        for n in [1u32, 7, 32, 80] {
            for parts in [1u32, 3, 10, 33] {
                assert_eq!((0..parts).map(|j| share(n, parts, j)).sum::<u32>(), n);
            }
        }
    }
}
