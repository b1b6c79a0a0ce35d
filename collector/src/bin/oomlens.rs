//! `oomlens`: the human CLI — the demo and the built-in queries.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use oomlens_collector::cli::{ChArgs, write_completions, write_man};
use oomlens_collector::demo::{DemoConfig, DemoError, run_demo};
use oomlens_collector::report::print_demo_outcome;
use oomlens_schema::telemetry::{init_logging_with_default, stop_on_signal};

/// oomlens: understand the out-of-memory failures of a GPU fleet.
#[derive(Debug, Parser)]
#[command(name = "oomlens", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a simulated fleet end to end (local ClickHouse, collector, agents) and show what landed.
    Demo(DemoArgs),
    /// Run a built-in query (see `oomlens sql --list`) and print its rows as TSV.
    Sql(SqlArgs),
    /// Measure attribution accuracy: a simulated fleet with labelled OOMs (every scenario) through
    /// the real pipeline, then the confusion matrix, per-scenario precision / recall and the
    /// adversarial cases; exits 1 below --min-macro.
    Accuracy(AccuracyArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        /// Shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout, or write one page per command into --out-dir.
    Man {
        /// Directory for `oomlens.1` and one `oomlens-<command>.1` per command.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
struct AccuracyArgs {
    /// Simulated nodes (one agent process each).
    #[arg(long, default_value_t = 6)]
    nodes: u32,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    /// Simulated seconds to play.
    #[arg(long, default_value_t = 900)]
    duration_s: u64,
    /// Real-time multiplier of the simulation.
    #[arg(long, default_value_t = 60.0)]
    speed: f64,
    /// Base seed of the simulation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fail (exit 1) when the macro-averaged accuracy is below this.
    #[arg(long, default_value_t = 0.95)]
    min_macro: f64,
    /// Path of the oomlens-agent binary (default: next to this binary).
    #[arg(long)]
    agent_bin: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Simulated nodes (one agent process each).
    #[arg(long, default_value_t = 4)]
    nodes: u32,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    /// Simulated seconds to play.
    #[arg(long, default_value_t = 300)]
    duration_s: u64,
    /// Real-time multiplier of the simulation.
    #[arg(long, default_value_t = 20.0)]
    speed: f64,
    /// Base seed of the simulation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Path of the oomlens-agent binary (default: next to this binary).
    #[arg(long)]
    agent_bin: Option<PathBuf>,
    /// Keep ClickHouse data, certificates and job logs in this directory.
    #[arg(long)]
    keep: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct SqlArgs {
    #[command(flatten)]
    ch: ChArgs,
    /// List the built-in queries and their parameters.
    #[arg(long)]
    list: bool,
    /// Query name.
    name: Option<String>,
    /// Parameters in header order, as `name=value`.
    params: Vec<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging_with_default("warn");
    match cli.command {
        Command::Demo(a) => {
            let agent_bin = match a.agent_bin {
                Some(p) => p,
                None => std::env::current_exe()
                    .context("cannot locate this executable")?
                    .with_file_name("oomlens-agent"),
            };
            let cfg = DemoConfig {
                nodes: a.nodes,
                gpus: a.gpus,
                duration_s: a.duration_s,
                speed: a.speed,
                seed: a.seed,
                agent_bin,
                keep_dir: a.keep,
                mix: None,
            };
            let outcome = match run_demo(cfg, stop_on_signal()).await {
                Ok(o) => o,
                Err(DemoError::Interrupted) => {
                    eprintln!("interrupted: every process the demo started has been stopped");
                    std::process::exit(130);
                }
                Err(e) => return Err(e.into()),
            };
            print_demo_outcome(&outcome, &mut std::io::stdout()).context("cannot print the outcome")?;
            Ok(())
        }
        Command::Accuracy(a) => run_accuracy(a).await,
        Command::Completions { shell } => {
            write_completions(shell, Cli::command(), "oomlens", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { out_dir } => write_man(Cli::command(), out_dir.as_deref(), &mut std::io::stdout())
            .context("cannot write the man pages"),
        Command::Sql(a) => {
            oomlens_collector::report::run_sql_command(&a.ch, a.list, a.name.as_deref(), &a.params).await
        }
    }
}

async fn run_accuracy(a: AccuracyArgs) -> anyhow::Result<()> {
    use oomlens_collector::attribution::{ConfusionMatrix, accuracy};

    let agent_bin = match a.agent_bin {
        Some(p) => p,
        None => {
            std::env::current_exe().context("cannot locate this executable")?.with_file_name("oomlens-agent")
        }
    };
    let cfg = DemoConfig {
        nodes: a.nodes,
        gpus: a.gpus,
        duration_s: a.duration_s,
        speed: a.speed,
        seed: a.seed,
        agent_bin,
        keep_dir: None,
        mix: Some(accuracy::ACCURACY_MIX.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()),
    };
    let outcome = match run_demo(cfg, stop_on_signal()).await {
        Ok(o) => o,
        Err(DemoError::Interrupted) => {
            eprintln!("interrupted: every process the harness started has been stopped");
            std::process::exit(130);
        }
        Err(e) => return Err(e.into()),
    };
    let matrix = ConfusionMatrix::from_events(&outcome.attributions);
    println!(
        "{} labelled OOM events from {} nodes x {} GPUs x {} simulated s (agents -> QUIC -> collector -> ClickHouse -> oom_features -> rules):",
        matrix.total(),
        a.nodes,
        a.gpus,
        a.duration_s
    );
    print!("{matrix}");
    for case in accuracy::adversarial_cases(&outcome.attributions) {
        println!("adversarial: {case}");
    }
    let macro_acc = matrix.macro_accuracy().unwrap_or(0.0);
    if macro_acc < a.min_macro {
        eprintln!("macro-averaged accuracy {:.1} % is below {:.1} %", macro_acc * 100.0, a.min_macro * 100.0);
        std::process::exit(1);
    }
    Ok(())
}
