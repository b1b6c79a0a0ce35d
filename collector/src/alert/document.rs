//! The alert of one attributed OOM event ([`OomAlert`]): its labels (a stable set per event, so
//! Alertmanager deduplicates an event sent twice), its annotations (one-line summary, evidence,
//! remedy, alternatives, the postmortem command), `startsAt` (the failure) and `endsAt` (the
//! resolve time: an OOM is a point event), and the attributed event itself
//! ([`EventJson`], what `oomlens postmortem --json` prints) for the webhooks' JSON body.
//!
//! Every value is bounded ([`MAX_LABEL_BYTES`], [`MAX_ANNOTATION_BYTES`]), so one alert stays a
//! few KiB whatever the event carries.

use std::collections::BTreeMap;

use serde::Serialize;

use super::config::AlertsSection;
use super::template::{Template, TemplateUse, Var};
use crate::analysis::json::{EventJson, format_ms};
use crate::analysis::{EventEvidence, OomFeatures, attribute};

/// Longest label value, bytes (longer ones are cut with `…`).
pub const MAX_LABEL_BYTES: usize = 256;
/// Longest annotation value, bytes.
pub const MAX_ANNOTATION_BYTES: usize = 4096;
/// Longest summary, bytes.
pub const MAX_SUMMARY_BYTES: usize = 512;

/// An event's identity: `(cluster, node, event_id)`.
pub type AlertKey = (String, String, u64);

/// The alert of one attributed OOM event.
#[derive(Debug, Clone, PartialEq)]
pub struct OomAlert {
    /// Labels (`alertname`, `severity`, `cluster`, `node`, `gpu`, …, `scenario`, `event_id`).
    pub labels: BTreeMap<String, String>,
    /// Annotations (`summary`, `evidence`, `remedy`, `alternatives`, `postmortem`).
    pub annotations: BTreeMap<String, String>,
    /// The failure, RFC 3339.
    pub starts_at: String,
    /// When Alertmanager resolves it, RFC 3339.
    pub ends_at: String,
    /// A link back (empty: none).
    pub generator_url: String,
    /// The attributed event.
    pub event: EventJson,
    /// When the attributor stored the attribution, epoch ms.
    pub attributed_ms: i64,
}

/// An alert as Alertmanager's API v2 takes it (`postableAlert`), also the `alert` object of the
/// webhooks' JSON body.
#[derive(Debug, Clone, Serialize)]
pub struct PostableAlert<'a> {
    /// Labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Annotations.
    pub annotations: &'a BTreeMap<String, String>,
    /// Start, RFC 3339.
    #[serde(rename = "startsAt")]
    pub starts_at: &'a str,
    /// End, RFC 3339.
    #[serde(rename = "endsAt")]
    pub ends_at: &'a str,
    /// Link back.
    #[serde(rename = "generatorURL", skip_serializing_if = "str::is_empty")]
    pub generator_url: &'a str,
}

impl OomAlert {
    /// The event's identity.
    pub fn key(&self) -> AlertKey {
        key_of(&self.event)
    }

    /// The alert as Alertmanager takes it.
    pub fn postable(&self) -> PostableAlert<'_> {
        PostableAlert {
            labels: &self.labels,
            annotations: &self.annotations,
            starts_at: &self.starts_at,
            ends_at: &self.ends_at,
            generator_url: &self.generator_url,
        }
    }

    /// The one-line summary.
    pub fn summary(&self) -> &str {
        self.annotations.get("summary").map_or("", String::as_str)
    }
}

/// An event's identity (its id is a decimal string in [`EventJson`]).
pub fn key_of(event: &EventJson) -> AlertKey {
    (event.cluster.clone(), event.node.clone(), event.event_id.parse().unwrap_or_default())
}

/// The event's Kubernetes namespace ('' when unknown).
pub fn namespace_of(event: &EventJson) -> &str {
    label_of(event, &["k8s.namespace", "namespace"])
}

