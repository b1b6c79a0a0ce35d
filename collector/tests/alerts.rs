//! OOM alerts against real receivers: a real Alertmanager (Debian's `prometheus-alertmanager`,
//! `oomlens_devkit::devam`) stores the alert with its labels and annotations and notifies its own
//! webhook receiver; webhooks get the JSON and Slack bodies; a receiver that answers 500 twice is
//! retried until it takes the alert, one that answers 400 is not retried; a stalled receiver
//! bounds the queue and the dropped alerts are counted; and end to end, an OOM event stored in a
//! real ClickHouse is attributed by the collector and alerts once — not again on later passes, on
//! a restart or on a forced recompute. Also: every `runbook_url` of the alert rules points at a
//! section of `docs/operations.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use common::*;
use oomlens_collector::alert::document::example_event;
use oomlens_collector::alert::{Alerting, AlertsSection, OomAlert, WebhookConfig, WebhookFormat};
use oomlens_collector::analysis::json::EventJson;
use oomlens_collector::analysis::store::{self, AttributeOptions};
use oomlens_collector::analysis::{EventEvidence, OomFeatures};
use oomlens_collector::metrics::{AlertMetrics, failed_labels, target_labels};
use oomlens_devkit::devam::{DevAlertmanager, DevAmTls};
use serde_json::Value;
use tokio::sync::watch;

// --- A real HTTP receiver ------------------------------------------------------------------------

/// What the receiver got and how it answers.
#[derive(Default)]
struct Inbox {
    /// Every request: (path, JSON body).
    requests: Mutex<Vec<(String, Value)>>,
    /// Statuses to answer per path, in order (then 200).
    plan: Mutex<HashMap<String, VecDeque<u16>>>,
}

struct Receiver {
    addr: SocketAddr,
    inbox: Arc<Inbox>,
    /// Requests to `/stall` wait until this turns true.
    release: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Receiver {
        let inbox = Arc::new(Inbox::default());
        let (release, released) = watch::channel(false);
        let app = Router::new().route("/{*path}", post(receive)).with_state((inbox.clone(), released));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { addr, inbox, release, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}/{path}", self.addr)
    }

    fn plan(&self, path: &str, statuses: &[u16]) {
        self.inbox.plan.lock().unwrap().insert(format!("/{path}"), statuses.iter().copied().collect());
    }

    fn got(&self, path: &str) -> Vec<Value> {
        let path = format!("/{path}");
        self.inbox
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| *p == path)
            .map(|(_, b)| b.clone())
            .collect()
    }

    async fn wait_for(&self, path: &str, n: usize) -> Vec<Value> {
        let ok = wait_until(Duration::from_secs(20), || self.got(path).len() >= n).await;
        let got = self.got(path);
        assert!(ok, "{path}: {} of {n} requests arrived: {got:?}", got.len());
        got
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    State((inbox, mut released)): State<(Arc<Inbox>, watch::Receiver<bool>)>,
    Path(path): Path<String>,
    body: Bytes,
) -> StatusCode {
    let path = format!("/{path}");
    let json = serde_json::from_slice(&body).unwrap_or_else(|e| Value::String(format!("not JSON: {e}")));
    inbox.requests.lock().unwrap().push((path.clone(), json));
    if path == "/stall" {
        let _ = released.wait_for(|r| *r).await;
    }
    let status = inbox.plan.lock().unwrap().get_mut(&path).and_then(VecDeque::pop_front).unwrap_or(200);
    StatusCode::from_u16(status).unwrap()
}

// --- Helpers ---------------------------------------------------------------------------------------

/// A batch OOM of pod ml/trainer-0 on gpu-node-7 GPU 3, failed `age_ms` ago.
fn event(event_id: u64, age_ms: i64) -> EventJson {
    example_event("prod", event_id, oomlens_schema::text::now_ms() - age_ms)
}

fn alert(alerting: &Alerting, event_id: u64) -> OomAlert {
    let now = oomlens_schema::text::now_ms();
    alerting.builder().build(event(event_id, 30_000), Some("GPU-5f8e0c2a"), now, now)
}

fn metrics() -> Arc<AlertMetrics> {
    AlertMetrics::register(&mut prometheus_client::registry::Registry::default())
}

