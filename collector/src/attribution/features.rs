//! The typed rows of the correlation queries (`oom_features`, `oom_neighbours`, `oom_attribution`)
//! and fetching them with bound parameters.
//!
//! The features are computed in ClickHouse (`collector/sql/oom_features.sql`, usable by hand and
//! in Grafana); this module only binds the window and decodes the rows. Field order and types
//! equal the query's columns (RowBinary is positional and, with schema validation off as 18.16
//! requires, unchecked): the integration test `attribution_sql` decodes every query on a real
//! server.

use serde::{Deserialize, Serialize};

use crate::queries::{self, ParamValue};

use super::AttributionError;

/// Default look-back before each failure: one minute of process samples.
pub const DEFAULT_WINDOW_MS: i64 = 60_000;

/// Which events to attribute and how far back to look before each one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureWindow {
    /// Events at or after this time (Unix epoch ms).
    pub since_ms: i64,
    /// Events before this time (Unix epoch ms).
    pub until_ms: i64,
    /// Process samples in `[ts − window_ms, ts]` before each event describe its curve and its
    /// neighbours.
    pub window_ms: i64,
}

impl FeatureWindow {
    /// Every event, with the default window.
    pub const ALL: FeatureWindow =
        FeatureWindow { since_ms: 0, until_ms: i64::MAX, window_ms: DEFAULT_WINDOW_MS };

    /// The positional arguments of `oom_features` / `oom_attribution` / `oom_neighbours` (without
    /// its `top_n`): the sample range, the event range (which GPUs / nodes to read), the window,
    /// the event range.
    pub fn args(&self) -> Vec<ParamValue> {
        vec![
            ParamValue::Int(self.since_ms.saturating_sub(self.window_ms.max(0))),
            ParamValue::Int(self.until_ms),
            ParamValue::Int(self.since_ms),
            ParamValue::Int(self.until_ms),
            ParamValue::Int(self.window_ms.max(0)),
            ParamValue::Int(self.since_ms),
            ParamValue::Int(self.until_ms),
        ]
    }
}

