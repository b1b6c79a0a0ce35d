//! `oomlens postmortem`: one report per OOM event, in the triage order of `docs/attribution.md`
//! (when → static estimate → batch / sequence → contention / fragmentation → remedy), with the
//! memory curve before the failure, the ranked neighbours and the remedy.
//!
//! This module owns selecting the events (`collector/sql/postmortem_events.sql`: by event id, job,
//! pod, node / GPU and time range), the bounded, downsampled memory curve
//! (`oom_process_curve.sql`, `oom_gpu_curve.sql`) and rendering the report as text (with terminal
//! sparklines), JSON Lines and a self-contained HTML page (inline SVG). The attribution itself is
//! [`oomlens_collector::analysis::explain_event`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::chart::{self, Colours, Swatch};
use crate::render::{html_escape, html_head, human_bytes, wide};
use crate::timearg::format_ms;
use oomlens_collector::analysis::queries::{self, ParamValue};
use oomlens_collector::analysis::{self, AttributionError, EventJson, ExplainedEvent};

/// At most this many points per curve: a longer window is downsampled to wider buckets.
pub const CURVE_POINTS: i64 = 120;

/// A postmortem failed.
#[derive(Debug, thiserror::Error)]
pub enum PostmortemError {
    /// Attribution (or one of its queries) failed.
    #[error(transparent)]
    Attribution(#[from] AttributionError),
    /// A query or its arguments are wrong.
    #[error(transparent)]
    Query(#[from] queries::QueryError),
    /// ClickHouse failed.
    #[error("ClickHouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
}

/// Which events to report on (`postmortem_events`); empty / `None` filters match everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Events at or after this time (epoch ms).
    pub since_ms: i64,
    /// Events before this time (epoch ms).
    pub until_ms: i64,
    /// One event id.
    pub event_id: Option<u64>,
    /// Only events of this cluster.
    pub cluster: Option<String>,
    /// Only events of this node (the agent certificate's CN).
    pub node: Option<String>,
    /// GPU index.
    pub gpu_index: Option<u32>,
    /// Job (workload).
    pub workload: Option<String>,
    /// Pod (the `pod` label).
    pub pod: Option<String>,
    /// At most this many events, newest first.
    pub max_events: u64,
}

impl Selection {
    /// The positional arguments of `postmortem_events`.
    pub fn args(&self) -> Vec<ParamValue> {
        let s = |v: &Option<String>| ParamValue::String(v.clone().unwrap_or_default());
        vec![
            ParamValue::Int(self.since_ms),
            ParamValue::Int(self.until_ms),
            ParamValue::UInt(self.event_id.unwrap_or(0)),
            s(&self.cluster),
            s(&self.node),
            ParamValue::Int(self.gpu_index.map_or(-1, i64::from)),
            s(&self.workload),
            s(&self.pod),
            ParamValue::UInt(self.max_events),
        ]
    }

    /// The filter and window in words, for "no OOM event matched …" and "showing N of M":
    /// `node=gpu-7, GPU 3 from 2026-12-01T00:00:00.000Z to 2026-12-02T00:00:00.000Z`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(id) = self.event_id {
            parts.push(format!("event {id}"));
        }
        for (name, value) in
            [("cluster", &self.cluster), ("node", &self.node), ("job", &self.workload), ("pod", &self.pod)]
        {
            if let Some(v) = value {
                parts.push(format!("{name}={v}"));
            }
        }
        if let Some(g) = self.gpu_index {
            parts.push(format!("GPU {g}"));
        }
        let filter = if parts.is_empty() { "any node".to_owned() } else { parts.join(", ") };
        let since = if self.since_ms <= 0 { "the first event".to_owned() } else { format_ms(self.since_ms) };
        format!("{filter} from {since} to {}", format_ms(self.until_ms))
    }
}

/// The events of a selection: the newest `max_events`, and how many matched in all.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// Newest first, at most `max_events`.
    pub events: Vec<EventRef>,
    /// Distinct events matching the filters (≥ `events.len()`).
    pub matched: u64,
}

impl Found {
    /// `None` when every matched event is shown, else `showing the newest N of M OOM events
    /// matching …; --max-events raises the limit`.
    pub fn cut_note(&self, sel: &Selection) -> Option<String> {
        let shown = self.events.len() as u64;
        (self.matched > shown).then(|| {
            format!(
                "showing the newest {shown} of {} OOM events matching {}; --max-events raises the limit",
                self.matched,
                sel.describe()
            )
        })
    }

    /// `no OOM event matched <filter and window>`.
    pub fn none_note(sel: &Selection) -> String {
        format!("no OOM event matched {}", sel.describe())
    }
}

