//! `oomlens fit`: will this job fit on that GPU? This module owns the memory model of one GPU of
//! a transformer job — the breakdown into weights, gradients, optimizer state, activations,
//! attention, context and allocator slack, the predicted peak against the GPU's capacity, and the
//! largest batch and sequence that fit (searched over the model) — and what it is compared with:
//! the model-state estimators of accelerate and DeepSpeed, and (with `--calibrate`) the fleet's
//! observed peaks and floors of the same shape ([`calibrate`]).
//!
//! * [`arch`] — the architecture: parameter count and dimensions from a Hugging Face
//!   `config.json`, from flags, or assumed from the nearest reference model.
//! * [`calibrate`] — the fleet's observations of the same shape in ClickHouse and the correction.
//! * [`report`] — the answer as text and JSON.
//!
//! The arithmetic of model states (bytes per parameter, ZeRO sharding) is
//! [`oomlens_schema::memory`], shared with the attribution's static estimate. The model, its
//! assumptions, its accuracy against published figures and its limits: `docs/fit.md`.

pub mod arch;
pub mod calibrate;
pub mod report;

use oomlens_collector::analysis::features::CONTEXT_ESTIMATE_BYTES;
use oomlens_schema::gpu::GpuSpec;
use oomlens_schema::memory::{self, Optimizer, PerParam, Precision};
use serde::Serialize;

pub use arch::{Architecture, Family};

const MIB: u64 = 1 << 20;

/// NCCL's buffers when the job talks to other GPUs (TP, PP or DP > 1).
pub const NCCL_BYTES: u64 = 512 * MIB;
/// Extra cuBLAS / NCCL workspaces under tensor parallelism.
pub const TP_WORKSPACE_BYTES: u64 = 256 * MIB;
/// Default share of the caching allocator's reserved memory that is slack, percent.
pub const DEFAULT_SLACK_PCT: u32 = 10;
/// The largest batch the search tries.
pub const MAX_BATCH: u64 = 1 << 20;
/// The longest sequence the search tries.
pub const MAX_SEQ: u64 = 1 << 24;

/// `oomlens fit` failed: the input is wrong (exit 2) or the fleet could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// No model shape given.
    #[error(
        "no model shape: give --params (e.g. 7B), the dimensions (--hidden, --layers, --heads), or \
         --model-config path/to/config.json"
    )]
    NoShape,
    /// No GPU given.
    #[error("no GPU: give --gpu (one of {known}) or --gpu-memory (e.g. 80GiB)")]
    NoGpu {
        /// The known models.
        known: String,
    },
    /// An unknown GPU model.
    #[error("unknown GPU model {name:?}: known are {known} (or give --gpu-memory)")]
    UnknownGpu {
        /// What was asked for.
        name: String,
        /// The known models.
        known: String,
    },
    /// The config file cannot be read.
    #[error("cannot read {path}: {reason}")]
    ConfigRead {
        /// The file.
        path: String,
        /// Why.
        reason: std::io::Error,
    },
    /// The config file is not JSON.
    #[error("{path} is not valid JSON: {reason}")]
    ConfigJson {
        /// The file.
        path: String,
        /// Why.
        reason: serde_json::Error,
    },
    /// A field of the config is missing or wrong.
    #[error("model config: {0}")]
    ConfigField(String),
    /// The shape cannot be.
    #[error("impossible shape: {0}")]
    BadShape(String),
    /// A combination the model does not cover.
    #[error("{0}")]
    Unsupported(String),
    /// Reading the fleet's observations failed.
    #[error(transparent)]
    Calibration(#[from] calibrate::CalibrationError),
}

/// Training or inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Forward and backward passes with an optimizer.
    Train,
    /// Forward passes only: weights, KV cache, a working set.
    Inference,
}

/// Activation recomputation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Checkpointing {
    /// Every activation is kept for the backward pass.
    None,
    /// The attention scores are recomputed (Megatron's selective recomputation).
    Selective,
    /// Only each layer's input is kept; a layer is recomputed in the backward pass.
    Full,
}

/// Where the parameter count comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamsSource {
    /// `--params`.
    Given,
    /// Counted from the architecture (config or dimensions).
    Counted,
}

/// Where the architecture comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchSource {
    /// A Hugging Face `config.json`.
    Config,
    /// `--hidden`, `--layers`, … flags.
    Flags,
    /// Only a parameter count was given: the nearest reference model's dimensions.
    Assumed,
}

