//! `oomlens top`: a live terminal view of the fleet — per node, each GPU's memory bar, its live
//! processes, and the most recent OOMs.
//!
//! This module owns fetching one frame (`collector/sql/top_gpus.sql`, `top_processes.sql`, the
//! built-in `oom_events`, optionally of one cluster / node), deciding which processes are still
//! alive and whether a GPU's figures agree with its processes', and rendering the frame as lines: a
//! header (pinned at the top of the screen) and a body. [`tui`] runs the interactive screen;
//! `--once` prints one frame without escape codes (testable, scriptable).

pub mod tui;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::render::human_bytes;
use crate::report::EventLine;
use crate::timearg::format_ms;
use oomlens_collector::analysis::queries::{self, ParamValue};

/// Fetching a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// A query or its arguments are wrong.
    #[error(transparent)]
    Query(#[from] queries::QueryError),
    /// ClickHouse failed.
    #[error("ClickHouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
}

/// One row of `top_gpus`.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct GpuNow {
    /// Cluster of the agent that sampled the GPU.
    pub cluster: String,
    /// Node name (the agent certificate's CN).
    pub node: String,
    /// NVML index of the GPU on its node.
    pub gpu_index: u32,
    /// Time of the reading.
    pub last_ts_ms: i64,
    /// Used memory.
    pub used_bytes: u64,
    /// Total memory.
    pub total_bytes: u64,
    /// Utilisation, percent.
    pub util_pct: u8,
}

/// One row of `top_processes`.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct ProcessNow {
    /// Cluster of the agent that sampled the process.
    pub cluster: String,
    /// Node name (the agent certificate's CN).
    pub node: String,
    /// NVML index of the GPU the process uses.
    pub gpu_index: u32,
    /// Host PID.
    pub pid: u32,
    /// Time of the reading.
    pub last_ts_ms: i64,
    /// GPU memory.
    pub used_bytes: u64,
    /// Workload at the latest reading ('' when unknown).
    pub workload: String,
    /// Process name.
    pub process_name: String,
}

/// What a frame shows: its time, what counts as live and recent, and an optional cluster / node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FrameQuery {
    /// The frame's time (epoch ms).
    pub at_ms: i64,
    /// Readings of this long before `at_ms` count as live.
    pub live_ms: i64,
    /// OOMs of this long before `at_ms` are listed.
    pub recent_ms: i64,
    /// At most this many OOMs.
    pub max_ooms: usize,
    /// Only this cluster ('' = all).
    pub cluster: String,
    /// Only this node ('' = all).
    pub node: String,
}

impl FrameQuery {
    /// The filter in words (`cluster prod, node gpu-7`), `all nodes` without one.
    pub fn filter_words(&self) -> String {
        let mut parts = Vec::new();
        if !self.cluster.is_empty() {
            parts.push(format!("cluster {}", self.cluster));
        }
        if !self.node.is_empty() {
            parts.push(format!("node {}", self.node));
        }
        if parts.is_empty() { "all nodes".to_owned() } else { parts.join(", ") }
    }
}

/// One frame of the view.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// What was asked.
    pub query: FrameQuery,
    /// The latest reading of every GPU sampled in the live window.
    pub gpus: Vec<GpuNow>,
    /// Live processes (see [`live_processes`]), largest first.
    pub processes: Vec<ProcessNow>,
    /// Processes read in the live window that are gone from their GPU's latest reading.
    pub exited: usize,
    /// OOMs of the `recent_ms` before `at_ms`, newest first.
    pub ooms: Vec<EventLine>,
}

/// How much older than its GPU's latest reading a process's latest reading may be and still be
/// live: the agent reads a GPU's processes with the GPU (the same `ts_ms`), but a GPU may be read
/// more often than its processes (the flight recorder's fast readings).
pub const PROCESS_GRACE_MS: i64 = 2_000;