/// One row of `oom_features`: everything the rules look at for one OOM event.
#[derive(Debug, Clone, PartialEq, Default, clickhouse::Row, Serialize, Deserialize)]
pub struct OomFeatures {
    /// Cluster.
    pub cluster: String,
    /// Node.
    pub node: String,
    /// Event id.
    pub event_id: u64,
    /// Failure time, Unix epoch ms.
    pub ts_ms: i64,
    /// `cuda_oom`, `host_oom_kill`, `xid`, `suspected_oom`.
    pub kind: String,
    /// Detector.
    pub source: String,
    /// Framework.
    pub framework: String,
    /// Failing GPU (none for host OOM kills).
    pub gpu_index: Option<u32>,
    /// Failing process.
    pub pid: Option<u32>,
    /// Workload.
    pub workload: String,
    /// Simulator ground truth ('' for real events). Never read by the rules.
    pub truth_scenario: String,
    /// Phase as reported ('' or `unknown` when not).
    pub phase: String,
    /// The reported phase, else `startup` / `steady` inferred from the process's curve, else ''.
    pub phase_effective: String,
    /// `reported`, `inferred` or `unknown`.
    pub phase_source: String,
    /// Size of the failed allocation.
    pub requested_bytes: Option<u64>,
    /// GPU capacity.
    pub capacity_bytes: Option<u64>,
    /// Free GPU memory at the failure.
    pub free_bytes: Option<u64>,
    /// Allocated by the caching allocator.
    pub allocated_bytes: Option<u64>,
    /// Reserved by the caching allocator.
    pub reserved_bytes: Option<u64>,
    /// GPU memory of the failing process.
    pub process_used_bytes: Option<u64>,
    /// Xid number.
    pub xid: Option<u32>,
    /// Host RSS of a killed process.
    pub host_rss_bytes: Option<u64>,
    /// Parameter count.
    pub params: Option<u64>,
    /// Micro-batch.
    pub batch_size: Option<u32>,
    /// Sequence length.
    pub seq_len: Option<u32>,
    /// Hidden size.
    pub hidden: Option<u32>,
    /// Layers.
    pub layers: Option<u32>,
    /// Attention heads.
    pub heads: Option<u32>,
    /// Precision ('' when unknown).
    pub precision: String,
    /// Optimizer ('' when unknown or none).
    pub optimizer: String,
    /// ZeRO stage.
    pub zero_stage: Option<u8>,
    /// Tensor parallel degree.
    pub tensor_parallel: Option<u32>,
    /// Pipeline parallel degree.
    pub pipeline_parallel: Option<u32>,
    /// Data parallel degree.
    pub data_parallel: Option<u32>,
    /// Activation checkpointing (0/1).
    pub activation_checkpointing: Option<u8>,
    /// FlashAttention (0/1).
    pub flash_attention: Option<u8>,
    /// Without a pid: the failing process found in the message's process list (the largest one
    /// holding at least `reserved_bytes`), else 0.
    pub own_listed_bytes: u64,
    /// CUDA context and other non-allocator memory of the process: process used − reserved.
    pub context_bytes: Option<u64>,
    /// Cached by the allocator but not allocated: reserved − allocated.
    pub cached_free_bytes: Option<u64>,
    /// Where `need_alone_bytes` comes from: `allocator` (context + allocated + requested),
    /// `process` (its GPU memory in the message + requested), `samples` (its last sample +
    /// requested), or '' (not known).
    pub need_alone_from: String,
    /// What the process alone needed at the failure.
    pub need_alone_bytes: Option<u64>,
    /// Parameters held per GPU: params / (tensor parallel × pipeline parallel).
    pub params_per_gpu: Option<u64>,
    /// Bytes per parameter of weights (and of gradients) by precision.
    pub weight_bytes_per_param: Option<u8>,
    /// Bytes per parameter of optimizer state.
    pub optimizer_bytes_per_param: Option<u8>,
    /// The data-parallel degree ZeRO shards over.
    pub zero_divisor: u32,
    /// Weights + gradients + optimizer state on this GPU, from the job shape.
    pub static_estimate_bytes: Option<u64>,
    /// One layer's attention score matrix (2·batch·heads·seq², 0 with FlashAttention).
    pub attention_bytes: Option<u64>,
    /// Other processes listed in the OOM message (the failing process excluded).
    pub others_listed: u64,
    /// Their memory.
    pub others_listed_bytes: u64,
    /// Look-back window, ms.
    pub window_ms: i64,
    /// Distinct sample times of the failing process in the window.
    pub own_samples: u64,
    /// Its first sample time in the window (0 without samples).
    pub own_first_ts: i64,
    /// Its memory at that first sample.
    pub own_first_used: u64,
    /// Its floor in the window.
    pub own_min_used: u64,
    /// Its peak in the window.
    pub own_max_used: u64,
    /// Its last sample before the failure.
    pub own_last_used: u64,
    /// Peak − floor.
    pub own_swing_bytes: Option<u64>,
    /// Other processes seen on the GPU in the window.
    pub others_seen: u64,
    /// Their memory at their first sample in the window (those still present).
    pub others_first_bytes: u64,
    /// Their memory at the failure (those seen in the last 5 s).
    pub others_last_bytes: u64,
    /// Without a pid: the failing process's share of `others_last_bytes` (the largest present
    /// process holding at least `reserved_bytes`), else 0.
    pub own_sampled_bytes: u64,
    /// Their growth in the window (last − first, those still present).
    pub others_growth_bytes: i64,
    /// The largest growth of one of them.
    pub top_neighbour_growth_bytes: i64,
    /// Memory of the other processes at the failure: listed in the message, else sampled; None
    /// when neither source says.
    pub others_bytes: Option<u64>,
}

impl OomFeatures {
    /// True when the job shape is entirely missing (no params, batch or sequence length).
    pub fn no_shape(&self) -> bool {
        self.params.is_none() && self.batch_size.is_none() && self.seq_len.is_none()
    }

