//! The collector's Prometheus metrics (served on `/metrics` by `oomlens_schema::telemetry`):
//! connection and frame counters owned here, and the ClickHouse sink's counters read at scrape time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::clickhouse::sink::SinkStats;

/// Label set.
pub type Labels = Vec<(&'static str, String)>;

/// Connection and frame metrics.
#[derive(Debug)]
pub struct CollectorMetrics {
    /// Agents connected now.
    pub connected_agents: Gauge,
    /// Sessions accepted (after TLS and Hello).
    pub sessions: Counter,
    /// Frames received, by kind.
    pub frames_in: Family<Labels, Counter>,
    /// Frame bytes received.
    pub bytes_in: Counter,
    /// Refused connections and frames, by reason.
    pub rejects: Family<Labels, Counter>,
    /// TLS material reloads, by result (`ok`, `error`).
    pub tls_reloads: Family<Labels, Counter>,
    /// Sessions whose `Hello` claimed another node or cluster than the certificate (the
    /// certificate's identity was used).
    pub identity_mismatches: Counter,
    /// Batches that were already stored (re-sent) and acknowledged without a second insert.
    pub duplicate_batches: Counter,
    /// Seconds from receiving a batch to acknowledging it.
    pub ack_latency_seconds: Histogram,
    /// Frame bytes accepted from all connections and not yet stored (or dropped).
    pub bytes_in_flight: Gauge,
    /// Seconds connections spent blocked on the bytes-in-flight caps (not reading their streams).
    pub byte_cap_wait_seconds: Counter<f64, AtomicU64>,
    /// Frames that had to wait for the bytes-in-flight caps.
    pub byte_cap_waits: Counter,
    /// Connections blocked on the bytes-in-flight caps right now (not reading their streams).
    pub byte_cap_blocked: Gauge,
    /// 1 while ClickHouse answers and the writer is not failing, else 0 (`/readyz` follows it).
    pub clickhouse_up: Gauge,
    /// OOM events whose attribution the attributor stored (`oom_attributions`).
    pub attributed_events: Counter,
    /// Seconds per attributor pass.
    pub attribution_pass_seconds: Histogram,
    /// Attributor passes that failed.
    pub attribution_errors: Counter,
    /// Settled events without a stored attribution at the start of the last attributor pass.
    pub attribution_pending: Gauge,
}

impl CollectorMetrics {
    /// Creates and registers the metrics under `oomlens_collector`, plus the sink's counters.
    pub fn register(registry: &mut Registry, sink: Option<Arc<SinkStats>>) -> Arc<Self> {
        let m = CollectorMetrics {
            connected_agents: Gauge::default(),
            sessions: Counter::default(),
            frames_in: Family::default(),
            bytes_in: Counter::default(),
            rejects: Family::default(),
            tls_reloads: Family::default(),
            identity_mismatches: Counter::default(),
            duplicate_batches: Counter::default(),
            ack_latency_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            bytes_in_flight: Gauge::default(),
            byte_cap_wait_seconds: Counter::default(),
            byte_cap_waits: Counter::default(),
            byte_cap_blocked: Gauge::default(),
            clickhouse_up: Gauge::default(),
            attributed_events: Counter::default(),
            attribution_pass_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 16)),
            attribution_errors: Counter::default(),
            attribution_pending: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("oomlens_collector");
        r.register("connected_agents", "Agents connected now", m.connected_agents.clone());
        r.register("sessions", "Agent sessions accepted", m.sessions.clone());
        r.register("frames_in", "Frames received by kind", m.frames_in.clone());
        r.register("bytes_in", "Frame bytes received", m.bytes_in.clone());
        r.register("rejects", "Refused connections and frames by reason", m.rejects.clone());
        r.register("tls_reloads", "TLS material reloads by result", m.tls_reloads.clone());
        r.register(
            "identity_mismatches",
            "Sessions whose Hello claimed another node or cluster than the certificate",
            m.identity_mismatches.clone(),
        );
        r.register(
            "duplicate_batches",
            "Re-sent batches acknowledged without a second insert",
            m.duplicate_batches.clone(),
        );
        r.register("ack_latency_seconds", "Batch received to acknowledged", m.ack_latency_seconds.clone());
        r.register(
            "bytes_in_flight",
            "Frame bytes accepted and not yet stored (all connections)",
            m.bytes_in_flight.clone(),
        );
        r.register(
            "byte_cap_wait_seconds",
            "Time connections spent blocked on the bytes-in-flight caps",
            m.byte_cap_wait_seconds.clone(),
        );
        r.register(
            "byte_cap_waits",
            "Frames that waited for the bytes-in-flight caps",
            m.byte_cap_waits.clone(),
        );
        r.register(
            "byte_cap_blocked",
            "Connections blocked on the bytes-in-flight caps now",
            m.byte_cap_blocked.clone(),
        );
        r.register(
            "clickhouse_up",
            "1 while ClickHouse answers and inserts succeed",
            m.clickhouse_up.clone(),
        );
        r.register(
            "attributed_events",
            "OOM events whose attribution the attributor stored",
            m.attributed_events.clone(),
        );
        r.register(
            "attribution_pass_seconds",
            "Duration of attributor passes",
            m.attribution_pass_seconds.clone(),
        );
        r.register("attribution_errors", "Attributor passes that failed", m.attribution_errors.clone());
        r.register(
            "attribution_pending",
            "Settled OOM events without a stored attribution at the start of the last pass",
            m.attribution_pending.clone(),
        );
        r.register_collector(Box::new(ProcessMemory));
        if let Some(stats) = sink {
            r.register(
                "insert_duration_seconds",
                "Duration of the successful ClickHouse INSERT statements",
                stats.insert_duration.histogram.clone(),
            );
            r.register_collector(Box::new(SinkCollector(stats)));
        }
        Arc::new(m)
    }

    /// Counts a refusal.
    pub fn reject(&self, reason: &str) {
        self.rejects.get_or_create(&vec![("reason", reason.to_owned())]).inc();
    }

    /// Counts a TLS reload attempt (`ok` or `error`).
    pub fn tls_reload(&self, result: &str) {
        self.tls_reloads.get_or_create(&vec![("result", result.to_owned())]).inc();
    }
}

