//! `oomlens report capacity`: fleet headroom and OOMs per group (cluster, GPU model, node,
//! namespace or workload) over a time window.
//!
//! This module owns the report: headroom (p50/p95/p99/max of used/total and the share of samples
//! at or above 90 %, `collector/sql/capacity_headroom*.sql`), OOM counts and rates per attributed
//! scenario (the events of `capacity_events.sql` with their attributions), the workloads closest to
//! the edge, the most frequent noisy neighbours and the co-scheduling pairs that precede OOMs (the
//! top 3 ranked neighbours of each event), rendered as text, JSON and a self-contained HTML page
//! with inline SVG charts. Scenarios and neighbours come from the stored `oom_attributions`
//! ([`oomlens_collector::analysis::store::read_window_scenarios`]; events not stored yet are computed live).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::chart::{self, Swatch};
use crate::render::{html_escape, html_head, wide};
use crate::timearg::format_ms;
use oomlens_collector::analysis::queries::{self, ParamValue};
use oomlens_collector::analysis::{self, AttributionError, FeatureWindow};

/// A capacity report failed.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// Attribution failed.
    #[error(transparent)]
    Attribution(#[from] AttributionError),
    /// A query or its arguments are wrong.
    #[error(transparent)]
    Query(#[from] queries::QueryError),
    /// ClickHouse failed.
    #[error("ClickHouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
    /// Unknown grouping.
    #[error("unknown grouping {0:?}: expected cluster, gpu_model, node, namespace or workload")]
    BadGroup(String),
}

/// What the report groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// Per cluster (the agent certificate's OU, else the agent's configured cluster).
    Cluster,
    /// GPU model (as the agents reported it).
    GpuModel,
    /// Per node (the agent certificate's CN).
    Node,
    /// The `namespace` label.
    Namespace,
    /// Per workload (the pod, Slurm job, `job` or container label).
    Workload,
}

impl GroupBy {
    /// The name (`--by` value, SQL `by` argument).
    pub const fn as_str(self) -> &'static str {
        match self {
            GroupBy::Cluster => "cluster",
            GroupBy::GpuModel => "gpu_model",
            GroupBy::Node => "node",
            GroupBy::Namespace => "namespace",
            GroupBy::Workload => "workload",
        }
    }
}

impl std::str::FromStr for GroupBy {
    type Err = CapacityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "cluster" => GroupBy::Cluster,
            "gpu_model" | "gpu-model" => GroupBy::GpuModel,
            "node" => GroupBy::Node,
            "namespace" => GroupBy::Namespace,
            "workload" | "job" => GroupBy::Workload,
            _ => return Err(CapacityError::BadGroup(s.to_owned())),
        })
    }
}

/// One row of `capacity_headroom` / `capacity_headroom_gpu_model`.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct HeadroomRow {
    /// The cluster, node, namespace, workload or GPU model of the group ('' when none).
    pub group_key: String,
    /// Distinct GPUs.
    pub gpus: u64,
    /// GPU samples (deduplicated).
    pub samples: u64,
    /// p50, p95, p99 of used / total.
    pub used_quantiles: Vec<f64>,
    /// Max of used / total.
    pub used_max: f64,
    /// Samples at or above 90 %.
    pub samples_above_90: u64,
    /// First sample.
    pub first_ts_ms: i64,
    /// Last sample.
    pub last_ts_ms: i64,
}

/// One row of `capacity_events`.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct CapacityEvent {
    /// Cluster of the agent that reported the event.
    pub cluster: String,
    /// Node name (the agent certificate's CN).
    pub node: String,
    /// Event id.
    pub event_id: u64,
    /// Failure time.
    pub ts_ms: i64,
    /// Index of the failing GPU on its node (None when the event names none).
    pub gpu_index: Option<u32>,
    /// GPU model ('' when unknown).
    pub gpu_model: String,
    /// Namespace label.
    pub namespace: String,
    /// Workload of the failing process ('' when unknown).
    pub workload: String,
}

impl CapacityEvent {
    fn key(&self, by: GroupBy) -> &str {
        match by {
            GroupBy::Cluster => &self.cluster,
            GroupBy::GpuModel => &self.gpu_model,
            GroupBy::Node => &self.node,
            GroupBy::Namespace => &self.namespace,
            GroupBy::Workload => &self.workload,
        }
    }
}

/// One group of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// Group key ('' = none: no process / label / model).
    pub key: String,
    /// Distinct GPUs sampled.
    pub gpus: u64,
    /// GPU samples.
    pub samples: u64,
    /// GPU-days observed: GPU-seconds with a reading / 86 400.
    pub gpu_days: f64,
    /// p50 of used / total (None without samples: a group seen only in OOM events).
    pub p50: Option<f64>,
    /// p95.
    pub p95: Option<f64>,
    /// p99.
    pub p99: Option<f64>,
    /// Max of used / total, as a fraction (1.0 = full).
    pub max: Option<f64>,
    /// Share of samples at or above 90 % (of the time).
    pub above_90_share: Option<f64>,
    /// OOM events.
    pub ooms: u64,
    /// OOM events per attributed scenario.
    pub ooms_by_scenario: BTreeMap<String, u64>,
    /// OOMs per GPU-day sampled; None below the report's `min_gpu_days` (a rate from minutes of
    /// data would be extrapolation: read the count).
    pub ooms_per_gpu_day: Option<f64>,
    /// OOMs per GPU-day sampled, per attributed scenario (empty when `ooms_per_gpu_day` is None).
    pub ooms_per_gpu_day_by_scenario: BTreeMap<String, f64>,
}

