//! [`ChConfig`]: how the collector reaches ClickHouse and how it batches inserts.
//!
//! Deserialised from the collector's TOML (`[clickhouse]` section); every field has a default
//! (`url` defaults to a local server on port 8123) and unknown keys are rejected.

use std::path::PathBuf;
use std::time::Duration;

use oomlens_schema::ddl::Retention;
use serde::{Deserialize, Serialize};

/// Upper bound of `clickhouse.insert_concurrency` and `clickhouse.insert_lanes`.
pub const MAX_INSERT_CONCURRENCY: usize = 16;

/// ClickHouse connection and batching settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChConfig {
    /// HTTP(S) URL of the server, e.g. `http://127.0.0.1:8123`.
    pub url: String,
    /// Database holding the oomlens tables (letters, digits, `_`).
    pub database: String,
    /// ClickHouse user the collector and the CLI connect as.
    pub user: String,
    /// That user's password (redacted by `--print-config`).
    pub password: String,
    /// Retention in days per table family (0: keep forever).
    #[serde(with = "RetentionDef")]
    pub retention: Retention,
    /// Flush when this many rows (all tables together) are pending.
    pub insert_max_rows: usize,
    /// Flush at the latest this long after the first pending batch arrived, in ms.
    pub insert_max_delay_ms: u64,
    /// Flushes whose inserts may run at once (their commit records and acknowledgements stay in
    /// order). ClickHouse parses and writes one `INSERT` on one thread. Above 1, a collector crash
    /// can leave the rows of a flush that overlapped the crashed one without their commit record
    /// (re-sent and stored again: raw duplicates, answers unchanged).
    pub insert_concurrency: usize,
    /// `INSERT` statements per sample table that one flush is split into (by batch), run at once.
    /// ClickHouse parses and writes one `INSERT` on one thread; the flush's commit record follows
    /// all of them, so this widens nothing a crash could duplicate.
    pub insert_lanes: usize,
    /// Batches that may wait for the writer before `store` blocks (backpressure).
    pub queue_capacity: usize,
    /// Timeout of one request (query or insert), in ms.
    pub request_timeout_ms: u64,
    /// ClickHouse cluster (a name in the servers' `<remote_servers>`) to spread the tables over:
    /// `<table>_local` storage tables on every shard and `Distributed` tables `<table>` in front
    /// of them, inserts with `insert_distributed_sync = 1`. Empty: one server.
    pub cluster: String,
    /// Cluster mode: create the tables with `ON CLUSTER` DDL (needs ZooKeeper / ClickHouse Keeper).
    /// Off: the collector runs the idempotent DDL on every shard replica itself.
    pub on_cluster_ddl: bool,
    /// Cluster mode: `Replicated*MergeTree` storage tables (ZooKeeper path
    /// `/clickhouse/tables/{shard}/<database>/<table>`, replica `{replica}`; needs Keeper and the
    /// `{shard}`/`{replica}` macros on every host).
    pub replicated: bool,
    /// Cluster mode: HTTP URL of every shard replica. Empty: derived from `url` by replacing its
    /// host with each host of `system.clusters` (which lists native TCP ports, not HTTP ports).
    pub shard_urls: Vec<String>,
    /// Replicated mode: replicas of a shard that must have written an insert before it counts as
    /// stored (ClickHouse's `insert_quorum`). 0: off (an insert is stored once one replica has it;
    /// the others copy it asynchronously). The number of replicas per shard makes every
    /// acknowledged row survive the loss of any replica, at the price of storing nothing (agents
    /// keep spooling) while a replica is down.
    pub insert_quorum: u64,
    /// HTTPS: CA certificate(s), PEM, that signed the server's certificate (unset: the system
    /// trust store). Only with an `https://` URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// HTTPS: client certificate chain, PEM, for servers that verify clients (with `tls_key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// HTTPS: the client certificate's private key, PEM (with `tls_cert`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
}

#[derive(Deserialize, Serialize)]
#[serde(remote = "Retention", deny_unknown_fields)]
struct RetentionDef {
    #[serde(default = "default_samples_days")]
    samples_days: u32,
    #[serde(default = "default_events_days")]
    events_days: u32,
}

fn default_samples_days() -> u32 {
    Retention::default().samples_days
}

fn default_events_days() -> u32 {
    Retention::default().events_days
}

