//! `cargo run --release -p oomlens-benches --bin loadgen -- [--agents N] [--mode throughput|rate] …`
//!
//! Whole-pipeline load generator. Starts a throw-away ClickHouse
//! (`oomlens_devkit::devch`), mints a CA, a collector certificate and **one client certificate
//! per agent** (CN = agent name, OU = cluster: every agent is its own node to the collector), runs
//! the release `oomlens-collector serve` as a separate process with a generated config, and plays
//! N simulated agents over real QUIC connections (`oomlens_benches::loadgen`): pre-encoded `Batch`
//! frames from the fleet simulator, the real protocol (Hello → Welcome, Batch → cumulative Ack,
//! `max_in_flight`), either as fast as the acks allow or at R Hz per agent.
//!
//! Reports, over the measured window: rows/s and MB/s (frame bytes) acknowledged, ack latency
//! p50/p99 (write start → ack arrival), sessions held (ours and the collector's
//! `connected_agents`), CPU (% of one core) and RSS of the collector, ClickHouse and the generator
//! from `/proc`; after the drain, that ClickHouse holds exactly the acknowledged rows. With
//! `--baselines`, the same rows are then inserted by `clickhouse-client … FORMAT RowBinary` and
//! POSTed as JSONEachRow over HTTP (`oomlens_benches::chbaseline`) into empty copies of the tables
//! that carry the same per-minute rollup views, and the ratios are printed.

use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use oomlens_benches::chbaseline::Server;
use oomlens_benches::loadgen::{
    AgentSpec, DriveConfig, Mode, NodePool, PoolSpec, RowCounts, Shared, build_pool, quantile, run_agent,
};
use oomlens_benches::procfs::{self, CpuMark, Memory};
use oomlens_collector::ingest::certs::{DevCa, LeafSpec, Role, write_minted};
use oomlens_devkit::devch::DevClickHouse;
use oomlens_schema::ddl::rollups::rollups;
use oomlens_schema::ddl::{Retention, ServerVersion};
use oomlens_schema::tls::TlsFiles;
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// Send as fast as acknowledgements allow.
    Throughput,
    /// Each agent sends `--rate-hz` batches per second.
    Rate,
}