impl Group {
    /// A group seen only in OOM events (no GPU samples).
    fn unsampled(key: &str) -> Self {
        Group {
            key: key.to_owned(),
            gpus: 0,
            samples: 0,
            gpu_days: 0.0,
            p50: None,
            p95: None,
            p99: None,
            max: None,
            above_90_share: None,
            ooms: 0,
            ooms_by_scenario: BTreeMap::new(),
            ooms_per_gpu_day: None,
            ooms_per_gpu_day_by_scenario: BTreeMap::new(),
        }
    }
}

/// A workload near the edge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeWorkload {
    /// The workload (pod, Slurm job, `job` or container label; never '').
    pub workload: String,
    /// p99 of the used / total of the GPUs it led.
    pub p99: f64,
    /// Max of used / total of the GPUs it led, as a fraction (1.0 = full).
    pub max: f64,
    /// Share at or above 90 %.
    pub above_90_share: f64,
    /// Distinct GPUs on which it held the most memory in at least one minute.
    pub gpus: u64,
}

/// A frequent noisy neighbour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoisyNeighbour {
    /// Its workload.
    pub workload: String,
    /// OOMs of other processes where it was the top-ranked neighbour and had grown.
    pub events: u64,
    /// Its total growth in those windows.
    pub growth_bytes: i64,
}

/// Two workloads on one GPU (node for host OOMs) before an OOM of the first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CoScheduled {
    /// The failing workload.
    pub failed: String,
    /// The neighbour.
    pub neighbour: String,
    /// OOM events.
    pub events: u64,
}

/// One allocation site ranked by the OOMs whose allocator summary (hook v2) lists it
/// (`alloc_sites.sql`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clickhouse::Row)]
pub struct SiteRank {
    /// `file:line` of the innermost user frame.
    pub site: String,
    /// Its function.
    pub function: String,
    /// The phase its frame belongs to ('' when the frame does not say).
    pub phase: String,
    /// OOM events whose summary lists the site.
    pub ooms: u64,
    /// Their share of all CUDA OOM events of the window, percent.
    pub share_pct: f64,
    /// Their share of the CUDA OOM events that have a summary, percent.
    pub share_of_snapshots_pct: f64,
    /// Distinct workloads among them.
    pub workloads: u64,
    /// Distinct nodes among them.
    pub nodes: u64,
    /// Live bytes the site held, summed over those OOMs.
    pub bytes_held: u64,
    /// The most it held at one of them.
    pub max_bytes_held: u64,
}

/// What a report covers and how it is cut.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReportOptions {
    /// What the groups are keyed by.
    pub by: GroupBy,
    /// Window start (epoch ms).
    pub since_ms: i64,
    /// Window end (epoch ms, exclusive).
    pub until_ms: i64,
    /// Attribution look-back before each failure, ms.
    pub window_ms: i64,
    /// Length of the ranked lists.
    pub top: usize,
    /// GPU-days a group must have sampled before its OOMs are given as a rate per GPU-day.
    pub min_gpu_days: f64,
}

/// The default of [`ReportOptions::min_gpu_days`]: one GPU-day (24 GPU-hours).
pub const MIN_GPU_DAYS_FOR_RATE: f64 = 1.0;

