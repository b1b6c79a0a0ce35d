//! `oomlens top`: a live terminal view of the fleet — per node, each GPU's memory bar, its largest
//! processes, and the most recent OOMs — redrawn with plain ANSI escapes every few seconds.
//!
//! This module owns fetching one frame (`collector/sql/top_gpus.sql`, `top_processes.sql`, the
//! built-in `oom_events`) and rendering it as text; `--once` prints a single frame without escape
//! codes (testable, scriptable).

use std::collections::BTreeMap;
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

/// One frame of the view.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The frame's time (epoch ms).
    pub at_ms: i64,
    /// Readings considered live: the `live_ms` before `at_ms`.
    pub live_ms: i64,
    /// The latest reading of every GPU sampled in the live window.
    pub gpus: Vec<GpuNow>,
    /// Processes, largest first.
    pub processes: Vec<ProcessNow>,
    /// OOMs of the `recent_ms` before `at_ms`, newest first.
    pub ooms: Vec<EventLine>,
}

/// Fetches the frame at `at_ms`: GPU and process readings of the `live_ms` before it, OOMs of the
/// `recent_ms` before it (at most `max_ooms`).
pub async fn fetch_frame(
    client: &clickhouse::Client,
    db: &str,
    at_ms: i64,
    live_ms: i64,
    recent_ms: i64,
    max_ooms: usize,
) -> Result<Frame, TopError> {
    let live = [ParamValue::Int(at_ms.saturating_sub(live_ms)), ParamValue::Int(at_ms.saturating_add(1))];
    let gpus = queries::builtin("top_gpus")?.bind(client, db, &live)?.fetch_all::<GpuNow>().await?;
    let processes =
        queries::builtin("top_processes")?.bind(client, db, &live)?.fetch_all::<ProcessNow>().await?;
    let recent = [ParamValue::Int(at_ms.saturating_sub(recent_ms)), ParamValue::Int(at_ms.saturating_add(1))];
    let mut ooms =
        queries::builtin("oom_events")?.bind(client, db, &recent)?.fetch_all::<EventLine>().await?;
    ooms.truncate(max_ooms);
    Ok(Frame { at_ms, live_ms, gpus, processes, ooms })
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

impl Frame {
    /// Renders the frame; `procs_per_gpu` processes under each GPU.
    pub fn write(&self, out: &mut dyn Write, procs_per_gpu: usize) -> std::io::Result<()> {
        let used: u64 = self.gpus.iter().map(|g| g.used_bytes).sum();
        let total: u64 = self.gpus.iter().map(|g| g.total_bytes).sum();
        writeln!(
            out,
            "oomlens top — {} — {} GPUs on {} nodes, {} of {} used ({} processes); readings of the last {} s",
            format_ms(self.at_ms),
            self.gpus.len(),
            self.gpus.iter().map(|g| (&g.cluster, &g.node)).collect::<std::collections::BTreeSet<_>>().len(),
            human_bytes(Some(used)),
            human_bytes(Some(total)),
            self.processes.len(),
            self.live_ms / 1000
        )?;
        let mut procs: BTreeMap<(&str, &str, u32), Vec<&ProcessNow>> = BTreeMap::new();
        for p in &self.processes {
            procs.entry((&p.cluster, &p.node, p.gpu_index)).or_default().push(p);
        }
        let mut last_node: Option<(&str, &str)> = None;
        for g in &self.gpus {
            if last_node != Some((&g.cluster, &g.node)) {
                writeln!(out, "{}/{}", g.cluster, g.node)?;
                last_node = Some((&g.cluster, &g.node));
            }
            let pct =
                if g.total_bytes == 0 { 0.0 } else { g.used_bytes as f64 * 100.0 / g.total_bytes as f64 };
            writeln!(
                out,
                "  GPU {:<2} {} {:>5.1} %  {:>11} / {:>11}  util {:>3} %{}",
                g.gpu_index,
                bar(g.used_bytes, g.total_bytes, 30),
                pct,
                human_bytes(Some(g.used_bytes)),
                human_bytes(Some(g.total_bytes)),
                g.util_pct,
                if pct >= 90.0 { "  !" } else { "" }
            )?;
            for p in procs
                .get(&(g.cluster.as_str(), g.node.as_str(), g.gpu_index))
                .into_iter()
                .flatten()
                .take(procs_per_gpu)
            {
                writeln!(
                    out,
                    "         pid {:<8} {:>11}  {:<28} {}",
                    p.pid,
                    human_bytes(Some(p.used_bytes)),
                    oomlens_schema::text::ellipsize(
                        if p.workload.is_empty() { "-" } else { &p.workload },
                        28
                    ),
                    p.process_name
                )?;
            }
        }
        writeln!(out)?;
        writeln!(out, "Recent OOMs ({}):", self.ooms.len())?;
        for e in &self.ooms {
            writeln!(
                out,
                "  {}  {}/{} GPU {:<2} {:<14} {:<28} requested {}",
                format_ms(e.ts_ms),
                e.cluster,
                e.node,
                e.gpu_index.map_or_else(|| "-".to_owned(), |g| g.to_string()),
                e.kind,
                oomlens_schema::text::ellipsize(if e.workload.is_empty() { "-" } else { &e.workload }, 28),
                human_bytes(e.requested_bytes)
            )?;
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
}