/// One row of `postmortem_events`.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct EventRef {
    /// Event id.
    pub event_id: u64,
    /// Failure time.
    pub ts_ms: i64,
    /// Cluster of the agent that reported the event.
    pub cluster: String,
    /// Node name (the agent certificate's CN).
    pub node: String,
    /// Index of the failing GPU on its node (None when the event names none).
    pub gpu_index: Option<u32>,
    /// Host PID of the failing process, when known.
    pub pid: Option<u32>,
    /// Workload of the failing process ('' when unknown).
    pub workload: String,
    /// Event kind (`cuda_oom`, `host_oom_kill`, `xid`, `suspected_oom`).
    pub kind: String,
    /// The `pod` label ('' when none).
    pub pod: String,
    /// Label keys.
    pub label_keys: Vec<String>,
    /// Label values (parallel to `label_keys`).
    pub label_values: Vec<String>,
}

impl EventRef {
    /// The labels as pairs.
    pub fn labels(&self) -> Vec<(String, String)> {
        self.label_keys.iter().cloned().zip(self.label_values.iter().cloned()).collect()
    }
}

/// The events of `sel`, newest first, and how many matched (counted only when the limit cut).
pub async fn find_events(
    client: &clickhouse::Client,
    db: &str,
    sel: &Selection,
) -> Result<Found, PostmortemError> {
    let args = sel.args();
    let events =
        queries::builtin("postmortem_events")?.bind(client, db, &args)?.fetch_all::<EventRef>().await?;
    let shown = events.len() as u64;
    let matched = if shown < sel.max_events {
        shown
    } else {
        let filters = &args[..args.len() - 1];
        let n =
            queries::builtin("postmortem_event_count")?.bind(client, db, filters)?.fetch_one::<u64>().await?;
        n.max(shown)
    };
    Ok(Found { events, matched })
}

/// One bucket of a process's curve.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct ProcessPoint {
    /// Bucket start (epoch ms).
    pub bucket_ms: i64,
    /// Host PID of the process.
    pub pid: u32,
    /// Its workload at its latest sample in the bucket ('' when unknown).
    pub workload: String,
    /// Process name.
    pub process_name: String,
    /// Peak GPU memory in the bucket.
    pub used_bytes: u64,
}

/// One bucket of the GPU's curve.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct GpuPoint {
    /// Bucket start (epoch ms).
    pub bucket_ms: i64,
    /// Peak used memory.
    pub used_bytes: u64,
    /// Total memory (0 when unknown).
    pub total_bytes: u64,
}

/// One process's curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessSeries {
    /// Host PID of the process.
    pub pid: u32,
    /// Its workload ('' when unknown).
    pub workload: String,
    /// Process name.
    pub name: String,
    /// `[bucket_ms, used_bytes]`, oldest first.
    pub points: Vec<(i64, u64)>,
}

/// The memory of the failing GPU before the failure, downsampled.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    /// Start of the curve (epoch ms).
    pub since_ms: i64,
    /// The failure time (the curve ends there).
    pub until_ms: i64,
    /// Bucket width.
    pub bucket_ms: i64,
    /// The GPU's used / total memory per bucket.
    pub gpu: Vec<GpuPoint>,
    /// Per process, largest peak first.
    pub processes: Vec<ProcessSeries>,
}

/// Bucket width for a curve of `span_ms`: at most [`CURVE_POINTS`] buckets, at least one second.
pub fn bucket_for(span_ms: i64) -> i64 {
    let raw = (span_ms.max(1) + CURVE_POINTS - 1) / CURVE_POINTS;
    raw.max(1000)
}

/// The curve of `gpu` on `(cluster, node)` in the `curve_ms` before `ts_ms` (inclusive).
pub async fn fetch_curve(
    client: &clickhouse::Client,
    db: &str,
    cluster: &str,
    node: &str,
    gpu: u32,
    ts_ms: i64,
    curve_ms: i64,
) -> Result<Curve, PostmortemError> {
    let since_ms = ts_ms.saturating_sub(curve_ms.max(0));
    let until = ts_ms.saturating_add(1);
    let bucket_ms = bucket_for(curve_ms);
    let args = [
        ParamValue::Int(bucket_ms),
        cluster.into(),
        node.into(),
        gpu.into(),
        ParamValue::Int(since_ms),
        ParamValue::Int(until),
    ];
    let processes = queries::builtin("oom_process_curve")?.bind(client, db, &args)?;
    let gpu = queries::builtin("oom_gpu_curve")?.bind(client, db, &args)?;
    let (rows, gpu_points) =
        tokio::try_join!(processes.fetch_all::<ProcessPoint>(), gpu.fetch_all::<GpuPoint>())?;
    let mut by_pid: BTreeMap<u32, ProcessSeries> = BTreeMap::new();
    for r in rows {
        let s = by_pid.entry(r.pid).or_insert_with(|| ProcessSeries {
            pid: r.pid,
            workload: String::new(),
            name: String::new(),
            points: Vec::new(),
        });
        s.workload = r.workload;
        s.name = r.process_name;
        s.points.push((r.bucket_ms, r.used_bytes));
    }
    let mut processes: Vec<ProcessSeries> = by_pid.into_values().collect();
    let peak = |s: &ProcessSeries| s.points.iter().map(|p| p.1).max().unwrap_or(0);
    processes.sort_by(|a, b| peak(b).cmp(&peak(a)).then(a.pid.cmp(&b.pid)));
    Ok(Curve { since_ms, until_ms: ts_ms, bucket_ms, gpu: gpu_points, processes })
}

