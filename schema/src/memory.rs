//! The memory arithmetic of a job shape: bytes per parameter by precision and optimizer, and the
//! model states (weights, gradients, optimizer state) one GPU holds under tensor / pipeline
//! parallelism and ZeRO. The one place this is computed: the attribution's static estimate
//! (`oomlens-collector`, `features.rs`) and `oomlens fit` (`oomlens-cli`) both use it.
//!
//! * Weights: `bits / 8` bytes per parameter of the precision (fp32 4, fp16 / bf16 2, fp8 and
//!   int8 1, 4-bit 0.5).
//! * Gradients (training): as many bytes as the weights (2 in mixed precision, 4 in fp32).
//! * Optimizer state (training), per parameter: Adam / AdamW two fp32 moments (8 B) plus, in mixed
//!   precision, fp32 master weights (4 B) — 12 B, so 16 B per parameter with 16-bit weights and
//!   gradients, as in the ZeRO paper; SGD with momentum 4 B (+ 4 B master); 8-bit Adam 2 B (+ 4 B
//!   master); none 0.
//! * ZeRO over the data-parallel degree `dp`: stage ≥ 1 shards the optimizer state, ≥ 2 also the
//!   gradients, 3 also the weights.
//!
//! Integer arithmetic throughout (u128 inside, saturating at `u64::MAX`).

use std::fmt;

/// The precision the weights are stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// 32-bit float.
    Fp32,
    /// bfloat16.
    Bf16,
    /// IEEE half.
    Fp16,
    /// 8-bit float (FP8 recipes).
    Fp8,
    /// 8-bit integer weights (quantized, LLM.int8 / GPTQ-8).
    Int8,
    /// 4-bit weights (NF4, GPTQ / AWQ int4, FP4).
    Int4,
}

impl Precision {
    /// Every precision, widest first.
    pub const ALL: [Precision; 6] =
        [Precision::Fp32, Precision::Bf16, Precision::Fp16, Precision::Fp8, Precision::Int8, Precision::Int4];

    /// Parses a name, case-insensitively: `fp32` (`float32`, `float`), `bf16` (`bfloat16`), `fp16`
    /// (`float16`, `half`), `fp8` (`float8`, `e4m3`, `e5m2`), `int8` (`8bit`), `int4` (`4bit`, `nf4`,
    /// `fp4`). The names of PyTorch dtypes (`torch.bfloat16`) are accepted too.
    pub fn parse(s: &str) -> Option<Precision> {
        let s = s.trim().to_ascii_lowercase();
        let s = s.strip_prefix("torch.").unwrap_or(&s);
        Some(match s {
            "fp32" | "float32" | "float" | "f32" => Precision::Fp32,
            "bf16" | "bfloat16" => Precision::Bf16,
            "fp16" | "float16" | "half" | "f16" => Precision::Fp16,
            "fp8" | "float8" | "e4m3" | "e5m2" | "float8_e4m3fn" | "float8_e5m2" => Precision::Fp8,
            "int8" | "8bit" | "8-bit" => Precision::Int8,
            "int4" | "4bit" | "4-bit" | "nf4" | "fp4" => Precision::Int4,
            _ => return None,
        })
    }

