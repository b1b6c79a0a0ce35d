//! What the rules look at: the evidence of one OOM event and the features derived from it.
//!
//! * [`EventEvidence`] — what is known about one event: its stored fields (the message's numbers,
//!   the job shape, the phase and where it came from, the host-memory evidence) and, in the
//!   pipeline, the failing process's and its neighbours' samples in the look-back window. In
//!   ClickHouse it is one row of `collector/sql/oom_features.sql` ([`fetch_evidence`]); offline
//!   (`oomlens explain`) it is built from a parsed message ([`EventEvidence::from_event`]), with
//!   no samples.
//! * [`OomFeatures`] — the evidence plus every derived quantity ([`OomFeatures::derive`], the only
//!   place they are computed, so the pipeline and `explain` agree): memory outside the allocator
//!   and whose it is, the cached-but-free memory, what the process alone needed, the static
//!   estimate, the inferred phase. `docs/attribution.md` defines each one.
//!
//! RowBinary is positional and, with schema validation off as 18.16 requires, unchecked: the
//! field order of [`EventEvidence`], [`Neighbour`] equals the queries' columns (a unit test reads
//! the SELECT lists; the integration tests decode every query on a real server).

use oomlens_schema::memory::{self, Optimizer, PerParam, Precision};
use oomlens_schema::{OomEvent, OomKind, OtherProcess, Phase};
use serde::{Deserialize, Serialize};

use crate::analysis::queries::{self, ParamValue};

use super::AttributionError;

const MIB: u64 = 1 << 20;

/// Default look-back before each failure: one minute of process samples.
pub const DEFAULT_WINDOW_MS: i64 = 60_000;

/// The CUDA context and other memory a process holds outside its framework's allocator when the
/// message does not say (a CUDA 12 context with lazy module loading: 300–600 MiB).
pub const CONTEXT_ESTIMATE_BYTES: u64 = 512 * MIB;

/// Label keys the agent's parser sets (`oomlens-parse`): where the phase came from, its clue, the
/// host-memory evidence, and (agent) where the capacity came from.
pub mod labels {
    pub use oomlens_parse::host::EVIDENCE_LABEL as HOST_EVIDENCE;
    pub use oomlens_parse::{PHASE_CLUE_LABEL as PHASE_CLUE, PHASE_SOURCE_LABEL as PHASE_SOURCE};
    /// `nvml` when the agent filled the capacity from the GPU's NVML total.
    pub const CAPACITY_SOURCE: &str = "capacity.source";
    pub use oomlens_parse::MESSAGE_HINT_LABEL as MESSAGE_HINT;
    /// The hook's allocator summary (`agent/src/detect/allocator.rs`): free bytes in segments.
    pub const ALLOC_CACHED_FREE: &str = "alloc.cached_free_bytes";
    /// … the largest free block.
    pub const ALLOC_LARGEST_FREE: &str = "alloc.largest_free_block_bytes";
    /// … live bytes at weight / optimizer-state sites.
    pub const ALLOC_STATIC: &str = "alloc.static_bytes";
    /// … live bytes at activation sites.
    pub const ALLOC_ACTIVATION: &str = "alloc.activation_bytes";
    /// … the sites, `alloc.site.1`, `alloc.site.2`, ….
    pub const ALLOC_SITE_PREFIX: &str = "alloc.site.";
}

/// One allocation site of the hook's allocator summary, as stored
/// (`bytes|blocks|phase|function|file:line`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllocSite {
    /// `file:line` of the innermost user frame.
    pub site: String,
    /// Its function.
    pub function: String,
    /// The phase its frame belongs to ('' when the frame does not say).
    pub phase: String,
    /// Live bytes there.
    pub bytes: u64,
    /// Live blocks there.
    pub blocks: u64,
}

