//! The memory model of a transformer job: model catalog, job shape, and the exact
//! sequence of allocations of each phase.
//!
//! * **Static** (per GPU): weights + gradients + optimizer state. Bytes per parameter: weights 4
//!   (fp32) or 2 (bf16/fp16); gradients the same; Adam/AdamW state 8 (fp32: two moments) or 12
//!   (mixed precision: fp32 master weights + two moments) — 16 bytes/param either way; SGD with
//!   momentum 4 (fp32) or 8 (mixed). ZeRO divides by the data-parallel degree: stage 1 the
//!   optimizer state, stage 2 also the gradients, stage 3 also the weights. Allocated one layer
//!   chunk at a time (weights at load, gradients and optimizer state at optimizer init).
//! * **Activations** per layer, after Korthikanti et al. 2022 ("Reducing Activation Recomputation
//!   in Large Transformer Models"): `34·b·s·h` bytes in 16-bit (doubled in fp32), allocated as the
//!   layer input `2bsh`, the QKV projections `6bsh` and the rest of the layer `26bsh`. With
//!   activation checkpointing only the input is kept; the rest is transient in the forward pass
//!   and recomputed in the backward pass.
//! * **Attention** without FlashAttention: the score matrix `2·b·a·s²` bytes per layer (the
//!   `5as/h` term of the paper without dropout), one single allocation per layer — the "single huge
//!   request" that grows with seq². With FlashAttention it is never materialised.
//! * **Logits**: `4·b·s·V` (fp32 upcast for the loss) at the end of the forward pass, and their
//!   gradient at the start of the backward pass.
//! * Backward allocates a `4bsh` gradient buffer per layer and frees the layer's activations;
//!   the optimizer step a temporary of two fp32 layer chunks.
//!
//! The same op generators drive the simulated job and the peak estimates, so a plan's peak is
//! exactly what the job will allocate.

use oomlens_schema::JobShape;

use super::allocator::alloc_size;

/// A transformer architecture from the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arch {
    pub name: &'static str,
    pub params: u64,
    pub hidden: u32,
    pub layers: u32,
    pub heads: u32,
    pub vocab: u32,
}

/// Catalog, smallest first.
pub(crate) const ARCHS: &[Arch] = &[
    Arch { name: "gpt2-small", params: 124_000_000, hidden: 768, layers: 12, heads: 12, vocab: 50_257 },
    Arch { name: "bert-large", params: 335_000_000, hidden: 1024, layers: 24, heads: 16, vocab: 30_522 },
    Arch { name: "gpt-neo-1.3b", params: 1_316_000_000, hidden: 2048, layers: 24, heads: 16, vocab: 50_257 },
    Arch { name: "pythia-2.8b", params: 2_775_000_000, hidden: 2560, layers: 32, heads: 32, vocab: 50_304 },
    Arch { name: "llama-7b", params: 6_738_000_000, hidden: 4096, layers: 32, heads: 32, vocab: 32_000 },
    Arch { name: "llama-13b", params: 13_016_000_000, hidden: 5120, layers: 40, heads: 40, vocab: 32_000 },
    Arch { name: "llama-30b", params: 32_529_000_000, hidden: 6656, layers: 60, heads: 52, vocab: 32_000 },
    Arch { name: "llama-70b", params: 68_977_000_000, hidden: 8192, layers: 80, heads: 64, vocab: 32_000 },
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Precision {
    Fp32,
    Bf16,
    Fp16,
}

impl Precision {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }

    fn weight_bytes(self) -> u64 {
        match self {
            Precision::Fp32 => 4,
            Precision::Bf16 | Precision::Fp16 => 2,
        }
    }

    /// Activation bytes relative to 16-bit.
    fn act_factor(self) -> u64 {
        match self {
            Precision::Fp32 => 2,
            Precision::Bf16 | Precision::Fp16 => 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Optimizer {
    AdamW,
    Adam,
    Sgd,
    /// Inference: no gradients, no optimizer state.
    None,
}

impl Optimizer {
    pub(crate) fn as_str(self) -> Option<&'static str> {
        match self {
            Optimizer::AdamW => Some("adamw"),
            Optimizer::Adam => Some("adam"),
            Optimizer::Sgd => Some("sgd"),
            Optimizer::None => None,
        }
    }

    fn state_bytes(self, p: Precision) -> u64 {
        match (self, p) {
            (Optimizer::Adam | Optimizer::AdamW, Precision::Fp32) => 8,
            (Optimizer::Adam | Optimizer::AdamW, _) => 12,
            (Optimizer::Sgd, Precision::Fp32) => 4,
            (Optimizer::Sgd, _) => 8,
            (Optimizer::None, _) => 0,
        }
    }
}

/// What an allocation is for (decides the traceback and the `Sequence` rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AllocKind {
    Weights,
    Grads,
    OptimizerState,
    Activation,
    Attention,
    Logits,
    OptimizerTemp,
    KvCache,
}

/// One allocator operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Alloc(u64, AllocKind),
    Free(u64),
}