/// One job on one GPU: everything the model needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    /// Training or inference.
    pub mode: Mode,
    /// Parameters of the whole model.
    pub params: u64,
    /// Where the count comes from.
    pub params_source: ParamsSource,
    /// The architecture.
    pub arch: Architecture,
    /// Where the architecture comes from.
    pub arch_source: ArchSource,
    /// Weight precision.
    #[serde(serialize_with = "serialize_display")]
    pub precision: Precision,
    /// Optimizer (none for inference).
    #[serde(serialize_with = "serialize_display")]
    pub optimizer: Optimizer,
    /// ZeRO stage 0–3.
    pub zero_stage: u8,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Data-parallel degree (what ZeRO shards over).
    pub dp: u32,
    /// Micro-batch per GPU (sequences).
    pub batch: u64,
    /// Sequence length (tokens).
    pub seq: u64,
    /// Activation recomputation.
    pub checkpointing: Checkpointing,
    /// FlashAttention (or any fused attention that never materialises the score matrix).
    pub flash_attention: bool,
    /// Sequence parallelism with TP (the norm and dropout activations split too).
    pub sequence_parallel: bool,
    /// The allocator's slack, percent of its reserved memory.
    pub slack_pct: u32,
}

/// One line of the breakdown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    /// `weights`, `gradients`, `optimizer_state`, `kv_cache`, `activations`, `attention`,
    /// `context` or `allocator_slack`.
    pub name: &'static str,
    /// Bytes on the GPU.
    pub bytes: u64,
    /// How it was computed.
    pub detail: String,
}

/// The model's answer for one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// The breakdown, in order.
    pub parts: Vec<Part>,
    /// The predicted peak: the sum of the parts.
    pub peak_bytes: u64,
}

impl Estimate {
    /// A part's bytes (0 when absent).
    pub fn part(&self, name: &str) -> u64 {
        self.parts.iter().find(|p| p.name == name).map_or(0, |p| p.bytes)
    }
}

/// The memory a job can use on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    /// The model's key (`H100-80GB`), or `custom` for `--gpu-memory`.
    pub model: String,
    /// The name its driver reports ('' for custom).
    pub name: String,
    /// Total memory as the driver reports it.
    pub total_bytes: u64,
    /// What CUDA can hand out (total − the driver's reservation): the capacity the peak is
    /// compared with.
    pub capacity_bytes: u64,
}

impl Gpu {
    /// A catalog entry.
    pub fn from_spec(spec: &GpuSpec) -> Gpu {
        Gpu {
            model: spec.key.to_owned(),
            name: spec.name.to_owned(),
            total_bytes: spec.total_bytes(),
            capacity_bytes: spec.capacity_bytes(),
        }
    }

    /// A GPU of `bytes` (`--gpu-memory`), all of it usable.
    pub fn custom(bytes: u64) -> Gpu {
        Gpu { model: "custom".to_owned(), name: String::new(), total_bytes: bytes, capacity_bytes: bytes }
    }
}

