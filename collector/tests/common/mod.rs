//! Shared set-up of the collector's integration tests: a dev PKI, a real ClickHouse, an in-process
//! collector and in-process agents running the simulator.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

/// Prints a progress line with the seconds since `$t0` (`--nocapture` shows where time goes).
#[allow(unused_macros)]
macro_rules! step {
    ($t0:expr, $($arg:tt)*) => { eprintln!("[{:>6.2}s] {}", $t0.elapsed().as_secs_f64(), format!($($arg)*)) };
}

pub mod exact;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use oomlens_agent::config::{AgentConfig, SourceKind};
use oomlens_agent::runner::run_agent;
use oomlens_agent::uplink::UplinkTotals;
use oomlens_collector::clickhouse::{Ch, ChConfig};
use oomlens_collector::config::CollectorConfig;
use oomlens_collector::ingest::certs::{DevPki, mint_dev_pki};
use oomlens_collector::service::{self, RunningCollector};
use oomlens_devkit::devch::DevClickHouse;
use tokio::sync::watch;

pub const CLUSTER: &str = "test";

pub fn pki(dir: &Path, nodes: &[&str]) -> DevPki {
    let nodes: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
    mint_dev_pki(dir, &["localhost".to_owned()], CLUSTER, &nodes, 2).unwrap()
}

pub fn start_clickhouse() -> DevClickHouse {
    DevClickHouse::start().unwrap_or_else(|e| panic!("cannot start ClickHouse: {e}"))
}

/// The repository root (these helpers serve the tests of `collector/` and `collector/cli/`).
pub fn repo_root() -> std::path::PathBuf {
    oomlens_devkit::clitest::repo_root(env!("CARGO_MANIFEST_DIR"))
}

/// The tables of the SQL fixtures (`tests/fixtures/sql/<table>.jsonl`, JSONEachRow).
pub const FIXTURE_TABLES: [&str; 4] = ["gpu_samples", "process_samples", "oom_events", "agents"];