fn counter(
    family: &prometheus_client::metrics::family::Family<
        oomlens_collector::metrics::Labels,
        prometheus_client::metrics::counter::Counter,
    >,
    labels: oomlens_collector::metrics::Labels,
) -> u64 {
    family.get_or_create(&labels).get()
}

fn webhook(url: String, format: WebhookFormat) -> WebhookConfig {
    WebhookConfig { url, format, headers: Default::default() }
}

fn alertmanager_or_skip() -> bool {
    if DevAlertmanager::available() {
        return true;
    }
    assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "CI installs prometheus-alertmanager (.ci/run)");
    eprintln!("SKIPPED: Alertmanager is not installed (apt-get install prometheus-alertmanager)");
    false
}

/// The active alerts of `am` with `event_id`.
fn am_alerts(am: &DevAlertmanager, event_id: &str) -> Vec<Value> {
    let all: Value = serde_json::from_str(&am.alerts_json().unwrap()).unwrap();
    all.as_array().unwrap().iter().filter(|a| a["labels"]["event_id"] == event_id).cloned().collect()
}

async fn wait_am(am: &DevAlertmanager, event_id: &str) -> Value {
    let ok = wait_until(Duration::from_secs(20), || !am_alerts(am, event_id).is_empty()).await;
    assert!(ok, "event {event_id} not in Alertmanager: {}\n{}", am.alerts_json().unwrap(), am.log_tail());
    let mut found = am_alerts(am, event_id);
    assert_eq!(found.len(), 1, "one alert per event: {found:?}");
    found.remove(0)
}

// --- Tests -----------------------------------------------------------------------------------------

/// Two Alertmanagers (an HA pair: each gets every alert) store the alert with its labels and
/// annotations and notify their webhook receiver; the same event sent again is deduplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alertmanager_stores_the_alert_and_notifies() {
    if !alertmanager_or_skip() {
        return;
    }
    let receiver = Receiver::start().await;
    let am = [
        DevAlertmanager::start(&receiver.url("am-0")).unwrap(),
        DevAlertmanager::start(&receiver.url("am-1")).unwrap(),
    ];
    let cfg =
        AlertsSection { alertmanager_urls: am.iter().map(|a| a.url()).collect(), ..AlertsSection::default() };
    let m = metrics();
    let alerting = Alerting::start(&cfg, None, m.clone()).unwrap();
    let a = alert(&alerting, 4242);
    alerting.send(a.clone());
    for am in &am {
        let stored = wait_am(am, "4242").await;
        let labels = &stored["labels"];
        for (k, v) in [
            ("alertname", "GpuOutOfMemory"),
            ("severity", "warning"),
            ("cluster", "prod"),
            ("node", "gpu-node-7"),
            ("gpu", "3"),
            ("gpu_uuid", "GPU-5f8e0c2a"),
            ("namespace", "ml"),
            ("pod", "trainer-0"),
            ("job", "llama-ft"),
            ("scenario", a.event.scenario.as_str()),
        ] {
            assert_eq!(labels[k], v, "{k}: {stored}");
        }
        let ann = &stored["annotations"];
        let summary = ann["summary"].as_str().unwrap();
        assert!(summary.starts_with("OOM on gpu-node-7 GPU 3 (pod ml/trainer-0): "), "{summary}");
        assert!(summary.ends_with("% confident"), "{summary}");
        assert_eq!(ann["postmortem"], "oomlens postmortem 4242 --cluster-name prod --node gpu-node-7");
        assert_eq!(ann["remedy"], a.event.remedy);
        assert!(ann["evidence"].as_str().unwrap().starts_with("rule "), "{ann}");
        assert_eq!(stored["status"]["state"], "active");
        assert_eq!(stored["startsAt"], a.starts_at);
    }
    // Alertmanager's own notification (webhook_configs) carries the alert.
    for path in ["am-0", "am-1"] {
        let note = receiver.wait_for(path, 1).await.remove(0);
        assert_eq!(note["status"], "firing", "{note}");
        let alerts = note["alerts"].as_array().unwrap();
        assert_eq!(alerts.len(), 1, "{note}");
        assert_eq!(alerts[0]["labels"]["event_id"], "4242");
        assert_eq!(alerts[0]["annotations"]["summary"], a.summary());
    }
    let am_labels = target_labels("alertmanager");
    assert!(wait_until(Duration::from_secs(5), || counter(&m.alerts_sent, am_labels.clone()) == 2).await);
    // The same event again (a second collector, a re-sent row): not sent again.
    alerting.send(alert(&alerting, 4242));
    assert_eq!(counter(&m.alerts_deduplicated, am_labels.clone()), 2, "once per Alertmanager");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(counter(&m.alerts_sent, am_labels.clone()), 2);
    for am in &am {
        assert_eq!(am_alerts(am, "4242").len(), 1);
    }
    // Events the filter lets through arrive via the attributor's hook too (no label lookup here).
    let f = OomFeatures::derive(EventEvidence {
        cluster: "prod".into(),
        node: "gpu-node-8".into(),
        event_id: 77,
        ts_ms: oomlens_schema::text::now_ms() - 5_000,
        kind: "host_oom_kill".into(),
        host_rss_bytes: Some(400 << 30),
        window_ms: 60_000,
        ..EventEvidence::default()
    });
    alerting.offer(&[store::to_row(f, &[], oomlens_schema::text::now_ms())]);
    let stored = wait_am(&am[0], "77").await;
    assert_eq!(stored["labels"]["scenario"], "host_oom");
    assert!(stored["labels"].get("gpu").is_none(), "a host OOM names no GPU: {stored}");
    assert!(
        stored["annotations"]["summary"].as_str().unwrap().starts_with("OOM on gpu-node-8: host RAM ran out"),
        "{stored}"
    );
    alerting.shutdown(Duration::from_secs(2)).await;
}