/// Look-back settings of a postmortem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookback {
    /// The attribution window (process samples the features and neighbours read).
    pub window_ms: i64,
    /// The memory curve's length.
    pub curve_ms: i64,
    /// At most this many neighbours.
    pub top_n: u32,
}

impl Default for Lookback {
    fn default() -> Self {
        Lookback { window_ms: analysis::features::DEFAULT_WINDOW_MS, curve_ms: 10 * 60_000, top_n: 5 }
    }
}

/// One event's postmortem.
#[derive(Debug, Clone, PartialEq)]
pub struct Postmortem {
    /// The selected event.
    pub event: EventRef,
    /// Its features, attribution and neighbours.
    pub explained: ExplainedEvent,
    /// Its GPU's memory curve (none for events without a GPU).
    pub curve: Option<Curve>,
}

/// The postmortem of `ev`; `None` when the event vanished between selection and explanation.
pub async fn build(
    client: &clickhouse::Client,
    db: &str,
    ev: &EventRef,
    lookback: Lookback,
) -> Result<Option<Postmortem>, PostmortemError> {
    // The explanation and the curve are independent queries: run them at once.
    let explain = async {
        analysis::explain_event(
            client,
            db,
            &ev.cluster,
            &ev.node,
            ev.event_id,
            ev.ts_ms,
            lookback.window_ms,
            lookback.top_n,
        )
        .await
        .map_err(PostmortemError::from)
    };
    let curve = async {
        match ev.gpu_index {
            Some(gpu) => fetch_curve(client, db, &ev.cluster, &ev.node, gpu, ev.ts_ms, lookback.curve_ms)
                .await
                .map(Some),
            None => Ok(None),
        }
    };
    let (explained, curve) = tokio::try_join!(explain, curve)?;
    let Some(explained) = explained else {
        return Ok(None);
    };
    Ok(Some(Postmortem { event: ev.clone(), explained, curve }))
}

/// One neighbour in the JSON document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NeighbourJson {
    /// Host PID of the neighbour.
    pub pid: u32,
    /// Its workload ('' when unknown).
    pub workload: String,
    /// Process name.
    pub name: String,
    /// Its GPU.
    pub gpu_index: u32,
    /// Memory at its last sample before the failure.
    pub used_bytes: u64,
    /// Peak in the window.
    pub max_used_bytes: u64,
    /// Growth in the window (last − first sample).
    pub growth_bytes: i64,
    /// Seen in the last 5 s before the failure.
    pub present: bool,
}

/// The `--json` document of one event (one per line): the attributed event (shared with
/// `oomlens explain`), its ranked neighbours and its memory curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PostmortemJson {
    /// The event, its evidence and attribution.
    #[serde(flatten)]
    pub event: EventJson,
    /// Ranked neighbours.
    pub neighbours: Vec<NeighbourJson>,
    /// The memory curve.
    pub curve: Option<Curve>,
}

impl Postmortem {
    /// The `--json` document.
    pub fn to_json(&self) -> PostmortemJson {
        let f = &self.explained.event.features;
        let a = &self.explained.event.attribution;
        PostmortemJson {
            event: EventJson::new(f, a, &self.event.labels()),
            neighbours: self
                .explained
                .neighbours
                .iter()
                .map(|n| NeighbourJson {
                    pid: n.neighbour_pid,
                    workload: n.neighbour_workload.clone(),
                    name: n.neighbour_name.clone(),
                    gpu_index: n.neighbour_gpu,
                    used_bytes: n.last_used_bytes,
                    max_used_bytes: n.max_used_bytes,
                    growth_bytes: n.growth_bytes,
                    present: n.present != 0,
                })
                .collect(),
            curve: self.curve.clone(),
        }
    }

    /// The capacity of the GPU: from the event, else the GPU samples.
    pub fn capacity(&self) -> Option<u64> {
        self.explained.event.features.capacity_bytes.or_else(|| {
            self.curve.as_ref().and_then(|c| c.gpu.iter().map(|p| p.total_bytes).max()).filter(|t| *t > 0)
        })
    }