impl ReportOptions {
    /// A report of `[since_ms, until_ms)` by `by` with the defaults: a 60 s look-back, lists of 10,
    /// rates from one GPU-day.
    pub fn new(by: GroupBy, since_ms: i64, until_ms: i64) -> Self {
        ReportOptions {
            by,
            since_ms,
            until_ms,
            window_ms: 60_000,
            top: 10,
            min_gpu_days: MIN_GPU_DAYS_FOR_RATE,
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityReport {
    /// Window start.
    pub since_ms: i64,
    /// Window end.
    pub until_ms: i64,
    /// What the groups are keyed by (`--by`).
    pub by: GroupBy,
    /// GPU-days a group needs before it gets a rate (`--min-gpu-days`).
    pub min_gpu_days: f64,
    /// GPU samples in the window, all groups.
    pub samples: u64,
    /// Groups, most OOMs first, then by p99.
    pub groups: Vec<Group>,
    /// OOM events in the window.
    pub ooms: u64,
    /// OOM events per attributed scenario, fleet-wide.
    pub ooms_by_scenario: BTreeMap<String, u64>,
    /// Workloads closest to the edge (highest p99), at most `top`.
    pub closest_to_edge: Vec<EdgeWorkload>,
    /// Most frequent noisy neighbours, at most `top`.
    pub noisy_neighbours: Vec<NoisyNeighbour>,
    /// Co-scheduling pairs that precede OOMs, at most `top`.
    pub co_scheduling: Vec<CoScheduled>,
    /// The code holding the most memory at the window's OOMs (from the hook's allocator
    /// summaries), at most `top`; empty when no job sent one.
    pub allocation_sites: Vec<SiteRank>,
}

/// The headroom rows of `capacity_headroom` (or `capacity_headroom_gpu_model` for
/// [`GroupBy::GpuModel`]) over the whole minutes starting in `[since_ms, until_ms)`, read from the
/// per-minute rollups (quantiles to 0.1 %).
pub async fn headroom(
    client: &clickhouse::Client,
    db: &str,
    by: GroupBy,
    since_ms: i64,
    until_ms: i64,
) -> Result<Vec<HeadroomRow>, CapacityError> {
    let rows = if by == GroupBy::GpuModel {
        queries::builtin("capacity_headroom_gpu_model")?
            .bind(client, db, &[ParamValue::Int(since_ms), ParamValue::Int(until_ms)])?
            .fetch_all::<HeadroomRow>()
            .await?
    } else {
        let args = [
            ParamValue::String(by.as_str().to_owned()),
            ParamValue::Int(since_ms),
            ParamValue::Int(until_ms),
            ParamValue::Int(since_ms),
            ParamValue::Int(until_ms),
            ParamValue::String(by.as_str().to_owned()),
        ];
        queries::builtin("capacity_headroom")?.bind(client, db, &args)?.fetch_all::<HeadroomRow>().await?
    };
    Ok(rows)
}

fn q(row: &HeadroomRow, i: usize) -> f64 {
    row.used_quantiles.get(i).copied().unwrap_or(0.0)
}

fn share(row: &HeadroomRow) -> f64 {
    if row.samples == 0 { 0.0 } else { row.samples_above_90 as f64 / row.samples as f64 }
}

/// GPU-days a headroom row observed: its GPU-seconds with a reading (`samples` counts each GPU
/// second once), over 86 400. Not GPUs × the span from the first to the last sample: an agent that
/// was down, or a GPU sampled once a day ago, would otherwise count as a day of data.
fn gpu_days(row: &HeadroomRow) -> f64 {
    row.samples as f64 / 86_400.0
}

/// Builds the report.
pub async fn build(
    client: &clickhouse::Client,
    db: &str,
    opts: &ReportOptions,
) -> Result<CapacityReport, CapacityError> {
    let ReportOptions { by, since_ms, until_ms, window_ms, top, min_gpu_days } = *opts;
    // The two headroom queries run concurrently: each has single-threaded phases on the server.
    let (rows, by_workload) = if by == GroupBy::Workload {
        let rows = headroom(client, db, by, since_ms, until_ms).await?;
        (rows.clone(), rows)
    } else {
        tokio::try_join!(
            headroom(client, db, by, since_ms, until_ms),
            headroom(client, db, GroupBy::Workload, since_ms, until_ms)
        )?
    };
    // The events, and concurrently each event's scenario (stored by the current rules, else
    // re-scored from the stored features or computed live) and its stored top neighbours
    // (analysis::store::read_window_scenarios).
    let events = async {
        let rows = queries::builtin("capacity_events")?
            .bind(client, db, &[ParamValue::Int(since_ms), ParamValue::Int(until_ms)])?
            .fetch_all::<CapacityEvent>()
            .await?;
        Ok::<_, CapacityError>(rows)
    };
    let window = FeatureWindow { since_ms, until_ms, window_ms };
    let attributed = async {
        Ok::<_, CapacityError>(analysis::store::read_window_scenarios(client, db, &window, true).await?)
    };
    let (events, attributed) = tokio::try_join!(events, attributed)?;
    let scenario_of: HashMap<(&str, &str, u64), &str> = attributed
        .events
        .iter()
        .map(|e| ((e.cluster.as_str(), e.node.as_str(), e.event_id), e.scenario.as_str()))
        .collect();
    let neighbours = &attributed.neighbours;
    tracing::debug!(
        groups = rows.len(),
        events = events.len(),
        neighbours = neighbours.len(),
        "capacity report"
    );

    let mut groups: BTreeMap<String, Group> = rows
        .iter()
        .map(|r| {
            let sampled = r.samples > 0;
            let value = |v: f64| sampled.then_some(v);
            (
                r.group_key.clone(),
                Group {
                    gpus: r.gpus,
                    samples: r.samples,
                    gpu_days: gpu_days(r),
                    p50: value(q(r, 0)),
                    p95: value(q(r, 1)),
                    p99: value(q(r, 2)),
                    max: value(r.used_max),
                    above_90_share: value(share(r)),
                    ..Group::unsampled(&r.group_key)
                },
            )
        })
        .collect();
    let mut fleet: BTreeMap<String, u64> = BTreeMap::new();
    let mut workload_of: HashMap<(&str, &str, u64), &str> = HashMap::new();
    for e in &events {
        let scenario =
            scenario_of.get(&(e.cluster.as_str(), e.node.as_str(), e.event_id)).copied().unwrap_or("unknown");
        workload_of.insert((e.cluster.as_str(), e.node.as_str(), e.event_id), e.workload.as_str());
        *fleet.entry(scenario.to_owned()).or_default() += 1;
        let g = groups.entry(e.key(by).to_owned()).or_insert_with(|| Group::unsampled(e.key(by)));
        g.ooms += 1;
        *g.ooms_by_scenario.entry(scenario.to_owned()).or_default() += 1;
    }
    let mut groups: Vec<Group> = groups
        .into_values()
        .map(|mut g| {
            let days = g.gpu_days;
            if days > 0.0 && days >= min_gpu_days {
                g.ooms_per_gpu_day = Some(g.ooms as f64 / days);
                g.ooms_per_gpu_day_by_scenario =
                    g.ooms_by_scenario.iter().map(|(s, n)| (s.clone(), *n as f64 / days)).collect();
            }
            g
        })
        .collect();
    let p99 = |g: &Group| g.p99.unwrap_or(-1.0);
    groups.sort_by(|a, b| b.ooms.cmp(&a.ooms).then(p99(b).total_cmp(&p99(a))).then(a.key.cmp(&b.key)));

    let mut edge: Vec<EdgeWorkload> = by_workload
        .iter()
        .filter(|r| !r.group_key.is_empty())
        .map(|r| EdgeWorkload {
            workload: r.group_key.clone(),
            p99: q(r, 2),
            max: r.used_max,
            above_90_share: share(r),
            gpus: r.gpus,
        })
        .collect();
    edge.sort_by(|a, b| {
        b.p99.total_cmp(&a.p99).then(b.max.total_cmp(&a.max)).then(a.workload.cmp(&b.workload))
    });
    edge.truncate(top);

    // Neighbours come ranked per event: the first one per event that grew is its noisy neighbour.
    let mut noisy: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    let mut pairs: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut seen_top: std::collections::HashSet<(&str, &str, u64)> = Default::default();
    let mut seen_pair: std::collections::HashSet<(&str, &str, u64, &str)> = Default::default();
    for n in neighbours {
        let id = (n.cluster.as_str(), n.node.as_str(), n.event_id);
        let failed = workload_of.get(&id).copied().unwrap_or("");
        if n.growth_bytes > 0 && n.workload != failed && seen_top.insert(id) {
            let e = noisy.entry(n.workload.clone()).or_default();
            e.0 += 1;
            e.1 += n.growth_bytes;
        }
        if !failed.is_empty()
            && !n.workload.is_empty()
            && n.workload != failed
            && seen_pair.insert((id.0, id.1, id.2, n.workload.as_str()))
        {
            *pairs.entry((failed.to_owned(), n.workload.clone())).or_default() += 1;
        }
    }
    let mut noisy: Vec<NoisyNeighbour> = noisy
        .into_iter()
        .filter(|(w, _)| !w.is_empty())
        .map(|(workload, (events, growth_bytes))| NoisyNeighbour { workload, events, growth_bytes })
        .collect();
    noisy.sort_by(|a, b| {
        b.events.cmp(&a.events).then(b.growth_bytes.cmp(&a.growth_bytes)).then(a.workload.cmp(&b.workload))
    });
    noisy.truncate(top);
    let mut co: Vec<CoScheduled> = pairs
        .into_iter()
        .map(|((failed, neighbour), events)| CoScheduled { failed, neighbour, events })
        .collect();
    co.sort_by(|a, b| {
        b.events.cmp(&a.events).then(a.failed.cmp(&b.failed)).then(a.neighbour.cmp(&b.neighbour))
    });
    co.truncate(top);
    let allocation_sites = queries::builtin("alloc_sites")?
        .bind(
            client,
            db,
            &[
                ParamValue::Int(since_ms),
                ParamValue::Int(until_ms),
                ParamValue::Int(since_ms),
                ParamValue::Int(until_ms),
                ParamValue::UInt(top as u64),
            ],
        )?
        .fetch_all::<SiteRank>()
        .await?;

    Ok(CapacityReport {
        since_ms,
        until_ms,
        by,
        min_gpu_days,
        samples: rows.iter().map(|r| r.samples).sum(),
        ooms: events.len() as u64,
        ooms_by_scenario: fleet,
        groups,
        closest_to_edge: edge,
        noisy_neighbours: noisy,
        co_scheduling: co,
        allocation_sites,
    })
}

/// A share as `12.3 %`; `–` where there is no data (never a made-up 0.0 %).
fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| NO_DATA.to_owned(), |v| format!("{:.1} %", v * 100.0))
}

/// What a cell shows where there is no data.
const NO_DATA: &str = "–";

/// A group's OOMs per GPU-day, `–` below the report's threshold.
fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| NO_DATA.to_owned(), |r| format!("{r:.3}"))
}