impl AllocSite {
    /// A stored site; missing or unreadable parts are empty / 0.
    pub fn parse(stored: &str) -> AllocSite {
        let mut p = stored.splitn(5, '|');
        let bytes = p.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let blocks = p.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let phase = p.next().unwrap_or("").to_owned();
        let function = p.next().unwrap_or("").to_owned();
        let site = p.next().unwrap_or("").to_owned();
        AllocSite { site, function, phase, bytes, blocks }
    }

    /// Whether its frame loads weights or builds optimizer state.
    pub fn holds_state(&self) -> bool {
        matches!(self.phase.as_str(), "load" | "optimizer_init" | "optimizer_step")
    }
}

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

    /// The positional arguments of `oom_features` / `oom_neighbours` (without its `top_n`): the
    /// sample range, the event range (which GPUs / nodes to read), the window, the event range.
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

/// One row of `oom_features`: what is known about one OOM event and its window.
#[derive(Debug, Clone, PartialEq, Default, clickhouse::Row, Serialize, Deserialize)]
pub struct EventEvidence {
    /// Cluster of the agent that reported the event.
    pub cluster: String,
    /// Node name (the agent certificate's CN).
    pub node: String,
    /// Event id.
    pub event_id: u64,
    /// Failure time, Unix epoch ms.
    pub ts_ms: i64,
    /// `cuda_oom`, `host_oom_kill`, `xid`, `suspected_oom`.
    pub kind: String,
    /// Detector (`log`, `hook`, `kmsg`, `nvml`, `simulator`).
    pub source: String,
    /// Framework that printed the message.
    pub framework: String,
    /// Failing GPU (none for host OOM kills).
    pub gpu_index: Option<u32>,
    /// Failing process.
    pub pid: Option<u32>,
    /// Workload of the failing process.
    pub workload: String,
    /// Simulator ground truth ('' for real events). Never read by the rules.
    pub truth_scenario: String,
    /// Phase as the event carries it ('' or `unknown` when not known).
    pub phase: String,
    /// `traceback` when the parser read the phase from the log around the message; '' when the
    /// job reported it (hook) or there is none.
    pub phase_label: String,
    /// What the parser read the phase from (a frame, the message's words).
    pub phase_clue: String,
    /// For a host-memory failure seen in a job's log: `explicit`, `allocation`, `shm`, `sigkill`,
    /// `launcher`; '' for the kernel's own OOM-killer line and everything else.
    pub host_evidence: String,
    /// The message's own kind when it says more than "out of memory" (`kv_cache`,
    /// `startup_free_memory`, `cache_blocks`, `batch_search_exhausted`, …; '' otherwise).
    pub message_hint: String,
    /// `nvml` when the capacity is the GPU's NVML total (the message had none); '' when it is the
    /// message's own.
    pub capacity_source: String,
    /// The hook's allocator summary (v2): free bytes inside the allocator's segments at the OOM.
    pub alloc_cached_free_bytes: Option<u64>,
    /// The hook's allocator summary: the largest of those free blocks.
    pub alloc_largest_free_bytes: Option<u64>,
    /// The hook's allocator summary: live bytes at sites whose frame loads weights or builds
    /// optimizer state.
    pub alloc_static_bytes: Option<u64>,
    /// The hook's allocator summary: live bytes at sites whose frame is a forward / backward /
    /// eval / inference step (activations).
    pub alloc_activation_bytes: Option<u64>,
    /// The hook's allocator summary: the top allocation sites by live bytes,
    /// `bytes|blocks|phase|function|file:line`.
    pub alloc_sites: Vec<String>,
    /// Size of the failed allocation.
    pub requested_bytes: Option<u64>,
    /// The limit the allocation failed against: the GPU's capacity (or a memory-fraction limit).
    pub capacity_bytes: Option<u64>,
    /// Free GPU memory at the failure.
    pub free_bytes: Option<u64>,
    /// Allocated by the framework's allocator.
    pub allocated_bytes: Option<u64>,
    /// Reserved by the framework's caching allocator (allocated + cached).
    pub reserved_bytes: Option<u64>,
    /// GPU memory of the failing process, its non-allocator memory included.
    pub process_used_bytes: Option<u64>,
    /// Other processes on the GPU named in the message (parallel to `other_used_bytes`).
    pub other_pids: Vec<u32>,
    /// Their memory.
    pub other_used_bytes: Vec<u64>,
    /// Xid number.
    pub xid: Option<u32>,
    /// Host RSS of a killed process.
    pub host_rss_bytes: Option<u64>,
    /// Parameter count.
    pub params: Option<u64>,
    /// Micro-batch size (samples per GPU per step).
    pub batch_size: Option<u32>,
    /// Sequence length.
    pub seq_len: Option<u32>,
    /// Hidden size.
    pub hidden: Option<u32>,
    /// Number of layers.
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
    /// Its largest rise between two consecutive readings in the window: the most memory it took
    /// at once (`None` without samples, and in rows stored before the column existed).
    pub own_max_rise: Option<u64>,
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
}