/// The collector process's resident memory (`VmRSS` of `/proc/self/status`), in bytes.
pub fn resident_memory_bytes() -> Option<u64> {
    proc_status_kib("VmRSS:").map(|kib| kib * 1024)
}

/// The collector process's peak resident memory (`VmHWM` of `/proc/self/status`), in bytes.
pub fn peak_resident_memory_bytes() -> Option<u64> {
    proc_status_kib("VmHWM:").map(|kib| kib * 1024)
}

fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// Exposes the process's resident memory at scrape time.
#[derive(Debug)]
struct ProcessMemory;

impl Collector for ProcessMemory {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(rss) = resident_memory_bytes() {
            gauge(&mut enc, "resident_memory_bytes", "Resident memory of the collector process", rss as i64)?;
        }
        Ok(())
    }
}

/// Exposes [`SinkStats`] at scrape time.
#[derive(Debug)]
struct SinkCollector(Arc<SinkStats>);

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(v);
    c.encode(enc.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(v);
    g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for SinkCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        counter(&mut enc, "batches_in", "Batches handed to the ClickHouse writer", get(&s.batches_in))?;
        counter(&mut enc, "batches_stored", "Batches stored in ClickHouse", get(&s.batches_stored))?;
        counter(&mut enc, "gpu_sample_rows_in", "gpu_samples rows received", get(&s.gpu_rows_in))?;
        counter(
            &mut enc,
            "process_sample_rows_in",
            "process_samples rows received",
            get(&s.process_rows_in),
        )?;
        counter(&mut enc, "event_rows_in", "oom_events rows received", get(&s.event_rows_in))?;
        counter(&mut enc, "rows_written", "Rows written to ClickHouse (all tables)", get(&s.rows_written))?;
        counter(&mut enc, "insert_flushes", "Insert flushes completed", get(&s.insert_batches))?;
        counter(
            &mut enc,
            "clickhouse_errors",
            "Failed ClickHouse inserts (each retried)",
            get(&s.insert_errors),
        )?;
        gauge(&mut enc, "queue_depth", "Batches waiting for the writer", get(&s.queue_depth) as i64)?;
        gauge(
            &mut enc,
            "pending_batches",
            "Batches taken by the writer, not yet stored",
            get(&s.pending_batches) as i64,
        )?;
        Ok(())
    }
}

// --- Alerts (`crate::alert`) and the attributed OOM events by scenario ---------------------------

/// A histogram family (one histogram per label set).
pub type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn send_seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn alert_latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.25, 2.0, 18))
}

