//! Command-line pieces shared by `oomlens-collector` and `oomlens`: ClickHouse connection flags.

use std::path::PathBuf;

use clap::Args;

use crate::clickhouse::ChConfig;
use crate::config::{CollectorConfig, ConfigError};

/// Where ClickHouse is (flags override the config file).
#[derive(Debug, Clone, Args)]
pub struct ChArgs {
    /// Collector TOML configuration file (its `[clickhouse]` section is used).
    #[arg(long, short, env = "OOMLENS_COLLECTOR_CONFIG")]
    pub config: Option<PathBuf>,
    /// ClickHouse HTTP URL.
    #[arg(long, env = "OOMLENS_CLICKHOUSE_URL")]
    pub clickhouse_url: Option<String>,
    /// Database.
    #[arg(long, env = "OOMLENS_CLICKHOUSE_DATABASE")]
    pub database: Option<String>,
    /// User.
    #[arg(long, env = "OOMLENS_CLICKHOUSE_USER")]
    pub user: Option<String>,
    /// Password.
    #[arg(long, env = "OOMLENS_CLICKHOUSE_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
}

impl ChArgs {
    /// The whole collector config: file (or defaults) with these flags applied.
    pub fn collector_config(&self) -> Result<CollectorConfig, ConfigError> {
        let mut cfg = match &self.config {
            Some(path) => CollectorConfig::load(path)?,
            None => CollectorConfig::default(),
        };
        self.apply(&mut cfg.clickhouse);
        cfg.finish()
    }

    /// The ClickHouse settings alone.
    pub fn clickhouse(&self) -> Result<ChConfig, ConfigError> {
        Ok(self.collector_config()?.clickhouse)
    }

    fn apply(&self, ch: &mut ChConfig) {
        if let Some(v) = &self.clickhouse_url {
            ch.url = v.clone();
        }
        if let Some(v) = &self.database {
            ch.database = v.clone();
        }
        if let Some(v) = &self.user {
            ch.user = v.clone();
        }
        if let Some(v) = &self.password {
            ch.password = v.clone();
        }
    }
}
