//! Command-line pieces shared by `oomlens-collector` and `oomlens`: ClickHouse connection flags
//! (on top of the layered configuration file + `OOMLENS_<SECTION>__<KEY>` variables), and the
//! shell completions and man pages generated from a binary's clap definition.

use std::path::PathBuf;

use clap::Args;

use crate::clickhouse::ChConfig;
use crate::config::{CollectorConfig, ConfigError, ValidConfig};

/// Where ClickHouse is (flags override the config file).
#[derive(Debug, Clone, Args)]
pub struct ChArgs {
    /// Collector TOML configuration file (its `[clickhouse]` section is used).
    #[arg(long, short, env = "OOMLENS_COLLECTOR_CONFIG")]
    pub config: Option<PathBuf>,
    /// ClickHouse HTTP URL (`http://…`, or `https://…` for TLS).
    #[arg(long, env = "OOMLENS_CLICKHOUSE_URL")]
    pub clickhouse_url: Option<String>,
    /// HTTPS: CA certificate(s), PEM, that signed ClickHouse's certificate (default: the system
    /// trust store).
    #[arg(long, env = "OOMLENS_CLICKHOUSE_TLS_CA")]
    pub clickhouse_tls_ca: Option<PathBuf>,
    /// HTTPS: client certificate, PEM, for a server that verifies clients (with --clickhouse-tls-key).
    #[arg(long, env = "OOMLENS_CLICKHOUSE_TLS_CERT", requires = "clickhouse_tls_key")]
    pub clickhouse_tls_cert: Option<PathBuf>,
    /// HTTPS: the client certificate's private key, PEM.
    #[arg(long, env = "OOMLENS_CLICKHOUSE_TLS_KEY", requires = "clickhouse_tls_cert")]
    pub clickhouse_tls_key: Option<PathBuf>,
    /// ClickHouse database holding the oomlens tables.
    #[arg(long, env = "OOMLENS_CLICKHOUSE_DATABASE")]
    pub database: Option<String>,
    /// ClickHouse user.
    #[arg(long, env = "OOMLENS_CLICKHOUSE_USER")]
    pub user: Option<String>,
    /// ClickHouse user's password.
    #[arg(long, env = "OOMLENS_CLICKHOUSE_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// ClickHouse cluster (from the servers' <remote_servers>) to spread the tables over:
    /// `<table>_local` on every shard behind `Distributed` tables.
    #[arg(long, env = "OOMLENS_CLICKHOUSE_CLUSTER")]
    pub cluster: Option<String>,
    /// Cluster mode: create tables with `ON CLUSTER` DDL (needs ZooKeeper / ClickHouse Keeper).
    #[arg(long, env = "OOMLENS_CLICKHOUSE_ON_CLUSTER_DDL")]
    pub on_cluster_ddl: Option<bool>,
    /// Cluster mode: create `Replicated*MergeTree` storage tables (needs Keeper and macros).
    #[arg(long, env = "OOMLENS_CLICKHOUSE_REPLICATED")]
    pub replicated: Option<bool>,
    /// Cluster mode: HTTP URL of every shard replica (comma-separated or repeated; default:
    /// derived from --clickhouse-url and system.clusters).
    #[arg(long = "shard-url", env = "OOMLENS_CLICKHOUSE_SHARD_URLS", value_delimiter = ',')]
    pub shard_urls: Vec<String>,
}

impl ChArgs {
    /// The whole collector config: file (or defaults) with these flags applied.
    pub fn collector_config(&self) -> Result<ValidConfig, ConfigError> {
        let mut cfg = self.layered_config()?;
        self.apply(&mut cfg.clickhouse);
        cfg.finish()
    }

    /// Defaults, the file, then the `OOMLENS_<SECTION>__<KEY>` variables (no flags, not finished).
    pub fn layered_config(&self) -> Result<CollectorConfig, ConfigError> {
        CollectorConfig::load_layered(self.config.as_deref(), std::env::vars())
    }

    /// The ClickHouse settings alone.
    pub fn clickhouse(&self) -> Result<ChConfig, ConfigError> {
        Ok(self.collector_config()?.into_raw().clickhouse)
    }

    /// Applies the ClickHouse flags that were given to `ch`.
    pub fn apply(&self, ch: &mut ChConfig) {
        if let Some(v) = &self.clickhouse_url {
            ch.url = v.clone();
        }
        if let Some(v) = &self.database {
            ch.database = v.clone();
        }
        for (flag, key) in [
            (&self.clickhouse_tls_ca, &mut ch.tls_ca),
            (&self.clickhouse_tls_cert, &mut ch.tls_cert),
            (&self.clickhouse_tls_key, &mut ch.tls_key),
        ] {
            if let Some(v) = flag {
                *key = Some(v.clone());
            }
        }
        if let Some(v) = &self.user {
            ch.user = v.clone();
        }
        if let Some(v) = &self.password {
            ch.password = v.clone();
        }
        if let Some(v) = &self.cluster {
            ch.cluster = v.clone();
        }
        if let Some(v) = self.on_cluster_ddl {
            ch.on_cluster_ddl = v;
        }
        if let Some(v) = self.replicated {
            ch.replicated = v;
        }
        if !self.shard_urls.is_empty() {
            ch.shard_urls = self.shard_urls.clone();
        }
    }
}

/// Writes the completion script of `cmd` (named `bin`) for `shell` to `out`.
pub fn write_completions(
    shell: clap_complete::Shell,
    mut cmd: clap::Command,
    bin: &str,
    out: &mut dyn std::io::Write,
) {
    clap_complete::generate(shell, &mut cmd, bin, out);
}

/// The man pages of `cmd`: the top-level page to `out`, or, with `out_dir`, every page (one per
/// command, `<bin>-<command>.1`) into that directory.
pub fn write_man(
    cmd: clap::Command,
    out_dir: Option<&std::path::Path>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    match out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            clap_mangen::generate_to(cmd, dir)
        }
        None => clap_mangen::Man::new(cmd).render(out),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        ch: ChArgs,
    }

    #[test]
    fn cluster_flags_override_the_file() {
        let cli = Cli::try_parse_from([
            "x",
            "--clickhouse-url",
            "http://ch-1:8123",
            "--cluster",
            "oomlens",
            "--on-cluster-ddl",
            "true",
            "--replicated",
            "true",
            "--shard-url",
            "http://ch-1:8123,http://ch-2:8123",
        ])
        .unwrap();
        let ch = cli.ch.clickhouse().unwrap();
        assert_eq!(ch.cluster, "oomlens");
        assert!(ch.on_cluster_ddl && ch.replicated && ch.is_cluster());
        assert_eq!(ch.shard_urls, ["http://ch-1:8123", "http://ch-2:8123"]);
        let bad = Cli::try_parse_from(["x", "--cluster", "no-such name"]).unwrap();
        assert!(bad.ch.clickhouse().is_err(), "the cluster name must be an identifier");
    }
}
