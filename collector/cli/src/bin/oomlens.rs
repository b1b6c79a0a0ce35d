//! `oomlens`: the human CLI — the demo and the built-in queries.

use std::path::PathBuf;

use std::io::Write as _;

use anyhow::Context as _;
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use oomlens_cli::demo::print_demo_outcome;
use oomlens_cli::demo::{DemoConfig, DemoError, run_demo};
use oomlens_cli::fit;
use oomlens_collector::cli::{ChArgs, write_completions, write_man};
use oomlens_schema::telemetry::{LogArgs, exit_status, init_logging_with, stop_on_signal};

/// oomlens: understand the out-of-memory failures of a GPU fleet.
#[derive(Debug, Parser)]
#[command(name = "oomlens", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a simulated fleet end to end (local ClickHouse, collector, agents) and show what landed.
    Demo(DemoArgs),
    /// Run a built-in query (see `oomlens sql --list`) and print its rows as TSV.
    Sql(Box<SqlArgs>),
    /// Measure attribution accuracy: a simulated fleet with labelled OOMs (every scenario) through
    /// the real pipeline, then the confusion matrix, per-scenario precision / recall and the
    /// adversarial cases; exits 1 below --min-macro.
    Accuracy(AccuracyArgs),
    /// Explain a pasted OOM message or a log offline (no ClickHouse, no agent): every failure in the
    /// files (stdin when none) parsed as the agent parses job and kernel logs, attributed from the
    /// message alone — verdict, confidence, the alternatives left open, the evidence, what would
    /// decide, the remedy. Exits 2 when no failure is found.
    Explain(ExplainArgs),
    /// Explain OOM events in the triage order (when → static → batch/sequence →
    /// contention/fragmentation → remedy) with the memory curve before each failure, the ranked
    /// neighbours and the remedy: one event by id, or those of a job, pod, node / GPU in a time range.
    Postmortem(Box<PostmortemArgs>),
    /// Live terminal view of the fleet: per node each GPU's memory bar, its live processes, and the
    /// recent OOMs, on the alternate screen with the header pinned, redrawn every --interval (q
    /// quits; arrows / PgUp / PgDn scroll; +/- interval; p pause); --once prints one frame, and a
    /// stdout that is not a terminal gets plain frames one after another.
    Top(Box<TopArgs>),
    /// Will this job fit? The memory of one GPU of a transformer job from its shape — weights,
    /// gradients, optimizer state, activations, attention, context and allocator slack — the
    /// predicted peak against the GPU, the headroom, the largest micro-batch and sequence that
    /// fit; with --calibrate corrected by the fleet's OOMs of the same shape. Exits 0 when it
    /// fits, 1 when it does not, 2 on bad input (docs/fit.md).
    Fit(Box<FitArgs>),
    /// Fleet reports (`oomlens report capacity`).
    #[command(subcommand)]
    Report(ReportCommand),
    /// Store the attribution of every settled OOM event of a time range that has none yet
    /// (`oom_attributions`: features, scenario, top neighbours), as the collector's attributor
    /// does periodically: a backfill after an upgrade, or with --force a recompute.
    Attribute(Box<AttributeArgs>),
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
struct ExplainArgs {
    /// Files to read (job logs, a pasted traceback, saved dmesg output); stdin when none.
    files: Vec<PathBuf>,
    /// JSON Lines: one document per failure, with the fields of `oomlens postmortem --json`.
    #[arg(long)]
    json: bool,
    /// Line framing: auto (detect), plain, cri (Kubernetes container logs), docker (json-file).
    #[arg(long, default_value = "auto")]
    format: oomlens_parse::LineFormat,
}