/// A job's shape at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Shape {
    pub arch: Arch,
    pub precision: Precision,
    pub optimizer: Optimizer,
    pub zero_stage: u8,
    pub dp: u32,
    pub flash: bool,
    pub ckpt: bool,
    pub batch: u32,
    pub seq: u32,
}

fn chunk(total: u64, layers: u32) -> u64 {
    total.div_ceil(u64::from(layers.max(1)))
}

impl Shape {
    fn dp_div(&self, stage: u8) -> u64 {
        if self.zero_stage >= stage { u64::from(self.dp.max(1)) } else { 1 }
    }

    /// Weight bytes of one layer chunk on this GPU.
    pub(crate) fn weight_chunk(&self) -> u64 {
        chunk(self.arch.params * self.precision.weight_bytes() / self.dp_div(3), self.arch.layers)
    }

    /// Gradient bytes of one layer chunk.
    pub(crate) fn grad_chunk(&self) -> u64 {
        if self.optimizer == Optimizer::None {
            return 0;
        }
        chunk(self.arch.params * self.precision.weight_bytes() / self.dp_div(2), self.arch.layers)
    }

    /// Optimizer-state bytes of one layer chunk.
    pub(crate) fn optim_chunk(&self) -> u64 {
        chunk(
            self.arch.params * self.optimizer.state_bytes(self.precision) / self.dp_div(1),
            self.arch.layers,
        )
    }

    fn layers(&self) -> u64 {
        u64::from(self.arch.layers)
    }

    /// Static bytes as allocated (rounded blocks): weights + grads + optimizer state.
    pub(crate) fn static_bytes(&self) -> u64 {
        self.weights_bytes()
            + self.layers() * (alloc_size(self.grad_chunk()) + alloc_size(self.optim_chunk()))
    }

    /// Weight bytes as allocated.
    pub(crate) fn weights_bytes(&self) -> u64 {
        self.layers() * alloc_size(self.weight_chunk())
    }

    fn bsh(&self) -> u64 {
        u64::from(self.batch)
            .saturating_mul(u64::from(self.seq))
            .saturating_mul(u64::from(self.arch.hidden))
            .saturating_mul(self.precision.act_factor())
    }

    pub(crate) fn act_input(&self) -> u64 {
        self.bsh().saturating_mul(2)
    }

    fn act_qkv(&self) -> u64 {
        self.bsh().saturating_mul(6)
    }

    fn act_rest(&self) -> u64 {
        self.bsh().saturating_mul(26)
    }

    fn grad_buf(&self) -> u64 {
        self.bsh().saturating_mul(4)
    }

    /// Attention scores of one layer (0 with FlashAttention).
    pub(crate) fn attn(&self) -> u64 {
        if self.flash {
            return 0;
        }
        let s = u64::from(self.seq);
        2u64.saturating_mul(u64::from(self.batch))
            .saturating_mul(u64::from(self.arch.heads))
            .saturating_mul(s.saturating_mul(s))
            .saturating_mul(self.precision.act_factor())
    }

    fn logits(&self) -> u64 {
        4u64.saturating_mul(u64::from(self.batch))
            .saturating_mul(u64::from(self.seq))
            .saturating_mul(u64::from(self.arch.vocab))
    }

    fn optim_temp(&self) -> u64 {
        chunk(self.arch.params * 4, self.arch.layers).saturating_mul(2)
    }

    /// Forward pass of one layer (training).
    pub(crate) fn forward_layer<E>(&self, f: &mut impl FnMut(Op) -> Result<(), E>) -> Result<(), E> {
        let (qkv, attn, rest) = (self.act_qkv(), self.attn(), self.act_rest());
        f(Op::Alloc(self.act_input(), AllocKind::Activation))?;
        f(Op::Alloc(qkv, AllocKind::Activation))?;
        if attn > 0 {
            f(Op::Alloc(attn, AllocKind::Attention))?;
        }
        f(Op::Alloc(rest, AllocKind::Activation))?;
        if self.ckpt {
            f(Op::Free(rest))?;
            if attn > 0 {
                f(Op::Free(attn))?;
            }
            f(Op::Free(qkv))?;
        }
        Ok(())
    }

