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
        /// Cluster.
        pub cluster: String => LowCardinality,
        /// Node.
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
        /// Cluster.
        pub cluster: String => LowCardinality,
        /// Node.
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
        /// Framework.
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
        /// Phase.
        pub phase: String => LowCardinality,
        /// Parameter count.
        pub params: Option<u64> => Plain,
        /// Micro-batch.
        pub batch_size: Option<u32> => Plain,
        /// Sequence length.
        pub seq_len: Option<u32> => Plain,
        /// Hidden size.
        pub hidden: Option<u32> => Plain,
        /// Layers.
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
        /// Cluster.
        pub cluster: String => LowCardinality,
        /// Node.
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
    }

    #[test]
    fn types_derive_from_rust() {
        assert_eq!(<Option<u64>>::ch_type(), "Nullable(UInt64)");
        assert_eq!(<Vec<String>>::ch_type(), "Array(String)");
    }
}
