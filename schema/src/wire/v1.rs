//! Protocol version 1 (ALPN `oomlens/1`).
//!
//! Session: agent → [`Hello`], collector → [`Welcome`]; then agent → [`Batch`] frames, each
//! answered by an [`Ack`] once its rows are stored; either side may send [`ErrorReply`] before
//! closing. Every optional reading is `None` when the source could not read it — never zero.

use crate::scenario::Scenario;

/// Derives shared by every wire type.
macro_rules! wire_type {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($body:tt)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        #[rkyv(derive(Debug))]
        $vis struct $name { $($body)* }
    };
}

/// Derives shared by every wire enum (one byte, validated discriminant).
macro_rules! wire_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        #[rkyv(derive(Debug, PartialEq, Eq))]
        #[repr(u8)]
        $vis enum $name {
            #[default]
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every variant.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stable lower-case name stored in ClickHouse and printed in JSON.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses the name produced by [`Self::as_str`].
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == name)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_type! {
    /// One GPU (or MIG instance) of the node, as announced in [`Hello`].
    pub struct GpuInfo {
        /// NVML index (MIG instances get indices after the physical GPUs).
        pub index: u32,
        /// NVML UUID (`GPU-…` or `MIG-…`).
        pub uuid: String,
        /// Marketing name, e.g. `NVIDIA H200`.
        pub name: String,
        /// Total framebuffer memory in bytes.
        pub memory_total_bytes: u64,
        /// True for a MIG instance.
        pub mig: bool,
    }
}

wire_type! {
    /// First frame of a session, agent → collector.
    pub struct Hello {
        /// Stable id of the agent installation (survives restarts).
        pub agent_id: String,
        /// Node name the agent believes it runs on (the certificate's identity wins).
        pub node: String,
        /// Cluster name from the agent's configuration.
        pub cluster: String,
        /// Identifies one sequence space: batch sequence numbers start at 1 under each boot id.
        pub boot_id: u64,
        /// Agent version string.
        pub agent_version: String,
        /// GPU inventory.
        pub gpus: Vec<GpuInfo>,
    }
}

wire_type! {
    /// Collector → agent reply to [`Hello`].
    pub struct Welcome {
        /// Identifies the collector instance (for logs).
        pub collector_id: String,
        /// Highest sequence number already stored for this agent and boot id (0: none).
        pub last_acked_seq: u64,
    }
}

wire_type! {
    /// Collector → agent: batch `seq` is stored; the agent may forget it.
    pub struct Ack {
        /// Sequence number of the stored batch.
        pub seq: u64,
    }
}

wire_type! {
    /// Either side: why the connection is about to be closed.
    pub struct ErrorReply {
        /// Machine-readable reason, see [`ErrorCode`].
        pub code: u16,
        /// Human-readable detail.
        pub message: String,
    }
}

/// Reasons carried by [`ErrorReply::code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    /// The frame could not be decoded or validated.
    BadFrame = 1,
    /// The frame was valid but not allowed at this point of the session.
    ProtocolViolation = 2,
    /// The peer is not authorised (identity, cluster allow-list).
    Unauthorized = 3,
    /// The collector is shutting down; reconnect elsewhere or later.
    ShuttingDown = 4,
    /// The collector cannot store data right now.
    Unavailable = 5,
}

wire_type! {
    /// A `key=value` workload label (pod, namespace, container, Slurm job, user, …).
    pub struct Label {
        /// Label key, e.g. `k8s.pod`.
        pub key: String,
        /// Label value.
        pub value: String,
    }
}

wire_type! {
    /// One reading of one GPU.
    pub struct GpuSample {
        /// Unix epoch milliseconds (UTC).
        pub ts_ms: i64,
        /// GPU (or MIG instance) index.
        pub gpu_index: u32,
        /// Used framebuffer bytes.
        pub memory_used_bytes: Option<u64>,
        /// Free framebuffer bytes.
        pub memory_free_bytes: Option<u64>,
        /// Total framebuffer bytes.
        pub memory_total_bytes: Option<u64>,
        /// Bytes reserved by the driver (NVML memory info v2).
        pub memory_reserved_bytes: Option<u64>,
        /// SM utilisation, percent.
        pub util_gpu_pct: Option<u8>,
        /// Memory-controller utilisation, percent.
        pub util_mem_pct: Option<u8>,
        /// Power draw, milliwatts.
        pub power_mw: Option<u32>,
        /// Temperature, degrees Celsius.
        pub temperature_c: Option<i16>,
        /// SM clock, MHz.
        pub sm_clock_mhz: Option<u32>,
        /// Memory clock, MHz.
        pub mem_clock_mhz: Option<u32>,
    }
}

wire_type! {
    /// One reading of one process's memory on one GPU.
    pub struct ProcessSample {
        /// Unix epoch milliseconds (UTC).
        pub ts_ms: i64,
        /// GPU (or MIG instance) index.
        pub gpu_index: u32,
        /// Host PID.
        pub pid: u32,
        /// Process name (comm or argv\[0\]).
        pub name: String,
        /// GPU memory used by the process, bytes.
        pub used_bytes: Option<u64>,
        /// Workload labels (pod, container, Slurm job, user, …).
        pub labels: Vec<Label>,
    }
}

wire_enum! {
    /// What kind of failure an [`OomEvent`] records.
    pub enum OomKind {
        /// A CUDA out-of-memory error reported by a framework or the runtime.
        CudaOom => "cuda_oom",
        /// The Linux OOM killer ended a process (host RAM).
        HostOomKill => "host_oom_kill",
        /// An NVIDIA Xid error from the kernel log.
        Xid => "xid",
        /// A process vanished while its GPU was nearly full.
        SuspectedOom => "suspected_oom",
    }
}