/// Plays many simulated agents against a real collector process and a throw-away ClickHouse.
#[derive(Debug, Parser)]
#[command(name = "loadgen", version, about)]
struct Args {
    /// Simulated agents (one QUIC connection and one client certificate each).
    #[arg(long, default_value_t = 16)]
    agents: usize,
    /// Sending mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Throughput)]
    mode: ModeArg,
    /// Rate mode: batches per second per agent.
    #[arg(long, default_value_t = 1.0)]
    rate_hz: f64,
    /// Measured seconds.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Seconds between the last connection and the measured window.
    #[arg(long, default_value_t = 5)]
    warmup_s: u64,
    /// Seconds of 1 Hz readings per batch (the agent's defaults send 1 s batches).
    #[arg(long, default_value_t = 1)]
    batch_seconds: u32,
    /// GPUs per simulated node.
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    /// Always-on extra processes per GPU (the simulated jobs add 1–3 more).
    #[arg(long, default_value_t = 16)]
    procs_per_gpu: u32,
    /// Distinct simulated nodes in the frame pool (agents share them round-robin).
    #[arg(long, default_value_t = 8)]
    pool_nodes: usize,
    /// Batches per pool node (each agent cycles through its node's batches).
    #[arg(long, default_value_t = 32)]
    pool_batches: usize,
    /// Unacknowledged batches per agent (the agent's `uplink.max_in_flight`).
    #[arg(long, default_value_t = 64)]
    max_in_flight: usize,
    /// Connection attempts in progress at once.
    #[arg(long, default_value_t = 64)]
    connect_concurrency: usize,
    /// Client UDP sockets (0: one per agent, as real agents have).
    #[arg(long, default_value_t = 0)]
    sockets: usize,
    /// Collector `clickhouse.insert_max_rows`.
    #[arg(long, default_value_t = 500_000)]
    insert_max_rows: usize,
    /// Collector `clickhouse.insert_max_delay_ms`.
    #[arg(long, default_value_t = 1000)]
    insert_max_delay_ms: u64,
    /// Collector `clickhouse.queue_capacity`.
    #[arg(long, default_value_t = 256)]
    queue_capacity: usize,
    /// Collector `clickhouse.insert_concurrency` (not written when absent: the collector's default,
    /// and older collectors that lack the key still start).
    #[arg(long)]
    insert_concurrency: Option<usize>,
    /// Collector `clickhouse.insert_lanes` (not written when absent, as `--insert-concurrency`).
    #[arg(long)]
    insert_lanes: Option<usize>,
    /// Collector `collector.max_batches_in_flight`.
    #[arg(long, default_value_t = 64)]
    max_batches_in_flight: usize,
    /// Extra TOML lines appended to the collector's `[collector]` section (e.g. byte caps).
    #[arg(long)]
    collector_extra: Vec<String>,
    /// After the run, insert the same rows with clickhouse-client (RowBinary) and as JSONEachRow
    /// over HTTP, and print the ratios.
    #[arg(long)]
    baselines: bool,
    /// JSONEachRow baseline: bytes per HTTP POST (Vector's ClickHouse sink default is 10 MB).
    #[arg(long, default_value_t = 10_000_000)]
    json_chunk_bytes: usize,
    /// A name for this run in the report.
    #[arg(long, default_value = "loadgen")]
    label: String,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The `oomlens-collector` binary (default: built next to this one).
    #[arg(long)]
    collector_bin: Option<PathBuf>,
    /// Do not draw a progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
struct ProcUsage {
    cpu_pct_of_core: f64,
    memory: Memory,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
struct Baseline {
    rows: u64,
    bytes: u64,
    seconds: f64,
    rows_per_s: f64,
    mb_per_s: f64,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
struct Report {
    label: String,
    mode: String,
    agents: usize,
    batch_rows_mean: f64,
    frame_bytes_mean: f64,
    measured_s: f64,
    rows_per_s: f64,
    gpu_rows_per_s: f64,
    process_rows_per_s: f64,
    batches_per_s: f64,
    mb_per_s: f64,
    ack_p50_ms: Option<f64>,
    ack_p99_ms: Option<f64>,
    ack_max_ms: Option<f64>,
    ack_samples: usize,
    sessions_held: u64,
    collector_connected_agents: Option<f64>,
    /// Collector flushes completed per second in the window (`insert_flushes`).
    flushes_per_s: Option<f64>,
    /// Mean duration of one `INSERT` statement in the window (`insert_duration_seconds`), ms.
    insert_ms_mean: Option<f64>,
    failed_sessions: u64,
    late_ticks: u64,
    collector: ProcUsage,
    clickhouse: ProcUsage,
    loadgen: ProcUsage,
    acked_rows_total: RowCounts,
    acked_distinct_events: u64,
    stored_rows_total: RowCounts,
    stored_distinct_events: u64,
    stored_equals_acked: bool,
    baseline_rowbinary_client: Option<Baseline>,
    baseline_rowbinary_http: Option<Baseline>,
    baseline_json_http: Option<Baseline>,
    errors: Vec<String>,
    setup: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.agents == 0 {
        bail!("--agents must be at least 1");
    }
    let collector_bin = match &args.collector_bin {
        Some(p) => p.clone(),
        None => oomlens_benches::workspace::sibling_binary("oomlens-collector", "oomlens-collector")?,
    };
    let dir = tempfile::Builder::new().prefix("oomlens-loadgen-").tempdir()?;
    eprintln!("loadgen: working directory {}", dir.path().display());

    let t = Instant::now();
    let mut ch =
        DevClickHouse::start().context("cannot start ClickHouse (is clickhouse-server installed?)")?;
    eprintln!("ClickHouse at {} (started in {:.1} s)", ch.url(), t.elapsed().as_secs_f64());

    let t = Instant::now();
    let pki = mint_pki(&dir.path().join("pki"), args.agents)?;
    eprintln!("minted {} agent certificates in {:.1} s", args.agents, t.elapsed().as_secs_f64());

