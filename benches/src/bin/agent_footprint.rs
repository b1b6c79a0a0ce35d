//! `cargo run --release -p oomlens-benches --bin agent-footprint`: the agent's CPU and memory
//! footprint. Runs the real `oomlens-agent` (release) as a child process on the
//! simulator — 8 GPUs, 16 processes per GPU (plus the simulated jobs), sampled at 10 Hz in real
//! time (speed 1) with the flight recorder on — against an in-process collector and a throw-away
//! ClickHouse, and measures from `/proc/<pid>`:
//!
//! * CPU: `utime + stime` of `/proc/<pid>/stat` (every thread) over wall time, after a warm-up,
//!   as a percentage of one core;
//! * memory: peak RSS (`VmHWM` of `/proc/<pid>/status`) and the RSS at the end (`VmRSS`).
//!
//! Baselines measured in the same run: an idle `sleep` process (the measurement floor) and the same
//! agent at the old setting (1 Hz, flight recorder off). Prints a Markdown table.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use oomlens_agent::config::{AgentConfig, SourceKind};
use oomlens_collector::clickhouse::ChConfig;
use oomlens_collector::config::CollectorConfig;
use oomlens_collector::ingest::certs::{DevPki, mint_dev_pki};
use oomlens_collector::service;
use oomlens_devkit::devch::DevClickHouse;

/// Measures the agent's CPU and peak RSS on the simulator.
#[derive(Debug, Parser)]
struct Args {
    /// Seconds measured per configuration (after the warm-up).
    #[arg(long, default_value_t = 60)]
    duration_s: u64,
    /// Seconds after start-up that are not measured (TLS handshake, first allocations).
    #[arg(long, default_value_t = 5)]
    warmup_s: u64,
    /// Simulated GPUs.
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    /// Extra always-on processes per GPU (the simulated jobs add 1–3 more).
    #[arg(long, default_value_t = 16)]
    procs_per_gpu: u32,
    /// Flight recorder window, s. The 10 Hz run is warmed up for this long on top of `--warmup-s`,
    /// so that its rings are full when measuring.
    #[arg(long, default_value_t = 120)]
    window_s: u64,
    /// Fast sampling interval, ms (10 Hz = 100).
    #[arg(long, default_value_t = 100)]
    fast_interval_ms: u64,
    /// Simulated seconds per real second (1 = real time, as deployed). Higher values fill the
    /// rings and reach the OOMs sooner, for quick comparisons; the CPU figure is then not the
    /// deployed one.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Simulate healthy jobs only (no OOM, so no flushed windows): the recorder's steady state.
    #[arg(long)]
    healthy_only: bool,
    /// Only the 10 Hz run, no baselines.
    #[arg(long)]
    no_baselines: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Measured {
    name: String,
    wall_s: f64,
    cpu_pct_of_core: f64,
    peak_rss_kib: u64,
    end_rss_kib: u64,
    threads: u64,
    gpu_samples_sent: Option<u64>,
    process_samples_sent: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let agent = oomlens_benches::workspace::sibling_binary("oomlens-agent", "oomlens-agent")?;
    let dir = tempfile::Builder::new().prefix("oomlens-footprint-").tempdir()?;
    let ch = DevClickHouse::start().context("cannot start ClickHouse (is clickhouse-server installed?)")?;
    let pki = mint_dev_pki(dir.path(), &["localhost".to_owned()], "bench", &["bench-node".to_owned()], 2)?;
    let rt = tokio::runtime::Runtime::new()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let collector = rt.block_on(service::start(collector_config(&pki, &ch.url())?, stop_rx))?;
    eprintln!("collector on {}, ClickHouse at {}", collector.addr, ch.url());

    let clk_tck = clock_ticks_per_second();
    let mut results = Vec::new();
    if !args.no_baselines {
        let sleep = Command::new("sleep").arg((args.warmup_s + args.duration_s + 30).to_string()).spawn()?;
        results.push(measure("idle `sleep` process (floor)", sleep, &args, args.warmup_s, clk_tck, None)?);
        let old = agent_config(&pki, collector.addr, &args, false, dir.path())?;
        results.push(run_agent(
            &agent,
            dir.path(),
            "agent, 1 Hz, recorder off (old setting)",
            &old,
            &args,
            args.warmup_s,
            clk_tck,
        )?);
    }
    let cfg = agent_config(&pki, collector.addr, &args, true, dir.path())?;
    let name = format!("agent, {} Hz, flight recorder on", 1000 / args.fast_interval_ms.max(1));
    let fill_s = (args.window_s as f64 / args.speed.max(1e-3)).ceil() as u64;
    results.push(run_agent(&agent, dir.path(), &name, &cfg, &args, args.warmup_s + fill_s, clk_tck)?);

    let _ = stop_tx.send(true);
    rt.block_on(collector.shutdown());

    println!(
        "\n{} GPUs × {} extra processes per GPU (+ the simulated jobs), {} s measured after {} s warm-up \
         (+ the {} s window for the flight recorder run)\n",
        args.gpus, args.procs_per_gpu, args.duration_s, args.warmup_s, args.window_s
    );
    println!(
        "| run | CPU, % of one core | peak RSS (VmHWM) | RSS at end | threads | GPU / process samples sent |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for r in &results {
        let sent = match (r.gpu_samples_sent, r.process_samples_sent) {
            (Some(g), Some(p)) => format!("{g} / {p}"),
            _ => "–".to_owned(),
        };
        println!(
            "| {} | {:.3} % | {:.1} MiB | {:.1} MiB | {} | {sent} |",
            r.name,
            r.cpu_pct_of_core,
            r.peak_rss_kib as f64 / 1024.0,
            r.end_rss_kib as f64 / 1024.0,
            r.threads
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)?)?;
    }
    Ok(())
}