/// Serializes a value by its `Display` (the schema's names: `bf16`, `adamw`).
pub(crate) fn serialize_display<S: serde::Serializer, T: std::fmt::Display>(
    v: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Bytes of `bits` for people: `2`, `0.5`.
fn bytes_text(bits: u64) -> String {
    if bits.is_multiple_of(8) { format!("{}", bits / 8) } else { format!("{:.1}", bits as f64 / 8.0) }
}

fn mul(factors: &[u64]) -> u128 {
    factors.iter().fold(1u128, |acc, &f| acc.saturating_mul(u128::from(f)))
}

fn clamp(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

impl Job {
    /// Checks what the model covers.
    pub fn validate(&self) -> Result<(), FitError> {
        if self.batch == 0 || self.seq == 0 {
            return Err(FitError::BadShape("--batch and --seq must be at least 1".to_owned()));
        }
        if self.params == 0 {
            return Err(FitError::BadShape("the model has no parameters".to_owned()));
        }
        if self.zero_stage > 3 {
            return Err(FitError::BadShape(format!("ZeRO stage {} does not exist (0–3)", self.zero_stage)));
        }
        if self.tp == 0 || self.pp == 0 || self.dp == 0 {
            return Err(FitError::BadShape("--tp, --pp and --dp must be at least 1".to_owned()));
        }
        if u64::from(self.pp) > self.arch.layers {
            return Err(FitError::BadShape(format!(
                "{} pipeline stages for {} layers",
                self.pp, self.arch.layers
            )));
        }
        if u64::from(self.tp) > self.arch.heads {
            return Err(FitError::BadShape(format!(
                "tensor parallelism {} over {} attention heads",
                self.tp, self.arch.heads
            )));
        }
        if self.slack_pct >= 100 {
            return Err(FitError::BadShape("--slack-pct must be below 100".to_owned()));
        }
        if self.mode == Mode::Train && !self.precision.trainable() {
            return Err(FitError::Unsupported(format!(
                "training {} weights is not modelled: quantized weights train through adapters \
                 (QLoRA), which this model does not cover; use --mode inference or a float precision",
                self.precision
            )));
        }
        Ok(())
    }

    /// Parameters on this GPU (params / (TP × PP)).
    pub fn params_per_gpu(&self) -> u64 {
        memory::params_per_gpu(self.params, self.tp, self.pp)
    }

    /// Bytes per activation element relative to 16-bit (2 in fp32, else 1).
    fn act_factor(&self) -> u64 {
        if self.precision == Precision::Fp32 { 2 } else { 1 }
    }

    /// Layers of one pipeline stage.
    fn stage_layers(&self) -> u64 {
        self.arch.layers.div_ceil(u64::from(self.pp))
    }

    /// Activation bytes per token of one layer in 16-bit, without the score matrices (after
    /// Korthikanti et al.: 34·h for a GPT layer), split over TP: with sequence parallelism all of
    /// it, without it all but the 10·h of norms, layer inputs and dropout masks.
    pub fn layer_bytes_per_token(&self) -> u64 {
        let a = &self.arch;
        let (h, kv, f) = (a.hidden, a.kv_dim(), a.intermediate);
        // Attention: its input 2h, Q 2h, K and V 2·kv each, the output projection's input 2h,
        // the dropout mask h. MLP: input 2h, dropout mask h, and 4f (GeLU's input and output) or
        // 8f (gate, up, SiLU output, their product). Two norm inputs 4h.
        let mlp = if a.gated() { 8 * f } else { 4 * f };
        let total = 14 * h + 4 * kv + mlp;
        let tp = u64::from(self.tp);
        if tp == 1 {
            total
        } else if self.sequence_parallel {
            total.div_ceil(tp)
        } else {
            10 * h + (total - 10 * h).div_ceil(tp)
        }
    }

    /// Bytes of the attention score matrices of one layer and micro-batch (softmax output 2,
    /// dropout mask 1, dropout output 2 bytes per element: 5·a·s²·b, heads split over TP), 0 with
    /// FlashAttention or selective recomputation.
    pub fn layer_score_bytes(&self) -> u64 {
        if self.flash_attention || self.checkpointing == Checkpointing::Selective {
            return 0;
        }
        let heads = self.arch.heads.div_ceil(u64::from(self.tp));
        memory::score_matrix_bytes(self.batch, heads, self.seq, 5).saturating_mul(self.act_factor())
    }

    /// The loss's logits: fp32 logits and their softmax, `8·s·b·V` bytes, vocabulary split over TP
    /// (none for an encoder without an LM head).
    pub fn logits_bytes(&self) -> u64 {
        if self.arch.family == Family::Encoder {
            return 0;
        }
        let vocab = self.arch.vocab.div_ceil(u64::from(self.tp));
        clamp(mul(&[8, self.seq, self.batch, vocab]))
    }

    /// The model's breakdown for this job.
    pub fn estimate(&self) -> Estimate {
        let (mut parts, allocator) = match self.mode {
            Mode::Train => self.training_parts(),
            Mode::Inference => self.inference_parts(),
        };
        let world = u64::from(self.tp) * u64::from(self.pp) * u64::from(self.dp);
        let mut context = CONTEXT_ESTIMATE_BYTES;
        let mut detail =
            format!("CUDA context, kernels and library handles {:.2} GiB", gib(CONTEXT_ESTIMATE_BYTES));
        if world > 1 {
            context += NCCL_BYTES;
            detail.push_str(&format!(" + NCCL buffers {:.2} GiB", gib(NCCL_BYTES)));
        }
        if self.tp > 1 {
            context += TP_WORKSPACE_BYTES;
            detail.push_str(&format!(" + TP workspaces {:.2} GiB", gib(TP_WORKSPACE_BYTES)));
        }
        parts.push(Part { name: "context", bytes: context, detail });
        let pct = u64::from(self.slack_pct);
        let slack = clamp(u128::from(allocator) * u128::from(pct) / u128::from(100 - pct));
        parts.push(Part {
            name: "allocator_slack",
            bytes: slack,
            detail: format!("{pct} % of the caching allocator's reserved memory (cached, fragmented)"),
        });
        let peak_bytes = parts.iter().fold(0u64, |acc, p| acc.saturating_add(p.bytes));
        Estimate { parts, peak_bytes }
    }

    /// Training: model states, activations, attention; returns the parts and what the allocator holds.
    fn training_parts(&self) -> (Vec<Part>, u64) {
        let p = self.params_per_gpu();
        let per = PerParam::training(self.precision, self.optimizer);
        let states = memory::model_states(p, per, self.zero_stage, self.dp);
        let shard = |stage: u8| {
            if self.zero_stage >= stage && self.dp > 1 {
                format!(" / {} (ZeRO-{})", self.dp, self.zero_stage)
            } else {
                String::new()
            }
        };
        let per_gpu = format!("{:.3} B params/GPU", p as f64 / 1e9);
        // ZeRO-3 gathers the full weights of the layer being computed and of the one prefetched.
        let gathered = if self.zero_stage >= 3 && self.dp > 1 {
            let layer = self.arch.params_per_layer() / u64::from(self.tp);
            clamp(mul(&[2, layer, per.weight_bits]) / 8)
        } else {
            0
        };
        let mut weights_detail =
            format!("{per_gpu} × {} B ({}){}", bytes_text(per.weight_bits), self.precision, shard(3));
        if gathered > 0 {
            weights_detail.push_str(&format!(" + 2 layers gathered {:.2} GiB", gib(gathered)));
        }
        let optimizer_detail = match self.optimizer {
            Optimizer::None => "no optimizer state".to_owned(),
            o => format!(
                "{per_gpu} × {} B ({o}{}){}",
                per.optimizer_bytes,
                if self.precision.mixed() { ": state + fp32 master weights" } else { "" },
                shard(1)
            ),
        };
        let mut parts = vec![
            Part { name: "weights", bytes: states.weights.saturating_add(gathered), detail: weights_detail },
            Part {
                name: "gradients",
                bytes: states.gradients,
                detail: format!("{per_gpu} × {} B{}", bytes_text(per.grad_bits), shard(2)),
            },
            Part { name: "optimizer_state", bytes: states.optimizer, detail: optimizer_detail },
        ];
        let (activations, attention, act_detail, att_detail) = self.training_activations();
        parts.push(Part { name: "activations", bytes: activations, detail: act_detail });
        parts.push(Part { name: "attention", bytes: attention, detail: att_detail });
        let allocator = parts.iter().fold(0u64, |acc, p| acc.saturating_add(p.bytes));
        (parts, allocator)
    }

    /// Activations and score matrices at the peak of the worst pipeline stage: (activations,
    /// attention, their details).
    fn training_activations(&self) -> (u64, u64, String, String) {
        let tokens = u128::from(self.seq) * u128::from(self.batch);
        let act = u128::from(self.act_factor());
        let layer_linear = tokens * u128::from(self.layer_bytes_per_token()) * act;
        let layer_scores = u128::from(self.layer_score_bytes());
        let stage_layers = u128::from(self.stage_layers());
        let pp = u128::from(self.pp);
        let tp_split = if self.tp > 1 && self.sequence_parallel { u128::from(self.tp) } else { 1 };
        // What one micro-batch keeps over the stage's layers (linear, scores), and the working set
        // of the one layer recomputed at a time under full checkpointing.
        let (kept, working) = match self.checkpointing {
            Checkpointing::Full => {
                let inputs = stage_layers * tokens * 2 * u128::from(self.arch.hidden) * act / tp_split;
                ((inputs, 0), (layer_linear, layer_scores))
            }
            _ => ((stage_layers * layer_linear, stage_layers * layer_scores), (0, 0)),
        };
        let logits = u128::from(self.logits_bytes());
        // The first stage holds `pp` micro-batches in flight (1F1B); the last one, one micro-batch
        // and the logits.
        let first = (kept.0 * pp + working.0, kept.1 * pp + working.1);
        let last = (kept.0 + working.0 + logits, kept.1 + working.1);
        let (linear, scores, stage) = if self.pp == 1 {
            (last.0, last.1, String::new())
        } else if first.0 + first.1 >= last.0 + last.1 {
            (
                first.0,
                first.1,
                format!(", first of {} pipeline stages ({} micro-batches in flight)", self.pp, self.pp),
            )
        } else {
            (last.0, last.1, format!(", last of {} pipeline stages", self.pp))
        };
        let coef = self.layer_bytes_per_token() as f64 / self.arch.hidden as f64;
        let width = if self.precision == Precision::Fp32 { "32-bit" } else { "16-bit" };
        let per_layer = match self.checkpointing {
            Checkpointing::Full => format!(
                "{} layers × 2·s·b·h (inputs) + 1 layer recomputed × {coef:.1}·s·b·h",
                self.stage_layers()
            ),
            _ => format!("{} layers × {coef:.1}·s·b·h", self.stage_layers()),
        };
        let logits_part = if self.arch.family != Family::Encoder && (self.pp == 1 || stage.contains("last")) {
            " + logits 8·s·b·V"
        } else {
            ""
        };
        let act_detail = format!("{per_layer} ({width}){logits_part}{stage}");
        let att_detail = if self.flash_attention {
            "FlashAttention: no score matrices kept".to_owned()
        } else if self.checkpointing == Checkpointing::Selective {
            "selective recomputation: score matrices recomputed".to_owned()
        } else {
            let layers = if self.checkpointing == Checkpointing::Full { 1 } else { self.stage_layers() };
            format!("{layers} layer(s) × 5·a·s²·b (softmax, dropout mask and output)")
        };
        (clamp(linear), clamp(scores), act_detail, att_detail)
    }

    /// Inference: weights, KV cache, one layer's working set, the prefill's score matrices.
    fn inference_parts(&self) -> (Vec<Part>, u64) {
        let a = &self.arch;
        let p = self.params_per_gpu();
        let weights = memory::model_states(p, PerParam::inference(self.precision), 0, 1).weights;
        let bits = self.precision.bits();
        let kv_elem: u64 = if self.precision == Precision::Fp32 { 4 } else { 2 };
        let tp = u64::from(self.tp);
        let kv_heads = a.kv_heads.div_ceil(tp);
        let kv = clamp(mul(&[2, self.stage_layers(), kv_heads, a.head_dim, self.seq, self.batch, kv_elem]));
        // One layer's transient tensors while the whole batch is prefilled: the residual and
        // norm output, Q/K/V, the attention output, the MLP's hidden tensors.
        let mlp_hidden = if a.gated() { 3 * a.intermediate } else { 2 * a.intermediate };
        let width = 3 * a.hidden + (a.q_dim() + 2 * a.kv_dim() + mlp_hidden).div_ceil(tp);
        let working = mul(&[self.seq, self.batch, width, kv_elem]);
        // Sampling: the last position's fp32 logits and their softmax.
        let logits = mul(&[8, self.batch, a.vocab.div_ceil(tp)]);
        let scores = if self.flash_attention {
            0
        } else {
            memory::score_matrix_bytes(self.batch, a.heads.div_ceil(tp), self.seq, 2 * kv_elem)
        };
        let parts = vec![
            Part {
                name: "weights",
                bytes: weights,
                detail: format!(
                    "{:.3} B params/GPU × {} B ({})",
                    p as f64 / 1e9,
                    bytes_text(bits),
                    self.precision
                ),
            },
            Part {
                name: "kv_cache",
                bytes: kv,
                detail: format!(
                    "2 × {} layers × {kv_heads} KV heads × {} × s × b × {kv_elem} B ({:.3} MiB per token)",
                    self.stage_layers(),
                    a.head_dim,
                    (2 * self.stage_layers() * kv_heads * a.head_dim * kv_elem) as f64 / MIB as f64
                ),
            },
            Part {
                name: "activations",
                bytes: clamp(working + logits),
                detail: "one layer's prefill working set + last-token logits".to_owned(),
            },
            Part {
                name: "attention",
                bytes: scores,
                detail: if self.flash_attention {
                    "FlashAttention: no score matrices".to_owned()
                } else {
                    "one layer's prefill scores and softmax, a·s²·b".to_owned()
                },
            },
        ];
        let allocator = parts.iter().fold(0u64, |acc, p| acc.saturating_add(p.bytes));
        (parts, allocator)
    }

    /// The largest micro-batch whose peak × `factor` fits in `capacity` (0 when not even 1).
    pub fn largest_batch(&self, capacity: u64, factor: f64) -> u64 {
        largest(1, MAX_BATCH, |b| Job { batch: b, ..self.clone() }.fits_in(capacity, factor))
    }

    /// The longest sequence whose peak × `factor` fits in `capacity` (0 when not even 1 token).
    pub fn largest_seq(&self, capacity: u64, factor: f64) -> u64 {
        largest(1, MAX_SEQ, |s| Job { seq: s, ..self.clone() }.fits_in(capacity, factor))
    }

    fn fits_in(&self, capacity: u64, factor: f64) -> bool {
        self.estimate().peak_bytes as f64 * factor <= capacity as f64
    }
}

/// The largest `n` in `[lo, hi]` with `ok(n)` for a monotone `ok` (true up to some point), 0 when
/// `ok(lo)` fails. Doubling, then bisection.
fn largest(lo: u64, hi: u64, ok: impl Fn(u64) -> bool) -> u64 {
    if !ok(lo) {
        return 0;
    }
    let mut good = lo;
    let mut bad = None;
    while bad.is_none() {
        let next = good.saturating_mul(2).min(hi);
        if next == good {
            return good;
        }
        if ok(next) { good = next } else { bad = Some(next) }
    }
    let mut bad = bad.unwrap_or(hi);
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if ok(mid) { good = mid } else { bad = mid }
    }
    good
}

/// The dimensions given as flags (each overrides the config's value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dims {
    /// `--hidden`.
    pub hidden: Option<u64>,
    /// `--layers`.
    pub layers: Option<u64>,
    /// `--heads`.
    pub heads: Option<u64>,
    /// `--kv-heads`.
    pub kv_heads: Option<u64>,
    /// `--vocab`.
    pub vocab: Option<u64>,
    /// `--intermediate`.
    pub intermediate: Option<u64>,
}

