//! Ground truth: which scenario a simulated CUDA OOM belongs to, decided from the model's state at
//! the failure (not from the template that was meant to provoke it).
//!
//! Ordered rules (the first that matches wins):
//!
//! 1. **Static** — the process's CUDA context + static state (weights, gradients, optimizer state
//!    on this GPU) alone exceed the GPU's capacity.
//! 2. **Fragmentation** — `reserved − allocated − split ≥ requested`: enough memory is cached by
//!    the process, just not in one usable block (after the allocator released what it could),
//!    beyond the routine split remainders every allocator keeps (those are part of the peak).
//! 3. If the process would have fit **alone** at its peak (context + static + the dynamic peak of
//!    its current shape, or of its KV-cache pool for an inference server):
//!    * **Contention** when other processes hold memory on the GPU;
//!    * otherwise **Fragmentation** (its own cache held the memory in unusable pieces).
//! 4. **Sequence** — the failing allocation is an attention score matrix (seq²) or a KV-cache block.
//! 5. **Batch** — otherwise: activations / logits, which grow linearly with the batch.
//!
//! Host OOM kills are always **HostOom**.

use oomlens_schema::Scenario;

use super::memory::AllocKind;

/// What the model knows at a CUDA OOM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FailureFacts {
    pub capacity: u64,
    pub context: u64,
    pub static_bytes: u64,
    pub peak_alone: u64,
    pub requested: u64,
    pub allocated: u64,
    pub reserved: u64,
    /// Routine split remainders in the cache (see `allocator`).
    pub split: u64,
    pub others_used: u64,
    pub kind: AllocKind,
}

/// The ordered rules above.
pub(crate) fn classify(f: &FailureFacts) -> Scenario {
    if f.context.saturating_add(f.static_bytes) > f.capacity {
        Scenario::Static
    } else if f.reserved.saturating_sub(f.allocated).saturating_sub(f.split) >= f.requested {
        Scenario::Fragmentation
    } else if f.peak_alone <= f.capacity {
        if f.others_used > 0 { Scenario::Contention } else { Scenario::Fragmentation }
    } else if matches!(f.kind, AllocKind::Attention | AllocKind::KvCache) {
        Scenario::Sequence
    } else {
        Scenario::Batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn facts() -> FailureFacts {
        FailureFacts {
            capacity: 80 * GIB,
            context: GIB / 2,
            static_bytes: 30 * GIB,
            peak_alone: 90 * GIB,
            requested: 2 * GIB,
            allocated: 70 * GIB,
            reserved: 71 * GIB,
            split: 0,
            others_used: 0,
            kind: AllocKind::Activation,
        }
    }

    #[test]
    fn rules_are_ordered() {
        assert_eq!(classify(&facts()), Scenario::Batch);
        assert_eq!(classify(&FailureFacts { kind: AllocKind::Attention, ..facts() }), Scenario::Sequence);
        assert_eq!(classify(&FailureFacts { static_bytes: 80 * GIB, ..facts() }), Scenario::Static);
        assert_eq!(classify(&FailureFacts { reserved: 72 * GIB, ..facts() }), Scenario::Fragmentation);
        // Routine split remainders are not fragmentation.
        assert_eq!(classify(&FailureFacts { reserved: 72 * GIB, split: GIB, ..facts() }), Scenario::Batch);
        let fits = FailureFacts { peak_alone: 60 * GIB, ..facts() };
        assert_eq!(classify(&FailureFacts { others_used: 9 * GIB, ..fits }), Scenario::Contention);
        assert_eq!(classify(&fits), Scenario::Fragmentation);
    }
}
