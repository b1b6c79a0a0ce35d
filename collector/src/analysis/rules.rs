//! The ordered rule set: one event's [`OomFeatures`] → scenario, confidence, alternatives,
//! evidence, remedy, and what evidence would decide.
//!
//! The rules follow the triage order of `docs/attribution.md`: host-memory failures by kind;
//! messages whose own words name the cause (a serving engine's start-up checks, a batch-size search
//! that gave up); then (1) when it failed and (2) the static state against the capacity, (3) the
//! other processes: memory held outside the process's allocator, (4) batch and sequence — only
//! when the process alone needed more than the GPU — and (5) fragmentation — only when its own
//! cache held a large share of the GPU. The first rule that matches wins.
//!
//! **Confidence** is calibrated: each rule carries the probabilities of its scenario and of the
//! alternatives it leaves open, measured on the corpus of real messages (`corpus/`, message only)
//! and, for the rules that need a job shape or samples, set from the cases they were built for
//! (the simulator cannot calibrate them). `docs/attribution.md` has the reliability table.

use std::fmt::Write as _;

use oomlens_parse::units::format_size;
use oomlens_schema::Scenario;
use serde::Serialize;

use super::features::{AllocSite, OomFeatures};

const MIB: u64 = 1 << 20;

/// Cards of 16 GB or less (printed capacities up to 16.5 GiB): what fills one alone is mostly a
/// training step whose batch is the knob (`docs/attribution.md`).
const SMALL_GPU_BYTES: u64 = (33 << 30) / 2;

/// Frameworks that allocate device memory through an allocator of their own (a pool, an arena,
/// a tensor storage manager), which refused a tensor: TensorFlow's and XLA's BFC allocators,
/// PaddlePaddle's, CuPy's and MXNet's pools, Caffe's and Caffe2's storage, MindSpore's pool,
/// ONNX Runtime's arena, TensorRT's and TensorRT-LLM's allocators, MLX's Metal allocator,
/// tt-metal's bank allocator, RAPIDS' memory manager (cuDF, cuML, XGBoost), DirectML's, TVM's
/// workspace pool, Theano's CNMeM and CatBoost's GPU pool. (Version 18 added the ones after MXNet: they fell to
/// `no_evidence` before.)
const OWN_ALLOCATOR: &[&str] = &[
    "tensorflow",
    "jax",
    "paddle",
    "cupy",
    "caffe",
    "mxnet",
    "caffe2",
    "mindspore",
    "onnxruntime",
    "tensorrt",
    "tensorrt-llm",
    "mlx",
    "tt-metal",
    "rapids",
    "xgboost",
    "directml",
    "tvm",
    "theano",
    "catboost",
];

/// Frameworks whose device memory goes through PyTorch's caching allocator (its OOM message's
/// numbers, the hook's allocator summary): PyTorch and what runs on it.
const TORCH_ALLOCATOR: &[&str] = &["pytorch", "deepspeed", "accelerate", "vllm", "sglang", "tgi"];

/// Version of the rule set, stored with every attribution (`oom_attributions.rules_version`).
/// Bump it when a rule, its order or its confidence changes: readers always re-run the current
/// rules on the stored evidence; the version tells which rules the stored `scenario` came from.
pub const RULES_VERSION: u32 = 24;

/// The last [`RULES_VERSION`] that changed a verdict on the message alone (no samples, no job
/// shape: what `oomlens explain` and the corpus see); the corpus counts a record fresh against
/// it. Version 20 changed only how samples are read (`single_huge_request` asks
/// [`OomFeatures::took_before`]); version 21 asks a refusal "while free" to leave
/// [`FREE_SLACK_BYTES`] to spare, version 22 reads early llama.cpp's full context pool as its
/// batch's (`batch_pool`), version 23 a bare runtime error raised while pinning host memory as
/// the host's (`pinned_host_memory`), version 24 TensorFlow's and XLA's own words for pinning
/// host memory (`failed to alloc N bytes on host`, `(xla_gpu_host_bfc)`) the same way:
/// message-only verdicts.
pub const MESSAGE_RULES_VERSION: u32 = 24;

/// Memory held by other processes counts as a cause when it is at least this share (percent) of
/// the GPU (a display server's few hundred MiB on a small card does not make a noisy neighbour).
pub const OTHERS_SHARE: u64 = 10;
/// The same when the others' memory is only estimated (outside memory less an assumed context):
/// the process's own non-allocator memory could be the rest, so a larger share is asked.
pub const OTHERS_ESTIMATED_SHARE: u64 = 25;
/// Cached-but-free memory of at most this many bytes at a full GPU: only the allocator's rounding,
/// it has freed nothing yet — as while the weights are loaded (every step frees its temporaries).
pub const NO_FREES_BYTES: u64 = 64 << 20;

/// Free memory the driver reports beyond a request that one allocation still cannot have (its
/// page tables and bookkeeping, in 2 MiB pages): a request refused with less than this to spare
/// met a full GPU, not a refusal while memory was free (real messages: `40.00 MiB` refused with
/// `50.00 MiB free`).
pub const FREE_SLACK_BYTES: u64 = 64 << 20;
/// Cached-but-free memory counts as fragmentation when it is at least this share (percent) of the
/// GPU: every real PyTorch OOM shows some cached slack; a fragmented cache holds a large part of
/// the card.
pub const CACHED_SHARE: u64 = 10;
/// …and, from the message alone (no samples, no reported phase), at least this share (percent)
/// of what is allocated: PyTorch's own hint, "reserved memory is >> allocated memory" (reserved ≥
/// 1.5 × allocated). On real messages a cache of 12–17 % of the card beside twice as much live
/// memory was a batch's between-step slack more often than fragmentation.
pub const CACHED_OF_ALLOCATED: u64 = 50;
/// With the hook's allocator summary, one kind of site holds the memory when its live bytes are at
/// least this many times the other kind's.
pub const SITE_DOMINANCE: u64 = 2;

/// A single request of at least this share (percent) of the GPU is one huge tensor (an attention
/// score matrix, a long input's buffer), not a step's accumulated activations.
pub const HUGE_REQUEST_SHARE: u64 = 25;
/// Without a capacity, a request of at least this many bytes is huge on any GPU up to 128 GiB.
pub const HUGE_REQUEST_BYTES: u64 = 32 << 30;

/// One rule of the ordered set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Host memory ran out: the kernel's OOM killer, or its symptoms in the job's log.
    HostOomKill,
    /// An Xid error: a GPU fault, not memory exhaustion.
    XidError,
    /// Context + weights + gradients + optimizer state (job shape) exceed the GPU.
    StaticEstimate,
    /// A serving engine or loader at start-up: the weights plus the configured context (KV
    /// cache, compute buffers) do not fit.
    StartupReservation,
    /// vLLM at start-up found less free memory than it was told to take: others hold it.
    StartupFreeMemory,
    /// vLLM at start-up found no memory left for the KV cache after profiling.
    NoCacheBlocks,
    /// A serving engine's batch budget (sequences, prefill tokens) does not fit.
    BatchBudget,
    /// A batch-size search failed down to one sample: a single sample does not fit.
    BatchSearchExhausted,
    /// A bare runtime error raised while pinning host memory: the host's RAM (or its limit on
    /// page-locked memory), in the device's words.
    PinnedHostMemory,
    /// The job's allocator summary at the OOM: its free cached blocks would have covered the
    /// request, but none of them was large enough.
    SnapshotFragmented,
    /// Other processes held the memory the process alone would have fitted in.
    NeighboursTookIt,
    /// Failed while loading the model / creating the optimizer / at start-up.
    StaticAtLoad,
    /// The job's allocator summary: weights and optimizer state hold most of the live memory.
    SnapshotWeights,
    /// The failed request is one layer's seq² attention matrix (job shape).
    SequenceAttention,
    /// The job's allocator summary: activations (forward / backward / eval / inference sites)
    /// hold most of the live memory.
    SnapshotActivations,
    /// One request of a large share of the GPU (beyond every rise of the process, when sampled).
    SingleHugeRequest,
    /// Its own cache held a large share of the GPU, enough with the free memory for the request.
    FragmentedCache,
    /// The failing allocation was made in attention code (the innermost model frame of the
    /// traceback, or the graph node): seq² memory.
    AttentionAtFailure,
    /// The refused tensor (TensorFlow prints its shape) is shaped like a convolution's weights: a
    /// variable, its gradient or an optimizer slot — the model's state.
    WeightTensor,
    /// The refused tensor is an activation whose first (batch) dimension is 4 or more.
    BatchTensor,
    /// The refused tensor is one or two samples with a very long dimension: one long input.
    LongTensor,
    /// The device reported enough free memory for the request, and still it failed.
    FreeButRefused,
    /// A full GPU with nothing cached: nothing was freed yet, as while the weights load.
    StaticNoFrees,
    /// The process alone filled the GPU during inference or evaluation: the input's length.
    InferenceTooBig,
    /// The process alone filled the GPU while training: the activations of the batch.
    BatchActivations,
    /// A library could not create its CUDA context or handle: the GPU was already full.
    ContextCreation,
    /// A framework's allocator (TensorFlow, XLA, PaddlePaddle, CuPy, MXNet, MindSpore, ONNX
    /// Runtime's arena, TensorRT, MLX, RAPIDS' pool, …; Caffe's and old PyTorch's tensor storage)
    /// refused a tensor; the message has no capacity.
    AllocatorRefused,
    /// A local inference engine (llama.cpp, ollama) failed without numbers after loading: its
    /// weights and context are sized at load, so the reservation, a neighbour or a long request.
    EngineRuntime,
    /// TensorFlow / XLA could not reserve its memory region at start-up.
    DevicePreallocation,
    /// A CUDA runtime error outside the framework's caching allocator (no numbers): most often a
    /// context or workspace allocation on a GPU that others already fill.
    OutsideAllocator,
    /// A runtime error without the allocator's numbers, placed by its phase.
    PhaseOnly,
    /// No allocator numbers, but the neighbours grew by ≥ 10 % of the GPU before it vanished.
    NeighbourGrowth,
    /// Nothing decides.
    NoEvidence,
}