fn collector_config(pki: &DevPki, ch_url: &str) -> anyhow::Result<oomlens_collector::config::ValidConfig> {
    let listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let ch = ChConfig { url: ch_url.to_owned(), ..ChConfig::default() };
    Ok(CollectorConfig::with_dev_pki(pki, listen, "footprint", ch).finish()?)
}

fn agent_config(
    pki: &DevPki,
    collector: SocketAddr,
    args: &Args,
    recorder: bool,
    dir: &Path,
) -> anyhow::Result<oomlens_agent::config::ValidConfig> {
    let files = &pki.agents.first().context("no agent certificate minted")?.1;
    let mut cfg = AgentConfig::default();
    cfg.agent.node = "bench-node".into();
    cfg.agent.cluster = "bench".into();
    cfg.source.kind = SourceKind::Simulator;
    cfg.source.speed = args.speed;
    cfg.source.interval_ms = 1000;
    cfg.recorder.enabled = recorder;
    cfg.recorder.fast_interval_ms = args.fast_interval_ms;
    cfg.recorder.window_s = args.window_s;
    // Everything else as deployed (hook socket on, in the temporary directory).
    cfg.hook.path = dir.join(if recorder { "hook-fast.sock" } else { "hook-old.sock" });
    cfg.simulator.gpus = args.gpus;
    cfg.simulator.extra_processes_per_gpu = args.procs_per_gpu;
    if args.healthy_only {
        cfg.simulator.mix = oomlens_agent::source::sim::ScenarioMix::healthy_only();
    }
    cfg.uplink.to_collector(&collector.to_string(), "localhost", &pki.ca, &files.cert, &files.key);
    Ok(cfg.finish()?)
}

fn run_agent(
    bin: &Path,
    dir: &Path,
    name: &str,
    cfg: &AgentConfig,
    args: &Args,
    warmup_s: u64,
    clk_tck: f64,
) -> anyhow::Result<Measured> {
    let slug: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let config = dir.join(format!("{slug}.toml"));
    std::fs::write(&config, toml::to_string(cfg)?)?;
    let report = dir.join(format!("{slug}.json"));
    let log = std::fs::File::create(dir.join(format!("{slug}.log")))?;
    let child = Command::new(bin)
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--report")
        .arg(&report)
        .env("OOMLENS_LOG", "warn")
        .env_remove("OOMLENS_AGENT_CONFIG")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    measure(name, child, args, warmup_s, clk_tck, Some(&report))
}

/// Measures `child` over the configured window, then stops it with SIGINT and waits.
fn measure(
    name: &str,
    mut child: Child,
    args: &Args,
    warmup_s: u64,
    clk_tck: f64,
    report: Option<&Path>,
) -> anyhow::Result<Measured> {
    let pid = child.id();
    eprintln!("measuring {name} (pid {pid}): {warmup_s} s warm-up, {} s measured …", args.duration_s);
    std::thread::sleep(Duration::from_secs(warmup_s));
    let (t0, c0) = (Instant::now(), cpu_ticks(pid)?);
    std::thread::sleep(Duration::from_secs(args.duration_s));
    let (t1, c1) = (Instant::now(), cpu_ticks(pid)?);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let (peak, end, threads) = (field("VmHWM:"), field("VmRSS:"), field("Threads:"));
    let wall = (t1 - t0).as_secs_f64();
    let _ = Command::new("kill").arg("-INT").arg(pid.to_string()).status();
    let exit = wait_timeout(&mut child, Duration::from_secs(60))?;
    let totals = match report {
        Some(path) => {
            if !exit {
                bail!("{name}: the agent did not exit cleanly after SIGINT");
            }
            let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
            (v["gpu_samples"].as_u64(), v["process_samples"].as_u64())
        }
        None => (None, None),
    };
    Ok(Measured {
        name: name.to_owned(),
        wall_s: wall,
        cpu_pct_of_core: (c1 - c0) as f64 / clk_tck / wall * 100.0,
        peak_rss_kib: peak,
        end_rss_kib: end,
        threads,
        gpu_samples_sent: totals.0,
        process_samples_sent: totals.1,
    })
}

/// Waits for `child`; kills it after `timeout`. True when it exited with success (or a signal we sent).
fn wait_timeout(child: &mut Child, timeout: Duration) -> anyhow::Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s.success() || s.code().is_none());
        }
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `utime + stime` of every thread of `pid`, in clock ticks (fields 14 and 15 of `/proc/<pid>/stat`).
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may contain spaces: split after it.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("malformed /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14 → index 11, stime → 12.
    let num =
        |i: usize| -> anyhow::Result<u64> { Ok(fields.get(i).context("short /proc/<pid>/stat")?.parse()?) };
    Ok(num(11)? + num(12)?)
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}
