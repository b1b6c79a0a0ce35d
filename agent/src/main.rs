//! `oomlens-agent`: the per-node agent binary — its command line, the layered configuration
//! (defaults, TOML file, `OOMLENS_<SECTION>__<KEY>` variables, flags) and the generated shell
//! completions and man pages.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use oomlens_agent::config::{AgentConfig, SourceKind, ValidConfig};
use oomlens_agent::detect::parse::command::ParseCommandError;
use oomlens_agent::runner::run_agent;
use oomlens_agent::source::nvml::{NvmlOptions, smoke_report};

/// oomlens agent: samples GPU memory (NVML or the simulator), catches OOMs and streams them to a
/// collector over QUIC with mutual TLS.
#[derive(Debug, Parser)]
#[command(name = "oomlens-agent", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: oomlens_schema::telemetry::LogArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent.
    Run(RunArgs),
    /// Print the effective configuration (file + environment + flags) as TOML and exit
    /// (same as `run --print-config`).
    PrintConfig(RunArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        /// Shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout, or write one page per command into --out-dir.
    Man {
        /// Directory for `oomlens-agent.1` and one `oomlens-agent-<command>.1` per command.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
    /// Open NVML and print the driver, every GPU and one full reading (needs an NVIDIA driver).
    NvmlSmoke,
    /// Serve only the hook socket (debugging, protocol tests); print each accepted event as JSON.
    HookListen(HookListenArgs),
    /// Find OOM messages in job logs and kernel logs (Xid, OOM-killer kills; files, or stdin when
    /// none) and print them.
    Parse(ParseArgs),
}

#[derive(Debug, Args)]
struct ParseArgs {
    /// Log files (stdin when none).
    files: Vec<PathBuf>,
    /// Line framing: plain, cri, docker or auto.
    #[arg(long, default_value = "auto")]
    format: oomlens_agent::detect::parse::LineFormat,
    /// One JSON object per event per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// TOML configuration file.
    #[arg(long, short, env = "OOMLENS_AGENT_CONFIG")]
    config: Option<PathBuf>,
    /// Node name (default: host name). The collector trusts the certificate's CN instead.
    #[arg(long, env = "OOMLENS_NODE")]
    node: Option<String>,
    /// Cluster name.
    #[arg(long, env = "OOMLENS_CLUSTER")]
    cluster: Option<String>,
    /// Stable agent id (default: node name).
    #[arg(long, env = "OOMLENS_AGENT_ID")]
    agent_id: Option<String>,
    /// Source of readings: `nvml` (real GPUs), `simulator`, or `none` (no GPU readings: only job
    /// logs, the kernel log and the hook report failures — CPU nodes, testing).
    #[arg(long, value_enum, env = "OOMLENS_SOURCE")]
    source: Option<SourceKind>,
    /// Milliseconds between readings.
    #[arg(long, env = "OOMLENS_INTERVAL_MS")]
    interval_ms: Option<u64>,
    /// Simulator: real-time multiplier.
    #[arg(long, env = "OOMLENS_SPEED")]
    speed: Option<f64>,
    /// Simulator: stop after this many simulated seconds, deliver everything, exit.
    #[arg(long, env = "OOMLENS_DURATION_S")]
    duration_s: Option<u64>,
    /// Simulator: first timestamp, Unix epoch ms (default: now).
    #[arg(long, env = "OOMLENS_START_MS")]
    start_ms: Option<i64>,
    /// Simulator: number of GPUs.
    #[arg(long, env = "OOMLENS_SIM_GPUS")]
    sim_gpus: Option<u32>,
    /// Simulator: seed.
    #[arg(long, env = "OOMLENS_SIM_SEED")]
    sim_seed: Option<u64>,
    /// Simulator: directory for the simulated jobs' log files.
    #[arg(long, env = "OOMLENS_SIM_LOG_DIR")]
    sim_log_dir: Option<PathBuf>,
    /// Collector endpoint host:port (repeat for fail-over).
    #[arg(long = "collector", env = "OOMLENS_COLLECTORS", value_delimiter = ',')]
    collectors: Vec<String>,
    /// TLS name of the collector.
    #[arg(long, env = "OOMLENS_SERVER_NAME")]
    server_name: Option<String>,
    /// CA certificate (PEM).
    #[arg(long, env = "OOMLENS_CA")]
    ca: Option<PathBuf>,
    /// Agent certificate (PEM).
    #[arg(long, env = "OOMLENS_CERT")]
    cert: Option<PathBuf>,
    /// Agent key (PEM).
    #[arg(long, env = "OOMLENS_KEY")]
    key: Option<PathBuf>,
    /// Serve /metrics, /healthz, /readyz on this address.
    #[arg(long, env = "OOMLENS_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Write what was sent (batches and rows per table) as JSON to this file on exit.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the effective configuration as TOML and exit (nothing is started).
    #[arg(long)]
    print_config: bool,
}

impl RunArgs {
    fn config(&self) -> anyhow::Result<ValidConfig> {
        let mut cfg = AgentConfig::load_layered(self.config.as_deref(), std::env::vars())?;
        macro_rules! set {
            ($($field:ident => $target:expr),* $(,)?) => { $( if let Some(v) = &self.$field { $target = v.clone(); } )* };
        }
        set! {
            node => cfg.agent.node, cluster => cfg.agent.cluster, agent_id => cfg.agent.agent_id,
            source => cfg.source.kind, interval_ms => cfg.source.interval_ms, speed => cfg.source.speed,
            duration_s => cfg.source.duration_s, start_ms => cfg.source.start_ms, sim_gpus => cfg.simulator.gpus, sim_seed => cfg.simulator.seed,
            server_name => cfg.uplink.server_name, ca => cfg.uplink.ca, cert => cfg.uplink.cert, key => cfg.uplink.key,
        }
        if let Some(dir) = &self.sim_log_dir {
            cfg.simulator.log_dir = Some(dir.clone());
        }
        if !self.collectors.is_empty() {
            cfg.uplink.collectors = self.collectors.clone();
        }
        if let Some(addr) = self.metrics_listen {
            cfg.telemetry.listen = Some(addr);
        }
        Ok(cfg.finish()?)
    }
}

#[derive(Debug, Args)]
struct HookListenArgs {
    /// TOML configuration file (its `[hook]` and `[workload]` sections are used).
    #[arg(long, short, env = "OOMLENS_AGENT_CONFIG")]
    config: Option<PathBuf>,
    /// Socket path (default: `hook.path` of the configuration).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Socket permission bits, octal (e.g. 660).
    #[arg(long, value_parser = |s: &str| u32::from_str_radix(s.trim_start_matches("0o"), 8))]
    mode: Option<u32>,
    /// Group owning the socket (name or gid).
    #[arg(long)]
    group: Option<String>,
    /// Print each accepted event as one JSON line on stdout.
    #[arg(long)]
    print: bool,
}

impl HookListenArgs {
    fn configs(
        &self,
    ) -> anyhow::Result<(oomlens_agent::detect::hook::HookConfig, oomlens_agent::workload::WorkloadConfig)>
    {
        let mut cfg = AgentConfig::load_layered(self.config.as_deref(), std::env::vars())?;
        if let Some(socket) = &self.socket {
            cfg.hook.path = socket.clone();
        }
        if let Some(mode) = self.mode {
            cfg.hook.mode = mode;
        }
        if let Some(group) = &self.group {
            cfg.hook.group = group.clone();
        }
        let cfg = cfg.finish()?;
        Ok((cfg.hook.clone(), cfg.workload.clone()))
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    oomlens_schema::telemetry::init_logging_with(cli.log.log_format, "info");
    oomlens_schema::telemetry::exit_status(run(cli))
}

#[tokio::main]
async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::PrintConfig(args) => print!("{}", args.config()?.to_toml()?),
        Command::Run(args) if args.print_config => print!("{}", args.config()?.to_toml()?),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "oomlens-agent", &mut std::io::stdout());
        }
        Command::Man { out_dir } => write_man(out_dir)?,
        Command::Parse(args) => {
            let mut out = std::io::stdout().lock();
            match oomlens_agent::detect::parse::command::run(&args.files, args.format, args.json, &mut out) {
                // The reader went away (`… | head`): what it wanted was written; stop quietly.
                Err(ParseCommandError::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => return Err(e.into()),
                Ok(_) => {}
            }
        }
        Command::HookListen(args) => {
            let (hook, workload) = args.configs()?;
            let stop_rx = oomlens_schema::telemetry::stop_on_signal();
            oomlens_agent::detect::hook::listen_and_print(
                &hook,
                &workload,
                args.print,
                std::io::stdout(),
                stop_rx,
            )
            .await?;
        }
        Command::NvmlSmoke => {
            let report = tokio::task::spawn_blocking(|| smoke_report(NvmlOptions::default()))
                .await
                .context("NVML smoke test thread failed")??;
            println!("{report}");
        }
        Command::Run(args) => {
            let cfg = args.config()?;
            let stop_rx = oomlens_schema::telemetry::stop_on_signal();
            let totals = run_agent(cfg, stop_rx).await?;
            if let Some(path) = &args.report {
                let json = serde_json::to_string_pretty(&totals).context("cannot render the report")?;
                std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
            }
            if totals.pending_batches > 0 {
                anyhow::bail!("{} batches were not acknowledged before exit", totals.pending_batches);
            }
            if totals.dropped_events > 0 {
                anyhow::bail!(
                    "{} OOM events were lost (the spool could not take their batches)",
                    totals.dropped_events
                );
            }
            if totals.dropped_gpu_samples + totals.dropped_process_samples > 0 {
                tracing::warn!(
                    gpu_samples = totals.dropped_gpu_samples,
                    process_samples = totals.dropped_process_samples,
                    "samples were dropped to keep the spool within its caps (events were kept)"
                );
            }
        }
    }
    Ok(())
}

/// The man pages: the top-level page on stdout, or every page (one per command) into `out_dir`.
fn write_man(out_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let cmd = Cli::command();
    match out_dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(cmd, &dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
        }
        None => {
            clap_mangen::Man::new(cmd).render(&mut std::io::stdout()).context("cannot write the man page")?
        }
    }
    Ok(())
}
