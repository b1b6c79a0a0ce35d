//! OOM detectors: each turns one signal (job logs, the hook socket, the kernel log, NVML process
//! tracking) into `OomEvent`s sent into the agent's reading channel.

pub mod follow;
pub mod hook;
pub mod hook_schema;
pub mod kmsg;
pub mod merge;
pub mod offsets;
pub mod parse;
pub mod pci;
pub mod vanish;