    /// The text report.
    pub fn write_text(&self, out: &mut dyn Write, width: usize) -> std::io::Result<()> {
        let f = &self.explained.event.features;
        let a = &self.explained.event.attribution;
        let gpu = f.gpu_index.map_or_else(|| "-".to_owned(), |g| g.to_string());
        let pid = f.pid.map_or_else(|| "-".to_owned(), |p| p.to_string());
        writeln!(
            out,
            "OOM {} at {} — {}/{} GPU {gpu} pid {pid} {}{}",
            f.event_id,
            format_ms(f.ts_ms),
            f.cluster,
            f.node,
            if f.workload.is_empty() { "(no workload)" } else { &f.workload },
            if self.event.pod.is_empty() { String::new() } else { format!(" pod {}", self.event.pod) },
        )?;
        let alternatives: Vec<String> =
            a.alternatives.iter().map(|x| format!("{} {} %", x.scenario, x.confidence_pct)).collect();
        writeln!(
            out,
            "  verdict: {} ({} %, rule {}{}), kind {}, source {}{}",
            a.scenario,
            a.confidence_pct,
            a.rule.id(),
            if alternatives.is_empty() { String::new() } else { format!("; or {}", alternatives.join(", ")) },
            f.kind,
            f.source,
            if f.framework.is_empty() { String::new() } else { format!(", {}", f.framework) }
        )?;
        let phase = if f.phase_effective.is_empty() { "unknown" } else { &f.phase_effective };
        let clue = if f.phase_clue.is_empty() { String::new() } else { format!(": {}", f.phase_clue) };
        writeln!(out, "  1 when:     phase {phase} ({}{clue})", f.phase_source)?;
        writeln!(
            out,
            "  2 static:   estimate {} (params {}, {} {}), capacity {}, need alone {} ({})",
            human_bytes(f.static_estimate_bytes),
            f.params.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            if f.precision.is_empty() { "-" } else { &f.precision },
            if f.optimizer.is_empty() { "-" } else { &f.optimizer },
            human_bytes(self.capacity()),
            human_bytes(f.need_alone_bytes),
            if f.need_alone_from.is_empty() { "unknown" } else { &f.need_alone_from },
        )?;
        writeln!(
            out,
            "  3 dynamic:  requested {}, swing {} (floor {}, peak {}), largest rise {}, attention matrix {}, batch {}, seq {}",
            human_bytes(f.requested_bytes),
            human_bytes(f.own_swing_bytes),
            human_bytes(Some(f.own_min_used)),
            human_bytes(Some(f.own_max_used)),
            human_bytes(f.own_max_rise),
            human_bytes(f.attention_bytes),
            f.batch_size.map_or_else(|| "-".to_owned(), |v| v.to_string()),
            f.seq_len.map_or_else(|| "-".to_owned(), |v| v.to_string()),
        )?;
        writeln!(
            out,
            "  4 others:   {} held by other processes, their growth {}, cached free (reserved − allocated) {}",
            human_bytes(f.others_bytes),
            signed_bytes(f.others_growth_bytes),
            human_bytes(f.cached_free_bytes),
        )?;
        writeln!(out, "  evidence:")?;
        for line in &a.evidence {
            writeln!(out, "    - {line}")?;
        }
        let hist = oomlens_collector::analysis::json::free_block_histogram(&self.event.labels());
        if !hist.is_empty() {
            writeln!(
                out,
                "    - allocator free blocks by size: {}",
                oomlens_collector::analysis::json::histogram_words(&hist)
            )?;
        }
        if !a.missing.is_empty() {
            writeln!(out, "  missing:  {}", a.missing.join(", "))?;
        }
        if !a.decide.is_empty() {
            writeln!(out, "  would decide:")?;
            for d in &a.decide {
                writeln!(out, "    - {d}")?;
            }
        }
        if let Some(curve) = &self.curve {
            self.write_curve(curve, out, width)?;
        }
        if !self.explained.neighbours.is_empty() {
            writeln!(out, "  neighbours (ranked by what they took in the window):")?;
            for (i, n) in self.explained.neighbours.iter().enumerate() {
                writeln!(
                    out,
                    "    {}. pid {:<8} {:<24} GPU {} used {:>11} peak {:>11} growth {:>12}{}",
                    i + 1,
                    n.neighbour_pid,
                    oomlens_schema::text::ellipsize(&n.neighbour_workload, 24),
                    n.neighbour_gpu,
                    human_bytes(Some(n.last_used_bytes)),
                    human_bytes(Some(n.max_used_bytes)),
                    signed_bytes(n.growth_bytes),
                    if n.present == 0 { " (gone)" } else { "" }
                )?;
            }
        }
        writeln!(out, "  5 remedy:   {}", a.remedy)?;
        Ok(())
    }

    fn write_curve(&self, curve: &Curve, out: &mut dyn Write, width: usize) -> std::io::Result<()> {
        let cap = self.capacity().unwrap_or(0);
        let top = cap
            .max(curve.gpu.iter().map(|p| p.used_bytes).max().unwrap_or(0))
            .max(curve.processes.iter().flat_map(|s| s.points.iter().map(|p| p.1)).max().unwrap_or(0));
        if top == 0 {
            writeln!(
                out,
                "  curve: no samples in the {} s before the failure",
                (curve.until_ms - curve.since_ms) / 1000
            )?;
            return Ok(());
        }
        writeln!(
            out,
            "  memory in the {} s before the failure (scale 0 – {}, capacity {}; one column = {} s):",
            (curve.until_ms - curve.since_ms) / 1000,
            human_bytes(Some(top)),
            human_bytes(if cap > 0 { Some(cap) } else { None }),
            curve.bucket_ms.saturating_mul(buckets_per_column(curve, width)) / 1000,
        )?;
        if !curve.gpu.is_empty() {
            let pts: Vec<(i64, u64)> = curve.gpu.iter().map(|p| (p.bucket_ms, p.used_bytes)).collect();
            writeln!(
                out,
                "    {:<28} {} {}",
                "GPU total",
                sparkline(curve, &pts, top, width),
                last_bytes(&pts)
            )?;
        }
        for s in &curve.processes {
            let label = format!("pid {} {}", s.pid, s.workload);
            writeln!(
                out,
                "    {:<28} {} {}",
                oomlens_schema::text::ellipsize(&label, 28),
                sparkline(curve, &s.points, top, width),
                last_bytes(&s.points)
            )?;
        }
        Ok(())
    }
}

