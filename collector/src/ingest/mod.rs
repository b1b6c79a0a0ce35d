//! Ingest: agents' QUIC connections to the stored batch.
//!
//! * [`server`] — the QUIC server: sessions, validation, byte budgets, ack after insert.
//! * [`auth`] — handshake refusal reasons, the cluster allow-list, TLS reload without restart.
//! * [`certs`] — reading identities from certificates, and the development PKI.
//! * [`warnlimit`] — rate-limited warnings for what a peer can cause at will.

pub mod auth;
pub mod certs;
pub mod server;
pub mod warnlimit;