fn label(key: &str) -> &str {
    if key.is_empty() { "(none)" } else { key }
}

impl CapacityReport {
    /// True when the window holds neither GPU samples nor OOM events.
    pub fn is_empty(&self) -> bool {
        self.samples == 0 && self.ooms == 0
    }

    /// The window in words: `2026-12-01T00:00:00.000Z – 2026-12-02T00:00:00.000Z`.
    fn window(&self) -> String {
        format!("{} – {}", format_ms(self.since_ms), format_ms(self.until_ms))
    }

    /// The empty-window message, naming the window and where to look.
    pub fn empty_note(&self) -> String {
        format!(
            "No GPU samples and no OOM events from {}. Check --since/--until, and that agents report to \
             this database (`oomlens sql table_counts` counts its rows).",
            self.window()
        )
    }

    /// The note under the groups when some have OOMs but too few GPU-days for a rate.
    fn rate_note(&self) -> Option<String> {
        let short = self.groups.iter().filter(|g| g.ooms > 0 && g.ooms_per_gpu_day.is_none()).count();
        (short > 0).then(|| {
            format!(
                "Rates per GPU-day need {} GPU-day(s) sampled in a group (--min-gpu-days); {short} group(s) \
                 with less show their OOM count only.",
                self.min_gpu_days
            )
        })
    }

