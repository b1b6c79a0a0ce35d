//! nvml (in progress)
