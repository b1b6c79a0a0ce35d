//! Job templates: what a GPU runs next, sized against its capacity.
//!
//! A GPU runs one *placement* at a time: one to three processes started together (tenants may
//! arrive later), and the next placement starts a few seconds after the last of them exits. Each
//! placement comes from one [`Template`]:
//!
//! * **Healthy** — a training job sized to at most 92 % of the GPU, alone or with one or two tenants (an
//!   inference server whose KV cache grows, or a notebook). Every tenant is budgeted with its
//!   allocator bound (`allocator` docs), so a healthy placement never runs out of memory.
//! * **Static** — a model whose weights + gradients + optimizer state exceed the GPU by 15–150 %
//!   (no or too little ZeRO sharding): fails at load or optimizer init, whatever the batch.
//! * **Batch** — a batch-size finder / dynamic batching: the batch doubles (or grows linearly)
//!   every few steps until the activations no longer fit (FlashAttention on, so the activations
//!   and logits fail, not attention).
//! * **Sequence** — long-document fine-tuning without FlashAttention (activation checkpointing
//!   on, batch 1–2): ordinary samples fit, then one very long sample makes a layer's seq² score
//!   matrix a single allocation larger than the GPU.
//! * **Contention** — a healthy training job (50–62 % of the GPU, `empty_cache()` after each eval)
//!   and an inference server whose KV cache grows so that both together need 12–22 % more than the
//!   GPU, while each fits alone: either the server arrives 10–40 s after the training job and grows
//!   slowly, or it is up first and the training job arrives 20–35 s later into a full GPU.
//! * **Fragmentation** — a modest job (≤ 35 % of the GPU) with a different sequence length every
//!   step: its cache fragments (`churn` 6–12 % per step) until `reserved` fills the GPU while a
//!   request fails with enough memory cached.
//! * **HostOom** — a healthy-sized training job whose dataloader (pinned prefetch queue and forked
//!   workers) grows host RSS until the node's RAM is exhausted 40–120 s after training starts.
//!
//! Names and labels look like real workloads (Kubernetes pods or Slurm jobs); they never reveal the
//! template.

use oomlens_schema::{Label, Scenario};
use rand::Rng;

use super::allocator::{MAX_STRANDED, alloc_size};
use super::gpu_models::GpuModel;
use super::host::HostSpec;
use super::job::{BatchPolicy, JobSpec, KV_ROUNDING, Program, SeqPolicy, ServeProgram, TrainProgram};
use super::memory::{ARCHS, Arch, Optimizer, Precision, Shape};
use super::messages::TorchVersion;
use super::rng::SimRng;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// What a placement is meant to provoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Template {
    Static,
    Batch,
    Sequence,
    Contention,
    Fragmentation,
    HostOom,
    Healthy,
}

impl Template {
    /// Fixed order (round-robin of first placements, weights).
    pub(crate) const ORDER: [Template; 7] = [
        Template::Static,
        Template::Batch,
        Template::Sequence,
        Template::Contention,
        Template::Fragmentation,
        Template::HostOom,
        Template::Healthy,
    ];

    /// The scenario the template provokes (None for healthy).
    pub(crate) fn scenario(self) -> Option<Scenario> {
        match self {
            Template::Static => Some(Scenario::Static),
            Template::Batch => Some(Scenario::Batch),
            Template::Sequence => Some(Scenario::Sequence),
            Template::Contention => Some(Scenario::Contention),
            Template::Fragmentation => Some(Scenario::Fragmentation),
            Template::HostOom => Some(Scenario::HostOom),
            Template::Healthy => None,
        }
    }

    pub(crate) fn from_scenario(s: Scenario) -> Option<Template> {
        Template::ORDER.into_iter().find(|t| t.scenario() == Some(s))
    }
}

/// What sizing needs to know.
pub(crate) struct Env<'a> {
    pub rng: &'a mut SimRng,
    pub model: &'static GpuModel,
    /// Host RAM one job may use in steady state.
    pub host_slot: u64,
    /// Short node tag for unique job names.
    pub node_tag: &'a str,
    /// Job counter (unique names, Slurm ids).
    pub counter: &'a mut u64,
}

