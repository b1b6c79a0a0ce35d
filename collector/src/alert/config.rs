//! `[alerts]`: where the alerts of attributed OOM events go (Alertmanager, webhooks), which events
//! alert, how hard the senders try and what the alerts say. Every key defaulted, unknown keys
//! refused, checked by [`AlertsSection::validate`] (called by the collector configuration's check).
//!
//! Secrets stay out of the file: a webhook `url`, and any value of `headers` /
//! `alertmanager_headers`, written `env:NAME` is read from the environment variable `NAME` when the
//! collector starts the alerts (an unset variable stops the start, naming it; the `oomlens` CLI and
//! `migrate`, which read the same file, need none of them). `print-config` shows header
//! values and webhook paths as `<redacted>`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use http::Uri;
use oomlens_schema::scenario::Scenario;
use serde::{Deserialize, Serialize};

use super::template::{Template, TemplateUse};

/// Prefix of a value read from the environment (`env:SLACK_WEBHOOK_URL`).
pub const ENV_PREFIX: &str = "env:";

/// Largest `alerts.queue_capacity` (alerts held per target; a few KiB each).
pub const MAX_QUEUE_CAPACITY: usize = 1 << 20;

/// Shown instead of a secret by `print-config`.
const REDACTED: &str = "<redacted>";

/// The body a webhook gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// The alert (labels, annotations, times) and the whole attributed event as JSON.
    #[default]
    Json,
    /// A Slack incoming-webhook message (`text` + Block Kit `blocks`; Mattermost and others accept it).
    Slack,
}

impl WebhookFormat {
    /// `json`, `slack`.
    pub const fn as_str(self) -> &'static str {
        match self {
            WebhookFormat::Json => "json",
            WebhookFormat::Slack => "slack",
        }
    }
}

/// One `[[alerts.webhooks]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// `http://` or `https://` URL the alert is POSTed to (or `env:NAME`).
    pub url: String,
    /// Body format.
    #[serde(default)]
    pub format: WebhookFormat,
    /// Extra request headers (e.g. `Authorization`); values may be `env:NAME`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// `[alerts]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsSection {
    /// Alertmanager base URLs (`http://alertmanager:9093`, a path prefix allowed); every alert
    /// goes to each of them (an HA pair gets both). Empty, with no webhooks: alerts are off.
    pub alertmanager_urls: Vec<String>,
    /// Request headers for the Alertmanager URLs (a proxy's `Authorization`); values may be `env:NAME`.
    pub alertmanager_headers: BTreeMap<String, String>,
    /// Webhooks, each getting every alert.
    pub webhooks: Vec<WebhookConfig>,
    /// Only events attributed with at least this confidence (0–1) alert.
    pub min_confidence: f64,
    /// Only events attributed to one of these scenarios alert (empty: all).
    pub scenarios: Vec<String>,
    /// Events that failed longer ago than this when they are attributed do not alert (a backlog
    /// after an outage), ms; 0: no limit.
    pub max_event_age_ms: u64,
    /// Alerts waiting per target; when full the oldest waiting alert is dropped (and counted).
    pub queue_capacity: usize,
    /// Timeout of one request (connect, send, answer), ms.
    pub timeout_ms: u64,
    /// Retries of a request after a connection error, a timeout, a 5xx, 408 or 429 (other 4xx:
    /// none), with exponential backoff and jitter.
    pub max_retries: u32,
    /// First backoff, ms (doubled per retry, with jitter).
    pub retry_initial_ms: u64,
    /// Longest backoff (and longest `Retry-After` honoured), ms.
    pub retry_max_ms: u64,
    /// An alert's `endsAt`: this long after it is sent (an OOM is a point event), ms.
    pub resolve_after_ms: u64,
    /// Events remembered per target as already sent (an event attributed twice alerts once).
    pub dedup_entries: usize,
    /// How long an event is remembered as sent, ms.
    pub dedup_ttl_ms: u64,
    /// The `alertname` label.
    pub alertname: String,
    /// The `severity` label.
    pub severity: String,
    /// Extra labels on every alert (`team`, `source`; routing keys).
    pub labels: BTreeMap<String, String>,
    /// The `postmortem` annotation: the command that explains the event. Placeholders: see
    /// `docs/configuration.md`; values are shell-quoted where needed.
    pub postmortem_command: String,
    /// The alert's `generatorURL` (empty: none), e.g. a dashboard link. Same placeholders, values
    /// percent-encoded.
    pub generator_url: String,
    /// HTTPS: CA certificate(s), PEM, that signed the targets' certificates (unset: the system
    /// trust store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// HTTPS: client certificate chain, PEM, presented to the targets (with `tls_key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// HTTPS: the client certificate's private key, PEM (with `tls_cert`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
}