fn last_bytes(pts: &[(i64, u64)]) -> String {
    human_bytes(pts.last().map(|p| p.1))
}

fn buckets_per_column(curve: &Curve, width: usize) -> i64 {
    let buckets = ((curve.until_ms - curve.since_ms) / curve.bucket_ms.max(1)).max(1) + 1;
    let width = i64::try_from(width.max(1)).unwrap_or(i64::MAX);
    (buckets + width - 1) / width
}

/// A sparkline of `pts` over the curve's span, `width` columns, each the peak of its buckets;
/// ` ` where there is no sample, `▁`…`█` scaled to `top`.
pub fn sparkline(curve: &Curve, pts: &[(i64, u64)], top: u64, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let per = buckets_per_column(curve, width);
    let first_bucket = curve.since_ms - curve.since_ms.rem_euclid(curve.bucket_ms.max(1));
    let buckets = ((curve.until_ms - first_bucket) / curve.bucket_ms.max(1)) + 1;
    let cols = usize::try_from((buckets + per - 1) / per).unwrap_or(0).min(width.max(1));
    let mut peak: Vec<Option<u64>> = vec![None; cols];
    for &(ts, v) in pts {
        let idx = (ts - first_bucket) / curve.bucket_ms.max(1) / per;
        if let Ok(i) = usize::try_from(idx)
            && i < cols
        {
            peak[i] = Some(peak[i].map_or(v, |p: u64| p.max(v)));
        }
    }
    peak.iter()
        .map(|p| match p {
            None => ' ',
            Some(v) => {
                let level = (u128::from(*v) * 8 / u128::from(top.max(1))).min(7);
                BARS[usize::try_from(level).unwrap_or(7)]
            }
        })
        .collect()
}

fn signed_bytes(v: i64) -> String {
    let sign = if v < 0 { "-" } else { "+" };
    format!("{sign}{}", human_bytes(Some(v.unsigned_abs())))
}

/// A process's key for [`Colours`]: its workload, else its pid (the same process keeps its colour
/// in every chart of a page).
fn process_key(pid: u32, workload: &str) -> String {
    if workload.is_empty() { format!("pid {pid}") } else { workload.to_owned() }
}