/// The processes still on their GPU: those of the GPU's latest process reading (the newest
/// `last_ts_ms` among its processes), when that reading is within [`PROCESS_GRACE_MS`] of the GPU's
/// own latest reading. A process that exited keeps its last reading in the live window but drops
/// out here, so a GPU's processes never add up to more than it had at one moment. Returns the
/// live processes (order kept) and how many were dropped.
pub fn live_processes(gpus: &[GpuNow], processes: Vec<ProcessNow>) -> (Vec<ProcessNow>, usize) {
    let gpu_ts: HashMap<(&str, &str, u32), i64> =
        gpus.iter().map(|g| ((g.cluster.as_str(), g.node.as_str(), g.gpu_index), g.last_ts_ms)).collect();
    let mut round: HashMap<(String, String, u32), i64> = HashMap::new();
    for p in &processes {
        let e = round.entry((p.cluster.clone(), p.node.clone(), p.gpu_index)).or_insert(i64::MIN);
        *e = (*e).max(p.last_ts_ms);
    }
    let total = processes.len();
    let live: Vec<ProcessNow> = processes
        .into_iter()
        .filter(|p| {
            let latest_round = round.get(&(p.cluster.clone(), p.node.clone(), p.gpu_index)).copied();
            let gpu = gpu_ts.get(&(p.cluster.as_str(), p.node.as_str(), p.gpu_index)).copied();
            latest_round == Some(p.last_ts_ms)
                && gpu.is_none_or(|g| p.last_ts_ms >= g.saturating_sub(PROCESS_GRACE_MS))
        })
        .collect();
    let dropped = total - live.len();
    (live, dropped)
}

/// Fetches the frame of `q`.
pub async fn fetch_frame(client: &clickhouse::Client, db: &str, q: &FrameQuery) -> Result<Frame, TopError> {
    let live = [
        ParamValue::Int(q.at_ms.saturating_sub(q.live_ms)),
        ParamValue::Int(q.at_ms.saturating_add(1)),
        ParamValue::String(q.cluster.clone()),
        ParamValue::String(q.node.clone()),
    ];
    let gpus = queries::builtin("top_gpus")?.bind(client, db, &live)?.fetch_all::<GpuNow>().await?;
    let processes =
        queries::builtin("top_processes")?.bind(client, db, &live)?.fetch_all::<ProcessNow>().await?;
    let (processes, exited) = live_processes(&gpus, processes);
    let recent =
        [ParamValue::Int(q.at_ms.saturating_sub(q.recent_ms)), ParamValue::Int(q.at_ms.saturating_add(1))];
    let mut ooms =
        queries::builtin("oom_events")?.bind(client, db, &recent)?.fetch_all::<EventLine>().await?;
    ooms.retain(|e| {
        (q.cluster.is_empty() || e.cluster == q.cluster) && (q.node.is_empty() || e.node == q.node)
    });
    ooms.truncate(q.max_ooms);
    Ok(Frame { query: q.clone(), gpus, processes, exited, ooms })
}

/// A memory bar `[█████·····]` of `width` cells.
pub fn bar(used: u64, total: u64, width: usize) -> String {
    let filled = if total == 0 {
        0
    } else {
        usize::try_from((u128::from(used.min(total)) * width as u128).div_ceil(u128::from(total)))
            .unwrap_or(width)
    };
    let filled = filled.min(width);
    format!("[{}{}]", "█".repeat(filled), "·".repeat(width - filled))
}

/// How far a GPU's used memory may fall below the sum of its processes' before the figures are
/// flagged: readings are not atomic, and NVML's per-process figures round.
const DISAGREE_SLACK_BYTES: u64 = 256 << 20;

/// A rendered frame: the header (pinned at the top of an interactive screen) and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The summary line(s).
    pub header: Vec<String>,
    /// Per node its GPUs and processes, then the recent OOMs.
    pub body: Vec<String>,
}

