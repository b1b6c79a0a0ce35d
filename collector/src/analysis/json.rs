//! The JSON document of one attributed event, shared by `oomlens postmortem --json` and
//! `oomlens explain --json` (the postmortem adds the neighbours and the memory curve).
//!
//! The event id is a string: JSON numbers above 2^53 lose digits in JavaScript and `jq`, and event
//! ids are random 64-bit numbers. Confidences are fractions in `[0, 1]`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::features::AllocSite;

use super::{Attribution, OomFeatures};

/// A scenario the evidence leaves open.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlternativeJson {
    /// The scenario.
    pub scenario: String,
    /// Its probability in `[0, 1]`.
    pub confidence: f64,
}

/// One attributed event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventJson {
    /// Event id, as a decimal string.
    pub event_id: String,
    /// Failure time, epoch ms.
    pub ts_ms: i64,
    /// Failure time, RFC 3339.
    pub time: String,
    /// Cluster of the agent that reported the event.
    pub cluster: String,
    /// Node name (the agent certificate's CN).
    pub node: String,
    /// Index of the failing GPU on its node (null when the event names none).
    pub gpu_index: Option<u32>,
    /// Host PID of the failing process (null when unknown).
    pub pid: Option<u32>,
    /// Workload of the failing process ('' when unknown).
    pub workload: String,
    /// The `pod` label ('' when none).
    pub pod: String,
    /// Every label of the event (`log.path`, `k8s.pod`, `slurm.job_id`, `phase.clue`, …).
    pub labels: BTreeMap<String, String>,
    /// Event kind (`cuda_oom`, `host_oom_kill`, `xid`, `suspected_oom`).
    pub kind: String,
    /// Detector that saw it (`log`, `hook`, `kmsg`, `nvml`, `simulator`).
    pub source: String,
    /// Framework that printed the message.
    pub framework: String,
    /// Effective phase ('' when unknown).
    pub phase: String,
    /// `reported`, `traceback`, `inferred`, `unknown`.
    pub phase_source: String,
    /// What the phase was read from.
    pub phase_clue: String,
    /// Attributed scenario (`static`, `batch`, `sequence`, `contention`, …, `unknown`).
    pub scenario: String,
    /// Id of the rule that fired (e.g. `neighbours_took_it`).
    pub rule: String,
    /// Confidence in `[0, 1]`.
    pub confidence: f64,
    /// The other scenarios left open, most likely first.
    pub alternatives: Vec<AlternativeJson>,
    /// Evidence lines.
    pub evidence: Vec<String>,
    /// Missing data.
    pub missing: Vec<String>,
    /// What evidence would decide between the scenarios left open.
    pub decide: Vec<String>,
    /// The attributed scenario's standard remedy (what to change in the job).
    pub remedy: String,
    /// The limit the allocation failed against.
    pub capacity_bytes: Option<u64>,
    /// `message` or `nvml`.
    pub capacity_source: String,
    /// Requested bytes.
    pub requested_bytes: Option<u64>,
    /// Free GPU memory at the failure.
    pub free_bytes: Option<u64>,
    /// Allocated by the allocator.
    pub allocated_bytes: Option<u64>,
    /// Reserved by the caching allocator.
    pub reserved_bytes: Option<u64>,
    /// GPU memory of the failing process.
    pub process_used_bytes: Option<u64>,
    /// Reserved − allocated.
    pub cached_free_bytes: Option<u64>,
    /// Capacity − free − reserved.
    pub outside_bytes: Option<u64>,
    /// Other processes' memory at the failure.
    pub others_bytes: Option<u64>,
    /// Where `others_bytes` comes from.
    pub others_from: String,
    /// Static estimate from the job shape.
    pub static_estimate_bytes: Option<u64>,
    /// What the process alone needed.
    pub need_alone_bytes: Option<u64>,
    /// The job's allocator summary at the OOM (hook v2), when it sent one.
    pub allocator: Option<AllocatorJson>,
}

/// The allocator summary of an event (hook v2): the free-block picture and the code holding
/// the memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatorJson {
    /// Free bytes inside the allocator's segments.
    pub cached_free_bytes: Option<u64>,
    /// The largest free block.
    pub largest_free_block_bytes: Option<u64>,
    /// Live bytes at weight / optimizer-state sites.
    pub static_bytes: Option<u64>,
    /// Live bytes at activation sites.
    pub activation_bytes: Option<u64>,
    /// The top sites by live bytes.
    pub sites: Vec<AllocSite>,
    /// Free blocks per size bucket ([`FREE_BLOCK_BUCKETS`] for the Python hook's summaries).
    pub free_block_histogram: Vec<u64>,
}

/// The Python hook's free-block buckets (`FREE_BLOCK_BOUNDS` in `oomlens_hook.py`).
pub const FREE_BLOCK_BUCKETS: [&str; 6] =
    ["< 1 MiB", "< 8 MiB", "< 64 MiB", "< 512 MiB", "< 4 GiB", "≥ 4 GiB"];

