//! `oomlens demo`: a whole fleet on one machine. Starts a throw-away ClickHouse, mints a dev PKI,
//! runs a collector, launches one `oomlens-agent` process per simulated node (the simulator plays
//! a few minutes of a GPU fleet, faster than real time), waits until every agent has delivered
//! everything, then prints what landed: rows per table and every OOM event. Everything it started
//! is stopped at the end, also on Ctrl-C.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use oomlens_schema::ddl::Retention;
use serde::Deserialize;
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::render::human_bytes;
use crate::report::{EventLine, fetch_events, fetch_table_counts};
use oomlens_collector::analysis::{AttributedEvent, FeatureWindow, attribute_window};
use oomlens_collector::clickhouse::ChConfig;
use oomlens_collector::config::CollectorConfig;
use oomlens_collector::ingest::certs::mint_dev_pki;
use oomlens_collector::service::{self, RunningCollector};
use oomlens_devkit::devch::DevClickHouse;

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Simulated nodes (one agent process each).
    pub nodes: u32,
    /// GPUs per node.
    pub gpus: u32,
    /// Simulated seconds to play.
    pub duration_s: u64,
    /// Real-time multiplier.
    pub speed: f64,
    /// Base seed (node i uses seed + i).
    pub seed: u64,
    /// The `oomlens-agent` binary.
    pub agent_bin: PathBuf,
    /// Keep the work directory (ClickHouse data, certificates, job logs) here instead of a temp dir.
    pub keep_dir: Option<PathBuf>,
    /// The simulator's placement weights (`[simulator.mix]` keys of the agent: `static`, `batch`,
    /// `sequence`, `contention`, `fragmentation`, `host_oom`, `healthy`); `None`: the agent's default.
    pub mix: Option<Vec<(String, u32)>>,
}

/// The demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Something it needed could not be started.
    #[error("{what}: {reason}")]
    Setup {
        /// The part that failed (`ClickHouse`, `certificates`, `collector`, …).
        what: &'static str,
        /// Its error, as text.
        reason: String,
    },
    /// An agent failed.
    #[error("agent {node} failed: {reason}")]
    Agent {
        /// Node name of the agent (`gpu-node-NN`).
        node: String,
        /// What went wrong: it could not start, exited with an error, or left no readable report.
        reason: String,
    },
    /// Interrupted by Ctrl-C.
    #[error("interrupted")]
    Interrupted,
}

fn setup(what: &'static str) -> impl Fn(String) -> DemoError {
    move |reason| DemoError::Setup { what, reason }
}

/// What an agent reports on exit (`oomlens-agent run --report`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct AgentTotals {
    /// Batches pushed.
    pub batches: u64,
    /// Batches acknowledged.
    pub acked_batches: u64,
    /// GPU samples sent.
    pub gpu_samples: u64,
    /// Process samples sent.
    pub process_samples: u64,
    /// Events sent.
    pub events: u64,
}

/// Everything the demo measured.
#[derive(Debug, Clone)]
pub struct DemoOutcome {
    /// Rows per table in ClickHouse.
    pub table_counts: Vec<(String, u64)>,
    /// Sum of what the agents reported sending.
    pub sent: AgentTotals,
    /// The OOM events.
    pub events: Vec<EventLine>,
    /// Every OOM event attributed by the rule set (`oom_features` + [`oomlens_collector::analysis`]).
    pub attributions: Vec<AttributedEvent>,
    /// Real time taken.
    pub elapsed: Duration,
}

struct Agent {
    node: String,
    child: Child,
    report: PathBuf,
}