impl Frame {
    /// The frame as lines; `procs_per_gpu` processes under each GPU.
    pub fn render(&self, procs_per_gpu: usize) -> Rendered {
        let q = &self.query;
        let used: u64 = self.gpus.iter().map(|g| g.used_bytes).sum();
        let total: u64 = self.gpus.iter().map(|g| g.total_bytes).sum();
        let nodes =
            self.gpus.iter().map(|g| (&g.cluster, &g.node)).collect::<std::collections::BTreeSet<_>>().len();
        let mut header = vec![format!(
            "oomlens top — {} — {} GPUs on {} nodes, {} of {} used ({} processes); readings of the last {} s",
            format_ms(q.at_ms),
            self.gpus.len(),
            nodes,
            human_bytes(Some(used)),
            human_bytes(Some(total)),
            self.processes.len(),
            q.live_ms / 1000
        )];
        if !q.cluster.is_empty() || !q.node.is_empty() || self.exited > 0 {
            let mut notes = vec![format!("showing {}", q.filter_words())];
            if self.exited > 0 {
                notes.push(format!("{} exited process(es) hidden", self.exited));
            }
            header.push(notes.join("; "));
        }
        let mut body = Vec::new();
        if self.gpus.is_empty() {
            body.push(format!(
                "No GPU reading of {} in the {} s before {}: check --at / --live, the filter, and that agents report here.",
                q.filter_words(),
                q.live_ms / 1000,
                format_ms(q.at_ms)
            ));
        }
        let mut procs: BTreeMap<(&str, &str, u32), Vec<&ProcessNow>> = BTreeMap::new();
        for p in &self.processes {
            procs.entry((&p.cluster, &p.node, p.gpu_index)).or_default().push(p);
        }
        let mut last_node: Option<(&str, &str)> = None;
        for g in &self.gpus {
            if last_node != Some((&g.cluster, &g.node)) {
                body.push(format!("{}/{}", g.cluster, g.node));
                last_node = Some((&g.cluster, &g.node));
            }
            let pct =
                if g.total_bytes == 0 { 0.0 } else { g.used_bytes as f64 * 100.0 / g.total_bytes as f64 };
            let mine = procs.get(&(g.cluster.as_str(), g.node.as_str(), g.gpu_index));
            let procs_sum: u64 = mine.into_iter().flatten().map(|p| p.used_bytes).sum();
            body.push(format!(
                "  GPU {:<2} {} {:>5.1} %  {:>11} / {:>11}  util {:>3} %{}",
                g.gpu_index,
                bar(g.used_bytes, g.total_bytes, 30),
                pct,
                human_bytes(Some(g.used_bytes)),
                human_bytes(Some(g.total_bytes)),
                g.util_pct,
                if pct >= 90.0 { "  !" } else { "" }
            ));
            let list = mine.map_or(&[][..], Vec::as_slice);
            for p in list.iter().take(procs_per_gpu) {
                body.push(format!(
                    "         pid {:<8} {:>11}  {:<28} {}",
                    p.pid,
                    human_bytes(Some(p.used_bytes)),
                    oomlens_schema::text::ellipsize(
                        if p.workload.is_empty() { "-" } else { &p.workload },
                        28
                    ),
                    p.process_name
                ));
            }
            if list.len() > procs_per_gpu {
                let rest: u64 = list[procs_per_gpu..].iter().map(|p| p.used_bytes).sum();
                body.push(format!(
                    "         … {} more process(es)  {:>11}",
                    list.len() - procs_per_gpu,
                    human_bytes(Some(rest))
                ));
            }
            if procs_sum > g.used_bytes.saturating_add(DISAGREE_SLACK_BYTES) {
                body.push(format!(
                    "         ! the processes' {} exceed the GPU's {} used: the readings disagree (a stale process \
                     reading or a driver that counts differently)",
                    human_bytes(Some(procs_sum)),
                    human_bytes(Some(g.used_bytes))
                ));
            } else if !list.is_empty() && g.used_bytes > procs_sum.saturating_add(DISAGREE_SLACK_BYTES) {
                body.push(format!(
                    "         + {} not in any listed process (CUDA contexts, processes of other containers)",
                    human_bytes(Some(g.used_bytes - procs_sum))
                ));
            }
        }
        body.push(String::new());
        body.push(format!("Recent OOMs ({}) of the last {} s:", self.ooms.len(), q.recent_ms / 1000));
        if self.ooms.is_empty() {
            body.push(format!("  none on {}", q.filter_words()));
        }
        for e in &self.ooms {
            body.push(format!(
                "  {}  {}/{} GPU {:<2} {:<14} {:<28} requested {}",
                format_ms(e.ts_ms),
                e.cluster,
                e.node,
                e.gpu_index.map_or_else(|| "-".to_owned(), |g| g.to_string()),
                e.kind,
                oomlens_schema::text::ellipsize(if e.workload.is_empty() { "-" } else { &e.workload }, 28),
                human_bytes(e.requested_bytes)
            ));
        }
        Rendered { header, body }
    }