    let t = Instant::now();
    let spec = PoolSpec {
        nodes: args.pool_nodes.min(args.agents).max(1),
        batches_per_node: args.pool_batches.max(1),
        batch_seconds: args.batch_seconds.max(1),
        gpus: args.gpus,
        procs_per_gpu: args.procs_per_gpu,
        seed: 1,
        start_ms: oomlens_collector::clickhouse::sink::now_ms() - 3_600_000,
    };
    let pool: Vec<Arc<NodePool>> = build_pool(&spec)?.into_iter().map(Arc::new).collect();
    let frames: Vec<_> = pool.iter().flat_map(|n| n.frames.iter()).collect();
    let rows_mean = frames.iter().map(|f| f.rows.total()).sum::<u64>() as f64 / frames.len() as f64;
    let bytes_mean = frames.iter().map(|f| f.len()).sum::<usize>() as f64 / frames.len() as f64;
    eprintln!(
        "frame pool: {} nodes x {} batches, {:.0} rows and {:.0} bytes per batch on average (built in {:.1} s)",
        pool.len(),
        spec.batches_per_node,
        rows_mean,
        bytes_mean,
        t.elapsed().as_secs_f64()
    );

    let mut collector = CollectorProcess::start(&collector_bin, dir.path(), &pki, &ch, &args)?;
    eprintln!("collector pid {} on {} (metrics {})", collector.pid(), collector.quic, collector.metrics);

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = rt.block_on(drive(&args, &pki, pool, &collector, &ch));
    drop(rt);
    let mut report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("collector log tail:\n{}", collector.log_tail());
            return Err(e);
        }
    };
    report.batch_rows_mean = rows_mean;
    report.frame_bytes_mean = bytes_mean;
    report.setup = format!(
        "{} agents ({} client sockets), {} GPUs, {} extra processes/GPU, {} s batches; collector insert_max_rows {}, \
         insert_max_delay_ms {}, max_batches_in_flight {}, queue_capacity {}, insert_concurrency {}, insert_lanes {}; agent max_in_flight {}",
        args.agents,
        if args.sockets == 0 { args.agents } else { args.sockets },
        args.gpus,
        args.procs_per_gpu,
        args.batch_seconds,
        args.insert_max_rows,
        args.insert_max_delay_ms,
        args.max_batches_in_flight,
        args.queue_capacity,
        args.insert_concurrency.map_or_else(|| "default".to_owned(), |n| n.to_string()),
        args.insert_lanes.map_or_else(|| "default".to_owned(), |n| n.to_string()),
        args.max_in_flight
    );

    let server = Server { tcp_port: ch.tcp_port(), http_port: ch.http_port() };
    report.stored_rows_total = RowCounts {
        gpu: server.count("oomlens.gpu_samples")?,
        process: server.count("oomlens.process_samples")?,
        events: server.count("oomlens.oom_events")?,
    };
    report.stored_distinct_events =
        server.count_sql("SELECT uniqExact(node, event_id) FROM oomlens.oom_events")?;
    // Samples tables are plain MergeTree: every acknowledged row must be there. `oom_events` is a
    // ReplacingMergeTree and agents cycling through their pool re-send the same events: compare
    // distinct (node, event id).
    report.stored_equals_acked = report.stored_rows_total.gpu == report.acked_rows_total.gpu
        && report.stored_rows_total.process == report.acked_rows_total.process
        && report.stored_distinct_events == report.acked_distinct_events;
    collector.stop()?;

