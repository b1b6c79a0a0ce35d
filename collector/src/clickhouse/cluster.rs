//! Cluster mode (`clickhouse.cluster`): the shard replicas behind the `Distributed` tables.
//!
//! With a cluster configured, the collector writes and queries through `Distributed` tables (see
//! [`oomlens_schema::ddl::ClusterDdl`]) but must reach every shard replica itself to create the
//! `_local` storage tables (unless `ON CLUSTER` DDL is used), to check their columns at start-up
//! and to drop expired partitions. [`resolve`] reads the cluster's hosts from `system.clusters` of
//! the configured server and finds each one's HTTP endpoint:
//!
//! * `system.clusters` knows only the **native TCP port** of each host, not its HTTP port. With
//!   `clickhouse.shard_urls` set, those URLs are used (one per replica, any order); otherwise each
//!   host's URL is derived from `clickhouse.url` by replacing the host name and keeping its scheme,
//!   credentials and port — right when every server listens on the same HTTP port.
//! * Each URL is verified: the server behind it must report exactly one `is_local` row for the
//!   cluster in its own `system.clusters`, which names the (shard, replica) it is. Every replica of
//!   the cluster must be covered exactly once, so a wrong or missing URL is a configuration error
//!   at start-up, not a table silently missing on one shard.

use std::sync::Arc;

use oomlens_schema::ddl::ClusterDdl;

use super::client::{Ch, ChError};
use super::config::ChConfig;

/// One replica of one shard, with a client connected directly to it (not in cluster mode).
#[derive(Debug, Clone)]
pub struct Replica {
    /// `shard_num` in `system.clusters` (1-based).
    pub shard_num: u32,
    /// `replica_num` in `system.clusters` (1-based).
    pub replica_num: u32,
    /// `host_name:port` as `system.clusters` lists it (native TCP port).
    pub host: String,
    /// Direct client of this replica (HTTP).
    pub ch: Ch,
}

/// The cluster the collector writes to: its DDL settings and every shard replica.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Name, `ON CLUSTER` and replication settings for rendering the DDL.
    pub ddl: ClusterDdl,
    /// Every replica, ordered by shard then replica number.
    pub replicas: Vec<Replica>,
}

impl Topology {
    /// Number of shards.
    pub fn shards(&self) -> usize {
        let mut nums: Vec<u32> = self.replicas.iter().map(|r| r.shard_num).collect();
        nums.dedup();
        nums.len()
    }
}

#[derive(Debug, Clone, clickhouse::Row, serde::Deserialize)]
struct ClusterRow {
    shard_num: u32,
    replica_num: u32,
    host_name: String,
    port: u16,
    is_local: u8,
}

const CLUSTER_ROWS: &str = "SELECT shard_num, replica_num, host_name, port, is_local FROM system.clusters \
                            WHERE cluster = ? ORDER BY shard_num, replica_num";

async fn cluster_rows(ch: &Ch, name: &str) -> Result<Vec<ClusterRow>, ChError> {
    ch.run("reading system.clusters", ch.client().query(CLUSTER_ROWS).bind(name).fetch_all::<ClusterRow>())
        .await
}

/// The row of `local` (this server's `is_local` rows) that is this server. ClickHouse 18.16
/// marks every replica of the server's own shard `is_local`; with replicated shards the
/// `{replica}` macro tells them apart: the row whose server, asked through `remote()`, has this
/// server's. Other cases are returned unchanged (the caller reports them).
async fn own_rows(ch: &Ch, cfg: &ChConfig, local: Vec<ClusterRow>) -> Result<Vec<ClusterRow>, ChError> {
    if local.len() < 2 || local.iter().any(|r| r.shard_num != local[0].shard_num) {
        return Ok(local);
    }
    const MACRO: &str = "SELECT substitution FROM system.macros WHERE macro = 'replica'";
    let mine = ch.run("reading system.macros", ch.client().query(MACRO).fetch_optional::<String>()).await?;
    let Some(mine) = mine else { return Ok(local) };
    let mut own = Vec::new();
    for r in local {
        let theirs = ch
            .run(
                "reading a replica's macros through remote()",
                ch.client()
                    .query("SELECT substitution FROM remote(?, system.macros, ?, ?) WHERE macro = 'replica'")
                    .bind(format!("{}:{}", r.host_name, r.port))
                    .bind(cfg.user.as_str())
                    .bind(cfg.password.as_str())
                    .fetch_optional::<String>(),
            )
            .await?;
        if theirs.as_deref() == Some(mine.as_str()) {
            own.push(r);
        }
    }
    Ok(own)
}