    /// End of the forward pass: the logits.
    pub(crate) fn forward_end<E>(&self, f: &mut impl FnMut(Op) -> Result<(), E>) -> Result<(), E> {
        f(Op::Alloc(self.logits(), AllocKind::Logits))
    }

    /// Start of the backward pass: gradient of the logits, then both are freed.
    pub(crate) fn backward_begin<E>(&self, f: &mut impl FnMut(Op) -> Result<(), E>) -> Result<(), E> {
        f(Op::Alloc(self.logits(), AllocKind::Logits))?;
        f(Op::Free(self.logits()))?;
        f(Op::Free(self.logits()))
    }

    /// Backward pass of one layer.
    pub(crate) fn backward_layer<E>(&self, f: &mut impl FnMut(Op) -> Result<(), E>) -> Result<(), E> {
        let (qkv, attn, rest) = (self.act_qkv(), self.attn(), self.act_rest());
        if self.ckpt {
            f(Op::Alloc(qkv, AllocKind::Activation))?;
            if attn > 0 {
                f(Op::Alloc(attn, AllocKind::Attention))?;
            }
            f(Op::Alloc(rest, AllocKind::Activation))?;
        }
        f(Op::Alloc(self.grad_buf(), AllocKind::Activation))?;
        f(Op::Free(self.grad_buf()))?;
        f(Op::Free(rest))?;
        if attn > 0 {
            f(Op::Free(attn))?;
        }
        f(Op::Free(qkv))?;
        f(Op::Free(self.act_input()))
    }

    /// The optimizer step's temporaries.
    pub(crate) fn optimizer_step<E>(&self, f: &mut impl FnMut(Op) -> Result<(), E>) -> Result<(), E> {
        f(Op::Alloc(self.optim_temp(), AllocKind::OptimizerTemp))?;
        f(Op::Free(self.optim_temp()))
    }

    /// One layer of an evaluation (no_grad) forward pass: everything is transient.
    pub(crate) fn eval_layer<E>(&self, f: &mut impl FnMut(Op) -> Result<(), E>) -> Result<(), E> {
        let (qkv, attn, rest) = (self.act_qkv(), self.attn(), self.act_rest());
        f(Op::Alloc(qkv, AllocKind::Activation))?;
        if attn > 0 {
            f(Op::Alloc(attn, AllocKind::Attention))?;
        }
        f(Op::Alloc(rest, AllocKind::Activation))?;
        f(Op::Free(rest))?;
        if attn > 0 {
            f(Op::Free(attn))?;
        }
        f(Op::Free(qkv))
    }

    /// End of an evaluation forward pass.
    pub(crate) fn eval_end<E>(&self, f: &mut impl FnMut(Op) -> Result<(), E>) -> Result<(), E> {
        f(Op::Alloc(self.logits(), AllocKind::Logits))?;
        f(Op::Free(self.logits()))
    }

    /// Largest single static allocation.
    pub(crate) fn max_static_alloc(&self) -> u64 {
        alloc_size(self.weight_chunk()).max(alloc_size(self.grad_chunk())).max(alloc_size(self.optim_chunk()))
    }

    /// Peak of dynamic (non-static) allocated bytes over one training step, and the largest
    /// single allocation in it.
    pub(crate) fn step_peak(&self) -> Peak {
        let mut m = Peak::default();
        let f = &mut |op| m.apply(op);
        let _ = (0..self.arch.layers).try_for_each(|_| self.forward_layer(f));
        let _ = self.forward_end(f);
        let _ = self.backward_begin(f);
        let _ = (0..self.arch.layers).try_for_each(|_| self.backward_layer(f));
        let _ = self.optimizer_step(f);
        m
    }

    /// Peak of an evaluation pass (this shape's batch is the eval batch).
    pub(crate) fn eval_peak(&self) -> Peak {
        let mut m = Peak::default();
        let f = &mut |op| m.apply(op);
        let _ = self.eval_layer(f);
        let _ = self.eval_end(f);
        m
    }

    /// The wire form.
    pub(crate) fn to_wire(self) -> JobShape {
        JobShape {
            params: Some(self.arch.params),
            batch: Some(self.batch),
            seq_len: Some(self.seq),
            hidden: Some(self.arch.hidden),
            layers: Some(self.arch.layers),
            heads: Some(self.arch.heads),
            precision: Some(self.precision.as_str().to_owned()),
            optimizer: self.optimizer.as_str().map(str::to_owned),
            zero_stage: Some(self.zero_stage),
            tensor_parallel: Some(1),
            pipeline_parallel: Some(1),
            data_parallel: Some(self.dp),
            activation_checkpointing: Some(self.ckpt),
            flash_attention: Some(self.flash),
        }
    }
}