impl Rule {
    /// Every rule, in evaluation order.
    pub const ALL: [Rule; 33] = [
        Rule::HostOomKill,
        Rule::XidError,
        Rule::StaticEstimate,
        Rule::StartupReservation,
        Rule::StartupFreeMemory,
        Rule::NoCacheBlocks,
        Rule::BatchBudget,
        Rule::BatchSearchExhausted,
        Rule::PinnedHostMemory,
        Rule::SnapshotFragmented,
        Rule::NeighboursTookIt,
        Rule::StaticAtLoad,
        Rule::SnapshotWeights,
        Rule::SequenceAttention,
        Rule::SnapshotActivations,
        Rule::SingleHugeRequest,
        Rule::FragmentedCache,
        Rule::AttentionAtFailure,
        Rule::WeightTensor,
        Rule::BatchTensor,
        Rule::LongTensor,
        Rule::FreeButRefused,
        Rule::StaticNoFrees,
        Rule::InferenceTooBig,
        Rule::BatchActivations,
        Rule::ContextCreation,
        Rule::DevicePreallocation,
        Rule::NeighbourGrowth,
        Rule::EngineRuntime,
        Rule::PhaseOnly,
        Rule::AllocatorRefused,
        Rule::OutsideAllocator,
        Rule::NoEvidence,
    ];

    /// The stable name.
    pub const fn id(self) -> &'static str {
        match self {
            Rule::HostOomKill => "host_oom_kill",
            Rule::XidError => "xid_error",
            Rule::StaticEstimate => "static_estimate",
            Rule::StartupReservation => "startup_reservation",
            Rule::StartupFreeMemory => "startup_free_memory",
            Rule::NoCacheBlocks => "no_cache_blocks",
            Rule::BatchBudget => "batch_budget",
            Rule::BatchSearchExhausted => "batch_search_exhausted",
            Rule::PinnedHostMemory => "pinned_host_memory",
            Rule::SnapshotFragmented => "snapshot_fragmented",
            Rule::SnapshotWeights => "snapshot_weights",
            Rule::SnapshotActivations => "snapshot_activations",
            Rule::NeighboursTookIt => "neighbours_took_it",
            Rule::StaticAtLoad => "static_at_load",
            Rule::SequenceAttention => "sequence_attention",
            Rule::SingleHugeRequest => "single_huge_request",
            Rule::FragmentedCache => "fragmented_cache",
            Rule::AttentionAtFailure => "attention_at_failure",
            Rule::WeightTensor => "weight_tensor",
            Rule::BatchTensor => "batch_tensor",
            Rule::LongTensor => "long_tensor",
            Rule::FreeButRefused => "free_but_refused",
            Rule::StaticNoFrees => "static_no_frees",
            Rule::InferenceTooBig => "inference_too_big",
            Rule::BatchActivations => "batch_activations",
            Rule::ContextCreation => "context_creation",
            Rule::AllocatorRefused => "allocator_refused",
            Rule::DevicePreallocation => "device_preallocation",
            Rule::EngineRuntime => "engine_runtime",
            Rule::OutsideAllocator => "outside_allocator",
            Rule::PhaseOnly => "phase_only",
            Rule::NeighbourGrowth => "neighbour_growth",
            Rule::NoEvidence => "no_evidence",
        }
    }

    /// The rule called `id`.
    pub fn from_id(id: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.id() == id)
    }
}

/// Another scenario the evidence leaves open, with its probability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Alternative {
    /// The scenario.
    #[serde(serialize_with = "scenario_name")]
    pub scenario: Scenario,
    /// Probability, percent.
    pub confidence_pct: u8,
}

/// What the rules concluded about one event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attribution {
    /// The scenario.
    #[serde(serialize_with = "scenario_name")]
    pub scenario: Scenario,
    /// The rule that fired.
    pub rule: Rule,
    /// Probability that the scenario is right, percent (calibrated, see the module docs).
    pub confidence_pct: u8,
    /// The other scenarios the evidence leaves open, most likely first.
    pub alternatives: Vec<Alternative>,
    /// Human-readable evidence, in triage order, with the numbers.
    pub evidence: Vec<String>,
    /// The remedy for the scenario.
    pub remedy: &'static str,
    /// The data that was missing (`job shape`, `process samples`, `allocator numbers`, `phase`,
    /// `capacity`, `other processes`).
    pub missing: Vec<&'static str>,
    /// What evidence would decide between the scenarios left open.
    pub decide: Vec<String>,
}

impl Attribution {
    /// Confidence as a fraction in `[0, 1]`.
    pub fn confidence(&self) -> f64 {
        f64::from(self.confidence_pct) / 100.0
    }
}

fn scenario_name<S: serde::Serializer>(sc: &Scenario, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(sc.as_str())
}

/// The scenario distribution of a rule (percent, the first is the verdict).
type Odds = &'static [(Scenario, u8)];

use Scenario::{Batch, Contention, Fragmentation, HostOom, Sequence, Static, Unknown};

/// The measured odds of each rule (see the module docs and `docs/attribution.md`).
fn odds(rule: Rule, f: &OomFeatures) -> Odds {
    match rule {
        Rule::HostOomKill => match f.host_evidence.as_str() {
            "" | "explicit" => &[(HostOom, 95)],
            "allocation" => &[(HostOom, 90)],
            "shm" => &[(HostOom, 85), (Unknown, 15)],
            "sigkill" => &[(HostOom, 90), (Unknown, 10)],
            _ => &[(HostOom, 60), (Unknown, 40)],
        },
        Rule::XidError => &[(Unknown, 30)],
        Rule::StaticEstimate => &[(Static, 95)],
        Rule::StartupReservation => &[(Static, 95), (Sequence, 5)],
        Rule::StartupFreeMemory => &[(Contention, 85), (Static, 15)],
        Rule::NoCacheBlocks => &[(Contention, 70), (Batch, 20), (Static, 10)],
        Rule::BatchBudget => &[(Batch, 60), (Static, 25), (Sequence, 15)],
        Rule::BatchSearchExhausted => &[(Sequence, 55), (Static, 35), (Batch, 10)],
        // Pinning allocates no device memory; a GPU too full for the thread's first call is the
        // rest. No labelled thread yet: set from a real GPU's run (a pinned buffer larger than
        // the machine's RAM) and the call's nature, not measured.
        Rule::PinnedHostMemory => &[(HostOom, 60), (Contention, 25), (Batch, 15)],
        // Other processes holding memory and the job's own too-large step are often both true:
        // the threads fixed it either way.
        // With the agent's samples the neighbours' memory is measured (the cases it was built for).
        Rule::NeighboursTookIt if f.others_from == "samples" || f.own_samples > 0 => {
            &[(Contention, 80), (Batch, 10), (Sequence, 10)]
        }
        Rule::NeighboursTookIt => match f.others_from.as_str() {
            "message" | "implied" => &[(Contention, 55), (Batch, 25), (Sequence, 20)],
            _ => &[(Contention, 50), (Batch, 30), (Sequence, 10), (Static, 10)],
        },
        Rule::StaticAtLoad => &[(Static, 85), (Batch, 10), (Contention, 5)],
        // Decided from the allocator's own state, not inferred from printed totals.
        Rule::SnapshotFragmented => &[(Fragmentation, 90), (Batch, 10)],
        Rule::SnapshotWeights => &[(Static, 75), (Batch, 15), (Sequence, 10)],
        Rule::SnapshotActivations if attention_sites(f) => &[(Sequence, 65), (Batch, 30), (Static, 5)],
        Rule::SnapshotActivations => &[(Batch, 70), (Sequence, 25), (Static, 5)],
        Rule::SequenceAttention => &[(Sequence, 90), (Batch, 10)],
        // With samples the request is also beyond all the process took at once: new, not a step's.
        Rule::SingleHugeRequest if !message_only(f) => &[(Sequence, 75), (Batch, 15), (Static, 10)],
        Rule::SingleHugeRequest => &[(Sequence, 65), (Batch, 20), (Static, 10), (Fragmentation, 5)],
        // Message only, a large cached share is as often a batch or a length that varies step to
        // step (the threads cut those); with the samples, the cases it was built for.
        Rule::FragmentedCache if !message_only(f) => &[(Fragmentation, 75), (Batch, 20), (Sequence, 5)],
        Rule::FragmentedCache => &[(Fragmentation, 40), (Batch, 35), (Sequence, 20), (Static, 5)],
        // As the allocator snapshot's attention sites: the score matrix grows with seq², but a
        // larger batch multiplies it too.
        Rule::AttentionAtFailure => &[(Sequence, 65), (Batch, 30), (Static, 5)],
        // The device had the memory: what refused it sits outside the GPU's memory — the host's
        // (Windows backs device allocations with the system commit: RAM + page file) — or the
        // device's free memory was itself in pieces.
        // A weight-shaped tensor is a variable at start-up or an optimizer slot (the model's
        // state), or a weight's gradient in the backward pass, the batch's last straw.
        Rule::WeightTensor => &[(Static, 60), (Batch, 30), (Contention, 10)],
        // A batch-first activation: the batch (a longer input grows it too); batch in 17 of 17
        // corpus events when set (version 16), 22 of 22 since.
        Rule::BatchTensor => &[(Batch, 80), (Sequence, 10), (Static, 5), (Contention, 5)],
        Rule::LongTensor => &[(Sequence, 65), (Batch, 25), (Static, 10)],
        Rule::FreeButRefused => &[(HostOom, 55), (Fragmentation, 35), (Contention, 10)],
        Rule::StaticNoFrees => &[(Static, 60), (Batch, 35), (Contention, 5)],
        Rule::InferenceTooBig => &[(Sequence, 55), (Batch, 25), (Static, 20)],
        // The job's own report (hook, simulator) or its samples say it was a training step.
        Rule::BatchActivations if f.phase_source == "reported" || !f.no_shape() || f.own_samples > 0 => {
            &[(Batch, 75), (Sequence, 15), (Static, 10)]
        }
        // The numbers cannot tell batch, length and model apart; the card's size leans: what fills
        // a card of 16 GB or less alone is mostly a training step whose batch is the knob (vision,
        // speech, research code: batch 14, static 9, sequence 8 of 32 in the corpus when version 10
        // set it; batch 30, static 17, sequence 14 of 65 in version 19's). On a larger card
        // version 10 answered the input's length (sequence 8, static 6, batch 2 of 17); the 11
        // records collected since that reached it were static 5, batch 5, fragmentation 1 and no
        // sequence, so version 19 answers the model's state (static 11, sequence 8, batch 7,
        // fragmentation 2 of 28).
        Rule::BatchActivations if f.capacity_bytes.is_some_and(|c| c <= SMALL_GPU_BYTES) => {
            &[(Batch, 40), (Static, 30), (Sequence, 25), (Fragmentation, 5)]
        }
        Rule::BatchActivations => &[(Static, 40), (Sequence, 30), (Batch, 25), (Fragmentation, 5)],
        Rule::ContextCreation => &[(Contention, 65), (Batch, 20), (Static, 15)],
        // Without a shape that tells (version 16): batch 20, contention 16, static 12, sequence 7
        // of 57.
        Rule::AllocatorRefused => {
            &[(Batch, 35), (Contention, 30), (Static, 20), (Sequence, 10), (Fragmentation, 5)]
        }
        Rule::EngineRuntime => &[(Static, 60), (Contention, 30), (Sequence, 10)],
        Rule::DevicePreallocation => &[(Contention, 65), (Static, 20), (Batch, 15)],
        // Version 17, on 40 corpus events: contention 15, batch 12, static 8, sequence 4.
        Rule::OutsideAllocator => &[(Contention, 40), (Batch, 30), (Static, 20), (Sequence, 10)],
        Rule::PhaseOnly => match f.phase_effective.as_str() {
            "load" | "optimizer_init" | "startup" => &[(Static, 70), (Contention, 20), (Batch, 10)],
            "inference" | "eval" => &[(Sequence, 70), (Batch, 15), (Static, 15)],
            _ => &[(Batch, 50), (Sequence, 25), (Static, 25)],
        },
        Rule::NeighbourGrowth => &[(Contention, 50), (Batch, 30), (Unknown, 20)],
        // Nothing decides; the alternatives rank what such messages were (version 17, on 57
        // corpus events: sequence 21, batch 14, static 11, contention 10).
        Rule::NoEvidence => &[(Unknown, 20), (Sequence, 30), (Batch, 20), (Contention, 15), (Static, 15)],
    }
}