/// Webhooks get the JSON and the Slack body; 500, 500, 200 is retried until delivered; 400 is not
/// retried; a receiver that keeps failing is given up after the retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_get_their_bodies_with_retries_but_not_after_a_4xx() {
    let receiver = Receiver::start().await;
    receiver.plan("flaky", &[500, 500]);
    receiver.plan("bad", &[400]);
    receiver.plan("down", &[503; 10]);
    let cfg = AlertsSection {
        webhooks: vec![
            webhook(receiver.url("json"), WebhookFormat::Json),
            webhook(receiver.url("slack"), WebhookFormat::Slack),
            webhook(receiver.url("flaky"), WebhookFormat::Json),
            webhook(receiver.url("bad"), WebhookFormat::Json),
            webhook(receiver.url("down"), WebhookFormat::Json),
        ],
        max_retries: 3,
        retry_initial_ms: 20,
        retry_max_ms: 100,
        ..AlertsSection::default()
    };
    let m = metrics();
    let alerting = Alerting::start(&cfg, None, m.clone()).unwrap();
    let a = alert(&alerting, 9001);
    alerting.send(a.clone());

    let json = receiver.wait_for("json", 1).await.remove(0);
    assert_eq!(json["version"], "1");
    assert_eq!(json["status"], "firing");
    assert_eq!(json["alert"]["labels"]["event_id"], "9001");
    assert_eq!(json["alert"]["labels"]["pod"], "trainer-0");
    assert_eq!(json["alert"]["annotations"]["summary"], a.summary());
    assert_eq!(json["alert"]["startsAt"], a.starts_at);
    assert_eq!(json["event"]["event_id"], "9001", "the whole attributed event: {json}");
    assert_eq!(json["event"]["scenario"], a.event.scenario.as_str());
    assert!(json["event"]["evidence"].as_array().is_some_and(|e| !e.is_empty()), "{json}");
    assert_eq!(json["event"]["labels"]["k8s.namespace"], "ml");

    let slack = receiver.wait_for("slack", 1).await.remove(0);
    assert_eq!(slack["text"], a.summary());
    let blocks = slack["blocks"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "header");
    let text = slack.to_string();
    assert!(
        text.contains("*Remedy*") && text.contains("ml/trainer-0") && text.contains("Postmortem:"),
        "{text}"
    );

    assert_eq!(receiver.wait_for("flaky", 3).await.len(), 3, "500, 500, then 200");
    receiver.wait_for("bad", 1).await;
    assert_eq!(receiver.wait_for("down", 4).await.len(), 4, "the first try and 3 retries");
    let hooks = target_labels("webhook");
    let settled = wait_until(Duration::from_secs(10), || {
        counter(&m.alerts_sent, hooks.clone()) == 3
            && counter(&m.alerts_failed, failed_labels("webhook", "retries")) == 1
    })
    .await;
    assert!(settled, "sent {}", counter(&m.alerts_sent, hooks.clone()));
    assert_eq!(counter(&m.alerts_failed, failed_labels("webhook", "rejected")), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(receiver.got("bad").len(), 1, "a 400 is not retried");
    assert_eq!(receiver.got("down").len(), 4, "nothing after giving up");
    let send_seconds = m.alert_send_seconds.get_or_create(&hooks).count();
    assert_eq!(send_seconds, 3 + 1 + 4 + 1 + 1, "one observation per request");
    alerting.shutdown(Duration::from_secs(1)).await;
}