/// The vocabulary assumed when the dimensions come from flags without `--vocab` (Llama's).
pub const DEFAULT_VOCAB: u64 = 32_000;

/// The architecture from a config file (with the flags' overrides), from the flags alone, or
/// assumed from the nearest reference model to `params`.
pub fn resolve_arch(
    params: Option<u64>,
    model_config: Option<&std::path::Path>,
    dims: Dims,
) -> Result<(Architecture, ArchSource), FitError> {
    if let Some(path) = model_config {
        let mut a = Architecture::from_config_file(path)?;
        let set = |field: &mut u64, v: Option<u64>| {
            if let Some(v) = v {
                *field = v;
            }
        };
        set(&mut a.hidden, dims.hidden);
        set(&mut a.layers, dims.layers);
        set(&mut a.heads, dims.heads);
        set(&mut a.kv_heads, dims.kv_heads);
        set(&mut a.vocab, dims.vocab);
        set(&mut a.intermediate, dims.intermediate);
        if dims.hidden.is_some() || dims.heads.is_some() {
            a.head_dim = arch::head_dim(a.hidden, a.heads);
        }
        a.check()?;
        return Ok((a, ArchSource::Config));
    }
    match (dims.hidden, dims.layers, dims.heads) {
        (Some(h), Some(l), Some(n)) => {
            let a = Architecture::from_dims(
                h,
                l,
                n,
                dims.kv_heads,
                dims.vocab.unwrap_or(DEFAULT_VOCAB),
                dims.intermediate,
            )?;
            Ok((a, ArchSource::Flags))
        }
        (None, None, None)
            if dims.kv_heads.is_none() && dims.vocab.is_none() && dims.intermediate.is_none() =>
        {
            match params {
                Some(p) => Ok((Architecture::reference_for(p), ArchSource::Assumed)),
                None => Err(FitError::NoShape),
            }
        }
        _ => Err(FitError::BadShape(
            "--hidden, --layers and --heads go together (or give --model-config)".to_owned(),
        )),
    }
}

