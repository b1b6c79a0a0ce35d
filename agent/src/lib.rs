//! `oomlens-agent`: the per-node agent.
//!
//! * [`source`] — the `Source` trait; [`nvml`] (real GPUs) and [`sim`] (the fleet simulator).
//! * [`sampler`] — runs a source on its own thread at a fixed interval, builds batches.
//! * [`recorder`] — the flight recorder: which samples are sent, the window flushed before an OOM.
//! * [`spool`] — batches kept until acknowledged: in memory, or in checksummed segment files on disk.
//! * [`uplink`] — the QUIC client: Hello/Welcome, batches, acks, reconnect and resend.
//! * [`runner`] — wires a whole agent together (used by `oomlens-agent run` and the tests).
//! * [`config`] — TOML configuration with CLI/env overrides.
//! * [`metrics`] — Prometheus `/metrics`.
//! * [`detect`] — OOM detectors (hook socket, …).
//! * [`workload`] — pid → workload labels (pod, container, Slurm job, user, command line).

pub mod config;
pub mod detect;
pub mod hash;
pub mod metrics;
pub mod nvml;
pub mod recorder;
pub mod runner;
pub mod sampler;
pub mod sim;
pub mod source;
pub mod spool;
pub mod uplink;
pub mod watchdog;
pub mod workload;