fn pct_of(part: u64, whole: u64) -> u64 {
    if whole == 0 { 0 } else { (u128::from(part) * 100 / u128::from(whole)) as u64 }
}

/// Which phase names mean "loading / start-up".
fn at_load(f: &OomFeatures) -> bool {
    matches!(f.phase_effective.as_str(), "load" | "optimizer_init" | "startup")
}

/// Failed inside the optimizer's step, known from the message's traceback alone. The backward
/// pass has freed the activations by then; what the step allocates (AdamW's per-parameter
/// temporaries) scales with the model, so the static state is what does not fit. With a job
/// shape the static estimate decides instead.
fn step_without_shape(f: &OomFeatures) -> bool {
    f.phase_effective == "optimizer_step" && f.no_shape() && message_only(f)
}

/// Only the message: no process samples and no phase reported by the job.
fn message_only(f: &OomFeatures) -> bool {
    f.own_samples == 0 && f.phase_source != "reported"
}

fn inference(f: &OomFeatures) -> bool {
    matches!(f.phase_effective.as_str(), "inference" | "eval")
}

/// The facts the rules test (see the rule docs).
#[derive(Debug, Clone, Copy)]
struct Facts {
    /// The process alone (context + allocated + requested) needed more than the GPU.
    too_big_alone: bool,
    /// Other processes held a cause-sized share of the GPU.
    others_hold: bool,
    /// With its own cache kept, the process alone would have fitted.
    fits_with_cache: bool,
    /// The cache held a large share of the GPU, enough with the free memory for the request.
    fragmented: bool,
    /// The allocator's cached-but-free memory is a large share of the GPU (`CACHED_SHARE`).
    cache_large: bool,
    /// The request is a large share of the GPU.
    huge_request: bool,
    /// The device reported enough free memory for the request.
    free_covers: bool,
    /// With the numbers, the device had the memory free and the process was not too big alone:
    /// the request's size was not the problem.
    refused_while_free: bool,
    /// The message has the allocator's numbers (allocated or reserved) and a capacity.
    numbers: bool,
    /// The allocator holds (almost) nothing cached.
    no_frees: bool,
    /// The job's allocator summary decides fragmentation: `Some(true)` when its free blocks add up
    /// to the request but none is large enough, `Some(false)` when they do not add up or one
    /// would have served; `None` without a summary.
    snapshot_fragmented: Option<bool>,
    /// The summary's sites: weights / optimizer state hold most of the live memory.
    weights_hold: bool,
    /// The summary's sites: activations hold most of the live memory.
    activations_hold: bool,
}

/// Whether the top activation sites are attention code (their function or file names it).
fn attention_sites(f: &OomFeatures) -> bool {
    f.alloc_sites.iter().take(3).map(|s| AllocSite::parse(s)).any(|s| {
        !s.holds_state() && oomlens_parse::op::names_attention(&format!("{} {}", s.function, s.site))
    })
}

fn facts(f: &OomFeatures) -> Facts {
    let cap = f.capacity_bytes;
    let too_big_alone = matches!((f.need_alone_bytes, cap), (Some(n), Some(c)) if n > c);
    let share = if f.others_from == "outside" { OTHERS_ESTIMATED_SHARE } else { OTHERS_SHARE };
    let others_hold =
        matches!((f.others_bytes, cap), (Some(o), Some(c)) if o >= (c / 100 * share).max(256 * MIB));
    let no_frees = f.cached_free_bytes.is_some_and(|u| u <= NO_FREES_BYTES);
    // Without the allocator's numbers: what the process alone needed (its GPU memory + the
    // request) fitted.
    let fits_with_cache = match (f.with_cache_bytes.or(f.need_alone_bytes), cap) {
        (Some(n), Some(c)) => n <= c,
        _ => false,
    };
    let cache_large = matches!((f.cached_free_bytes.or(f.alloc_cached_free_bytes), cap),
        (Some(u), Some(c)) if u >= c / 100 * CACHED_SHARE);
    let fragmented = match (f.cached_free_bytes, cap, f.requested_bytes) {
        (Some(u), Some(_), Some(q)) => {
            cache_large
                && u.saturating_add(f.free_bytes.unwrap_or(0)) >= q
                && (!message_only(f)
                    || f.allocated_bytes.is_none_or(|a| {
                        u128::from(u) * 100 >= u128::from(a) * u128::from(CACHED_OF_ALLOCATED)
                    }))
        }
        _ => false,
    };
    let huge_request = match (f.requested_bytes, cap) {
        (Some(q), Some(c)) => pct_of(q, c) >= HUGE_REQUEST_SHARE,
        (Some(q), None) => q >= HUGE_REQUEST_BYTES,
        _ => false,
    };
    // Rounding of the printed sizes (two decimals), and what the driver's free figure holds that
    // one allocation cannot have: its own page tables and bookkeeping in 2 MiB pages
    // ([`FREE_SLACK_BYTES`]).
    let free_covers = matches!((f.free_bytes, f.requested_bytes), (Some(fr), Some(q)) if fr >= q.saturating_add(FREE_SLACK_BYTES).saturating_add(q / 100));
    let numbers = cap.is_some() && (f.allocated_bytes.is_some() || f.reserved_bytes.is_some());
    let snapshot_fragmented = match (f.alloc_cached_free_bytes, f.alloc_largest_free_bytes, f.requested_bytes)
    {
        (Some(cached), Some(largest), Some(q)) => Some(cached >= q && largest < q),
        _ => None,
    };
    // The summary decides; the guess from printed totals only stands without one.
    let fragmented = fragmented && snapshot_fragmented.is_none();
    let (st, act) = (f.alloc_static_bytes.unwrap_or(0), f.alloc_activation_bytes.unwrap_or(0));
    let weights_hold = st > 0 && st >= act.saturating_mul(SITE_DOMINANCE);
    let activations_hold = act > 0 && act >= st.saturating_mul(SITE_DOMINANCE);
    Facts {
        too_big_alone,
        others_hold,
        fits_with_cache,
        fragmented,
        cache_large,
        huge_request,
        free_covers,
        refused_while_free: free_covers && numbers && !too_big_alone,
        numbers,
        no_frees,
        snapshot_fragmented,
        weights_hold,
        activations_hold,
    }
}