/// The GPU: a catalog model (`--gpu`) or a size (`--gpu-memory`).
pub fn resolve_gpu(model: Option<&str>, memory: Option<u64>) -> Result<Gpu, FitError> {
    match (model, memory) {
        (_, Some(0)) => Err(FitError::BadShape("--gpu-memory must be more than 0".to_owned())),
        (_, Some(bytes)) => Ok(Gpu::custom(bytes)),
        (Some(name), None) => oomlens_schema::gpu::lookup(name).map(Gpu::from_spec).ok_or_else(|| {
            FitError::UnknownGpu { name: name.to_owned(), known: oomlens_schema::gpu::known() }
        }),
        (None, None) => Err(FitError::NoGpu { known: oomlens_schema::gpu::known() }),
    }
}

fn number_times(text: &str, units: &[(&str, u64)], what: &str) -> Result<u64, String> {
    let t: String =
        text.trim().to_ascii_lowercase().chars().filter(|c| !c.is_whitespace() && *c != '_').collect();
    let bad = || format!("{text:?} is not {what}");
    let (n, end) = oomlens_parse::units::number_at(&t, 0).ok_or_else(bad)?;
    let rest = &t[end..];
    let mult = units.iter().find(|(u, _)| *u == rest).map(|(_, m)| *m).ok_or_else(bad)?;
    let v = n.times(mult).ok_or_else(|| format!("{text:?} is too large"))?;
    if v == 0 {
        return Err(format!("{text:?} must be more than 0"));
    }
    Ok(v)
}