/// The JSONEachRow rows of one SQL fixture table.
pub fn sql_fixture(table: &str) -> String {
    let path = repo_root().join(format!("collector/tests/fixtures/sql/{table}.jsonl"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Inserts the SQL fixtures of `tables`, each `times` times (re-sent rows must change nothing).
pub async fn insert_sql_fixtures(ch: &Ch, tables: &[&str], times: usize) {
    for table in tables {
        let rows = sql_fixture(table);
        for _ in 0..times {
            ch.client()
                .query_raw(&format!("INSERT INTO oomlens.{table} FORMAT JSONEachRow\n{rows}"))
                .execute()
                .await
                .unwrap_or_else(|e| panic!("loading {table}: {e}"));
        }
    }
}

/// The fixture GPU samples that have a reading of used and a non-zero total: (row, used, total).
pub fn fixture_gpu_usage() -> Vec<(serde_json::Value, u64, u64)> {
    sql_fixture("gpu_samples")
        .lines()
        .filter_map(|line| {
            let r: serde_json::Value = serde_json::from_str(line).unwrap();
            let used = r["memory_used_bytes"].as_u64()?;
            let total = r["memory_total_bytes"].as_u64().filter(|&t| t > 0)?;
            Some((r, used, total))
        })
        .collect()
}

/// Writer settings for `server` without TTLs: fixtures carry fixed, long-past timestamps that a
/// retention TTL would drop at the first merge.
pub fn ch_config_without_ttl(server: &DevClickHouse) -> ChConfig {
    ChConfig {
        url: server.url(),
        retention: oomlens_schema::ddl::Retention { samples_days: 0, events_days: 0 },
        ..ChConfig::default()
    }
}

/// A throw-away ClickHouse with the schema migrated (no TTLs): the server (keep it alive) and a
/// connection to it.
pub async fn migrated_clickhouse() -> (DevClickHouse, Ch) {
    let server = start_clickhouse();
    let ch = Ch::connect(&ch_config_without_ttl(&server)).await.unwrap();
    ch.migrate().await.unwrap();
    (server, ch)
}

pub fn collector_config(pki: &DevPki, ch_url: &str, listen: SocketAddr) -> CollectorConfig {
    // Keep everything: the simulated time of the tests lies further back than the default retention,
    // and servers without TTL would have their old day partitions dropped at collector start.
    let ch = ChConfig {
        url: ch_url.to_owned(),
        insert_max_delay_ms: 50,
        retention: oomlens_schema::ddl::Retention { samples_days: 0, events_days: 0 },
        ..ChConfig::default()
    };
    let mut cfg = CollectorConfig::with_dev_pki(pki, listen, "test-collector", ch);
    cfg.collector.idle_timeout_ms = 3000;
    cfg
}

/// A configuration, raw (checked here) or already checked.
pub trait Checked<V> {
    fn checked(self) -> V;
}

impl Checked<oomlens_collector::config::ValidConfig> for CollectorConfig {
    fn checked(self) -> oomlens_collector::config::ValidConfig {
        self.finish().unwrap()
    }
}

impl Checked<oomlens_agent::config::ValidConfig> for AgentConfig {
    fn checked(self) -> oomlens_agent::config::ValidConfig {
        self.finish().unwrap()
    }
}

impl<T> Checked<oomlens_schema::config::Valid<T>> for oomlens_schema::config::Valid<T> {
    fn checked(self) -> Self {
        self
    }
}

/// Starts a collector with `cfg` (checked first when raw).
pub async fn start_collector(
    cfg: impl Checked<oomlens_collector::config::ValidConfig>,
) -> (RunningCollector, watch::Sender<bool>) {
    let (tx, rx) = watch::channel(false);
    let c = service::start(cfg.checked(), rx).await.unwrap();
    (c, tx)
}

/// An agent config for `node` of `pki`, running the simulator for `duration_s` simulated seconds.
pub fn agent_config(
    pki: &DevPki,
    node: &str,
    collector: SocketAddr,
    seed: u64,
    duration_s: u64,
    speed: f64,
) -> AgentConfig {
    let files = &pki.agents.iter().find(|(n, _)| n == node).unwrap().1;
    let mut cfg = AgentConfig::default();
    cfg.agent.node = node.to_owned();
    cfg.agent.cluster = CLUSTER.to_owned();
    cfg.source.kind = SourceKind::Simulator;
    cfg.source.interval_ms = 1000;
    // One sample per GPU per simulated second, as the tests count them (the flight recorder's
    // fast sampling is tested in the agent: sampler::tests).
    cfg.recorder.enabled = false;
    cfg.source.speed = speed;
    cfg.source.duration_s = duration_s;
    cfg.source.start_ms = START_MS;
    cfg.simulator.gpus = 4;
    cfg.simulator.seed = seed;
    cfg.uplink.to_collector(&collector.to_string(), "localhost", &pki.ca, &files.cert, &files.key);
    cfg.uplink.batch_interval_ms = 100;
    cfg.uplink.idle_timeout_ms = 3000;
    cfg.uplink.backoff_max_ms = 500;
    cfg.uplink.drain_timeout_ms = 60_000;
    cfg
}

/// A fixed simulated start (2026-01-01T00:00:00Z) so expected events can be replayed.
pub const START_MS: i64 = 1_767_225_600_000;

/// Runs an agent with `cfg` (checked first when raw) in a task.
pub fn spawn_agent(
    cfg: impl Checked<oomlens_agent::config::ValidConfig>,
) -> tokio::task::JoinHandle<UplinkTotals> {
    let cfg = cfg.checked();
    tokio::spawn(async move {
        let (_tx, rx) = watch::channel(false);
        let totals = run_agent(cfg, rx).await.unwrap();
        drop(_tx);
        totals
    })
}

/// Sends the in-process collectors' and agents' warnings and errors to the test's captured output,
/// which the runner prints when the test fails (`RUST_LOG` sets another level). Once per process.
pub fn show_warnings() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().with_ansi(false).try_init();
}

/// `SELECT count() …` as u64.
pub async fn count(ch: &clickhouse::Client, sql: &str) -> u64 {
    ch.query(sql).fetch_one::<u64>().await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The OOM events stored for `node`.
pub async fn stored_events(ch: &clickhouse::Client, node: &str) -> u64 {
    ch.query("SELECT count() FROM oomlens.oom_events WHERE node = ?")
        .bind(node)
        .fetch_one::<u64>()
        .await
        .unwrap_or_else(|e| panic!("counting the events of {node}: {e}"))
}

/// Polls until at least `want` OOM events of `node` are stored or `timeout` passes; the count.
pub async fn wait_for_events(ch: &clickhouse::Client, node: &str, want: usize, timeout: Duration) -> u64 {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = stored_events(ch, node).await;
        if n as usize >= want || tokio::time::Instant::now() >= deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn client(url: &str) -> clickhouse::Client {
    clickhouse::Client::default().with_url(url).with_validation(false)
}

pub async fn wait_until<F: FnMut() -> bool>(timeout: Duration, mut f: F) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}

/// A loopback address with a free TCP port (a telemetry endpoint).
pub fn reserve_tcp_addr() -> SocketAddr {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A loopback address with a free UDP port (for a collector that is stopped and started again).
pub fn reserve_addr() -> SocketAddr {
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A disk spool's segment files, in name (= sequence) order.
pub fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            oomlens_agent::spool::segment::parse_segment_name(&p.file_name().unwrap().to_string_lossy())
                .is_some()
        })
        .collect();
    v.sort();
    v
}

/// The batches in a disk spool's segment files, with each record's sequence number (segment
/// files in name order, records in file order).
pub fn spooled_batches(dir: &Path) -> Vec<(u64, oomlens_schema::Batch)> {
    use oomlens_agent::spool::segment;
    let mut out = Vec::new();
    for path in segment_files(dir) {
        let bytes = std::fs::read(&path).unwrap();
        for r in segment::scan(&bytes).records {
            let (_, frame, _) = segment::parse_at(&bytes, r.offset as usize).unwrap();
            let oomlens_schema::Frame::Batch(b) = oomlens_schema::Frame::decode(&bytes[frame]).unwrap()
            else {
                panic!("{}: not a batch", path.display())
            };
            out.push((r.header.seq, b));
        }
    }
    out
}

/// The `oomlens-agent` binary of this build profile (`target/<profile>/oomlens-agent`, next to the
/// test executable's `deps/`), built first when it is missing or older than the agent's sources.
pub fn agent_binary() -> std::path::PathBuf {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_owned();
        let target_dir = profile_dir.parent().unwrap().to_owned();
        let bin = profile_dir.join("oomlens-agent");
        let root = repo_root();
        let sources = ["agent/src", "agent/Cargo.toml", "schema/src", "schema/Cargo.toml", "Cargo.lock"];
        let newest = sources.iter().filter_map(|p| newest_mtime(&root.join(p))).max();
        let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
        if built.is_some() && built >= newest {
            return bin;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = std::process::Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "oomlens-agent", "--bin", "oomlens-agent"])
            .env("CARGO_TARGET_DIR", &target_dir)
            .current_dir(root);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        match cmd.status() {
            Ok(s) if s.success() => {}
            other if bin.exists() => {
                eprintln!("building oomlens-agent failed ({other:?}); using {}", bin.display())
            }
            other => panic!("cannot build oomlens-agent ({other:?}) and {} is missing", bin.display()),
        }
        bin
    })
    .clone()
}