    /// The text report.
    pub fn write_text(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "Capacity {} by {}: {} OOM events ({}), {} GPU samples",
            self.window(),
            self.by.as_str(),
            self.ooms,
            scenario_list(&self.ooms_by_scenario),
            self.samples
        )?;
        if self.is_empty() {
            writeln!(out, "\n{}", self.empty_note())?;
            return Ok(());
        }
        writeln!(out)?;
        writeln!(
            out,
            "  {:<32} {:>5} {:>8} {:>7} {:>7} {:>7} {:>7} {:>8} {:>6} {:>9}  by scenario",
            self.by.as_str(),
            "GPUs",
            "GPU-days",
            "p50",
            "p95",
            "p99",
            "max",
            ">=90 %",
            "OOMs",
            "/GPU-day"
        )?;
        for g in &self.groups {
            writeln!(
                out,
                "  {:<32} {:>5} {:>8.2} {:>7} {:>7} {:>7} {:>7} {:>8} {:>6} {:>9}  {}",
                oomlens_schema::text::ellipsize(label(&g.key), 32),
                g.gpus,
                g.gpu_days,
                pct(g.p50),
                pct(g.p95),
                pct(g.p99),
                pct(g.max),
                pct(g.above_90_share),
                g.ooms,
                rate(g.ooms_per_gpu_day),
                scenario_rate_list(&g.ooms_by_scenario, &g.ooms_per_gpu_day_by_scenario)
            )?;
        }
        if let Some(note) = self.rate_note() {
            writeln!(out, "  {note}")?;
        }
        writeln!(out)?;
        writeln!(out, "Workloads closest to the edge (p99 of used/total of the GPUs they led):")?;
        none_if_empty(out, self.closest_to_edge.is_empty(), "no workload was sampled")?;
        for w in &self.closest_to_edge {
            writeln!(
                out,
                "  {:<32} p99 {:>7}  max {:>7}  >=90 % {:>7}  GPUs {}",
                oomlens_schema::text::ellipsize(&w.workload, 32),
                pct(Some(w.p99)),
                pct(Some(w.max)),
                pct(Some(w.above_90_share)),
                w.gpus
            )?;
        }
        writeln!(out)?;
        writeln!(out, "Most frequent noisy neighbours (top-ranked, growing, before another job's OOM):")?;
        none_if_empty(out, self.noisy_neighbours.is_empty(), "no OOM had a growing neighbour")?;
        for n in &self.noisy_neighbours {
            writeln!(
                out,
                "  {:<32} {:>5} OOMs  grew {}",
                oomlens_schema::text::ellipsize(&n.workload, 32),
                n.events,
                crate::render::human_bytes(Some(n.growth_bytes.unsigned_abs()))
            )?;
        }
        writeln!(out)?;
        writeln!(out, "Co-scheduling that preceded OOMs (failed job ← neighbour):")?;
        none_if_empty(out, self.co_scheduling.is_empty(), "no OOM had a named neighbour")?;
        for p in &self.co_scheduling {
            writeln!(
                out,
                "  {:<32} ← {:<32} {:>5} OOMs",
                oomlens_schema::text::ellipsize(&p.failed, 32),
                oomlens_schema::text::ellipsize(&p.neighbour, 32),
                p.events
            )?;
        }
        writeln!(out)?;
        writeln!(out, "Code holding the most memory at the OOMs (allocator summaries from oomlens_hook):")?;
        none_if_empty(
            out,
            self.allocation_sites.is_empty(),
            "no job sent an allocator summary (oomlens_hook.install() in the job)",
        )?;
        for s in &self.allocation_sites {
            writeln!(
                out,
                "  {:<44} {:<24} {:>5} OOMs  {:>5.1} % of all, {:>5.1} % with a summary  {} workloads  max {}",
                oomlens_schema::text::ellipsize(&s.site, 44),
                oomlens_schema::text::ellipsize(&site_role(s), 24),
                s.ooms,
                s.share_pct,
                s.share_of_snapshots_pct,
                s.workloads,
                crate::render::human_bytes(Some(s.max_bytes_held))
            )?;
        }
        Ok(())
    }

    /// The HTML page: headroom bars per sampled group (p50/p95/p99/max with the 90 % line, a
    /// percent axis and a legend), OOMs per scenario stacked per group that had OOMs (a count axis
    /// and the scenario legend), then the tables and ranked lists; every empty part says why.
    pub fn write_html(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut page = html_head(&format!("oomlens capacity by {}", self.by.as_str()));
        let _ = writeln!(
            page,
            "<p>{}: {} OOM events ({}), {} GPU samples.</p>",
            html_escape(&self.window()),
            self.ooms,
            html_escape(&scenario_list(&self.ooms_by_scenario)),
            self.samples
        );
        if self.is_empty() {
            let _ = writeln!(page, "<p class=\"note\">{}</p></body></html>", html_escape(&self.empty_note()));
            return out.write_all(page.as_bytes());
        }
        page.push_str("<h2>Headroom (used / total)</h2>");
        let sampled: Vec<&Group> = self.groups.iter().filter(|g| g.samples > 0).collect();
        if sampled.is_empty() {
            page.push_str("<p class=\"note\">No GPU samples in this window.</p>");
        } else {
            page.push_str(&wide(&headroom_svg(&sampled)));
            page.push_str(&chart::legend(&[
                (HEADROOM_SHADES[0], Swatch::Fill, "p50".to_owned()),
                (HEADROOM_SHADES[1], Swatch::Fill, "p95".to_owned()),
                (HEADROOM_SHADES[2], Swatch::Fill, "p99".to_owned()),
                (HEADROOM_SHADES[3], Swatch::Fill, "max".to_owned()),
                ("#d62728", Swatch::Dashed, "90 % of the GPU".to_owned()),
            ]));
        }
        let unsampled = self.groups.len() - sampled.len();
        if unsampled > 0 {
            let _ = writeln!(
                page,
                "<p class=\"note\">{unsampled} group(s) seen only in OOM events (no GPU samples) are not charted.</p>"
            );
        }
        page.push_str("<h2>OOMs per scenario</h2>");
        let failing: Vec<&Group> = self.groups.iter().filter(|g| g.ooms > 0).collect();
        if failing.is_empty() {
            page.push_str("<p class=\"note\">No OOM event in this window.</p>");
        } else {
            let scenarios: Vec<&str> = self.ooms_by_scenario.keys().map(String::as_str).collect();
            page.push_str(&wide(&ooms_svg(&failing, &scenarios)));
            let entries: Vec<(&str, Swatch, String)> = scenarios
                .iter()
                .map(|s| {
                    (chart::scenario_colour(s), Swatch::Fill, format!("{s} ({})", self.ooms_by_scenario[*s]))
                })
                .collect();
            page.push_str(&chart::legend(&entries));
        }
        let mut table = String::from(
            "<table><tr><th>group</th><th>GPUs</th><th>GPU-days</th><th>p50</th><th>p95</th><th>p99</th><th>max</th><th>&ge;90 %</th><th>OOMs</th><th>per GPU-day</th><th>by scenario</th></tr>",
        );
        for g in &self.groups {
            let _ = write!(
                table,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"words\">{}</td></tr>",
                html_escape(label(&g.key)),
                g.gpus,
                g.gpu_days,
                pct(g.p50),
                pct(g.p95),
                pct(g.p99),
                pct(g.max),
                pct(g.above_90_share),
                g.ooms,
                rate(g.ooms_per_gpu_day),
                html_escape(&scenario_rate_list(&g.ooms_by_scenario, &g.ooms_per_gpu_day_by_scenario))
            );
        }
        table.push_str("</table>");
        page.push_str("<h2>Groups</h2>");
        page.push_str(&wide(&table));
        if let Some(note) = self.rate_note() {
            let _ = writeln!(page, "<p class=\"note\">{}</p>", html_escape(&note));
        }
        let list = |title: &str, items: Vec<String>, why: &str| {
            let mut html = format!("<h2>{}</h2>", html_escape(title));
            if items.is_empty() {
                let _ = write!(html, "<p class=\"note\">None in this window: {}.</p>", html_escape(why));
            } else {
                html.push_str("<ul>");
                for i in items {
                    let _ = write!(html, "<li>{}</li>", html_escape(&i));
                }
                html.push_str("</ul>");
            }
            html
        };
        page.push_str(&list(
            "Closest to the edge",
            self.closest_to_edge
                .iter()
                .map(|w| format!("{} — p99 {}, max {}", w.workload, pct(Some(w.p99)), pct(Some(w.max))))
                .collect(),
            "no workload was sampled",
        ));
        page.push_str(&list(
            "Noisy neighbours",
            self.noisy_neighbours.iter().map(|n| format!("{} — {} OOMs", n.workload, n.events)).collect(),
            "no OOM had a growing neighbour",
        ));
        page.push_str(&list(
            "Co-scheduling before OOMs",
            self.co_scheduling
                .iter()
                .map(|p| format!("{} ← {} — {} OOMs", p.failed, p.neighbour, p.events))
                .collect(),
            "no OOM had a named neighbour",
        ));
        page.push_str("<h2>Code holding the most memory at the OOMs</h2>");
        if self.allocation_sites.is_empty() {
            page.push_str(
                "<p class=\"note\">None in this window: no job sent an allocator summary (<code>oomlens_hook.install()</code> in the job).</p>",
            );
        } else {
            let mut table = String::from(
                "<table><tr><th>site</th><th>function (phase)</th><th>OOMs</th><th>% of all</th><th>% with a summary</th><th>workloads</th><th>max held</th></tr>",
            );
            for s in &self.allocation_sites {
                let _ = write!(
                    table,
                    "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.1}</td><td class=\"num\">{:.1}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                    html_escape(&s.site),
                    html_escape(&site_role(s)),
                    s.ooms,
                    s.share_pct,
                    s.share_of_snapshots_pct,
                    s.workloads,
                    html_escape(&crate::render::human_bytes(Some(s.max_bytes_held)))
                );
            }
            table.push_str("</table>");
            page.push_str(&wide(&table));
        }
        page.push_str("</body></html>\n");
        out.write_all(page.as_bytes())
    }
}