impl Env<'_> {
    fn cap(&self) -> u64 {
        self.model.capacity_bytes()
    }

    fn frac(&mut self, lo: f64, hi: f64) -> f64 {
        self.rng.random_range(lo..hi)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.random_range(0..items.len())]
    }
}

/// The jobs of one placement, each with its start delay in ticks.
pub(crate) fn placement(t: Template, env: &mut Env<'_>) -> Vec<(u64, JobSpec)> {
    let cap = env.cap() as f64;
    match t {
        Template::Static => static_job(env).map(|j| vec![(0, j)]).unwrap_or_default(),
        Template::Batch => batch_job(env).map(|j| vec![(0, j)]).unwrap_or_default(),
        Template::Sequence => sequence_job(env).map(|j| vec![(0, j)]).unwrap_or_default(),
        Template::Fragmentation => fragmentation_job(env).map(|j| vec![(0, j)]).unwrap_or_default(),
        Template::HostOom => {
            let budget = (cap * env.frac(0.4, 0.7)) as u64;
            let leak = env.frac(40.0, 120.0);
            let opts = TrainOpts { host_leak: Some(leak), ..TrainOpts::healthy(Template::HostOom) };
            healthy_train(env, budget, opts).map(|j| vec![(0, j)]).unwrap_or_default()
        }
        Template::Contention => contention(env),
        Template::Healthy => healthy(env),
    }
}

/// The process's GPU memory outside PyTorch's allocator: the CUDA context (a few hundred MiB,
/// larger on large GPUs) and the cuBLAS / cuDNN workspaces (32–256 MiB).
fn context(env: &mut Env<'_>) -> u64 {
    let base = if env.cap() > 60 * GIB { 480 * MIB } else { 384 * MIB };
    base + env.rng.random_range(0..=6u64) * 32 * MIB + env.rng.random_range(1..=8u64) * 32 * MIB
}

/// NCCL's buffers of a data-parallel job (one ring per peer, 0.5–1.5 GiB), outside the allocator.
fn nccl(env: &mut Env<'_>, shape: &Shape) -> u64 {
    if shape.dp > 1 { 512 * MIB + env.rng.random_range(0..=4u64) * 256 * MIB } else { 0 }
}

/// Split remainders a training job's allocator cannot release (share of its allocated bytes,
/// see `allocator`): most jobs a few tenths of a percent to a few percent.
fn train_slack(env: &mut Env<'_>) -> f64 {
    let r: f64 = env.rng.random();
    0.002 + (MAX_STRANDED - 0.002) * r * r
}

fn precision(env: &mut Env<'_>, allow_fp32: bool) -> Precision {
    let r: f64 = env.rng.random();
    if r < 0.75 {
        Precision::Bf16
    } else if r < 0.88 || !allow_fp32 {
        Precision::Fp16
    } else {
        Precision::Fp32
    }
}

fn optimizer(env: &mut Env<'_>) -> Optimizer {
    let r: f64 = env.rng.random();
    if r < 0.7 {
        Optimizer::AdamW
    } else if r < 0.9 {
        Optimizer::Adam
    } else {
        Optimizer::Sgd
    }
}

fn parallel(env: &mut Env<'_>) -> (u8, u32) {
    env.pick(&[(0, 1), (0, 1), (0, 1), (1, 2), (1, 4), (2, 4), (2, 8), (3, 8), (3, 16)])
}

fn torch(env: &mut Env<'_>) -> TorchVersion {
    env.pick(&TorchVersion::ALL)
}

/// The largest of up to three largest archs that satisfy `fits`.
fn pick_arch(env: &mut Env<'_>, fits: impl Fn(&Arch) -> bool) -> Option<Arch> {
    let ok: Vec<Arch> = ARCHS.iter().copied().filter(|a| fits(a)).collect();
    if ok.is_empty() {
        return None;
    }
    let from = ok.len().saturating_sub(3);
    Some(env.pick(&ok[from..]))
}

/// Largest `b` in `1..=max` with `ok(b)`, assuming `ok` is monotone (true then false).
fn largest_batch(max: u32, ok: impl Fn(u32) -> bool) -> Option<u32> {
    if !ok(1) {
        return None;
    }
    let (mut lo, mut hi) = (1u32, max);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Train,
    Serve,
    Notebook,
}