/// The stacked-area SVG of a curve: memory per process stacked over time (colours from `colours`,
/// shared by the page), the GPU's used memory (dashed), the capacity line (red), the OOM at the
/// right edge, a byte axis and a time axis counting back from the failure.
pub fn curve_svg(curve: &Curve, capacity: Option<u64>, colours: &mut Colours) -> String {
    // Plot area: left margin for the byte labels, top for the OOM label, bottom for the time axis.
    let (w, h, left, right, top_m, bottom) = (760.0_f64, 300.0_f64, 72.0_f64, 16.0_f64, 24.0_f64, 40.0_f64);
    let span = (curve.until_ms - curve.since_ms).max(1);
    let mut times: Vec<i64> = curve
        .processes
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(curve.gpu.iter().map(|p| p.bucket_ms))
        .collect();
    times.sort_unstable();
    times.dedup();
    let stack_top = times
        .iter()
        .map(|t| {
            curve
                .processes
                .iter()
                .map(|s| s.points.iter().find(|p| p.0 == *t).map_or(0, |p| p.1))
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    let data_top = stack_top
        .max(capacity.unwrap_or(0))
        .max(curve.gpu.iter().map(|p| p.used_bytes).max().unwrap_or(0))
        .max(1) as f64;
    let y_axis = chart::byte_axis(data_top, 5);
    let x_axis = chart::time_before_axis(span, 6);
    let plot_w = w - left - right;
    let plot_h = h - top_m - bottom;
    let x = |t: i64| {
        left + ((t.clamp(curve.since_ms, curve.until_ms) - curve.since_ms) as f64 / span as f64) * plot_w
    };
    let y = |v: f64| top_m + plot_h - v / y_axis.max * plot_h;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="GPU memory before the OOM">"#
    );
    let _ = write!(
        svg,
        r##"<rect x="{left}" y="{top_m}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>"##
    );
    for (v, label) in &y_axis.ticks {
        let ty = y(*v);
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            left + plot_w,
            left - 6.0,
            ty + 4.0,
            html_escape(label)
        );
    }
    for (v, label) in &x_axis.ticks {
        let tx = left + v / x_axis.max * plot_w;
        let anchor = if *v <= 0.0 {
            "start"
        } else if *v >= x_axis.max {
            "end"
        } else {
            "middle"
        };
        let _ = write!(
            svg,
            r##"<line x1="{tx:.1}" y1="{:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#999"/><text x="{tx:.1}" y="{:.1}" font-size="11" text-anchor="{anchor}">{}</text>"##,
            top_m + plot_h,
            top_m + plot_h + 4.0,
            top_m + plot_h + 16.0,
            html_escape(label)
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#555">time before the OOM (ends {})</text>"##,
        left + plot_w / 2.0,
        h - 6.0,
        html_escape(&format_ms(curve.until_ms))
    );
    let mut base: Vec<f64> = vec![0.0; times.len()];
    for s in &curve.processes {
        let vals: Vec<f64> =
            times.iter().map(|t| s.points.iter().find(|p| p.0 == *t).map_or(0.0, |p| p.1 as f64)).collect();
        let mut upper = String::new();
        let mut lower = String::new();
        for (j, t) in times.iter().enumerate() {
            let _ = write!(upper, "{:.1},{:.1} ", x(*t), y(base[j] + vals[j]));
        }
        for (j, t) in times.iter().enumerate().rev() {
            let _ = write!(lower, "{:.1},{:.1} ", x(*t), y(base[j]));
        }
        let _ = write!(
            svg,
            r#"<polygon points="{upper}{lower}" fill="{}" fill-opacity="0.75"><title>pid {} {}</title></polygon>"#,
            colours.of(&process_key(s.pid, &s.workload)),
            s.pid,
            html_escape(&s.workload)
        );
        for (b, v) in base.iter_mut().zip(&vals) {
            *b += v;
        }
    }
    if !curve.gpu.is_empty() {
        let pts: String = curve
            .gpu
            .iter()
            .map(|p| format!("{:.1},{:.1} ", x(p.bucket_ms), y(p.used_bytes as f64)))
            .collect();
        let _ = write!(
            svg,
            r##"<polyline points="{pts}" fill="none" stroke="#333" stroke-dasharray="4 3"><title>GPU used</title></polyline>"##
        );
    }
    if let Some(cap) = capacity {
        let cy = y(cap as f64);
        // Its label sits at the left end, inside the plot: the OOM label is at the right end, above.
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{cy:.1}" x2="{:.1}" y2="{cy:.1}" stroke="#d62728" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-size="11" fill="#d62728" stroke="#fafafa" stroke-width="3" paint-order="stroke">capacity {}</text>"##,
            left + plot_w,
            left + 6.0,
            cy - 5.0,
            html_escape(&human_bytes(Some(cap)))
        );
    }
    let ox = x(curve.until_ms);
    let _ = write!(
        svg,
        r##"<line x1="{ox:.1}" y1="{top_m}" x2="{ox:.1}" y2="{:.1}" stroke="#d62728" stroke-width="2" stroke-dasharray="2 2"/><text x="{ox:.1}" y="{:.1}" font-size="12" fill="#d62728" text-anchor="end">OOM {}</text>"##,
        top_m + plot_h,
        top_m - 8.0,
        html_escape(&format_ms(curve.until_ms))
    );
    svg.push_str("</svg>");
    svg
}

/// The legend under a curve: each process in its page colour, the GPU's used memory, the
/// capacity and the OOM.
fn curve_legend(
    curve: &Curve,
    capacity: Option<u64>,
    failing_pid: Option<u32>,
    colours: &mut Colours,
) -> String {
    let mut entries: Vec<(&str, Swatch, String)> = curve
        .processes
        .iter()
        .map(|s| {
            let who = if s.workload.is_empty() { s.name.clone() } else { s.workload.clone() };
            let failing = if Some(s.pid) == failing_pid { " (failed)" } else { "" };
            (
                colours.of(&process_key(s.pid, &s.workload)),
                Swatch::Fill,
                format!("pid {} {who}{failing}", s.pid),
            )
        })
        .collect();
    if !curve.gpu.is_empty() {
        entries.push(("#333", Swatch::Dashed, "GPU used (all processes)".to_owned()));
    }
    if let Some(cap) = capacity {
        entries.push(("#d62728", Swatch::Line, format!("capacity {}", human_bytes(Some(cap)))));
    }
    entries.push(("#d62728", Swatch::Dashed, "the OOM".to_owned()));
    chart::legend(&entries)
}

