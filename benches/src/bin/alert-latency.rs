//! `cargo run --release -p oomlens-benches --bin alert-latency`: how long an attributed OOM event
//! takes to become an alert — from the attributor's hook (`Alerting::offer` with the rows it just
//! stored) to the request arriving at a real HTTP receiver (a webhook, JSON body), and to the
//! alert being visible in a real Alertmanager (`GET /api/v2/alerts`, polled). Optionally
//! (`--clickhouse`) with the labels looked up in a throw-away ClickHouse, as the collector does.
//!
//! Baselines measured in the same run: the same body `POST`ed bare (`AlertHttp::post_json` on a
//! warm connection: no filter, attribution document, queue, dedup or retry loop) to the same
//! receiver, and to the same Alertmanager, polled the same way. Each iteration is one event,
//! sequentially (latency, not throughput); medians and tails are printed as a Markdown table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use clap::Parser;
use http::{HeaderMap, Uri};
use oomlens_collector::alert::document::{example_evidence, example_labels};
use oomlens_collector::alert::http::{AlertHttp, Delivery};
use oomlens_collector::alert::{Alerting, AlertsSection, LabelSource, WebhookConfig, WebhookFormat, webhook};
use oomlens_collector::analysis::json::EventJson;
use oomlens_collector::analysis::store::to_row;
use oomlens_collector::analysis::{EventEvidence, OomFeatures, attribute};
use oomlens_collector::metrics::AlertMetrics;
use oomlens_devkit::devam::DevAlertmanager;
use oomlens_devkit::devch::DevClickHouse;
use oomlens_schema::rows::OomAttributionRow;
use tokio::sync::mpsc;

/// Event → alert latency against a real webhook receiver and a real Alertmanager.
#[derive(Debug, Parser)]
struct Args {
    /// Events per webhook measurement.
    #[arg(long, default_value_t = 300)]
    iterations: usize,
    /// Events per Alertmanager measurement.
    #[arg(long, default_value_t = 100)]
    am_iterations: usize,
    /// Also measure with the labels looked up in a throw-away ClickHouse.
    #[arg(long)]
    clickhouse: bool,
}

/// Arrivals at the receiver: (when, the request's event id).
type Arrivals = mpsc::UnboundedSender<(Instant, String)>;

async fn receive(State(tx): State<Arrivals>, body: Bytes) -> &'static str {
    let at = Instant::now();
    let id = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["alert"]["labels"]["event_id"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let _ = tx.send((at, id));
    "ok"
}

/// A batch OOM attributed now (its row as the attributor stores it).
fn row(event_id: u64) -> OomAttributionRow {
    let now = oomlens_schema::text::now_ms();
    let f = OomFeatures::derive(EventEvidence {
        window_ms: 60_000,
        ..example_evidence("bench", event_id, now - 150_000)
    });
    to_row(f, &[], now)
}

fn event_of(row: &OomAttributionRow) -> EventJson {
    let f = oomlens_collector::analysis::store::features_of(row);
    EventJson::new(&f, &attribute(&f), &example_labels())
}

#[derive(Debug, Default)]
struct Stats {
    name: String,
    samples: Vec<Duration>,
}