const TEAMS: &[&str] = &["ml-research", "nlp", "vision", "speech", "recsys", "foundation"];
const USERS: &[&str] = &["alice", "bchen", "dmitri", "eva", "farah", "gus", "hiro", "ines", "jonas", "kwame"];
const TASKS: &[&str] = &["pretrain", "sft", "dpo", "finetune", "distill", "continued-pt"];
const ALNUM: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn suffix(env: &mut Env<'_>, n: usize) -> String {
    (0..n).map(|_| char::from(ALNUM[env.rng.random_range(0..ALNUM.len())])).collect()
}

/// Job name, labels, uid and oom_score_adj of a new workload.
fn identity(env: &mut Env<'_>, base: &str, kind: Kind) -> (String, Vec<Label>, u32, i32) {
    *env.counter += 1;
    let n = *env.counter;
    let job_name = format!("{base}-{}-{n}", env.node_tag);
    let user = env.pick(USERS);
    let label = |k: &str, v: String| Label { key: k.to_owned(), value: v };
    let mut labels = vec![label("job", job_name.clone())];
    if env.rng.random_bool(0.6) {
        let team = if kind == Kind::Serve { "inference" } else { env.pick(TEAMS) };
        let pod = match kind {
            Kind::Train => format!("{job_name}-worker-0"),
            Kind::Serve => format!("{job_name}-{}-{}", suffix(env, 10), suffix(env, 5)),
            Kind::Notebook => format!("jupyter-{user}-{}", suffix(env, 5)),
        };
        let container = match kind {
            Kind::Train => "trainer",
            Kind::Serve => "server",
            Kind::Notebook => "notebook",
        };
        labels.push(label("k8s.namespace", team.to_owned()));
        labels.push(label("k8s.pod", pod));
        labels.push(label("k8s.container", container.to_owned()));
        let adj = env.pick(&[-997, 936, 969, 984]);
        (job_name, labels, 0, adj)
    } else {
        let id = 400_000 + n * 17 + env.rng.random_range(0..17u64);
        labels.push(label("slurm.job_id", id.to_string()));
        labels.push(label("slurm.user", user.to_owned()));
        let uid = 1000 + (USERS.iter().position(|u| *u == user).unwrap_or(0) as u32) * 7;
        (job_name, labels, uid, 0)
    }
}

fn host_spec(env: &mut Env<'_>, workers: u32, leak: Option<f64>) -> HostSpec {
    let slot = env.host_slot;
    let main_rss = ((env.frac(3.0, 10.0) * GIB as f64) as u64).min(slot / 10 * 6);
    let worker_rss = if workers == 0 {
        0
    } else {
        ((env.frac(0.4, 1.5) * GIB as f64) as u64).min(slot / 10 * 4 / u64::from(workers))
    };
    HostSpec { main_rss, workers, worker_rss, leak_secs: leak }
}

fn base_shape(arch: Arch, precision: Precision, optimizer: Optimizer, (zero, dp): (u8, u32)) -> Shape {
    Shape { arch, precision, optimizer, zero_stage: zero, dp, flash: true, ckpt: false, batch: 1, seq: 2048 }
}

#[derive(Debug, Clone, Copy)]
struct TrainOpts {
    template: Template,
    force_flash: bool,
    allow_variable: bool,
    eval_every: Option<(u64, u64)>,
    empty_cache: bool,
    step_ms: (u32, u32),
    total_steps: (u64, u64),
    host_leak: Option<f64>,
    notebook: bool,
    full_batch: bool,
}

