//! `oomlens-collector`: QUIC ingest into ClickHouse, and the `oomlens` CLI.
//!
//! * [`identity`] — the authenticated agent of a connection.
//! * [`attribution`] — correlation features, the ordered rule set, accuracy against ground truth.
//! * [`clickhouse`] — client, version detection, migrations, schema check, batched sink, retention.
//! * [`devch`] — a throw-away local ClickHouse server (tests, demo, benches).
//! * [`fault`] — test-only fault points (feature `fault-injection`).
//! * [`server`] — the QUIC server: sessions, validation, ack-after-insert.
//! * [`warnlimit`] — rate-limited warnings for what a peer can cause at will.
//! * [`service`] — a whole collector: ClickHouse (with retry), migrations, sink, server, telemetry.
//! * [`certs`] — dev PKI minting (CA, collector and agent certificates).
//! * [`auth`] — handshake refusal reasons, the cluster allow-list, TLS reload without restart.
//! * [`cli`] — command-line flags shared by the binaries.
//! * [`config`] — TOML configuration with CLI/env overrides.
//! * [`metrics`] — Prometheus `/metrics`.
//! * [`report`] — running the built-in queries and rendering them (`oomlens sql`, the demo report).
//! * [`demo`] — `oomlens demo`.
//! * [`explain`] — `oomlens explain`: a pasted message parsed and attributed offline.

pub mod attribution;
pub mod auth;
pub mod capacity;
pub mod certs;
pub mod cli;
pub mod clickhouse;
pub mod config;
pub mod demo;
pub mod devch;
pub mod explain;
pub mod fault;
pub mod identity;
pub mod metrics;
pub mod postmortem;
pub mod queries;
pub mod report;
pub mod server;
pub mod service;
pub mod timearg;
pub mod top;
pub mod warnlimit;
