//! `oomlens-collector`: QUIC ingest into ClickHouse, and the `oomlens` CLI.
//!
//! * [`identity`] — the authenticated agent of a connection.
//! * [`clickhouse`] — client, version detection, migrations, schema check, batched sink, retention.
//! * [`devch`] — a throw-away local ClickHouse server (tests, demo, benches).
//! * [`server`] — the QUIC server: sessions, validation, ack-after-insert.
//! * [`certs`] — dev PKI minting (CA, collector and agent certificates).
//! * [`config`] — TOML configuration with CLI/env overrides.
//! * [`metrics`] — Prometheus `/metrics`.
//! * [`demo`] — `oomlens demo`.

pub mod certs;
pub mod clickhouse;
pub mod config;
pub mod demo;
pub mod devch;
pub mod identity;
pub mod metrics;
pub mod queries;
pub mod server;