/// The event's job: its `job` label, else its Slurm job id, else — without a pod — its workload.
pub fn job_of(event: &EventJson) -> &str {
    match label_of(event, &["job", "slurm.job_id"]) {
        "" if event.pod.is_empty() => &event.workload,
        job => job,
    }
}

fn label_of<'a>(event: &'a EventJson, keys: &[&str]) -> &'a str {
    keys.iter().find_map(|k| event.labels.get(*k).filter(|v| !v.is_empty())).map_or("", String::as_str)
}

/// What a scenario means, in a few words (the summary's cause).
pub fn cause(scenario: &str) -> &'static str {
    match scenario {
        "static" => "weights and optimizer state do not fit",
        "batch" => "batch too large",
        "sequence" => "sequence too long",
        "contention" => "other processes took the memory",
        "fragmentation" => "memory fragmented",
        "host_oom" => "host RAM ran out",
        _ => "cause unknown",
    }
}

/// `s` cut to at most `max` bytes at a character boundary, `…` marking a cut.
pub fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let ellipsis = '…';
    let mut end = max.saturating_sub(ellipsis.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &s[..end])
}

/// Builds the alerts of events with the settings of `[alerts]`.
#[derive(Debug, Clone)]
pub struct AlertBuilder {
    alertname: String,
    severity: String,
    labels: BTreeMap<String, String>,
    resolve_after_ms: i64,
    postmortem: Template,
    generator_url: Template,
}

impl AlertBuilder {
    /// The builder of `cfg` (checked: its templates parse).
    pub fn new(cfg: &AlertsSection) -> Result<AlertBuilder, String> {
        Ok(AlertBuilder {
            alertname: cfg.alertname.clone(),
            severity: cfg.severity.clone(),
            labels: cfg.labels.clone(),
            resolve_after_ms: i64::try_from(cfg.resolve_after_ms).unwrap_or(i64::MAX),
            postmortem: Template::parse(
                "alerts.postmortem_command",
                &cfg.postmortem_command,
                TemplateUse::Shell,
            )?,
            generator_url: Template::parse("alerts.generator_url", &cfg.generator_url, TemplateUse::Url)?,
        })
    }

    /// The alert of `event` (its labels looked up already), attributed at `attributed_ms` and
    /// sent now (`now_ms`, the start of its resolve time); `gpu_uuid` when the agent reported it.
    pub fn build(
        &self,
        event: EventJson,
        gpu_uuid: Option<&str>,
        attributed_ms: i64,
        now_ms: i64,
    ) -> OomAlert {
        let gpu = event.gpu_index.map(|g| g.to_string()).unwrap_or_default();
        let namespace = namespace_of(&event).to_owned();
        let job = job_of(&event).to_owned();
        let mut labels: BTreeMap<String, String> = self.labels.clone();
        for (k, v) in [
            ("alertname", self.alertname.as_str()),
            ("severity", &self.severity),
            ("cluster", &event.cluster),
            ("node", &event.node),
            ("gpu", &gpu),
            ("gpu_uuid", gpu_uuid.unwrap_or_default()),
            ("namespace", &namespace),
            ("pod", &event.pod),
            ("job", &job),
            ("scenario", &event.scenario),
            ("event_id", &event.event_id),
        ] {
            if v.is_empty() {
                labels.remove(k);
            } else {
                labels.insert(k.to_owned(), bounded(v, MAX_LABEL_BYTES));
            }
        }
        let value = |v: Var| -> String {
            match v {
                Var::EventId => event.event_id.clone(),
                Var::Cluster => event.cluster.clone(),
                Var::Node => event.node.clone(),
                Var::Gpu => gpu.clone(),
                Var::Scenario => event.scenario.clone(),
                Var::Namespace => namespace.clone(),
                Var::Pod => event.pod.clone(),
                Var::Job => job.clone(),
                Var::TsMs => event.ts_ms.to_string(),
                Var::Time => event.time.clone(),
                Var::FromMs => event.ts_ms.saturating_sub(600_000).to_string(),
                Var::ToMs => event.ts_ms.saturating_add(300_000).to_string(),
            }
        };
        let mut annotations = BTreeMap::new();
        let mut annotate = |k: &str, v: String, max: usize| {
            if !v.is_empty() {
                annotations.insert(k.to_owned(), bounded(&v, max));
            }
        };
        annotate("summary", self.summary(&event, &namespace, &job), MAX_SUMMARY_BYTES);
        annotate("evidence", event.evidence.join("\n"), MAX_ANNOTATION_BYTES);
        annotate("remedy", event.remedy.clone(), MAX_ANNOTATION_BYTES);
        let alternatives: Vec<String> = event
            .alternatives
            .iter()
            .map(|a| format!("{} {:.0} %", a.scenario, a.confidence * 100.0))
            .collect();
        annotate("alternatives", alternatives.join(", "), MAX_ANNOTATION_BYTES);
        annotate("postmortem", self.postmortem.render(value), MAX_ANNOTATION_BYTES);
        let generator_url = bounded(&self.generator_url.render(value), MAX_ANNOTATION_BYTES);
        OomAlert {
            labels,
            annotations,
            starts_at: format_ms(event.ts_ms),
            ends_at: format_ms(now_ms.max(event.ts_ms).saturating_add(self.resolve_after_ms)),
            generator_url,
            event,
            attributed_ms,
        }
    }