impl Default for ChConfig {
    fn default() -> Self {
        ChConfig {
            url: "http://127.0.0.1:8123".to_owned(),
            database: "oomlens".to_owned(),
            user: "default".to_owned(),
            password: String::new(),
            retention: Retention::default(),
            insert_max_rows: 500_000,
            insert_max_delay_ms: 1000,
            insert_concurrency: 1,
            insert_lanes: 2,
            queue_capacity: 256,
            request_timeout_ms: 30_000,
            cluster: String::new(),
            on_cluster_ddl: false,
            replicated: false,
            shard_urls: Vec::new(),
            insert_quorum: 0,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

impl ChConfig {
    /// Defaults with another URL.
    pub fn new(url: impl Into<String>) -> Self {
        ChConfig { url: url.into(), ..ChConfig::default() }
    }

    /// [`Self::insert_max_delay_ms`] as a duration.
    pub fn insert_max_delay(&self) -> Duration {
        Duration::from_millis(self.insert_max_delay_ms)
    }

    /// [`Self::request_timeout_ms`] as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// True when the tables are spread over a cluster ([`Self::cluster`] is set).
    pub fn is_cluster(&self) -> bool {
        !self.cluster.is_empty()
    }

    /// Checks values that would otherwise fail late (or be spliced into DDL).
    pub fn validate(&self) -> Result<(), String> {
        if self.is_cluster() && !is_identifier(&self.cluster) {
            return Err(format!(
                "clickhouse.cluster {:?} is not a plain identifier (letters, digits, '_', not starting with a digit)",
                self.cluster
            ));
        }
        if !self.is_cluster() && (self.on_cluster_ddl || self.replicated || !self.shard_urls.is_empty()) {
            return Err(
                "clickhouse.on_cluster_ddl, replicated and shard_urls need clickhouse.cluster".to_owned()
            );
        }
        if let Some(bad) =
            self.shard_urls.iter().find(|u| !(u.starts_with("http://") || u.starts_with("https://")))
        {
            return Err(format!("clickhouse.shard_urls entry {bad:?} must start with http:// or https://"));
        }
        if !is_identifier(&self.database) {
            return Err(format!(
                "clickhouse.database {:?} is not a plain identifier (letters, digits, '_', not starting with a digit)",
                self.database
            ));
        }
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(format!("clickhouse.url {:?} must start with http:// or https://", self.url));
        }
        if self.insert_quorum > 0 && !self.replicated {
            return Err("clickhouse.insert_quorum needs clickhouse.replicated (Replicated*MergeTree tables)"
                .to_owned());
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(
                "clickhouse.tls_cert and clickhouse.tls_key go together: set both or neither".to_owned()
            );
        }
        let tls_set = self.tls_ca.is_some() || self.tls_cert.is_some();
        let all_https =
            self.url.starts_with("https://") && self.shard_urls.iter().all(|u| u.starts_with("https://"));
        if tls_set && !all_https {
            return Err(format!(
                "clickhouse.tls_ca / tls_cert / tls_key need https:// URLs (clickhouse.url is {:?})",
                self.url
            ));
        }
        for (key, path) in
            [("tls_ca", &self.tls_ca), ("tls_cert", &self.tls_cert), ("tls_key", &self.tls_key)]
        {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(format!("clickhouse.{key} must name a PEM file (leave it unset otherwise)"));
            }
        }
        if self.insert_max_rows == 0 || self.queue_capacity == 0 || self.request_timeout_ms == 0 {
            return Err(
                "clickhouse.insert_max_rows, queue_capacity and request_timeout_ms must be > 0".to_owned()
            );
        }
        if !(1..=MAX_INSERT_CONCURRENCY).contains(&self.insert_concurrency) {
            return Err(format!(
                "clickhouse.insert_concurrency must be between 1 and {MAX_INSERT_CONCURRENCY}, not {}",
                self.insert_concurrency
            ));
        }
        if !(1..=MAX_INSERT_CONCURRENCY).contains(&self.insert_lanes) {
            return Err(format!(
                "clickhouse.insert_lanes must be between 1 and {MAX_INSERT_CONCURRENCY}, not {}",
                self.insert_lanes
            ));
        }
        Ok(())
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`, at most 64 bytes: safe to splice into SQL unquoted.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.len() <= 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let cfg: ChConfig = toml::from_str("url = 'http://h:1'\nretention = { samples_days = 7 }").unwrap();
        assert_eq!(cfg.url, "http://h:1");
        assert_eq!(cfg.database, "oomlens");
        assert_eq!(cfg.retention, Retention { samples_days: 7, events_days: 365 });
        assert_eq!(cfg.insert_max_delay(), Duration::from_millis(1000));
        assert_eq!(cfg.insert_concurrency, 1);
        assert_eq!(cfg.insert_lanes, 2);
        assert!(cfg.validate().is_ok());
        assert_eq!(toml::from_str::<ChConfig>("").unwrap(), ChConfig::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected() {
        assert!(toml::from_str::<ChConfig>("urll = 'x'").is_err());
        assert!(toml::from_str::<ChConfig>("retention = { days = 1 }").is_err());
        let mut cfg = ChConfig { database: "a;DROP".into(), ..ChConfig::default() };
        assert!(cfg.validate().is_err());
        cfg.database = "ok_1".into();
        cfg.url = "127.0.0.1:8123".into();
        assert!(cfg.validate().is_err());
        assert!(!is_identifier("1abc") && !is_identifier("") && is_identifier("_a1"));
        for lanes in [0, MAX_INSERT_CONCURRENCY + 1] {
            let bad = ChConfig { insert_lanes: lanes, ..ChConfig::default() };
            assert!(bad.validate().unwrap_err().contains("clickhouse.insert_lanes"), "{lanes}");
        }
    }

    #[test]
    fn cluster_fields() {
        let cfg: ChConfig = toml::from_str(
            "cluster = 'oomlens_prod'\nshard_urls = ['http://a:8123', 'https://b:8443']\non_cluster_ddl = true",
        )
        .unwrap();
        assert!(cfg.is_cluster() && cfg.on_cluster_ddl && !cfg.replicated);
        assert_eq!(cfg.shard_urls.len(), 2);
        assert!(cfg.validate().is_ok());
        assert!(!ChConfig::default().is_cluster());
        let bad = ChConfig { cluster: "a-b".into(), ..ChConfig::default() };
        assert!(bad.validate().unwrap_err().contains("clickhouse.cluster"));
        let bad = ChConfig { shard_urls: vec!["http://a:1".into()], ..ChConfig::default() };
        assert!(bad.validate().unwrap_err().contains("need clickhouse.cluster"));
        let bad = ChConfig { cluster: "c".into(), shard_urls: vec!["a:1".into()], ..ChConfig::default() };
        assert!(bad.validate().unwrap_err().contains("shard_urls"));
    }
}
