//! Running the built-in queries ([`oomlens_collector::analysis::queries`]) for people: `oomlens
//! sql`, and the row counts and event list the demo's closing report prints.

use std::io::Write;

use anyhow::Context as _;
use serde::Deserialize;

use oomlens_collector::analysis::queries::{self, ParamValue, QueryError};
use oomlens_collector::cli::ChArgs;
use oomlens_collector::clickhouse::Ch;

/// Running a built-in query failed.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The query or its arguments are wrong.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// ClickHouse failed.
    #[error("ClickHouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
}

/// Rows per table (`table_counts`).
pub async fn fetch_table_counts(
    client: &clickhouse::Client,
    db: &str,
) -> Result<Vec<(String, u64)>, ReportError> {
    #[derive(Debug, clickhouse::Row, Deserialize)]
    struct Row {
        table: String,
        rows: u64,
    }
    let rows = queries::builtin("table_counts")?.bind(client, db, &[])?.fetch_all::<Row>().await?;
    Ok(rows.into_iter().map(|r| (r.table, r.rows)).collect())
}

/// One OOM event as the `oom_events` query returns it.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Deserialize)]
pub struct EventLine {
    /// Event id.
    pub event_id: u64,
    /// Unix epoch ms.
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
    /// Detector that saw it (`log`, `hook`, `kmsg`, `nvml`, `simulator`).
    pub source: String,
    /// Framework that printed the message (`pytorch`, `cuda`, `nccl`, `kernel`, …).
    pub framework: String,
    /// Phase of the job at the failure (`forward`, `backward`, …, `unknown`).
    pub phase: String,
    /// Requested bytes.
    pub requested_bytes: Option<u64>,
    /// Capacity bytes.
    pub capacity_bytes: Option<u64>,
    /// Free bytes.
    pub free_bytes: Option<u64>,
    /// Allocated bytes.
    pub allocated_bytes: Option<u64>,
    /// Reserved bytes.
    pub reserved_bytes: Option<u64>,
    /// Process used bytes.
    pub process_used_bytes: Option<u64>,
    /// Simulator ground truth.
    pub truth_scenario: String,
}

/// Events in `[since_ms, until_ms)`, newest first, duplicates collapsed (`oom_events`).
pub async fn fetch_events(
    client: &clickhouse::Client,
    db: &str,
    since_ms: i64,
    until_ms: i64,
) -> Result<Vec<EventLine>, ReportError> {
    let args = [ParamValue::Int(since_ms), ParamValue::Int(until_ms)];
    Ok(queries::builtin("oom_events")?.bind(client, db, &args)?.fetch_all::<EventLine>().await?)
}

/// `oomlens sql`: lists the built-in queries, or runs one with `name=value` (or positional)
/// arguments and prints TSV with a header line.
pub async fn run_sql_command(
    ch: &ChArgs,
    list: bool,
    name: Option<&str>,
    params: &[String],
) -> anyhow::Result<()> {
    if list || name.is_none() {
        for q in queries::all() {
            let ps: Vec<String> = q.params.iter().map(|p| format!("{}:{}", p.name, p.ty)).collect();
            println!(
                "{:<22} {}\n{:<22} params: {}",
                q.name,
                q.description,
                "",
                if ps.is_empty() { "-".to_owned() } else { ps.join(", ") }
            );
        }
        return Ok(());
    }
    let name = name.unwrap_or_default();
    let q = queries::builtin(name)?;
    // Accept `name=value` or bare values, in header order.
    let values: Vec<&str> = params.iter().map(|p| p.split_once('=').map_or(p.as_str(), |(_, v)| v)).collect();
    let args = q.parse_args(&values)?;
    let cfg = ch.clickhouse()?;
    let client = Ch::connect(&cfg).await?;
    let bytes = q
        .bind(client.client(), &cfg.database, &args)?
        .fetch_bytes("TSVWithNames")
        .context("cannot run the query")?
        .collect()
        .await
        .context("cannot read the answer")?;
    std::io::stdout().write_all(&bytes).context("cannot write the answer")?;
    Ok(())
}
