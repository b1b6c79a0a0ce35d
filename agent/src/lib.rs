//! `oomlens-agent`: the per-node agent. Data flows one way, one folder per stage:
//!
//! ```text
//! source/ (nvml, sim) ──readings──▶ pipeline/ (sampler thread, flight recorder, batcher, event stage)
//! detect/ (job logs, hook socket, kernel log, vanished processes) ──events──▶ pipeline/
//! pipeline/ ──batches──▶ spool/ (memory or disk, until acknowledged) ──▶ uplink (QUIC to a collector)
//! ```
//!
//! * [`source`] — the `Source` trait; `source::nvml` (real GPUs, with its watchdog and smoke
//!   report) and `source::sim` (the fleet simulator).
//! * [`detect`] — OOM detectors (job-log follower, hook socket, kernel log, vanished processes) and
//!   the merger that folds one failure's reports into one event.
//! * [`pipeline`] — the sampler thread, the flight recorder, the event stage (vanish detection,
//!   merger, journal) and the batcher that builds batches.
//! * [`spool`] — batches kept until acknowledged: in memory, or in checksummed segment files on disk;
//!   the pending-events journal.
//! * [`uplink`] — the QUIC client: Hello/Welcome, batches, acks, reconnect and resend.
//! * [`workload`] — pid → workload labels (pod, container, Slurm job, user, command line).
//! * [`runner`] — wires a whole agent together (used by `oomlens-agent run` and the tests).
//! * [`config`] — TOML configuration with CLI/env overrides.
//! * [`metrics`] — Prometheus `/metrics`.
//! * [`hash`] — the stable hashes behind event ids and the collector pick.

pub mod config;
pub mod detect;
pub mod hash;
pub mod metrics;
pub mod pipeline;
pub mod runner;
pub mod source;
pub mod spool;
pub mod uplink;
pub mod workload;