/// Parses a count: digits with an optional fraction and K / M / B (G) / T suffix (`7B`, `6.74B`,
/// `350M`, `6738415616`).
pub fn parse_count(text: &str) -> Result<u64, String> {
    const UNITS: &[(&str, u64)] = &[
        ("", 1),
        ("k", 1_000),
        ("m", 1_000_000),
        ("b", 1_000_000_000),
        ("g", 1_000_000_000),
        ("t", 1_000_000_000_000),
    ];
    number_times(text, UNITS, "a count (7B, 350M, 6738415616)")
}

/// Parses a size: digits with an optional fraction and a unit — binary KiB / MiB / GiB / TiB,
/// decimal KB / MB / GB / TB, B or none for bytes (`80GiB`, `24GB`, `81559MiB`).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    const UNITS: &[(&str, u64)] = &[
        ("", 1),
        ("b", 1),
        ("kib", 1 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("tib", 1 << 40),
        ("kb", 1_000),
        ("mb", 1_000_000),
        ("gb", 1_000_000_000),
        ("tb", 1_000_000_000_000),
    ];
    number_times(text, UNITS, "a size (80GiB, 24GB, 81559MiB)")
}

/// Parses a precision name (for clap).
pub fn parse_precision(text: &str) -> Result<Precision, String> {
    Precision::parse(text).ok_or_else(|| format!("{text:?} is not one of {}", Precision::known()))
}

