//! `oomlens-collector`: the ingest service (serve), schema management (migrate, ddl), the dev PKI
//! (certs), the effective configuration (print-config) and its completions and man pages.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use oomlens_collector::cli::{ChArgs, write_completions, write_man};
use oomlens_collector::clickhouse::{Ch, ChConfig};
use oomlens_collector::config::ValidConfig;
use oomlens_collector::ingest::auth::TlsReloadOutcome;
use oomlens_collector::ingest::certs::mint_dev_pki;
use oomlens_schema::ddl::{ClusterDdl, Retention, ServerVersion, schema_sql};
use oomlens_schema::telemetry::{LogArgs, exit_status, init_logging_with, stop_on_signal};

/// oomlens collector: receives agents' frames over QUIC (mutual TLS) and stores them in ClickHouse.
#[derive(Debug, Parser)]
#[command(name = "oomlens-collector", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the collector (migrates the schema first).
    Serve(ServeArgs),
    /// Create or upgrade the ClickHouse schema, check it, and exit.
    Migrate(MigrateArgs),
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
    /// Print the effective configuration (file + environment + flags) as TOML and exit
    /// (same as `serve --print-config`; a ClickHouse password is shown as `<redacted>`).
    PrintConfig(ServeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        /// Shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout, or write one page per command into --out-dir.
    Man {
        /// Directory for `oomlens-collector.1` and one `oomlens-collector-<command>.1` per command.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
struct MigrateArgs {
    #[command(flatten)]
    ch: ChArgs,
    /// Also roll up every stored sample into the per-minute rollups again (the migration does it
    /// once when it creates their views; repeat it after an interrupted upgrade — rows already
    /// rolled up are not counted twice).
    #[arg(long)]
    backfill_rollups: bool,
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
    /// Send an alert for every newly attributed OOM event to these Alertmanagers (base URL, e.g.
    /// http://alertmanager:9093; comma-separated or repeated). Replaces `alerts.alertmanager_urls`.
    #[arg(long = "alertmanager-url", env = "OOMLENS_ALERTMANAGER_URLS", value_delimiter = ',')]
    alertmanager_urls: Vec<String>,
    /// Print the effective configuration as TOML and exit (nothing is started).
    #[arg(long)]
    print_config: bool,
}

impl ServeArgs {
    /// Defaults, the file, the `OOMLENS_<SECTION>__<KEY>` variables, then the flags; checked.
    fn config(&self) -> anyhow::Result<ValidConfig> {
        let mut cfg = self.ch.layered_config()?;
        self.ch.apply(&mut cfg.clickhouse);
        let c = &mut cfg.collector;
        if let Some(v) = self.listen {
            c.listen = v;
        }
        if let Some(v) = &self.ca {
            c.ca = v.clone();
        }
        if let Some(v) = &self.cert {
            c.cert = v.clone();
        }
        if let Some(v) = &self.key {
            c.key = v.clone();
        }
        if !self.allowed_clusters.is_empty() {
            c.allowed_clusters = self.allowed_clusters.clone();
        }
        if let Some(v) = self.metrics_listen {
            cfg.telemetry.listen = Some(v);
        }
        if !self.alertmanager_urls.is_empty() {
            cfg.alerts.alertmanager_urls = self.alertmanager_urls.clone();
        }
        Ok(cfg.finish()?)
    }
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

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging_with(cli.log.log_format, "info");
    exit_status(run(cli))
}

#[tokio::main]
async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) if args.print_config => print_config(&args),
        Command::PrintConfig(args) => print_config(&args),
        Command::Serve(args) => serve(args).await,
        Command::Completions { shell } => {
            write_completions(shell, Cli::command(), "oomlens-collector", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { out_dir } => write_man(Cli::command(), out_dir.as_deref(), &mut std::io::stdout())
            .context("cannot write the man pages"),
        Command::Migrate(args) => {
            let cfg = args.ch.clickhouse()?;
            let ch = Ch::connect(&cfg).await?;
            let report = ch.migrate().await.context("migration failed")?;
            println!("ClickHouse {} at {}: {report}", ch.version(), cfg.url);
            if args.backfill_rollups {
                let done = ch.backfill_rollups().await.context("backfilling the rollups failed")?;
                println!("rollups backfilled: {}", done.join(", "));
            }
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

fn print_config(args: &ServeArgs) -> anyhow::Result<()> {
    print!("{}", args.config()?.to_toml()?);
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let cfg = args.config()?;
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
                    TlsReloadOutcome::Reloaded => tracing::info!("TLS reload done: new connections use the new material"),
                    TlsReloadOutcome::Unchanged => tracing::info!("TLS reload done: the files are unchanged"),
                }
            }
        }
    }
    running.shutdown().await;
    Ok(())
}