/// The latest modification time of a file or of any file under a directory.
fn newest_mtime(path: &Path) -> Option<std::time::SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_dir() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path).ok()?.filter_map(|e| e.ok()).filter_map(|e| newest_mtime(&e.path())).max()
}

/// An `oomlens-agent run` child process with its configuration file and its log (stderr + stdout).
pub struct AgentProcess {
    pub child: std::process::Child,
    pub log: std::path::PathBuf,
    pub report: std::path::PathBuf,
}

impl AgentProcess {
    /// Writes `cfg` to `<dir>/<name>.toml` and starts the real agent binary with it.
    pub fn spawn(cfg: &AgentConfig, dir: &Path, name: &str) -> AgentProcess {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, toml::to_string(cfg).unwrap()).unwrap();
        let log = dir.join(format!("{name}.log"));
        let report = dir.join(format!("{name}.report.json"));
        let out = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(agent_binary())
            .arg("run")
            .arg("--config")
            .arg(&config)
            .arg("--report")
            .arg(&report)
            .env("OOMLENS_LOG", "info")
            .env_remove("OOMLENS_AGENT_CONFIG")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        AgentProcess { child, log, report }
    }

    /// The report the agent wrote on exit (`--report`).
    pub fn report(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(&self.report).unwrap_or_else(|e| {
            panic!("no report at {}: {e}; log:\n{}", self.report.display(), self.log_text())
        });
        serde_json::from_str(&text).unwrap()
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits for the exit (polling, so the async runtime keeps serving the collector).
    pub async fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if tokio::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("agent did not exit within {timeout:?}; log:\n{}", self.log_text());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Everything the agent logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The widths the HTML pages are checked at: a desktop and a phone.
pub const PAGE_WIDTHS: [u32; 2] = [1400, 375];

/// Lays `page` out in headless Chromium at each of [`PAGE_WIDTHS`] and fails on anything a
/// reader would see go wrong (the page wider than the screen, a chart label overlapping another or
/// cut off, a clipped legend); keeps a PNG of each width as `<target>/html-pages/<name>-<width>.png`
/// (the CI artefacts). Returns the desktop layout. Without Chromium the check is skipped with a
/// note — except under CI (`CI` set), where it must run.
pub fn check_page_in_browser(page: &Path, name: &str) -> Option<oomlens_devkit::browser::Layout> {
    let Some(browser) = oomlens_devkit::browser::Chromium::find() else {
        assert!(std::env::var_os("CI").is_none(), "CI must check the HTML pages: install chromium");
        eprintln!("skipping the browser check of {name}: no chromium on the PATH (apt-get install chromium)");
        return None;
    };
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), Into::into);
    let artefacts = target.join("html-pages");
    std::fs::create_dir_all(&artefacts).unwrap();
    let mut desktop = None;
    for width in PAGE_WIDTHS {
        let layout = browser.layout(page, width).unwrap_or_else(|e| panic!("{name} at {width} px: {e}"));
        let height = (layout.height.ceil() as u32).clamp(400, 12_000);
        let png = artefacts.join(format!("{name}-{width}.png"));
        browser.screenshot(page, width, height, &png).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            layout.problems.is_empty(),
            "{name} at {width} px ({}): {:#?}",
            png.display(),
            layout.problems
        );
        assert!(layout.scroll_width <= layout.viewport + 1.0, "{name} at {width} px: {layout:?}");
        if width == PAGE_WIDTHS[0] {
            desktop = Some(layout);
        }
    }
    desktop
}