/// The default `postmortem_command`.
pub const DEFAULT_POSTMORTEM: &str = "oomlens postmortem {event_id} --cluster-name {cluster} --node {node}";

impl Default for AlertsSection {
    fn default() -> Self {
        AlertsSection {
            alertmanager_urls: Vec::new(),
            alertmanager_headers: BTreeMap::new(),
            webhooks: Vec::new(),
            min_confidence: 0.0,
            scenarios: Vec::new(),
            max_event_age_ms: 3_600_000,
            queue_capacity: 1000,
            timeout_ms: 5000,
            max_retries: 5,
            retry_initial_ms: 500,
            retry_max_ms: 30_000,
            resolve_after_ms: 3_600_000,
            dedup_entries: 10_000,
            dedup_ttl_ms: 86_400_000,
            alertname: "GpuOutOfMemory".to_owned(),
            severity: "warning".to_owned(),
            labels: BTreeMap::new(),
            postmortem_command: DEFAULT_POSTMORTEM.to_owned(),
            generator_url: String::new(),
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`: a Prometheus / Alertmanager label name.
pub fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The value of a configured string: `env:NAME` read from the environment, else the string itself.
pub fn resolve_secret(key: &str, value: &str) -> Result<String, String> {
    match value.strip_prefix(ENV_PREFIX) {
        Some(var) => std::env::var(var).map_err(|_| {
            format!("{key} names the environment variable {var}, which is not set (or not UTF-8)")
        }),
        None => Ok(value.to_owned()),
    }
}

/// A checked `http://` / `https://` URL: no credentials in it (they belong in headers), a host.
pub fn check_url(key: &str, url: &str) -> Result<Uri, String> {
    let uri: Uri = url.parse().map_err(|e| format!("{key} {url:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("{key} {url:?} must start with http:// or https://")),
    }
    let Some(authority) = uri.authority() else {
        return Err(format!("{key} {url:?} names no host"));
    };
    if authority.as_str().contains('@') {
        return Err(format!(
            "{key}: put credentials in a header (Authorization), not in the URL (user:password@host)"
        ));
    }
    if authority.host().is_empty() {
        return Err(format!("{key} {url:?} names no host"));
    }
    Ok(uri)
}

/// `env:NAME` with a usable variable name, or a literal value that `ok` accepts.
fn check_value(key: &str, value: &str, ok: impl Fn(&str) -> Result<(), String>) -> Result<(), String> {
    match value.strip_prefix(ENV_PREFIX) {
        Some(var) if var.is_empty() || var.contains(['=', '\0']) => {
            Err(format!("{key}: {value:?} does not name an environment variable"))
        }
        // Read when the collector starts (the CLI reading the same file needs none of them).
        Some(_) => Ok(()),
        None => ok(value),
    }
}

fn check_headers(key: &str, headers: &BTreeMap<String, String>) -> Result<(), String> {
    for (name, value) in headers {
        http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{key}: {name:?} is not a valid header name"))?;
        check_value(&format!("{key}.{name}"), value, |v| {
            http::HeaderValue::from_str(v)
                .map(drop)
                .map_err(|_| format!("{key}.{name}: the value is not a valid header value"))
        })?;
    }
    Ok(())
}

impl AlertsSection {
    /// Whether any target is configured (alerts are off otherwise).
    pub fn enabled(&self) -> bool {
        !self.alertmanager_urls.is_empty() || !self.webhooks.is_empty()
    }

    /// Whether any target URL is `https://` (resolving `env:` webhook URLs).
    pub fn any_https(&self) -> bool {
        let https = |u: &str| u.starts_with("https://");
        self.alertmanager_urls.iter().any(|u| https(u))
            || self.webhooks.iter().any(|w| resolve_secret("", &w.url).is_ok_and(|u| https(&u)))
    }

    /// The scenarios that alert (`None`: all).
    pub fn scenario_filter(&self) -> Option<Vec<Scenario>> {
        (!self.scenarios.is_empty())
            .then(|| self.scenarios.iter().filter_map(|s| s.parse::<Scenario>().ok()).collect())
    }

    /// Checks every key: URLs, headers, label names, templates, ranges, TLS files. `env:`
    /// variables are read (and must be set) only when the collector starts the alerts.
    pub fn validate(&self) -> Result<(), String> {
        for (i, url) in self.alertmanager_urls.iter().enumerate() {
            let uri = check_url(&format!("alerts.alertmanager_urls[{i}]"), url)?;
            if uri.query().is_some() {
                return Err(format!("alerts.alertmanager_urls[{i}] {url:?} must not have a query"));
            }
        }
        check_headers("alerts.alertmanager_headers", &self.alertmanager_headers)?;
        for (i, hook) in self.webhooks.iter().enumerate() {
            let key = format!("alerts.webhooks[{i}].url");
            check_value(&key, &hook.url, |url| check_url(&key, url).map(drop))?;
            check_headers(&format!("alerts.webhooks[{i}].headers"), &hook.headers)?;
        }
        if !(0.0..=1.0).contains(&self.min_confidence) {
            return Err(format!(
                "alerts.min_confidence must be between 0 and 1, not {}",
                self.min_confidence
            ));
        }
        if let Some(bad) = self.scenarios.iter().find(|s| s.parse::<Scenario>().is_err()) {
            let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.as_str()).collect();
            return Err(format!("alerts.scenarios: unknown scenario {bad:?} (one of {})", names.join(", ")));
        }
        for (key, v) in [
            ("queue_capacity", self.queue_capacity as u64),
            ("timeout_ms", self.timeout_ms),
            ("retry_initial_ms", self.retry_initial_ms),
            ("resolve_after_ms", self.resolve_after_ms),
            ("dedup_entries", self.dedup_entries as u64),
            ("dedup_ttl_ms", self.dedup_ttl_ms),
        ] {
            if v == 0 {
                return Err(format!("alerts.{key} must be > 0"));
            }
        }
        if self.queue_capacity > MAX_QUEUE_CAPACITY {
            return Err(format!("alerts.queue_capacity must be at most {MAX_QUEUE_CAPACITY}"));
        }
        if self.retry_max_ms < self.retry_initial_ms {
            return Err("alerts.retry_max_ms must be at least alerts.retry_initial_ms".to_owned());
        }
        for (key, value) in [("alertname", &self.alertname), ("severity", &self.severity)] {
            if value.trim().is_empty() {
                return Err(format!("alerts.{key} must not be empty"));
            }
        }
        for name in self.labels.keys() {
            if !is_label_name(name) {
                return Err(format!("alerts.labels: {name:?} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)"));
            }
        }
        Template::parse("alerts.postmortem_command", &self.postmortem_command, TemplateUse::Shell)?;
        let generator = Template::parse("alerts.generator_url", &self.generator_url, TemplateUse::Url)?;
        if !generator.is_empty() {
            // Alertmanager refuses an alert whose generatorURL is not a URL.
            check_url("alerts.generator_url", &generator.render(|_| "x".to_owned()))?;
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err("alerts.tls_cert and alerts.tls_key go together: set both or neither".to_owned());
        }
        for (key, path) in
            [("tls_ca", &self.tls_ca), ("tls_cert", &self.tls_cert), ("tls_key", &self.tls_key)]
        {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(format!("alerts.{key} must name a PEM file (leave it unset otherwise)"));
            }
        }
        Ok(())
    }

    /// A copy safe to print: header values and webhook URL paths replaced by `<redacted>`
    /// (`env:` references are kept: they hold no secret).
    pub fn redacted(&self) -> AlertsSection {
        let mut shown = self.clone();
        let hide = |v: &mut String| {
            if !v.starts_with(ENV_PREFIX) {
                *v = REDACTED.to_owned();
            }
        };
        shown.alertmanager_headers.values_mut().for_each(hide);
        for hook in &mut shown.webhooks {
            hook.headers.values_mut().for_each(hide);
            if hook.url.starts_with(ENV_PREFIX) {
                continue;
            }
            if let Ok(uri) = hook.url.parse::<Uri>() {
                let has_path = uri.path_and_query().is_some_and(|p| p.as_str() != "/");
                if let (Some(scheme), Some(authority), true) = (uri.scheme_str(), uri.authority(), has_path) {
                    hook.url = format!("{scheme}://{authority}/{REDACTED}");
                }
            }
        }
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> AlertsSection {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn defaults_are_off_and_valid() {
        let s = AlertsSection::default();
        assert!(!s.enabled());
        s.validate().unwrap();
        assert!(s.scenario_filter().is_none());
    }

    #[test]
    fn targets_and_formats_parse() {
        let s = section(
            "alertmanager_urls = ['http://am-0:9093', 'https://am-1:9093/am']\n\
             [[webhooks]]\nurl = 'https://hooks.example/x'\nformat = 'slack'\n\
             [[webhooks]]\nurl = 'http://receiver:8080/oom'\nheaders = { Authorization = 'Bearer t' }\n",
        );
        s.validate().unwrap();
        assert!(s.enabled() && s.any_https());
        assert_eq!(s.webhooks[0].format, WebhookFormat::Slack);
        assert_eq!(s.webhooks[1].format, WebhookFormat::Json);
        assert!(
            toml::from_str::<AlertsSection>("[[webhooks]]\nurl = 'http://x'\nformat = 'teams'\n").is_err()
        );
        assert!(toml::from_str::<AlertsSection>("[[webhooks]]\nurl = 'http://x'\nverb = 'PUT'\n").is_err());
    }

    #[test]
    fn bad_values_are_refused_with_the_key() {
        for (text, needle) in [
            ("alertmanager_urls = ['am:9093']", "alerts.alertmanager_urls[0]"),
            ("alertmanager_urls = ['ftp://am:9093']", "http:// or https://"),
            ("alertmanager_urls = ['http://u:p@am:9093']", "credentials"),
            ("alertmanager_urls = ['http://am:9093/?x=1']", "query"),
            ("webhooks = [{ url = 'not a url' }]", "alerts.webhooks[0].url"),
            ("webhooks = [{ url = 'env:' }]", "does not name an environment variable"),
            ("webhooks = [{ url = 'http://x', headers = { 'bad header' = 'v' } }]", "header name"),
            ("alertmanager_headers = { Authorization = \"a\\nb\" }", "header value"),
            ("min_confidence = 80.0", "alerts.min_confidence"),
            ("scenarios = ['batch', 'oops']", "unknown scenario \"oops\""),
            ("queue_capacity = 0", "alerts.queue_capacity must be > 0"),
            ("queue_capacity = 100000000", "at most"),
            ("timeout_ms = 0", "alerts.timeout_ms"),
            ("resolve_after_ms = 0", "alerts.resolve_after_ms"),
            ("retry_initial_ms = 1000\nretry_max_ms = 10", "retry_max_ms"),
            ("severity = ' '", "alerts.severity"),
            ("labels = { 'team-x' = 'a' }", "not a label name"),
            ("postmortem_command = 'oomlens postmortem {event}'", "alerts.postmortem_command"),
            ("generator_url = 'https://g/{cluster'", "alerts.generator_url"),
            ("generator_url = 'grafana/d/{node}'", "alerts.generator_url"),
            ("tls_cert = '/c.pem'", "together"),
            ("tls_ca = ''", "alerts.tls_ca"),
        ] {
            let err = section(text).validate().unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn secrets_come_from_the_environment_and_are_redacted() {
        // A variable no test sets.
        let var = "OOMLENS_TEST_ALERT_WEBHOOK_URL";
        assert!(resolve_secret("k", &format!("env:{var}")).is_err());
        let s = section(
            "alertmanager_headers = { Authorization = 'Basic c2VjcmV0' }\n\
             [[webhooks]]\nurl = 'https://hooks.slack.example/services/T000/B000/XXXX'\nformat = 'slack'\n\
             [[webhooks]]\nurl = 'env:SOME_VAR'\nheaders = { 'X-Token' = 's3cret', 'X-Env' = 'env:TOKEN' }\n",
        );
        let shown = s.redacted();
        let text = toml::to_string(&shown).unwrap();
        assert!(!text.contains("c2VjcmV0") && !text.contains("XXXX") && !text.contains("s3cret"), "{text}");
        assert_eq!(shown.webhooks[0].url, "https://hooks.slack.example/<redacted>");
        assert_eq!(shown.webhooks[1].url, "env:SOME_VAR");
        assert_eq!(shown.webhooks[1].headers["X-Env"], "env:TOKEN");
    }

    #[test]
    fn scenario_filter_names_scenarios() {
        let s = section("scenarios = ['batch', 'host_oom']");
        assert_eq!(s.scenario_filter(), Some(vec![Scenario::Batch, Scenario::HostOom]));
    }
}