    /// The canonical name (`bf16`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Fp8 => "fp8",
            Precision::Int8 => "int8",
            Precision::Int4 => "int4",
        }
    }

    /// Bits per weight.
    pub const fn bits(self) -> u64 {
        match self {
            Precision::Fp32 => 32,
            Precision::Bf16 | Precision::Fp16 => 16,
            Precision::Fp8 | Precision::Int8 => 8,
            Precision::Int4 => 4,
        }
    }

    /// Bytes per weight when that is a whole number (`None` for 4-bit).
    pub const fn whole_bytes(self) -> Option<u8> {
        match self {
            Precision::Fp32 => Some(4),
            Precision::Bf16 | Precision::Fp16 => Some(2),
            Precision::Fp8 | Precision::Int8 => Some(1),
            Precision::Int4 => None,
        }
    }

    /// Whether weights of this precision are trained directly (the integer formats are quantized
    /// for inference; training them needs adapters).
    pub const fn trainable(self) -> bool {
        matches!(self, Precision::Fp32 | Precision::Bf16 | Precision::Fp16 | Precision::Fp8)
    }

    /// Whether training in it is mixed precision (fp32 master weights kept by the optimizer).
    pub const fn mixed(self) -> bool {
        !matches!(self, Precision::Fp32)
    }

    /// The known names, comma-separated (for error messages).
    pub fn known() -> String {
        Precision::ALL.map(Precision::as_str).join(", ")
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The optimizer of a training job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Optimizer {
    /// No optimizer state (inference, or plain gradients without state).
    None,
    /// Adam.
    Adam,
    /// AdamW.
    AdamW,
    /// SGD with momentum.
    Sgd,
    /// 8-bit Adam / AdamW (bitsandbytes): moments quantized to one byte each.
    Adam8bit,
}

impl Optimizer {
    /// Every optimizer.
    pub const ALL: [Optimizer; 5] =
        [Optimizer::AdamW, Optimizer::Adam, Optimizer::Sgd, Optimizer::Adam8bit, Optimizer::None];

    /// Parses a name, case-insensitively: `adamw`, `adam`, `sgd`, `adam8bit` (`adamw8bit`,
    /// `adam-8bit`, `paged_adamw_8bit`, …), `none` or '' (no optimizer).
    pub fn parse(s: &str) -> Option<Optimizer> {
        let s: String =
            s.trim().to_ascii_lowercase().chars().filter(|c| !matches!(c, '-' | '_' | ' ')).collect();
        Some(match s.as_str() {
            "" | "none" => Optimizer::None,
            "adam" | "fusedadam" => Optimizer::Adam,
            "adamw" | "fusedadamw" | "adamwtorch" | "adamwtorchfused" => Optimizer::AdamW,
            "sgd" => Optimizer::Sgd,
            "adam8bit" | "adamw8bit" | "pagedadam8bit" | "pagedadamw8bit" | "bnbadam8bit"
            | "bnbadamw8bit" => Optimizer::Adam8bit,
            _ => return None,
        })
    }

    /// The canonical name (`adamw`; `none` for no optimizer).
    pub const fn as_str(self) -> &'static str {
        match self {
            Optimizer::None => "none",
            Optimizer::Adam => "adam",
            Optimizer::AdamW => "adamw",
            Optimizer::Sgd => "sgd",
            Optimizer::Adam8bit => "adam8bit",
        }
    }

    /// Optimizer-state bytes per parameter with weights of `precision`: the optimizer's own state
    /// plus, in mixed precision, the fp32 master weights (none keeps nothing).
    pub const fn state_bytes(self, precision: Precision) -> u64 {
        let master = if precision.mixed() { 4 } else { 0 };
        match self {
            Optimizer::None => 0,
            Optimizer::Adam | Optimizer::AdamW => 8 + master,
            Optimizer::Sgd => 4 + master,
            Optimizer::Adam8bit => 2 + master,
        }
    }

    /// The known names, comma-separated (for error messages).
    pub fn known() -> String {
        Optimizer::ALL.map(Optimizer::as_str).join(", ")
    }
}

impl fmt::Display for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one parameter costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerParam {
    /// Bits of its weight.
    pub weight_bits: u64,
    /// Bits of its gradient (0 without training).
    pub grad_bits: u64,
    /// Bytes of its optimizer state.
    pub optimizer_bytes: u64,
}

impl PerParam {
    /// A training job: weights, gradients of the same width, the optimizer's state.
    pub const fn training(precision: Precision, optimizer: Optimizer) -> PerParam {
        PerParam {
            weight_bits: precision.bits(),
            grad_bits: precision.bits(),
            optimizer_bytes: optimizer.state_bytes(precision),
        }
    }

    /// An inference job: weights only.
    pub const fn inference(precision: Precision) -> PerParam {
        PerParam { weight_bits: precision.bits(), grad_bits: 0, optimizer_bytes: 0 }
    }

    /// Bytes per parameter in all, unsharded (e.g. 16 for mixed-precision Adam).
    pub fn total_bytes(&self) -> f64 {
        (self.weight_bits + self.grad_bits) as f64 / 8.0 + self.optimizer_bytes as f64
    }
}

/// The model states one GPU holds, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelStates {
    /// Weights.
    pub weights: u64,
    /// Gradients.
    pub gradients: u64,
    /// Optimizer state (with the fp32 master weights).
    pub optimizer: u64,
}

impl ModelStates {
    /// Weights + gradients + optimizer state.
    pub fn total(&self) -> u64 {
        self.weights.saturating_add(self.gradients).saturating_add(self.optimizer)
    }
}

