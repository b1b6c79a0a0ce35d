//! The OOM scenario taxonomy: what ran out, and therefore which remedy applies.
//!
//! Shared by the simulator (ground-truth labels), the wire protocol and attribution.

use std::fmt;
use std::str::FromStr;

/// Why an out-of-memory failure happened.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug, PartialEq, Eq))]
#[repr(u8)]
pub enum Scenario {
    /// Weights + gradients + optimizer state alone exceed the GPU (fails at load / optimizer init).
    Static,
    /// Activations, which grow about linearly with the batch size.
    Batch,
    /// Attention matrices / KV cache, which grow with the square of the sequence length.
    Sequence,
    /// Other processes on the same GPU took the memory the job needed.
    Contention,
    /// Enough memory is free or cached in total, but not in one usable block.
    Fragmentation,
    /// Host RAM ran out and the Linux OOM killer ended a process.
    HostOom,
    /// Not enough evidence to say.
    Unknown,
}

impl Scenario {
    /// Every scenario, in the order of the taxonomy.
    pub const ALL: [Scenario; 7] = [
        Scenario::Static,
        Scenario::Batch,
        Scenario::Sequence,
        Scenario::Contention,
        Scenario::Fragmentation,
        Scenario::HostOom,
        Scenario::Unknown,
    ];

    /// The stable lower-case name used in ClickHouse, JSON and the CLI.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scenario::Static => "static",
            Scenario::Batch => "batch",
            Scenario::Sequence => "sequence",
            Scenario::Contention => "contention",
            Scenario::Fragmentation => "fragmentation",
            Scenario::HostOom => "host_oom",
            Scenario::Unknown => "unknown",
        }
    }

    /// The first remedy for this scenario (`docs/attribution.md`, the scenarios table).
    pub const fn remedy(self) -> &'static str {
        match self {
            Scenario::Static => {
                "shard the static state: ZeRO stage 2/3, FSDP or tensor parallelism; lower precision or a lighter optimizer"
            }
            Scenario::Batch => {
                "reduce the micro-batch and use gradient accumulation; enable activation checkpointing"
            }
            Scenario::Sequence => {
                "use FlashAttention / memory-efficient attention, sliding-window attention, sequence parallelism, KV-cache quantisation, or cap the sequence length"
            }
            Scenario::Contention => {
                "limit co-scheduling on this GPU (exclusive mode, MIG, per-process memory caps) and move the noisy neighbour"
            }
            Scenario::Fragmentation => {
                "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb), keep tensor shapes stable, avoid empty_cache churn"
            }
            Scenario::HostOom => {
                "reduce host-RAM use (fewer dataloader workers, pinned-memory size, prefetch), or raise the pod/cgroup memory limit"
            }
            Scenario::Unknown => {
                "collect more evidence: enable the hook socket and the flight recorder for this job"
            }
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for a scenario name that is not in the taxonomy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown scenario {0:?} (expected one of static, batch, sequence, contention, fragmentation, host_oom, unknown)"
)]
pub struct UnknownScenario(pub String);

impl FromStr for Scenario {
    type Err = UnknownScenario;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL.into_iter().find(|sc| sc.as_str() == s).ok_or_else(|| UnknownScenario(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for sc in Scenario::ALL {
            assert_eq!(sc.as_str().parse::<Scenario>(), Ok(sc));
            assert!(!sc.remedy().is_empty());
        }
        assert!("nope".parse::<Scenario>().is_err());
    }
}
