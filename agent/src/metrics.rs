//! The agent's Prometheus metrics (served on `/metrics` by `oomlens_schema::telemetry`).

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label set `{kind=…}` / `{reason=…}`.
pub type Labels = Vec<(&'static str, String)>;

/// Every metric the agent exports.
#[derive(Debug)]
pub struct AgentMetrics {
    /// GPU samples taken.
    pub gpu_samples: Counter,
    /// Process samples taken.
    pub process_samples: Counter,
    /// Events detected, by kind and source.
    pub events: Family<Labels, Counter>,
    /// Fields that could not be read (recorded as missing, never zero).
    pub missing_fields: Counter,
    /// Driver calls that timed out.
    pub timed_out_calls: Counter,
    /// Batches built.
    pub batches_built: Counter,
    /// Batch frames written to a collector (re-sends included).
    pub batches_sent: Counter,
    /// Batches acknowledged.
    pub batches_acked: Counter,
    /// Batches not yet acknowledged.
    pub unacked_batches: Gauge,
    /// Bytes held for un-acknowledged batches.
    pub spool_bytes: Gauge,
    /// Rows dropped because the spool was full, by table.
    pub dropped_rows: Family<Labels, Counter>,
    /// Connections established.
    pub connects: Counter,
    /// Connection attempts or sessions that failed, by reason.
    pub connect_failures: Family<Labels, Counter>,
    /// Client certificate / CA reloads before a connection attempt, by result (`ok`, `error`).
    pub tls_reloads: Family<Labels, Counter>,
    /// 1 while connected to a collector.
    pub connected: Gauge,
    /// Seconds from sending a batch to its acknowledgement.
    pub ack_latency_seconds: Histogram,
    /// Hook socket: request lines by result (`ok`, `ping`, or the refusal reason).
    pub hook_requests: Family<Labels, Counter>,
    /// Hook socket: connections by result (`accepted`, `refused`, `bind_failed`).
    pub hook_connections: Family<Labels, Counter>,
    /// Flight recorder: OOM events that flushed a held window.
    pub recorder_flushes: Counter,
    /// Flight recorder: held samples flushed before OOMs, by table.
    pub recorder_flushed_samples: Family<Labels, Counter>,
    /// Flight recorder: samples held now, by table.
    pub recorder_held_samples: Family<Labels, Gauge>,
    /// Flight recorder: GPU samples sent at the fast rate because their GPU was hot.
    pub recorder_hot_samples: Counter,
    /// Flight recorder: held samples that aged out unsent.
    pub recorder_evicted_samples: Counter,
    /// Flight recorder: held samples forgotten because the clock went backwards.
    pub recorder_clock_resets: Counter,
    /// Log lines read by the follower.
    pub log_lines_read: Counter,
    /// Log lines longer than `[logs] max_line_bytes` (cut).
    pub log_lines_cut: Counter,
    /// Log files followed now.
    pub log_files_followed: Gauge,
    /// Log paths refused: resolving outside the followed roots (a symlink out) or not a regular file.
    pub log_files_refused: Counter,
    /// 1 when the kernel log could not be read.
    pub kmsg_unreadable: Gauge,
    /// Kernel log records lost to ring-buffer overruns (`EPIPE`, sequence gaps).
    pub kmsg_overruns: Counter,
    /// Events merged or dropped as duplicates, by rule (`suspected`, `cross_source`, `duplicate`, `evicted`).
    pub merged_events: Family<Labels, Counter>,
    /// Disk spool: records skipped because their checksum failed (at start-up or when read back).
    pub spool_corrupt_records: Counter,
    /// Disk spool: bytes of torn segment tails truncated at start-up.
    pub spool_truncated_bytes: Counter,
    /// Disk spool: batches found pending at start-up (re-sent).
    pub spool_replayed_batches: Counter,
    /// Disk spool: writes the disk refused (full, read-only, I/O errors).
    pub spool_write_errors: Counter,
    /// Disk spool: 1 while batches wait in memory because the disk refuses writes.
    pub spool_degraded: Gauge,
    /// Disk spool: bytes of batches waiting in memory because the disk refuses writes.
    pub spool_memory_bytes: Gauge,
    /// Event journal: events written before entering the merge window.
    pub event_journal_appends: Counter,
    /// Event journal: events detected but not yet in the spool (held, or in an unsent batch).
    pub event_journal_outstanding: Gauge,
    /// Event journal: events found outstanding at start-up and handed back to the merger.
    pub event_journal_replayed: Counter,
    /// Event journal: writes or syncs that failed (the event still goes out, without the guarantee).
    pub event_journal_errors: Counter,
}

impl AgentMetrics {
    /// Creates the metrics and registers them under the `oomlens_agent` prefix.
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let m = AgentMetrics {
            gpu_samples: Counter::default(),
            process_samples: Counter::default(),
            events: Family::default(),
            missing_fields: Counter::default(),
            timed_out_calls: Counter::default(),
            batches_built: Counter::default(),
            batches_sent: Counter::default(),
            batches_acked: Counter::default(),
            unacked_batches: Gauge::default(),
            spool_bytes: Gauge::default(),
            dropped_rows: Family::default(),
            connects: Counter::default(),
            connect_failures: Family::default(),
            tls_reloads: Family::default(),
            connected: Gauge::default(),
            ack_latency_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            hook_requests: Family::default(),
            hook_connections: Family::default(),
            recorder_flushes: Counter::default(),
            recorder_flushed_samples: Family::default(),
            recorder_held_samples: Family::default(),
            recorder_hot_samples: Counter::default(),
            recorder_evicted_samples: Counter::default(),
            recorder_clock_resets: Counter::default(),
            log_lines_read: Counter::default(),
            log_lines_cut: Counter::default(),
            log_files_followed: Gauge::default(),
            log_files_refused: Counter::default(),
            kmsg_unreadable: Gauge::default(),
            kmsg_overruns: Counter::default(),
            merged_events: Family::default(),
            spool_corrupt_records: Counter::default(),
            spool_truncated_bytes: Counter::default(),
            spool_replayed_batches: Counter::default(),
            spool_write_errors: Counter::default(),
            spool_degraded: Gauge::default(),
            spool_memory_bytes: Gauge::default(),
            event_journal_appends: Counter::default(),
            event_journal_outstanding: Gauge::default(),
            event_journal_replayed: Counter::default(),
            event_journal_errors: Counter::default(),
        };
        let r = registry.sub_registry_with_prefix("oomlens_agent");
        r.register("gpu_samples", "GPU samples taken", m.gpu_samples.clone());
        r.register("process_samples", "Process samples taken", m.process_samples.clone());
        r.register("events", "Events detected by kind and source", m.events.clone());
        r.register(
            "missing_fields",
            "Readings that failed and were recorded as missing",
            m.missing_fields.clone(),
        );
        r.register("timed_out_calls", "Driver calls that timed out", m.timed_out_calls.clone());
        r.register("batches_built", "Batches built", m.batches_built.clone());
        r.register("batches_sent", "Batch frames written (re-sends included)", m.batches_sent.clone());
        r.register("batches_acked", "Batches acknowledged by a collector", m.batches_acked.clone());
        r.register("unacked_batches", "Batches waiting for an acknowledgement", m.unacked_batches.clone());
        r.register("spool_bytes", "Bytes held for unacknowledged batches", m.spool_bytes.clone());
        r.register("dropped_rows", "Rows dropped because the spool was full", m.dropped_rows.clone());
        r.register("connects", "Collector sessions established", m.connects.clone());
        r.register("connect_failures", "Failed connection attempts and sessions", m.connect_failures.clone());
        r.register("tls_reloads", "TLS material reloads by result", m.tls_reloads.clone());
        r.register("connected", "1 while connected to a collector", m.connected.clone());
        r.register("ack_latency_seconds", "Batch send to acknowledgement", m.ack_latency_seconds.clone());
        r.register("hook_requests", "Hook socket request lines by result", m.hook_requests.clone());
        r.register("hook_connections", "Hook socket connections by result", m.hook_connections.clone());
        r.register("recorder_flushes", "OOM events that flushed a held window", m.recorder_flushes.clone());
        r.register(
            "recorder_flushed_samples",
            "Held samples flushed before OOMs, by table",
            m.recorder_flushed_samples.clone(),
        );
        r.register(
            "recorder_held_samples",
            "Samples held by the flight recorder, by table",
            m.recorder_held_samples.clone(),
        );
        r.register(
            "recorder_hot_samples",
            "GPU samples sent at the fast rate (GPU hot)",
            m.recorder_hot_samples.clone(),
        );
        r.register(
            "recorder_evicted_samples",
            "Held samples that aged out unsent",
            m.recorder_evicted_samples.clone(),
        );
        r.register(
            "recorder_clock_resets",
            "Held samples forgotten because the clock went backwards",
            m.recorder_clock_resets.clone(),
        );
        r.register("log_lines_read", "Log lines read by the follower", m.log_lines_read.clone());
        r.register("log_lines_cut", "Log lines cut at [logs] max_line_bytes", m.log_lines_cut.clone());
        r.register("log_files_followed", "Log files followed now", m.log_files_followed.clone());
        r.register(
            "log_files_refused",
            "Log paths refused: resolving outside the followed roots (a symlink out) or not a regular file",
            m.log_files_refused.clone(),
        );
        r.register("kmsg_unreadable", "1 when the kernel log cannot be read", m.kmsg_unreadable.clone());
        r.register("kmsg_overruns", "Kernel log ring-buffer overruns", m.kmsg_overruns.clone());
        r.register("merged_events", "Events merged or deduplicated, by rule", m.merged_events.clone());
        r.register(
            "spool_corrupt_records",
            "Spool records or ranges skipped because their checksum failed",
            m.spool_corrupt_records.clone(),
        );
        r.register(
            "spool_truncated_bytes",
            "Bytes of torn spool segment tails truncated at start-up",
            m.spool_truncated_bytes.clone(),
        );
        r.register(
            "spool_replayed_batches",
            "Batches found in the disk spool at start-up and re-sent",
            m.spool_replayed_batches.clone(),
        );
        r.register(
            "spool_write_errors",
            "Disk spool writes the disk refused (full, read-only, I/O errors); the batch waits in memory",
            m.spool_write_errors.clone(),
        );
        r.register(
            "spool_degraded",
            "1 while batches wait in memory because the spool's disk refuses writes",
            m.spool_degraded.clone(),
        );
        r.register(
            "spool_memory_bytes",
            "Bytes of batches waiting in memory because the spool's disk refuses writes",
            m.spool_memory_bytes.clone(),
        );
        r.register(
            "event_journal_appends",
            "Events written to the pending-events journal",
            m.event_journal_appends.clone(),
        );
        r.register(
            "event_journal_outstanding",
            "Journaled events not yet in the spool",
            m.event_journal_outstanding.clone(),
        );
        r.register(
            "event_journal_replayed",
            "Journaled events replayed at start-up",
            m.event_journal_replayed.clone(),
        );
        r.register(
            "event_journal_errors",
            "Event journal writes or syncs that failed",
            m.event_journal_errors.clone(),
        );
        Arc::new(m)
    }

    /// Counts a failure with a reason label.
    pub fn connect_failed(&self, reason: &str) {
        self.connect_failures.get_or_create(&vec![("reason", reason.to_owned())]).inc();
    }
}