    if args.baselines {
        let b = baselines(&server, dir.path(), args.json_chunk_bytes)?;
        report.baseline_rowbinary_client = Some(b.rowbinary_client);
        report.baseline_rowbinary_http = Some(b.rowbinary_http);
        report.baseline_json_http = Some(b.json_http);
    }
    print_report(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    ch.stop()?;
    Ok(())
}

/// The PKI of a run: CA, collector certificate, one agent certificate per agent.
struct Pki {
    ca: PathBuf,
    collector: TlsFiles,
    agents: Vec<(String, TlsFiles)>,
}

const CLUSTER: &str = "loadgen";

fn mint_pki(dir: &Path, agents: usize) -> anyhow::Result<Pki> {
    std::fs::create_dir_all(dir)?;
    let ca = DevCa::new("oomlens loadgen CA", 2)?;
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.cert_pem())?;
    let mut spec = LeafSpec::new("oomlens-collector", Role::Collector, 2);
    spec.subject_alt_names = vec!["localhost".into(), "127.0.0.1".into()];
    let c = write_minted(dir, "collector", &ca.mint(&spec)?)?;
    let collector = TlsFiles { ca: ca_path.clone(), cert: c.cert, key: c.key };
    let mut out = Vec::with_capacity(agents);
    for i in 0..agents {
        let name = format!("lg-{i:05}");
        let mut spec = LeafSpec::new(&name, Role::Agent, 2);
        spec.cluster = Some(CLUSTER.to_owned());
        let f = write_minted(dir, &name, &ca.mint(&spec)?)?;
        out.push((name, TlsFiles { ca: ca_path.clone(), cert: f.cert, key: f.key }));
    }
    Ok(Pki { ca: ca_path, collector, agents: out })
}

/// `oomlens-collector serve` as a child process.
struct CollectorProcess {
    child: Option<Child>,
    quic: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
}

fn free_udp_port() -> anyhow::Result<u16> {
    Ok(UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

fn free_tcp_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

impl CollectorProcess {
    fn start(bin: &Path, dir: &Path, pki: &Pki, ch: &DevClickHouse, args: &Args) -> anyhow::Result<Self> {
        let quic = SocketAddr::from((Ipv4Addr::LOCALHOST, free_udp_port()?));
        let metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, free_tcp_port()?));
        let mut extra = String::new();
        for line in &args.collector_extra {
            extra.push_str(line);
            extra.push('\n');
        }
        // Memory for every agent's connection plus 512 MiB for frames in flight (85 MB of wire
        // bytes at 6 heap bytes each): the collector refuses limits that do not fit its budget.
        // Unless the extra lines set it.
        if !extra.contains("max_memory_bytes") {
            let connections = (args.agents as u64 + 16) * oomlens_collector::config::CONNECTION_BYTES;
            let memory = oomlens_collector::config::BASE_MEMORY_BYTES + connections + (512 << 20);
            extra.push_str(&format!("max_memory_bytes = {memory}\n"));
        }
        let mut concurrency =
            args.insert_concurrency.map(|n| format!("insert_concurrency = {n}\n")).unwrap_or_default();
        if let Some(lanes) = args.insert_lanes {
            concurrency.push_str(&format!("insert_lanes = {lanes}\n"));
        }
        let config = format!(
            "[collector]\nlisten = \"{quic}\"\ncollector_id = \"loadgen-collector\"\nca = {ca:?}\ncert = {cert:?}\n\
             key = {key:?}\nmax_connections = {max_conn}\nmax_batches_in_flight = {mbif}\nidle_timeout_ms = 30000\n\
             handshake_timeout_ms = 30000\n{extra}\n[clickhouse]\nurl = \"{url}\"\ninsert_max_rows = {imr}\n\
             insert_max_delay_ms = {imd}\nqueue_capacity = {qc}\n{concurrency}\n[telemetry]\nlisten = \"{metrics}\"\n",
            ca = pki.ca.display().to_string(),
            cert = pki.collector.cert.display().to_string(),
            key = pki.collector.key.display().to_string(),
            max_conn = args.agents + 16,
            mbif = args.max_batches_in_flight,
            url = ch.url(),
            imr = args.insert_max_rows,
            imd = args.insert_max_delay_ms,
            qc = args.queue_capacity,
        );
        let path = dir.join("collector.toml");
        std::fs::write(&path, config)?;
        let log = dir.join("collector.log");
        let child = Command::new(bin)
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .env("OOMLENS_LOG", "warn")
            .env_remove("OOMLENS_COLLECTOR_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut me = CollectorProcess { child: Some(child), quic, metrics, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if http_get(metrics, "/readyz").is_some_and(|(status, _)| status == 200) {
                return Ok(me);
            }
            if let Some(child) = me.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("the collector exited during start-up ({status}):\n{}", me.log_tail());
            }
            if Instant::now() > deadline {
                bail!("the collector did not become ready within 60 s:\n{}", me.log_tail());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Gauges or counters from one scrape of `/metrics` (the first sample of each name; `None`
    /// for a name it lacks, all `None` when the scrape fails).
    fn metrics<const N: usize>(&self, names: [&str; N]) -> [Option<f64>; N] {
        let Some((_, body)) = http_get(self.metrics, "/metrics") else { return [None; N] };
        names.map(|name| {
            body.lines().find_map(|l| {
                let rest = l.strip_prefix(name)?;
                let rest = rest.strip_prefix(' ').or_else(|| rest.strip_prefix("{}").map(str::trim_start))?;
                rest.split_whitespace().next()?.parse().ok()
            })
        })
    }

    /// SIGINT, then wait up to 60 s (SIGKILL after).
    fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        let _ = Command::new("kill").arg("-INT").arg(child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.kill()?;
        child.wait()?;
        bail!("the collector did not stop within 60 s of SIGINT")
    }
}

impl Drop for CollectorProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `GET path` over HTTP/1.0; the status and body.
fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

fn usage(mark: Option<CpuMark>, pid: u32) -> ProcUsage {
    ProcUsage {
        cpu_pct_of_core: mark.and_then(|m| m.pct_of_core_since().ok()).unwrap_or(f64::NAN),
        memory: procfs::memory(pid).unwrap_or_default(),
    }
}

fn progress(quiet: bool, len: u64, what: &str) -> ProgressBar {
    let pb = if quiet { ProgressBar::hidden() } else { ProgressBar::new(len) };
    if let Ok(style) =
        ProgressStyle::with_template("{prefix:>10} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
    {
        pb.set_style(style);
    }
    pb.set_prefix(what.to_owned());
    pb
}

async fn drive(
    args: &Args,
    pki: &Pki,
    pool: Vec<Arc<NodePool>>,
    collector: &CollectorProcess,
    ch: &DevClickHouse,
) -> anyhow::Result<Report> {
    let run_id = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64;
    let cfg = Arc::new(DriveConfig {
        collector: collector.quic,
        server_name: "localhost".into(),
        cluster: CLUSTER.into(),
        mode: match args.mode {
            ModeArg::Throughput => Mode::Throughput,
            ModeArg::Rate => Mode::Rate { hz: args.rate_hz },
        },
        max_in_flight: args.max_in_flight,
        connect_timeout: Duration::from_secs(30),
        drain_timeout: Duration::from_secs(60),
        run_id,
    });
    let shared = Arc::new(Shared::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let sockets = if args.sockets == 0 { args.agents } else { args.sockets.min(args.agents) };
    let mut endpoints = Vec::with_capacity(sockets);
    for _ in 0..sockets {
        endpoints.push(
            quinn::Endpoint::client(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                .context("cannot create a client UDP socket (file-descriptor limit? `ulimit -n`)")?,
        );
    }

    // Connect in waves of `connect_concurrency`.
    let pb = progress(args.quiet, args.agents as u64, "connect");
    let mut tasks = tokio::task::JoinSet::new();
    let connect_started = Instant::now();
    for (i, (name, files)) in pki.agents.iter().enumerate() {
        while (i as u64).saturating_sub(shared.connect_done.load(Ordering::Relaxed))
            >= args.connect_concurrency as u64
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
            pb.set_position(shared.connect_done.load(Ordering::Relaxed));
        }
        let node = Arc::clone(&pool[i % pool.len()]);
        let start = (i / pool.len() * 7) % node.frames.len();
        let spec = AgentSpec {
            index: i,
            name: name.clone(),
            client_config: oomlens_schema::tls::client_config(files, Duration::from_secs(30))?,
            pool: node,
            start,
        };
        tasks.spawn(run_agent(
            endpoints[i % sockets].clone(),
            spec,
            Arc::clone(&cfg),
            Arc::clone(&shared),
            stop_rx.clone(),
        ));
    }
    while shared.connect_done.load(Ordering::Relaxed) < args.agents as u64 {
        if connect_started.elapsed() > Duration::from_secs(120) {
            bail!("agents still connecting after 120 s: {:?}", shared.errors());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        pb.set_position(shared.connect_done.load(Ordering::Relaxed));
    }
    pb.finish_and_clear();
    let connect_s = connect_started.elapsed().as_secs_f64();
    eprintln!(
        "{} of {} agents connected in {connect_s:.1} s ({} failed)",
        shared.connected.load(Ordering::Relaxed),
        args.agents,
        shared.failed.load(Ordering::Relaxed)
    );
    tokio::time::sleep(Duration::from_secs(args.warmup_s)).await;

    // The measured window.
    let ch_pid = ch.pid().unwrap_or(0);
    let me = std::process::id();
    let marks = (CpuMark::now(collector.pid()).ok(), CpuMark::now(ch_pid).ok(), CpuMark::now(me).ok());
    let snap = |s: &Shared| {
        (
            s.acked_rows.load(Ordering::Relaxed),
            s.acked_bytes.load(Ordering::Relaxed),
            s.acked_batches.load(Ordering::Relaxed),
            s.acked_gpu_rows.load(Ordering::Relaxed),
            s.acked_process_rows.load(Ordering::Relaxed),
        )
    };
    let writer_snap = || {
        collector.metrics([
            "oomlens_collector_insert_flushes_total",
            "oomlens_collector_insert_duration_seconds_sum",
            "oomlens_collector_insert_duration_seconds_count",
        ])
    };
    let writer_before = writer_snap();
    let before = snap(&shared);
    let started = Instant::now();
    shared.measuring.store(true, Ordering::Relaxed);
    let pb = progress(args.quiet, args.seconds, "measure");
    let mut last = (before.0, Instant::now());
    for s in 1..=args.seconds {
        tokio::time::sleep_until(tokio::time::Instant::from_std(started + Duration::from_secs(s))).await;
        let rows = shared.acked_rows.load(Ordering::Relaxed);
        let rate = (rows - last.0) as f64 / last.1.elapsed().as_secs_f64();
        last = (rows, Instant::now());
        pb.set_position(s);
        pb.set_message(format!("{:.0} rows/s, {} sessions open", rate, shared.open.load(Ordering::Relaxed)));
    }
    let [collector_connected] = collector.metrics(["oomlens_collector_connected_agents"]);
    let sessions_held = shared.open.load(Ordering::Relaxed);
    let after = snap(&shared);
    let measured = started.elapsed().as_secs_f64();
    let writer_after = writer_snap();
    let flushes_per_s = writer_before[0].zip(writer_after[0]).map(|(a, b)| (b - a) / measured);
    let insert_ms_mean = match (writer_before, writer_after) {
        ([_, Some(sum0), Some(n0)], [_, Some(sum1), Some(n1)]) if n1 > n0 => {
            Some((sum1 - sum0) / (n1 - n0) * 1000.0)
        }
        _ => None,
    };
    shared.measuring.store(false, Ordering::Relaxed);
    let (cu, hu, lu) = (usage(marks.0, collector.pid()), usage(marks.1, ch_pid), usage(marks.2, me));
    pb.finish_and_clear();

    // Stop sending, wait for every outstanding ack.
    let _ = stop_tx.send(true);
    let drain_started = Instant::now();
    while tasks.join_next().await.is_some() {}
    eprintln!("drained in {:.1} s", drain_started.elapsed().as_secs_f64());
    for e in endpoints {
        e.close(0u32.into(), b"done");
    }

    let mut lat = shared.take_latencies();
    lat.sort_unstable();
    let ms = |q: f64| quantile(&lat, q).map(|us| f64::from(us) / 1000.0);
    Ok(Report {
        label: args.label.clone(),
        mode: match args.mode {
            ModeArg::Throughput => "throughput".into(),
            ModeArg::Rate => format!("rate {} Hz", args.rate_hz),
        },
        agents: args.agents,
        measured_s: measured,
        rows_per_s: (after.0 - before.0) as f64 / measured,
        mb_per_s: (after.1 - before.1) as f64 / measured / 1e6,
        batches_per_s: (after.2 - before.2) as f64 / measured,
        gpu_rows_per_s: (after.3 - before.3) as f64 / measured,
        process_rows_per_s: (after.4 - before.4) as f64 / measured,
        ack_p50_ms: ms(0.5),
        ack_p99_ms: ms(0.99),
        ack_max_ms: ms(1.0),
        ack_samples: lat.len(),
        sessions_held,
        collector_connected_agents: collector_connected,
        flushes_per_s,
        insert_ms_mean,
        failed_sessions: shared.failed.load(Ordering::Relaxed),
        late_ticks: shared.late_ticks.load(Ordering::Relaxed),
        collector: cu,
        clickhouse: hu,
        loadgen: lu,
        acked_rows_total: RowCounts {
            gpu: shared.acked_gpu_rows.load(Ordering::Relaxed),
            process: shared.acked_process_rows.load(Ordering::Relaxed),
            events: shared.acked_event_rows.load(Ordering::Relaxed),
        },
        acked_distinct_events: shared.acked_distinct_events.load(Ordering::Relaxed),
        errors: shared.errors(),
        ..Report::default()
    })
}

const TABLES: [&str; 3] = ["gpu_samples", "process_samples", "oom_events"];

/// The three baselines on the same rows.
#[derive(Debug, Default)]
struct Baselines {
    rowbinary_client: Baseline,
    rowbinary_http: Baseline,
    json_http: Baseline,
}

/// Databases of the three baselines' table copies.
const BASELINE_DBS: [&str; 3] = ["baseline_rowbinary_client", "baseline_rowbinary_http", "baseline_json"];

/// Empty copies of the sample and event tables in `db`, with the per-minute rollup tables and the
/// materialized views that fill them, as the pipeline's tables have: the views run inside every
/// insert into the sample tables, so the baselines pay for them as the pipeline does.
fn empty_copies(server: &Server, db: &str) -> anyhow::Result<()> {
    let version: ServerVersion = server.query("SELECT version()")?.parse()?;
    for r in rollups() {
        server.query(&format!("DROP TABLE IF EXISTS {db}.{}", r.view_name()))?;
        server.query(&format!("DROP TABLE IF EXISTS {db}.{}", r.name))?;
    }
    for table in TABLES {
        server.empty_copy(&format!("oomlens.{table}"), &format!("{db}.{table}"))?;
    }
    for r in rollups() {
        server.query(&r.create_sql(db, version.caps(), Retention::default()))?;
        server.query(&r.create_view_sql(db, "", None))?;
    }
    Ok(())
}

/// Dumps what the pipeline stored and re-inserts it three ways into empty copies.
fn baselines(server: &Server, dir: &Path, json_chunk_bytes: usize) -> anyhow::Result<Baselines> {
    let mut b = Baselines::default();
    for db in BASELINE_DBS {
        empty_copies(server, db)?;
    }
    for table in TABLES {
        let src = format!("oomlens.{table}");
        let rows = server.count(&src)?;
        let rb_file = dir.join(format!("{table}.rowbinary"));
        let js_file = dir.join(format!("{table}.jsonl"));
        let rb_bytes = server.dump(&src, "RowBinary", &rb_file)?;
        let js_bytes = server.dump(&src, "JSONEachRow", &js_file)?;
        eprintln!("baseline {table}: {rows} rows, RowBinary {rb_bytes} bytes, JSONEachRow {js_bytes} bytes");
        let check = |copy: &str| -> anyhow::Result<()> {
            let stored = server.count(copy)?;
            if stored != rows {
                bail!("baseline {copy} stored {stored} of {rows} rows");
            }
            Ok(())
        };

        let copy = format!("baseline_rowbinary_client.{table}");
        let took = server.insert_rowbinary(&copy, &rb_file)?;
        check(&copy)?;
        b.rowbinary_client.add(rows, rb_bytes, took);

        let copy = format!("baseline_rowbinary_http.{table}");
        let body = vec![std::fs::read(&rb_file)?];
        std::fs::remove_file(&rb_file)?;
        let took = server.insert_http(&copy, "RowBinary", &body)?;
        drop(body);
        check(&copy)?;
        b.rowbinary_http.add(rows, rb_bytes, took);

        let copy = format!("baseline_json.{table}");
        let chunks = Server::json_chunks(&js_file, json_chunk_bytes)?;
        std::fs::remove_file(&js_file)?;
        let took = server.insert_http(&copy, "JSONEachRow", &chunks)?;
        drop(chunks);
        check(&copy)?;
        b.json_http.add(rows, js_bytes, took);
    }
    Ok(b)
}

impl Baseline {
    fn add(&mut self, rows: u64, bytes: u64, took: Duration) {
        self.rows += rows;
        self.bytes += bytes;
        self.seconds += took.as_secs_f64();
        self.rows_per_s = self.rows as f64 / self.seconds.max(1e-9);
        self.mb_per_s = self.bytes as f64 / self.seconds.max(1e-9) / 1e6;
    }
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.1} ms"))
}

fn print_report(r: &Report) {
    println!("\n### {} — {} — {} agents\n", r.label, r.mode, r.agents);
    println!("{}\n", r.setup);
    println!(
        "mean batch: {:.0} rows, {:.0} bytes; measured {:.1} s; sessions held at the end of the window: {} \
         (collector's connected_agents: {}); failed sessions: {}; late rate ticks: {}; \
         collector flushes/s: {}, mean INSERT: {} ms\n",
        r.batch_rows_mean,
        r.frame_bytes_mean,
        r.measured_s,
        r.sessions_held,
        r.collector_connected_agents.map_or_else(|| "?".to_owned(), |v| format!("{v:.0}")),
        r.failed_sessions,
        r.late_ticks,
        r.flushes_per_s.map_or_else(|| "?".to_owned(), |v| format!("{v:.2}")),
        r.insert_ms_mean.map_or_else(|| "?".to_owned(), |v| format!("{v:.0}")),
    );
    println!("| rows/s | (GPU / process) | batches/s | MB/s (frames) | ack p50 | ack p99 | ack max |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {:.0} | {:.0} / {:.0} | {:.0} | {:.1} | {} | {} | {} |\n",
        r.rows_per_s,
        r.gpu_rows_per_s,
        r.process_rows_per_s,
        r.batches_per_s,
        r.mb_per_s,
        opt_ms(r.ack_p50_ms),
        opt_ms(r.ack_p99_ms),
        opt_ms(r.ack_max_ms)
    );
    println!("| process | CPU, % of one core | RSS | peak RSS | threads |");
    println!("|---|---:|---:|---:|---:|");
    for (name, u) in
        [("oomlens-collector", &r.collector), ("clickhouse-server", &r.clickhouse), ("loadgen", &r.loadgen)]
    {
        println!(
            "| {name} | {:.1} % | {:.1} MiB | {:.1} MiB | {} |",
            u.cpu_pct_of_core,
            u.memory.rss_kib as f64 / 1024.0,
            u.memory.peak_rss_kib as f64 / 1024.0,
            u.memory.threads
        );
    }
    println!(
        "\nacknowledged (whole run): {} GPU + {} process rows, {} distinct events ({} sent); in ClickHouse: {} + {} rows, \
         {} distinct events → {}",
        r.acked_rows_total.gpu,
        r.acked_rows_total.process,
        r.acked_distinct_events,
        r.acked_rows_total.events,
        r.stored_rows_total.gpu,
        r.stored_rows_total.process,
        r.stored_distinct_events,
        if r.stored_equals_acked { "all stored" } else { "DIFFERENT" }
    );
    if let (Some(rb), Some(rh), Some(js)) =
        (&r.baseline_rowbinary_client, &r.baseline_rowbinary_http, &r.baseline_json_http)
    {
        println!("\n| path, same {} rows | seconds | rows/s | MB/s (its input) | pipeline ÷ it |", rb.rows);
        println!("|---|---:|---:|---:|---:|");
        println!(
            "| oomlens pipeline (agents → QUIC → collector → ClickHouse) | {:.1} (window) | {:.0} | {:.1} (frames) | 1.00 |",
            r.measured_s, r.rows_per_s, r.mb_per_s
        );
        for (name, b) in [
            ("(a) clickhouse-client INSERT … FORMAT RowBinary < file", rb),
            ("(a′) RowBinary over HTTP, one POST", rh),
            ("(b) JSONEachRow over HTTP, 10 MB POSTs", js),
        ] {
            println!(
                "| {name} | {:.2} | {:.0} | {:.1} | {:.2} |",
                b.seconds,
                b.rows_per_s,
                b.mb_per_s,
                r.rows_per_s / b.rows_per_s.max(1e-9)
            );
        }
    }
    if !r.errors.is_empty() {
        println!("\nfirst session errors:");
        for e in &r.errors {
            println!("* {e}");
        }
    }
}