/// A receiver that does not answer holds one alert in flight; the queue keeps the newest
/// `queue_capacity` alerts, drops the older ones and counts them; once the receiver answers the
/// kept ones go out, oldest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_receiver_bounds_the_queue_and_counts_the_drops() {
    let receiver = Receiver::start().await;
    let cfg = AlertsSection {
        webhooks: vec![webhook(receiver.url("stall"), WebhookFormat::Json)],
        queue_capacity: 4,
        timeout_ms: 60_000,
        max_retries: 0,
        ..AlertsSection::default()
    };
    let m = metrics();
    let alerting = Alerting::start(&cfg, None, m.clone()).unwrap();
    alerting.send(alert(&alerting, 1));
    receiver.wait_for("stall", 1).await;
    for id in 2..=20 {
        alerting.send(alert(&alerting, id));
    }
    let hooks = target_labels("webhook");
    assert_eq!(counter(&m.alerts_dropped, hooks.clone()), 15, "19 queued behind a stalled request, 4 kept");
    assert_eq!(m.alerts_queued.get_or_create(&hooks).get(), 4);
    assert_eq!(alerting.queued(), 4);
    receiver.release.send_replace(true);
    let got = receiver.wait_for("stall", 5).await;
    let ids: Vec<&str> = got.iter().map(|b| b["alert"]["labels"]["event_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["1", "17", "18", "19", "20"], "the oldest waiting ones were dropped");
    assert!(wait_until(Duration::from_secs(5), || counter(&m.alerts_sent, hooks.clone()) == 5).await);
    assert_eq!(m.alerts_queued.get_or_create(&hooks).get(), 0);
    alerting.shutdown(Duration::from_secs(1)).await;
}

/// An Alertmanager behind mutual TLS: the alert goes over HTTPS, verified against `alerts.tls_ca`
/// and presenting `alerts.tls_cert`; without the client certificate the handshake is refused and
/// the alert is given up after its retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alertmanager_over_mutual_tls() {
    if !alertmanager_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = oomlens_collector::ingest::certs::mint_dev_pki(
        dir.path(),
        &["127.0.0.1".to_owned()],
        "test",
        &["alert-sender".to_owned()],
        2,
    )
    .unwrap();
    let receiver = Receiver::start().await;
    let tls = DevAmTls {
        cert: pki.collector.cert.clone(),
        key: pki.collector.key.clone(),
        client_ca: Some(pki.ca.clone()),
    };
    let am = DevAlertmanager::start_tls(&receiver.url("am-tls"), &tls).unwrap();
    assert!(am.url().starts_with("https://"));
    let client = &pki.agents[0].1;
    let cfg = AlertsSection {
        alertmanager_urls: vec![am.url()],
        tls_ca: Some(pki.ca.clone()),
        tls_cert: Some(client.cert.clone()),
        tls_key: Some(client.key.clone()),
        ..AlertsSection::default()
    };
    let m = metrics();
    let alerting = Alerting::start(&cfg, None, m.clone()).unwrap();
    alerting.send(alert(&alerting, 555));
    let note = receiver.wait_for("am-tls", 1).await.remove(0);
    assert_eq!(note["alerts"][0]["labels"]["event_id"], "555", "{note}");
    assert_eq!(counter(&m.alerts_sent, target_labels("alertmanager")), 1);
    alerting.shutdown(Duration::from_secs(1)).await;

    // No client certificate: refused at the handshake, retried, given up.
    let cfg = AlertsSection {
        tls_cert: None,
        tls_key: None,
        max_retries: 1,
        retry_initial_ms: 10,
        retry_max_ms: 10,
        ..cfg
    };
    let m = metrics();
    let alerting = Alerting::start(&cfg, None, m.clone()).unwrap();
    alerting.send(alert(&alerting, 556));
    let failed = || counter(&m.alerts_failed, failed_labels("alertmanager", "retries")) == 1;
    assert!(wait_until(Duration::from_secs(10), failed).await);
    assert_eq!(counter(&m.alerts_sent, target_labels("alertmanager")), 0);
    alerting.shutdown(Duration::from_secs(1)).await;
    assert_eq!(receiver.got("am-tls").len(), 1, "nothing arrived without the client certificate");
}

