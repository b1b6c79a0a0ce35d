//! Runs a whole agent: source → sampler thread → batcher → uplink, plus the telemetry endpoint,
//! until the source's duration ends or a stop is requested; then drains what is pending.
//!
//! Telemetry: `/readyz` answers 200 exactly while the uplink has a live session with a collector
//! (see `uplink.rs`); `/healthz` is the shared endpoint's "process alive".

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use oomlens_schema::Hello;
use oomlens_schema::telemetry::{Degraded, Heartbeat, Readiness};
use oomlens_schema::tls::TlsFiles;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::config::{AgentConfig, SourceKind, ValidConfig};
use crate::metrics::AgentMetrics;
use crate::pipeline::recorder::{FlightRecorder, RecorderError};
use crate::pipeline::sampler::{BatcherConfig, Clock, SamplerConfig, now_ms, run_batcher, spawn_sampler};
use crate::source::Source;
use crate::source::nvml::{NvmlError, NvmlOptions, NvmlSource};
use crate::source::sim::{SimError, Simulator};
use crate::spool::{DiskSpool, EventJournal, MemorySpool, Spool, SpoolError};
use crate::uplink::{Uplink, UplinkConfig, UplinkError, UplinkTotals};

/// The agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// NVML is unusable.
    #[error(transparent)]
    Nvml(#[from] NvmlError),
    /// The simulator configuration is wrong.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The uplink could not start.
    #[error(transparent)]
    Uplink(#[from] UplinkError),
    /// The telemetry endpoint could not bind.
    #[error("cannot serve telemetry on {addr}: {source}")]
    Telemetry {
        /// The configured `[telemetry] listen` address.
        addr: std::net::SocketAddr,
        /// Why binding it failed (e.g. address in use).
        source: std::io::Error,
    },
    /// The flight recorder settings are invalid.
    #[error(transparent)]
    Recorder(#[from] RecorderError),
    /// The sampler thread could not start.
    #[error("cannot start the sampler thread: {0}")]
    Thread(std::io::Error),
    /// The on-disk spool could not be opened.
    #[error(transparent)]
    Spool(#[from] SpoolError),
}

/// Opens the configured spool: the disk spool (its boot id and next sequence number carry over
/// restarts) or the memory spool (a random boot id, sequence numbers from 1).
pub fn open_spool(
    cfg: &ValidConfig,
    metrics: &Arc<AgentMetrics>,
    degraded: &Degraded,
) -> Result<(Box<dyn Spool>, u64, u64), RunError> {
    let Some(dir) = &cfg.spool.dir else {
        return Ok((
            Box::new(MemorySpool::new(usize::try_from(cfg.spool.cap_bytes()).unwrap_or(usize::MAX))),
            rand::random::<u64>() | 1,
            1,
        ));
    };
    let (mut spool, state) = DiskSpool::open(dir, cfg.spool.cap_bytes(), cfg.spool.fsync)?;
    let r = state.recovery;
    metrics.spool_corrupt_records.inc_by(r.corrupt_ranges);
    metrics.spool_truncated_bytes.inc_by(r.truncated_bytes);
    metrics.spool_replayed_batches.inc_by(r.replayed_batches);
    spool.set_metrics(metrics.clone());
    spool.set_memory_fallback(cfg.spool.memory_fallback_bytes, degraded.clone());
    info!(dir = %dir.display(), boot_id = state.boot_id, next_seq = state.next_seq, replayed_batches = r.replayed_batches, "disk spool open");
    Ok((Box::new(spool), state.boot_id, state.next_seq))
}

/// The batcher's event stage; with a disk spool it journals events (`spool/journal.rs`) and
/// takes back the events a previous run detected but did not spool. Call it after
/// [`open_spool`], whose directory lock covers the journal.
pub fn open_event_stage(
    cfg: &ValidConfig,
    metrics: &Arc<AgentMetrics>,
) -> Result<crate::pipeline::event_stage::EventStage, RunError> {
    let stage = crate::pipeline::event_stage::EventStage::from_config(&cfg.detect, Some(metrics.clone()));
    let Some(dir) = &cfg.spool.dir else {
        return Ok(stage);
    };
    let (journal, replay) = EventJournal::open(dir, cfg.spool.fsync)?;
    metrics.spool_corrupt_records.inc_by(replay.corrupt_ranges);
    metrics.spool_truncated_bytes.inc_by(replay.truncated_bytes);
    Ok(stage.with_journal(journal, replay.pending))
}

/// Builds the configured source.
pub fn open_source(cfg: &ValidConfig, start_ms: i64) -> Result<Box<dyn Source>, RunError> {
    Ok(match cfg.source.kind {
        SourceKind::Nvml => Box::new(NvmlSource::open(NvmlOptions {
            call_timeout: Duration::from_millis(cfg.source.nvml_call_timeout_ms),
            proc_root: cfg.workload.proc_root.clone(),
            workload: cfg.workload.clone(),
            ..NvmlOptions::default()
        })?),
        SourceKind::Simulator => Box::new(Simulator::new(&cfg.agent.node, cfg.simulator.clone(), start_ms)?),
        SourceKind::None => {
            warn!(
                "source.kind = \"none\": no GPU readings — only job logs, the kernel log and the hook report \
                 failures; no samples, no vanished-process detection, no flight recorder, and events whose \
                 message has no capacity keep none"
            );
            Box::new(crate::source::NoGpus)
        }
    })
}

/// How long the sampler may go without taking a reading before `/healthz` reports the agent
/// stalled (a wedged sampler or batcher): ten reading intervals of real time, at least 30 s (NVML
/// calls that hang time out on their own threads well within that).
fn sampler_max_silence(cfg: &ValidConfig) -> Duration {
    let interval_ms = cfg.recorder_settings().sample_interval_ms().max(1) as f64;
    let speed = if cfg.source.kind == SourceKind::Simulator { cfg.source.speed.max(1e-3) } else { 1.0 };
    Duration::from_secs(30).max(Duration::from_secs_f64(10.0 * interval_ms / 1000.0 / speed))
}

/// Runs the agent until its source's duration ends (then drains) or `stop` turns true.
pub async fn run_agent(cfg: ValidConfig, mut stop: watch::Receiver<bool>) -> Result<UplinkTotals, RunError> {
    let mut registry = Registry::default();
    let metrics = AgentMetrics::register(&mut registry);
    let readiness = Readiness::default();
    let degraded = Degraded::default();
    let heartbeat = Heartbeat::watching(sampler_max_silence(&cfg));
    let telemetry = match cfg.telemetry.listen {
        Some(addr) => {
            let (bound, task) = oomlens_schema::telemetry::serve(
                addr,
                Arc::new(registry),
                readiness.clone(),
                heartbeat.clone(),
                degraded.clone(),
            )
            .await
            .map_err(|source| RunError::Telemetry { addr, source })?;
            info!(%bound, "telemetry endpoint listening");
            Some(task)
        }
        None => None,
    };

    let start_ms = if cfg.source.start_ms > 0 { cfg.source.start_ms } else { now_ms() };
    let source = open_source(&cfg, start_ms)?;
    // Kubernetes: which pod holds which GPU, polled from the kubelet (when its socket exists).
    let pods = crate::workload::podresources::PodDirectory::new();
    let (pods_stop_tx, pods_stop_rx) = watch::channel(false);
    let pods_task = cfg.pod_resources.enabled.then(|| {
        tokio::spawn(crate::workload::podresources::run_poller(
            cfg.pod_resources.clone(),
            pods.clone(),
            pods_stop_rx,
        ))
    });
    let source: Box<dyn Source> = if pods_task.is_some() {
        Box::new(crate::source::pods::PodAttributed::new(source, pods.clone()))
    } else {
        source
    };
    let (spool, boot_id, first_seq) = open_spool(&cfg, &metrics, &degraded)?;
    // After the spool: its directory lock covers the journal.
    let detect = open_event_stage(&cfg, &metrics)?;
    let hello = Hello {
        agent_id: cfg.agent.agent_id.clone(),
        node: cfg.agent.node.clone(),
        cluster: cfg.agent.cluster.clone(),
        boot_id,
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        gpus: source.inventory(),
    };
    let inventory = hello.gpus.clone();
    let detect = detect.with_inventory(&inventory);
    info!(source = source.name(), gpus = hello.gpus.len(), node = %hello.node, boot_id = hello.boot_id, "agent starting");

    let u = &cfg.uplink;
    crate::uplink::check_collectors(&u.collectors).await?;
    let (uplink, handle) = Uplink::new(
        UplinkConfig {
            collectors: u.collectors.clone(),
            server_name: u.server_name.clone(),
            tls: TlsFiles { ca: u.ca.clone(), cert: u.cert.clone(), key: u.key.clone() },
            connect_timeout: AgentConfig::ms(u.connect_timeout_ms),
            idle_timeout: AgentConfig::ms(u.idle_timeout_ms),
            max_in_flight: u.max_in_flight,
            backoff_initial: Duration::from_millis(100),
            backoff_max: AgentConfig::ms(u.backoff_max_ms),
        },
        hello,
        spool,
        metrics.clone(),
    )?;
    let (uplink_stop_tx, uplink_stop_rx) = watch::channel(false);
    // `/readyz`: 200 exactly while a session with a collector is live.
    let uplink_task = tokio::spawn(uplink.with_readiness(readiness.clone()).run(uplink_stop_rx));

    let recorder = FlightRecorder::new(cfg.recorder_settings())?;
    let (tx, rx) = mpsc::channel(64);
    // Detector tasks hold clones of `tx` and drop them when this turns true (source done or stop).
    let (detect_stop_tx, detect_stop_rx) = watch::channel(false);
    let hook_task = crate::detect::hook::spawn_listener(
        &cfg.hook,
        &cfg.workload,
        tx.clone(),
        metrics.clone(),
        detect_stop_rx.clone(),
    );
    let mut resolver = crate::workload::WorkloadResolver::with_config(cfg.workload.clone());
    let log_pods = pods.clone();
    let log_task = crate::detect::follow::spawn_configured(
        &cfg.logs,
        Some(Box::new(move |pid| {
            let mut labels = resolver.labels(pid);
            log_pods.annotate(None, &mut labels);
            labels
        })),
        tx.clone(),
        detect_stop_rx.clone(),
        metrics.clone(),
    );
    let kmsg_task = crate::detect::kmsg::spawn_configured(
        &cfg.kmsg,
        cfg.source.kind == SourceKind::Simulator,
        &inventory,
        tx.clone(),
        detect_stop_rx.clone(),
        metrics.clone(),
    );
    let sampler_stop = Arc::new(AtomicBool::new(false));
    let clock = match cfg.source.kind {
        SourceKind::Nvml | SourceKind::None => Clock::Real,
        SourceKind::Simulator => Clock::Simulated { start_ms, speed: cfg.source.speed },
    };
    let duration = (cfg.source.duration_s > 0).then(|| Duration::from_secs(cfg.source.duration_s));
    let sampler = spawn_sampler(
        source,
        SamplerConfig {
            interval: Duration::from_millis(recorder.settings().sample_interval_ms() as u64),
            clock,
            duration,
        },
        tx,
        sampler_stop.clone(),
        heartbeat,
    )
    .map_err(RunError::Thread)?;
    let batcher = tokio::spawn(run_batcher(
        rx,
        handle.clone(),
        BatcherConfig {
            flush_every: AgentConfig::ms(u.batch_interval_ms),
            max_rows: u.batch_max_rows,
            first_seq,
        },
        metrics.clone(),
        recorder,
        detect,
    ));

    // Until the source is done or a stop is requested; then the detectors stop, and the batcher
    // ends once every sender is gone.
    let mut sampler_done = tokio::task::spawn_blocking(move || sampler.join());
    tokio::select! {
        _ = &mut sampler_done => {}
        _ = stop.changed() => {
            info!("stop requested: flushing");
            sampler_stop.store(true, Ordering::Relaxed);
            let _ = (&mut sampler_done).await;
        }
    }
    sampler_stop.store(true, Ordering::Relaxed);
    let _ = detect_stop_tx.send(true);
    drop(detect_stop_rx);
    if let Some(task) = hook_task {
        let _ = task.await;
    }
    for task in [log_task, kmsg_task].into_iter().flatten() {
        let _ = task.await;
    }
    let _ = batcher.await;

    handle.finish();
    let drain = AgentConfig::ms(u.drain_timeout_ms);
    if tokio::time::timeout(drain, handle.drained()).await.is_err() {
        let t = handle.totals();
        warn!(pending_batches = t.pending_batches, "drain timeout: pending batches not acknowledged");
    }
    let _ = uplink_stop_tx.send(true);
    let _ = pods_stop_tx.send(true);
    if let Some(task) = pods_task {
        let _ = task.await;
    }
    match uplink_task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.into()),
        Err(e) => warn!(error = %e, "uplink task failed"),
    }
    if let Some(t) = telemetry {
        t.abort();
    }
    let totals = handle.totals();
    info!(
        batches = totals.batches,
        acked_batches = totals.acked_batches,
        pending_batches = totals.pending_batches,
        events = totals.events,
        dropped_events = totals.dropped_events,
        dropped_samples = totals.dropped_gpu_samples + totals.dropped_process_samples,
        "agent stopped"
    );
    Ok(totals)
}
