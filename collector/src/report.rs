//! Running the built-in queries ([`crate::queries`]) and rendering their answers for people:
//! `oomlens sql` and the demo's closing report.

use std::io::Write;

use anyhow::Context as _;
use serde::Deserialize;

use crate::cli::ChArgs;
use crate::clickhouse::Ch;
use crate::demo::DemoOutcome;
use crate::queries::{self, ParamValue, QueryError};

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
    /// Cluster.
    pub cluster: String,
    /// Node.
    pub node: String,
    /// GPU.
    pub gpu_index: Option<u32>,
    /// PID.
    pub pid: Option<u32>,
    /// Workload.
    pub workload: String,
    /// Kind.
    pub kind: String,
    /// Source.
    pub source: String,
    /// Framework.
    pub framework: String,
    /// Phase.
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

/// Bytes as `12.34 GiB`.
pub fn human_bytes(v: Option<u64>) -> String {
    let Some(v) = v else { return "-".to_owned() };
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v as f64;
    let mut unit = 0;
    while x >= 1024.0 && unit < UNITS.len() - 1 {
        x /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{v} B") } else { format!("{x:.2} {}", UNITS[unit]) }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Prints the demo's closing report.
pub fn print_demo_outcome(o: &DemoOutcome, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "Rows in ClickHouse (sent by the agents):")?;
    for (table, rows) in &o.table_counts {
        let sent = match table.as_str() {
            "gpu_samples" => Some(o.sent.gpu_samples),
            "process_samples" => Some(o.sent.process_samples),
            "oom_events" => Some(o.sent.events),
            _ => None,
        };
        let check = match sent {
            Some(s) if s == *rows => format!("(sent {s}) ✓"),
            Some(s) => format!("(sent {s}) MISMATCH"),
            None => String::new(),
        };
        writeln!(out, "  {table:<16} {rows:>10}  {check}")?;
    }
    writeln!(out)?;
    writeln!(out, "{} OOM events:", o.events.len())?;
    writeln!(
        out,
        "  {:<12} {:>3} {:<30} {:<14} {:<10} {:>11} {:>11}  scenario (ground truth)  attributed (confidence)",
        "node", "gpu", "job", "kind", "framework", "requested", "capacity"
    )?;
    let attributed: std::collections::HashMap<(&str, &str, u64), &crate::attribution::Attribution> = o
        .attributions
        .iter()
        .map(|a| {
            ((a.features.cluster.as_str(), a.features.node.as_str(), a.features.event_id), &a.attribution)
        })
        .collect();
    let mut events = o.events.clone();
    events.sort_by(|a, b| (a.ts_ms, &a.node, a.gpu_index).cmp(&(b.ts_ms, &b.node, b.gpu_index)));
    for e in &events {
        let truth = if e.truth_scenario.is_empty() { "-" } else { &e.truth_scenario };
        let rules = attributed.get(&(e.cluster.as_str(), e.node.as_str(), e.event_id)).map_or_else(
            || "-".to_owned(),
            |a| {
                let mark = if a.scenario.as_str() == truth { "" } else { "  ✗" };
                format!("{} ({} %){mark}", a.scenario, a.confidence_pct)
            },
        );
        writeln!(
            out,
            "  {:<12} {:>3} {:<30} {:<14} {:<10} {:>11} {:>11}  {:<23} {}",
            e.node,
            opt(e.gpu_index),
            oomlens_schema::text::ellipsize(&e.workload, 30),
            e.kind,
            e.framework,
            human_bytes(e.requested_bytes),
            human_bytes(e.capacity_bytes),
            truth,
            rules
        )?;
    }
    let mut by: std::collections::BTreeMap<&str, usize> = Default::default();
    for e in &o.events {
        *by.entry(if e.truth_scenario.is_empty() { "-" } else { e.truth_scenario.as_str() }).or_default() +=
            1;
    }
    writeln!(out)?;
    writeln!(
        out,
        "By scenario: {}",
        by.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    )?;
    let matrix = crate::attribution::ConfusionMatrix::from_events(&o.attributions);
    if matrix.total() > 0 {
        writeln!(out)?;
        writeln!(out, "Attribution (oom_features + the rule set of docs/attribution.md) vs ground truth:")?;
        write!(out, "{matrix}")?;
    }
    writeln!(out, "Done in {:.1} s.", o.elapsed.as_secs_f64())?;
    Ok(())
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
