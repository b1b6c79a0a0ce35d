//! Pure conversion of a wire [`Batch`] into ClickHouse rows.
//!
//! Rows are stamped with the authenticated [`AgentIdentity`] (cluster, node, agent id) — never
//! with anything the payload claims about itself. Optional readings stay `None` (NULL), never 0.

use oomlens_schema::rows::{AgentRow, GpuSampleRow, OomEventRow, ProcessSampleRow};
use oomlens_schema::{Batch, GpuSample, Label, OomEvent, ProcessSample};

use crate::identity::AgentIdentity;

/// Label keys that name a workload, in order of preference.
pub const WORKLOAD_KEYS: [&str; 4] = ["k8s.pod", "slurm.job_id", "job", "container"];

/// The rows of one batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchRows {
    /// `gpu_samples` rows.
    pub gpu_samples: Vec<GpuSampleRow>,
    /// `process_samples` rows.
    pub process_samples: Vec<ProcessSampleRow>,
    /// `oom_events` rows.
    pub events: Vec<OomEventRow>,
}

impl BatchRows {
    /// Rows in all tables.
    pub fn len(&self) -> usize {
        self.gpu_samples.len() + self.process_samples.len() + self.events.len()
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Converts a batch; `received_ms` is when the collector received it (epoch ms).
pub fn batch_rows(identity: &AgentIdentity, batch: &Batch, received_ms: i64) -> BatchRows {
    BatchRows {
        gpu_samples: batch.gpu_samples.iter().map(|s| gpu_sample_row(identity, s)).collect(),
        process_samples: batch.process_samples.iter().map(|p| process_sample_row(identity, p)).collect(),
        events: batch.events.iter().map(|e| event_row(identity, e, received_ms)).collect(),
    }
}

/// Converts a batch the collector owns (the hot path of `Sink::store`): process names and labels
/// are moved into the rows instead of copied, so a process row costs the three identity strings
/// and nothing else beyond its workload name. Same rows as [`batch_rows`].
pub fn batch_rows_owned(identity: &AgentIdentity, batch: Batch, received_ms: i64) -> BatchRows {
    let Batch { gpu_samples, process_samples, events, .. } = batch;
    BatchRows {
        gpu_samples: gpu_samples.iter().map(|s| gpu_sample_row(identity, s)).collect(),
        process_samples: process_samples.into_iter().map(|p| process_sample_row_owned(identity, p)).collect(),
        events: events.iter().map(|e| event_row(identity, e, received_ms)).collect(),
    }
}

/// The first present workload label (see [`WORKLOAD_KEYS`]), else `""`.
pub fn workload(labels: &[Label]) -> String {
    workload_str(labels).to_owned()
}

/// [`workload`], borrowed.
pub fn workload_str(labels: &[Label]) -> &str {
    WORKLOAD_KEYS
        .iter()
        .find_map(|key| labels.iter().find(|l| l.key == *key && !l.value.is_empty()))
        .map_or("", |l| l.value.as_str())
}

fn label_columns(labels: &[Label]) -> (Vec<String>, Vec<String>) {
    labels.iter().map(|l| (l.key.clone(), l.value.clone())).unzip()
}

/// One `gpu_samples` row.
pub fn gpu_sample_row(id: &AgentIdentity, s: &GpuSample) -> GpuSampleRow {
    GpuSampleRow {
        cluster: id.cluster.clone(),
        node: id.node.clone(),
        gpu_index: s.gpu_index,
        ts_ms: s.ts_ms,
        agent_id: id.agent_id.clone(),
        memory_used_bytes: s.memory_used_bytes,
        memory_free_bytes: s.memory_free_bytes,
        memory_total_bytes: s.memory_total_bytes,
        memory_reserved_bytes: s.memory_reserved_bytes,
        util_gpu_pct: s.util_gpu_pct,
        util_mem_pct: s.util_mem_pct,
        power_mw: s.power_mw,
        temperature_c: s.temperature_c,
        sm_clock_mhz: s.sm_clock_mhz,
        mem_clock_mhz: s.mem_clock_mhz,
    }
}

/// One `process_samples` row.
pub fn process_sample_row(id: &AgentIdentity, p: &ProcessSample) -> ProcessSampleRow {
    let (label_keys, label_values) = label_columns(&p.labels);
    ProcessSampleRow {
        cluster: id.cluster.clone(),
        node: id.node.clone(),
        gpu_index: p.gpu_index,
        ts_ms: p.ts_ms,
        pid: p.pid,
        agent_id: id.agent_id.clone(),
        process_name: p.name.clone(),
        used_bytes: p.used_bytes,
        workload: workload(&p.labels),
        label_keys,
        label_values,
    }
}

/// One `process_samples` row from an owned sample (strings moved, not copied).
pub fn process_sample_row_owned(id: &AgentIdentity, p: ProcessSample) -> ProcessSampleRow {
    let workload = workload(&p.labels);
    let mut label_keys = Vec::with_capacity(p.labels.len());
    let mut label_values = Vec::with_capacity(p.labels.len());
    for l in p.labels {
        label_keys.push(l.key);
        label_values.push(l.value);
    }
    ProcessSampleRow {
        cluster: id.cluster.clone(),
        node: id.node.clone(),
        gpu_index: p.gpu_index,
        ts_ms: p.ts_ms,
        pid: p.pid,
        agent_id: id.agent_id.clone(),
        process_name: p.name,
        used_bytes: p.used_bytes,
        workload,
        label_keys,
        label_values,
    }
}

/// One `oom_events` row.
pub fn event_row(id: &AgentIdentity, e: &OomEvent, received_ms: i64) -> OomEventRow {
    let (label_keys, label_values) = label_columns(&e.labels);
    let job = &e.job;
    OomEventRow {
        cluster: id.cluster.clone(),
        node: id.node.clone(),
        ts_ms: e.ts_ms,
        event_id: e.event_id,
        agent_id: id.agent_id.clone(),
        received_ms,
        kind: e.kind.as_str().to_owned(),
        source: e.source.as_str().to_owned(),
        framework: e.framework.clone(),
        gpu_index: e.gpu_index,
        pid: e.pid,
        requested_bytes: e.requested_bytes,
        capacity_bytes: e.capacity_bytes,
        free_bytes: e.free_bytes,
        allocated_bytes: e.allocated_bytes,
        reserved_bytes: e.reserved_bytes,
        process_used_bytes: e.process_used_bytes,
        other_pids: e.other_processes.iter().map(|o| o.pid).collect(),
        other_used_bytes: e.other_processes.iter().map(|o| o.used_bytes).collect(),
        phase: e.phase.as_str().to_owned(),
        params: job.params,
        batch_size: job.batch,
        seq_len: job.seq_len,
        hidden: job.hidden,
        layers: job.layers,
        heads: job.heads,
        precision: job.precision.clone().unwrap_or_default(),
        optimizer: job.optimizer.clone().unwrap_or_default(),
        zero_stage: job.zero_stage,
        tensor_parallel: job.tensor_parallel,
        pipeline_parallel: job.pipeline_parallel,
        data_parallel: job.data_parallel,
        activation_checkpointing: job.activation_checkpointing.map(u8::from),
        flash_attention: job.flash_attention.map(u8::from),
        xid: e.xid,
        host_rss_bytes: e.host_rss_bytes,
        workload: workload(&e.labels),
        label_keys,
        label_values,
        truth_scenario: e.truth.map(|s| s.as_str().to_owned()).unwrap_or_default(),
        raw_message: e.raw_message.clone(),
    }
}

/// The `agents` row recording that batches up to `last_seq` of this agent run are stored.
pub fn agent_row(id: &AgentIdentity, collector_id: &str, last_seq: u64, ts_ms: i64) -> AgentRow {
    AgentRow {
        cluster: id.cluster.clone(),
        node: id.node.clone(),
        agent_id: id.agent_id.clone(),
        boot_id: id.boot_id,
        ts_ms,
        last_seq,
        agent_version: id.agent_version.clone(),
        collector_id: collector_id.to_owned(),
        gpu_indices: id.gpus.iter().map(|g| g.index).collect(),
        gpu_uuids: id.gpus.iter().map(|g| g.uuid.clone()).collect(),
        gpu_names: id.gpus.iter().map(|g| g.name.clone()).collect(),
        gpu_memory_total_bytes: id.gpus.iter().map(|g| g.memory_total_bytes).collect(),
        gpu_mig: id.gpus.iter().map(|g| u8::from(g.mig)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use oomlens_schema::{EventSource, GpuInfo, JobShape, OomKind, OtherProcess, Phase, Scenario};

    use super::*;

    fn label(k: &str, v: &str) -> Label {
        Label { key: k.into(), value: v.into() }
    }

    fn identity() -> AgentIdentity {
        AgentIdentity {
            cluster: "c1".into(),
            node: "node-a".into(),
            agent_id: "agent-1".into(),
            boot_id: 7,
            agent_version: "0.1.0".into(),
            gpus: vec![
                GpuInfo {
                    index: 0,
                    uuid: "GPU-0".into(),
                    name: "H200".into(),
                    memory_total_bytes: 10,
                    mig: false,
                },
                GpuInfo {
                    index: 1,
                    uuid: "MIG-1".into(),
                    name: "H200 1g".into(),
                    memory_total_bytes: 5,
                    mig: true,
                },
            ],
        }
    }

    #[test]
    fn workload_prefers_pod_then_slurm_then_job_then_container() {
        assert_eq!(workload(&[]), "");
        assert_eq!(workload(&[label("user", "bob")]), "");
        assert_eq!(workload(&[label("container", "c"), label("job", "j")]), "j");
        assert_eq!(
            workload(&[label("container", "c"), label("slurm.job_id", "42"), label("k8s.pod", "p")]),
            "p"
        );
        assert_eq!(workload(&[label("k8s.pod", ""), label("container", "c")]), "c");
    }

    #[test]
    fn rows_carry_the_identity_and_keep_nulls() {
        let id = identity();
        let batch = Batch {
            seq: 3,
            gpu_samples: vec![GpuSample {
                ts_ms: 1_000,
                gpu_index: 1,
                memory_used_bytes: Some(0),
                util_gpu_pct: None,
                temperature_c: Some(-5),
                ..GpuSample::default()
            }],
            process_samples: vec![ProcessSample {
                ts_ms: 1_001,
                gpu_index: 1,
                pid: 99,
                name: "python".into(),
                used_bytes: None,
                labels: vec![label("slurm.job_id", "42"), label("user", "bob")],
            }],
            events: vec![OomEvent {
                event_id: 5,
                ts_ms: 1_002,
                kind: OomKind::CudaOom,
                source: EventSource::Log,
                framework: "pytorch".into(),
                other_processes: vec![
                    OtherProcess { pid: 1, used_bytes: 2 },
                    OtherProcess { pid: 3, used_bytes: 4 },
                ],
                phase: Phase::Backward,
                job: JobShape {
                    batch: Some(8),
                    precision: Some("bf16".into()),
                    activation_checkpointing: Some(true),
                    flash_attention: Some(false),
                    ..JobShape::default()
                },
                truth: Some(Scenario::Batch),
                raw_message: "boom".into(),
                ..OomEvent::default()
            }],
        };
        let rows = batch_rows(&id, &batch, 9_999);
        assert_eq!(rows, batch_rows_owned(&id, batch.clone(), 9_999));
        assert_eq!(rows.len(), 3);
        let g = &rows.gpu_samples[0];
        assert_eq!((g.cluster.as_str(), g.node.as_str(), g.agent_id.as_str()), ("c1", "node-a", "agent-1"));
        assert_eq!((g.memory_used_bytes, g.util_gpu_pct, g.temperature_c), (Some(0), None, Some(-5)));
        let p = &rows.process_samples[0];
        assert_eq!(p.workload, "42");
        assert_eq!(p.label_keys, vec!["slurm.job_id", "user"]);
        assert_eq!(p.label_values, vec!["42", "bob"]);
        assert_eq!(p.used_bytes, None);
        let e = &rows.events[0];
        assert_eq!((e.kind.as_str(), e.source.as_str(), e.phase.as_str()), ("cuda_oom", "log", "backward"));
        assert_eq!(e.received_ms, 9_999);
        assert_eq!((e.other_pids.clone(), e.other_used_bytes.clone()), (vec![1, 3], vec![2, 4]));
        assert_eq!((e.batch_size, e.seq_len), (Some(8), None));
        assert_eq!((e.activation_checkpointing, e.flash_attention), (Some(1), Some(0)));
        assert_eq!((e.precision.as_str(), e.optimizer.as_str()), ("bf16", ""));
        assert_eq!(e.truth_scenario, Scenario::Batch.as_str());
        assert_eq!(e.node, "node-a");
    }

    #[test]
    fn agent_row_lists_the_inventory() {
        let a = agent_row(&identity(), "col-1", 12, 5);
        assert_eq!((a.boot_id, a.last_seq, a.ts_ms), (7, 12, 5));
        assert_eq!(a.collector_id, "col-1");
        assert_eq!(a.gpu_indices, vec![0, 1]);
        assert_eq!(a.gpu_mig, vec![0, 1]);
        assert_eq!(a.gpu_memory_total_bytes, vec![10, 5]);
    }
}