impl TrainOpts {
    fn healthy(template: Template) -> Self {
        TrainOpts {
            template,
            force_flash: false,
            allow_variable: true,
            eval_every: Some((50, 200)),
            empty_cache: false,
            step_ms: (500, 3000),
            total_steps: (150, 1500),
            host_leak: None,
            notebook: false,
            full_batch: false,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn train_spec(
    env: &mut Env<'_>,
    template: Template,
    base: &str,
    kind: Kind,
    context: u64,
    shape: Shape,
    program: TrainProgram,
    churn: f64,
    min_frac: f64,
    host: HostSpec,
) -> JobSpec {
    let (job_name, labels, uid, oom_score_adj) = identity(env, base, kind);
    let process_name = env.pick(&["python", "python3", "python"]);
    let context = context + nccl(env, &shape);
    let slack = train_slack(env);
    JobSpec {
        template,
        job_name,
        process_name,
        labels,
        context,
        shape,
        churn,
        min_frac,
        slack,
        torch: torch(env),
        host,
        program: Program::Train(program),
        uid,
        oom_score_adj,
    }
}

fn step_range(env: &mut Env<'_>, (lo, hi): (u32, u32)) -> (u32, u32) {
    let a = env.rng.random_range(lo..=hi);
    (a, (a + 400).min(hi.max(a)))
}

/// A training job whose allocator bound stays within `budget` (never OOMs alone or with budgeted
/// tenants).
fn healthy_train(env: &mut Env<'_>, budget: u64, o: TrainOpts) -> Option<JobSpec> {
    for _ in 0..16 {
        let prec = precision(env, true);
        let opt = optimizer(env);
        let par = parallel(env);
        let flash = o.force_flash || env.rng.random_bool(0.8);
        let ckpt = env.rng.random_bool(0.4);
        let ctx = context(env);
        let avail = budget.checked_sub(ctx)?;
        let Some(arch) =
            pick_arch(env, |a| base_shape(*a, prec, opt, par).static_bytes() * 100 <= avail * 55)
        else {
            continue;
        };
        let seq_max = env.pick(&[512, 1024, 2048, 4096]);
        let variable = o.allow_variable && env.rng.random_bool(0.3);
        let (seq, churn, min_frac) = if variable {
            (SeqPolicy { min: (seq_max / 4).max(128), max: seq_max, multiple: 64, long: None }, 0.03, 0.5)
        } else {
            (SeqPolicy::fixed(seq_max), 0.0, 1.0)
        };
        let eval_every = match o.eval_every {
            Some((lo, hi)) if env.rng.random_bool(if o.empty_cache { 1.0 } else { 0.5 }) => {
                env.rng.random_range(lo..=hi)
            }
            _ => 0,
        };
        let program = TrainProgram {
            total_steps: env.rng.random_range(o.total_steps.0..=o.total_steps.1),
            step_ms: step_range(env, o.step_ms),
            load_ticks: env.rng.random_range(20..=100),
            opt_init_ticks: env.rng.random_range(3..=20),
            eval_every,
            eval_ticks: env.rng.random_range(10..=60),
            eval_batch: 2,
            empty_cache_after_eval: o.empty_cache,
            batch: BatchPolicy::Fixed,
            seq,
        };
        let shape = Shape { flash, ckpt, seq: seq_max, ..base_shape(arch, prec, opt, par) };
        let workers = if o.notebook { 0 } else { env.rng.random_range(2..=8) };
        let host = host_spec(env, workers, o.host_leak);
        let base = if o.notebook {
            format!("notebook-{}", env.pick(USERS))
        } else {
            format!("{}-{}", arch.name, env.pick(TASKS))
        };
        let kind = if o.notebook { Kind::Notebook } else { Kind::Train };
        let spec = train_spec(env, o.template, &base, kind, ctx, shape, program, churn, min_frac, host);
        let target = (budget as f64 * env.frac(0.75, 0.95)) as u64;
        let with_batch = |b: u32| {
            let mut s = spec.clone();
            s.shape.batch = b;
            if let Program::Train(p) = &mut s.program {
                p.eval_batch = b.saturating_mul(2);
            }
            s
        };
        let Some(b_max) = largest_batch(512, |b| with_batch(b).planned_bound() <= target) else {
            continue;
        };
        let b = if o.full_batch { b_max } else { env.rng.random_range((b_max / 2).max(1)..=b_max) };
        return Some(with_batch(b));
    }
    None
}

/// An inference server (weights + growing KV cache) within `budget`; `slack` reserves the
/// allocator bound (healthy tenants) or not (the contention neighbour sizes itself to the edge).
fn serve_job(env: &mut Env<'_>, budget: u64, growth_ticks: u64, slack: bool) -> Option<JobSpec> {
    for _ in 0..8 {
        let ctx = context(env);
        let r: f64 = env.rng.random();
        let serve_slack = 0.002 + 0.028 * r * r;
        // The pool and its split remainders stay within the budget.
        let avail = (budget.checked_sub(ctx)? as f64 / (1.0 + serve_slack)) as u64;
        let par = (0, 1);
        let Some(arch) = pick_arch(env, |a| {
            base_shape(*a, Precision::Bf16, Optimizer::None, par).weights_bytes() * 2 <= avail
        }) else {
            continue;
        };
        let seq = env.pick(&[2048, 4096, 8192]);
        let shape = Shape { batch: 256, seq, ..base_shape(arch, Precision::Bf16, Optimizer::None, par) };
        let prefill = 34 * 8192 * u64::from(arch.hidden);
        let kv0 = avail.checked_sub(shape.weights_bytes() + alloc_size(prefill))?;
        let chunk0 = alloc_size(kv0.div_ceil(growth_ticks.max(1)).max(20 * MIB));
        let slack_bytes = if slack {
            alloc_size(chunk0).max(alloc_size(prefill)).max(shape.max_static_alloc()) + 64 * MIB
        } else {
            0
        };
        let kv_target = kv0.saturating_sub(slack_bytes + KV_ROUNDING);
        if kv_target < 512 * MIB {
            continue;
        }
        let program = ServeProgram {
            load_ticks: env.rng.random_range(30..=150),
            kv_target,
            // Whole 2 MiB blocks of at least 20 MiB, so the pool's bytes are what it allocates.
            kv_chunk: alloc_size(kv_target.div_ceil(growth_ticks.max(1)).max(20 * MIB)),
            prefill,
            lifetime_ticks: env.rng.random_range(3000..=6000),
        };
        let front = env.pick(&["vllm", "vllm", "tgi"]);
        let base = format!("{front}-{}", arch.name);
        let (job_name, labels, uid, oom_score_adj) = identity(env, &base, Kind::Serve);
        let host = host_spec(env, 0, None);
        return Some(JobSpec {
            template: Template::Healthy,
            job_name,
            process_name: if front == "tgi" { "text-generation-server" } else { "python3" },
            labels,
            context: ctx,
            shape,
            churn: 0.0,
            min_frac: 1.0,
            // A serving engine allocates its KV cache in one pool: the slack comes from its
            // prefill activations, a few tenths of a percent to 3 %.
            slack: serve_slack,
            torch: env.pick(&[TorchVersion::V2_3, TorchVersion::V2_5]),
            host,
            program: Program::Serve(program),
            uid,
            oom_score_adj,
        });
    }
    None
}

fn healthy(env: &mut Env<'_>) -> Vec<(u64, JobSpec)> {
    let cap = env.cap();
    let usable = cap / 100 * 92;
    let tenants = if env.rng.random_bool(0.45) { env.rng.random_range(1..=2u32) } else { 0 };
    let share = if tenants == 0 { env.frac(0.55, 1.0) } else { env.frac(0.4, 0.6) };
    let Some(primary) =
        healthy_train(env, (usable as f64 * share) as u64, TrainOpts::healthy(Template::Healthy))
    else {
        return Vec::new();
    };
    let mut left = usable.saturating_sub(primary.planned_bound());
    let mut out = vec![(0, primary)];
    for i in 0..tenants {
        let budget = left / u64::from(tenants - i);
        let delay = env.rng.random_range(0..=600);
        let tenant = if env.rng.random_bool(0.5) {
            let growth = env.rng.random_range(100..=600);
            serve_job(env, budget, growth, true)
        } else {
            let o = TrainOpts {
                eval_every: None,
                step_ms: (2000, 4000),
                total_steps: (30, 200),
                notebook: true,
                ..TrainOpts::healthy(Template::Healthy)
            };
            healthy_train(env, budget, o)
        };
        if let Some(t) = tenant {
            left = left.saturating_sub(t.planned_bound());
            out.push((delay, t));
        }
    }
    out
}

fn static_job(env: &mut Env<'_>) -> Option<JobSpec> {
    let cap = env.cap();
    let prec = precision(env, true);
    let opt = if env.rng.random_bool(0.9) { Optimizer::AdamW } else { Optimizer::Sgd };
    let par = if env.rng.random_bool(0.7) { (0, 1) } else { (1, 2) };
    let ctx = context(env);
    let ratio = env.frac(1.15, 2.5);
    let need = (cap as f64 * ratio) as u64;
    let arch = ARCHS
        .iter()
        .copied()
        .find(|a| ctx + base_shape(*a, prec, opt, par).static_bytes() >= need)
        .unwrap_or(ARCHS[ARCHS.len() - 1]);
    let shape = Shape { batch: env.rng.random_range(1..=4), ckpt: true, ..base_shape(arch, prec, opt, par) };
    let program = TrainProgram::without_eval(
        1000,
        (1500, 3000),
        env.rng.random_range(30..=120),
        env.rng.random_range(5..=20),
        SeqPolicy::fixed(2048),
    );
    let host = host_spec(env, 4, None);
    let base = format!("{}-{}", arch.name, env.pick(TASKS));
    Some(train_spec(env, Template::Static, &base, Kind::Train, ctx, shape, program, 0.0, 1.0, host))
}

fn batch_job(env: &mut Env<'_>) -> Option<JobSpec> {
    let cap = env.cap();
    for _ in 0..16 {
        let prec = precision(env, false);
        let par = parallel(env);
        let ctx = context(env);
        let Some(arch) =
            pick_arch(env, |a| (ctx + base_shape(*a, prec, Optimizer::AdamW, par).static_bytes()) * 2 <= cap)
        else {
            continue;
        };
        let seq = env.pick(&[1024, 2048, 4096]);
        let shape =
            Shape { seq, ckpt: env.rng.random_bool(0.3), ..base_shape(arch, prec, Optimizer::AdamW, par) };
        let program = TrainProgram::without_eval(
            100_000,
            step_range(env, (500, 3000)),
            env.rng.random_range(20..=100),
            env.rng.random_range(3..=15),
            SeqPolicy::fixed(seq),
        );
        let host = host_spec(env, 4, None);
        let base = format!("{}-{}", arch.name, env.pick(TASKS));
        let mut spec =
            train_spec(env, Template::Batch, &base, Kind::Train, ctx, shape, program, 0.0, 1.0, host);
        let fits = |b: u32| spec.peak_alone(&Shape { batch: b, ..shape }) <= cap;
        let Some(b_fit) = largest_batch(4096, fits) else {
            continue;
        };
        if b_fit < 3 {
            continue;
        }
        let b0 = (b_fit / env.rng.random_range(4..=10)).max(1);
        spec.shape.batch = b0;
        let policy = if env.rng.random_bool(0.6) {
            BatchPolicy::Doubling { every: env.rng.random_range(2..=4) }
        } else {
            BatchPolicy::Linear { every: env.rng.random_range(1..=2), inc: b0 }
        };
        if let Program::Train(p) = &mut spec.program {
            p.batch = policy;
        }
        return Some(spec);
    }
    None
}

fn sequence_job(env: &mut Env<'_>) -> Option<JobSpec> {
    let cap = env.cap();
    for _ in 0..16 {
        let prec = precision(env, false);
        let par = parallel(env);
        let ctx = context(env);
        let Some(arch) =
            pick_arch(env, |a| (ctx + base_shape(*a, prec, Optimizer::AdamW, par).static_bytes()) * 2 <= cap)
        else {
            continue;
        };
        let batch = if env.rng.random_bool(0.7) { 1 } else { 2 };
        let shape =
            Shape { batch, flash: false, ckpt: true, ..base_shape(arch, prec, Optimizer::AdamW, par) };
        let program = TrainProgram::without_eval(
            100_000,
            step_range(env, (1000, 3000)),
            env.rng.random_range(20..=100),
            env.rng.random_range(3..=15),
            SeqPolicy::fixed(1024),
        );
        let host = host_spec(env, 4, None);
        let base = format!("{}-longdoc-{}", arch.name, env.pick(&["sft", "finetune", "qa"]));
        let mut spec =
            train_spec(env, Template::Sequence, &base, Kind::Train, ctx, shape, program, 0.0, 1.0, host);
        let Some(s_norm) = [4096u32, 2048, 1024]
            .into_iter()
            .find(|&s| spec.peak_alone(&Shape { seq: s, ..shape }) * 10 <= cap * 8)
        else {
            continue;
        };
        let avail = cap.saturating_sub(ctx + shape.static_bytes());
        let Some(s_long) = (1..=32u32)
            .map(|k| k * 8192)
            .find(|&s| s >= 4 * s_norm && alloc_size(Shape { seq: s, ..shape }.attn()) > avail)
        else {
            continue;
        };
        let long = Shape { seq: s_long, ..shape };
        if alloc_size(long.act_input()) * 8 > avail {
            continue;
        }
        let at = env.rng.random_range(3..=20u64);
        spec.shape.seq = s_norm;
        if let Program::Train(p) = &mut spec.program {
            p.seq = SeqPolicy { min: 512.min(s_norm), max: s_norm, multiple: 256, long: Some((s_long, at)) };
        }
        return Some(spec);
    }
    None
}

fn fragmentation_job(env: &mut Env<'_>) -> Option<JobSpec> {
    let cap = env.cap();
    for _ in 0..16 {
        let prec = precision(env, false);
        let par = env.pick(&[(0, 1), (1, 2), (2, 8)]);
        let ctx = context(env);
        let Some(arch) =
            pick_arch(env, |a| (ctx + base_shape(*a, prec, Optimizer::AdamW, par).static_bytes()) * 5 <= cap)
        else {
            continue;
        };
        let s_max = env.pick(&[2048u32, 4096]);
        let shape = Shape { seq: s_max, ..base_shape(arch, prec, Optimizer::AdamW, par) };
        // The job alone would use 45–80 % of the GPU; the cache its shape churn strands fills
        // the rest (real fragmentation OOMs show 15–50 % of the GPU reserved but unallocated).
        let footprint = (env.frac(0.45, 0.8) * 100.0) as u64;
        let modest = |b: u32| {
            let s = Shape { batch: b, ..shape };
            (ctx + s.static_bytes() + s.step_peak().peak) * 100 <= cap * footprint
        };
        let Some(b) = largest_batch(512, modest) else {
            continue;
        };
        let program = TrainProgram::without_eval(
            100_000,
            step_range(env, (500, 800)),
            env.rng.random_range(20..=60),
            env.rng.random_range(3..=10),
            SeqPolicy { min: 256, max: s_max, multiple: 64, long: None },
        );
        let churn = env.frac(0.06, 0.12);
        let host = host_spec(env, 4, None);
        let base =
            format!("{}-{}", arch.name, env.pick(&["packed-sft", "multitask", "asr-finetune", "finetune"]));
        let shape = Shape { batch: b, ..shape };
        return Some(train_spec(
            env,
            Template::Fragmentation,
            &base,
            Kind::Train,
            ctx,
            shape,
            program,
            churn,
            1e-3,
            host,
        ));
    }
    None
}

fn contention(env: &mut Env<'_>) -> Vec<(u64, JobSpec)> {
    let cap = env.cap();
    let budget = (cap as f64 * env.frac(0.5, 0.62)) as u64;
    let o = TrainOpts {
        force_flash: true,
        allow_variable: false,
        eval_every: Some((8, 15)),
        empty_cache: true,
        step_ms: (500, 1500),
        total_steps: (300, 800),
        full_batch: true,
        ..TrainOpts::healthy(Template::Contention)
    };
    let Some(victim) = healthy_train(env, budget, o) else {
        return Vec::new();
    };
    let victim_peak = victim.peak_alone(&victim.shape);
    let over = (cap as f64 * env.frac(0.12, 0.22)) as u64;
    let n_budget = (cap.saturating_sub(victim_peak) + over).min(cap / 10 * 9);
    if victim_peak + n_budget < cap + cap / 20 {
        return Vec::new();
    }
    // Either the server is up first and the training job arrives into a full GPU, or the server
    // arrives later and grows into the memory the training job returns at each `empty_cache()`.
    let server_first = env.rng.random_bool(0.4);
    let (growth, victim_delay, server_delay) = if server_first {
        (env.rng.random_range(20..=60), env.rng.random_range(200..=350), 0)
    } else {
        (env.rng.random_range(150..=400), 0, env.rng.random_range(100..=400))
    };
    let Some(mut neighbour) = serve_job(env, n_budget, growth, false) else {
        return vec![(0, victim)];
    };
    neighbour.template = Template::Contention;
    if server_first {
        vec![(server_delay, neighbour), (victim_delay, victim)]
    } else {
        vec![(victim_delay, victim), (server_delay, neighbour)]
    }
}