/// The first rule of the ordered set that matches `f`.
pub fn first_rule(f: &OomFeatures) -> Rule {
    let x = facts(f);
    let hint = f.message_hint.as_str();
    match f.kind.as_str() {
        "host_oom_kill" => return Rule::HostOomKill,
        "xid" => return Rule::XidError,
        _ => {}
    }
    if let (Some(s), Some(c)) = (f.static_estimate_bytes, f.capacity_bytes)
        && u128::from(f.context_assumed_bytes) + u128::from(s) > u128::from(c)
    {
        return Rule::StaticEstimate;
    }
    match hint {
        "kv_cache" | "mem_fraction_static" | "model_load" | "context_alloc" | "graph_capture" => {
            return Rule::StartupReservation;
        }
        "startup_free_memory" => return Rule::StartupFreeMemory,
        "cache_blocks" => return Rule::NoCacheBlocks,
        "sampler_warmup" | "max_num_seqs" | "prefill_tokens" | "kv_pool" | "batch_pool" => {
            return Rule::BatchBudget;
        }
        "batch_search_exhausted" => return Rule::BatchSearchExhausted,
        oomlens_parse::PINNED_HOST_HINT if !x.numbers => return Rule::PinnedHostMemory,
        _ => {}
    }
    // Free blocks too small for the request are fragmentation when the cache is worth having
    // back; a routine slack of pieces beside a neighbour holding a cause-sized share is not why
    // the process failed: with the neighbour gone it would have fitted (seen on a real GPU: 754
    // MiB cached in pieces, a neighbour holding three quarters of the card).
    if x.snapshot_fragmented == Some(true) && !(x.others_hold && x.fits_with_cache && !x.cache_large) {
        return Rule::SnapshotFragmented;
    }
    // Other processes held what it needed: it would have fitted alone, even with its own cache.
    if x.others_hold && (x.fits_with_cache || (!x.numbers && f.others_from == "samples")) {
        return Rule::NeighboursTookIt;
    }
    // The runtime's own start-up allocation (a context, a library handle, the generator states)
    // failed: the GPU was full before the job's tensors. That says more than a load-time phase
    // from the frames (the first `.cuda()` is where the runtime starts).
    if hint == "context_creation" && !x.numbers {
        return Rule::ContextCreation;
    }
    // A start-up inferred from the samples (the process appeared in the window and grew to its
    // peak) is only a guess at the phase: a job that fails in its first seconds looks the same. A
    // cache holding a large share of the GPU is not how loading fails (weights are never freed),
    // so it outranks the guess, not a phase the traceback or the job reported.
    if (at_load(f) && !(x.fragmented && f.phase_source == "inferred")) || step_without_shape(f) {
        return Rule::StaticAtLoad;
    }
    if x.weights_hold && (x.too_big_alone || !x.free_covers) {
        return Rule::SnapshotWeights;
    }
    if let (Some(att), Some(req)) = (f.attention_bytes, f.requested_bytes)
        && att > 0
        && (x.too_big_alone || !x.free_covers)
        && req.abs_diff(att) <= (2 * MIB).max(att / 20)
    {
        return Rule::SequenceAttention;
    }
    if x.activations_hold && (x.too_big_alone || !x.free_covers) {
        return Rule::SnapshotActivations;
    }
    // Its own cache held a large share of the GPU, enough with the free memory: in pieces.
    if x.fragmented {
        return Rule::FragmentedCache;
    }
    // The allocation that failed was attention's (the traceback's innermost model frame, the
    // graph node): its score matrix grows with the square of the sequence length. Not where the
    // device reported enough free memory: then the request's size was not the problem.
    if f.message_hint == oomlens_parse::ATTENTION_HINT && !x.refused_while_free {
        return Rule::AttentionAtFailure;
    }
    // The refused tensor's shape (TensorFlow prints it) says what it was: a weight, a batch of
    // activations, or one long input. Before the request's size: a huge batch-first tensor is a
    // batch.
    if !x.refused_while_free {
        match hint {
            "weight_tensor" => return Rule::WeightTensor,
            "batch_tensor" => return Rule::BatchTensor,
            "long_tensor" => return Rule::LongTensor,
            _ => {}
        }
    }
    // One request larger than a quarter of the GPU that the free memory could not serve: a single
    // huge tensor. With samples, one the process had not taken before (`took_before`: beyond
    // every rise of its readings) is new: a longer sequence's attention or buffer.
    if f.attention_bytes.is_none()
        && x.huge_request
        && !x.free_covers
        && f.took_before(f.requested_bytes.unwrap_or(0)) != Some(true)
    {
        return Rule::SingleHugeRequest;
    }
    if x.refused_while_free {
        return Rule::FreeButRefused;
    }
    if x.numbers || x.too_big_alone {
        // The process alone filled the GPU (or fitted only by an estimated context: it was at the
        // limit itself, nothing else held the memory).
        if x.no_frees && f.no_shape() && f.phase_source == "unknown" {
            return Rule::StaticNoFrees;
        }
        return if inference(f) { Rule::InferenceTooBig } else { Rule::BatchActivations };
    }
    // No allocator numbers from here on.
    match hint {
        "context_creation" => return Rule::ContextCreation,
        "device_preallocation" => return Rule::DevicePreallocation,
        _ => {}
    }
    if f.no_allocator()
        && let Some(c) = f.capacity_bytes
        && f.own_samples > 0
        && i128::from(f.others_growth_bytes) * 10 >= i128::from(c)
    {
        return Rule::NeighbourGrowth;
    }
    // A local engine sizes its weights and context (KV cache, compute buffers) at load — llama.cpp,
    // and LMDeploy's TurboMind (its KV cache a share of the memory left after the weights); an
    // OOM after that, without numbers, is that reservation, a neighbour, or one long request. Its
    // phase is always inference and says nothing more.
    if matches!(f.framework.as_str(), "llama.cpp" | "lmdeploy") && f.no_allocator() {
        return Rule::EngineRuntime;
    }
    if !f.phase_effective.is_empty() && f.phase_effective != "steady" {
        return Rule::PhaseOnly;
    }
    // A framework's own tensor allocator refused (no caching allocator's numbers): the tensors of
    // the step, as TensorFlow's, not a workspace outside it. MXNet's is its pooled storage
    // manager (`pooled_storage_manager.h: cudaMalloc failed`).
    if matches!(hint, "graph_tensor" | "tensor_storage") || OWN_ALLOCATOR.contains(&f.framework.as_str()) {
        return Rule::AllocatorRefused;
    }
    // PyTorch's caching allocator prints its own message (a cut one lands above); a bare CUDA
    // runtime error is an allocation outside it.
    if matches!(f.framework.as_str(), "cuda" | "cublas" | "cudnn" | "hip") {
        return Rule::OutsideAllocator;
    }
    Rule::NoEvidence
}

/// What was missing for `f` (GPU events only).
pub fn missing(f: &OomFeatures) -> Vec<&'static str> {
    if !f.gpu_event() {
        return Vec::new();
    }
    let mut m = Vec::new();
    if f.no_shape() {
        m.push("job shape");
    }
    if f.own_samples == 0 {
        m.push("process samples");
    }
    if f.no_allocator() {
        m.push("allocator numbers");
    }
    if f.phase_source == "unknown" {
        m.push("phase");
    }
    if f.capacity_bytes.is_none() {
        m.push("capacity");
    }
    if f.others_bytes.is_none() {
        m.push("other processes");
    }
    m
}

/// What would decide between the scenarios left open: one line per missing kind of evidence that
/// separates them.
fn decide(open: &[Scenario], f: &OomFeatures) -> Vec<String> {
    if open.len() < 2 && !open.contains(&Unknown) {
        return Vec::new();
    }
    // A job's log that only shows a process gone (a worker that exited, a launcher killing the
    // rest): the GPU's numbers say nothing of it; the host's do.
    if f.kind == "host_oom_kill" {
        return vec![
            "the kernel's OOM-killer line for the process (`Out of memory: Killed process N`): the agent reads /dev/kmsg on the node (`dmesg` by hand)".to_owned(),
            "the host memory the job used before it died against its limit (the pod's or cgroup's `memory.max`, the node's RAM)".to_owned(),
        ];
    }
    // Pinned host memory refused: the host's readings decide, and a run without pinning.
    if f.message_hint == oomlens_parse::PINNED_HOST_HINT && open.contains(&HostOom) {
        return vec![
            "the host's memory at the failure against its limits (free RAM, the pod's or cgroup's `memory.max`, the locked-memory limit `ulimit -l`; under WSL 2 the VM's share of RAM)".to_owned(),
            "the same job with pinning off (the DataLoader's `pin_memory=False`, a smaller pinned or offloaded cache): a host failure goes away, a full GPU does not".to_owned(),
        ];
    }
    let has = |s: Scenario| open.contains(&s);
    let mut d = Vec::new();
    if f.phase_source == "unknown" && (has(Static) || has(Batch) || has(Sequence)) {
        d.push(
            "the phase (loading, forward, backward, optimizer step, generation): keep the traceback in the job's log, or report it with the hook (oomlens_hook)"
                .to_owned(),
        );
    }
    if f.no_shape() && (has(Static) || has(Batch) || has(Sequence)) {
        d.push("the job shape (model size, batch, sequence length, precision, optimizer): report it with the hook".to_owned());
    }
    // PyTorch's caching allocator (also under the engines built on it) prints its numbers and the
    // hook reads its state; other frameworks' allocators only their own error's report.
    let torch = f.framework.is_empty() || TORCH_ALLOCATOR.contains(&f.framework.as_str());
    if f.no_allocator() {
        d.push(if torch {
            "the allocator's numbers (allocated, reserved, free): PyTorch's full OOM message or the hook's report".to_owned()
        } else {
            format!(
                "the memory in use and free at the failure: {}'s full error with its memory report, or the agent's NVML samples of the process and the GPU",
                program(&f.framework)
            )
        });
    }
    if torch && f.alloc_largest_free_bytes.is_none() && (has(Fragmentation) || has(Static) || has(Batch)) {
        d.push(
            "the allocator's state at the OOM (largest free block, the code holding the memory): oomlens_hook.install(record_history=True) in the job"
                .to_owned(),
        );
    }
    if f.capacity_bytes.is_none() {
        d.push("the GPU's capacity: the agent fills it from NVML on the node".to_owned());
    }
    if (has(Contention) || has(Unknown)) && f.others_from != "message" && f.others_from != "samples" {
        d.push(
            "the other processes on the GPU and their memory: the agent's NVML process samples".to_owned(),
        );
    }
    if f.own_samples == 0 && (has(Batch) || has(Sequence)) {
        d.push("the process's memory curve before the failure (steady steps or one new request): the agent's samples".to_owned());
    }
    d
}

/// Applies the rule set to `f`. Never reads `truth_scenario`.
pub fn attribute(f: &OomFeatures) -> Attribution {
    let rule = first_rule(f);
    let odds = odds(rule, f);
    let (scenario, confidence_pct) = odds[0];
    let alternatives: Vec<Alternative> = odds[1..]
        .iter()
        .map(|&(scenario, confidence_pct)| Alternative { scenario, confidence_pct })
        .collect();
    let open: Vec<Scenario> = odds.iter().map(|o| o.0).collect();
    let missing = missing(f);
    let mut ev = Vec::new();
    ev.push(format!("rule {}: {}", rule.id(), conclusion(rule, f)));
    if f.gpu_event() {
        gpu_evidence(f, &mut ev);
    } else if let Some(rss) = f.host_rss_bytes {
        ev.push(format!("host: the killed process held {} of host RAM", b(rss)));
    }
    if !missing.is_empty() {
        ev.push(format!("missing: {}", missing.join(", ")));
    }
    Attribution {
        scenario,
        rule,
        confidence_pct,
        alternatives,
        evidence: ev,
        remedy: scenario.remedy(),
        missing,
        decide: decide(&open, f),
    }
}

fn b(v: u64) -> String {
    format_size(v)
}

fn ob(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), b)
}

fn bi(v: i64) -> String {
    if v < 0 { format!("-{}", b(v.unsigned_abs())) } else { format!("+{}", b(v.unsigned_abs())) }
}

fn share(part: u64, whole: u64) -> String {
    if whole == 0 { "-".to_owned() } else { format!("{:.0} %", part as f64 * 100.0 / whole as f64) }
}

/// ` (12.00 MiB)`, or nothing without a size.
fn in_parens(v: Option<u64>) -> String {
    v.map_or_else(String::new, |v| format!(" ({})", b(v)))
}

