//! `attribution-data`: loads a fleet-sized data set into a throw-away local ClickHouse — GPU and
//! process samples at 1 Hz over `--days` for `--nodes` × `--gpus` × `--procs` processes, plus
//! `--events` OOM events with the attribution-relevant fields spread over the window — generated
//! inside ClickHouse with `INSERT … SELECT … FROM numbers()` (one insert per node and day, with a
//! progress bar), then stores every event's attribution once (`oom_attributions`, the backfill
//! `oomlens attribute` runs; timed as the one-off cost) and times the report queries:
//! one postmortem, the fleet breakdown by scenario over the whole window (the shipped SQL and the
//! CLI's path over the stored rows), and the capacity report. Results go to benches/README.md.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use oomlens_cli::capacity::{self, GroupBy};
use oomlens_cli::postmortem::{self, Lookback, Selection};
use oomlens_collector::analysis::queries::{self, ParamValue};
use oomlens_collector::analysis::{self, FeatureWindow, store};
use oomlens_collector::clickhouse::{Ch, ChConfig};
use oomlens_devkit::devch::DevClickHouse;

/// Window start: 2026-01-05T00:00:00Z.
const BASE_MS: i64 = 1_767_571_200_000;
const DAY_MS: i64 = 86_400_000;
const CAPACITY: u64 = 85_899_345_920;

