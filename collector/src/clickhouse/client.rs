//! [`Ch`]: the connected ClickHouse client, the detected server version, and [`ChError`].
//!
//! The client runs with schema validation off (18.16 knows neither `RowBinaryWithNamesAndTypes`
//! nor `describe_include_subcolumns`) and LZ4 compression. Queries bind values with the client's
//! `?` placeholders (18.16 has no server-side parameters); the database name is validated as a
//! plain identifier before it is spliced into SQL. Every request has a timeout.
//!
//! In cluster mode (`clickhouse.cluster`) every request carries `insert_distributed_sync = 1`, so an
//! insert into a `Distributed` table returns only once every shard has stored its rows (the
//! collector acknowledges a batch only after that), and [`Ch::connect`] resolves the cluster's
//! replicas ([`super::cluster`]) for migrations, the schema check and retention. Every request
//! carries `distributed_product_mode = 'local'` (harmless on one server), so the correlation SQL's
//! subqueries over `Distributed` tables read each shard's own rows — exact, as rows are sharded by
//! node.

use std::future::Future;
use std::time::Duration;

use oomlens_schema::ddl::{BadVersion, Retention, SchemaMismatch, ServerCaps, ServerVersion};

use super::cluster::{SharedTopology, Topology};
use super::config::ChConfig;

/// The setting that makes an `INSERT` into a `Distributed` table synchronous: it returns after
/// every shard stored its block (ClickHouse 1.1+, 18.16 included; on 23.x+ an alias of
/// `distributed_foreground_insert`).
pub const DISTRIBUTED_SYNC_SETTING: &str = "insert_distributed_sync";

/// The setting that lets a query over `Distributed` tables use `IN`/`JOIN` subqueries over other
/// `Distributed` tables (the correlation SQL does): `local` rewrites the inner tables to each
/// shard's `_local` tables. That is exact for oomlens because the sharding key is
/// `cityHash64(cluster, node)` and every built-in correlation stays within one node, so a shard's
/// events and samples are all a subquery needs (the server default `deny` refuses these queries).
pub const DISTRIBUTED_PRODUCT_SETTING: &str = "distributed_product_mode";

/// Errors talking to ClickHouse.
#[derive(Debug, thiserror::Error)]
pub enum ChError {
    /// The configuration cannot work.
    #[error("invalid ClickHouse configuration: {0}")]
    InvalidConfig(String),
    /// The server could not be reached at all.
    #[error(
        "cannot reach ClickHouse at {url}: {} — check that the server is running and that the URL \
         (scheme, host, HTTP port) is right; for a local throw-away server run `deploy/dev-clickhouse.sh start`",
        one_line(source)
    )]
    Unreachable {
        /// Configured URL.
        url: String,
        /// The clickhouse client's error from the failed connection.
        #[source]
        source: clickhouse::error::Error,
    },
    /// A request did not finish within the configured timeout.
    #[error("ClickHouse at {url} did not answer {what} within {after:?}")]
    Timeout {
        /// Configured URL.
        url: String,
        /// What was being done.
        what: String,
        /// The timeout.
        after: Duration,
    },
    /// A query or insert failed.
    #[error("ClickHouse {what} failed: {}", one_line(source))]
    Query {
        /// What was being done.
        what: String,
        /// The error the clickhouse client returned.
        #[source]
        source: clickhouse::error::Error,
    },
    /// `SELECT version()` answered something unparseable.
    #[error(transparent)]
    BadVersion(#[from] BadVersion),
    /// Live tables differ from what the collector writes.
    #[error("ClickHouse schema does not match the collector ({} problem(s)): {}", .0.len(), list(.0))]
    SchemaMismatch(Vec<SchemaMismatch>),
}

fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        cur = s.source();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn list(items: &[SchemaMismatch]) -> String {
    items.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// A connected ClickHouse client (cheap to clone).
#[derive(Clone)]
pub struct Ch {
    client: clickhouse::Client,
    url: String,
    database: String,
    version: ServerVersion,
    retention: Retention,
    timeout: Duration,
    cluster: Option<SharedTopology>,
}

impl std::fmt::Debug for Ch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ch")
            .field("url", &self.url)
            .field("database", &self.database)
            .field("version", &self.version)
            .field("cluster", &self.cluster.as_ref().map(|t| &t.ddl.name))
            .finish_non_exhaustive()
    }
}