#[derive(Debug, Args)]
struct FitArgs {
    /// Parameters of the whole model: a count with an optional K / M / B / T suffix (7B, 6.74B,
    /// 350M, 6738415616). Overrides the count of --model-config or the dimensions; alone, the
    /// activations use the dimensions of the nearest reference model (the report says which).
    #[arg(long, value_parser = fit::parse_count, help_heading = "Model")]
    params: Option<u64>,
    /// A Hugging Face config.json of the model (hidden_size, num_hidden_layers,
    /// num_attention_heads, num_key_value_heads, vocab_size, intermediate_size,
    /// max_position_embeddings, tie_word_embeddings, torch_dtype; or GPT-2's n_embd, n_layer,
    /// n_head): the parameter count and the dimensions. The dimension flags override its values.
    #[arg(long, value_name = "CONFIG_JSON", help_heading = "Model")]
    model_config: Option<PathBuf>,
    /// Hidden size (with --layers and --heads: the architecture without --model-config).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Model")]
    hidden: Option<u64>,
    /// Transformer layers.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Model")]
    layers: Option<u64>,
    /// Attention (query) heads.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Model")]
    heads: Option<u64>,
    /// Key/value heads for grouped-query attention [default: --heads].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Model")]
    kv_heads: Option<u64>,
    /// Vocabulary size [default: the config's, else 32000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Model")]
    vocab: Option<u64>,
    /// MLP hidden size: given, the MLP is Llama-style (gate, up and down matrices); without it
    /// GPT-style with 4 × hidden [default: the config's].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Model")]
    intermediate: Option<u64>,
    /// train (weights, gradients, optimizer state, activations) or inference (weights, KV cache,
    /// a working set).
    #[arg(long, value_enum, default_value = "train", help_heading = "Job")]
    mode: fit::Mode,
    /// Weight precision: fp32, bf16, fp16, fp8, int8, int4 (int8 / int4: inference only)
    /// [default: the config's torch_dtype, else bf16]. 16-bit and fp8 training is mixed
    /// precision (fp32 master weights in the optimizer state).
    #[arg(long, value_parser = fit::parse_precision, help_heading = "Job")]
    precision: Option<oomlens_schema::memory::Precision>,
    /// Optimizer: adamw, adam (12 B/param of state in mixed precision, 8 in fp32), sgd (with
    /// momentum: 8 / 4), adam8bit (6 / 2), none. Ignored for inference.
    #[arg(long, value_parser = fit::parse_optimizer, default_value = "adamw", help_heading = "Job")]
    optimizer: oomlens_schema::memory::Optimizer,
    /// ZeRO stage: 1 shards the optimizer state over --dp, 2 also the gradients, 3 also the weights.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3), help_heading = "Job")]
    zero: u8,
    /// Tensor-parallel degree (weights, activations and heads split over it).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Job")]
    tp: u32,
    /// Pipeline-parallel degree (layers split over it; the first stage keeps --pp micro-batches
    /// in flight).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Job")]
    pp: u32,
    /// Data-parallel degree (what ZeRO shards over).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Job")]
    dp: u32,
    /// Micro-batch per GPU, in sequences.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Job")]
    batch: u64,
    /// Sequence length, in tokens (inference: prompt + generated tokens in the KV cache).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Job")]
    seq: u64,
    /// Activation recomputation: none, selective (attention scores recomputed) or full (only each
    /// layer's input kept); the flag alone means full.
    #[arg(
        long,
        value_enum,
        num_args = 0..=1,
        default_value = "none",
        default_missing_value = "full",
        help_heading = "Job"
    )]
    checkpointing: fit::Checkpointing,
    /// FlashAttention (or another fused attention): no s × s score matrices are kept.
    #[arg(long, help_heading = "Job")]
    flash_attention: bool,
    /// Tensor parallelism without sequence parallelism (the norm and dropout activations are
    /// then replicated on every TP rank).
    #[arg(long, help_heading = "Job")]
    no_sequence_parallel: bool,
    /// Share of the caching allocator's reserved memory lost to slack and fragmentation, percent.
    #[arg(
        long,
        default_value_t = fit::DEFAULT_SLACK_PCT,
        value_parser = clap::value_parser!(u32).range(0..=90),
        help_heading = "Job"
    )]
    slack_pct: u32,
    /// The GPU model, e.g. "H100 80GB", H100-80GB, "NVIDIA A100-SXM4-40GB", "RTX 4090" (an
    /// unknown name lists the known ones).
    #[arg(long, help_heading = "GPU")]
    gpu: Option<String>,
    /// The GPU's usable memory instead of a model: 80GiB, 24GB (decimal), 81559MiB.
    #[arg(long, value_parser = fit::parse_bytes, conflicts_with = "gpu", help_heading = "GPU")]
    gpu_memory: Option<u64>,
    /// Correct the estimate by the fleet: the OOM events of the same shape stored in ClickHouse
    /// (oom_attributions) and their workloads' process samples (needs the ClickHouse flags).
    #[arg(long, help_heading = "Fleet calibration")]
    calibrate: bool,
    /// With --calibrate: observations at or after (a duration before now, RFC 3339 or epoch ms).
    #[arg(long, default_value = "30d", help_heading = "Fleet calibration")]
    since: String,
    /// With --calibrate: observations before.
    #[arg(long, default_value = "now", help_heading = "Fleet calibration")]
    until: String,
    /// With --calibrate: parameter counts within this many percent count as the same shape.
    #[arg(long, default_value_t = 3.0, help_heading = "Fleet calibration")]
    params_tolerance_pct: f64,
    #[command(flatten, next_help_heading = "ClickHouse (with --calibrate)")]
    ch: ChArgs,
    /// Print the report as one JSON document.
    #[arg(long, help_heading = "Output")]
    json: bool,
}