/// Writes the postmortems as one self-contained HTML page: `heading` (the selection in words, or
/// "showing N of M …"), an index when there is more than one event, then one section per event.
pub fn write_html(pms: &[Postmortem], heading: &str, out: &mut dyn Write) -> std::io::Result<()> {
    let mut page = html_head("oomlens postmortem");
    let _ = writeln!(page, "<p class=\"note\">{}</p>", html_escape(heading));
    if pms.len() > 1 {
        page.push_str("<nav><h2>Events</h2><ol>");
        for pm in pms {
            let j = pm.to_json().event;
            let _ = write!(
                page,
                "<li><a href=\"#event-{}\">OOM {}</a> — {} — {}/{} GPU {} — <b>{}</b> ({:.0} %)</li>",
                j.event_id,
                j.event_id,
                html_escape(&j.time),
                html_escape(&j.cluster),
                html_escape(&j.node),
                j.gpu_index.map_or_else(|| "-".to_owned(), |g| g.to_string()),
                html_escape(&j.scenario),
                j.confidence * 100.0
            );
        }
        page.push_str("</ol></nav>\n");
    }
    let mut colours = Colours::default();
    for pm in pms {
        let doc = pm.to_json();
        let j = &doc.event;
        let _ = write!(
            page,
            "<section id=\"event-{}\"><h2>OOM {} — {}/{} GPU {} at {}</h2>\n<p><b>{}</b> ({:.0} %, rule <code>{}</code>) — workload <code>{}</code>, pid {}, kind {}, phase {} ({})</p>\n",
            j.event_id,
            j.event_id,
            html_escape(&j.cluster),
            html_escape(&j.node),
            j.gpu_index.map_or_else(|| "-".to_owned(), |g| g.to_string()),
            html_escape(&j.time),
            html_escape(&j.scenario),
            j.confidence * 100.0,
            html_escape(&j.rule),
            html_escape(&j.workload),
            j.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            html_escape(&j.kind),
            html_escape(if j.phase.is_empty() { "unknown" } else { &j.phase }),
            html_escape(&j.phase_source),
        );
        if let Some(curve) = pm.curve.as_ref().filter(|c| !c.gpu.is_empty() || !c.processes.is_empty()) {
            // The failing process takes its colour first, so it is the same in every chart.
            if let Some(pid) = j.pid {
                colours.of(&process_key(pid, &j.workload));
            }
            page.push_str(&wide(&curve_svg(curve, pm.capacity(), &mut colours)));
            page.push_str(&curve_legend(curve, pm.capacity(), j.pid, &mut colours));
        } else {
            page.push_str("<p class=\"note\">No GPU samples before this failure: no memory curve.</p>\n");
        }
        page.push_str("<h3>Evidence</h3><ul>");
        for e in &j.evidence {
            let _ = write!(page, "<li>{}</li>", html_escape(e));
        }
        if let Some(alloc) = j.allocator.as_ref().filter(|a| !a.free_block_histogram.is_empty()) {
            let _ = write!(
                page,
                "<li>allocator free blocks by size: {}</li>",
                html_escape(&oomlens_collector::analysis::json::histogram_words(&alloc.free_block_histogram))
            );
        }
        page.push_str("</ul>\n");
        if !j.missing.is_empty() {
            let _ = writeln!(page, "<p>Missing: {}</p>", html_escape(&j.missing.join(", ")));
        }
        if !doc.neighbours.is_empty() {
            let mut table = String::from(
                "<h3>Neighbours</h3><table><tr><th>pid</th><th>workload</th><th>GPU</th><th>used</th><th>peak</th><th>growth</th></tr>",
            );
            for n in &doc.neighbours {
                let _ = write!(
                    table,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                    n.pid,
                    html_escape(&n.workload),
                    n.gpu_index,
                    html_escape(&human_bytes(Some(n.used_bytes))),
                    html_escape(&human_bytes(Some(n.max_used_bytes))),
                    html_escape(&signed_bytes(n.growth_bytes))
                );
            }
            table.push_str("</table>");
            page.push_str(&wide(&table));
        }
        let _ = writeln!(page, "<h3>Remedy</h3><p>{}</p></section>", html_escape(&j.remedy));
    }
    if pms.is_empty() {
        page.push_str("<p>Nothing to show: no OOM event matched this selection.</p>\n");
    }
    page.push_str("</body></html>\n");
    out.write_all(page.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve() -> Curve {
        Curve {
            since_ms: 0,
            until_ms: 60_000,
            bucket_ms: 1_000,
            gpu: vec![GpuPoint { bucket_ms: 0, used_bytes: 10, total_bytes: 100 }],
            processes: vec![ProcessSeries {
                pid: 7,
                workload: "a<b>".into(),
                name: "python".into(),
                points: vec![(0, 0), (30_000, 50), (60_000, 100)],
            }],
        }
    }

    #[test]
    fn buckets_bound_the_points() {
        assert_eq!(bucket_for(60_000), 1000);
        assert_eq!(bucket_for(7 * 86_400_000), 7 * 86_400_000 / CURVE_POINTS);
        assert!(7 * 86_400_000 / bucket_for(7 * 86_400_000) <= CURVE_POINTS);
        assert_eq!(bucket_for(0), 1000);
    }

    #[test]
    fn sparkline_scales_and_leaves_gaps() {
        let c = curve();
        let s = sparkline(&c, &c.processes[0].points, 100, 61);
        let chars: Vec<char> = s.chars().collect();
        assert_eq!(chars.len(), 61);
        assert_eq!(chars[0], '▁');
        assert_eq!(chars[30], '▅');
        assert_eq!(chars[60], '█');
        assert_eq!(chars[10], ' ');
        // Narrower: columns take the peak of their buckets.
        let s = sparkline(&c, &c.processes[0].points, 100, 20);
        assert!(s.chars().count() <= 20 && s.ends_with('█'), "{s:?}");
    }

    #[test]
    fn svg_is_self_contained_and_escaped() {
        let svg = curve_svg(&curve(), Some(100), &mut Colours::default());
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("a&lt;b&gt;") && !svg.contains("a<b>"));
        assert!(svg.contains(">OOM<") && svg.contains("capacity 100 B"));
        // Ticks on both axes, with units.
        assert!(svg.contains(">−1 min<") && svg.contains(">−30 s<"), "{svg}");
        assert!(svg.contains(">0 B<") && svg.contains(">100 B<"), "{svg}");
        assert!(!svg.contains("http://") || svg.matches("http://").count() == 1, "only the SVG namespace");
    }

    #[test]
    fn a_process_keeps_its_colour_across_the_charts_of_a_page() {
        let mut colours = Colours::default();
        // The page's first chart: another process first, then ours.
        let mut first = curve();
        first.processes.insert(
            0,
            ProcessSeries { pid: 9, workload: "other".into(), name: "python".into(), points: vec![(0, 5)] },
        );
        let a = curve_svg(&first, Some(100), &mut colours);
        // The second chart lists ours first: same colour as in the first chart.
        let b = curve_svg(&curve(), Some(100), &mut colours);
        let fill = |svg: &str, who: &str| {
            let at = svg.find(&format!("<title>pid {who}</title>")).unwrap();
            let start = svg[..at].rfind("fill=\"").unwrap() + 6;
            svg[start..start + 7].to_owned()
        };
        assert_eq!(fill(&a, "7 a&lt;b&gt;"), fill(&b, "7 a&lt;b&gt;"));
        assert_ne!(fill(&a, "7 a&lt;b&gt;"), fill(&a, "9 other"));
        let legend = curve_legend(&curve(), Some(100), Some(7), &mut colours);
        assert!(legend.contains(&fill(&b, "7 a&lt;b&gt;")) && legend.contains("(failed)"), "{legend}");
    }

    #[test]
    fn selection_args_follow_the_header() {
        let q = queries::get("postmortem_events").expect("postmortem_events");
        let sel = Selection {
            since_ms: 1,
            until_ms: 2,
            event_id: None,
            cluster: None,
            node: Some("n".into()),
            gpu_index: Some(3),
            workload: None,
            pod: Some("p".into()),
            max_events: 10,
        };
        assert!(q.check_args(&sel.args()).is_ok());
        let names: Vec<&str> = q.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "since_ms",
                "until_ms",
                "event_id",
                "cluster",
                "node",
                "gpu_index",
                "workload",
                "pod",
                "max_events"
            ]
        );
        assert_eq!(sel.args()[5], ParamValue::Int(3));
        assert_eq!(sel.args()[2], ParamValue::UInt(0));
        // The count takes the same filters, without the limit.
        let count = queries::get("postmortem_event_count").expect("postmortem_event_count");
        assert!(count.check_args(&sel.args()[..8]).is_ok());
        let count_names: Vec<&str> = count.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(count_names, names[..8]);
    }

    #[test]
    fn notes_repeat_the_filter_and_the_window() {
        let sel = Selection {
            since_ms: 1_764_547_200_000,
            until_ms: 1_764_633_600_000,
            event_id: None,
            cluster: None,
            node: Some("gpu-7".into()),
            gpu_index: Some(3),
            workload: Some("train".into()),
            pod: None,
            max_events: 20,
        };
        assert_eq!(
            Found::none_note(&sel),
            "no OOM event matched node=gpu-7, job=train, GPU 3 from 2025-12-01T00:00:00.000Z to 2025-12-02T00:00:00.000Z"
        );
        let event = EventRef {
            event_id: 1,
            ts_ms: 0,
            cluster: String::new(),
            node: String::new(),
            gpu_index: None,
            pid: None,
            workload: String::new(),
            kind: String::new(),
            pod: String::new(),
            label_keys: vec![],
            label_values: vec![],
        };
        let found = Found { events: vec![event; 20], matched: 29 };
        let note = found.cut_note(&sel).unwrap();
        assert!(note.starts_with("showing the newest 20 of 29 OOM events matching node=gpu-7"), "{note}");
        assert_eq!(Found { matched: 20, ..found }.cut_note(&sel), None);
        let all = Selection { node: None, gpu_index: None, workload: None, since_ms: 0, ..sel };
        assert!(
            Found::none_note(&all).starts_with("no OOM event matched any node from the first event to 2025-")
        );
    }
}