fn clamp(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Parameters one GPU holds under tensor parallelism `tp` and pipeline parallelism `pp`
/// (`params / (tp × pp)`, each degree at least 1).
pub fn params_per_gpu(params: u64, tp: u32, pp: u32) -> u64 {
    params / (u64::from(tp.max(1)) * u64::from(pp.max(1)))
}

/// The model states of `params` parameters on one GPU (already divided by TP × PP) under ZeRO
/// stage `zero_stage` over `dp` data-parallel ranks.
pub fn model_states(params: u64, per: PerParam, zero_stage: u8, dp: u32) -> ModelStates {
    let shard = |stage: u8| if zero_stage >= stage { u128::from(dp.max(1)) } else { 1 };
    let p = u128::from(params);
    ModelStates {
        weights: clamp(p * u128::from(per.weight_bits) / 8 / shard(3)),
        gradients: clamp(p * u128::from(per.grad_bits) / 8 / shard(2)),
        optimizer: clamp(p * u128::from(per.optimizer_bytes) / shard(1)),
    }
}

/// One attention score matrix (`batch × heads × seq²` elements of `elem_bytes`), bytes.
pub fn score_matrix_bytes(batch: u64, heads: u64, seq: u64, elem_bytes: u64) -> u64 {
    clamp(u128::from(batch) * u128::from(heads) * u128::from(seq) * u128::from(seq) * u128::from(elem_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print() {
        for p in Precision::ALL {
            assert_eq!(Precision::parse(p.as_str()), Some(p));
            assert_eq!(Precision::parse(&p.as_str().to_uppercase()), Some(p));
        }
        assert_eq!(Precision::parse("torch.bfloat16"), Some(Precision::Bf16));
        assert_eq!(Precision::parse("float16"), Some(Precision::Fp16));
        assert_eq!(Precision::parse("nf4"), Some(Precision::Int4));
        assert_eq!(Precision::parse("fp64"), None);
        for o in Optimizer::ALL {
            assert_eq!(Optimizer::parse(o.as_str()), Some(o));
        }
        assert_eq!(Optimizer::parse(""), Some(Optimizer::None));
        assert_eq!(Optimizer::parse("paged_adamw_8bit"), Some(Optimizer::Adam8bit));
        assert_eq!(Optimizer::parse("AdamW"), Some(Optimizer::AdamW));
        assert_eq!(Optimizer::parse("lion"), None);
        assert!(Precision::known().contains("int4") && Optimizer::known().contains("adam8bit"));
    }

    #[test]
    fn bytes_per_parameter() {
        let mixed = PerParam::training(Precision::Bf16, Optimizer::AdamW);
        assert_eq!(mixed.total_bytes(), 16.0, "2 + 2 + 12: the ZeRO paper's K = 12");
        assert_eq!(PerParam::training(Precision::Fp32, Optimizer::Adam).total_bytes(), 16.0, "4 + 4 + 8");
        assert_eq!(PerParam::training(Precision::Fp16, Optimizer::Sgd).total_bytes(), 12.0);
        assert_eq!(PerParam::training(Precision::Fp32, Optimizer::Sgd).total_bytes(), 12.0);
        assert_eq!(PerParam::training(Precision::Bf16, Optimizer::Adam8bit).total_bytes(), 10.0);
        assert_eq!(PerParam::inference(Precision::Int4).total_bytes(), 0.5);
        assert_eq!(Precision::Int4.whole_bytes(), None);
        assert!(!Precision::Int8.trainable() && Precision::Fp8.trainable());
    }

    #[test]
    fn zero_shards_states_in_order() {
        let per = PerParam::training(Precision::Bf16, Optimizer::AdamW);
        let p = 1_000_000_000;
        assert_eq!(model_states(p, per, 0, 8).total(), 16 * p);
        let z1 = model_states(p, per, 1, 8);
        assert_eq!((z1.weights, z1.gradients, z1.optimizer), (2 * p, 2 * p, 12 * p / 8));
        let z2 = model_states(p, per, 2, 8);
        assert_eq!((z2.weights, z2.gradients, z2.optimizer), (2 * p, 2 * p / 8, 12 * p / 8));
        let z3 = model_states(p, per, 3, 8);
        assert_eq!(z3.total(), 16 * p / 8);
        assert_eq!(params_per_gpu(7_000_000_000, 2, 2), 1_750_000_000);
        assert_eq!(params_per_gpu(7, 0, 0), 7, "degrees of 0 count as 1");
        assert_eq!(model_states(u64::MAX, per, 0, 1).optimizer, u64::MAX, "saturates");
        assert_eq!(score_matrix_bytes(8, 16, 2048, 2), 2 * 8 * 16 * 2048 * 2048);
    }
}