impl Ch {
    /// Builds the client and asks the server for its version; in cluster mode also reads the
    /// cluster's replicas from `system.clusters` and connects to each (see [`super::cluster`]).
    pub async fn connect(cfg: &ChConfig) -> Result<Ch, ChError> {
        let mut ch = Self::connect_server(cfg).await?;
        if cfg.is_cluster() {
            ch.cluster = Some(super::cluster::resolve(&ch, cfg).await?.into());
        }
        Ok(ch)
    }

    /// [`Self::connect`] without resolving the cluster's replicas.
    pub(crate) async fn connect_server(cfg: &ChConfig) -> Result<Ch, ChError> {
        cfg.validate().map_err(ChError::InvalidConfig)?;
        let mut client = super::tls::http_client(cfg)
            .map_err(|e| ChError::InvalidConfig(e.to_string()))?
            .with_url(cfg.url.clone())
            .with_user(cfg.user.clone())
            .with_password(cfg.password.clone())
            .with_compression(clickhouse::Compression::Lz4)
            .with_validation(false)
            // Always: a query tool pointed at one server of a cluster needs it as much as the
            // collector, and a single server ignores it.
            .with_setting(DISTRIBUTED_PRODUCT_SETTING, "local");
        if cfg.is_cluster() {
            client = client.with_setting(DISTRIBUTED_SYNC_SETTING, "1");
        }
        if cfg.insert_quorum > 0 {
            // Inserts (through the Distributed tables too: the setting travels with them) are
            // stored once this many replicas of the shard have them.
            client = client.with_setting("insert_quorum", cfg.insert_quorum.to_string());
        }
        let mut ch = Ch {
            client,
            url: cfg.url.clone(),
            database: cfg.database.clone(),
            version: ServerVersion { major: 0, minor: 0, patch: 0 },
            retention: cfg.retention,
            timeout: cfg.request_timeout(),
            cluster: None,
        };
        let text = ch
            .run("SELECT version()", ch.client.query("SELECT version()").fetch_one::<String>())
            .await
            .map_err(|e| match e {
                ChError::Query { source: source @ clickhouse::error::Error::Network(_), .. } => {
                    ChError::Unreachable { url: ch.url.clone(), source }
                }
                ChError::Query { source: source @ clickhouse::error::Error::TimedOut, .. } => {
                    ChError::Unreachable { url: ch.url.clone(), source }
                }
                ChError::Timeout { .. } => {
                    ChError::Unreachable { url: ch.url.clone(), source: clickhouse::error::Error::TimedOut }
                }
                other => other,
            })?;
        ch.version = text.parse()?;
        tracing::info!(url = %ch.url, version = %ch.version, "connected to ClickHouse");
        Ok(ch)
    }

    /// The cluster the tables are spread over (cluster mode), with every shard replica.
    pub fn topology(&self) -> Option<&Topology> {
        self.cluster.as_deref()
    }

    /// The server version.
    pub fn version(&self) -> ServerVersion {
        self.version
    }

    /// What the server supports.
    pub fn caps(&self) -> ServerCaps {
        self.version.caps()
    }

    /// The underlying client (no default database: qualify table names with [`Self::table`]).
    pub fn client(&self) -> &clickhouse::Client {
        &self.client
    }

    /// The configured database.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The configured URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The configured retention.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// The per-request timeout.
    pub fn request_timeout(&self) -> Duration {
        self.timeout
    }

    /// `database.table` (the database is a validated identifier; `table` is one of ours).
    pub fn table(&self, table: &str) -> String {
        format!("{}.{}", self.database, table)
    }

    /// Runs one request with the configured timeout, mapping errors to [`ChError`].
    pub async fn run<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, clickhouse::error::Error>>,
    ) -> Result<T, ChError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(source)) => Err(ChError::Query { what: what.to_owned(), source }),
            Err(_) => {
                Err(ChError::Timeout { url: self.url.clone(), what: what.to_owned(), after: self.timeout })
            }
        }
    }

    /// Executes a statement without result (DDL), with the timeout.
    pub async fn execute(&self, sql: &str) -> Result<(), ChError> {
        self.run(sql, self.client.query(sql).execute()).await
    }
}
