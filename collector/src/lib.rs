//! `oomlens-collector`: the collector service and the library the `oomlens` CLI is built on. Data
//! flows one way, one folder per stage:
//!
//! ```text
//! ingest/ (QUIC sessions, mutual TLS, identity) ──batches──▶ clickhouse/ (sink, migrations, retention)
//!                                                   ClickHouse ──rows──▶ analysis/ (SQL registry, features, rules, stored attributions)
//! ```
//!
//! * [`ingest`] — the QUIC server (sessions, validation, ack after insert), handshake refusals and
//!   the cluster allow-list, identities from certificates and the development PKI,
//!   rate-limited warnings.
//! * [`identity`] — the authenticated agent of a connection: what ingest hands the store with
//!   every batch.
//! * [`clickhouse`] — client, version detection, migrations, schema check, batched sink, retention.
//! * [`analysis`] — the built-in SQL ([`analysis::queries`]), attribution (evidence → features →
//!   rules, stored attributions, accuracy) and the offline explanation of a message.
//! * [`service`] — a whole collector: ClickHouse (with retry), migrations, sink, server, telemetry.
//! * [`config`] — TOML configuration with CLI/env overrides.
//! * [`cli`] — command-line flags shared by the binaries (`oomlens-collector` here, `oomlens` in
//!   `collector/cli`).
//! * [`metrics`] — Prometheus `/metrics`.
//! * [`fault`] — test-only fault points (feature `fault-injection`).

pub mod alert;
pub mod analysis;
pub mod cli;
pub mod clickhouse;
pub mod config;
pub mod fault;
pub mod https;
pub mod identity;
pub mod ingest;
pub mod metrics;
pub mod service;