/// The headroom bars' shades: p50, p95, p99, max (darkest first, drawn on top).
const HEADROOM_SHADES: [&str; 4] = ["#2f5d8a", "#5b8dc4", "#9ebfe0", "#dbe7f3"];

/// Geometry of the horizontal bar charts: row height, label column, width, axis band.
const BAR_ROW: f64 = 22.0;
const BAR_LEFT: f64 = 220.0;
const BAR_WIDTH: f64 = 760.0;
const BAR_AXIS: f64 = 24.0;

/// The start of a horizontal bar chart of `rows` rows, with the group labels and the value axis
/// (gridlines and tick labels at the bottom); returns the SVG so far and the x of a value.
fn bar_chart(rows: &[&Group], axis: &chart::Axis) -> (String, impl Fn(f64) -> f64 + use<>) {
    let h = BAR_ROW * rows.len() as f64 + 10.0 + BAR_AXIS;
    let plot_w = BAR_WIDTH - BAR_LEFT - 20.0;
    let max = axis.max;
    let x = move |v: f64| BAR_LEFT + (v / max).clamp(0.0, 1.0) * plot_w;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {BAR_WIDTH} {h}" width="{BAR_WIDTH}" height="{h}" role="img">"#
    );
    let plot_bottom = 5.0 + BAR_ROW * rows.len() as f64;
    for (v, label) in &axis.ticks {
        let tx = x(*v);
        let _ = write!(
            svg,
            r##"<line x1="{tx:.1}" y1="5" x2="{tx:.1}" y2="{plot_bottom:.1}" stroke="#e4e4e4"/><text x="{tx:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            plot_bottom + 15.0,
            html_escape(label)
        );
    }
    for (i, g) in rows.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"#,
            BAR_LEFT - 6.0,
            10.0 + i as f64 * BAR_ROW + 12.0,
            html_escape(&oomlens_schema::text::ellipsize(label(&g.key), 34))
        );
    }
    (svg, x)
}