#[derive(Debug, Parser)]
#[command(about = "Load ≥ 100 M samples and ≥ 100 k OOM events into a local ClickHouse and time the reports")]
struct Args {
    /// Directory of the throw-away server (kept, so a second run can skip the load).
    #[arg(long, default_value = "/tmp/oomlens-bench-ch")]
    dir: std::path::PathBuf,
    /// Number of simulated nodes (`node-00`, `node-01`, …).
    #[arg(long, default_value_t = 6)]
    nodes: u32,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    /// Processes per GPU.
    #[arg(long, default_value_t = 3)]
    procs: u32,
    /// Days at 1 Hz.
    #[arg(long, default_value_t = 7)]
    days: u32,
    /// OOM events.
    #[arg(long, default_value_t = 100_000)]
    events: u64,
    /// Keep the data already loaded in --dir.
    #[arg(long)]
    skip_load: bool,
    /// Time only these: attribute (the backfill of oom_attributions), postmortem, breakdown,
    /// headroom, capacity, breakdown-live (the old live computation; only when named)
    /// (comma-separated; default all but breakdown-live).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Timed repetitions of each query (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

async fn load(ch: &Ch, a: &Args) -> anyhow::Result<()> {
    let (g, p) = (u64::from(a.gpus), u64::from(a.procs));
    let steps = u64::from(a.nodes) * u64::from(a.days) * 2 + 1;
    let bar = ProgressBar::new(steps);
    bar.set_style(ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")?);
    let t0 = Instant::now();
    for node in 0..a.nodes {
        for day in 0..a.days {
            let start = BASE_MS + i64::from(day) * DAY_MS;
            bar.set_message(format!("gpu_samples node {node} day {day}"));
            // Used memory: a per-GPU ramp that restarts every hour, from 35 % up to 95 %.
            let sql = format!(
                "INSERT INTO oomlens.gpu_samples (cluster, node, gpu_index, ts_ms, agent_id, memory_used_bytes, \
                 memory_free_bytes, memory_total_bytes, util_gpu_pct) \
                 SELECT 'bench', 'node-{node:02}', toUInt32(number % {g}) AS gpu, {start} + intDiv(number, {g}) * 1000 AS ts, \
                 'agent-{node:02}', toUInt64({CAPACITY} * (0.35 + 0.6 * ((intDiv(number, {g}) + gpu * 997 + {node} * 131) % 3600) / 3600)) AS used, \
                 {CAPACITY} - used, {CAPACITY}, toUInt8(number % 100) \
                 FROM numbers({})",
                86_400 * g
            );
            ch.client()
                .query(&sql)
                .execute()
                .await
                .with_context(|| format!("gpu_samples node {node} day {day}"))?;
            bar.inc(1);
            bar.set_message(format!("process_samples node {node} day {day}"));
            // Processes: `procs` per GPU sharing its memory 3:2:1…, 40 workloads, 3 namespaces.
            let sql = format!(
                "INSERT INTO oomlens.process_samples (cluster, node, gpu_index, ts_ms, pid, agent_id, process_name, \
                 used_bytes, workload, label_keys, label_values) \
                 SELECT 'bench', 'node-{node:02}', toUInt32(intDiv(number, {p}) % {g}) AS gpu, \
                 {start} + intDiv(number, {gp}) * 1000 AS ts, toUInt32(100000 + {node} * 1000 + gpu * 10 + number % {p}) AS pid, \
                 'agent-{node:02}', 'python3', \
                 toUInt64({CAPACITY} * (0.35 + 0.6 * ((intDiv(number, {gp}) + gpu * 997 + {node} * 131) % 3600) / 3600) \
                   * ({p} - number % {p}) / ({p} * ({p} + 1) / 2)), \
                 concat('job-', toString((({node} * {g} + gpu) * {p} + number % {p}) % 40)), \
                 ['namespace', 'pod'], [concat('ns-', toString(number % {p})), concat('pod-', toString(pid))] \
                 FROM numbers({})",
                86_400 * g * p,
                gp = g * p
            );
            ch.client()
                .query(&sql)
                .execute()
                .await
                .with_context(|| format!("process_samples node {node} day {day}"))?;
            bar.inc(1);
        }
    }
    bar.set_message("oom_events");
    // Events spread over the window on every GPU, with the fields the rules read: a mix of
    // static (huge params), batch (large requests), contention (small own use, large others),
    // fragmentation (reserved ≫ allocated) and host OOM kills.
    let span = i64::from(a.days) * DAY_MS;
    let sql = format!(
        "INSERT INTO oomlens.oom_events (cluster, node, ts_ms, event_id, agent_id, received_ms, kind, source, framework, \
         gpu_index, pid, requested_bytes, capacity_bytes, free_bytes, allocated_bytes, reserved_bytes, process_used_bytes, \
         phase, params, batch_size, seq_len, heads, precision, optimizer, workload, label_keys, label_values) \
         SELECT 'bench', concat('node-', if(number % {nodes} < 10, '0', ''), toString(number % {nodes})) AS n, \
         {BASE_MS} + intDiv(number * {span}, {events}) + 500 AS ts, number + 1, concat('agent-', substring(n, 6)), ts + 100, \
         if(number % 10 = 9, 'host_oom_kill', 'cuda_oom'), 'bench', 'pytorch', \
         if(number % 10 = 9, NULL, toUInt32(intDiv(number, {nodes}) % {g})) AS gpu, \
         toUInt32(100000 + (number % {nodes}) * 1000 + ifNull(gpu, 0) * 10) AS pid, \
         toUInt64(if(number % 5 = 1, 20, 2) * 1073741824), {CAPACITY}, 536870912, \
         toUInt64(if(number % 5 = 2, 20, 60) * 1073741824), toUInt64(if(number % 5 = 3, 79, 61) * 1073741824), \
         toUInt64(if(number % 5 = 2, 21, 62) * 1073741824), \
         if(number % 5 = 0, 'optimizer_init', 'forward'), if(number % 5 = 0, 70000000000, 1300000000), 8, 2048, 16, \
         'bf16', 'adamw', concat('job-', toString(number % 40)), ['pod'], [concat('pod-', toString(pid))] \
         FROM numbers({events})",
        nodes = a.nodes,
        events = a.events
    );
    ch.client().query(&sql).execute().await.context("oom_events")?;
    bar.inc(1);
    bar.finish_with_message(format!("loaded in {:.1} s", t0.elapsed().as_secs_f64()));
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn time<F, Fut, T>(runs: usize, mut f: F) -> anyhow::Result<(Duration, Duration, T)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut times = Vec::with_capacity(runs);
    let t = Instant::now();
    let mut last = f().await?;
    let first = t.elapsed();
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        last = f().await?;
        times.push(t.elapsed());
    }
    Ok((first, median(times), last))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let server = DevClickHouse::start_in(&a.dir).context("starting ClickHouse")?;
    let cfg = ChConfig {
        url: server.url(),
        retention: oomlens_schema::ddl::Retention { samples_days: 0, events_days: 0 },
        ..ChConfig::default()
    };
    let ch = Ch::connect(&cfg).await?;
    ch.migrate().await?;
    if !a.skip_load {
        // The migration created the rollup views first, so the load below fills the per-minute
        // rollups as the collector's inserts would.
        for t in ["gpu_samples", "process_samples", "oom_events", "gpu_minutes", "process_minutes"] {
            ch.client().query(&format!("TRUNCATE TABLE oomlens.{t}")).execute().await?;
        }
        load(&ch, &a).await?;
    }
    let db = ch.client();
    let count = |t: &'static str| async move {
        let sql = format!("SELECT count() FROM oomlens.{t}");
        db.query(&sql).fetch_one::<u64>().await.with_context(|| t.to_owned())
    };
    let (gs, ps, ev) =
        (count("gpu_samples").await?, count("process_samples").await?, count("oom_events").await?);
    println!("rows: gpu_samples {gs}, process_samples {ps} (total {}), oom_events {ev}", gs + ps);
    let (gm, pm) = (count("gpu_minutes").await?, count("process_minutes").await?);
    println!("rollup rows (before merges): gpu_minutes {gm}, process_minutes {pm}");
    let until = BASE_MS + i64::from(a.days) * DAY_MS;