/// One `oom_events` row in the fixtures' shape, for `node`, failed `age_ms` ago.
fn event_row(node: &str, event_id: u64, age_ms: i64) -> String {
    let line =
        sql_fixture("oom_events").lines().find(|l| l.contains("\"kind\": \"cuda_oom\"")).unwrap().to_owned();
    let mut row: Value = serde_json::from_str(&line).unwrap();
    let now = oomlens_schema::text::now_ms();
    row["cluster"] = "e2e".into();
    row["node"] = node.into();
    row["event_id"] = event_id.into();
    row["ts_ms"] = (now - age_ms).into();
    row["received_ms"] = (now - age_ms + 200).into();
    row["gpu_index"] = 2.into();
    row["label_keys"] = serde_json::json!(["k8s.namespace", "k8s.pod", "job"]);
    row["label_values"] = serde_json::json!(["research", "llama-train-0", "llama-70b"]);
    row.to_string()
}

fn agents_row(node: &str) -> String {
    let line = sql_fixture("agents").lines().next().unwrap().to_owned();
    let mut row: Value = serde_json::from_str(&line).unwrap();
    row["cluster"] = "e2e".into();
    row["node"] = node.into();
    row["ts_ms"] = oomlens_schema::text::now_ms().into();
    row["gpu_indices"] = serde_json::json!([0, 1, 2, 3]);
    row["gpu_uuids"] = serde_json::json!(["GPU-a0", "GPU-a1", "GPU-a2", "GPU-a3"]);
    row.to_string()
}

async fn insert(ch: &oomlens_collector::clickhouse::Ch, table: &str, rows: &str) {
    ch.client()
        .query_raw(&format!("INSERT INTO oomlens.{table} FORMAT JSONEachRow\n{rows}"))
        .execute()
        .await
        .unwrap_or_else(|e| panic!("inserting into {table}: {e}"));
}

