//! OOM detectors: each turns one signal (job logs, the hook socket, the kernel log, NVML process
//! tracking) into `OomEvent`s sent into the agent's reading channel.

pub mod allocator;
pub mod confine;
pub mod follow;
pub mod hook;
pub mod hook_schema;
pub mod kmsg;
pub mod merge;
pub mod offsets;
pub mod vanish;

/// The log and kernel-line parsers (the `oomlens-parse` crate, shared with `oomlens explain`).
pub use oomlens_parse as parse;
pub use oomlens_parse::pci;