    let want = |what: &str| a.only.is_empty() || a.only.iter().any(|o| o == what);

    // The one-off cost of storing every event's attribution (oom_attributions): what
    // `oomlens attribute` does after an upgrade; the collector's attributor then keeps up with
    // arriving events. The reports below read the stored rows.
    if want("attribute") {
        ch.client().query("TRUNCATE TABLE oomlens.oom_attributions").execute().await?;
        let opts = store::AttributeOptions::new(BASE_MS, until, oomlens_schema::text::now_ms());
        let bar = ProgressBar::new(0);
        bar.set_style(ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} events attributed ({per_sec})",
        )?);
        let t = Instant::now();
        let r = store::attribute_pending_with_progress(db, "oomlens", &opts, &mut |p| {
            bar.set_length(p.total);
            bar.set_position(p.done);
        })
        .await?;
        bar.finish_and_clear();
        let took = t.elapsed().as_secs_f64();
        println!(
            "attribute (backfill, one-off): {} events in {} chunks, {took:.1} s ({:.0} events/s)",
            r.attributed,
            r.chunks,
            r.attributed as f64 / took.max(1e-9)
        );
    }

    // One postmortem: select by id, explain (features + neighbours), the 10-minute curve.
    // A GPU event (every tenth is a host OOM kill).
    let id = a.events / 2 + 1;
    if want("postmortem") {
        let (first, med, n) = time(a.runs, || async {
            let sel = Selection {
                since_ms: 0,
                until_ms: i64::MAX,
                event_id: Some(id),
                cluster: None,
                node: None,
                gpu_index: None,
                workload: None,
                pod: None,
                // As `oomlens postmortem --event ID` asks (its default `--max-events`).
                max_events: 20,
            };
            let evs = postmortem::find_events(db, "oomlens", &sel).await?;
            let ev = evs.events.first().context("event missing")?;
            let pm =
                postmortem::build(db, "oomlens", ev, Lookback::default()).await?.context("not explained")?;
            Ok(pm.curve.map_or(0, |c| c.processes.len()))
        })
        .await?;
        println!(
            "postmortem (event {id}): first {:.0} ms, median {:.0} ms ({n} process curves)",
            ms(first),
            ms(med)
        );
    }

    // Fleet breakdown by attributed scenario over the whole window.
    let window = FeatureWindow { since_ms: BASE_MS, until_ms: until, window_ms: 60_000 };
    if want("breakdown") {
        // The shipped SQL over the stored rows (Grafana, clickhouse-client).
        let (first, med, n) = time(a.runs, || async {
            let q = queries::builtin("attribution_breakdown")?;
            let rows = q
                .bind(db, "oomlens", &[ParamValue::Int(BASE_MS), ParamValue::Int(until)])?
                .fetch_bytes("TSV")?
                .collect()
                .await?;
            Ok(rows.iter().filter(|b| **b == b'\n').count())
        })
        .await?;
        println!(
            "scenario breakdown, attribution_breakdown.sql ({} days, {n} scenario/kind rows): first {:.0} ms, median {:.0} ms",
            a.days,
            ms(first),
            ms(med)
        );
        // The same in Rust as the capacity report reads it: the stored scenario of each event
        // (written by the current rules version; others would be re-scored).
        let (first, med, n) = time(a.runs, || async {
            let w = store::read_window_scenarios(db, "oomlens", &window, false).await?;
            let mut by: std::collections::BTreeMap<&str, u64> = Default::default();
            for e in &w.events {
                *by.entry(e.scenario.as_str()).or_default() += 1;
            }
            Ok(format!(
                "{} events ({} stored, {} re-scored, {} live): {by:?}",
                w.events.len(),
                w.stored,
                w.rescored,
                w.live
            ))
        })
        .await?;
        println!(
            "scenario breakdown, stored scenarios ({} days, {n}): first {:.0} ms, median {:.0} ms",
            a.days,
            ms(first),
            ms(med)
        );
        // Every stored row's features read back and the current rules' decision re-run (the cost
        // after a rules upgrade, before `oomlens attribute --force`).
        let (first, med, n) = time(a.runs, || async {
            let w = store::read_window_features(db, "oomlens", &window, false).await?;
            let mut by: std::collections::BTreeMap<&str, u64> = Default::default();
            for f in &w.features {
                *by.entry(analysis::attribute(f).scenario.as_str()).or_default() += 1;
            }
            Ok(format!("{} events ({} stored): {by:?}", w.features.len(), w.stored))
        })
        .await?;
        println!(
            "scenario breakdown, stored features re-scored by the current rules ({} days, {n}): first {:.0} ms, median {:.0} ms",
            a.days,
            ms(first),
            ms(med)
        );
        // Every event fully attributed (rule, confidence, evidence lines, remedy).
        let (first, med, n) = time(a.runs.min(2), || async {
            Ok(analysis::attribute_window(db, "oomlens", &window).await?.len())
        })
        .await?;
        println!(
            "attribute_window over stored rows, with evidence ({n} events): first {:.0} ms, median {:.0} ms",
            ms(first),
            ms(med)
        );
    }
    if a.only.iter().any(|o| o == "breakdown-live") {
        // The old way, for comparison: features computed from every sample at query time.
        let (first, med, n) = time(a.runs.min(1), || async {
            Ok(analysis::attribute_window_live(db, "oomlens", &window).await?.len())
        })
        .await?;
        println!(
            "scenario breakdown computed live ({} days, {n} events attributed): first {:.0} ms, median {:.0} ms",
            a.days,
            ms(first),
            ms(med)
        );
    }

    // The headroom queries alone (per-minute rollups), by node and by GPU model.
    if want("headroom") {
        for by in [GroupBy::Node, GroupBy::GpuModel] {
            let (first, med, n) = time(a.runs, || async {
                Ok(capacity::headroom(db, "oomlens", by, BASE_MS, until).await?.len())
            })
            .await?;
            println!(
                "capacity_headroom by {} ({n} groups): first {:.0} ms, median {:.0} ms",
                by.as_str(),
                ms(first),
                ms(med)
            );
        }
    }

    // Capacity report by node over the whole window.
    if want("capacity") {
        // Its attribution part alone: the events, each one's scenario and top neighbours.
        let (first, med, n) = time(a.runs, || async {
            let events = queries::builtin("capacity_events")?
                .bind(db, "oomlens", &[ParamValue::Int(BASE_MS), ParamValue::Int(until)])?
                .fetch_all::<capacity::CapacityEvent>()
                .await?;
            let w = store::read_window_scenarios(db, "oomlens", &window, true).await?;
            Ok(format!(
                "{} events, {} scenarios, {} neighbours",
                events.len(),
                w.events.len(),
                w.neighbours.len()
            ))
        })
        .await?;
        println!(
            "capacity report, attribution part (capacity_events + stored scenarios and neighbours; {n}): first {:.0} ms, median {:.0} ms",
            ms(first),
            ms(med)
        );
        let (first, med, n) = time(a.runs.min(2), || async {
            Ok(capacity::build(db, "oomlens", &capacity::ReportOptions::new(GroupBy::Node, BASE_MS, until))
                .await?
                .groups
                .len())
        })
        .await?;
        println!("capacity report by node ({n} groups): first {:.0} ms, median {:.0} ms", ms(first), ms(med));
    }
    drop(server);
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