/// An OOM event stored in a real ClickHouse → the collector's attributor → an alert in
/// Alertmanager and at the webhook, with the pod / namespace / job labels and the GPU UUID looked
/// up in ClickHouse; later passes, a restarted collector and a forced recompute send nothing
/// again; a new event alerts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attributed_event_alerts_once_end_to_end() {
    if !alertmanager_or_skip() {
        return;
    }
    let t0 = std::time::Instant::now();
    let receiver = Receiver::start().await;
    let am = DevAlertmanager::start(&receiver.url("am")).unwrap();
    let (server, ch) = migrated_clickhouse().await;
    step!(t0, "ClickHouse and Alertmanager up");
    insert(&ch, "agents", &agents_row("gpu-node-3")).await;
    insert(&ch, "oom_events", &event_row("gpu-node-3", 1001, 20_000)).await;
    // A re-sent copy of the event: still one alert.
    insert(&ch, "oom_events", &event_row("gpu-node-3", 1001, 20_000)).await;

    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &["gpu-node-3"]);
    let config = |listen| {
        let mut cfg = collector_config(&pki, &server.url(), listen);
        cfg.attribution.interval_ms = 200;
        cfg.attribution.settle_ms = 0;
        cfg.alerts.alertmanager_urls = vec![am.url()];
        cfg.alerts.webhooks = vec![webhook(receiver.url("hook"), WebhookFormat::Json)];
        cfg.alerts.labels.insert("team".into(), "ml-infra".into());
        cfg
    };
    let (collector, _stop) = start_collector(config(reserve_addr())).await;
    let note = receiver.wait_for("hook", 1).await.remove(0);
    step!(t0, "webhook got the alert");
    let labels = &note["alert"]["labels"];
    for (k, v) in [
        ("cluster", "e2e"),
        ("node", "gpu-node-3"),
        ("gpu", "2"),
        ("gpu_uuid", "GPU-a2"),
        ("namespace", "research"),
        ("pod", "llama-train-0"),
        ("job", "llama-70b"),
        ("event_id", "1001"),
        ("team", "ml-infra"),
    ] {
        assert_eq!(labels[k], v, "{k}: {note}");
    }
    assert_eq!(note["event"]["labels"]["k8s.pod"], "llama-train-0");
    let stored = wait_am(&am, "1001").await;
    assert_eq!(stored["labels"], *labels, "the same label set in Alertmanager");
    let scenario = labels["scenario"].as_str().unwrap().to_owned();
    assert_eq!(
        collector
            .alert_metrics
            .oom_events_attributed
            .get_or_create(&vec![("scenario", scenario.clone())])
            .get(),
        1
    );
    let latency = collector.alert_metrics.alert_latency_seconds.get_or_create(&target_labels("webhook"));
    assert_eq!(latency.count(), 1, "one event → alert latency observed");
    assert!(latency.sum() >= 20.0, "measured from the failure, 20 s ago: {}", latency.sum());
    drop(latency);

    // Later passes find nothing new.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(receiver.got("hook").len(), 1, "no second alert from later passes");
    collector.shutdown().await;

    // A restarted collector (its sent-set is gone) does not alert again: the event is attributed.
    let (collector, _stop2) = start_collector(config(reserve_addr())).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(receiver.got("hook").len(), 1, "no alert after a restart");
    let attributed: u64 = oomlens_schema::Scenario::ALL
        .iter()
        .map(|s| {
            collector
                .alert_metrics
                .oom_events_attributed
                .get_or_create(&vec![("scenario", s.as_str().to_owned())])
                .get()
        })
        .sum();
    assert_eq!(attributed, 0);

    // A forced recompute (`oomlens attribute --force`) re-stores the row and notifies nobody.
    let now = oomlens_schema::text::now_ms();
    let opts = AttributeOptions { settle_ms: 0, force: true, ..AttributeOptions::new(0, now + 1, now) };
    let mut notified = 0;
    let report = store::attribute_pending_notify(ch.client(), "oomlens", &opts, &mut |_| {}, &mut |rows| {
        notified += rows.len()
    })
    .await
    .unwrap();
    assert_eq!((report.attributed, notified), (1, 0), "{report:?}");

    // A new event alerts.
    insert(&ch, "oom_events", &event_row("gpu-node-3", 1002, 5_000)).await;
    let got = receiver.wait_for("hook", 2).await;
    assert_eq!(got[1]["alert"]["labels"]["event_id"], "1002");
    wait_am(&am, "1002").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(receiver.got("hook").len(), 2);
    assert_eq!(am_alerts(&am, "1001").len(), 1);
    step!(t0, "done");
    collector.shutdown().await;
    drop(ch);
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Every `runbook_url` of the alert rules points at a heading of `docs/operations.md`.
#[test]
fn runbook_links_point_at_sections_of_operations_md() {
    let root = repo_root();
    let rules = std::fs::read_to_string(root.join("deploy/prometheus/alerts.yaml")).unwrap();
    let docs = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    // GitHub's anchors: lower case, spaces to '-', punctuation other than '-' and '_' dropped.
    let anchors: Vec<String> = docs
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| {
            h.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let links: Vec<&str> =
        rules.lines().filter_map(|l| l.trim().strip_prefix("runbook_url:")).map(str::trim).collect();
    assert!(links.len() >= 3, "{links:?}");
    for link in links {
        let link = link.trim_matches('"');
        let (page, anchor) = link.split_once('#').unwrap();
        assert!(page.ends_with("docs/operations.md"), "{link}");
        assert!(anchors.iter().any(|a| a == anchor), "{link}: no such heading in docs/operations.md");
    }
}
