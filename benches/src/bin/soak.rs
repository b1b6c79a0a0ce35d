//! `cargo run --release -p oomlens-benches --bin soak`: a sustained soak of the whole pipeline
//! with faults injected at random, ending in an exact accounting.
//!
//! A throw-away ClickHouse, the real `oomlens-collector` and `--agents` real `oomlens-agent`
//! processes playing the simulator (`--gpus` each) for `--simulated-s` simulated seconds at
//! `--speed`, each agent with its disk spool on its own small tmpfs. Every `--fault-every-s`
//! (on average; seeded) one fault, at random:
//!
//! * `collector` — `kill -9` of the collector, restarted 1–5 s later;
//! * `clickhouse` — `SIGKILL` of ClickHouse, restarted 3–15 s later on the same data;
//! * `agent` — `kill -9` of an agent (its counters scraped just before), restarted 0.5–2 s later
//!   on the same spool: a new simulated run after the killed one (the journal and the spool carry
//!   what the killed run had detected and spooled);
//! * `disk_full` — an agent's spool filesystem filled to the last byte for 5–20 s (skipped where
//!   tmpfs cannot be mounted). An agent is not killed while its disk is full: batches the disk
//!   refused wait in memory, which a `kill -9` loses by definition.
//!
//! The flight recorder is off so that every sample has one expected row. At the end every agent
//! drains and exits, and the simulator is replayed for every run over the seconds it sampled (at
//! least what its counters said before a kill, more if later seconds of it are stored): the rows
//! produced. Against ClickHouse (raw rows, before merges): stored (distinct keys), duplicated (raw −
//! distinct), lost (produced − stored: samples only — the exit status is 1 if an event is lost or a
//! stored row was never produced), and the agents' own count of dropped samples.

use std::collections::{BTreeSet, HashSet};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use oomlens_agent::config::{AgentConfig, SourceKind};
use oomlens_agent::source::Source;
use oomlens_agent::source::sim::{SimConfig, Simulator};
use oomlens_collector::clickhouse::ChConfig;
use oomlens_collector::config::CollectorConfig;
use oomlens_collector::ingest::certs::{DevPki, mint_dev_pki};
use oomlens_devkit::devch::DevClickHouse;
use rand::{Rng as _, SeedableRng as _};

/// A soak of the pipeline with random faults.
#[derive(Debug, Parser)]
struct Args {
    /// Agents (one process each).
    #[arg(long, default_value_t = 4)]
    agents: usize,
    /// Simulated GPUs per agent.
    #[arg(long, default_value_t = 4)]
    gpus: u32,
    /// Simulated seconds each agent plays (over all its runs).
    #[arg(long, default_value_t = 1800)]
    simulated_s: u64,
    /// Simulated seconds per real second.
    #[arg(long, default_value_t = 10.0)]
    speed: f64,
    /// Mean real seconds between faults.
    #[arg(long, default_value_t = 10.0)]
    fault_every_s: f64,
    /// Seed of the fault schedule and of the simulators.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Size of each agent's spool filesystem (tmpfs), bytes.
    #[arg(long, default_value_t = 8 << 20)]
    spool_fs_bytes: u64,
    /// Write the accounting as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

const START_MS: i64 = 1_767_225_600_000;
/// Simulated gap between an agent's runs, so their rows never share a timestamp.
const RUN_GAP_MS: i64 = 3_600_000;

/// One simulated run of one agent.
#[derive(Debug, Clone, serde::Serialize)]
struct Run {
    start_ms: i64,
    /// Seconds it sampled (its duration when it ended cleanly; counted before a kill).
    seconds: u64,
    killed: bool,
    /// Samples the agent dropped (its report at a clean end, its counters before a kill).
    dropped_samples: u64,
}

struct Agent {
    node: String,
    seed: u64,
    fs: Option<TmpFs>,
    spool: PathBuf,
    telemetry: SocketAddr,
    runs: Vec<Run>,
    child: Option<Child>,
    started: Instant,
    remaining_s: u64,
    restart_at: Option<Instant>,
    disk_full_until: Option<Instant>,
}

/// A tmpfs mounted on a directory (unmounted on drop).
struct TmpFs {
    dir: PathBuf,
}

impl TmpFs {
    fn mount(dir: &Path, bytes: u64) -> Option<TmpFs> {
        std::fs::create_dir_all(dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| TmpFs { dir: dir.to_owned() })
    }

    fn filler(&self) -> PathBuf {
        self.dir.join("filler")
    }