impl Stats {
    fn quantile(&self, q: f64) -> Duration {
        let mut s = self.samples.clone();
        s.sort_unstable();
        s.get(((s.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default()
    }

    fn mean(&self) -> Duration {
        self.samples.iter().sum::<Duration>() / u32::try_from(self.samples.len().max(1)).unwrap_or(u32::MAX)
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// Waits for the arrival of `id` (earlier arrivals of other ids are skipped).
async fn arrival(rx: &mut mpsc::UnboundedReceiver<(Instant, String)>, id: &str) -> anyhow::Result<Instant> {
    loop {
        let (at, got) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .context("no request arrived within 10 s")?
            .context("receiver gone")?;
        if got == id {
            return Ok(at);
        }
    }
}

/// Polls Alertmanager until an alert with `event_id` is listed; the time it was first seen.
async fn visible(am: &Arc<DevAlertmanager>, event_id: u64) -> anyhow::Result<Instant> {
    let am = am.clone();
    tokio::task::spawn_blocking(move || {
        let path = format!("/api/v2/alerts?filter=event_id%3D%22{event_id}%22");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let body = am.get(&path)?;
            if body.contains(&format!("\"event_id\":\"{event_id}\"")) {
                return Ok(Instant::now());
            }
        }
        bail!("event {event_id} not visible in Alertmanager within 10 s")
    })
    .await?
}

fn alerting(cfg: &AlertsSection, labels: Option<LabelSource>) -> anyhow::Result<Alerting> {
    let metrics = AlertMetrics::register(&mut prometheus_client::registry::Registry::default());
    Ok(Alerting::start(cfg, labels, metrics)?)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (tx, mut rx) = mpsc::unbounded_channel();
    // Alertmanager's own notifications (am-notify) are accepted and ignored.
    let app = Router::new()
        .route("/hook", post(receive))
        .route("/am-notify", post(|| async { "ok" }))
        .with_state(tx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook_url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = AlertHttp::new(None, Duration::from_secs(5))?;
    let hook_uri: Uri = hook_url.parse()?;
    let mut results: Vec<Stats> = Vec::new();
    let mut next_id = 1_000u64;
    let mut id = || {
        next_id += 1;
        next_id
    };
    let warmup = 20;

    // Webhook, bare POST of the same body (the baseline).
    let base_cfg = AlertsSection {
        webhooks: vec![WebhookConfig {
            url: hook_url.clone(),
            format: WebhookFormat::Json,
            headers: Default::default(),
        }],
        ..AlertsSection::default()
    };
    let hooks = alerting(&base_cfg, None)?;
    let mut bare =
        Stats { name: "webhook: bare POST of the same body (baseline)".into(), ..Stats::default() };
    for i in 0..warmup + args.iterations {
        let r = row(id());
        let now = oomlens_schema::text::now_ms();
        let alert = hooks.builder().build(event_of(&r), Some("GPU-5f8e0c2a"), now, now);
        let body = Bytes::from(webhook::body(&alert, WebhookFormat::Json)?);
        let t0 = Instant::now();
        match http.post_json(&hook_uri, &HeaderMap::new(), body).await {
            Delivery::Delivered(_) => {}
            other => bail!("baseline POST failed: {other:?}"),
        }
        let at = arrival(&mut rx, &r.event_id.to_string()).await?;
        if i >= warmup {
            bare.samples.push(at - t0);
        }
    }
    results.push(bare);

    // Webhook, from the attributor's hook.
    let mut piped = Stats { name: "webhook: attributed row → alert received".into(), ..Stats::default() };
    for i in 0..warmup + args.iterations {
        let r = row(id());
        let t0 = Instant::now();
        hooks.offer(std::slice::from_ref(&r));
        let at = arrival(&mut rx, &r.event_id.to_string()).await?;
        if i >= warmup {
            piped.samples.push(at - t0);
        }
    }
    results.push(piped);
    hooks.shutdown(Duration::from_secs(1)).await;

    // The same with the labels looked up in ClickHouse (two queries per batch).
    let _clickhouse = if args.clickhouse {
        let server = DevClickHouse::start().context("ClickHouse for --clickhouse")?;
        let ch = oomlens_collector::clickhouse::Ch::connect(&oomlens_collector::clickhouse::ChConfig::new(
            server.url(),
        ))
        .await?;
        ch.migrate().await?;
        let source = LabelSource {
            client: ch.client().clone(),
            database: ch.database().to_owned(),
            timeout: Duration::from_secs(5),
        };
        let with_labels = alerting(&base_cfg, Some(source))?;
        let mut looked = Stats {
            name: "webhook: attributed row → alert received, labels from ClickHouse".into(),
            ..Stats::default()
        };
        for i in 0..warmup + args.iterations {
            let r = row(id());
            let t0 = Instant::now();
            with_labels.offer(std::slice::from_ref(&r));
            let at = arrival(&mut rx, &r.event_id.to_string()).await?;
            if i >= warmup {
                looked.samples.push(at - t0);
            }
        }
        results.push(looked);
        with_labels.shutdown(Duration::from_secs(1)).await;
        Some((server, ch))
    } else {
        None
    };

    // Alertmanager: bare POST, then from the hook; each until listed by GET /api/v2/alerts.
    match DevAlertmanager::start(&hook_url.replace("/hook", "/am-notify")) {
        Err(e) => eprintln!("Alertmanager skipped: {e}"),
        Ok(am) => {
            let am = Arc::new(am);
            let am_cfg = AlertsSection { alertmanager_urls: vec![am.url()], ..AlertsSection::default() };
            let to_am = alerting(&am_cfg, None)?;
            let am_uri: Uri = format!("{}/api/v2/alerts", am.url()).parse()?;
            let mut bare = Stats {
                name: "Alertmanager: bare POST of the same body, until listed (baseline)".into(),
                ..Stats::default()
            };
            let mut piped =
                Stats { name: "Alertmanager: attributed row → alert listed".into(), ..Stats::default() };
            for i in 0..warmup / 2 + args.am_iterations {
                let r = row(id());
                let now = oomlens_schema::text::now_ms();
                let alert = to_am.builder().build(event_of(&r), None, now, now);
                let body = Bytes::from(oomlens_collector::alert::alertmanager::body(&[Arc::new(alert)])?);
                let t0 = Instant::now();
                match http.post_json(&am_uri, &HeaderMap::new(), body).await {
                    Delivery::Delivered(_) => {}
                    other => bail!("baseline POST to Alertmanager failed: {other:?}"),
                }
                let at = visible(&am, r.event_id).await?;
                let r2 = row(id());
                let t1 = Instant::now();
                to_am.offer(std::slice::from_ref(&r2));
                let at2 = visible(&am, r2.event_id).await?;
                if i >= warmup / 2 {
                    bare.samples.push(at - t0);
                    piped.samples.push(at2 - t1);
                }
            }
            results.push(bare);
            results.push(piped);
            to_am.shutdown(Duration::from_secs(1)).await;
        }
    }

    println!("| path | n | p50 ms | p90 ms | p99 ms | mean ms | p50 ÷ its baseline |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut baseline = Duration::ZERO;
    for s in &results {
        if s.name.contains("(baseline)") {
            baseline = s.quantile(0.5);
        }
        let ratio = s.quantile(0.5).as_secs_f64() / baseline.as_secs_f64().max(1e-9);
        println!(
            "| {} | {} | {} | {} | {} | {} | {ratio:.2} |",
            s.name,
            s.samples.len(),
            ms(s.quantile(0.5)),
            ms(s.quantile(0.9)),
            ms(s.quantile(0.99)),
            ms(s.mean())
        );
    }
    Ok(())
}