    /// True when the allocator's numbers are missing.
    pub fn no_allocator(&self) -> bool {
        self.allocated_bytes.is_none() || self.reserved_bytes.is_none()
    }

    /// True for events the GPU rules apply to (not host OOM kills, not Xid errors).
    pub fn gpu_event(&self) -> bool {
        !matches!(self.kind.as_str(), "host_oom_kill" | "xid")
    }
}

/// One row of `oom_attribution`: the SQL rule set's answer for one event.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct SqlAttribution {
    /// Cluster.
    pub cluster: String,
    /// Node.
    pub node: String,
    /// Event id.
    pub event_id: u64,
    /// Failure time.
    pub ts_ms: i64,
    /// Kind.
    pub kind: String,
    /// GPU.
    pub gpu_index: Option<u32>,
    /// PID.
    pub pid: Option<u32>,
    /// Workload.
    pub workload: String,
    /// Ground truth (simulator only).
    pub truth_scenario: String,
    /// Effective phase.
    pub phase_effective: String,
    /// Phase source.
    pub phase_source: String,
    /// 1 for GPU rules.
    pub gpu_rule: u8,
    /// 1 without job shape.
    pub no_shape: u8,
    /// 1 without process samples.
    pub no_samples: u8,
    /// 1 without allocator numbers.
    pub no_allocator: u8,
    /// 1 without phase.
    pub no_phase: u8,
    /// Context (0 when unknown).
    pub ctx_bytes: u64,
    /// 1 when the process alone needed more than the GPU.
    pub too_big_alone: u8,
    /// The rule that fired.
    pub rule: String,
    /// The scenario.
    pub scenario: String,
    /// Confidence, percent.
    pub confidence_pct: u8,
    /// What was missing.
    pub missing: Vec<String>,
}

/// One row of `oom_neighbours`: another process on the failing GPU (or node) in the window.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct Neighbour {
    /// Cluster.
    pub cluster: String,
    /// Node.
    pub node: String,
    /// The event.
    pub event_id: u64,
    /// Failure time.
    pub ts_ms: i64,
    /// Event kind.
    pub kind: String,
    /// The failing GPU.
    pub gpu_index: Option<u32>,
    /// The failing process.
    pub failed_pid: Option<u32>,
    /// The neighbour's GPU.
    pub neighbour_gpu: u32,
    /// The neighbour's pid.
    pub neighbour_pid: u32,
    /// Its workload.
    pub neighbour_workload: String,
    /// Its process name.
    pub neighbour_name: String,
    /// Distinct sample times in the window.
    pub samples: u64,
    /// First sample time.
    pub first_ts: i64,
    /// Last sample time.
    pub last_ts: i64,
    /// Memory at the first sample.
    pub first_used_bytes: u64,
    /// Memory at the last sample.
    pub last_used_bytes: u64,
    /// Peak.
    pub max_used_bytes: u64,
    /// Last − first.
    pub growth_bytes: i64,
    /// 1 when seen in the last 5 s before the failure.
    pub present: u8,
}

/// `oom_features` for the events of `window`, newest first.
pub async fn fetch_features(
    client: &clickhouse::Client,
    db: &str,
    window: &FeatureWindow,
) -> Result<Vec<OomFeatures>, AttributionError> {
    Ok(queries::builtin("oom_features")?.bind(client, db, &window.args())?.fetch_all::<OomFeatures>().await?)
}

/// `oom_attribution` (the rules in SQL) for the events of `window`, newest first.
pub async fn fetch_sql_attributions(
    client: &clickhouse::Client,
    db: &str,
    window: &FeatureWindow,
) -> Result<Vec<SqlAttribution>, AttributionError> {
    Ok(queries::builtin("oom_attribution")?
        .bind(client, db, &window.args())?
        .fetch_all::<SqlAttribution>()
        .await?)
}