    /// "OOM on node-7 GPU 3 (pod ns/p): batch too large, 82 % confident".
    fn summary(&self, event: &EventJson, namespace: &str, job: &str) -> String {
        let mut s = format!("OOM on {}", event.node);
        if let Some(g) = event.gpu_index {
            s.push_str(&format!(" GPU {g}"));
        }
        let owner = match (event.pod.as_str(), namespace, job) {
            ("", _, "") => String::new(),
            ("", _, job) => format!("job {job}"),
            (pod, "", _) => format!("pod {pod}"),
            (pod, ns, _) => format!("pod {ns}/{pod}"),
        };
        if !owner.is_empty() {
            s.push_str(&format!(" ({owner})"));
        }
        s.push_str(&format!(": {}, {:.0} % confident", cause(&event.scenario), event.confidence * 100.0));
        s
    }
}

/// A typical batch OOM: pod `ml/trainer-0` (job `llama-ft`) on `gpu-node-7` GPU 3 asked for 2 GiB
/// of 80 GiB with 70 GiB allocated, in the forward pass at batch 64 × 2048 tokens. The event the
/// alert tests and the latency bench send.
pub fn example_evidence(cluster: &str, event_id: u64, ts_ms: i64) -> EventEvidence {
    EventEvidence {
        cluster: cluster.into(),
        node: "gpu-node-7".into(),
        event_id,
        ts_ms,
        kind: "cuda_oom".into(),
        gpu_index: Some(3),
        workload: "trainer-0".into(),
        requested_bytes: Some(2 << 30),
        capacity_bytes: Some(80 << 30),
        free_bytes: Some(1 << 30),
        allocated_bytes: Some(70 << 30),
        reserved_bytes: Some(72 << 30),
        phase: "forward".into(),
        batch_size: Some(64),
        seq_len: Some(2048),
        ..EventEvidence::default()
    }
}

