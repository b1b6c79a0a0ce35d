//! `oomlens-collector`: the ingest service (serve), schema management (migrate, ddl) and the dev PKI (certs).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use oomlens_collector::auth::TlsReloadOutcome;
use oomlens_collector::certs::mint_dev_pki;
use oomlens_collector::cli::ChArgs;
use oomlens_collector::clickhouse::{Ch, ChConfig};
use oomlens_schema::ddl::{ClusterDdl, Retention, ServerVersion, schema_sql};
use oomlens_schema::telemetry::{init_logging, stop_on_signal};

/// oomlens collector: receives agents' frames over QUIC (mutual TLS) and stores them in ClickHouse.
#[derive(Debug, Parser)]
#[command(name = "oomlens-collector", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the collector (migrates the schema first).
    Serve(ServeArgs),
    /// Create or upgrade the ClickHouse schema, check it, and exit.
    Migrate(ChArgs),
    /// Print the DDL rendered for a ClickHouse server version (no server needed).
    Ddl {
        /// Server version, e.g. 18.16.1 or 26.9.1.
        #[arg(long, default_value = "26.9.1")]
        server_version: ServerVersion,
        /// Database name.
        #[arg(long, default_value = "oomlens")]
        database: String,
        /// Render for this ClickHouse cluster: the database, then per table `<table>_local`
        /// (storage on every shard) and a `Distributed` table `<table>`.
        #[arg(long)]
        cluster: Option<String>,
        /// With --cluster: `Replicated*MergeTree` storage tables ({shard}/{replica} macros).
        #[arg(long, requires = "cluster")]
        replicated: bool,
        /// With --cluster: `ON CLUSTER` statements (run once on any host; needs Keeper).
        #[arg(long, requires = "cluster")]
        on_cluster: bool,
    },
    /// Mint a development PKI: CA, collector certificate and one certificate per agent node.
    Certs(CertsArgs),
}

#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    ch: ChArgs,
    /// UDP address for QUIC.
    #[arg(long, env = "OOMLENS_LISTEN")]
    listen: Option<SocketAddr>,
    /// CA certificate that signs agent certificates.
    #[arg(long, env = "OOMLENS_CA")]
    ca: Option<PathBuf>,
    /// Collector certificate.
    #[arg(long, env = "OOMLENS_CERT")]
    cert: Option<PathBuf>,
    /// Collector key.
    #[arg(long, env = "OOMLENS_KEY")]
    key: Option<PathBuf>,
    /// Serve /metrics, /healthz, /readyz on this address.
    #[arg(long, env = "OOMLENS_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Only accept agents whose certificate names one of these clusters (OU); comma-separated
    /// or repeated. Replaces `collector.allowed_clusters`.
    #[arg(long = "allowed-cluster", env = "OOMLENS_ALLOWED_CLUSTERS", value_delimiter = ',')]
    allowed_clusters: Vec<String>,
}

#[derive(Debug, Args)]
struct CertsArgs {
    /// Output directory (an existing ca.pem/ca.key there is reused).
    #[arg(long, default_value = "oomlens-certs")]
    out: PathBuf,
    /// Cluster written into the agent certificates (OU).
    #[arg(long, default_value = "default")]
    cluster: String,
    /// Agent node names (CN), comma-separated or repeated.
    #[arg(long = "node", value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// Names the collector certificate is valid for (DNS names or IPs).
    #[arg(long = "collector-name", value_delimiter = ',', default_value = "localhost,127.0.0.1")]
    collector_names: Vec<String>,
    /// Validity in days.
    #[arg(long, default_value_t = 365)]
    days: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Migrate(args) => {
            let cfg = args.clickhouse()?;
            let ch = Ch::connect(&cfg).await?;
            let report = ch.migrate().await.context("migration failed")?;
            println!("ClickHouse {} at {}: {report}", ch.version(), cfg.url);
            Ok(())
        }
        Command::Ddl { server_version, database, cluster, replicated, on_cluster } => {
            print!("{}", render_ddl(server_version, &database, cluster, replicated, on_cluster)?);
            Ok(())
        }
        Command::Certs(a) => {
            let pki = mint_dev_pki(&a.out, &a.collector_names, &a.cluster, &a.nodes, a.days)?;
            println!("CA:        {}", pki.ca.display());
            println!("collector: {} {}", pki.collector.cert.display(), pki.collector.key.display());
            for (node, files) in &pki.agents {
                println!("agent {node}: {} {}", files.cert.display(), files.key.display());
            }
            Ok(())
        }
    }
}

/// The `ddl` command's output: every statement followed by `;` and a newline; in cluster mode
/// preceded by a comment naming the command that printed it.
fn render_ddl(
    version: ServerVersion,
    database: &str,
    cluster: Option<String>,
    replicated: bool,
    on_cluster: bool,
) -> anyhow::Result<String> {
    let mut out = String::new();
    let cluster = match cluster {
        Some(name) => {
            let check =
                ChConfig { database: database.to_owned(), cluster: name.clone(), ..ChConfig::default() };
            check.validate().map_err(anyhow::Error::msg)?;
            let flags = [(replicated, " --replicated"), (on_cluster, " --on-cluster")]
                .iter()
                .filter_map(|(on, flag)| on.then_some(*flag))
                .collect::<String>();
            out.push_str(&format!(
                "-- Generated by: oomlens-collector ddl --server-version {version} --database {database} \
                 --cluster {name}{flags}\n"
            ));
            Some(ClusterDdl { name, on_cluster, replicated })
        }
        None => None,
    };
    for stmt in schema_sql(database, version.caps(), Retention::default(), cluster.as_ref()) {
        out.push_str(&stmt);
        out.push_str(";\n");
    }
    Ok(out)
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut cfg = args.ch.collector_config()?;
    let c = &mut cfg.collector;
    if let Some(v) = args.listen {
        c.listen = v;
    }
    if let Some(v) = args.ca {
        c.ca = v;
    }
    if let Some(v) = args.cert {
        c.cert = v;
    }
    if let Some(v) = args.key {
        c.key = v;
    }
    if let Some(v) = args.metrics_listen {
        cfg.telemetry.listen = Some(v);
    }
    if !args.allowed_clusters.is_empty() {
        cfg.collector.allowed_clusters = args.allowed_clusters;
    }
    let mut stop = stop_on_signal();
    // SIGHUP re-reads the CA bundle, certificate and key (the timer of
    // collector.tls_reload_interval_ms does too); open connections are not disturbed. Installed
    // before the listener starts, so an early SIGHUP never takes the default action (exit).
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    let running = oomlens_collector::service::start(cfg, stop.clone()).await?;
    println!("oomlens-collector listening on {} (QUIC)", running.addr);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            Some(()) = hangup.recv() => {
                tracing::info!("SIGHUP: reloading the TLS material");
                match running.reload_tls() {
                    TlsReloadOutcome::Failed(e) => tracing::error!(error = %e, "TLS reload failed; the previous material stays in use"),
                    outcome => tracing::info!(?outcome, "TLS reload done"),
                }
            }
        }
    }
    running.shutdown().await;
    Ok(())
}