fn label<'a>(e: &'a OomEvent, key: &str) -> &'a str {
    e.labels.iter().find(|l| l.key == key).map_or("", |l| l.value.as_str())
}

impl EventEvidence {
    /// The failing process was first seen inside the window (5 s after its start or later): it
    /// started, or came to this GPU, shortly before the failure.
    pub fn first_seen_in_window(&self) -> bool {
        self.own_samples > 0 && self.own_first_ts >= self.ts_ms - self.window_ms + 5000
    }

    /// The evidence of one event as the agent sent it, without samples (the message alone:
    /// `oomlens explain`). Field for field what the pipeline stores for the event (its collector
    /// conversion and `oom_features`), so both derive the same features.
    pub fn from_event(e: &OomEvent) -> EventEvidence {
        let j = &e.job;
        EventEvidence {
            event_id: e.event_id,
            ts_ms: e.ts_ms,
            kind: e.kind.as_str().to_owned(),
            source: e.source.as_str().to_owned(),
            framework: e.framework.clone(),
            gpu_index: e.gpu_index,
            pid: e.pid,
            truth_scenario: e.truth.map(|s| s.as_str().to_owned()).unwrap_or_default(),
            phase: e.phase.as_str().to_owned(),
            phase_label: label(e, labels::PHASE_SOURCE).to_owned(),
            phase_clue: label(e, labels::PHASE_CLUE).to_owned(),
            host_evidence: label(e, labels::HOST_EVIDENCE).to_owned(),
            message_hint: label(e, labels::MESSAGE_HINT).to_owned(),
            capacity_source: label(e, labels::CAPACITY_SOURCE).to_owned(),
            alloc_cached_free_bytes: label(e, labels::ALLOC_CACHED_FREE).parse().ok(),
            alloc_largest_free_bytes: label(e, labels::ALLOC_LARGEST_FREE).parse().ok(),
            alloc_static_bytes: label(e, labels::ALLOC_STATIC).parse().ok(),
            alloc_activation_bytes: label(e, labels::ALLOC_ACTIVATION).parse().ok(),
            alloc_sites: e
                .labels
                .iter()
                .filter(|l| l.key.starts_with(labels::ALLOC_SITE_PREFIX))
                .map(|l| l.value.clone())
                .collect(),
            requested_bytes: e.requested_bytes,
            capacity_bytes: e.capacity_bytes,
            free_bytes: e.free_bytes,
            allocated_bytes: e.allocated_bytes,
            reserved_bytes: e.reserved_bytes,
            process_used_bytes: e.process_used_bytes,
            other_pids: e.other_processes.iter().map(|p| p.pid).collect(),
            other_used_bytes: e.other_processes.iter().map(|p| p.used_bytes).collect(),
            xid: e.xid,
            host_rss_bytes: e.host_rss_bytes,
            params: j.params,
            batch_size: j.batch,
            seq_len: j.seq_len,
            hidden: j.hidden,
            layers: j.layers,
            heads: j.heads,
            precision: j.precision.clone().unwrap_or_default(),
            optimizer: j.optimizer.clone().unwrap_or_default(),
            zero_stage: j.zero_stage,
            tensor_parallel: j.tensor_parallel,
            pipeline_parallel: j.pipeline_parallel,
            data_parallel: j.data_parallel,
            activation_checkpointing: j.activation_checkpointing.map(u8::from),
            flash_attention: j.flash_attention.map(u8::from),
            window_ms: DEFAULT_WINDOW_MS,
            ..EventEvidence::default()
        }
    }
}