/// Headroom bars of the sampled groups: max, p99, p95, p50 drawn over each other, the 90 % line.
fn headroom_svg(rows: &[&Group]) -> String {
    let axis = chart::percent_axis();
    let (mut svg, x) = bar_chart(rows, &axis);
    for (i, g) in rows.iter().enumerate() {
        let y = 10.0 + i as f64 * BAR_ROW;
        for (shade, name, v) in [(3, "max", g.max), (2, "p99", g.p99), (1, "p95", g.p95), (0, "p50", g.p50)] {
            let v = v.unwrap_or(0.0);
            let _ = write!(
                svg,
                r#"<rect x="{BAR_LEFT}" y="{y:.1}" width="{:.1}" height="16" fill="{}"><title>{} {name} {}</title></rect>"#,
                x(v) - BAR_LEFT,
                HEADROOM_SHADES[shade],
                html_escape(label(&g.key)),
                pct(Some(v))
            );
        }
    }
    let x90 = x(0.9);
    let _ = write!(
        svg,
        r##"<line x1="{x90:.1}" y1="5" x2="{x90:.1}" y2="{:.1}" stroke="#d62728" stroke-width="2" stroke-dasharray="4 3"/></svg>"##,
        5.0 + BAR_ROW * rows.len() as f64
    );
    svg
}