/// The attributed OOM events by scenario (what the OOM-rate alert rule reads) and the alert
/// senders' metrics, labelled by target kind (`alertmanager`, `webhook`).
#[derive(Debug)]
pub struct AlertMetrics {
    /// OOM events attributed for the first time by this collector's attributor, by scenario.
    pub oom_events_attributed: Family<Labels, Counter>,
    /// Alerts a target accepted (2xx), by target kind.
    pub alerts_sent: Family<Labels, Counter>,
    /// Alerts given up, by target kind and reason (`rejected`: a 4xx, not retried; `retries`:
    /// still failing after `alerts.max_retries`; `encode`: the body could not be built).
    pub alerts_failed: Family<Labels, Counter>,
    /// Alerts dropped from a full queue (the oldest waiting one), by target kind.
    pub alerts_dropped: Family<Labels, Counter>,
    /// Alerts not queued because the target already got the event, by target kind.
    pub alerts_deduplicated: Family<Labels, Counter>,
    /// Attributed events that did not alert, by reason (`confidence`, `scenario`, `age`).
    pub alerts_filtered: Family<Labels, Counter>,
    /// Alerts waiting to be sent, by target kind.
    pub alerts_queued: Family<Labels, Gauge>,
    /// Seconds per request to a target (each try), by target kind.
    pub alert_send_seconds: HistogramFamily,
    /// Seconds from an OOM (its failure time) to its alert accepted by a target, by target kind
    /// (the attribution's settle delay and interval included).
    pub alert_latency_seconds: HistogramFamily,
}

impl AlertMetrics {
    /// Creates and registers the metrics under `oomlens_collector` (every scenario's counter at 0).
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let m = AlertMetrics {
            oom_events_attributed: Family::default(),
            alerts_sent: Family::default(),
            alerts_failed: Family::default(),
            alerts_dropped: Family::default(),
            alerts_deduplicated: Family::default(),
            alerts_filtered: Family::default(),
            alerts_queued: Family::default(),
            alert_send_seconds: Family::new_with_constructor(send_seconds_histogram),
            alert_latency_seconds: Family::new_with_constructor(alert_latency_histogram),
        };
        for s in oomlens_schema::Scenario::ALL {
            let _ = m.oom_events_attributed.get_or_create(&vec![("scenario", s.as_str().to_owned())]);
        }
        let r = registry.sub_registry_with_prefix("oomlens_collector");
        r.register(
            "oom_events_attributed",
            "OOM events attributed for the first time by this collector, by scenario",
            m.oom_events_attributed.clone(),
        );
        r.register("alerts_sent", "OOM alerts accepted by a target, by target kind", m.alerts_sent.clone());
        r.register(
            "alerts_failed",
            "OOM alerts given up (rejected or out of retries), by target kind and reason",
            m.alerts_failed.clone(),
        );
        r.register(
            "alerts_dropped",
            "OOM alerts dropped from a full queue (the oldest), by target kind",
            m.alerts_dropped.clone(),
        );
        r.register(
            "alerts_deduplicated",
            "OOM alerts not sent again for an event the target already got, by target kind",
            m.alerts_deduplicated.clone(),
        );
        r.register(
            "alerts_filtered",
            "Attributed OOM events that did not alert, by reason",
            m.alerts_filtered.clone(),
        );
        r.register("alerts_queued", "OOM alerts waiting to be sent, by target kind", m.alerts_queued.clone());
        r.register(
            "alert_send_seconds",
            "Duration of one request to an alert target, by target kind",
            m.alert_send_seconds.clone(),
        );
        r.register(
            "alert_latency_seconds",
            "OOM failure to its alert accepted by a target, by target kind",
            m.alert_latency_seconds.clone(),
        );
        Arc::new(m)
    }

    /// Creates the children of target kind `target` (exported at 0 before the first alert).
    pub fn init_target(&self, target: &str) {
        let l = target_labels(target);
        let _ = self.alerts_sent.get_or_create(&l);
        let _ = self.alerts_dropped.get_or_create(&l);
        let _ = self.alerts_deduplicated.get_or_create(&l);
        let _ = self.alerts_queued.get_or_create(&l);
        for reason in ["rejected", "retries"] {
            let _ = self.alerts_failed.get_or_create(&failed_labels(target, reason));
        }
    }

    /// Counts rows of newly attributed events by their scenario.
    pub fn count_attributed<'a>(&self, scenarios: impl IntoIterator<Item = &'a str>) {
        for s in scenarios {
            self.oom_events_attributed.get_or_create(&vec![("scenario", s.to_owned())]).inc();
        }
    }
}

/// `{target="…"}`.
pub fn target_labels(target: &str) -> Labels {
    vec![("target", target.to_owned())]
}

/// `{target="…", reason="…"}`.
pub fn failed_labels(target: &str, reason: &str) -> Labels {
    vec![("target", target.to_owned()), ("reason", reason.to_owned())]
}