/// `base` (an `http(s)://[user@]host[:port][/path]` URL) with its host replaced by `host`.
pub fn derive_url(base: &str, host: &str) -> Result<String, String> {
    let (scheme, rest) = base.split_once("://").ok_or_else(|| format!("{base:?} has no scheme"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    // The port follows the last ':' outside an IPv6 literal's brackets.
    let port = match hostport.rfind(':') {
        Some(i) if !hostport[i..].contains(']') => &hostport[i..],
        _ => "",
    };
    if host.is_empty() {
        return Err("empty host name".to_owned());
    }
    let host =
        if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_owned() };
    let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    Ok(format!("{scheme}://{user}{host}{port}{path}"))
}

/// The configuration for a direct (non-cluster) client of one replica.
fn replica_config(cfg: &ChConfig, url: String) -> ChConfig {
    ChConfig {
        url,
        cluster: String::new(),
        on_cluster_ddl: false,
        replicated: false,
        insert_quorum: 0,
        shard_urls: Vec::new(),
        ..cfg.clone()
    }
}

/// Reads the topology of `cfg.cluster` through `main` and connects to every replica.
pub async fn resolve(main: &Ch, cfg: &ChConfig) -> Result<Topology, ChError> {
    let name = cfg.cluster.as_str();
    let rows = cluster_rows(main, name).await?;
    if rows.is_empty() {
        return Err(ChError::InvalidConfig(format!(
            "clickhouse.cluster {name:?} is not defined in <remote_servers> of the server at {} \
             (SELECT DISTINCT cluster FROM system.clusters lists the defined ones)",
            main.url()
        )));
    }
    let urls: Vec<String> = if cfg.shard_urls.is_empty() {
        rows.iter()
            .map(|r| {
                derive_url(&cfg.url, &r.host_name).map_err(|e| {
                    ChError::InvalidConfig(format!("cannot derive the HTTP URL of {}: {e}", r.host_name))
                })
            })
            .collect::<Result<_, _>>()?
    } else {
        cfg.shard_urls.clone()
    };
    let hint = if cfg.shard_urls.is_empty() {
        " — URLs are derived from clickhouse.url's port; set clickhouse.shard_urls when the servers' \
         HTTP ports differ"
    } else {
        ""
    };
    let mut replicas: Vec<Replica> = Vec::with_capacity(rows.len());
    for url in urls {
        let ch = Ch::connect_server(&replica_config(cfg, url.clone())).await?;
        let local: Vec<ClusterRow> =
            cluster_rows(&ch, name).await?.into_iter().filter(|r| r.is_local != 0).collect();
        let local = own_rows(&ch, cfg, local).await?;
        let [me] = local.as_slice() else {
            return Err(ChError::InvalidConfig(format!(
                "the server at {url} {} of cluster {name:?} in its own system.clusters \
                 (is_local rows: {}); check clickhouse.shard_urls and <remote_servers>{hint}",
                if local.is_empty() { "is not a host" } else { "is more than one host" },
                local.len(),
            )));
        };
        if let Some(other) =
            replicas.iter().find(|r| (r.shard_num, r.replica_num) == (me.shard_num, me.replica_num))
        {
            return Err(ChError::InvalidConfig(format!(
                "{url} and {} are the same replica (shard {}, replica {}) of cluster {name:?}{hint}",
                other.ch.url(),
                me.shard_num,
                me.replica_num
            )));
        }
        replicas.push(Replica {
            shard_num: me.shard_num,
            replica_num: me.replica_num,
            host: format!("{}:{}", me.host_name, me.port),
            ch,
        });
    }
    let missing: Vec<String> = rows
        .iter()
        .filter(|r| !replicas.iter().any(|x| (x.shard_num, x.replica_num) == (r.shard_num, r.replica_num)))
        .map(|r| format!("shard {} replica {} ({}:{})", r.shard_num, r.replica_num, r.host_name, r.port))
        .collect();
    if !missing.is_empty() {
        return Err(ChError::InvalidConfig(format!(
            "clickhouse.shard_urls has no URL for {} of cluster {name:?}",
            missing.join(", ")
        )));
    }
    replicas.sort_by_key(|r| (r.shard_num, r.replica_num));
    let ddl =
        ClusterDdl { name: name.to_owned(), on_cluster: cfg.on_cluster_ddl, replicated: cfg.replicated };
    let topology = Topology { ddl, replicas };
    tracing::info!(
        cluster = name,
        shards = topology.shards(),
        replicas = topology.replicas.len(),
        hosts = ?topology.replicas.iter().map(|r| format!("{} {}", r.host, r.ch.url())).collect::<Vec<_>>(),
        "ClickHouse cluster resolved"
    );
    Ok(topology)
}

/// Shared handle stored in [`Ch`].
pub(crate) type SharedTopology = Arc<Topology>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_derived_from_the_configured_one() {
        assert_eq!(derive_url("http://ch-0:8123", "ch-1").unwrap(), "http://ch-1:8123");
        assert_eq!(
            derive_url("https://u:p@lb.example:8443/", "10.0.0.7").unwrap(),
            "https://u:p@10.0.0.7:8443/"
        );
        assert_eq!(derive_url("http://127.0.0.1", "ch-2").unwrap(), "http://ch-2");
        assert_eq!(derive_url("http://[::1]:8123", "fd00::2").unwrap(), "http://[fd00::2]:8123");
        assert_eq!(derive_url("http://[::1]", "h").unwrap(), "http://h");
        assert!(derive_url("ch:8123", "h").is_err());
        assert!(derive_url("http://a:1", "").is_err());
    }
}