/// `oom_neighbours`: at most `top_n` neighbours per event of `window`, ranked (present first, then
/// by growth), events newest first.
pub async fn fetch_neighbours(
    client: &clickhouse::Client,
    db: &str,
    window: &FeatureWindow,
    top_n: u32,
) -> Result<Vec<Neighbour>, AttributionError> {
    let mut args = window.args();
    args.push(ParamValue::UInt(u64::from(top_n)));
    Ok(queries::builtin("oom_neighbours")?.bind(client, db, &args)?.fetch_all::<Neighbour>().await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_args_follow_the_headers() {
        let w = FeatureWindow { since_ms: 1_000_000, until_ms: 2_000_000, window_ms: 60_000 };
        assert_eq!(
            w.args(),
            vec![
                ParamValue::Int(940_000),
                ParamValue::Int(2_000_000),
                ParamValue::Int(1_000_000),
                ParamValue::Int(2_000_000),
                ParamValue::Int(60_000),
                ParamValue::Int(1_000_000),
                ParamValue::Int(2_000_000)
            ]
        );
        for name in ["oom_features", "oom_attribution"] {
            let q = queries::get(name).expect(name);
            let names: Vec<&str> = q.params.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    "samples_since_ms",
                    "samples_until_ms",
                    "gpus_since_ms",
                    "gpus_until_ms",
                    "window_ms",
                    "since_ms",
                    "until_ms"
                ]
            );
            assert!(q.check_args(&w.args()).is_ok());
        }
        let q = queries::get("oom_neighbours").expect("oom_neighbours");
        let names: Vec<&str> = q.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "samples_since_ms",
                "samples_until_ms",
                "nodes_since_ms",
                "nodes_until_ms",
                "window_ms",
                "since_ms",
                "until_ms",
                "top_n"
            ]
        );
        // A negative window or an early `since` never panics.
        let w = FeatureWindow { since_ms: i64::MIN, until_ms: 0, window_ms: -5 };
        assert_eq!(w.args()[0], ParamValue::Int(i64::MIN));
        assert_eq!(w.args()[4], ParamValue::Int(0));
    }

    #[test]
    fn attribution_sql_embeds_the_feature_sql_verbatim() {
        let features = &queries::get("oom_features").expect("oom_features").sql;
        let attribution = &queries::get("oom_attribution").expect("oom_attribution").sql;
        assert!(
            attribution.contains(&format!("FROM\n(\n{features}\n)\nORDER BY")),
            "oom_attribution.sql must contain the body of oom_features.sql verbatim in its FROM clause"
        );
        // The rules read features only, never the ground truth.
        let rules = attribution.split("\nFROM\n(").next().unwrap_or_default();
        assert_eq!(rules.matches("truth_scenario").count(), 1, "truth_scenario is only passed through");
    }

    #[test]
    fn row_structs_list_the_query_columns_in_order() {
        // The SELECT list of each query, read from the SQL text, equals the Row struct's fields.
        fn select_columns(sql: &str) -> Vec<String> {
            let body = sql.split("\nFROM").next().unwrap_or_default();
            let body = body.trim_start().strip_prefix("SELECT").unwrap_or(body);
            let mut cols = Vec::new();
            let (mut depth, mut current) = (0i32, String::new());
            for c in body.chars() {
                match c {
                    '(' | '[' => depth += 1,
                    ')' | ']' => depth -= 1,
                    _ => {}
                }
                if c == ',' && depth == 0 {
                    cols.push(std::mem::take(&mut current));
                } else {
                    current.push(c);
                }
            }
            cols.push(current);
            cols.iter()
                .map(|c| {
                    let c = c.trim();
                    c.rsplit_once(" AS ").map_or(c, |(_, alias)| alias).trim().to_owned()
                })
                .collect()
        }
        let check = |name: &str, fields: &[&str]| {
            let q = queries::get(name).expect(name);
            assert_eq!(select_columns(&q.sql), fields, "{name}");
        };
        check("oom_features", <OomFeatures as clickhouse::Row>::COLUMN_NAMES);
        check("oom_attribution", <SqlAttribution as clickhouse::Row>::COLUMN_NAMES);
        check("oom_neighbours", <Neighbour as clickhouse::Row>::COLUMN_NAMES);
    }
}