/// Runs the demo; `stop` (Ctrl-C) interrupts it and everything is cleaned up.
pub async fn run_demo(cfg: DemoConfig, mut stop: watch::Receiver<bool>) -> Result<DemoOutcome, DemoError> {
    let started = Instant::now();
    let temp;
    let dir: PathBuf = match &cfg.keep_dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| setup("work directory")(e.to_string()))?;
            d.clone()
        }
        None => {
            temp = tempfile::Builder::new()
                .prefix("oomlens-demo-")
                .tempdir()
                .map_err(|e| setup("work directory")(e.to_string()))?;
            temp.path().to_owned()
        }
    };
    if !cfg.agent_bin.exists() {
        return Err(setup("agent binary")(format!(
            "{} not found (build it with `cargo build --release -p oomlens-agent`)",
            cfg.agent_bin.display()
        )));
    }
    eprintln!("• starting a throw-away ClickHouse …");
    let mut ch = tokio::task::spawn_blocking({
        let d = dir.join("clickhouse");
        move || DevClickHouse::start_in(d)
    })
    .await
    .map_err(|e| setup("ClickHouse")(e.to_string()))?
    .map_err(|e| setup("ClickHouse")(e.to_string()))?;
    eprintln!("  ClickHouse at {}", ch.url());

    let result = run_with_clickhouse(&cfg, &dir, &ch, &mut stop, started).await;
    let _ = tokio::task::spawn_blocking(move || ch.stop()).await;
    if cfg.keep_dir.is_some() {
        eprintln!("• work directory kept at {}", dir.display());
    }
    result
}

async fn run_with_clickhouse(
    cfg: &DemoConfig,
    dir: &Path,
    ch: &DevClickHouse,
    stop: &mut watch::Receiver<bool>,
    started: Instant,
) -> Result<DemoOutcome, DemoError> {
    let nodes: Vec<String> = (1..=cfg.nodes).map(|i| format!("gpu-node-{i:02}")).collect();
    let certs = dir.join("certs");
    let pki = mint_dev_pki(&certs, &["localhost".to_owned(), "127.0.0.1".to_owned()], "demo", &nodes, 30)
        .map_err(|e| setup("certificates")(e.to_string()))?;

    let collector_cfg = CollectorConfig::with_dev_pki(
        &pki,
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        "demo-collector",
        ChConfig {
            url: ch.url(),
            retention: Retention { samples_days: 0, events_days: 0 },
            ..ChConfig::default()
        },
    );
    let collector_cfg = collector_cfg.finish().map_err(|e| setup("collector config")(e.to_string()))?;
    let database = collector_cfg.clickhouse.database.clone();
    let ch_cfg = collector_cfg.clickhouse.clone();
    let collector =
        service::start(collector_cfg, stop.clone()).await.map_err(|e| setup("collector")(e.to_string()))?;
    eprintln!("• collector listening on {} (QUIC, mutual TLS)", collector.addr);

    let outcome = run_fleet(cfg, dir, &pki, &nodes, &collector, stop).await;
    let stats = collector.sink_stats.clone();
    collector.shutdown().await;
    let sent = outcome?;

    let client = oomlens_collector::clickhouse::Ch::connect(&ch_cfg)
        .await
        .map_err(|e| setup("query")(e.to_string()))?;
    let table_counts =
        fetch_table_counts(client.client(), &database).await.map_err(|e| setup("query")(e.to_string()))?;
    let events = fetch_events(client.client(), &database, 0, i64::MAX)
        .await
        .map_err(|e| setup("query")(e.to_string()))?;
    let attributions = attribute_window(client.client(), &database, &FeatureWindow::ALL)
        .await
        .map_err(|e| setup("attribution")(e.to_string()))?;
    let _ = stats;
    Ok(DemoOutcome { table_counts, sent, events, attributions, elapsed: started.elapsed() })
}

/// How long interrupted agents get to send what they hold and exit before they are killed.
const AGENT_STOP_GRACE: Duration = Duration::from_secs(5);

