//! Webhooks as a target: one `POST` per alert, with a generic JSON body (the alert as Alertmanager
//! would get it, plus the whole attributed event) or a Slack-compatible body (`text` for
//! notifications, Block Kit `blocks` for the message). Slack's limits are kept (header 150
//! characters, a section 3000, a field 2000) and its `mrkdwn` control characters escaped.

use serde::Serialize;
use serde_json::{Value, json};

use super::config::WebhookFormat;
use super::document::{OomAlert, PostableAlert, bounded};
use crate::analysis::json::EventJson;

/// Version of the generic JSON body (`version`); a change that removes or renames a field raises it.
pub const BODY_VERSION: &str = "1";

/// The generic JSON body.
#[derive(Debug, Serialize)]
pub struct JsonBody<'a> {
    /// [`BODY_VERSION`].
    pub version: &'static str,
    /// Always `firing` (an OOM alert resolves by its `endsAt`).
    pub status: &'static str,
    /// The alert: labels, annotations, times, link.
    pub alert: PostableAlert<'a>,
    /// The attributed event, as `oomlens postmortem --json` prints it (`docs/attribution.md`).
    pub event: &'a EventJson,
}

/// The body of `alert` in `format`.
pub fn body(alert: &OomAlert, format: WebhookFormat) -> Result<Vec<u8>, serde_json::Error> {
    match format {
        WebhookFormat::Json => serde_json::to_vec(&JsonBody {
            version: BODY_VERSION,
            status: "firing",
            alert: alert.postable(),
            event: &alert.event,
        }),
        WebhookFormat::Slack => serde_json::to_vec(&slack(alert)),
    }
}

/// Slack's `mrkdwn` with `&`, `<` and `>` escaped (they would start links and mentions).
fn mrkdwn(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn section(title: &str, text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": bounded(&format!("*{title}*\n{}", mrkdwn(text)), 3000)}})
}

/// The Slack message of `alert`.
pub fn slack(alert: &OomAlert) -> Value {
    let e = &alert.event;
    let label = |k: &str| alert.labels.get(k).map_or("", String::as_str);
    let annotation = |k: &str| alert.annotations.get(k).map_or("", String::as_str);
    let mut fields = vec![
        format!("*Scenario*\n{} ({:.0} %)", mrkdwn(&e.scenario), e.confidence * 100.0),
        format!("*Cluster / node*\n{} / {}", mrkdwn(&e.cluster), mrkdwn(&e.node)),
    ];
    if !label("gpu").is_empty() {
        fields.push(format!("*GPU*\n{} {}", label("gpu"), mrkdwn(label("gpu_uuid"))).trim_end().to_owned());
    }
    match (label("namespace"), label("pod")) {
        (_, "") => {}
        ("", pod) => fields.push(format!("*Pod*\n{}", mrkdwn(pod))),
        (ns, pod) => fields.push(format!("*Pod*\n{}/{}", mrkdwn(ns), mrkdwn(pod))),
    }
    if !label("job").is_empty() {
        fields.push(format!("*Job*\n{}", mrkdwn(label("job"))));
    }
    fields.push(format!("*Failed at*\n{}", e.time));
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": bounded(alert.summary(), 150)}}),
        json!({"type": "section", "fields": fields.iter().map(|f| json!({"type": "mrkdwn", "text": bounded(f, 2000)})).collect::<Vec<_>>()}),
    ];
    if !e.evidence.is_empty() {
        let lines: Vec<String> = e.evidence.iter().map(|l| format!("• {l}")).collect();
        blocks.push(section("Evidence", &lines.join("\n")));
    }
    if !e.remedy.is_empty() {
        blocks.push(section("Remedy", &e.remedy));
    }
    let mut context = Vec::new();
    if !annotation("alternatives").is_empty() {
        context.push(format!("Also possible: {}", mrkdwn(annotation("alternatives"))));
    }
    if !annotation("postmortem").is_empty() {
        context.push(format!("Postmortem: `{}`", mrkdwn(&annotation("postmortem").replace('`', "'"))));
    }
    if !alert.generator_url.is_empty() {
        context.push(format!("<{}|Dashboard>", alert.generator_url.replace(['<', '>', '|'], "")));
    }
    if !context.is_empty() {
        blocks.push(json!({"type": "context", "elements": context.iter().map(|c| json!({"type": "mrkdwn", "text": bounded(c, 3000)})).collect::<Vec<_>>()}));
    }
    json!({"text": alert.summary(), "blocks": blocks})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::config::AlertsSection;
    use crate::alert::document::AlertBuilder;
    use crate::alert::document::tests::event;

    fn alert() -> OomAlert {
        AlertBuilder::new(&AlertsSection::default()).unwrap().build(event(9), Some("GPU-1"), 0, 0)
    }

    #[test]
    fn json_body_has_the_alert_and_the_whole_event() {
        let v: Value = serde_json::from_slice(&body(&alert(), WebhookFormat::Json).unwrap()).unwrap();
        assert_eq!(v["version"], "1");
        assert_eq!(v["alert"]["labels"]["event_id"], "9");
        assert_eq!(v["event"]["event_id"], "9");
        assert!(v["event"]["evidence"].is_array() && v["event"]["remedy"].is_string(), "{v}");
        assert_eq!(v["event"]["labels"]["k8s.namespace"], "ml");
    }

    #[test]
    fn slack_body_has_text_and_blocks_within_limits() {
        let mut a = alert();
        a.event.evidence.push("a <b> & c".into());
        let v: Value = serde_json::from_slice(&body(&a, WebhookFormat::Slack).unwrap()).unwrap();
        assert_eq!(v["text"], a.summary());
        let blocks = v["blocks"].as_array().unwrap();
        assert_eq!(blocks[0]["type"], "header");
        assert!(blocks[0]["text"]["text"].as_str().unwrap().chars().count() <= 150);
        let text = v.to_string();
        assert!(text.contains("a &lt;b&gt; &amp; c"), "{text}");
        assert!(text.contains("ml/trainer-0") && text.contains("GPU-1"), "{text}");
        assert!(text.contains("Postmortem: `oomlens postmortem 9"), "{text}");
    }
}