/// Parses an optimizer name (for clap).
pub fn parse_optimizer(text: &str) -> Result<Optimizer, String> {
    Optimizer::parse(text)
        .filter(|_| !text.trim().is_empty())
        .ok_or_else(|| format!("{text:?} is not one of {}", Optimizer::known()))
}

/// What the model-state estimators people reach for first would say for the same job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Anchors {
    /// `accelerate estimate-memory`: "Total Size" (all weights at the precision) for inference,
    /// "Training using Adam" (4 × that) for training.
    pub accelerate_bytes: u64,
    /// DeepSpeed's `estimate_zero2_model_states_mem_needs` (ZeRO 0–2: 4·Ψ + 16·Ψ/N) or
    /// `estimate_zero3_model_states_mem_needs` (4·largest layer + 18·Ψ/N), without offload; Ψ per
    /// TP × PP rank, N the data-parallel degree. Training only.
    pub deepspeed_bytes: Option<u64>,
    /// Which DeepSpeed estimator.
    pub deepspeed_estimator: Option<&'static str>,
}

impl Job {
    /// The anchors for this job.
    pub fn anchors(&self) -> Anchors {
        let total = clamp(mul(&[self.params, self.precision.bits()]) / 8);
        let training = self.mode == Mode::Train;
        let accelerate_bytes = if training { total.saturating_mul(4) } else { total };
        let psi = u128::from(self.params_per_gpu());
        let n = u128::from(self.dp);
        let (deepspeed_bytes, deepspeed_estimator) = match (training, self.zero_stage) {
            (false, _) => (None, None),
            (true, 0..=2) => {
                (Some(clamp(4 * psi + 16 * psi / n)), Some("estimate_zero2_model_states_mem_needs"))
            }
            (true, _) => {
                let largest = u128::from(self.arch.largest_layer_params());
                (Some(clamp(4 * largest + 18 * psi / n)), Some("estimate_zero3_model_states_mem_needs"))
            }
        };
        Anchors { accelerate_bytes, deepspeed_bytes, deepspeed_estimator }
    }
}

#[cfg(test)]
mod tests;
