//! `oomlens-schema`: everything agents and collectors must agree on.
//!
//! * [`wire`] — the rkyv wire types of every protocol version (current: [`wire::v1`]).
//! * [`frame`] — the frame codec: fixed header + validated rkyv payload, typed errors.
//! * [`limits`] — hard limits on frames, strings and vectors, checked on every decoded frame.
//! * [`scenario`] — the OOM scenario taxonomy shared by the simulator and attribution.
//! * [`gpu`] — the GPU catalog (names, memory as drivers report it), shared by the simulator and
//!   `oomlens fit`.
//! * [`memory`] — the memory arithmetic of a job shape (bytes per parameter by precision and
//!   optimizer, model states under TP / PP / ZeRO), shared by the attribution and `oomlens fit`.
//! * [`retry`] — exponential back-off with jitter, for everything that retries.
//! * [`text`] — cutting strings on character boundaries, and the clock in epoch milliseconds.
//! * `ddl` / `rows` (feature `clickhouse`) — the ClickHouse tables, rendered per server version,
//!   and the row structs the collector inserts.
//! * `transport`, `tls` (feature `quic`) — frame I/O on QUIC streams and the mutual-TLS set-up,
//!   shared by agent and collector.
//! * `config` (feature `config`) — loading TOML configuration files, shared by both binaries.
//! * `telemetry` (feature `telemetry`) — the `/metrics`, `/healthz`, `/readyz` HTTP endpoint.
//!
//! Without features the crate is pure — no I/O, no async, no global state — apart from reading
//! the wall clock (`text::now_ms`).

pub mod frame;
pub mod gpu;
pub mod limits;
pub mod memory;
pub mod retry;
pub mod scenario;
pub mod text;
pub mod wire;

#[cfg(feature = "config")]
pub mod config;
#[cfg(feature = "clickhouse")]
pub mod ddl;
#[cfg(feature = "clickhouse")]
pub mod rows;
#[cfg(feature = "telemetry")]
pub mod telemetry;
#[cfg(feature = "quic")]
pub mod tls;
#[cfg(feature = "quic")]
pub mod transport;

pub use frame::{Frame, FrameError, FrameHeader, FrameKind, HEADER_LEN, MAGIC, PROTOCOL_VERSION};
pub use scenario::Scenario;
pub use wire::v1::*;

/// ALPN protocol identifier spoken on every oomlens QUIC connection.
pub const ALPN: &[u8] = b"oomlens/1";