/// The free-block histogram of an event's labels (`alloc.free_block_histogram`), empty without one.
pub fn free_block_histogram(labels: &[(String, String)]) -> Vec<u64> {
    labels
        .iter()
        .find(|(k, _)| k == "alloc.free_block_histogram")
        .map(|(_, v)| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// A histogram in words: `3000 < 1 MiB, 900 < 8 MiB, …` (buckets by number when they are not
/// the hook's six).
pub fn histogram_words(h: &[u64]) -> String {
    h.iter()
        .enumerate()
        .map(|(i, n)| match (h.len() == FREE_BLOCK_BUCKETS.len(), FREE_BLOCK_BUCKETS.get(i)) {
            (true, Some(b)) => format!("{n} {b}"),
            _ => format!("{n} in bucket {}", i + 1),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl EventJson {
    /// The document of `f` attributed `a`, with its labels.
    pub fn new(f: &OomFeatures, a: &Attribution, labels: &[(String, String)]) -> EventJson {
        let labels_list = labels;
        let labels: BTreeMap<String, String> = labels.iter().cloned().collect();
        EventJson {
            event_id: f.event_id.to_string(),
            ts_ms: f.ts_ms,
            time: format_ms(f.ts_ms),
            cluster: f.cluster.clone(),
            node: f.node.clone(),
            gpu_index: f.gpu_index,
            pid: f.pid,
            workload: f.workload.clone(),
            pod: labels.get("pod").or_else(|| labels.get("k8s.pod")).cloned().unwrap_or_default(),
            labels,
            kind: f.kind.clone(),
            source: f.source.clone(),
            framework: f.framework.clone(),
            phase: f.phase_effective.clone(),
            phase_source: f.phase_source.clone(),
            phase_clue: f.phase_clue.clone(),
            scenario: a.scenario.as_str().to_owned(),
            rule: a.rule.id().to_owned(),
            confidence: a.confidence(),
            alternatives: a
                .alternatives
                .iter()
                .map(|x| AlternativeJson {
                    scenario: x.scenario.as_str().to_owned(),
                    confidence: f64::from(x.confidence_pct) / 100.0,
                })
                .collect(),
            evidence: a.evidence.clone(),
            missing: a.missing.iter().map(|m| (*m).to_owned()).collect(),
            decide: a.decide.clone(),
            remedy: a.remedy.to_owned(),
            capacity_bytes: f.capacity_bytes,
            capacity_source: if f.capacity_source.is_empty() && f.capacity_bytes.is_some() {
                "message".to_owned()
            } else {
                f.capacity_source.clone()
            },
            requested_bytes: f.requested_bytes,
            free_bytes: f.free_bytes,
            allocated_bytes: f.allocated_bytes,
            reserved_bytes: f.reserved_bytes,
            process_used_bytes: f.process_used_bytes,
            cached_free_bytes: f.cached_free_bytes,
            outside_bytes: f.outside_bytes,
            others_bytes: f.others_bytes,
            others_from: f.others_from.clone(),
            static_estimate_bytes: f.static_estimate_bytes,
            need_alone_bytes: f.need_alone_bytes,
            allocator: (f.alloc_cached_free_bytes.is_some() || !f.alloc_sites.is_empty()).then(|| {
                AllocatorJson {
                    cached_free_bytes: f.alloc_cached_free_bytes,
                    largest_free_block_bytes: f.alloc_largest_free_bytes,
                    static_bytes: f.alloc_static_bytes,
                    activation_bytes: f.alloc_activation_bytes,
                    sites: f.alloc_sites.iter().map(|s| AllocSite::parse(s)).collect(),
                    free_block_histogram: free_block_histogram(labels_list),
                }
            }),
        }
    }
}

/// An epoch-ms instant as RFC 3339 UTC with milliseconds (`2026-11-29T12:00:00.000Z`).
pub fn format_ms(ms: i64) -> String {
    match time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond()
        ),
        Err(_) => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod histogram_tests {
    use super::*;

    #[test]
    fn histograms_from_labels_in_words() {
        let labels = vec![("alloc.free_block_histogram".to_owned(), "3000,900,180,20,0,1".to_owned())];
        let h = free_block_histogram(&labels);
        assert_eq!(h, [3000, 900, 180, 20, 0, 1]);
        assert_eq!(
            histogram_words(&h),
            "3000 < 1 MiB, 900 < 8 MiB, 180 < 64 MiB, 20 < 512 MiB, 0 < 4 GiB, 1 ≥ 4 GiB"
        );
        assert_eq!(histogram_words(&[4, 5]), "4 in bucket 1, 5 in bucket 2");
        assert!(free_block_histogram(&[]).is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EventEvidence, attribute};
    use super::*;

    #[test]
    fn event_ids_are_strings_and_labels_an_object() {
        let f = OomFeatures::derive(EventEvidence {
            event_id: u64::MAX - 1,
            kind: "cuda_oom".into(),
            ..EventEvidence::default()
        });
        let j = EventJson::new(&f, &attribute(&f), &[("log.path".into(), "/var/log/x.log".into())]);
        let v = serde_json::to_value(&j).expect("json");
        assert_eq!(v["event_id"], serde_json::json!("18446744073709551614"));
        assert_eq!(v["labels"]["log.path"], serde_json::json!("/var/log/x.log"));
        assert!(v["alternatives"].is_array() && v["decide"].is_array());
    }
}
