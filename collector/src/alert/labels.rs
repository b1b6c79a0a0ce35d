//! What an alert says about who failed, looked up in ClickHouse for a batch of events (two
//! queries, whatever the batch size): each event's labels from `oom_events` (Kubernetes
//! namespace and pod, job, Slurm job id — the attribution row keeps only the workload) and its
//! GPU's UUID from the reporting agent's latest `agents` row. A lookup that fails or times out
//! leaves the events as they are: the alert goes without those labels rather than not at all.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Deserialize;

use super::document::{AlertKey, key_of};
use crate::analysis::json::EventJson;
use crate::analysis::queries::is_identifier;

/// Where the labels are: a ClickHouse client and the oomlens database.
#[derive(Debug, Clone)]
pub struct LabelSource {
    /// The client (the collector's).
    pub client: clickhouse::Client,
    /// The database.
    pub database: String,
    /// Longest a lookup may take.
    pub timeout: Duration,
}

#[derive(Debug, clickhouse::Row, Deserialize)]
struct EventLabels {
    cluster: String,
    node: String,
    event_id: u64,
    label_keys: Vec<String>,
    label_values: Vec<String>,
}

#[derive(Debug, clickhouse::Row, Deserialize)]
struct AgentGpus {
    cluster: String,
    node: String,
    gpu_indices: Vec<u32>,
    gpu_uuids: Vec<String>,
}

/// One event's GPU UUID, when its agent reported one.
pub type GpuUuids = HashMap<AlertKey, String>;

impl LabelSource {
    /// Fills `labels` and `pod` of every event that has them stored and returns the GPU UUIDs
    /// found; on failure logs why and returns none (the events are unchanged).
    pub async fn fill(&self, events: &mut [EventJson]) -> GpuUuids {
        if events.is_empty() {
            return GpuUuids::new();
        }
        match tokio::time::timeout(self.timeout, self.lookup(events)).await {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, events = events.len(), "cannot look up the OOM events' labels; alerting without them");
                GpuUuids::new()
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = self.timeout.as_millis() as u64,
                    events = events.len(),
                    "looking up the OOM events' labels timed out; alerting without them"
                );
                GpuUuids::new()
            }
        }
    }

    async fn lookup(&self, events: &mut [EventJson]) -> Result<GpuUuids, clickhouse::error::Error> {
        let db = &self.database;
        if !is_identifier(db) {
            return Err(clickhouse::error::Error::Custom(format!("database {db:?} is not an identifier")));
        }
        let ids: Vec<u64> = events.iter().filter_map(|e| e.event_id.parse().ok()).collect();
        let since = events.iter().map(|e| e.ts_ms).min().unwrap_or_default();
        let until = events.iter().map(|e| e.ts_ms).max().unwrap_or_default().saturating_add(1);
        let rows = self
            .client
            .query(&format!(
                "SELECT cluster, node, event_id, label_keys, label_values FROM {db}.oom_events \
                 WHERE ts_ms >= ? AND ts_ms < ? AND has(?, event_id) \
                 ORDER BY received_ms DESC LIMIT 1 BY cluster, node, event_id"
            ))
            .bind(since)
            .bind(until)
            .bind(&ids)
            .fetch_all::<EventLabels>()
            .await?;
        let mut by_key: HashMap<AlertKey, BTreeMap<String, String>> = rows
            .into_iter()
            .map(|r| {
                ((r.cluster, r.node, r.event_id), r.label_keys.into_iter().zip(r.label_values).collect())
            })
            .collect();
        for e in events.iter_mut() {
            if let Some(labels) = by_key.remove(&key_of(e)) {
                e.pod = labels.get("pod").or_else(|| labels.get("k8s.pod")).cloned().unwrap_or_default();
                e.labels = labels;
            }
        }
        let mut nodes: Vec<&str> = events.iter().map(|e| e.node.as_str()).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let agents = self
            .client
            .query(&format!(
                "SELECT cluster, node, gpu_indices, gpu_uuids FROM {db}.agents \
                 WHERE has(?, node) ORDER BY ts_ms DESC LIMIT 1 BY cluster, node"
            ))
            .bind(&nodes)
            .fetch_all::<AgentGpus>()
            .await?;
        let mut uuids = GpuUuids::new();
        for e in events.iter() {
            let Some(gpu) = e.gpu_index else { continue };
            let uuid = agents
                .iter()
                .find(|a| a.cluster == e.cluster && a.node == e.node)
                .and_then(|a| a.gpu_indices.iter().position(|&i| i == gpu).and_then(|p| a.gpu_uuids.get(p)))
                .filter(|u| !u.is_empty());
            if let Some(uuid) = uuid {
                uuids.insert(key_of(e), uuid.clone());
            }
        }
        Ok(uuids)
    }
}