/// Static bytes of a wire shape, by the same rules (for tests and checks on events).
#[cfg(test)]
pub(crate) fn static_bytes_of(job: &JobShape) -> Option<u64> {
    let params = job.params?;
    let arch = ARCHS.iter().find(|a| a.params == params).copied()?;
    let precision = match job.precision.as_deref()? {
        "fp32" => Precision::Fp32,
        "bf16" => Precision::Bf16,
        _ => Precision::Fp16,
    };
    let optimizer = match job.optimizer.as_deref() {
        Some("adamw") => Optimizer::AdamW,
        Some("adam") => Optimizer::Adam,
        Some("sgd") => Optimizer::Sgd,
        _ => Optimizer::None,
    };
    let shape = Shape {
        arch,
        precision,
        optimizer,
        zero_stage: job.zero_stage?,
        dp: job.data_parallel?,
        flash: job.flash_attention?,
        ckpt: job.activation_checkpointing?,
        batch: job.batch?,
        seq: job.seq_len?,
    };
    Some(shape.static_bytes())
}

/// Running peak of allocated bytes over a sequence of ops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Peak {
    cur: u64,
    /// Highest allocated bytes.
    pub peak: u64,
    /// Largest single (rounded) allocation.
    pub max_alloc: u64,
}

impl Peak {
    fn apply(&mut self, op: Op) -> Result<(), ()> {
        match op {
            Op::Alloc(n, _) => {
                let n = alloc_size(n);
                self.cur = self.cur.saturating_add(n);
                self.peak = self.peak.max(self.cur);
                self.max_alloc = self.max_alloc.max(n);
            }
            Op::Free(n) => self.cur = self.cur.saturating_sub(alloc_size(n)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(arch: usize, precision: Precision, optimizer: Optimizer, zero: u8, dp: u32) -> Shape {
        Shape {
            arch: ARCHS[arch],
            precision,
            optimizer,
            zero_stage: zero,
            dp,
            flash: true,
            ckpt: false,
            batch: 4,
            seq: 2048,
        }
    }

    #[test]
    fn static_bytes_per_param() {
        let p = ARCHS[4].params as f64;
        // Chunks are rounded to 2 MiB blocks: a few hundredths of a byte per parameter.
        let per_param = |s: Shape| s.static_bytes() as f64 / p;
        assert!((per_param(shape(4, Precision::Bf16, Optimizer::AdamW, 0, 1)) - 16.0).abs() < 0.05);
        assert!((per_param(shape(4, Precision::Fp32, Optimizer::Adam, 0, 1)) - 16.0).abs() < 0.05);
        assert!((per_param(shape(4, Precision::Fp32, Optimizer::Sgd, 0, 1)) - 12.0).abs() < 0.05);
        // ZeRO-1 over 8: 2 + 2 + 12/8; ZeRO-2: 2 + 2/8 + 12/8; ZeRO-3: 16/8.
        assert!((per_param(shape(4, Precision::Bf16, Optimizer::AdamW, 1, 8)) - 5.5).abs() < 0.05);
        assert!((per_param(shape(4, Precision::Bf16, Optimizer::AdamW, 2, 8)) - 3.75).abs() < 0.05);
        assert!((per_param(shape(4, Precision::Bf16, Optimizer::AdamW, 3, 8)) - 2.0).abs() < 0.05);
    }

    #[test]
    fn activations_are_linear_in_batch_and_attention_quadratic_in_seq() {
        let mut s = shape(4, Precision::Bf16, Optimizer::AdamW, 0, 1);
        let p4 = s.step_peak().peak;
        s.batch = 8;
        let p8 = s.step_peak().peak;
        assert!((p8 as f64 / p4 as f64 - 2.0).abs() < 0.05);
        s.flash = false;
        s.batch = 1;
        let a1 = s.attn();
        s.seq = 4096;
        assert_eq!(s.attn(), 4 * a1);
        assert_eq!(s.attn(), 2 * 32 * 4096 * 4096);
        // Korthikanti: 34·b·s·h per layer without checkpointing.
        let layer = s.act_input() + s.act_qkv() + s.act_rest();
        assert_eq!(layer, 34 * 4096 * 4096);
    }

    #[test]
    fn checkpointing_keeps_only_the_inputs() {
        let mut s = shape(4, Precision::Bf16, Optimizer::AdamW, 0, 1);
        let full = s.step_peak().peak;
        s.ckpt = true;
        let ckpt = s.step_peak().peak;
        assert!(ckpt * 4 < full, "{ckpt} vs {full}");
    }
}