/// OOMs per scenario stacked per group (groups with OOMs only), on a count axis.
fn ooms_svg(rows: &[&Group], scenarios: &[&str]) -> String {
    let most = rows.iter().map(|g| g.ooms).max().unwrap_or(0) as f64;
    let axis = chart::count_axis(most, 5);
    let (mut svg, x) = bar_chart(rows, &axis);
    for (i, g) in rows.iter().enumerate() {
        let y = 10.0 + i as f64 * BAR_ROW;
        let mut done = 0.0;
        for s in scenarios {
            let n = g.ooms_by_scenario.get(*s).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            let (x0, x1) = (x(done), x(done + n as f64));
            let _ = write!(
                svg,
                r#"<rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="16" fill="{}"><title>{} {s}: {n}</title></rect>"#,
                x1 - x0,
                chart::scenario_colour(s),
                html_escape(label(&g.key))
            );
            done += n as f64;
        }
    }
    svg.push_str("</svg>");
    svg
}

/// `  none in this window: <why>` under a heading whose list is empty.
fn none_if_empty(out: &mut dyn Write, empty: bool, why: &str) -> std::io::Result<()> {
    if empty { writeln!(out, "  none in this window: {why}") } else { Ok(()) }
}

/// A site's function with its phase: `forward (forward)`, `from_pretrained (load)`.
fn site_role(s: &SiteRank) -> String {
    if s.phase.is_empty() {
        s.function.clone()
    } else {
        format!("{} ({})", s.function, s.phase.replace('_', " "))
    }
}

fn scenario_list(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".to_owned();
    }
    let mut v: Vec<(&String, &u64)> = m.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

/// [`scenario_list`] with each scenario's OOMs per GPU-day where known: `static 5 (0.210/GPU-day)`.
fn scenario_rate_list(counts: &BTreeMap<String, u64>, rates: &BTreeMap<String, f64>) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    let mut v: Vec<(&String, &u64)> = counts.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(k, n)| match rates.get(*k) {
            Some(r) => format!("{k} {n} ({r:.3}/GPU-day)"),
            None => format!("{k} {n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_have_a_row_per_group_with_data_and_say_what_is_left_out() {
        let sampled = Group {
            gpus: 2,
            samples: 7200,
            gpu_days: 7200.0 / 86_400.0,
            p50: Some(0.5),
            p95: Some(0.8),
            p99: Some(0.9),
            max: Some(0.95),
            above_90_share: Some(0.1),
            ..Group::unsampled("idle-but-sampled")
        };
        let mut failing = Group::unsampled("events-only");
        failing.ooms = 3;
        failing.ooms_by_scenario.insert("batch".into(), 3);
        let report = CapacityReport {
            since_ms: 0,
            until_ms: 3_600_000,
            by: GroupBy::Workload,
            min_gpu_days: 1.0,
            samples: 7200,
            groups: vec![failing, sampled],
            ooms: 3,
            ooms_by_scenario: BTreeMap::from([("batch".to_owned(), 3)]),
            closest_to_edge: vec![],
            noisy_neighbours: vec![],
            co_scheduling: vec![],
            allocation_sites: vec![],
        };
        let mut page = Vec::new();
        report.write_html(&mut page).unwrap();
        let page = String::from_utf8(page).unwrap();
        let charts: Vec<&str> =
            page.split("<svg").skip(1).map(|c| c.split("</svg>").next().unwrap()).collect();
        assert_eq!(charts.len(), 2);
        assert!(charts[0].contains(">idle-but-sampled<") && !charts[0].contains(">events-only<"));
        assert!(charts[1].contains(">events-only<") && !charts[1].contains(">idle-but-sampled<"));
        assert!(page.contains("1 group(s) seen only in OOM events"), "{page}");
        assert!(page.contains("batch (3)") && page.contains(">p99<"), "legends: {page}");
        assert!(page.contains("None in this window: no workload was sampled"), "{page}");
        let mut text = Vec::new();
        report.write_text(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let line = text.lines().find(|l| l.trim_start().starts_with("events-only")).unwrap();
        assert!(!line.contains('%') && line.contains('–'), "{line}");
        assert!(text.contains("1 group(s) with less show their OOM count only"), "{text}");
    }

    #[test]
    fn groupings_parse() {
        for by in [GroupBy::Cluster, GroupBy::GpuModel, GroupBy::Node, GroupBy::Namespace, GroupBy::Workload]
        {
            assert_eq!(by.as_str().parse::<GroupBy>().ok(), Some(by));
        }
        assert!("rack".parse::<GroupBy>().is_err());
        let q = queries::get("capacity_headroom").expect("capacity_headroom");
        assert!(
            ["cluster", "node", "namespace", "workload"]
                .iter()
                .all(|by| q.sql.contains(&format!("by = '{by}'"))),
            "the SQL knows every non-model grouping"
        );
    }

    #[test]
    fn scenario_lists_sort_by_count() {
        let m: BTreeMap<String, u64> = [("batch".to_owned(), 2), ("static".to_owned(), 5)].into();
        assert_eq!(scenario_list(&m), "static 5, batch 2");
        assert_eq!(scenario_list(&BTreeMap::new()), "none");
        let rates: BTreeMap<String, f64> = [("static".to_owned(), 0.25)].into();
        assert_eq!(scenario_rate_list(&m, &rates), "static 5 (0.250/GPU-day), batch 2");
        assert_eq!(scenario_rate_list(&BTreeMap::new(), &rates), "none");
    }
}