wire_enum! {
    /// Which detector saw an [`OomEvent`].
    pub enum EventSource {
        /// A job's log file.
        Log => "log",
        /// The hook socket (the job reported itself).
        Hook => "hook",
        /// The kernel log (`/dev/kmsg`).
        Kmsg => "kmsg",
        /// NVML process tracking.
        Nvml => "nvml",
        /// The fleet simulator.
        Simulator => "simulator",
    }
}

wire_enum! {
    /// Where in the job's life the failure happened.
    pub enum Phase {
        /// Not known.
        Unknown => "unknown",
        /// Loading the model onto the GPU.
        Load => "load",
        /// Allocating optimizer state.
        OptimizerInit => "optimizer_init",
        /// Forward pass.
        Forward => "forward",
        /// Backward pass.
        Backward => "backward",
        /// Optimizer step.
        OptimizerStep => "optimizer_step",
        /// Evaluation / validation pass (e.g. `evaluation_loop`, `validation_step`).
        Eval => "eval",
        /// Inference serving.
        Inference => "inference",
        /// Host-side data loading.
        DataLoading => "data_loading",
    }
}

wire_type! {
    /// Another process's memory on the failing GPU at the time of the failure.
    pub struct OtherProcess {
        /// Host PID.
        pub pid: u32,
        /// GPU memory it used, bytes.
        pub used_bytes: u64,
    }
}

wire_type! {
    /// The job's shape, when the job (hook) or the simulator says it. Every field optional.
    pub struct JobShape {
        /// Parameter count.
        pub params: Option<u64>,
        /// Micro-batch size.
        pub batch: Option<u32>,
        /// Sequence length.
        pub seq_len: Option<u32>,
        /// Hidden size.
        pub hidden: Option<u32>,
        /// Number of layers.
        pub layers: Option<u32>,
        /// Attention heads.
        pub heads: Option<u32>,
        /// `fp32`, `fp16`, `bf16`, `fp8`, …
        pub precision: Option<String>,
        /// `adam`, `adamw`, `sgd`, …
        pub optimizer: Option<String>,
        /// DeepSpeed ZeRO stage (0–3).
        pub zero_stage: Option<u8>,
        /// Tensor-parallel degree.
        pub tensor_parallel: Option<u32>,
        /// Pipeline-parallel degree.
        pub pipeline_parallel: Option<u32>,
        /// Data-parallel degree.
        pub data_parallel: Option<u32>,
        /// Activation checkpointing on.
        pub activation_checkpointing: Option<bool>,
        /// FlashAttention (or another memory-efficient attention) on.
        pub flash_attention: Option<bool>,
    }
}

wire_type! {
    /// One failure: a CUDA OOM, a host OOM kill, an Xid, or a suspected OOM.
    pub struct OomEvent {
        /// Random 64-bit id chosen by the agent; re-sends carry the same id.
        pub event_id: u64,
        /// Unix epoch milliseconds (UTC) of the failure.
        pub ts_ms: i64,
        /// What happened.
        pub kind: OomKind,
        /// Which detector saw it.
        pub source: EventSource,
        /// `pytorch`, `tensorflow`, `jax`, `cuda`, `nccl`, `cublas`, `cudnn`, `kernel`, …
        pub framework: String,
        /// Failing GPU, when known.
        pub gpu_index: Option<u32>,
        /// Failing process, when known.
        pub pid: Option<u32>,
        /// Size of the allocation that failed.
        pub requested_bytes: Option<u64>,
        /// GPU capacity as the framework saw it.
        pub capacity_bytes: Option<u64>,
        /// Free GPU memory at the failure.
        pub free_bytes: Option<u64>,
        /// Bytes allocated by the framework's caching allocator.
        pub allocated_bytes: Option<u64>,
        /// Bytes reserved by the caching allocator (allocated + cached).
        pub reserved_bytes: Option<u64>,
        /// GPU memory of the failing process including non-framework memory.
        pub process_used_bytes: Option<u64>,
        /// Other processes on the GPU and their memory.
        pub other_processes: Vec<OtherProcess>,
        /// Phase of the job.
        pub phase: Phase,
        /// Job shape, when known.
        pub job: JobShape,
        /// Xid number for `kind == xid`.
        pub xid: Option<u32>,
        /// Host RSS of the killed process for `kind == host_oom_kill`.
        pub host_rss_bytes: Option<u64>,
        /// Workload labels of the failing process.
        pub labels: Vec<Label>,
        /// Ground-truth scenario: set only by the simulator, for accuracy measurement.
        pub truth: Option<Scenario>,
        /// The message as printed (possibly several lines).
        pub raw_message: String,
    }
}

wire_type! {
    /// Agent → collector: readings and events since the previous batch.
    pub struct Batch {
        /// Sequence number, strictly increasing from 1 under one boot id.
        pub seq: u64,
        /// GPU readings.
        pub gpu_samples: Vec<GpuSample>,
        /// Per-process readings.
        pub process_samples: Vec<ProcessSample>,
        /// OOM events (CUDA OOMs, host OOM kills, Xids, suspected OOMs).
        pub events: Vec<OomEvent>,
    }
}

impl Batch {
    /// Number of rows this batch puts into ClickHouse.
    pub fn row_count(&self) -> usize {
        self.gpu_samples.len() + self.process_samples.len() + self.events.len()
    }

    /// True when the batch carries nothing.
    pub fn is_empty(&self) -> bool {
        self.row_count() == 0
    }
}
