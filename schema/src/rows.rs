//! The ClickHouse row structs the collector inserts, and the column definitions derived from them.
//!
//! Each table is declared once with [`row_table!`]: the macro generates the `clickhouse::Row`
//! struct *and* its column list, with each column's ClickHouse type derived from the Rust field
//! type ([`ChType`]). The DDL ([`crate::ddl`]) and the start-up check against `DESCRIBE TABLE` both
//! use that list, so a Row struct and its table cannot silently disagree (with schema validation
//! off, as 18.16 requires, a mismatch would otherwise decode to garbage).

use serde::{Deserialize, Serialize};

/// Maps a Rust field type to the ClickHouse type it is written as in RowBinary.
pub trait ChType {
    /// The ClickHouse type name, e.g. `Nullable(UInt64)`.
    fn ch_type() -> String;
}

macro_rules! ch_type {
    ($($t:ty => $name:literal),* $(,)?) => {
        $(impl ChType for $t { fn ch_type() -> String { $name.to_owned() } })*
    };
}

ch_type! {
    String => "String", u8 => "UInt8", u16 => "UInt16", u32 => "UInt32", u64 => "UInt64",
    i8 => "Int8", i16 => "Int16", i32 => "Int32", i64 => "Int64", f32 => "Float32", f64 => "Float64",
}

impl<T: ChType> ChType for Option<T> {
    fn ch_type() -> String {
        format!("Nullable({})", T::ch_type())
    }
}

impl<T: ChType> ChType for Vec<T> {
    fn ch_type() -> String {
        format!("Array({})", T::ch_type())
    }
}

/// How a column is stored, beyond its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// Default storage.
    Plain,
    /// `LowCardinality` where the server supports it (a `String` column).
    LowCardinality,
    /// A compression codec where the server supports codecs.
    Codec(&'static str),
}

/// One column of a table.
#[derive(Debug, Clone)]
pub struct ColumnDef {
    /// Column name (equal to the Row struct's field name).
    pub name: &'static str,
    /// ClickHouse type of the Rust field, without `LowCardinality`.
    pub ch_type: String,
    /// Storage extras.
    pub storage: Storage,
}

/// A Row struct that knows its table and columns.
pub trait TableRow: clickhouse::Row + Serialize {
    /// Table name (without database).
    const TABLE: &'static str;
    /// The columns, in field order.
    fn columns() -> Vec<ColumnDef>;
}