/// The labels of [`example_evidence`]'s pod, as the label lookup fills them.
pub fn example_labels() -> Vec<(String, String)> {
    [("k8s.namespace", "ml"), ("k8s.pod", "trainer-0"), ("job", "llama-ft")]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// [`example_evidence`] attributed, with [`example_labels`].
pub fn example_event(cluster: &str, event_id: u64, ts_ms: i64) -> EventJson {
    let f = OomFeatures::derive(example_evidence(cluster, event_id, ts_ms));
    EventJson::new(&f, &attribute(&f), &example_labels())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The example batch OOM (the labels as the lookup fills them).
    pub(crate) fn event(event_id: u64) -> EventJson {
        super::example_event("prod", event_id, 1_767_225_600_000)
    }

    #[test]
    fn labels_are_stable_and_complete_annotations_bounded() {
        let b = AlertBuilder::new(&AlertsSection::default()).unwrap();
        let e = event(42);
        let a = b.build(e.clone(), Some("GPU-abc"), 1, 1_767_225_700_000);
        let again = b.build(e.clone(), Some("GPU-abc"), 2, 1_767_225_900_000);
        assert_eq!(a.labels, again.labels, "the same event has the same label set");
        let l = |k: &str| a.labels.get(k).map(String::as_str);
        assert_eq!(l("alertname"), Some("GpuOutOfMemory"));
        assert_eq!(
            (l("cluster"), l("node"), l("gpu"), l("gpu_uuid")),
            (Some("prod"), Some("gpu-node-7"), Some("3"), Some("GPU-abc"))
        );
        assert_eq!((l("namespace"), l("pod"), l("job")), (Some("ml"), Some("trainer-0"), Some("llama-ft")));
        assert_eq!((l("event_id"), l("scenario")), (Some("42"), Some(e.scenario.as_str())));
        let summary = a.summary();
        assert!(summary.starts_with("OOM on gpu-node-7 GPU 3 (pod ml/trainer-0): "), "{summary}");
        assert!(summary.ends_with(&format!("{} % confident", (e.confidence * 100.0).round())), "{summary}");
        assert_eq!(
            a.annotations["postmortem"],
            "oomlens postmortem 42 --cluster-name prod --node gpu-node-7"
        );
        assert_eq!(a.annotations["remedy"], e.remedy);
        assert!(a.annotations["evidence"].starts_with("rule "), "{}", a.annotations["evidence"]);
        assert_eq!(a.starts_at, "2026-01-01T00:00:00.000Z");
        assert_eq!(a.ends_at, "2026-01-01T01:01:40.000Z", "sent at +100 s, resolved an hour later");
        assert!(a.generator_url.is_empty());
        let json = serde_json::to_value(a.postable()).unwrap();
        assert!(json.get("generatorURL").is_none() && json["startsAt"].is_string(), "{json}");
    }

    #[test]
    fn empty_labels_are_omitted_and_values_bounded() {
        let mut cfg = AlertsSection::default();
        cfg.labels.insert("team".into(), "ml-infra".into());
        cfg.generator_url = "https://grafana.example/d/x?var-node={node}&from={from_ms}&to={to_ms}".into();
        let b = AlertBuilder::new(&cfg).unwrap();
        let mut e = event(7);
        e.gpu_index = None;
        e.labels.clear();
        e.pod = String::new();
        e.workload = "x".repeat(1000);
        e.evidence = vec!["e".repeat(10_000)];
        let a = b.build(e, None, 0, 0);
        assert!(
            !a.labels.contains_key("gpu")
                && !a.labels.contains_key("namespace")
                && !a.labels.contains_key("pod")
        );
        assert_eq!(a.labels["team"], "ml-infra");
        assert!(a.labels["job"].len() <= MAX_LABEL_BYTES && a.labels["job"].ends_with('…'));
        assert!(a.annotations["evidence"].len() <= MAX_ANNOTATION_BYTES);
        assert!(a.summary().starts_with("OOM on gpu-node-7 (job xxx"), "{}", a.summary());
        assert_eq!(
            a.generator_url,
            "https://grafana.example/d/x?var-node=gpu-node-7&from=1767225000000&to=1767225900000"
        );
        assert_eq!(bounded("héllo", 3), "…");
        assert_eq!(bounded("héllo", 5), "h…");
    }
}