/// The evidence of one event with every derived quantity (see the module docs). Dereferences to
/// its [`EventEvidence`].
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct OomFeatures {
    /// What is known about the event.
    #[serde(flatten)]
    pub evidence: EventEvidence,
    /// The phase: as reported or read from the log, else `startup` / `steady` inferred from the
    /// process's curve, else ''.
    pub phase_effective: String,
    /// `reported` (the job said it), `traceback` (read from the log around the message),
    /// `inferred` (from the process's curve) or `unknown`.
    pub phase_source: String,
    /// The process's GPU memory outside its allocator (CUDA context, cuBLAS/cuDNN workspaces,
    /// NCCL buffers): process used − reserved, when the message says both.
    pub context_bytes: Option<u64>,
    /// The context counted in `need_alone_bytes`: `context_bytes`, else the memory outside the
    /// allocator when that is smaller than [`CONTEXT_ESTIMATE_BYTES`], else the estimate.
    pub context_assumed_bytes: u64,
    /// Cached by the allocator but not allocated: reserved − allocated.
    pub cached_free_bytes: Option<u64>,
    /// GPU memory held outside this process's allocator: capacity − free − reserved (its own
    /// context and other processes).
    pub outside_bytes: Option<u64>,
    /// Memory of the other processes at the failure.
    pub others_bytes: Option<u64>,
    /// Where `others_bytes` comes from: `message` (the processes the message lists), `samples`
    /// (the process samples), `implied` (outside memory less this process's own non-allocator
    /// memory, both from the message), `outside` (outside memory less an assumed context: the
    /// message does not say the process's own memory), or '' (not known).
    pub others_from: String,
    /// Other processes the message lists (the failing process excluded when it is listed too).
    pub others_listed: u64,
    /// What the process alone needed at the failure.
    pub need_alone_bytes: Option<u64>,
    /// Where `need_alone_bytes` comes from: `allocator` (context + allocated + requested),
    /// `process` (its GPU memory in the message + requested), `samples` (its last sample +
    /// requested), or '' (not known).
    pub need_alone_from: String,
    /// What it needed without freeing its own cache: context + reserved + requested.
    pub with_cache_bytes: Option<u64>,
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
    /// Peak − floor of the failing process in the window.
    pub own_swing_bytes: Option<u64>,
    /// The most the failing process took at once in the window: its largest rise between two
    /// readings (its swing in rows stored before that was recorded); see [`OomFeatures::took_before`].
    pub own_rise_bytes: Option<u64>,
}

impl std::ops::Deref for OomFeatures {
    type Target = EventEvidence;

    fn deref(&self) -> &EventEvidence {
        &self.evidence
    }
}