macro_rules! row_table {
    (
        $(#[$meta:meta])*
        pub struct $row:ident in $table:literal {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty => $storage:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Default, clickhouse::Row, Serialize, Deserialize)]
        pub struct $row {
            $( $(#[$fmeta])* pub $field: $ty ),*
        }

        impl TableRow for $row {
            const TABLE: &'static str = $table;

            fn columns() -> Vec<ColumnDef> {
                #[allow(unused_imports)]
                use Storage::*;
                vec![$( ColumnDef { name: stringify!($field), ch_type: <$ty as ChType>::ch_type(), storage: $storage } ),*]
            }
        }
    };
}

const TS: Storage = Storage::Codec("Delta, ZSTD(1)");
const ZSTD: Storage = Storage::Codec("ZSTD(1)");
const TEXT: Storage = Storage::Codec("ZSTD(3)");

row_table! {
    /// One GPU reading (table `gpu_samples`).
    pub struct GpuSampleRow in "gpu_samples" {
        /// Cluster (from the certificate or, if it names none, the agent's Hello).
        pub cluster: String => LowCardinality,
        /// Node (from the agent's certificate).
        pub node: String => LowCardinality,
        /// GPU index.
        pub gpu_index: u32 => Plain,
        /// Unix epoch ms.
        pub ts_ms: i64 => TS,
        /// Agent id.
        pub agent_id: String => LowCardinality,
        /// Used bytes.
        pub memory_used_bytes: Option<u64> => ZSTD,
        /// Free bytes.
        pub memory_free_bytes: Option<u64> => ZSTD,
        /// Total bytes.
        pub memory_total_bytes: Option<u64> => ZSTD,
        /// Driver-reserved bytes.
        pub memory_reserved_bytes: Option<u64> => ZSTD,
        /// SM utilisation %.
        pub util_gpu_pct: Option<u8> => ZSTD,
        /// Memory utilisation %.
        pub util_mem_pct: Option<u8> => ZSTD,
        /// Power, mW.
        pub power_mw: Option<u32> => ZSTD,
        /// Temperature, °C.
        pub temperature_c: Option<i16> => ZSTD,
        /// SM clock, MHz.
        pub sm_clock_mhz: Option<u32> => ZSTD,
        /// Memory clock, MHz.
        pub mem_clock_mhz: Option<u32> => ZSTD,
    }
}

row_table! {
    /// One process reading (table `process_samples`).
    pub struct ProcessSampleRow in "process_samples" {
        /// Cluster (from the certificate or, if it names none, the agent's Hello).
        pub cluster: String => LowCardinality,
        /// Node (from the agent's certificate).
        pub node: String => LowCardinality,
        /// GPU index.
        pub gpu_index: u32 => Plain,
        /// Unix epoch ms.
        pub ts_ms: i64 => TS,
        /// Host PID.
        pub pid: u32 => Plain,
        /// Agent id.
        pub agent_id: String => LowCardinality,
        /// Process name.
        pub process_name: String => LowCardinality,
        /// GPU memory used by the process.
        pub used_bytes: Option<u64> => ZSTD,
        /// Workload name summarised from the labels (pod, Slurm job, …; '' when unknown).
        pub workload: String => LowCardinality,
        /// Label keys (parallel to `label_values`).
        pub label_keys: Vec<String> => ZSTD,
        /// Label values.
        pub label_values: Vec<String> => ZSTD,
    }
}

row_table! {
    /// One failure (table `oom_events`, a ReplacingMergeTree keyed by event id).
    pub struct OomEventRow in "oom_events" {
        /// Cluster (from the certificate or, if it names none, the agent's Hello).
        pub cluster: String => LowCardinality,
        /// Node (from the agent's certificate).
        pub node: String => LowCardinality,
        /// Unix epoch ms of the failure.
        pub ts_ms: i64 => TS,
        /// Event id (agent-chosen, stable across re-sends).
        pub event_id: u64 => Plain,
        /// Agent id.
        pub agent_id: String => LowCardinality,
        /// When the collector stored it, Unix epoch ms.
        pub received_ms: i64 => TS,
        /// `cuda_oom`, `host_oom_kill`, `xid`, `suspected_oom`.
        pub kind: String => LowCardinality,
        /// `log`, `hook`, `kmsg`, `nvml`, `simulator`.
        pub source: String => LowCardinality,
        /// Framework that printed the message (`pytorch`, `cuda`, `nccl`, `kernel`, …).
        pub framework: String => LowCardinality,
        /// GPU index.
        pub gpu_index: Option<u32> => Plain,
        /// Failing PID.
        pub pid: Option<u32> => Plain,
        /// Requested bytes.
        pub requested_bytes: Option<u64> => Plain,
        /// Capacity bytes.
        pub capacity_bytes: Option<u64> => Plain,
        /// Free bytes.
        pub free_bytes: Option<u64> => Plain,
        /// Allocated bytes.
        pub allocated_bytes: Option<u64> => Plain,
        /// Reserved bytes.
        pub reserved_bytes: Option<u64> => Plain,
        /// Process used bytes.
        pub process_used_bytes: Option<u64> => Plain,
        /// PIDs of other processes on the GPU.
        pub other_pids: Vec<u32> => Plain,
        /// Their used bytes (parallel to `other_pids`).
        pub other_used_bytes: Vec<u64> => Plain,
        /// Phase of the job at the failure (`forward`, `backward`, …, `unknown`).
        pub phase: String => LowCardinality,
        /// Parameter count.
        pub params: Option<u64> => Plain,
        /// Micro-batch size (samples per GPU per step).
        pub batch_size: Option<u32> => Plain,
        /// Sequence length.
        pub seq_len: Option<u32> => Plain,
        /// Hidden size.
        pub hidden: Option<u32> => Plain,
        /// Number of layers.
        pub layers: Option<u32> => Plain,
        /// Attention heads.
        pub heads: Option<u32> => Plain,
        /// Precision ('' when unknown).
        pub precision: String => LowCardinality,
        /// Optimizer ('' when unknown).
        pub optimizer: String => LowCardinality,
        /// ZeRO stage.
        pub zero_stage: Option<u8> => Plain,
        /// Tensor parallel degree.
        pub tensor_parallel: Option<u32> => Plain,
        /// Pipeline parallel degree.
        pub pipeline_parallel: Option<u32> => Plain,
        /// Data parallel degree.
        pub data_parallel: Option<u32> => Plain,
        /// Activation checkpointing (0/1).
        pub activation_checkpointing: Option<u8> => Plain,
        /// Flash attention (0/1).
        pub flash_attention: Option<u8> => Plain,
        /// Xid number.
        pub xid: Option<u32> => Plain,
        /// Host RSS of a killed process.
        pub host_rss_bytes: Option<u64> => Plain,
        /// Workload summary.
        pub workload: String => LowCardinality,
        /// Label keys.
        pub label_keys: Vec<String> => Plain,
        /// Label values.
        pub label_values: Vec<String> => Plain,
        /// Simulator ground truth ('' for real events).
        pub truth_scenario: String => LowCardinality,
        /// The message as printed.
        pub raw_message: String => TEXT,
    }
}

row_table! {
    /// One agent session's state (table `agents`, a ReplacingMergeTree keyed by agent + boot).
    pub struct AgentRow in "agents" {
        /// Cluster (from the certificate or, if it names none, the agent's Hello).
        pub cluster: String => LowCardinality,
        /// Node (from the agent's certificate).
        pub node: String => LowCardinality,
        /// Agent id.
        pub agent_id: String => Plain,
        /// Boot id (sequence space).
        pub boot_id: u64 => Plain,
        /// Last seen, Unix epoch ms.
        pub ts_ms: i64 => Plain,
        /// Highest stored batch sequence number.
        pub last_seq: u64 => Plain,
        /// Agent version.
        pub agent_version: String => LowCardinality,
        /// Collector that stored it.
        pub collector_id: String => LowCardinality,
        /// GPU indices.
        pub gpu_indices: Vec<u32> => Plain,
        /// GPU UUIDs.
        pub gpu_uuids: Vec<String> => Plain,
        /// GPU names.
        pub gpu_names: Vec<String> => Plain,
        /// GPU memory totals.
        pub gpu_memory_total_bytes: Vec<u64> => Plain,
        /// MIG flags (0/1).
        pub gpu_mig: Vec<u8> => Plain,
    }
}

row_table! {
    /// The stored attribution of one OOM event (table `oom_attributions`, a ReplacingMergeTree
    /// keyed by event and versioned by `attributed_ms`), written by the collector's attributor:
    /// the event's evidence (the `oom_features` row, from `cluster` to
    /// `top_neighbour_growth_bytes`, field for field the collector's `EventEvidence`, so the
    /// features and rules can be re-derived on read), the main derived features (for SQL and
    /// Grafana), the rules' answer at store time with its alternatives, and the event's
    /// top-ranked neighbours (parallel arrays).
    pub struct OomAttributionRow in "oom_attributions" {
        /// Cluster (from the certificate or, if it names none, the agent's Hello).
        pub cluster: String => LowCardinality,
        /// Node (from the agent's certificate).
        pub node: String => LowCardinality,
        /// Event id.
        pub event_id: u64 => Plain,
        /// Failure time, Unix epoch ms.
        pub ts_ms: i64 => TS,
        /// Event kind.
        pub kind: String => LowCardinality,
        /// Detector that saw it (`log`, `hook`, `kmsg`, `nvml`, `simulator`).
        pub source: String => LowCardinality,
        /// Framework that printed the message (`pytorch`, `cuda`, `nccl`, `kernel`, …).
        pub framework: String => LowCardinality,
        /// Failing GPU.
        pub gpu_index: Option<u32> => Plain,
        /// Failing process.
        pub pid: Option<u32> => Plain,
        /// Workload of the failing process ('' when unknown).
        pub workload: String => LowCardinality,
        /// Simulator ground truth ('' for real events).
        pub truth_scenario: String => LowCardinality,
        /// Phase as the event carries it.
        pub phase: String => LowCardinality,
        /// `traceback` when the agent read the phase from the log ('' when reported).
        pub phase_label: String => LowCardinality,
        /// What the phase was read from.
        pub phase_clue: String => Plain,
        /// Host-memory evidence of a log-detected host OOM.
        pub host_evidence: String => LowCardinality,
        /// The message's own kind (`kv_cache`, `cache_blocks`, …).
        pub message_hint: String => LowCardinality,
        /// `nvml` when the capacity is the GPU's NVML total.
        pub capacity_source: String => LowCardinality,
        /// Hook v2 allocator summary: free bytes inside the allocator's segments.
        pub alloc_cached_free_bytes: Option<u64> => Plain,
        /// Hook v2 allocator summary: the largest free block.
        pub alloc_largest_free_bytes: Option<u64> => Plain,
        /// Hook v2 allocator summary: live bytes at sites of weights and optimizer state.
        pub alloc_static_bytes: Option<u64> => Plain,
        /// Hook v2 allocator summary: live bytes at sites of activations.
        pub alloc_activation_bytes: Option<u64> => Plain,
        /// Hook v2 allocator summary: the top sites, `bytes|blocks|phase|function|file:line`.
        pub alloc_sites: Vec<String> => ZSTD,
        /// Size of the failed allocation.
        pub requested_bytes: Option<u64> => Plain,
        /// The limit the allocation failed against.
        pub capacity_bytes: Option<u64> => Plain,
        /// Free GPU memory at the failure.
        pub free_bytes: Option<u64> => Plain,
        /// Allocated by the allocator.
        pub allocated_bytes: Option<u64> => Plain,
        /// Reserved by the caching allocator.
        pub reserved_bytes: Option<u64> => Plain,
        /// GPU memory of the failing process.
        pub process_used_bytes: Option<u64> => Plain,
        /// PIDs of the other processes the message lists.
        pub other_pids: Vec<u32> => Plain,
        /// Their memory (parallel to `other_pids`).
        pub other_used_bytes: Vec<u64> => Plain,
        /// Xid number.
        pub xid: Option<u32> => Plain,
        /// Host RSS of a killed process.
        pub host_rss_bytes: Option<u64> => Plain,
        /// Parameter count.
        pub params: Option<u64> => Plain,
        /// Micro-batch size (samples per GPU per step).
        pub batch_size: Option<u32> => Plain,
        /// Sequence length.
        pub seq_len: Option<u32> => Plain,
        /// Hidden size.
        pub hidden: Option<u32> => Plain,
        /// Number of layers.
        pub layers: Option<u32> => Plain,
        /// Attention heads.
        pub heads: Option<u32> => Plain,
        /// Precision (`fp32`, `fp16`, `bf16`, …; '' when unknown).
        pub precision: String => LowCardinality,
        /// Optimizer (`adam`, `adamw`, `sgd`, …; '' when unknown).
        pub optimizer: String => LowCardinality,
        /// ZeRO stage.
        pub zero_stage: Option<u8> => Plain,
        /// Tensor parallel degree.
        pub tensor_parallel: Option<u32> => Plain,
        /// Pipeline parallel degree.
        pub pipeline_parallel: Option<u32> => Plain,
        /// Data parallel degree.
        pub data_parallel: Option<u32> => Plain,
        /// Activation checkpointing (0/1).
        pub activation_checkpointing: Option<u8> => Plain,
        /// FlashAttention (0/1).
        pub flash_attention: Option<u8> => Plain,
        /// Look-back window the evidence was computed with, ms.
        pub window_ms: i64 => Plain,
        /// Distinct sample times of the failing process in the window.
        pub own_samples: u64 => Plain,
        /// Its first sample time in the window.
        pub own_first_ts: i64 => Plain,
        /// Its memory at that first sample.
        pub own_first_used: u64 => Plain,
        /// Its floor in the window.
        pub own_min_used: u64 => Plain,
        /// Its peak in the window.
        pub own_max_used: u64 => Plain,
        /// Its last sample before the failure.
        pub own_last_used: u64 => Plain,
        /// Its largest rise between two consecutive samples in the window.
        pub own_max_rise: Option<u64> => Plain,
        /// Other processes seen on the GPU in the window.
        pub others_seen: u64 => Plain,
        /// Their memory at their first sample.
        pub others_first_bytes: u64 => Plain,
        /// Their memory at the failure.
        pub others_last_bytes: u64 => Plain,
        /// Without a pid: the failing process's share of `others_last_bytes`.
        pub own_sampled_bytes: u64 => Plain,
        /// Their growth in the window.
        pub others_growth_bytes: i64 => Plain,
        /// The largest growth of one of them.
        pub top_neighbour_growth_bytes: i64 => Plain,
        /// Reported, read or inferred phase.
        pub phase_effective: String => LowCardinality,
        /// `reported`, `traceback`, `inferred` or `unknown`.
        pub phase_source: String => LowCardinality,
        /// The process's own memory outside its allocator (process used − reserved).
        pub context_bytes: Option<u64> => Plain,
        /// Reserved − allocated.
        pub cached_free_bytes: Option<u64> => Plain,
        /// Capacity − free − reserved.
        pub outside_bytes: Option<u64> => Plain,
        /// Memory of the other processes at the failure.
        pub others_bytes: Option<u64> => Plain,
        /// Where `others_bytes` comes from.
        pub others_from: String => LowCardinality,
        /// What the process alone needed at the failure.
        pub need_alone_bytes: Option<u64> => Plain,
        /// Source of `need_alone_bytes`.
        pub need_alone_from: String => LowCardinality,
        /// Static estimate from the job shape.
        pub static_estimate_bytes: Option<u64> => Plain,
        /// One layer's attention score matrix.
        pub attention_bytes: Option<u64> => Plain,
        /// The rules' scenario at store time.
        pub scenario: String => LowCardinality,
        /// The rule that fired at store time.
        pub rule: String => LowCardinality,
        /// Confidence at store time, percent.
        pub confidence_pct: u8 => Plain,
        /// The other scenarios left open, most likely first.
        pub alternative_scenarios: Vec<String> => Plain,
        /// Their probabilities, percent (parallel to `alternative_scenarios`).
        pub alternative_confidence_pct: Vec<u8> => Plain,
        /// Version of the rule set that produced the answer.
        pub rules_version: u32 => Plain,
        /// When the attributor stored this row, Unix epoch ms (the ReplacingMergeTree version).
        pub attributed_ms: i64 => Plain,
        /// Top-ranked neighbours' workloads (parallel arrays, best first).
        pub neighbour_workloads: Vec<String> => Plain,
        /// Their pids.
        pub neighbour_pids: Vec<u32> => Plain,
        /// Their GPU memory at their last sample before the failure.
        pub neighbour_used_bytes: Vec<u64> => Plain,
        /// Their growth in the window (last − first sample).
        pub neighbour_growth_bytes: Vec<i64> => Plain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_fields<R: TableRow>() {
        let names: Vec<&str> = R::columns().iter().map(|c| c.name).collect();
        assert_eq!(names, <R as clickhouse::Row>::COLUMN_NAMES, "{}", R::TABLE);
    }

    #[test]
    fn column_lists_match_row_structs() {
        same_fields::<GpuSampleRow>();
        same_fields::<ProcessSampleRow>();
        same_fields::<OomEventRow>();
        same_fields::<AgentRow>();
        same_fields::<OomAttributionRow>();
    }

    #[test]
    fn types_derive_from_rust() {
        assert_eq!(<Option<u64>>::ch_type(), "Nullable(UInt64)");
        assert_eq!(<Vec<String>>::ch_type(), "Array(String)");
    }
}