#[derive(Debug, Args)]
struct TopArgs {
    #[command(flatten)]
    ch: ChArgs,
    /// Print one frame (no escape codes) and exit.
    #[arg(long)]
    once: bool,
    /// Seconds between redraws.
    #[arg(long, default_value_t = 2.0)]
    interval: f64,
    /// The frame's time: `now`, a duration before now, an RFC 3339 time or epoch ms (replays the past).
    #[arg(long, default_value = "now")]
    at: String,
    /// Readings of this long before the frame's time count as live.
    #[arg(long, default_value = "30s")]
    live: String,
    /// OOMs of this long before the frame's time are listed.
    #[arg(long, default_value = "1h")]
    recent: String,
    /// Processes shown under each GPU.
    #[arg(long, default_value_t = 3)]
    procs: usize,
    /// OOMs listed.
    #[arg(long, default_value_t = 10)]
    max_ooms: usize,
    /// Only this cluster.
    #[arg(long = "cluster-name")]
    cluster_name: Option<String>,
    /// Only this node (the agent certificate's CN).
    #[arg(long)]
    node: Option<String>,
}

#[derive(Debug, Subcommand)]
enum ReportCommand {
    /// Headroom (p50/p95/p99/max of used/total, time at or above 90 %), OOM counts and rates per
    /// attributed scenario, the workloads closest to the edge, the most frequent noisy neighbours,
    /// the co-scheduling pairs that precede OOMs and the code holding the most memory at the OOMs
    /// (from the hook's allocator summaries).
    Capacity(Box<CapacityArgs>),
}