fn sum(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

impl OomFeatures {
    /// Derives every feature from `e`.
    pub fn derive(e: EventEvidence) -> OomFeatures {
        let known_phase = !matches!(e.phase.as_str(), "" | "unknown");
        let inferred = (!known_phase && e.own_samples > 0).then(|| {
            let startup = e.first_seen_in_window()
                && e.own_last_used >= e.own_max_used
                && e.own_first_used.saturating_mul(4) <= e.own_max_used;
            if startup { "startup" } else { "steady" }
        });
        let phase_effective =
            if known_phase { e.phase.clone() } else { inferred.unwrap_or_default().to_owned() };
        let phase_source = if known_phase {
            if e.phase_label == "traceback" { "traceback" } else { "reported" }
        } else if inferred.is_some() {
            "inferred"
        } else {
            "unknown"
        };

        // The failing process among the listed ones (events of agents that did not pick it out,
        // hook reports): by its pid, else as the parser picks it.
        let listed: Vec<OtherProcess> = e
            .other_pids
            .iter()
            .zip(&e.other_used_bytes)
            .map(|(&pid, &used_bytes)| OtherProcess { pid, used_bytes })
            .collect();
        let own = match e.pid.and_then(|pid| listed.iter().position(|o| o.pid == pid)) {
            Some(i) => Some(i),
            None if e.process_used_bytes.is_none() => {
                oomlens_parse::own_process_index(&listed, e.reserved_bytes, e.allocated_bytes).map(|(i, _)| i)
            }
            None => None,
        };
        let process_used = e.process_used_bytes.or_else(|| own.map(|i| listed[i].used_bytes));
        let context_bytes = match (process_used, e.reserved_bytes) {
            (Some(p), Some(r)) if p >= r => Some(p - r),
            _ => None,
        };
        let cached_free_bytes = match (e.reserved_bytes, e.allocated_bytes) {
            (Some(r), Some(a)) if r >= a => Some(r - a),
            _ => None,
        };
        let outside_bytes = match (e.capacity_bytes, e.free_bytes, e.reserved_bytes) {
            (Some(c), Some(f), Some(r)) => Some(c.saturating_sub(sum(f, r))),
            _ => None,
        };
        let context_assumed_bytes = context_bytes.unwrap_or_else(|| {
            outside_bytes.map_or(CONTEXT_ESTIMATE_BYTES, |o| o.min(CONTEXT_ESTIMATE_BYTES))
        });

        let others = listed.iter().enumerate().filter(|(i, _)| Some(*i) != own);
        let others_listed = others.clone().count() as u64;
        let listed_bytes: u64 = others.map(|(_, o)| o.used_bytes).fold(0, sum);
        let (others_bytes, others_from) = if others_listed > 0 {
            (Some(listed_bytes), "message")
        } else if e.own_samples > 0 || e.others_seen > 0 {
            (Some(e.others_last_bytes.saturating_sub(e.own_sampled_bytes)), "samples")
        } else if let (Some(out), Some(ctx)) = (outside_bytes, context_bytes) {
            // The message says what this process holds outside its allocator: the rest of the
            // outside memory is other processes'.
            (Some(out.saturating_sub(ctx)), "implied")
        } else if let Some(out) = outside_bytes {
            // It does not: the outside memory less an assumed context (the process's own
            // non-allocator memory beyond that cannot be told from another process's).
            (Some(out.saturating_sub(context_assumed_bytes)), "outside")
        } else {
            (None, "")
        };

        let process_memory = process_used;
        let (need_alone_bytes, need_alone_from) = match (e.allocated_bytes, e.requested_bytes) {
            (Some(a), Some(q)) => (Some(sum(sum(context_assumed_bytes, a), q)), "allocator"),
            (None, Some(q)) if process_memory.is_some() => (process_memory.map(|p| sum(p, q)), "process"),
            (None, Some(q)) if e.own_samples > 0 => (Some(sum(e.own_last_used, q)), "samples"),
            _ => (None, ""),
        };
        let with_cache_bytes = match (e.reserved_bytes.or(e.allocated_bytes), e.requested_bytes) {
            (Some(held), Some(q)) => Some(sum(sum(context_assumed_bytes, held), q)),
            _ => None,
        };

        let tp = e.tensor_parallel.unwrap_or(1).max(1);
        let pp = e.pipeline_parallel.unwrap_or(1).max(1);
        let params_per_gpu = e.params.map(|p| memory::params_per_gpu(p, tp, pp));
        // The shared arithmetic (`oomlens_schema::memory`); a static estimate needs whole bytes
        // per weight and a known optimizer ('' = none: weights only).
        let precision = Precision::parse(&e.precision);
        let optimizer = Optimizer::parse(&e.optimizer);
        let weight_bytes_per_param: Option<u8> = precision.and_then(Precision::whole_bytes);
        // (An unknown precision counts as mixed: only fp32 keeps no master weights.)
        let optimizer_bytes_per_param: Option<u8> =
            optimizer.and_then(|o| u8::try_from(o.state_bytes(precision.unwrap_or(Precision::Bf16))).ok());
        let zero_divisor = e.data_parallel.unwrap_or(1).max(1);
        let zero = e.zero_stage.unwrap_or(0);
        let static_estimate_bytes = match (params_per_gpu, precision, optimizer, weight_bytes_per_param) {
            (Some(p), Some(precision), Some(optimizer), Some(_)) => {
                let per = if optimizer == Optimizer::None {
                    PerParam::inference(precision)
                } else {
                    PerParam::training(precision, optimizer)
                };
                Some(memory::model_states(p, per, zero, zero_divisor).total())
            }
            _ => None,
        };
        let attention_bytes = match (e.batch_size, e.heads, e.seq_len) {
            _ if e.flash_attention == Some(1) => Some(0),
            (Some(b), Some(h), Some(s)) => {
                let heads = u64::from(h) / u64::from(tp);
                let elem = if precision == Some(Precision::Fp32) { 4 } else { 2 };
                Some(memory::score_matrix_bytes(u64::from(b), heads, u64::from(s), elem))
            }
            _ => None,
        };
        let own_swing_bytes = (e.own_samples > 0).then(|| e.own_max_used.saturating_sub(e.own_min_used));
        let own_rise_bytes =
            own_swing_bytes.map(|swing| e.own_max_rise.map_or(swing, |rise| rise.min(swing)));

        OomFeatures {
            phase_effective,
            phase_source: phase_source.to_owned(),
            context_bytes,
            context_assumed_bytes,
            cached_free_bytes,
            outside_bytes,
            others_bytes,
            others_from: others_from.to_owned(),
            others_listed,
            need_alone_bytes,
            need_alone_from: need_alone_from.to_owned(),
            with_cache_bytes,
            params_per_gpu,
            weight_bytes_per_param,
            optimizer_bytes_per_param,
            zero_divisor,
            static_estimate_bytes,
            attention_bytes,
            own_swing_bytes,
            own_rise_bytes,
            evidence: e,
        }
    }

    /// Whether the failing process took a request of `q` bytes before the failure (`None`
    /// without samples). A step's tensors come back every step: the first time, the caching
    /// allocator took a segment for each at once and kept it (the reading does not fall between
    /// steps), so one of the process's rises covers a request of that size. A process first seen
    /// inside the window may still be in its first step, all of whose tensors are new: its climb
    /// covers them, unless the request is as large as all it holds (90 %) — what an input of
    /// twice the length asks of attention, not one tensor among a step's.
    pub fn took_before(&self, q: u64) -> Option<bool> {
        let swing = self.own_swing_bytes?;
        if q <= self.own_rise_bytes.unwrap_or(swing) {
            return Some(true);
        }
        Some(
            self.first_seen_in_window()
                && q <= swing
                && q.saturating_mul(10) < self.own_last_used.saturating_mul(9),
        )
    }

    /// The features of one event from its message alone (no samples): `oomlens explain`.
    pub fn from_event(e: &OomEvent) -> OomFeatures {
        OomFeatures::derive(EventEvidence::from_event(e))
    }

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

    /// The phase as the schema's enum (`startup` counts as load, `steady` as unknown).
    pub fn phase(&self) -> Phase {
        match self.phase_effective.as_str() {
            "startup" => Phase::Load,
            p => Phase::from_name(p).unwrap_or(Phase::Unknown),
        }
    }

    /// The kind as the schema's enum.
    pub fn kind(&self) -> Option<OomKind> {
        OomKind::from_name(&self.kind)
    }
}

/// One row of `oom_neighbours`: another process on the failing GPU (or node) in the window.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct Neighbour {
    /// Cluster of the failing event (and the neighbour).
    pub cluster: String,
    /// Node of the failing event (and the neighbour).
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
    /// Peak memory over its samples in the window.
    pub max_used_bytes: u64,
    /// Last − first.
    pub growth_bytes: i64,
    /// 1 when seen in the last 5 s before the failure.
    pub present: u8,
}