    /// Writes the whole frame (header then body), as `--once` prints it.
    pub fn write(&self, out: &mut dyn Write, procs_per_gpu: usize) -> std::io::Result<()> {
        let r = self.render(procs_per_gpu);
        for line in r.header.iter().chain(&r.body) {
            writeln!(out, "{line}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars() {
        assert_eq!(bar(0, 100, 4), "[····]");
        assert_eq!(bar(50, 100, 4), "[██··]");
        assert_eq!(bar(1, 100, 4), "[█···]", "any use shows");
        assert_eq!(bar(200, 100, 4), "[████]");
        assert_eq!(bar(5, 0, 4), "[····]");
    }

    fn gpu(ts: i64, used_gib: u64) -> GpuNow {
        GpuNow {
            cluster: "c".into(),
            node: "n".into(),
            gpu_index: 0,
            last_ts_ms: ts,
            used_bytes: used_gib << 30,
            total_bytes: 80 << 30,
            util_pct: 50,
        }
    }

    fn process(pid: u32, ts: i64, used_gib: u64) -> ProcessNow {
        ProcessNow {
            cluster: "c".into(),
            node: "n".into(),
            gpu_index: 0,
            pid,
            last_ts_ms: ts,
            used_bytes: used_gib << 30,
            workload: format!("job-{pid}"),
            process_name: "python".into(),
        }
    }

    fn frame(gpus: Vec<GpuNow>, processes: Vec<ProcessNow>) -> Frame {
        let (processes, exited) = live_processes(&gpus, processes);
        let query = FrameQuery {
            at_ms: 100_000,
            live_ms: 30_000,
            recent_ms: 3_600_000,
            max_ooms: 10,
            ..FrameQuery::default()
        };
        Frame { query, gpus, processes, exited, ooms: vec![] }
    }

    #[test]
    fn exited_processes_leave_and_figures_agree() {
        // pid 1 held 78 GiB until it exited 20 s ago; the GPU now reads 2 GiB with pid 2 on it.
        let f = frame(vec![gpu(100_000, 2)], vec![process(1, 80_000, 78), process(2, 100_000, 2)]);
        assert_eq!(f.processes.iter().map(|p| p.pid).collect::<Vec<_>>(), [2]);
        assert_eq!(f.exited, 1);
        let text = f.render(3);
        assert!(text.header[1].contains("1 exited process(es) hidden"), "{text:?}");
        assert!(!text.body.iter().any(|l| l.contains("pid 1 ")), "{text:?}");
        assert!(!text.body.iter().any(|l| l.contains("disagree")), "{text:?}");

        // The GPU read more often than its processes (fast readings): still live within the grace.
        let f = frame(vec![gpu(100_000, 40)], vec![process(3, 99_000, 39)]);
        assert_eq!(f.processes.len(), 1);
        // All processes gone (no process reading for 10 s while the GPU reads on): none live.
        let f = frame(vec![gpu(100_000, 1)], vec![process(4, 90_000, 39)]);
        assert!(f.processes.is_empty());

        // Same reading, figures that cannot both be true: flagged, never shown silently.
        let f = frame(vec![gpu(100_000, 2)], vec![process(5, 100_000, 78)]);
        let text = f.render(3);
        assert!(text.body.iter().any(|l| l.contains("exceed the GPU's 2.00 GiB used")), "{text:?}");
        // Memory outside every listed process is shown.
        let f = frame(vec![gpu(100_000, 30)], vec![process(6, 100_000, 10)]);
        let text = f.render(3);
        assert!(text.body.iter().any(|l| l.contains("+ 20.00 GiB not in any listed process")), "{text:?}");
    }

    #[test]
    fn filters_and_empty_frames_say_what_was_asked() {
        let mut f = frame(vec![], vec![]);
        f.query.node = "gpu-7".into();
        let text = f.render(3);
        assert_eq!(text.header[1], "showing node gpu-7");
        assert!(text.body[0].starts_with("No GPU reading of node gpu-7 in the 30 s before"), "{text:?}");
        assert!(text.body.iter().any(|l| l == "  none on node gpu-7"), "{text:?}");
    }
}