#[derive(Debug, Args)]
struct CapacityArgs {
    #[command(flatten)]
    ch: ChArgs,
    /// Window start: a duration before now (7d, 2h), an RFC 3339 time or epoch ms.
    #[arg(long, default_value = "7d")]
    since: String,
    /// Window end: `now`, a duration before now, an RFC 3339 time or epoch ms.
    #[arg(long, default_value = "now")]
    until: String,
    /// Group by cluster, gpu_model, node, namespace or workload.
    #[arg(long, default_value = "cluster")]
    by: String,
    /// Attribution look-back before each failure.
    #[arg(long, default_value = "60s")]
    window: String,
    /// Length of the ranked lists.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// GPU-days a group must have sampled before its OOMs are shown as a rate per GPU-day (below
    /// that, the count only: a rate from minutes of data would be extrapolation).
    #[arg(long, default_value_t = oomlens_cli::capacity::MIN_GPU_DAYS_FOR_RATE)]
    min_gpu_days: f64,
    /// Print the report as one JSON document.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML page (inline SVG charts) to this file.
    #[arg(long)]
    html: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct AttributeArgs {
    #[command(flatten)]
    ch: ChArgs,
    /// Events at or after: a duration before now (7d, 2h), an RFC 3339 time or epoch ms
    /// [default: all stored events].
    #[arg(long)]
    since: Option<String>,
    /// Events before: `now`, a duration before now, an RFC 3339 time or epoch ms.
    #[arg(long, default_value = "now")]
    until: String,
    /// Only events that failed, and arrived, at least this long ago [default: attribution.settle_ms].
    #[arg(long)]
    settle: Option<String>,
    /// Look-back before each failure [default: attribution.window_ms].
    #[arg(long)]
    window: Option<String>,
    /// Most events per chunk [default: attribution.chunk_events].
    #[arg(long)]
    chunk_events: Option<usize>,
    /// Longest time span of a chunk [default: attribution.chunk_span_ms].
    #[arg(long)]
    chunk_span: Option<String>,
    /// Re-attribute events that are stored already (their rows are replaced).
    #[arg(long)]
    force: bool,
    /// Print the outcome as one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct PostmortemArgs {
    #[command(flatten)]
    ch: ChArgs,
    /// The event id (as `oomlens sql oom_events` lists it).
    event_id: Option<u64>,
    /// Only events of this cluster.
    #[arg(long = "cluster-name")]
    cluster_name: Option<String>,
    /// Only events of this node.
    #[arg(long)]
    node: Option<String>,
    /// Only events of this GPU (with --node).
    #[arg(long, requires = "node")]
    gpu: Option<u32>,
    /// Only events of this job (workload).
    #[arg(long)]
    job: Option<String>,
    /// Only events of this pod (the `pod` label).
    #[arg(long)]
    pod: Option<String>,
    /// Events at or after: a duration before now (7d, 2h, 30m), an RFC 3339 time or epoch ms
    /// [default: all time with an event id, else 7d].
    #[arg(long)]
    since: Option<String>,
    /// Events before: `now`, a duration before now, an RFC 3339 time or epoch ms.
    #[arg(long, default_value = "now")]
    until: String,
    /// Attribution look-back before each failure (process samples read for features, neighbours).
    #[arg(long, default_value = "60s")]
    window: String,
    /// Length of the memory curve before each failure (downsampled to at most 120 points).
    #[arg(long, default_value = "10m")]
    curve: String,
    /// Neighbours per event.
    #[arg(long, default_value_t = 5)]
    top: u32,
    /// At most this many events (newest first).
    #[arg(long, default_value_t = 20)]
    max_events: u64,
    /// Sparkline width in columns.
    #[arg(long, default_value_t = 60)]
    width: usize,
    /// JSON Lines: one JSON document per event per line.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML page (inline SVG charts) to this file.
    #[arg(long)]
    html: Option<PathBuf>,
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

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging_with(cli.log.log_format, "warn");
    exit_status(run(cli))
}

#[tokio::main]
async fn run(cli: Cli) -> anyhow::Result<()> {
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
        Command::Explain(a) => {
            let mut out = std::io::stdout().lock();
            let found = match oomlens_cli::explain::run(&a.files, a.format, a.json, &mut out) {
                Ok(n) => n,
                // A reader closing the pipe (`| head`) ends the command quietly.
                Err(oomlens_cli::explain::ExplainError::Write(e))
                    if e.kind() == std::io::ErrorKind::BrokenPipe =>
                {
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            if found == 0 {
                eprintln!("no out-of-memory failure found in the input");
                std::process::exit(2);
            }
            Ok(())
        }
        Command::Postmortem(a) => run_postmortem(*a).await,
        Command::Top(a) => run_top(*a).await,
        Command::Fit(a) => {
            let code = match run_fit(*a).await {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(e) => {
                    eprintln!("oomlens fit: {e:#}");
                    2
                }
            };
            std::process::exit(code);
        }
        Command::Report(ReportCommand::Capacity(a)) => run_capacity(*a).await,
        Command::Attribute(a) => run_attribute(*a).await,
        Command::Completions { shell } => {
            write_completions(shell, Cli::command(), "oomlens", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { out_dir } => write_man(Cli::command(), out_dir.as_deref(), &mut std::io::stdout())
            .context("cannot write the man pages"),
        Command::Sql(a) => {
            oomlens_cli::report::run_sql_command(&a.ch, a.list, a.name.as_deref(), &a.params).await
        }
    }
}

/// `oomlens fit`: whether the job fits (errors: bad input, or the fleet could not be read).
async fn run_fit(a: FitArgs) -> anyhow::Result<bool> {
    use oomlens_cli::fit::calibrate::{self, ShapeQuery};
    use oomlens_cli::fit::report::FitReport;
    use oomlens_cli::fit::{Dims, Job, Mode, ParamsSource, resolve_arch, resolve_gpu};
    use oomlens_cli::timearg::{Window, now_ms, parse_window};
    use oomlens_collector::clickhouse::Ch;
    use oomlens_schema::memory::{Optimizer, Precision};

    let dims = Dims {
        hidden: a.hidden,
        layers: a.layers,
        heads: a.heads,
        kv_heads: a.kv_heads,
        vocab: a.vocab,
        intermediate: a.intermediate,
    };
    let (arch, arch_source) = resolve_arch(a.params, a.model_config.as_deref(), dims)?;
    let gpu = resolve_gpu(a.gpu.as_deref(), a.gpu_memory)?;
    let (params, params_source) = match a.params {
        Some(p) => (p, ParamsSource::Given),
        None => (arch.params(), ParamsSource::Counted),
    };
    let optimizer = match a.mode {
        Mode::Train => a.optimizer,
        Mode::Inference => Optimizer::None,
    };
    if a.mode == Mode::Inference && (a.zero > 0 || a.checkpointing != fit::Checkpointing::None) {
        tracing::warn!("--zero and --checkpointing do not apply to inference: ignored");
    }
    let job = Job {
        mode: a.mode,
        params,
        params_source,
        precision: a.precision.or(arch.dtype).unwrap_or(Precision::Bf16),
        arch,
        arch_source,
        optimizer,
        zero_stage: if a.mode == Mode::Train { a.zero } else { 0 },
        tp: a.tp,
        pp: a.pp,
        dp: a.dp,
        batch: a.batch,
        seq: a.seq,
        checkpointing: if a.mode == Mode::Train { a.checkpointing } else { fit::Checkpointing::None },
        flash_attention: a.flash_attention,
        sequence_parallel: !a.no_sequence_parallel,
        slack_pct: a.slack_pct,
    };
    job.validate()?;
    let calibration = if a.calibrate {
        if !(a.params_tolerance_pct.is_finite() && (0.0..100.0).contains(&a.params_tolerance_pct)) {
            anyhow::bail!("--params-tolerance-pct must be between 0 and 100");
        }
        let Window { since_ms, until_ms } = parse_window(&a.since, &a.until, now_ms())?;
        let cfg = a.ch.clickhouse().context("ClickHouse settings")?;
        let ch = Ch::connect(&cfg).await.context("cannot connect to ClickHouse")?;
        let q = ShapeQuery { since_ms, until_ms, params_tolerance: a.params_tolerance_pct / 100.0 };
        let obs = calibrate::observe(ch.client(), &cfg.database, &job, &q)
            .await
            .context("cannot read the fleet's observations of the shape")?;
        Some(calibrate::calibrate(&obs, job.estimate().peak_bytes, &gpu))
    } else {
        None
    };
    let report = FitReport::build(job, gpu, calibration);
    let mut out = std::io::stdout().lock();
    let written = if a.json { report.write_json(&mut out) } else { report.write_text(&mut out) };
    match written {
        Ok(()) => {}
        // A reader closing the pipe (`| head`) does not change the answer.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(anyhow::Error::new(e).context("cannot write the report")),
    }
    Ok(report.fits)
}

async fn run_top(a: TopArgs) -> anyhow::Result<()> {
    use oomlens_cli::timearg::{now_ms, parse_duration_ms, parse_instant_ms};
    use oomlens_cli::top::{FrameQuery, fetch_frame, tui};
    use oomlens_collector::clickhouse::Ch;
    use std::io::IsTerminal as _;

    let live_ms = parse_duration_ms(&a.live).context("--live")?;
    let recent_ms = parse_duration_ms(&a.recent).context("--recent")?;
    if !(a.interval.is_finite() && a.interval > 0.0) {
        anyhow::bail!("--interval must be a positive number of seconds");
    }
    let follow_now = a.at.eq_ignore_ascii_case("now");
    let start_at = parse_instant_ms(&a.at, now_ms()).context("--at")?;
    let start_wall = now_ms();
    let once = a.once;
    let query = move || FrameQuery {
        // A past --at replays forward at wall-clock speed.
        at_ms: match (follow_now, once) {
            (true, _) => now_ms(),
            (false, true) => start_at,
            (false, false) => start_at.saturating_add(now_ms() - start_wall),
        },
        live_ms,
        recent_ms,
        max_ooms: a.max_ooms,
        cluster: a.cluster_name.clone().unwrap_or_default(),
        node: a.node.clone().unwrap_or_default(),
    };
    let cfg = a.ch.clickhouse().context("ClickHouse settings")?;
    let ch = Ch::connect(&cfg).await.context("cannot connect to ClickHouse")?;
    let interval = std::time::Duration::from_secs_f64(a.interval);
    if !a.once && std::io::stdout().is_terminal() {
        return tui::run(ch.client(), &cfg.database, interval, a.procs, query).await.context("oomlens top");
    }
    // One frame, or plain frames one after another into a pipe or file (like `top -b`).
    loop {
        let frame =
            fetch_frame(ch.client(), &cfg.database, &query()).await.context("cannot fetch the frame")?;
        let mut out = std::io::stdout().lock();
        frame.write(&mut out, a.procs).and_then(|()| out.flush()).context("cannot write")?;
        if a.once {
            return Ok(());
        }
        writeln!(out).context("cannot write")?;
        drop(out);
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

async fn run_attribute(a: AttributeArgs) -> anyhow::Result<()> {
    use indicatif::{ProgressBar, ProgressStyle};
    use oomlens_cli::timearg::{Window, now_ms, parse_duration_ms, parse_window};
    use oomlens_collector::analysis::store::{self, AttributeOptions};
    use oomlens_collector::clickhouse::Ch;

    let now = now_ms();
    let Window { since_ms, until_ms } = parse_window(a.since.as_deref().unwrap_or("0"), &a.until, now)?;
    let cfg = a.ch.collector_config().context("configuration")?;
    let defaults = cfg.attribution.settings();
    let duration = |v: &Option<String>, default: i64, flag: &'static str| -> anyhow::Result<i64> {
        v.as_deref().map_or(Ok(default), |s| parse_duration_ms(s).context(flag))
    };
    let opts = AttributeOptions {
        since_ms,
        until_ms,
        now_ms: now,
        settle_ms: duration(&a.settle, defaults.settle_ms, "--settle")?,
        window_ms: duration(&a.window, defaults.window_ms, "--window")?,
        chunk_events: a.chunk_events.unwrap_or(defaults.chunk_events),
        chunk_span_ms: duration(&a.chunk_span, defaults.chunk_span_ms, "--chunk-span")?,
        force: a.force,
    };
    if opts.chunk_events == 0 || opts.chunk_span_ms <= 0 {
        anyhow::bail!("--chunk-events and --chunk-span must be > 0");
    }
    let ch = Ch::connect(&cfg.clickhouse).await.context("cannot connect to ClickHouse")?;
    // Drawn only when stderr is a terminal.
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} events ({per_sec}, eta {eta})",
        )
        .context("progress bar template")?,
    );
    let started = std::time::Instant::now();
    let report =
        store::attribute_pending_with_progress(ch.client(), &cfg.clickhouse.database, &opts, &mut |p| {
            bar.set_length(p.total);
            bar.set_position(p.done);
        })
        .await;
    bar.finish_and_clear();
    let report = report.context("attribution failed (what was stored so far stays; run again to resume)")?;
    let secs = started.elapsed().as_secs_f64();
    let mut out = std::io::stdout().lock();
    if a.json {
        let doc = serde_json::json!({
            "pending": report.pending,
            "attributed": report.attributed,
            "chunks": report.chunks,
            "rescored": report.rescored,
            "seconds": secs,
        });
        writeln!(out, "{doc}").context("cannot write")?;
    } else {
        writeln!(
            out,
            "attributed {} of {} pending OOM events in {} chunks, {secs:.1} s ({:.0} events/s); \
             re-scored {} stored rows of an older rules version",
            report.attributed,
            report.pending,
            report.chunks,
            if secs > 0.0 { report.attributed as f64 / secs } else { 0.0 },
            report.rescored
        )
        .context("cannot write")?;
    }
    Ok(())
}

async fn run_capacity(a: CapacityArgs) -> anyhow::Result<()> {
    use oomlens_cli::capacity::{self, GroupBy};
    use oomlens_cli::timearg::{Window, now_ms, parse_duration_ms, parse_window};
    use oomlens_collector::clickhouse::Ch;

    let Window { since_ms, until_ms } = parse_window(&a.since, &a.until, now_ms())?;
    let by: GroupBy = a.by.parse().context("--by")?;
    let window_ms = parse_duration_ms(&a.window).context("--window")?;
    let cfg = a.ch.clickhouse().context("ClickHouse settings")?;
    let ch = Ch::connect(&cfg).await.context("cannot connect to ClickHouse")?;
    anyhow::ensure!(
        a.min_gpu_days.is_finite() && a.min_gpu_days >= 0.0,
        "--min-gpu-days must be a number of GPU-days, 0 or more (got {})",
        a.min_gpu_days
    );
    let opts = capacity::ReportOptions {
        window_ms,
        top: a.top,
        min_gpu_days: a.min_gpu_days,
        ..capacity::ReportOptions::new(by, since_ms, until_ms)
    };
    let report = capacity::build(ch.client(), &cfg.database, &opts)
        .await
        .context("cannot build the capacity report")?;
    if report.is_empty() && a.json {
        eprintln!("{}", report.empty_note());
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer(&mut out, &report).context("cannot write JSON")?;
        writeln!(out).context("cannot write")?;
    } else {
        report.write_text(&mut out).context("cannot write the report")?;
    }
    if let Some(path) = &a.html {
        let mut page = Vec::new();
        report.write_html(&mut page).context("cannot render HTML")?;
        std::fs::write(path, page).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

async fn run_postmortem(a: PostmortemArgs) -> anyhow::Result<()> {
    use oomlens_cli::postmortem::{self, Lookback, Selection};
    use oomlens_cli::timearg::{Window, now_ms, parse_duration_ms, parse_window};
    use oomlens_collector::clickhouse::Ch;

    // An event id alone searches all time; otherwise the last week.
    let since = a.since.as_deref().unwrap_or(if a.event_id.is_some() { "0" } else { "7d" });
    let Window { since_ms, until_ms } = parse_window(since, &a.until, now_ms())?;
    let lookback = Lookback {
        window_ms: parse_duration_ms(&a.window).context("--window")?,
        curve_ms: parse_duration_ms(&a.curve).context("--curve")?,
        top_n: a.top,
    };
    let sel = Selection {
        since_ms,
        until_ms,
        event_id: a.event_id,
        cluster: a.cluster_name,
        node: a.node,
        gpu_index: a.gpu,
        workload: a.job,
        pod: a.pod,
        max_events: a.max_events,
    };
    let cfg = a.ch.clickhouse().context("ClickHouse settings")?;
    let ch = Ch::connect(&cfg).await.context("cannot connect to ClickHouse")?;
    let client = ch.client();
    let found =
        postmortem::find_events(client, &cfg.database, &sel).await.context("cannot select the events")?;
    let mut reports = Vec::with_capacity(found.events.len());
    for ev in &found.events {
        if let Some(pm) = postmortem::build(client, &cfg.database, ev, lookback)
            .await
            .with_context(|| format!("cannot explain event {}", ev.event_id))?
        {
            reports.push(pm);
        }
    }
    let cut = found.cut_note(&sel);
    let mut out = std::io::stdout().lock();
    if let Some(note) = &cut {
        // JSON Lines stay one document per event: the note goes to stderr there.
        if a.json {
            eprintln!("{note}");
        } else {
            writeln!(out, "{note}\n").context("cannot write")?;
        }
    }
    for (i, pm) in reports.iter().enumerate() {
        if a.json {
            serde_json::to_writer(&mut out, &pm.to_json()).context("cannot write JSON")?;
            writeln!(out).context("cannot write")?;
        } else {
            if i > 0 {
                writeln!(out).context("cannot write")?;
            }
            pm.write_text(&mut out, a.width).context("cannot write the report")?;
        }
    }
    let none = postmortem::Found::none_note(&sel);
    if reports.is_empty() {
        if a.json {
            eprintln!("{none}");
        } else {
            writeln!(out, "{none}").context("cannot write")?;
        }
    }
    if let Some(path) = &a.html {
        let mut page = Vec::new();
        let heading = if reports.is_empty() { none } else { cut.unwrap_or_else(|| sel.describe()) };
        postmortem::write_html(&reports, &heading, &mut page).context("cannot render HTML")?;
        std::fs::write(path, page).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if reports.is_empty() {
        std::process::exit(2);
    }
    Ok(())
}

async fn run_accuracy(a: AccuracyArgs) -> anyhow::Result<()> {
    use oomlens_collector::analysis::{ConfusionMatrix, accuracy};

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