    /// Writes zeros until the filesystem is full.
    fn fill(&self) -> std::io::Result<u64> {
        let mut f = std::fs::File::create(self.filler())?;
        let chunk = vec![0u8; 64 << 10];
        let mut n = 0;
        loop {
            match f.write(&chunk) {
                Ok(0) => return Ok(n),
                Ok(k) => n += k as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return Ok(n),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for TmpFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

struct Collector {
    bin: PathBuf,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    restart_at: Option<Instant>,
}

impl Collector {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(&self.bin)
            .args(["serve", "--config"])
            .arg(&self.config)
            .env("OOMLENS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("cannot start the collector")?;
        self.child = Some(child);
        Ok(())
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port(udp: bool) -> anyhow::Result<u16> {
    Ok(if udp {
        std::net::UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port()
    } else {
        std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()
    })
}

fn sim_config(args: &Args, seed: u64) -> SimConfig {
    SimConfig { gpus: args.gpus, seed, ..SimConfig::default() }
}

fn agent_config(
    args: &Args,
    pki: &DevPki,
    a: &Agent,
    collector: SocketAddr,
    run: &Run,
) -> anyhow::Result<oomlens_agent::config::ValidConfig> {
    let files = &pki.agents.iter().find(|(n, _)| *n == a.node).context("no certificate")?.1;
    let mut cfg = AgentConfig::default();
    cfg.agent.node = a.node.clone();
    cfg.agent.cluster = "soak".into();
    cfg.source.kind = SourceKind::Simulator;
    cfg.source.interval_ms = 1000;
    cfg.source.speed = args.speed;
    cfg.source.start_ms = run.start_ms;
    cfg.source.duration_s = a.remaining_s;
    cfg.recorder.enabled = false;
    cfg.hook.enabled = false;
    cfg.simulator = sim_config(args, a.seed);
    cfg.spool.dir = Some(a.spool.clone());
    cfg.spool.max_bytes = Some(1 << 30);
    cfg.spool.memory_fallback_bytes = 4 << 20;
    cfg.telemetry.listen = Some(a.telemetry);
    cfg.uplink.to_collector(&collector.to_string(), "localhost", &pki.ca, &files.cert, &files.key);
    cfg.uplink.backoff_max_ms = 1000;
    cfg.uplink.drain_timeout_ms = 600_000;
    Ok(cfg.finish()?)
}

fn spawn_agent(
    bin: &Path,
    dir: &Path,
    a: &mut Agent,
    cfg: &oomlens_agent::config::ValidConfig,
) -> anyhow::Result<()> {
    let k = a.runs.len();
    let config = dir.join(format!("{}-{k}.toml", a.node));
    std::fs::write(&config, toml::to_string(cfg)?)?;
    let log = std::fs::File::create(dir.join(format!("{}-{k}.log", a.node)))?;
    let child = Command::new(bin)
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--report")
        .arg(dir.join(format!("{}-{k}.json", a.node)))
        .env("OOMLENS_LOG", "warn")
        .env_remove("OOMLENS_AGENT_CONFIG")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("cannot start an agent")?;
    a.child = Some(child);
    a.started = Instant::now();
    Ok(())
}

fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    use std::io::Read as _;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

fn metric_sum(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum::<f64>() as u64
}

/// The rows a run produced: GPU sample keys (gpu, ts), process sample keys (gpu, pid, ts), event ids.
type Produced = (HashSet<(u32, i64)>, HashSet<(u32, u32, i64)>, BTreeSet<u64>);

fn replay(node: &str, cfg: SimConfig, run: &Run, out: &mut Produced) -> anyhow::Result<()> {
    let mut sim = Simulator::new(node, cfg, run.start_ms)?;
    for k in 0..run.seconds as i64 {
        let r = sim.sample(run.start_ms + k * 1000);
        out.0.extend(r.gpu_samples.iter().map(|g| (g.gpu_index, g.ts_ms)));
        out.1.extend(r.process_samples.iter().map(|p| (p.gpu_index, p.pid, p.ts_ms)));
        out.2.extend(r.events.iter().map(|e| e.event_id));
    }
    Ok(())
}

#[derive(Debug, Default, serde::Serialize)]
struct Table {
    produced: u64,
    stored: u64,
    duplicated: u64,
    lost: u64,
    never_produced: u64,
}

#[derive(Debug, Default, serde::Serialize)]
struct Accounting {
    gpu_samples: Table,
    process_samples: Table,
    oom_events: Table,
    agent_reported_dropped_samples: u64,
    faults: std::collections::BTreeMap<String, u64>,
    disk_full_windows_skipped: bool,
    runs: Vec<(String, Vec<Run>)>,
    wall_s: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let t0 = Instant::now();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let agent_bin = oomlens_benches::workspace::sibling_binary("oomlens-agent", "oomlens-agent")?;
    let collector_bin = oomlens_benches::workspace::sibling_binary("oomlens-collector", "oomlens-collector")?;
    let dir = tempfile::Builder::new().prefix("oomlens-soak-").tempdir()?;
    let mut ch =
        DevClickHouse::start().context("cannot start ClickHouse (is clickhouse-server installed?)")?;
    let nodes: Vec<String> = (0..args.agents).map(|i| format!("soak-node-{i}")).collect();
    let pki = mint_dev_pki(dir.path(), &["localhost".to_owned()], "soak", &nodes, 2)?;

    let quic = SocketAddr::from(([127, 0, 0, 1], free_port(true)?));
    let retention = oomlens_schema::ddl::Retention { samples_days: 0, events_days: 0 };
    let mut ccfg = CollectorConfig::with_dev_pki(
        &pki,
        quic,
        "soak",
        ChConfig { url: ch.url(), retention, ..ChConfig::default() },
    );
    ccfg.attribution.enabled = false;
    let ccfg = ccfg.finish()?;
    let collector_config = dir.path().join("collector.toml");
    std::fs::write(&collector_config, toml::to_string(&ccfg)?)?;
    let mut collector = Collector {
        bin: collector_bin,
        config: collector_config,
        log: dir.path().join("collector.log"),
        child: None,
        restart_at: None,
    };
    collector.spawn()?;

    let mut agents = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let root = dir.path().join(format!("{node}-fs"));
        let fs = TmpFs::mount(&root, args.spool_fs_bytes);
        std::fs::create_dir_all(&root)?;
        let mut a = Agent {
            node: node.clone(),
            seed: args.seed * 1000 + i as u64,
            spool: root.join("spool"),
            fs,
            telemetry: SocketAddr::from(([127, 0, 0, 1], free_port(false)?)),
            runs: Vec::new(),
            child: None,
            started: Instant::now(),
            remaining_s: args.simulated_s,
            restart_at: None,
            disk_full_until: None,
        };
        let run = Run { start_ms: START_MS, seconds: 0, killed: false, dropped_samples: 0 };
        let cfg = agent_config(&args, &pki, &a, quic, &run)?;
        spawn_agent(&agent_bin, dir.path(), &mut a, &cfg)?;
        a.runs.push(run);
        agents.push(a);
    }
    let disk_full_possible = agents.iter().all(|a| a.fs.is_some());
    if !disk_full_possible {
        eprintln!("cannot mount tmpfs (not root?): disk-full windows are skipped");
    }
    let mut acc = Accounting { disk_full_windows_skipped: !disk_full_possible, ..Accounting::default() };
    let mut ch_restart_at: Option<Instant> = None;
    let exp = |rng: &mut rand_chacha::ChaCha8Rng, mean: f64| -mean * (1.0 - rng.random::<f64>()).ln();
    let mut next_fault = Instant::now() + Duration::from_secs_f64(exp(&mut rng, args.fault_every_s));
    let sampling_ends = Instant::now() + Duration::from_secs_f64(args.simulated_s as f64 / args.speed);
    eprintln!(
        "soak: {} agents × {} GPUs, {} simulated s at {}×, a fault every {} s on average; in {}",
        args.agents,
        args.gpus,
        args.simulated_s,
        args.speed,
        args.fault_every_s,
        dir.path().display()
    );

    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = Instant::now();
        // Restarts and ends of disk-full windows that are due.
        if collector.restart_at.is_some_and(|t| t <= now) {
            collector.restart_at = None;
            collector.spawn()?;
        }
        if ch_restart_at.is_some_and(|t| t <= now) {
            ch_restart_at = None;
            ch.restart().context("cannot restart ClickHouse")?;
        }
        for a in &mut agents {
            if a.disk_full_until.is_some_and(|t| t <= now) {
                a.disk_full_until = None;
                if let Some(fs) = &a.fs {
                    let _ = std::fs::remove_file(fs.filler());
                }
            }
            if a.restart_at.is_some_and(|t| t <= now) {
                a.restart_at = None;
                let prev = a.runs.last().context("no run")?;
                let run = Run {
                    start_ms: prev.start_ms + prev.seconds as i64 * 1000 + RUN_GAP_MS,
                    seconds: 0,
                    killed: false,
                    dropped_samples: 0,
                };
                let cfg = agent_config(&args, &pki, a, quic, &run)?;
                spawn_agent(&agent_bin, dir.path(), a, &cfg)?;
                a.runs.push(run);
            }
            // A run that ended: it played its whole duration and drained.
            if let Some(c) = a.child.as_mut()
                && let Some(status) = c.try_wait()?
            {
                a.child = None;
                let k = a.runs.len() - 1;
                let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
                    dir.path().join(format!("{}-{k}.json", a.node)),
                )?)?;
                if !status.success() {
                    bail!("{} run {k} failed: {status} (log {}-{k}.log)", a.node, a.node);
                }
                let run = a.runs.last_mut().context("no run")?;
                run.seconds = a.remaining_s;
                run.dropped_samples = report["dropped_gpu_samples"].as_u64().unwrap_or(0)
                    + report["dropped_process_samples"].as_u64().unwrap_or(0);
                a.remaining_s = 0;
            }
        }
        let all_done =
            agents.iter().all(|a| a.remaining_s == 0 && a.child.is_none() && a.restart_at.is_none());
        if all_done {
            break;
        }
        // Faults while the agents sample; afterwards everything comes back and drains.
        if now >= sampling_ends {
            if collector.child.is_none() && collector.restart_at.is_none() {
                collector.spawn()?;
            }
            if collector.restart_at.take().is_some() {
                collector.spawn()?;
            }
            if ch_restart_at.take().is_some() {
                ch.restart()?;
            }
            if t0.elapsed() > Duration::from_secs_f64(args.simulated_s as f64 / args.speed + 900.0) {
                bail!("the agents did not drain within 15 minutes of the end; see {}", dir.path().display());
            }
            continue;
        }
        if now < next_fault {
            continue;
        }
        next_fault = now + Duration::from_secs_f64(exp(&mut rng, args.fault_every_s));
        let kinds = ["collector", "clickhouse", "agent", "disk_full"];
        let kind = kinds[rng.random_range(0..if disk_full_possible { 4 } else { 3 })];
        let done = match kind {
            "collector" if collector.child.is_some() => {
                collector.kill9();
                collector.restart_at = Some(now + Duration::from_secs_f64(rng.random_range(1.0..5.0)));
                true
            }
            "clickhouse" if ch_restart_at.is_none() => {
                ch.kill().context("cannot kill ClickHouse")?;
                ch_restart_at = Some(now + Duration::from_secs_f64(rng.random_range(3.0..15.0)));
                true
            }
            "agent" => {
                let candidates: Vec<usize> = (0..agents.len())
                    .filter(|&i| {
                        let a = &agents[i];
                        a.child.is_some()
                            && a.disk_full_until.is_none()
                            && a.started.elapsed() > Duration::from_secs(2)
                    })
                    .collect();
                match candidates.get(rng.random_range(0..candidates.len().max(1))) {
                    Some(&i) => {
                        let a = &mut agents[i];
                        let m = http_get(a.telemetry, "/metrics").unwrap_or_default();
                        let gpu = metric_sum(&m, "oomlens_agent_gpu_samples_total");
                        let dropped = metric_sum(&m, "oomlens_agent_dropped_rows_total");
                        if let Some(mut c) = a.child.take() {
                            let _ = c.kill();
                            let _ = c.wait();
                        }
                        let seconds = gpu / u64::from(args.gpus.max(1));
                        let run = a.runs.last_mut().context("no run")?;
                        run.seconds = seconds;
                        run.killed = true;
                        run.dropped_samples = dropped;
                        a.remaining_s = a.remaining_s.saturating_sub(seconds);
                        if a.remaining_s > 0 {
                            a.restart_at = Some(now + Duration::from_secs_f64(rng.random_range(0.5..2.0)));
                        }
                        true
                    }
                    None => false,
                }
            }
            "disk_full" => {
                let candidates: Vec<usize> = (0..agents.len())
                    .filter(|&i| agents[i].child.is_some() && agents[i].disk_full_until.is_none())
                    .collect();
                match candidates.get(rng.random_range(0..candidates.len().max(1))) {
                    Some(&i) => {
                        let a = &mut agents[i];
                        if let Some(fs) = &a.fs {
                            fs.fill()?;
                        }
                        a.disk_full_until = Some(now + Duration::from_secs_f64(rng.random_range(5.0..20.0)));
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        };
        if done {
            *acc.faults.entry(kind.to_owned()).or_default() += 1;
            eprintln!("[{:>6.1}s] fault: {kind}", t0.elapsed().as_secs_f64());
        }
    }
    collector.kill9();
    eprintln!("[{:>6.1}s] every agent drained; accounting", t0.elapsed().as_secs_f64());

    // Accounting against the raw rows.
    let rt = tokio::runtime::Runtime::new()?;
    // 18.16 has no RowBinaryWithNamesAndTypes: plain RowBinary.
    let db = clickhouse::Client::default().with_url(ch.url()).with_validation(false);
    for a in &mut agents {
        let cfg = sim_config(&args, a.seed);
        // A killed run sampled at least what is stored of it (seconds after the scrape).
        for k in 0..a.runs.len() {
            let (lo, hi) = (a.runs[k].start_ms, a.runs.get(k + 1).map_or(i64::MAX, |r| r.start_ms));
            let max_ts: i64 = rt.block_on(
                db.query(
                    "SELECT max(ts_ms) FROM oomlens.gpu_samples WHERE node = ? AND ts_ms >= ? AND ts_ms < ?",
                )
                .bind(&a.node)
                .bind(lo)
                .bind(hi)
                .fetch_one(),
            )?;
            if max_ts >= lo {
                let stored_seconds = ((max_ts - lo) / 1000 + 1) as u64;
                a.runs[k].seconds = a.runs[k].seconds.max(stored_seconds);
            }
        }
        let mut produced: Produced = Default::default();
        for run in &a.runs {
            replay(&a.node, cfg.clone(), run, &mut produced)?;
            acc.agent_reported_dropped_samples += run.dropped_samples;
        }
        let gpu: Vec<(u32, i64)> = rt.block_on(
            db.query("SELECT gpu_index, ts_ms FROM oomlens.gpu_samples WHERE node = ?")
                .bind(&a.node)
                .fetch_all(),
        )?;
        let procs: Vec<(u32, u32, i64)> = rt.block_on(
            db.query("SELECT gpu_index, pid, ts_ms FROM oomlens.process_samples WHERE node = ?")
                .bind(&a.node)
                .fetch_all(),
        )?;
        let events: Vec<u64> = rt.block_on(
            db.query("SELECT event_id FROM oomlens.oom_events WHERE node = ?").bind(&a.node).fetch_all(),
        )?;
        tally(&mut acc.gpu_samples, &produced.0, &gpu);
        tally(&mut acc.process_samples, &produced.1, &procs);
        let want: HashSet<u64> = produced.2.iter().copied().collect();
        tally(&mut acc.oom_events, &want, &events);
        acc.runs.push((a.node.clone(), a.runs.clone()));
    }
    acc.wall_s = t0.elapsed().as_secs_f64();
    print_accounting(&args, &acc);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&acc)?)?;
    }
    drop(agents);
    if acc.oom_events.lost > 0
        || acc.gpu_samples.never_produced + acc.process_samples.never_produced + acc.oom_events.never_produced
            > 0
    {
        bail!(
            "events lost or rows stored that were never produced; the run is kept in {}",
            dir.keep().display()
        );
    }
    Ok(())
}

fn tally<K: std::hash::Hash + Eq + Copy>(t: &mut Table, produced: &HashSet<K>, stored_rows: &[K]) {
    let distinct: HashSet<K> = stored_rows.iter().copied().collect();
    t.produced += produced.len() as u64;
    t.stored += distinct.iter().filter(|k| produced.contains(k)).count() as u64;
    t.never_produced += distinct.iter().filter(|k| !produced.contains(k)).count() as u64;
    t.duplicated += (stored_rows.len() - distinct.len()) as u64;
    t.lost += produced.iter().filter(|k| !distinct.contains(k)).count() as u64;
}

fn print_accounting(args: &Args, acc: &Accounting) {
    let runs: usize = acc.runs.iter().map(|(_, r)| r.len()).sum();
    println!(
        "\n{} agents × {} GPUs × {} simulated s at {}× ({} runs), {:.0} s wall; faults: {}{}",
        args.agents,
        args.gpus,
        args.simulated_s,
        args.speed,
        runs,
        acc.wall_s,
        acc.faults.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "),
        if acc.disk_full_windows_skipped { " (no tmpfs: no disk-full windows)" } else { "" }
    );
    println!(
        "\n| table | produced | stored (distinct) | lost | duplicated raw rows | stored, never produced |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, t) in [
        ("gpu_samples", &acc.gpu_samples),
        ("process_samples", &acc.process_samples),
        ("oom_events", &acc.oom_events),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} | {} |",
            t.produced, t.stored, t.lost, t.duplicated, t.never_produced
        );
    }
    println!(
        "\nSamples the agents counted as dropped (spool caps, a full disk with its memory full): {}; \
         samples lost beyond that were in a killed agent's memory (not yet spooled).",
        acc.agent_reported_dropped_samples
    );
}