fn secs(ms: i64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// How the evidence names what printed a message: its framework, or "the program" when that is
/// only the CUDA runtime's words (`cuda`), a program no rule names (`other`) or unknown.
fn program(framework: &str) -> &str {
    match framework {
        "" | "cuda" | "other" => "the program",
        named => named,
    }
}

fn conclusion(rule: Rule, f: &OomFeatures) -> String {
    let cap = ob(f.capacity_bytes);
    match rule {
        Rule::HostOomKill => match f.host_evidence.as_str() {
            "" => "the Linux OOM killer ended the process: host RAM ran out".to_owned(),
            "explicit" => {
                format!("{} reports the job killed for running out of memory: host RAM ran out", program(&f.framework))
            }
            "allocation" => "a host memory allocation was refused: host RAM ran out".to_owned(),
            "shm" => "a worker died of SIGBUS: shared memory (/dev/shm, held in host RAM) ran out".to_owned(),
            "sigkill" => "the process was killed by SIGKILL (exit status 137 / -9): on a node that is almost always the OOM killer".to_owned(),
            "exited" => format!(
                "{} reports a worker, kernel or driver that died without saying why: most often killed for host memory (the OOM killer, or its shared memory)",
                program(&f.framework)
            ),
            _ => "a launcher killed its workers after one died without an error of its own: most often the OOM killer".to_owned(),
        },
        Rule::XidError => format!(
            "Xid {} is a GPU/driver error, not GPU memory exhaustion",
            f.xid.map_or_else(|| "?".to_owned(), |x| x.to_string())
        ),
        Rule::StaticEstimate => format!(
            "weights + gradients + optimizer state alone ({}) exceed the GPU ({cap})",
            ob(f.static_estimate_bytes)
        ),
        Rule::StartupReservation => {
            "at start-up the weights and the configured context (KV cache, compute buffers) do not fit: the static state".to_owned()
        }
        Rule::StartupFreeMemory => {
            "at start-up the engine found less free memory than it was configured to take: other processes hold the rest".to_owned()
        }
        Rule::NoCacheBlocks => {
            "after profiling, no memory was left for the KV cache: memory held by another process (most often), the weights, or the profile run's activations".to_owned()
        }
        Rule::BatchBudget => "the engine's batch budget (concurrent sequences, prefill tokens) does not fit".to_owned(),
        Rule::BatchSearchExhausted => {
            "the batch-size search failed down to one sample: a single sample does not fit (its length, or the model)".to_owned()
        }
        Rule::PinnedHostMemory => {
            "the failing call pinned host memory (page-locked RAM the GPU can reach, none of its own memory): the host's RAM, or its limit on pinned memory, ran out".to_owned()
        }
        Rule::NeighboursTookIt => format!(
            "the process alone would have fitted ({} with its cache, of {cap}); other processes held {} ({})",
            ob(f.with_cache_bytes),
            ob(f.others_bytes),
            match f.others_from.as_str() {
                "message" => "listed in the message",
                "samples" => "process samples",
                "implied" => "the GPU's memory outside this process",
                _ => "the GPU's memory outside this allocator, less an assumed context",
            }
        ),
        Rule::StaticAtLoad if f.phase_effective == "optimizer_step" => format!(
            "failed during {}, after the backward pass freed the activations: the optimizer's temporaries scale with the model, so the static state does not fit",
            phase_words(f)
        ),
        Rule::StaticAtLoad => format!("failed during {}: the static state does not fit", phase_words(f)),
        Rule::SnapshotFragmented => format!(
            "the allocator's free blocks add up to {} but the largest is {}, less than the {} requested: fragmentation (from the job's allocator snapshot)",
            ob(f.alloc_cached_free_bytes),
            ob(f.alloc_largest_free_bytes),
            ob(f.requested_bytes)
        ),
        Rule::SnapshotWeights => format!(
            "the allocator snapshot's sites: {} held by loading weights and optimizer state against {} by activations: the static state",
            ob(f.alloc_static_bytes),
            ob(f.alloc_activation_bytes)
        ),
        Rule::SnapshotActivations => format!(
            "the allocator snapshot's sites: {} held by activations (forward/backward/inference code) against {} by weights and optimizer state: {}",
            ob(f.alloc_activation_bytes),
            ob(f.alloc_static_bytes),
            if attention_sites(f) { "attention, which grows with the sequence length" } else { "the step's batch" }
        ),
        Rule::SequenceAttention => format!(
            "the failed request ({}) is one layer's seq² attention matrix at seq {}",
            ob(f.requested_bytes),
            f.seq_len.map_or_else(|| "?".to_owned(), |s| s.to_string())
        ),
        Rule::SingleHugeRequest => format!(
            "one request of {} ({}{}): a single huge tensor, as a long input's attention or buffer makes",
            ob(f.requested_bytes),
            match f.capacity_bytes {
                Some(c) => format!("{} of the GPU", share(f.requested_bytes.unwrap_or(0), c)),
                None => "the GPU's capacity not known".to_owned(),
            },
            f.own_rise_bytes.map_or_else(String::new, |r| format!(", more than it ever took at once before: {}", b(r)))
        ),
        Rule::FragmentedCache => format!(
            "the allocator held {} cached but unused ({} of the GPU; with the {} free that covers the {} requested): not in one usable block",
            ob(f.cached_free_bytes),
            share(f.cached_free_bytes.unwrap_or(0), f.capacity_bytes.unwrap_or(0)),
            ob(f.free_bytes),
            ob(f.requested_bytes)
        ),
        // What the failing allocation was, with its size when known.
        Rule::AttentionAtFailure | Rule::WeightTensor | Rule::BatchTensor | Rule::LongTensor => {
            let (what, is) = match rule {
                Rule::AttentionAtFailure => (
                    "the failing allocation",
                    "was made in attention code, whose score matrix grows with the square of the sequence length",
                ),
                Rule::WeightTensor => (
                    "the refused tensor",
                    "is shaped like a convolution's weights: a variable, its gradient or an optimizer slot — the model's state",
                ),
                Rule::BatchTensor => {
                    ("the refused tensor", "is a batch of activations (its first dimension, the batch, is 4 or more)")
                }
                _ => ("the refused tensor", "holds one or two samples with a very long dimension: one long input"),
            };
            format!("{what}{} {is}", in_parens(f.requested_bytes))
        }
        Rule::FreeButRefused => format!(
            "the device reported {} free for a {} request and still refused it: a limit outside the GPU's memory (the host's RAM and page file, which back device allocations on Windows), or its free memory in pieces",
            ob(f.free_bytes),
            ob(f.requested_bytes)
        ),
        Rule::InferenceTooBig => format!(
            "the process alone needed {} of {cap} during {}: the input's length",
            ob(f.need_alone_bytes),
            phase_words(f)
        ),
        Rule::BatchActivations => format!(
            "the process alone needed {} of {cap} in {}: the activations of {}",
            ob(f.need_alone_bytes),
            phase_words(f),
            f.batch_size.map_or_else(
                || "the step (its input's length or its batch), or weights that barely fit".to_owned(),
                |s| format!("batch {s}")
            )
        ),
        Rule::ContextCreation => {
            "a CUDA context or library handle could not be created: the GPU was already nearly full".to_owned()
        }
        Rule::StaticNoFrees => format!(
            "the GPU is full ({} allocated of {cap}) and the allocator has freed nothing ({} cached): the weights, not a step's activations",
            ob(f.allocated_bytes),
            ob(f.cached_free_bytes)
        ),
        Rule::AllocatorRefused => format!(
            "{} could not allocate {} (the message gives no capacity)",
            f.framework,
            f.requested_bytes.map_or_else(|| "a tensor, its size not given".to_owned(), |q| format!("a tensor of {}", b(q)))
        ),
        Rule::EngineRuntime => {
            "the local engine ran out after loading, without numbers: its weights and context (sized at load) do not fit beside what else holds the GPU, or one request is too long".to_owned()
        }
        Rule::DevicePreallocation => {
            "the framework could not reserve its memory region on the device at start-up: the GPU was already occupied".to_owned()
        }
        Rule::OutsideAllocator => {
            "a CUDA runtime error outside the framework's caching allocator, without numbers: most often a context or workspace allocation on a GPU others already fill".to_owned()
        }
        Rule::PhaseOnly => format!("no allocator numbers; it failed during {}", phase_words(f)),
        Rule::NeighbourGrowth => format!(
            "no allocator numbers; the other processes on the GPU grew by {} in the {} before",
            bi(f.others_growth_bytes),
            secs(f.window_ms)
        ),
        Rule::NoEvidence => "the message does not say enough to decide".to_owned(),
    }
}

/// One stored site in words: `12.00 GiB at train.py:88 forward (forward)`.
pub fn site_words(stored: &str) -> String {
    let s = AllocSite::parse(stored);
    let file = s.site.rsplit('/').next().unwrap_or(&s.site);
    if s.phase.is_empty() {
        format!("{} at {file} {}", b(s.bytes), s.function)
    } else {
        format!("{} at {file} {} ({})", b(s.bytes), s.function, s.phase.replace('_', " "))
    }
}

fn phase_words(f: &OomFeatures) -> String {
    match f.phase_effective.as_str() {
        "" => "an unknown phase".to_owned(),
        "startup" => "start-up (inferred)".to_owned(),
        "steady" => "steady-state steps (inferred)".to_owned(),
        p => p.replace('_', " "),
    }
}

fn gpu_evidence(f: &OomFeatures, ev: &mut Vec<String>) {
    // 1. when
    let when = match f.phase_source.as_str() {
        "reported" => format!("when: {} (reported)", f.phase.replace('_', " ")),
        "traceback" => format!("when: {} (read from the log: {})", f.phase.replace('_', " "), f.phase_clue),
        "inferred" => format!(
            "when: {} (inferred: first seen {} before the failure at {}, last {} of a {} peak)",
            phase_words(f),
            secs(f.ts_ms - f.own_first_ts),
            b(f.own_first_used),
            b(f.own_last_used),
            b(f.own_max_used)
        ),
        _ => "when: unknown (no phase reported, no traceback, no process samples)".to_owned(),
    };
    ev.push(when);
    if f.own_samples > 0 {
        ev.push(format!(
            "curve: {} samples in the {} before: first {}, floor {}, peak {}, last {} (swing {}, largest rise {})",
            f.own_samples,
            secs(f.window_ms),
            b(f.own_first_used),
            b(f.own_min_used),
            b(f.own_max_used),
            b(f.own_last_used),
            b(f.own_swing_bytes.unwrap_or(0)),
            f.own_max_rise.map_or_else(|| "not recorded".to_owned(), b)
        ));
    }
    // 2. static
    if let (Some(s), Some(c)) = (f.static_estimate_bytes, f.capacity_bytes) {
        let mut line = format!(
            "static: {} from the job shape ({} params/GPU × {} B weights",
            b(s),
            f.params_per_gpu.map_or_else(|| "?".to_owned(), |p| format!("{:.2} B", p as f64 / 1e9)),
            f.weight_bytes_per_param.unwrap_or(0)
        );
        if !f.optimizer.is_empty() {
            let _ = write!(
                line,
                " + {} B grads + {} B {} state",
                f.weight_bytes_per_param.unwrap_or(0),
                f.optimizer_bytes_per_param.unwrap_or(0),
                f.optimizer
            );
        }
        if f.zero_stage.unwrap_or(0) > 0 {
            let _ = write!(line, ", ZeRO-{} over {}", f.zero_stage.unwrap_or(0), f.zero_divisor);
        }
        let _ = write!(line, ") = {} of the {} GPU", share(s, c), b(c));
        ev.push(line);
    }
    if let Some(c) = f.capacity_bytes {
        let from = if f.capacity_source == "nvml" { " (NVML: the message has none)" } else { "" };
        ev.push(format!("capacity: {}{from}", b(c)));
    }
    if f.alloc_cached_free_bytes.is_some() || !f.alloc_sites.is_empty() {
        let mut line = format!(
            "allocator snapshot: {} free in its segments, largest free block {}",
            ob(f.alloc_cached_free_bytes),
            ob(f.alloc_largest_free_bytes)
        );
        let sites: Vec<String> = f.alloc_sites.iter().take(3).map(|s| site_words(s)).collect();
        if !sites.is_empty() {
            let _ = write!(line, "; holding most: {}", sites.join(", "));
        }
        ev.push(line);
    }
    // 3. the process alone
    if let (Some(need), Some(c)) = (f.need_alone_bytes, f.capacity_bytes) {
        let ctx = match f.context_bytes {
            Some(x) => format!("context {}", b(x)),
            None => format!("context {} (assumed)", b(f.context_assumed_bytes)),
        };
        let parts = match f.need_alone_from.as_str() {
            "allocator" => {
                format!("{ctx} + allocated {} + requested {}", ob(f.allocated_bytes), ob(f.requested_bytes))
            }
            "process" => format!(
                "its GPU memory {} + requested {} (no allocator numbers)",
                b(need.saturating_sub(f.requested_bytes.unwrap_or(0))),
                ob(f.requested_bytes)
            ),
            _ => format!(
                "its last sample {} + requested {} (no allocator numbers)",
                b(f.own_last_used),
                ob(f.requested_bytes)
            ),
        };
        ev.push(format!("need alone: {} = {parts} ({} of {})", b(need), share(need, c), b(c)));
    }
    if f.batch_size.is_some() || f.seq_len.is_some() {
        let mut line = format!(
            "shape: batch {}, seq {}",
            f.batch_size.map_or_else(|| "?".to_owned(), |v| v.to_string()),
            f.seq_len.map_or_else(|| "?".to_owned(), |v| v.to_string())
        );
        match f.attention_bytes {
            Some(0) => line.push_str(", FlashAttention on (no seq² matrix)"),
            Some(a) => {
                let _ = write!(line, ", one layer's attention matrix {}", b(a));
            }
            None => {}
        }
        if f.activation_checkpointing == Some(1) {
            line.push_str(", activation checkpointing on");
        }
        ev.push(line);
    }
    // 4. others
    if let Some(out) = f.outside_bytes {
        ev.push(format!(
            "outside the allocator: {} (capacity − free − reserved){}",
            b(out),
            f.context_bytes.map_or_else(String::new, |c| format!(
                ", of which this process's own non-allocator memory {}",
                b(c)
            ))
        ));
    }
    match (f.others_bytes, f.others_from.as_str()) {
        (Some(0), _) => ev.push("others: no other process held memory on the GPU".to_owned()),
        (Some(o), from) => {
            let mut line = match from {
                "message" => {
                    format!("others: {} other process(es) held {} at the failure", f.others_listed, b(o))
                }
                "samples" => {
                    format!("others: other processes held {} at the failure (process samples)", b(o))
                }
                "implied" => format!(
                    "others: {} held by other processes (outside memory less this process's own)",
                    b(o)
                ),
                _ => format!(
                    "others: up to {} held by other processes (outside memory less an assumed context)",
                    b(o)
                ),
            };
            if f.others_seen > 0 {
                let _ = write!(
                    line,
                    "; they grew by {} in the {} before (largest {})",
                    bi(f.others_growth_bytes),
                    secs(f.window_ms),
                    bi(f.top_neighbour_growth_bytes)
                );
            }
            ev.push(line);
        }
        (None, _) => {}
    }
    // 5. the allocator
    if let (Some(cached), Some(req)) = (f.cached_free_bytes, f.requested_bytes) {
        ev.push(format!(
            "allocator: reserved − allocated = {} cached ({} of the GPU), {} requested, {} free on the GPU",
            b(cached),
            share(cached, f.capacity_bytes.unwrap_or(0)),
            b(req),
            ob(f.free_bytes)
        ));
    }
    if f.message_hint == oomlens_parse::PINNED_HOST_HINT {
        ev.push(format!(
            "message: the failing call pinned host memory (its own words, or the traceback's innermost frame: then the event's label {})",
            oomlens_parse::MESSAGE_OP_LABEL
        ));
    } else if f.message_hint == oomlens_parse::ATTENTION_HINT {
        ev.push(format!(
            "message: the failing allocation was made in attention code (the frame or graph node is the event's label {})",
            oomlens_parse::MESSAGE_OP_LABEL
        ));
    } else if let Some(what) = match f.message_hint.as_str() {
        "weight_tensor" => Some("a convolution's weights"),
        "batch_tensor" => Some("a batch of activations"),
        "long_tensor" => Some("one long input"),
        _ => None,
    } {
        ev.push(format!("message: the refused tensor's shape (in the message) reads as {what}"));
    } else if !f.message_hint.is_empty() {
        ev.push(format!("message: {}", f.message_hint.replace('_', " ")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::features::EventEvidence;

    const GIB: u64 = 1 << 30;

    fn feat(e: EventEvidence) -> OomFeatures {
        OomFeatures::derive(e)
    }

    /// A PyTorch 2.x message on an 80 GiB GPU, refined per case.
    fn msg() -> EventEvidence {
        EventEvidence {
            kind: "cuda_oom".into(),
            source: "log".into(),
            framework: "pytorch".into(),
            gpu_index: Some(0),
            requested_bytes: Some(2 * GIB),
            capacity_bytes: Some(80 * GIB),
            free_bytes: Some(100 * MIB),
            allocated_bytes: Some(78 * GIB),
            reserved_bytes: Some(78 * GIB + 300 * MIB),
            process_used_bytes: Some(79 * GIB),
            window_ms: 60_000,
            ..EventEvidence::default()
        }
    }

    fn rule(e: EventEvidence) -> Rule {
        first_rule(&feat(e))
    }

    #[test]
    fn the_allocator_snapshot_decides_fragmentation_and_what_holds_the_memory() {
        // Free blocks add up to the 2 GiB request, the largest is 512 MiB: decided fragmentation,
        // even though the printed totals (300 MiB cached) would never have said so.
        let frag = EventEvidence {
            alloc_cached_free_bytes: Some(3 * GIB),
            alloc_largest_free_bytes: Some(512 * MIB),
            ..msg()
        };
        assert_eq!(rule(frag.clone()), Rule::SnapshotFragmented);
        let a = attribute(&feat(frag));
        assert_eq!((a.scenario, a.confidence_pct), (Fragmentation, 90));
        assert!(a.evidence.iter().any(|e| e.contains("largest free block 512.00 MiB")), "{:?}", a.evidence);
        // A large cached share that the printed totals call fragmentation, while the snapshot's
        // free blocks do not even add up to the request (the rest is pending frees of other
        // streams): not fragmentation.
        let cached = EventEvidence {
            allocated_bytes: Some(50 * GIB),
            reserved_bytes: Some(78 * GIB),
            alloc_cached_free_bytes: Some(4 * GIB),
            alloc_largest_free_bytes: Some(GIB),
            requested_bytes: Some(10 * GIB),
            ..msg()
        };
        assert_eq!(
            rule(EventEvidence {
                alloc_cached_free_bytes: None,
                alloc_largest_free_bytes: None,
                ..cached.clone()
            }),
            Rule::FragmentedCache
        );
        assert_ne!(attribute(&feat(cached)).scenario, Fragmentation);
        // Sites: weights and optimizer state vs activations.
        let weights = EventEvidence {
            alloc_cached_free_bytes: Some(100 * MIB),
            alloc_largest_free_bytes: Some(20 * MIB),
            alloc_static_bytes: Some(60 * GIB),
            alloc_activation_bytes: Some(10 * GIB),
            alloc_sites: vec![format!("{}|900|load|from_pretrained|/app/modeling_utils.py:3900", 60 * GIB)],
            ..msg()
        };
        assert_eq!(rule(weights.clone()), Rule::SnapshotWeights);
        let a = attribute(&feat(weights.clone()));
        assert_eq!(a.scenario, Static);
        assert!(
            a.evidence
                .iter()
                .any(|e| e.contains("60.00 GiB at modeling_utils.py:3900 from_pretrained (load)")),
            "{:?}",
            a.evidence
        );
        let acts = EventEvidence {
            alloc_static_bytes: Some(10 * GIB),
            alloc_activation_bytes: Some(60 * GIB),
            alloc_sites: vec![format!("{}|40|forward|forward|/job/train.py:88", 60 * GIB)],
            ..weights.clone()
        };
        assert_eq!(rule(acts.clone()), Rule::SnapshotActivations);
        assert_eq!(attribute(&feat(acts.clone())).scenario, Batch);
        let attn = EventEvidence {
            alloc_sites: vec![format!(
                "{}|40|forward|scaled_dot_product_attention|/job/attn.py:12",
                60 * GIB
            )],
            ..acts
        };
        assert_eq!(attribute(&feat(attn)).scenario, Sequence);
        // Neither kind dominates: the other rules decide.
        let mixed = EventEvidence {
            alloc_static_bytes: Some(40 * GIB),
            alloc_activation_bytes: Some(30 * GIB),
            ..weights
        };
        assert_eq!(rule(mixed), Rule::BatchActivations);
        // Without a snapshot the missing evidence is named.
        assert!(attribute(&feat(msg())).decide.iter().any(|d| d.contains("oomlens_hook.install")));
    }

    #[test]
    fn each_rule_fires_on_its_case() {
        assert_eq!(rule(msg()), Rule::BatchActivations, "full, routine slack: not fragmentation");
        let a = attribute(&feat(msg()));
        assert_eq!((a.scenario, a.confidence_pct), (Static, 40));
        assert!(a.alternatives.iter().any(|x| x.scenario == Sequence));
        assert!(a.alternatives.iter().any(|x| x.scenario == Batch));
        // The same on a 12 GB card: a training step's batch first.
        let small = EventEvidence {
            capacity_bytes: Some(12 * GIB),
            allocated_bytes: Some(11 * GIB),
            reserved_bytes: Some(11 * GIB + 100 * MIB),
            process_used_bytes: Some(11 * GIB + 600 * MIB),
            requested_bytes: Some(200 * MIB),
            free_bytes: Some(50 * MIB),
            ..msg()
        };
        let a = attribute(&feat(small));
        assert_eq!((a.rule, a.scenario, a.confidence_pct), (Rule::BatchActivations, Batch, 40));
        assert!(a.decide.iter().any(|d| d.starts_with("the phase")), "{:?}", a.decide);

        let host =
            EventEvidence { kind: "host_oom_kill".into(), gpu_index: None, ..EventEvidence::default() };
        assert_eq!(rule(host.clone()), Rule::HostOomKill);
        assert_eq!(attribute(&feat(host.clone())).confidence_pct, 95);
        let killed = EventEvidence { host_evidence: "sigkill".into(), ..host.clone() };
        let a = attribute(&feat(killed));
        assert_eq!(a.confidence_pct, 90);
        // What would decide a host kill is the host's evidence, not the GPU's.
        assert!(a.decide.iter().any(|d| d.contains("/dev/kmsg")), "{:?}", a.decide);
        assert!(!a.decide.iter().any(|d| d.contains("GPU") || d.contains("allocator")), "{:?}", a.decide);
        let exited = EventEvidence { host_evidence: "exited".into(), framework: "databricks".into(), ..host };
        let a = attribute(&feat(exited));
        assert_eq!((a.scenario, a.confidence_pct), (HostOom, 60));
        assert!(
            a.evidence[0].contains("databricks reports a worker, kernel or driver that died"),
            "{:?}",
            a.evidence
        );
        assert_eq!(rule(EventEvidence { kind: "xid".into(), ..EventEvidence::default() }), Rule::XidError);

        // Others: listed, implied by the numbers, or only outside the allocator.
        let tenant = EventEvidence {
            allocated_bytes: Some(30 * GIB),
            reserved_bytes: Some(30 * GIB + 200 * MIB),
            process_used_bytes: Some(31 * GIB),
            other_pids: vec![9],
            other_used_bytes: vec![48 * GIB],
            ..msg()
        };
        assert_eq!(rule(tenant.clone()), Rule::NeighboursTookIt);
        assert_eq!(attribute(&feat(tenant.clone())).confidence_pct, 55);
        // The job's allocator summary shows its 200 MiB of slack in pieces too small for a 150 MiB
        // request: still the neighbour's 48 GiB, not fragmentation; a cache worth having back
        // (12 GiB in pieces) is fragmentation even beside a neighbour.
        let pieces = EventEvidence {
            requested_bytes: Some(150 * MIB),
            alloc_cached_free_bytes: Some(200 * MIB),
            alloc_largest_free_bytes: Some(100 * MIB),
            ..tenant.clone()
        };
        assert_eq!(rule(pieces.clone()), Rule::NeighboursTookIt);
        let big_cache = EventEvidence {
            reserved_bytes: Some(42 * GIB),
            process_used_bytes: Some(43 * GIB),
            other_used_bytes: vec![36 * GIB],
            alloc_cached_free_bytes: Some(12 * GIB),
            ..pieces
        };
        assert_eq!(rule(big_cache), Rule::SnapshotFragmented);
        let implied = EventEvidence { other_pids: vec![], other_used_bytes: vec![], ..tenant.clone() };
        assert_eq!(feat(implied.clone()).others_from, "implied");
        assert_eq!(rule(implied), Rule::NeighboursTookIt);
        let v1 = EventEvidence {
            process_used_bytes: None,
            other_pids: vec![],
            other_used_bytes: vec![],
            ..tenant
        };
        assert_eq!(feat(v1.clone()).others_from, "outside");
        assert_eq!(attribute(&feat(v1)).confidence_pct, 50);

        // A large cache that, with the free memory, would serve the request: fragmentation.
        let frag = EventEvidence {
            requested_bytes: Some(10 * GIB),
            allocated_bytes: Some(30 * GIB),
            reserved_bytes: Some(70 * GIB),
            process_used_bytes: Some(71 * GIB),
            free_bytes: Some(9 * GIB),
            ..msg()
        };
        assert_eq!(rule(frag.clone()), Rule::FragmentedCache);
        // A cache of 12 % of the card beside six times as much live memory is not "reserved >>
        // allocated": what a batch's activations leave between steps.
        let slack = EventEvidence {
            requested_bytes: Some(2 * GIB),
            allocated_bytes: Some(60 * GIB),
            reserved_bytes: Some(70 * GIB),
            process_used_bytes: Some(71 * GIB),
            free_bytes: Some(GIB),
            ..msg()
        };
        assert_ne!(rule(slack), Rule::FragmentedCache);
        // Enough free memory reported and still refused.
        let free = EventEvidence {
            requested_bytes: Some(20 * MIB),
            allocated_bytes: Some(GIB),
            reserved_bytes: Some(GIB),
            process_used_bytes: Some(GIB + 300 * MIB),
            free_bytes: Some(78 * GIB),
            ..msg()
        };
        assert_eq!(rule(free.clone()), Rule::FreeButRefused);
        // 10 MiB to spare is a full GPU (`Tried to allocate 40.00 MiB` with `50.00 MiB free`):
        // the driver's free figure holds memory one allocation cannot have.
        let full = EventEvidence {
            requested_bytes: Some(40 * MIB),
            allocated_bytes: Some(78 * GIB),
            reserved_bytes: Some(78 * GIB),
            process_used_bytes: Some(78 * GIB + 300 * MIB),
            free_bytes: Some(50 * MIB),
            ..msg()
        };
        assert_ne!(rule(full.clone()), Rule::FreeButRefused);
        let spare = EventEvidence { free_bytes: Some(40 * MIB + FREE_SLACK_BYTES + MIB), ..full };
        assert_eq!(rule(spare), Rule::FreeButRefused);
        // The device had the memory: a limit outside it, the host's first.
        let a = attribute(&feat(free.clone()));
        assert_eq!(a.scenario, HostOom);
        assert!(a.alternatives.iter().any(|x| x.scenario == Fragmentation), "{:?}", a.alternatives);
        // One huge request.
        let huge = EventEvidence {
            requested_bytes: Some(40 * GIB),
            allocated_bytes: Some(45 * GIB),
            reserved_bytes: Some(45 * GIB),
            process_used_bytes: Some(46 * GIB),
            free_bytes: Some(34 * GIB),
            ..msg()
        };
        assert_eq!(rule(huge), Rule::SingleHugeRequest);
        // The failing allocation was attention's: the sequence, with or without numbers; not
        // where the device had the memory free, and a fragmented cache still comes first.
        let attn = EventEvidence { message_hint: oomlens_parse::ATTENTION_HINT.into(), ..msg() };
        let a = attribute(&feat(attn.clone()));
        assert_eq!((a.rule, a.scenario, a.confidence_pct), (Rule::AttentionAtFailure, Sequence, 65));
        assert!(a.evidence.iter().any(|e| e.contains("attention")), "{:?}", a.evidence);
        let tf = EventEvidence {
            framework: "tensorflow".into(),
            message_hint: oomlens_parse::ATTENTION_HINT.into(),
            ..EventEvidence::default()
        };
        assert_eq!(rule(EventEvidence { kind: "cuda_oom".into(), ..tf }), Rule::AttentionAtFailure);
        let free_attn = EventEvidence { message_hint: oomlens_parse::ATTENTION_HINT.into(), ..free.clone() };
        assert_eq!(rule(free_attn), Rule::FreeButRefused);
        let frag_attn = EventEvidence { message_hint: oomlens_parse::ATTENTION_HINT.into(), ..frag.clone() };
        assert_eq!(rule(frag_attn), Rule::FragmentedCache);
        // A bare runtime error raised while pinning host memory is the host's, and the host's
        // readings decide; the allocator's numbers would be the device's own message.
        let pinned = EventEvidence {
            kind: "cuda_oom".into(),
            framework: "cuda".into(),
            message_hint: oomlens_parse::PINNED_HOST_HINT.into(),
            ..EventEvidence::default()
        };
        let a = attribute(&feat(pinned.clone()));
        assert_eq!((a.rule, a.scenario, a.confidence_pct), (Rule::PinnedHostMemory, HostOom, 60));
        assert!(a.evidence.iter().any(|e| e.contains("pinned host memory")), "{:?}", a.evidence);
        assert!(a.decide.iter().any(|d| d.contains("pin_memory=False")), "{:?}", a.decide);
        assert_eq!(
            rule(EventEvidence {
                framework: "cuda".into(),
                kind: "cuda_oom".into(),
                ..EventEvidence::default()
            }),
            Rule::OutsideAllocator
        );
        let numbered = EventEvidence { message_hint: oomlens_parse::PINNED_HOST_HINT.into(), ..msg() };
        assert_ne!(rule(numbered), Rule::PinnedHostMemory);
        // The phase decides: loading → static; generation → the input's length.
        let load = EventEvidence { phase: "load".into(), phase_label: "traceback".into(), ..msg() };
        assert_eq!(rule(load), Rule::StaticAtLoad);
        // A start-up only inferred from the samples (the process appeared in the window and grew
        // to its peak, as any job failing in its first seconds does) does not outrank a cache
        // holding a large share of the GPU; a start-up with nothing cached stays static.
        let young = |e: EventEvidence| EventEvidence {
            own_samples: 30,
            own_first_ts: e.ts_ms - 3_000,
            own_first_used: GIB,
            own_max_used: 79 * GIB,
            own_last_used: 79 * GIB,
            ..e
        };
        let frag_young = young(EventEvidence { ts_ms: 100_000, ..frag.clone() });
        assert_eq!(feat(frag_young.clone()).phase_effective, "startup");
        assert_eq!(rule(frag_young), Rule::FragmentedCache);
        let full_young = young(EventEvidence { ts_ms: 100_000, ..msg() });
        assert_eq!(rule(full_young), Rule::StaticAtLoad);
        let frag_load =
            EventEvidence { phase: "load".into(), phase_label: "traceback".into(), ..frag.clone() };
        assert_eq!(rule(frag_load), Rule::StaticAtLoad);
        let gen_phase = EventEvidence { phase: "inference".into(), phase_label: "traceback".into(), ..msg() };
        assert_eq!(rule(gen_phase), Rule::InferenceTooBig);
        // Inside the optimizer's step, from the frames alone: the static state; a reported phase
        // (the hook, with its job shape) leaves it to the estimate and the numbers.
        let step = EventEvidence { phase: "optimizer_step".into(), phase_label: "traceback".into(), ..msg() };
        let a = attribute(&feat(step.clone()));
        assert_eq!((a.rule, a.scenario), (Rule::StaticAtLoad, Static));
        assert!(a.evidence[0].contains("optimizer's temporaries"), "{:?}", a.evidence);
        let reported = EventEvidence { phase_label: "reported".into(), ..step };
        assert_ne!(rule(reported), Rule::StaticAtLoad);
        // The runtime's start-up allocation failed: others filled the GPU, even at a load phase.
        let ctx = EventEvidence {
            phase: "load".into(),
            phase_label: "traceback".into(),
            message_hint: "context_creation".into(),
            ..EventEvidence::default()
        };
        assert_eq!(rule(EventEvidence { kind: "cuda_oom".into(), ..ctx }), Rule::ContextCreation);
        // Messages that say it.
        for (hint, want) in [
            ("kv_cache", Rule::StartupReservation),
            ("startup_free_memory", Rule::StartupFreeMemory),
            ("cache_blocks", Rule::NoCacheBlocks),
            ("prefill_tokens", Rule::BatchBudget),
            ("kv_pool", Rule::BatchBudget),
            ("batch_pool", Rule::BatchBudget),
            ("batch_search_exhausted", Rule::BatchSearchExhausted),
        ] {
            let e = EventEvidence {
                message_hint: hint.into(),
                framework: "vllm".into(),
                ..EventEvidence::default()
            };
            assert_eq!(rule(EventEvidence { kind: "cuda_oom".into(), ..e }), want, "{hint}");
        }
        // No numbers at all: a bare CUDA runtime error leans on contention; a cut PyTorch
        // message says nothing.
        let bare =
            EventEvidence { kind: "cuda_oom".into(), framework: "cuda".into(), ..EventEvidence::default() };
        let a = attribute(&feat(bare.clone()));
        assert_eq!((a.rule, a.scenario), (Rule::OutsideAllocator, Contention));
        assert!(a.decide.iter().any(|d| d.contains("the program's full error")), "{:?}", a.decide);
        let cut = EventEvidence { framework: "pytorch".into(), ..bare.clone() };
        let a = attribute(&feat(cut));
        assert_eq!(a.scenario, Unknown);
        // What decides names the framework's own evidence: PyTorch's numbers and the hook's
        // allocator summary for PyTorch, the framework's error and NVML for the others.
        assert!(a.decide.iter().any(|d| d.contains("PyTorch's full OOM message")), "{:?}", a.decide);
        assert!(a.decide.iter().any(|d| d.contains("record_history")), "{:?}", a.decide);
        // A program no rule names (framework `other`) is not called by that word.
        let other = attribute(&feat(EventEvidence { framework: "other".into(), ..bare.clone() }));
        assert!(other.decide.iter().any(|d| d.contains("the program's full error")), "{:?}", other.decide);
        let limit = EventEvidence {
            kind: "host_oom_kill".into(),
            framework: "other".into(),
            host_evidence: "explicit".into(),
            ..EventEvidence::default()
        };
        let a = attribute(&feat(limit));
        assert!(a.evidence[0].contains("the program reports the job killed"), "{:?}", a.evidence);
        let cubecl = attribute(&feat(EventEvidence { framework: "cubecl".into(), ..bare.clone() }));
        assert!(cubecl.decide.iter().any(|d| d.contains("cubecl's full error")), "{:?}", cubecl.decide);
        assert!(
            !cubecl.decide.iter().any(|d| d.contains("PyTorch") || d.contains("record_history")),
            "{:?}",
            cubecl.decide
        );
        assert_eq!(
            rule(EventEvidence { message_hint: "context_creation".into(), ..bare.clone() }),
            Rule::ContextCreation
        );
        assert_eq!(rule(EventEvidence { phase: "backward".into(), ..bare.clone() }), Rule::PhaseOnly);
        // A framework's own tensor storage (Caffe, old PyTorch) refused: the step's tensors, as
        // TensorFlow's allocator, not a workspace outside it.
        let storage = EventEvidence { message_hint: "tensor_storage".into(), ..bare.clone() };
        assert_eq!(attribute(&feat(storage)).rule, Rule::AllocatorRefused);
        let caffe = EventEvidence { framework: "caffe".into(), ..bare.clone() };
        assert_eq!(attribute(&feat(caffe)).scenario, Batch);
        // MXNet's pooled storage manager is its tensor allocator.
        let mxnet = EventEvidence { framework: "mxnet".into(), ..bare.clone() };
        assert_eq!(attribute(&feat(mxnet)).rule, Rule::AllocatorRefused);
        // So are ONNX Runtime's arena and MindSpore's pool (version 18); a program's own words
        // about GPU memory, its allocator unknown, are no evidence.
        for fw in ["onnxruntime", "mindspore", "tensorrt", "rapids"] {
            let own = EventEvidence { framework: fw.into(), ..bare.clone() };
            assert_eq!(attribute(&feat(own)).rule, Rule::AllocatorRefused, "{fw}");
        }
        let other = EventEvidence { framework: "other".into(), ..bare.clone() };
        assert_eq!(attribute(&feat(other)).rule, Rule::NoEvidence);
        // TensorFlow's refused tensor, by its shape: a weight is the model's state, a batch-first
        // activation the batch, one long sample the length; without a telling shape the
        // allocator's refusal. A huge batch-first tensor is still the batch; the device's free
        // memory covering the request still says the size was not the problem.
        let tf = EventEvidence { framework: "tensorflow".into(), ..bare.clone() };
        for (hint, want, scenario) in [
            ("weight_tensor", Rule::WeightTensor, Static),
            ("batch_tensor", Rule::BatchTensor, Batch),
            ("long_tensor", Rule::LongTensor, Sequence),
            ("graph_tensor", Rule::AllocatorRefused, Batch),
        ] {
            let shaped =
                EventEvidence { message_hint: hint.into(), requested_bytes: Some(72 << 20), ..tf.clone() };
            let a = attribute(&feat(shaped));
            assert_eq!((a.rule, a.scenario), (want, scenario), "{hint}");
            if want != Rule::AllocatorRefused {
                assert!(a.evidence[0].contains("the refused tensor (72.00 MiB) "), "{:?}", a.evidence);
                assert!(
                    a.evidence.iter().any(|e| e.starts_with("message: the refused tensor's shape")),
                    "{:?}",
                    a.evidence
                );
            }
        }
        let huge_batch = EventEvidence {
            message_hint: "batch_tensor".into(),
            requested_bytes: Some(100 << 30),
            ..tf.clone()
        };
        assert_eq!(rule(huge_batch), Rule::BatchTensor);
        let free_batch = EventEvidence { message_hint: "batch_tensor".into(), ..free.clone() };
        assert_eq!(rule(free_batch), Rule::FreeButRefused);
        // A local engine after loading, without numbers: its reservation first; its phase
        // (always inference) does not make it the sequence.
        let engine =
            EventEvidence { framework: "llama.cpp".into(), phase: "inference".into(), ..bare.clone() };
        let a = attribute(&feat(engine));
        assert_eq!((a.rule, a.scenario), (Rule::EngineRuntime, Static));
        let turbomind = EventEvidence { framework: "lmdeploy".into(), ..bare };
        assert_eq!(attribute(&feat(turbomind)).rule, Rule::EngineRuntime);
        assert!(a.alternatives.iter().any(|x| x.scenario == Contention), "{:?}", a.alternatives);
    }

    #[test]
    fn shape_rules_with_full_data() {
        let shaped = EventEvidence {
            params: Some(1_000_000_000),
            batch_size: Some(8),
            seq_len: Some(2048),
            heads: Some(16),
            precision: "bf16".into(),
            optimizer: "adamw".into(),
            phase: "forward".into(),
            ..msg()
        };
        assert_eq!(
            rule(EventEvidence { params: Some(10_000_000_000), ..shaped.clone() }),
            Rule::StaticEstimate
        );
        let att = 2 * 8 * 16 * 2048 * 2048;
        assert_eq!(
            rule(EventEvidence { requested_bytes: Some(att), ..shaped.clone() }),
            Rule::SequenceAttention
        );
        assert_eq!(rule(shaped), Rule::BatchActivations);
    }

    #[test]
    fn odds_are_distributions() {
        for r in Rule::ALL {
            for f in [feat(msg()), feat(EventEvidence { host_evidence: "launcher".into(), ..msg() })] {
                let o = odds(r, &f);
                let total: u32 = o.iter().map(|x| u32::from(x.1)).sum();
                assert!(total <= 100, "{r:?}: {total}");
                assert!(o.windows(2).all(|w| w[0].1 >= w[1].1) || r == Rule::NoEvidence, "{r:?} not ordered");
            }
        }
    }

    #[test]
    fn truth_is_never_an_input() {
        for mut e in [msg(), EventEvidence { kind: "host_oom_kill".into(), ..msg() }] {
            let before = attribute(&feat(e.clone()));
            for truth in ["", "static", "contention", "nonsense"] {
                e.truth_scenario = truth.to_owned();
                assert_eq!(attribute(&feat(e.clone())), before);
            }
        }
    }

    #[test]
    fn rule_ids_round_trip() {
        for r in Rule::ALL {
            assert_eq!(Rule::from_id(r.id()), Some(r));
        }
        assert_eq!(Rule::from_id("nope"), None);
    }
}
