//! Everything that talks to ClickHouse.
//!
//! * [`config`] — [`ChConfig`]: URL, credentials, database, retention, batching knobs.
//! * [`client`] — [`Ch`]: the connected client, server version detection, typed errors.
//! * [`cluster`] — cluster mode: the shard replicas behind the `Distributed` tables.
//! * [`migrate`] — idempotent DDL (`CREATE … IF NOT EXISTS`, `ADD COLUMN`) and the schema check
//!   of every table against the Row structs (vital with schema validation off, as 18.16 requires).
//! * [`convert`] — pure conversion of a wire `Batch` into rows, stamped with the authenticated
//!   identity.
//! * [`sink`] — the batched, bounded, retrying writer that acknowledges a batch only once its rows
//!   are stored.
//! * [`retention`] — dropping expired day partitions on servers without `TTL`.
//! * [`tls`] — the HTTP(S) client under the `clickhouse` crate: rustls with the configured CA and
//!   client certificate.

pub mod client;
pub mod cluster;
pub mod config;
pub mod convert;
pub mod migrate;
pub mod retention;
pub mod rowbinary;
pub mod sink;
pub mod tls;

pub use client::{Ch, ChError};
pub use config::ChConfig;
pub use migrate::MigrateReport;
pub use retention::RetentionReport;
pub use sink::{Sink, SinkError, SinkStats, SinkTask};