/// `oom_features` for the events of `window`, newest first.
pub async fn fetch_evidence(
    client: &clickhouse::Client,
    db: &str,
    window: &FeatureWindow,
) -> Result<Vec<EventEvidence>, AttributionError> {
    Ok(queries::builtin("oom_features")?
        .bind(client, db, &window.args())?
        .fetch_all::<EventEvidence>()
        .await?)
}

/// The features of the events of `window`, newest first.
pub async fn fetch_features(
    client: &clickhouse::Client,
    db: &str,
    window: &FeatureWindow,
) -> Result<Vec<OomFeatures>, AttributionError> {
    Ok(fetch_evidence(client, db, window).await?.into_iter().map(OomFeatures::derive).collect())
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
    use oomlens_schema::{EventSource, Label, OtherProcess};

    use super::*;

    const GIB: u64 = 1 << 30;

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
        let q = queries::get("oom_features").expect("oom_features");
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
        check("oom_features", <EventEvidence as clickhouse::Row>::COLUMN_NAMES);
        check("oom_neighbours", <Neighbour as clickhouse::Row>::COLUMN_NAMES);
    }

    fn v2_event() -> OomEvent {
        // `GPU 0 has a total capacity of 79.32 GiB of which 20 MiB is free. Process 77 has 30 GiB
        // memory in use. Including non-PyTorch memory, this process has 49 GiB memory in use. Of
        // the allocated memory 46 GiB is allocated by PyTorch, and 2 GiB is reserved by PyTorch but
        // unallocated.`
        OomEvent {
            kind: OomKind::CudaOom,
            source: EventSource::Log,
            framework: "pytorch".into(),
            gpu_index: Some(0),
            requested_bytes: Some(GIB),
            capacity_bytes: Some(80 * GIB),
            free_bytes: Some(20 * MIB),
            allocated_bytes: Some(46 * GIB),
            reserved_bytes: Some(48 * GIB),
            process_used_bytes: Some(49 * GIB),
            other_processes: vec![OtherProcess { pid: 77, used_bytes: 30 * GIB }],
            phase: Phase::Backward,
            labels: vec![Label { key: labels::PHASE_SOURCE.into(), value: "traceback".into() }],
            ..OomEvent::default()
        }
    }

    #[test]
    fn message_features() {
        let f = OomFeatures::from_event(&v2_event());
        assert_eq!((f.phase_effective.as_str(), f.phase_source.as_str()), ("backward", "traceback"));
        assert_eq!(f.context_bytes, Some(GIB));
        assert_eq!(f.cached_free_bytes, Some(2 * GIB));
        assert_eq!(f.outside_bytes, Some(80 * GIB - 20 * MIB - 48 * GIB));
        assert_eq!((f.others_bytes, f.others_from.as_str(), f.others_listed), (Some(30 * GIB), "message", 1));
        assert_eq!(f.need_alone_bytes, Some(GIB + 46 * GIB + GIB));
        assert_eq!(f.with_cache_bytes, Some(GIB + 48 * GIB + GIB));
        assert_eq!(f.phase(), Phase::Backward);

        // Without the process list: the others are what the outside memory leaves after this
        // process's own non-allocator memory.
        let mut e = v2_event();
        e.other_processes.clear();
        let f = OomFeatures::from_event(&e);
        assert_eq!(
            (f.others_bytes, f.others_from.as_str()),
            (Some(80 * GIB - 20 * MIB - 49 * GIB), "implied")
        );

        // Nothing says how much the process holds outside the allocator: never 0 B, the estimate
        // or the outside memory when smaller.
        e.process_used_bytes = None;
        let f = OomFeatures::from_event(&e);
        assert_eq!((f.context_bytes, f.context_assumed_bytes), (None, CONTEXT_ESTIMATE_BYTES));
        let outside = 80 * GIB - 20 * MIB - 48 * GIB;
        assert_eq!(
            (f.others_bytes, f.others_from.as_str()),
            (Some(outside - CONTEXT_ESTIMATE_BYTES), "outside")
        );
        e.free_bytes = Some(80 * GIB - 48 * GIB - 100 * MIB);
        assert_eq!(OomFeatures::from_event(&e).context_assumed_bytes, 100 * MIB);
        // A hook report's phase is reported.
        let mut e = v2_event();
        e.labels.clear();
        assert_eq!(OomFeatures::from_event(&e).phase_source, "reported");
        e.phase = Phase::Unknown;
        let f = OomFeatures::from_event(&e);
        assert_eq!((f.phase_effective.as_str(), f.phase_source.as_str()), ("", "unknown"));
    }

    #[test]
    fn static_estimate_and_attention_from_the_shape() {
        let e = EventEvidence {
            params: Some(1_000_000_000),
            precision: "bf16".into(),
            optimizer: "adamw".into(),
            batch_size: Some(8),
            heads: Some(16),
            seq_len: Some(2048),
            zero_stage: Some(2),
            data_parallel: Some(4),
            ..EventEvidence::default()
        };
        let f = OomFeatures::derive(e);
        // weights 2 B + grads 2 B / 4 + Adam 12 B / 4.
        assert_eq!(f.static_estimate_bytes, Some(2_000_000_000 + 500_000_000 + 3_000_000_000));
        assert_eq!(f.attention_bytes, Some(2 * 8 * 16 * 2048 * 2048));
        let f = OomFeatures::derive(EventEvidence { flash_attention: Some(1), ..f.evidence });
        assert_eq!(f.attention_bytes, Some(0));
    }

    #[test]
    fn a_request_was_taken_before_when_a_rise_covers_it() {
        const GIB: u64 = 1 << 30;
        let ts_ms = 1_000_000;
        // A process present all the window: 20 GiB, then its first step took 40 GiB at once.
        let old = EventEvidence {
            ts_ms,
            window_ms: 60_000,
            own_samples: 60,
            own_first_ts: ts_ms - 59_000,
            own_first_used: 20 * GIB,
            own_min_used: 20 * GIB,
            own_max_used: 60 * GIB,
            own_last_used: 60 * GIB,
            own_max_rise: Some(40 * GIB),
            ..EventEvidence::default()
        };
        let took = |e: &EventEvidence, q: u64| OomFeatures::derive(e.clone()).took_before(q);
        assert!(!old.first_seen_in_window());
        assert_eq!(took(&old, 25 * GIB), Some(true), "a step's tensor that came back");
        // The same swing in small rises (a process growing step by step): 25 GiB is new.
        let growing = EventEvidence { own_max_rise: Some(GIB), ..old.clone() };
        assert_eq!(took(&growing, 25 * GIB), Some(false));
        // A row stored before the rise was recorded: the swing decides, as it did.
        let stored = EventEvidence { own_max_rise: None, ..growing.clone() };
        assert_eq!(took(&stored, 25 * GIB), Some(true));
        assert_eq!(took(&stored, 41 * GIB), Some(false));
        // Started 20 s ago and still climbing (its first step): its climb covers a step's tensor,
        // not a request as large as all it holds (a doubled input's attention).
        let young =
            EventEvidence { own_first_ts: ts_ms - 20_000, own_min_used: GIB, own_first_used: GIB, ..growing };
        assert!(young.first_seen_in_window());
        assert_eq!(took(&young, 25 * GIB), Some(true));
        assert_eq!(took(&young, 58 * GIB), Some(false), "≥ 90 % of the 60 GiB it holds");
        assert_eq!(took(&young, 70 * GIB), Some(false), "beyond its whole climb");
        // Without samples nothing is known.
        assert_eq!(took(&EventEvidence::default(), GIB), None);
    }
}