/// Ctrl-C: SIGTERM to every agent (each stops sampling, drains its uplink and exits), waits up to
/// [`AGENT_STOP_GRACE`] for all of them, kills the rest and reaps every child.
async fn stop_agents(agents: &mut [Agent]) {
    for pid in agents.iter().filter_map(|a| a.child.id()) {
        oomlens_devkit::devch::signal_process(pid, libc::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + AGENT_STOP_GRACE;
    for a in agents.iter_mut() {
        if tokio::time::timeout_at(deadline, a.child.wait()).await.is_err() {
            let _ = a.child.kill().await;
        }
    }
}

async fn run_fleet(
    cfg: &DemoConfig,
    dir: &Path,
    pki: &oomlens_collector::ingest::certs::DevPki,
    nodes: &[String],
    collector: &RunningCollector,
    stop: &mut watch::Receiver<bool>,
) -> Result<AgentTotals, DemoError> {
    let start_ms = oomlens_schema::text::now_ms() - (cfg.duration_s as i64) * 1000;
    let mut agents = Vec::with_capacity(nodes.len());
    for (i, (node, files)) in pki.agents.iter().enumerate() {
        let logs = dir.join("job-logs").join(node);
        std::fs::create_dir_all(&logs).map_err(|e| setup("job log directory")(e.to_string()))?;
        let report = dir.join(format!("agent-{node}.json"));
        let agent_log = std::fs::File::create(dir.join(format!("agent-{node}.log")))
            .map_err(|e| setup("agent log")(e.to_string()))?;
        // Per-agent settings that have no flag: a private hook socket. (The log follower is not
        // pointed at the simulated jobs' logs: PyTorch messages carry no pid, so those events
        // would not merge with the simulator's own and every OOM would be reported twice.)
        let config = dir.join(format!("agent-{node}.toml"));
        let mut toml = format!(
            "[hook]\npath = {hook:?}\n",
            hook = dir.join(format!("hook-{node}.sock")).display().to_string(),
        );
        if let Some(mix) = &cfg.mix {
            toml.push_str("\n[simulator.mix]\n");
            for (name, weight) in mix {
                toml.push_str(&format!("{name:?} = {weight}\n"));
            }
        }
        std::fs::write(&config, toml).map_err(|e| setup("agent config")(e.to_string()))?;
        let child = Command::new(&cfg.agent_bin)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .args(["--source", "simulator", "--node", node, "--cluster", "demo"])
            .args(["--collector", &collector.addr.to_string(), "--server-name", "localhost"])
            .arg("--ca")
            .arg(&pki.ca)
            .arg("--cert")
            .arg(&files.cert)
            .arg("--key")
            .arg(&files.key)
            .args(["--sim-gpus", &cfg.gpus.to_string(), "--sim-seed", &(cfg.seed + i as u64).to_string()])
            .args(["--duration-s", &cfg.duration_s.to_string(), "--speed", &cfg.speed.to_string()])
            .args(["--start-ms", &start_ms.to_string()])
            .arg("--sim-log-dir")
            .arg(&logs)
            .arg("--report")
            .arg(&report)
            .env("OOMLENS_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(agent_log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| DemoError::Agent { node: node.clone(), reason: format!("cannot start: {e}") })?;
        agents.push(Agent { node: node.clone(), child, report });
    }
    eprintln!(
        "• {} agents × {} simulated GPUs, {} simulated seconds at {}× speed",
        nodes.len(),
        cfg.gpus,
        cfg.duration_s,
        cfg.speed
    );

    let bar = ProgressBar::new(cfg.duration_s);
    bar.set_style(
        ProgressStyle::with_template("  {spinner} [{bar:40}] {pos}/{len} sim s  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let begun = Instant::now();
    let mut remaining = agents.len();
    let mut done = vec![false; agents.len()];
    let mut failure = None;
    while remaining > 0 {
        if *stop.borrow() {
            bar.abandon_with_message("interrupted");
            stop_agents(&mut agents).await;
            return Err(DemoError::Interrupted);
        }
        let sim = (begun.elapsed().as_secs_f64() * cfg.speed) as u64;
        bar.set_position(sim.min(cfg.duration_s));
        let rows = collector.sink_stats.rows_written.load(std::sync::atomic::Ordering::Relaxed);
        bar.set_message(format!("{rows} rows stored"));
        for (i, a) in agents.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            if let Ok(Some(status)) = a.child.try_wait() {
                done[i] = true;
                remaining -= 1;
                if !status.success() && failure.is_none() {
                    failure = Some(DemoError::Agent {
                        node: a.node.clone(),
                        reason: format!(
                            "exited with {status}; see {}",
                            dir.join(format!("agent-{}.log", a.node)).display()
                        ),
                    });
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.changed() => {}
        }
    }
    bar.finish_with_message("all agents delivered");
    if let Some(f) = failure {
        return Err(f);
    }
    let mut total = AgentTotals::default();
    for a in &agents {
        let text = std::fs::read_to_string(&a.report)
            .map_err(|e| DemoError::Agent { node: a.node.clone(), reason: format!("no report: {e}") })?;
        let t: AgentTotals = serde_json::from_str(&text)
            .map_err(|e| DemoError::Agent { node: a.node.clone(), reason: format!("bad report: {e}") })?;
        total.batches += t.batches;
        total.acked_batches += t.acked_batches;
        total.gpu_samples += t.gpu_samples;
        total.process_samples += t.process_samples;
        total.events += t.events;
    }
    Ok(total)
}

/// Prints the demo's closing report.
pub fn print_demo_outcome(o: &DemoOutcome, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "Rows in ClickHouse (sent by the agents):")?;
    for (table, rows) in &o.table_counts {
        let sent = match table.as_str() {
            "gpu_samples" => Some(o.sent.gpu_samples),
            "process_samples" => Some(o.sent.process_samples),
            "oom_events" => Some(o.sent.events),
            _ => None,
        };
        let check = match sent {
            Some(s) if s == *rows => format!("(sent {s}) ✓"),
            Some(s) => format!("(sent {s}) MISMATCH"),
            None => String::new(),
        };
        writeln!(out, "  {table:<16} {rows:>10}  {check}")?;
    }
    writeln!(out)?;
    writeln!(out, "{} OOM events:", o.events.len())?;
    writeln!(
        out,
        "  {:<12} {:>3} {:<30} {:<14} {:<10} {:>11} {:>11}  scenario (ground truth)  attributed (confidence)",
        "node", "gpu", "job", "kind", "framework", "requested", "capacity"
    )?;
    let attributed: std::collections::HashMap<(&str, &str, u64), &oomlens_collector::analysis::Attribution> =
        o.attributions
            .iter()
            .map(|a| {
                ((a.features.cluster.as_str(), a.features.node.as_str(), a.features.event_id), &a.attribution)
            })
            .collect();
    let mut events = o.events.clone();
    events.sort_by(|a, b| (a.ts_ms, &a.node, a.gpu_index).cmp(&(b.ts_ms, &b.node, b.gpu_index)));
    for e in &events {
        let truth = if e.truth_scenario.is_empty() { "-" } else { &e.truth_scenario };
        let rules = attributed.get(&(e.cluster.as_str(), e.node.as_str(), e.event_id)).map_or_else(
            || "-".to_owned(),
            |a| {
                let mark = if a.scenario.as_str() == truth { "" } else { "  ✗" };
                format!("{} ({} %){mark}", a.scenario, a.confidence_pct)
            },
        );
        writeln!(
            out,
            "  {:<12} {:>3} {:<30} {:<14} {:<10} {:>11} {:>11}  {:<23} {}",
            e.node,
            opt(e.gpu_index),
            oomlens_schema::text::ellipsize(&e.workload, 30),
            e.kind,
            e.framework,
            human_bytes(e.requested_bytes),
            human_bytes(e.capacity_bytes),
            truth,
            rules
        )?;
    }
    let mut by: std::collections::BTreeMap<&str, usize> = Default::default();
    for e in &o.events {
        *by.entry(if e.truth_scenario.is_empty() { "-" } else { e.truth_scenario.as_str() }).or_default() +=
            1;
    }
    writeln!(out)?;
    writeln!(
        out,
        "By scenario: {}",
        by.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    )?;
    let matrix = oomlens_collector::analysis::ConfusionMatrix::from_events(&o.attributions);
    if matrix.total() > 0 {
        writeln!(out)?;
        writeln!(out, "Attribution (oom_features + the rule set of docs/attribution.md) vs ground truth:")?;
        write!(out, "{matrix}")?;
    }
    writeln!(out, "Done in {:.1} s.", o.elapsed.as_secs_f64())?;
    Ok(())
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}
