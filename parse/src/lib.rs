//! `oomlens-parse`: turns what jobs and kernels print into OOM events with exact numbers. Shared
//! by the agent (live job logs, `/dev/kmsg`, `oomlens-agent parse`) and the `oomlens explain`
//! command, so a message pasted into `explain` is read exactly as the agent reads it in a log.
//!
//! Modules:
//!
//! * this file — [`LogParser`] (the streaming state machine: pending events, tracebacks, time-outs,
//!   duplicates), [`ParsedOom`] and its conversions (wire event, JSON line, human summary).
//! * `lines.rs` — container log framing: CRI, Docker json-file, plain ([`decode_line`],
//!   [`LineDecoder`]).
//! * `prefix.rs` — logger / glog / NCCL / vLLM / rank prefixes and quote markers, and what they say
//!   (pid, device).
//! * `pytorch.rs` — PyTorch's allocator message (1.0 … 2.x, ROCm).
//! * `frameworks.rs` — every other family (CUDA runtime, cuBLAS, cuDNN, NCCL, TensorFlow, BFC,
//!   JAX/XLA, HIP, CuPy, llama.cpp, vLLM, …): detection, continuation lines, numbers.
//! * `frames.rs` — tracebacks' frame lines in every format (Python's, a wrap's pieces joined,
//!   IPython / Jupyter / Colab cells, `rich`'s boxed tracebacks) and each frame's active source
//!   line.
//! * `phase.rs` — the phase read from the traceback frames around a message; `host.rs` — host-memory
//!   symptoms in job logs (killed workers, `Killed`, exit 137); `hint.rs` — what a message's own
//!   words say about the cause (`message.hint`; for TensorFlow also the refused tensor's shape);
//!   `op.rs` — the code the failing allocation was made in (attention: hint `attention`;
//!   pinning host memory: hint `pinned_host`; the clue in `message.op`).
//! * `generic.rs` — the last-resort readings of programs no rule names (SIGKILL or status 137 in
//!   any words, a memory limit exceeded, a device allocation refused): framework `other`, never on
//!   a logger's debug, info or warning line, and not a second event when it only explains a
//!   failure just reported.
//! * `runner.rs` — test runners' lines (`tests/test_oom.py::test_sigkill PASSED`): a test's name
//!   is never read as a failure; pytest's summary keeps its reason (`FAILED … - MemoryError`).
//! * `kernel.rs` — kernel log lines (Xid errors, OOM-killer kills); `pci.rs` — PCI address → GPU.
//! * `mixed.rs` — job-log and kernel lines in one stream, through both parsers; `command.rs` —
//!   reading whole files or stdin that way (`oomlens-agent parse`).
//! * `units.rs` — exact sizes (`1.50 GiB`, `372.76MiB`, `33554432 bytes`, `1,073,741,824 bytes`).
//! * `structured.rs` — a line holding a JSON record (a JSON logger's, a server's error response):
//!   read as the lines its values carry.
//! * `text.rs` — the bounded, cleaned view of a line, the compact (wrap-proof) form of a message,
//!   and the substring searches every table uses (`has`, `after`: quick on a miss).
//!
//! **One failure, one event.** A message hard-wrapped over several lines (even mid-word), the
//! traceback before it, the trailer lines after it (CUDA hints, TensorFlow's `[[node …]]`, the
//! BFC allocator dump, NCCL's `-> 1` chain) and a second print of the same failure by another layer
//! make one event, whose `line` is the first line (the `Traceback` line when there is one).
//! Output of other processes interleaved with it (other ranks, other prefixes, unrelated lines) is
//! skipped, not swallowed. C++'s `terminate called after throwing an instance of
//! 'c10::OutOfMemoryError'` and the `what():` message after it are one failure. So are a head
//! hard-wrapped before its message (`… CUDA Exception:` / `out of memory`), a long line a terminal
//! hard-wrapped (also into three or more pieces of the terminal's width; its failure words cut, or
//! its first part already speaking of a failure: `Error while calling cudaMalloc(…) in file …/gpu`
//! / `_data.cpp:191. … out of memory`; a host symptom's too: `… MPI process (rank: 0, pid: 39547)
//! terminated` / ` with signal 9 -> abort job`), PyTorch 1.x's message wrapped right before its
//! `(GPU 0; …` clause, llama.cpp's refused CPU buffer and the engine's lines reporting it, and a
//! failure with numbers and its advice a few lines on without them (PaddlePaddle's `Please check
//! whether there is any other process using GPU 0.`), and a traceback printed right after its
//! message (old PyTorch's `THCudaCheck FAIL` before Python raises it, a UI or logger that reports
//! the error and then its traceback) with the exception line that ends it — unless that line is
//! another failure, whose traceback it is. A blank line between a head and its message (ComfyUI's
//! `Error occurred when executing X:`) keeps the head. Jupyter restarting a kernel that failed on
//! its own is not a second (host) failure, nor is the `raise …(` source line a traceback shows,
//! nor a wrapper re-raising a number-less failure in its exception's name (`ApiError: …`).
//!
//! **A line a terminal cut is read whole.** A piece that follows a line of the event filling a
//! terminal's width — no logger's level or stream, decorated as that line or less, not indented
//! deeper, not begun with the stamp that began it (`wrap_piece`) — is read with it, so a number
//! or a phrase the cut split is read as printed (`… allocate 740` / `6166528 bytes.`), and is
//! taken by its event when the two say more together than apart. A failure's line begun inside a
//! word or a number is read with the held line before it when that names its program; one that
//! completes the failure's words the event's last line was cut inside (by a hard wrap or at a
//! space by a word wrap: `… OutOfMemoryError('CUDA out` / `of memory. Tried to allocate …`)
//! continues that event. A word wrap's pieces are also joined with a space where a host
//! symptom's words or a frame line need it (`… DefaultCPUAllocator: not` / `enough memory`). The pieces
//! of a cut frame line stay in the traceback and are joined again before the phase is read
//! (`frames::readable`). Any line that fills a terminal's width and ends inside a word is held for
//! one line: a piece after it that goes on with that word and starts nothing on its own is read
//! with it when a program's own rule (not a last-resort wording) reads the two together and not
//! apart — the cut split the failure's words wherever it fell (`… pooled_storage_ma` /
//! `nager.h:84: cudaMalloc failed: out of mem`).
//!
//! **Decorations change nothing.** Every line is first cleaned as a terminal would show it
//! (`text::clean`: colour and other escape sequences, also pasted as text — `^[[1m`, `␛[1m` —
//! control characters, what a carriage return overwrote), then stripped of its loggers' prefixes
//! and quote markers (`prefix.rs`; also after an indent); tracebacks are read from the stripped lines, so a stamp on every line (`kubectl
//! logs --timestamps`) keeps the frames. A traceback pasted with an indent (inside a list) loses
//! that indent for as long as its lines carry it ([`MAX_MARGIN`]). PaddlePaddle's native stack
//! between Python's exception line and its message (`C++ Traceback`, numbered frames, `Error
//! Message Summary`) and blank or ruled lines do not end a traceback. The corpus test checks that
//! every real record gives the same events decorated each of these ways.
//!
//! **Recovered is not failed.** Warnings that only look like failures make no event: TensorFlow's
//! BFC allocator retrying with less (`The caller indicates that this is not a failure`), TensorRT's
//! builder refused a tactic's workspace and `Skipping tactic … due to insufficient memory`,
//! SGLang's `Decode out of memory happened` (it retracted requests to make room), vLLM's advice
//! `If you are running out of memory, consider decreasing gpu_memory_utilization`.
//!
//! **A traceback that names the failure.** IPython heads its traceback with the exception's name
//! (`ResourceExhaustedError      Traceback (most recent call last)`); when that name is an
//! out-of-memory error and the paste ends before the message (or other output follows the frames),
//! the traceback alone is reported as a number-less event of that framework.
//!
//! **Bounded.** At most [`text::MAX_LINE_BYTES`] of a line are looked at; at most
//! [`MAX_PENDING`] events are open, each holding at most [`MAX_EVENT_LINES`] lines /
//! [`MAX_RAW_BYTES`] bytes of raw text and [`MAX_COMPACT_BYTES`] of message text; an event closes
//! after a family-specific number of unrelated lines or [`MAX_EVENT_SPAN`] lines in all; a
//! traceback keeps its first [`TRACEBACK_HEAD`] and last [`TRACEBACK_TAIL`] lines. The work for one
//! line is therefore linear in the line's length, whatever came before.

pub mod command;
mod frames;
pub mod frameworks;
pub mod generic;
pub mod hint;
pub mod host;
pub mod kernel;
pub mod lines;
pub mod mixed;
pub mod op;
pub mod pci;
pub mod phase;
pub mod prefix;
pub mod pytorch;
pub mod runner;
pub mod structured;
pub mod text;
pub mod units;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt::Write as _;

use oomlens_schema::{EventSource, Label, OomEvent, OomKind, OtherProcess, Phase};

pub use lines::{LineDecoder, LineFormat, decode_line};

use frameworks::Family;
use host::{HostEvidence, HostSymptom};
use phase::PhaseFinding;
use prefix::Origin;

/// Most events open (waiting for more lines) at once; the oldest is closed beyond.
pub const MAX_PENDING: usize = 8;
/// Most raw lines kept per event (later lines still count, their text is not kept).
pub const MAX_EVENT_LINES: usize = 128;
/// Most bytes of raw text kept per event (below the wire limit on `raw_message`).
pub const MAX_RAW_BYTES: usize = 60 * 1024;
/// Most bytes of compact message text kept per event.
pub const MAX_COMPACT_BYTES: usize = 16 * 1024;
/// Most lines one event may span from its first line.
pub const MAX_EVENT_SPAN: u64 = 4096;
/// First lines of a traceback that are kept.
pub const TRACEBACK_HEAD: usize = 8;
/// Last lines of a traceback that are kept.
pub const TRACEBACK_TAIL: usize = 56;
/// Lines after a traceback's exception line during which an OOM message still joins it.
pub const TRACEBACK_GRACE: u32 = 4;
/// An event whose numbers repeat an event that ended at most this many lines before is the same
/// failure printed again, and is dropped.
pub const DEDUP_WINDOW: u64 = 128;
/// A failure without numbers of the same framework and stream whose traceback starts within this
/// many lines after another failure is that failure re-raised by a wrapper in its own words.
pub const RERAISE_WINDOW: u64 = 32;
/// A failure without numbers of the same framework and stream that starts within this many lines
/// after a failure with numbers ended is that failure's remainder: its advice on lines of their
/// own (PaddlePaddle's `Please check whether there is any other process using GPU 0.` after a
/// blank line). (Two failures without numbers a line apart stay two: a runtime error and the
/// library's own report of it are told apart by their frameworks only.)
pub const REMAINDER_WINDOW: u64 = 4;
/// Longest line (compact bytes) kept as a head whose message may come on the next line.
const MAX_HEAD_BYTES: usize = 512;
/// How a PyTorch OOM's headline ends (compact) when a paste broke its message after it
/// ([`Pending::headline_of`]).
const HEADLINE_ENDS: &[&str] = &["outofmemory", "outofmemory.", "outofmemoryerror", "outofmemoryerror:"];
/// Longest line (compact bytes, its pieces joined) read whole when a terminal's hard wrap cut it.
const MAX_PIECE_BYTES: usize = 2 * MAX_HEAD_BYTES;
/// Shortest first line (compact bytes) that another failure's may end with and be the same
/// failure re-raised in a wrapper's words ([`same_words`]).
const MIN_SAME_WORDS: usize = 20;
/// Characters two lines must begin alike in to be a logger's two lines ([`same_start`]).
const START_SHAPE: usize = 8;
/// Narrowest line a terminal's hard wrap leaves (a message may continue on the next line).
const MIN_WRAP_WIDTH: usize = 72;
/// A launcher's `Killing subprocess` within this many lines after another failure of the job (or
/// while a traceback is open) is the launcher's reaction to that failure, not a host OOM.
pub const LAUNCHER_GRACE: u64 = 64;
/// A serving engine's memory-profiling line at most this many lines before its start-up error
/// lends the error its numbers (the device's capacity).
pub const PROFILE_REACH: u64 = 256;
/// Worker timeouts remembered to explain a later SIGKILL of the same worker (gunicorn).
pub const MAX_TIMED_OUT: usize = 64;
/// Widest indentation of a traceback header that is removed from its lines ([`LogParser`]).
pub const MAX_MARGIN: usize = 64;
/// Label key saying where the event's phase came from (`traceback`: the log around the message).
pub const PHASE_SOURCE_LABEL: &str = "phase.source";
/// Label key of the clue the phase was read from (a frame, the message's words).
pub const PHASE_CLUE_LABEL: &str = "phase.clue";
/// Label key of the message's own kind (`hint.rs`).
pub const MESSAGE_HINT_LABEL: &str = "message.hint";
/// Label key of the code the failing allocation was made in (`op.rs`): the frame or graph node.
pub const MESSAGE_OP_LABEL: &str = "message.op";
/// The hint of a failure whose allocation was made in attention code (`op.rs`).
pub const ATTENTION_HINT: &str = "attention";
/// The hint of a bare runtime error raised while pinning host memory (`op.rs`): the host's
/// memory, not the device's.
pub const PINNED_HOST_HINT: &str = "pinned_host";
/// Upper bound of [`LogParser::last_line_work`] (bytes examined for one line).
pub const MAX_LINE_WORK: usize =
    text::MAX_LINE_BYTES * (4 + MAX_PENDING) + 2 * MAX_PENDING * MAX_COMPACT_BYTES;

/// The numbers of one failure (every field optional).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields {
    /// CUDA device index.
    pub gpu: Option<u32>,
    /// Process id.
    pub pid: Option<u32>,
    /// Bytes of the allocation that failed.
    pub requested: Option<u64>,
    /// Device capacity as the framework saw it.
    pub capacity: Option<u64>,
    /// Free device memory.
    pub free: Option<u64>,
    /// Bytes allocated by the framework's allocator.
    pub allocated: Option<u64>,
    /// Bytes reserved by the framework's caching allocator (allocated + cached).
    pub reserved: Option<u64>,
    /// Device memory of the failing process, including non-framework memory.
    pub process_used: Option<u64>,
    /// Other processes on the device.
    pub other_processes: Vec<OtherProcess>,
}

impl Fields {
    /// Fills every field still missing from `other`.
    pub fn fill_from(&mut self, other: &Fields) {
        self.gpu = self.gpu.or(other.gpu);
        self.pid = self.pid.or(other.pid);
        self.requested = self.requested.or(other.requested);
        self.capacity = self.capacity.or(other.capacity);
        self.free = self.free.or(other.free);
        self.allocated = self.allocated.or(other.allocated);
        self.reserved = self.reserved.or(other.reserved);
        self.process_used = self.process_used.or(other.process_used);
        if self.other_processes.is_empty() {
            self.other_processes.clone_from(&other.other_processes);
        }
    }

    /// True when every number `self` states is stated equally by `other` (sizes within rounding:
    /// 0.5 % or 256 bytes, the BFC rounding).
    fn subsumed_by(&self, other: &Fields) -> bool {
        fn close(a: Option<u64>, b: Option<u64>) -> bool {
            match (a, b) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(a), Some(b)) => a.abs_diff(b) <= (a.max(b) / 200).max(256),
            }
        }
        let same = |a: Option<u32>, b: Option<u32>| a.is_none() || a == b;
        same(self.gpu, other.gpu)
            && same(self.pid, other.pid)
            && close(self.requested, other.requested)
            && close(self.capacity, other.capacity)
            && close(self.free, other.free)
            && close(self.allocated, other.allocated)
            && close(self.reserved, other.reserved)
            && close(self.process_used, other.process_used)
            && (self.other_processes.is_empty() || self.other_processes == other.other_processes)
    }
}

/// One failure found in a log.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedOom {
    /// [`OomKind::CudaOom`] for job logs ([`LogParser`]); [`OomKind::Xid`] or
    /// [`OomKind::HostOomKill`] for kernel log lines ([`ParsedOom::from_kernel`]).
    pub kind: OomKind,
    /// `pytorch`, `tensorflow`, `jax`, `cuda`, `nccl`, `cublas`, `cudnn`, `hip`, `cupy`,
    /// `llama.cpp`, `vllm`; `kernel` for kernel log lines.
    pub framework: &'static str,
    /// The Xid number (kernel `NVRM: Xid` lines only).
    pub xid: Option<u32>,
    /// The numbers.
    pub fields: Fields,
    /// When it failed, read from the traceback and the message (`phase.rs`).
    pub phase: Option<PhaseFinding>,
    /// For a host-memory failure seen in a job's log: how direct the evidence is (`host.rs`).
    pub host_evidence: Option<HostEvidence>,
    /// What the message says beyond "out of memory" (`hint.rs`).
    pub hint: Option<&'static str>,
    /// The code the failing allocation was made in, when the lines name attention or pin host
    /// memory (`op.rs`): the clue, e.g. `traceback: forward (modeling_llama.py)`.
    pub op: Option<String>,
    /// 1-based line where the event starts.
    pub line: u64,
    /// The event's lines as printed (bounded, see the module docs).
    pub lines: Vec<String>,
}

/// The JSON line of `oomlens-agent parse --json` (keys and order are a stable interface).
#[derive(Debug, serde::Serialize)]
struct JsonOom<'a> {
    kind: &'static str,
    framework: &'static str,
    gpu_index: Option<u32>,
    pid: Option<u32>,
    requested_bytes: Option<u64>,
    capacity_bytes: Option<u64>,
    free_bytes: Option<u64>,
    allocated_bytes: Option<u64>,
    reserved_bytes: Option<u64>,
    reserved_unallocated_bytes: Option<u64>,
    process_used_bytes: Option<u64>,
    other_processes: Vec<JsonProcess>,
    xid: Option<u32>,
    phase: Option<&'static str>,
    phase_clue: Option<&'a str>,
    host_evidence: Option<&'static str>,
    hint: Option<&'static str>,
    op: Option<&'a str>,
    line: u64,
}

#[derive(Debug, serde::Serialize)]
struct JsonProcess {
    pid: u32,
    used_bytes: u64,
}

impl ParsedOom {
    /// `reserved − allocated`, when both are known.
    pub fn reserved_unallocated(&self) -> Option<u64> {
        Some(self.fields.reserved?.saturating_sub(self.fields.allocated?))
    }

    /// A kernel log line's event (from [`KmsgParser`](crate::kernel::KmsgParser)) found at
    /// 1-based line `line` whose text is `text`: framework `kernel`, its kind, GPU index (when
    /// the parser's PCI map knows the address), pid and Xid number.
    pub fn from_kernel(event: &OomEvent, line: u64, text: &str) -> ParsedOom {
        ParsedOom {
            kind: event.kind,
            framework: "kernel",
            xid: event.xid,
            fields: Fields { gpu: event.gpu_index, pid: event.pid, ..Fields::default() },
            phase: None,
            host_evidence: None,
            hint: None,
            op: None,
            line,
            lines: vec![text::bounded(text).to_owned()],
        }
    }

    /// The event's lines joined with `\n`.
    pub fn raw_message(&self) -> String {
        self.lines.join("\n")
    }

    /// The wire event (its kind, source `log`); `event_id` is left 0 for the caller to set.
    pub fn to_event(&self, ts_ms: i64) -> OomEvent {
        let f = &self.fields;
        OomEvent {
            event_id: 0,
            ts_ms,
            kind: self.kind,
            source: EventSource::Log,
            framework: self.framework.to_owned(),
            gpu_index: f.gpu,
            pid: f.pid,
            requested_bytes: f.requested,
            capacity_bytes: f.capacity,
            free_bytes: f.free,
            allocated_bytes: f.allocated,
            reserved_bytes: f.reserved,
            process_used_bytes: f.process_used,
            other_processes: f.other_processes.clone(),
            xid: self.xid,
            phase: self.phase.as_ref().map_or(Phase::Unknown, |p| p.phase),
            labels: self.labels(),
            raw_message: self.raw_message(),
            ..OomEvent::default()
        }
    }

    /// The labels the event carries: where its phase came from and its clue, the host-memory
    /// evidence.
    pub fn labels(&self) -> Vec<Label> {
        let mut labels = Vec::new();
        if let Some(p) = &self.phase {
            labels.push(Label { key: PHASE_SOURCE_LABEL.into(), value: "traceback".into() });
            labels.push(Label { key: PHASE_CLUE_LABEL.into(), value: clip(&p.clue) });
        }
        if let Some(e) = self.host_evidence {
            labels.push(Label { key: host::EVIDENCE_LABEL.into(), value: e.as_str().into() });
        }
        if let Some(h) = self.hint {
            labels.push(Label { key: MESSAGE_HINT_LABEL.into(), value: h.into() });
        }
        if let Some(o) = &self.op {
            labels.push(Label { key: MESSAGE_OP_LABEL.into(), value: clip(o) });
        }
        labels
    }

    /// One JSON object (one line), the keys of `JsonOom` in order.
    pub fn to_json(&self) -> String {
        let f = &self.fields;
        let j = JsonOom {
            kind: self.kind.as_str(),
            framework: self.framework,
            gpu_index: f.gpu,
            pid: f.pid,
            requested_bytes: f.requested,
            capacity_bytes: f.capacity,
            free_bytes: f.free,
            allocated_bytes: f.allocated,
            reserved_bytes: f.reserved,
            reserved_unallocated_bytes: self.reserved_unallocated(),
            process_used_bytes: f.process_used,
            other_processes: f
                .other_processes
                .iter()
                .map(|p| JsonProcess { pid: p.pid, used_bytes: p.used_bytes })
                .collect(),
            xid: self.xid,
            phase: self.phase.as_ref().map(|p| p.phase.as_str()),
            phase_clue: self.phase.as_ref().map(|p| p.clue.as_str()),
            host_evidence: self.host_evidence.map(HostEvidence::as_str),
            hint: self.hint,
            op: self.op.as_deref(),
            line: self.line,
        };
        // Serialising plain integers, options and strings cannot fail.
        serde_json::to_string(&j).unwrap_or_default()
    }

    /// A human summary: a headline and the numbers that are known.
    pub fn summary(&self) -> String {
        let f = &self.fields;
        let mut s = format!("line {}: {} {}", self.line, self.framework, self.kind.as_str());
        if let Some(g) = f.gpu {
            let _ = write!(s, " on GPU {g}");
        }
        if let Some(p) = f.pid {
            let _ = write!(s, ", pid {p}");
        }
        if let Some(x) = self.xid {
            let _ = write!(s, ", Xid {x}");
        }
        if let Some(e) = self.host_evidence {
            let _ = write!(s, " (host memory: {})", e.as_str());
        }
        if let Some(p) = &self.phase {
            let _ = write!(s, "\n  {:<25} {} ({})", "phase", p.phase.as_str(), p.clue);
        }
        if let Some(h) = self.hint {
            let _ = write!(s, "\n  {:<25} {h}", "message");
        }
        if let Some(o) = &self.op {
            let _ = write!(s, "\n  {:<25} {o}", "failing code");
        }
        let size = |v: u64| format!("{} ({v} B)", units::format_size(v));
        for (label, v) in [
            ("requested", f.requested),
            ("capacity", f.capacity),
            ("free", f.free),
            ("allocated", f.allocated),
            ("reserved", f.reserved),
            ("reserved but unallocated", self.reserved_unallocated()),
            ("process used", f.process_used),
        ] {
            if let Some(v) = v {
                let _ = write!(s, "\n  {label:<25} {}", size(v));
            }
        }
        for p in &f.other_processes {
            let _ = write!(s, "\n  {:<25} {}", format!("process {}", p.pid), size(p.used_bytes));
        }
        s
    }
}

/// Raw lines of an event, bounded in count and bytes.
#[derive(Debug, Default)]
struct RawLines {
    lines: Vec<String>,
    bytes: usize,
    omitted: u64,
}

impl RawLines {
    fn push(&mut self, line: &str) {
        if self.lines.len() < MAX_EVENT_LINES && self.bytes + line.len() < MAX_RAW_BYTES {
            self.bytes += line.len() + 1;
            self.lines.push(line.to_owned());
        } else {
            self.omitted += 1;
        }
    }

    fn into_lines(mut self) -> Vec<String> {
        if self.omitted > 0 {
            self.lines.push(format!("[oomlens: {} more lines not kept]", self.omitted));
        }
        self.lines
    }
}

/// One line as fed: as printed (`raw`), without its prefixes and its traceback's indent (`body`),
/// and its compact form (`c`).
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    raw: &'a str,
    body: &'a str,
    c: &'a str,
}

/// A traceback that may end in an OOM.
#[derive(Debug)]
struct Traceback {
    start: u64,
    origin: Origin,
    head: Vec<String>,
    tail: VecDeque<String>,
    omitted: u64,
    /// Lines since the exception line (the first line that is not a frame).
    since_exception: Option<u32>,
    /// The out-of-memory failure an IPython header named (`ResourceExhaustedError   Traceback
    /// (most recent call last)`): reported from the traceback alone if its message never comes
    /// (a paste cut after the frames).
    named: Option<Family>,
}

impl Traceback {
    fn new(start: u64, origin: Origin, line: &str) -> Self {
        Traceback {
            start,
            origin,
            head: vec![line.to_owned()],
            tail: VecDeque::new(),
            omitted: 0,
            since_exception: None,
            named: None,
        }
    }

    fn push(&mut self, line: &str) {
        if self.head.len() < TRACEBACK_HEAD {
            self.head.push(line.to_owned());
            return;
        }
        if self.tail.len() == TRACEBACK_TAIL {
            self.tail.pop_front();
            self.omitted += 1;
        }
        self.tail.push_back(line.to_owned());
    }

    fn bytes(&self) -> usize {
        self.head.iter().chain(&self.tail).map(String::len).sum()
    }

    fn lines(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    fn into_raw(self) -> RawLines {
        let mut raw = RawLines::default();
        for l in &self.head {
            raw.push(l);
        }
        if self.omitted > 0 {
            raw.push(&format!("[oomlens: {} traceback lines not kept]", self.omitted));
        }
        for l in &self.tail {
            raw.push(l);
        }
        raw
    }
}

/// Words of a failure that a terminal's hard wrap may cut in two.
const WRAPPED_WORDS: [&str; 13] = [
    "outofmemory",
    "triedtoallocate",
    "failedtoallocate",
    "oomwhenallocating",
    "resource_exhausted",
    "cudamalloc",
    "memoryallocation",
    // vLLM's start-up check (`… that can be stored in K` / `V cache (23648)`).
    "storedinkvcache",
    // A host symptom's (`… driver state change (ex` / `it code: 137)`).
    "exitcode",
    "exitstatus",
    "terminated",
    "killed",
    "signal",
];

/// A device's memory named across a cut between the two words (`… would fit in free GPU` / `
/// memory`): only this whole split, not every cut inside `gpumemory` as [`WRAPPED_WORDS`] are
/// asked — a long line ending in `g` (any `…ing`) would be held for the next one.
const DEVICE_MEMORY_CUT: (&str, &str) = ("gpu", "memory");

/// Words of a line that begins to report a failure.
const FAILURE_WORDS: [&str; 12] = [
    "error",
    "fail",
    "memory",
    "alloc",
    "oom",
    "exhausted",
    "unable",
    "notenough",
    "kill",
    "signal",
    "exit",
    "terminat",
];

/// A line held for the next one: a head whose message may follow (see `LogParser::head`).
#[derive(Debug)]
struct Held {
    /// Its number.
    line: u64,
    /// Its text as printed (the pieces of a line a terminal cut, joined).
    raw: String,
    /// Its compact form.
    c: String,
    /// Its prefix's origin.
    origin: Origin,
    /// The width of its last piece, in characters.
    width: usize,
    /// Held for its words: it ends in a colon, speaks of a failure or ends inside one of
    /// [`WRAPPED_WORDS`] ([`may_wrap_failure`]). A line held only because it fills a terminal's
    /// width is read with the next one only when the two make a program's own failure
    /// (the wide cut of `LogParser::feed_cleaned`), never one of the last-resort wordings.
    words: bool,
}

impl Held {
    /// True when `raw` (compact `c`, of `origin`) is the next piece of the same terminal line:
    /// the held line fills a terminal's width, this line has exactly that width (or one less, a
    /// space at the cut trimmed), the same origin, and the pieces stay within twice a head's
    /// bound (compact and as printed). Only a piece that starts nothing on its own is asked.
    fn continued_by(&self, raw: &str, c: &str, origin: &Origin) -> bool {
        let width = raw.chars().count();
        self.width >= MIN_WRAP_WIDTH
            && (width == self.width || width + 1 == self.width)
            && self.origin.compatible(origin)
            && self.c.len() + c.len() <= 2 * MAX_HEAD_BYTES
            && self.raw.len() + raw.len() <= 2 * text::MAX_LINE_BYTES
    }

    /// The held line with the next piece appended.
    fn extended(mut self, raw: &str, c: &str) -> Held {
        self.raw.push_str(raw);
        self.c.push_str(c);
        self.width = raw.chars().count();
        self
    }
}

/// Words of a failure (compact) one of which a failure's words split by a cut show near it.
const NEAR_CUT: [&str; 9] = ["mem", "alloc", "oom", "kill", "exhaust", "fail", "error", "137", "signal"];

/// Bytes on each side of a cut [`failure_near_cut`] looks at.
const NEAR_CUT_BYTES: usize = 32;

/// True when the compact text around a cut — the end of `head` and the start of `next` — holds one
/// of [`NEAR_CUT`]: a quick test before the two lines are read together (`reads_apart` decides).
fn failure_near_cut(head: &str, next: &str) -> bool {
    let mut from = head.len().saturating_sub(NEAR_CUT_BYTES);
    while !head.is_char_boundary(from) {
        from += 1;
    }
    let mut to = next.len().min(NEAR_CUT_BYTES);
    while !next.is_char_boundary(to) {
        to -= 1;
    }
    let window = format!("{}{}", &head[from..], &next[..to]);
    NEAR_CUT.iter().any(|w| window.contains(w))
}

/// True for a character a word is made of: a hard wrap that falls between two of them cut a word.
fn word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// True when a line fills a terminal's width: at least [`MIN_WRAP_WIDTH`] characters before its
/// trailing blanks.
fn fills_width(raw: &str) -> bool {
    raw.len() >= MIN_WRAP_WIDTH && raw.trim_end().chars().nth(MIN_WRAP_WIDTH - 1).is_some()
}

/// True when a long line (`raw`, compact `c`) may be the first part of a failure a terminal
/// hard-wrapped: at least [`MIN_WRAP_WIDTH`] characters, and it speaks of a failure or ends inside
/// one of [`WRAPPED_WORDS`] ([`wrapped_failure`] decides with the next line).
fn may_wrap_failure(raw: &str, c: &str) -> bool {
    fills_width(raw)
        && (FAILURE_WORDS.iter().any(|w| c.contains(w))
            || WRAPPED_WORDS.iter().any(|w| (1..w.len()).any(|k| c.ends_with(&w[..k])))
            || c.ends_with(DEVICE_MEMORY_CUT.0))
}

/// True when a long line (compact `head`, see [`may_wrap_failure`]) and the next (`next`) may be
/// one line a terminal hard-wrapped: one of [`WRAPPED_WORDS`] runs across the cut (`… CUDA out
/// of mem` / `ory. Tried to allocate …`), or the long line already speaks of a failure (`Error
/// while calling cudaMalloc(…) in file …/gpu` / `_data.cpp:191. code: 2, reason: out of memory`).
/// A long line of other words is not joined to the next: its device words (`loading in lowvram
/// mode`) would lend a warning after it a failure it does not report.
fn wrapped_failure(head: &str, next: &str) -> bool {
    FAILURE_WORDS.iter().any(|w| head.contains(w)) || words_cut(head, next)
}

/// True when a held line and the next read as a failure even with the two kept apart (compact
/// `head_c` and `c`, bodies `head_body` and `raw` joined with a separator no word runs across):
/// the failure's words are not the ones a cut split, so a long line of other words before it
/// (`loaded partially; … lowvram patches: 0`) is not taken as its first part.
fn reads_apart(head_c: &str, c: &str, head_body: &str, raw: &str) -> bool {
    const APART: char = '\u{1}';
    frameworks::detect(&format!("{head_c}{APART}{c}")).is_some()
        || host::detect(&format!("{head_body}{APART}{raw}")).is_some()
}

/// True when one of [`WRAPPED_WORDS`] runs across the end of compact `head` into compact `next`
/// (`… torch.OutOfMemor` / `yError: CUDA out of memory. …`).
fn words_cut(head: &str, next: &str) -> bool {
    WRAPPED_WORDS.iter().any(|w| (1..w.len()).any(|k| head.ends_with(&w[..k]) && next.starts_with(&w[k..])))
        || (head.ends_with(DEVICE_MEMORY_CUT.0) && next.starts_with(DEVICE_MEMORY_CUT.1))
}

/// True when `body` is a source file's location alone: one word with a path separator, ending in
/// `:N` (`/opt/conda/…/THCStorage.cu:58`, `C:\…\alloc.cpp:73`).
fn source_location(body: &str) -> bool {
    let t = body.trim();
    !t.contains(char::is_whitespace)
        && t.contains(['/', '\\'])
        && t.rsplit_once(':').is_some_and(|(path, n)| {
            path.contains('.') && !n.is_empty() && n.len() <= 6 && n.bytes().all(|b| b.is_ascii_digit())
        })
}

/// True when a line's start (`family`, its host symptom, compact text `c`) was read only by the
/// last-resort wordings of `generic.rs`, no program's own rule.
fn generic_reading(family: Family, symptom: Option<&HostSymptom>, c: &str) -> bool {
    match family {
        Family::Host => symptom.is_some_and(|s| s.framework == host::GENERIC),
        Family::Cuda => frameworks::other_device_failure(c),
        _ => false,
    }
}

/// True when a logger's prefix marks the line as debug, info or warning: not a failure's report.
fn quiet_level(o: &Origin) -> bool {
    matches!(o.level, Some(b'D' | b'I' | b'W'))
}

/// The decoration before a line's text — its prefixes and indent: `None` when `body` (the line
/// without its prefixes) does not end `raw`.
fn lead<'a>(raw: &'a str, body: &str) -> Option<&'a str> {
    let (raw, text) = (raw.trim_end(), body.trim());
    let at = raw.len().checked_sub(text.len())?;
    (raw.get(at..) == Some(text)).then(|| &raw[..at])
}

/// True when decoration `lead` begins decoration `prev` alike: the same characters, any digit
/// for a digit (a stamp's time).
fn begins_alike(prev: &str, lead: &str) -> bool {
    let mut p = prev.chars();
    lead.chars().all(|c| p.next().is_some_and(|d| d == c || (d.is_ascii_digit() && c.is_ascii_digit())))
}

/// True when a line (`raw`, `body` without its prefixes, of `origin`) may be a piece a terminal's
/// hard wrap moved to a line of its own after a line whose decoration was `prev_lead` ([`lead`])
/// and whose text began with `prev_start` (of `prev_origin`'s stream): no logger's level or stream
/// of its own (a key other than that line's or one outside it), decorated as the line before or
/// less (a paste's quote markers or indent, a stamp on every line of a log, on every piece; a
/// logger's prefix on the first piece only), not indented beyond that (a frame's, a
/// continuation's; one space more is the space a cut moved), and not begun with the stamp that
/// began the line before (a logger's next line, its stamp unknown to the prefix grammars:
/// [`same_start`]).
/// Returns the decoration's width in characters, which the line before shares: the terminal's
/// width is what follows it.
fn wrap_piece(
    prev_lead: &str,
    prev_start: &str,
    prev_origin: &Origin,
    raw: &str,
    body: &str,
    origin: &Origin,
) -> Option<usize> {
    let lead = lead(raw, body)?;
    // A cut right before a space moves that space to the piece (`… and type float` / ` on
    // /job:localhost/…/device:GPU:0`): one space beyond the line's decoration is the text's.
    let lead = match lead.strip_suffix(' ') {
        Some(decoration) if decoration == prev_lead => decoration,
        _ => lead,
    };
    (origin.level.is_none()
        && (origin.key.is_empty() || origin.key == prev_origin.key || origin.holds(prev_origin))
        && begins_alike(prev_lead, lead)
        && !same_start(prev_start, body))
    .then(|| lead.chars().count())
}

/// True when `line` may be the tail of a terminal's wrap of `head` (both without their
/// prefixes): the head's own text fills a terminal's width ([`MIN_WRAP_WIDTH`]; a logger's stamp
/// before it does not count), and the line is indented deeper than the head (` with signal 9 ->
/// abort job`) or it begins in lower case or with a digit (inside a word or a number the cut
/// split) — not a line its logger began as it began the head (a stamp, a bracket, a capital:
/// [`same_start`]). Asked only of a line that already reads as a failure on its own words.
fn looks_like_tail(head: &str, line: &str) -> bool {
    let indent = |s: &str| s.len() - s.trim_start().len();
    head.trim().chars().nth(MIN_WRAP_WIDTH - 1).is_some()
        && (indent(line) > indent(head)
            || line.trim_start().starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()))
        && !same_start(head, line)
}

/// True when a held line (compact `head`) and the next (compact `c`, read alone as `alone`'s
/// failure) read together say more than the line alone: another family's failure, another
/// program's words (`… ggml_backend_cuda_buffer_type_alloc_buffer: allocating 422` / `00 MiB on
/// device 0: cudaMalloc failed: out of memory` is llama.cpp's, not MXNet's) or more numbers.
fn joined_says_more(head: &str, c: &str, alone: Family) -> bool {
    let joined = format!("{head}{c}");
    let read = |t: &str, family: Family| {
        let mut f = Fields::default();
        if family == Family::Torch {
            pytorch::extract(t, &mut f);
        } else {
            frameworks::extract(t, &mut f);
        }
        f
    };
    match frameworks::detect(&joined) {
        Some(f) if f != alone => true,
        Some(f) => {
            frameworks::framework(f.bit(), &joined, None) != frameworks::framework(f.bit(), c, None)
                || read(&joined, f) != read(c, f)
        }
        None => false,
    }
}

/// True when two lines begin alike with a stamp — the same classes of character (digits,
/// letters, the same punctuation) for [`START_SHAPE`] characters, not letters alone: a logger's
/// stamp the prefix grammars do not know (`2022-09-22 01:17:40 [28,987ms] [Error] …`, llama.cpp's
/// `1.06.520.084 E …`) begins both, so the second is a line of its own.
fn same_start(a: &str, b: &str) -> bool {
    let class = |c: char| match c {
        '0'..='9' => '9',
        c if c.is_alphabetic() => 'a',
        c => c,
    };
    let (a, b) = (a.trim_start(), b.trim_start());
    a.chars().nth(START_SHAPE - 1).is_some()
        && a.chars().take(START_SHAPE).any(|c| class(c) != 'a')
        && a.chars().zip(b.chars()).take(START_SHAPE).filter(|(x, y)| class(*x) == class(*y)).count()
            == START_SHAPE
}

/// A traceback's source line that raises the failure (`    raise ValueError("No available memory
/// for the cache blocks. "`): the code, not the report — the exception line after it is. A paste
/// that ran the two together (`raise X("…") X: …`) is the report.
fn raise_source(body: &str) -> bool {
    let t = body.trim_start();
    t.starts_with("raise ") && !t.contains("Error:") && !t.contains("Exception:")
}

/// True when a number-less failure's first line (compact, `later`) says what an earlier one's
/// (`earlier`) said: the same words, or the same words after a wrapper's exception name
/// re-raising it (`ApiError: 500 Internal Server Error: CUDA error: out of memory` after `500
/// Internal Server Error: CUDA error: out of memory`) — not after other words glued before it (a
/// progress bar without its newline, before the next failure's).
fn same_words(earlier: &str, later: &str) -> bool {
    earlier == later
        || (earlier.len() >= MIN_SAME_WORDS
            && later.strip_suffix(earlier).is_some_and(|wrapper| wrapper.ends_with(':')))
}

/// True when a number-less failure (compact signature `later`) is the error old PyTorch or
/// Torch7 raised after its C check printed `THCudaCheck FAIL … error=2 : out of memory` (the
/// signature `earlier`): `cuda runtime error (2) : out of memory at …`, in a Python or a Lua
/// traceback (`…/luajit: …/Container.lua:67:`, `In 2 module of nn.Sequential:`, then the error).
fn thc_check_raised(earlier: &str, later: &str) -> bool {
    earlier.contains("thcudacheckfail") && later.contains("cudaruntimeerror(2):outofmemory")
}

/// Python's traceback header.
fn traceback_header(body: &str) -> bool {
    body.starts_with("Traceback (most recent call last)")
}

fn is_frame(body: &str) -> bool {
    body.starts_with([' ', '\t'])
        || frames::notebook_active(body).is_some()
        || frames::boxed_line(body)
        || frames::frame_of(body).is_some()
        || frames::frame_piece(body)
        || body.starts_with("Traceback (most recent call last)")
        || body.starts_with("During handling of the above exception")
        || body.starts_with("The above exception was the direct cause")
}

/// A line of the native stack PaddlePaddle prints between Python's exception line and its own
/// message: its header (`C++ Traceback (most recent call last):`, `Error Message Summary:`) or a
/// numbered frame (`0   paddle::framework::…`, `3       0x7f21…p paddle::platform::…`).
fn native_frame(body: &str) -> bool {
    let t = body.trim_start();
    t.starts_with("C++ Traceback")
        || t.starts_with("Error Message Summary")
        || t.split_once(char::is_whitespace).is_some_and(|(n, rest)| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && rest.starts_with(char::is_whitespace)
                && (rest.contains("::") || rest.trim_start().starts_with("0x"))
        })
}

/// IPython's traceback header, `ResourceExhaustedError                    Traceback (most recent
/// call last)`: `Some(family)` when the exception it names is an out-of-memory failure
/// (TensorFlow's `ResourceExhaustedError`, PyTorch's `OutOfMemoryError`), `Some(None)` for any
/// other exception, `None` when the line is not such a header.
fn ipython_header(body: &str) -> Option<Option<Family>> {
    let (name, rest) = body.trim_end().split_once(char::is_whitespace)?;
    if rest.trim_start() != "Traceback (most recent call last)"
        || !rest.starts_with("  ")
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    {
        return None;
    }
    Some(match name.rsplit('.').next().unwrap_or(name) {
        "ResourceExhaustedError" => Some(Family::TfTensor),
        "OutOfMemoryError" => Some(Family::Torch),
        _ => None,
    })
}

/// An event still taking lines.
#[derive(Debug)]
struct Pending {
    family: Family,
    families: u16,
    origin: Origin,
    start: u64,
    raw: RawLines,
    compact: String,
    fields: Fields,
    idle: u32,
    complete: bool,
    /// Compact text of the first OOM line (tells number-less failures apart).
    signature: String,
    /// Value of the parser's line counter when the event opened.
    fed_start: u64,
    /// The strongest host-memory symptom of a [`Family::Host`] event.
    host: Option<HostSymptom>,
    /// The event began with a traceback.
    traceback: bool,
    /// The last line taken was a frame printed after the message (a debugger's innermost-first
    /// frames): its source line may follow.
    after_frame: bool,
    /// A traceback began right after the message and is being taken: a C-level check printed
    /// before Python raises the error (old PyTorch's `THCudaCheck FAIL … error=2 : out of
    /// memory`), or an application or logger that reports the error and then its traceback
    /// (web UIs, `logging.exception`). Its frames place the failure; its exception line, when it
    /// is the same failure again, ends it.
    in_traceback: bool,
    /// Where that traceback begins: its index in `raw` and its line number.
    taken_traceback: Option<(usize, u64)>,
    /// What it keeps of the last line it took, to read the next one whole when a terminal's hard
    /// wrap cut it.
    last: LastLine,
}

/// What an event keeps of the last line it took ([`Pending::cut_before`]).
#[derive(Debug, Default)]
struct LastLine {
    /// The parser's line counter when it was taken.
    fed: u64,
    /// Its characters.
    width: usize,
    /// When it filled a terminal's width: its decoration ([`lead`]), its text's first characters,
    /// the compact text of its pieces so far (the line as the terminal printed it before the cut,
    /// read again whole when a piece follows, so that a number or a phrase the cut split is read
    /// as printed), and the event's fields before its first piece.
    lead: String,
    start: String,
    piece: String,
    before_piece: Fields,
}

impl Pending {
    fn idle_limit(&self) -> u32 {
        match self.family {
            Family::Torch => 16,
            Family::Bfc => 256,
            Family::TfTensor | Family::Jax => 32,
            Family::Host => 16,
            _ => 8,
        }
    }

    fn push_line(&mut self, line: Line<'_>, origin: &Origin, fed: u64) {
        let cut = self.cut_before(&line, origin, fed);
        let Line { raw, body, c: compact } = line;
        self.after_frame = frames::frame_of(body).is_some();
        self.in_traceback = traceback_header(body) || (self.in_traceback && is_frame(body));
        self.raw.push(raw);
        self.idle = 0;
        self.last.fed = fed;
        self.last.width = raw.chars().count();
        if self.last.width >= MIN_WRAP_WIDTH {
            self.last.lead.clear();
            self.last.lead.push_str(lead(raw, body).unwrap_or_default());
            self.last.start.clear();
            self.last.start.extend(body.trim_start().chars().take(START_SHAPE));
        }
        if self.in_traceback {
            // Frames only place the failure (`phase_of` reads them from `raw`); its words and
            // numbers are the message's.
            self.last.width = 0;
            return;
        }
        let before = self.compact.len();
        if self.compact.len() + compact.len() <= MAX_COMPACT_BYTES {
            self.compact.push_str(compact);
        }
        if self.signature.is_empty() {
            self.signature = oomlens_schema::text::clip(compact, 256).to_owned();
        }
        if self.family != Family::Torch {
            if cut && !self.last.piece.is_empty() {
                // The next piece of a line a terminal cut: the line read whole (`… allocate 740` /
                // `6166528 bytes.`), what the pieces said alone filling the rest.
                self.last.piece.push_str(compact);
                let mut whole = self.last.before_piece.clone();
                frameworks::extract(&self.last.piece, &mut whole);
                frameworks::extract(compact, &mut self.fields);
                whole.fill_from(&self.fields);
                self.fields = whole;
            } else {
                // Only a line that filled a terminal's width may have a next piece.
                self.last.piece.clear();
                if self.last.width >= MIN_WRAP_WIDTH && compact.len() <= MAX_PIECE_BYTES {
                    self.last.before_piece.clone_from(&self.fields);
                    self.last.piece.push_str(compact);
                }
                frameworks::extract(compact, &mut self.fields);
            }
        }
        self.fields.pid = self.fields.pid.or(origin.pid);
        self.fields.gpu = self.fields.gpu.or(origin.gpu);
        // The event's stream: the first key it meets, narrowed to an inner prefix's (a service's
        // line, then its launcher's rank's: `svctrainer-1` → `svctrainer-1|rank0`).
        if (self.origin.key.is_empty() && !origin.key.is_empty()) || self.origin.holds(origin) {
            self.origin.key.clone_from(&origin.key);
        }
        self.idle = 0;
        if self.family == Family::Torch && !self.complete {
            // The appended text and the 96 bytes before it (a phrase may straddle the wrap).
            let mut from = before.saturating_sub(96);
            while !self.compact.is_char_boundary(from) {
                from -= 1;
            }
            self.complete = pytorch::complete(&self.compact[from..]);
        }
    }

    /// Keeps the strongest host symptom (and the first pid named); of two as strong, a program's
    /// own words over the last-resort wordings' (`generic.rs`).
    fn add_symptom(&mut self, s: Option<HostSymptom>) {
        let Some(s) = s else {
            return;
        };
        let pid = s.pid;
        let rank = |h: &HostSymptom| (h.evidence.strength(), h.framework != host::GENERIC);
        match &mut self.host {
            Some(h) if rank(h) >= rank(&s) => h.pid = h.pid.or(pid),
            h => *h = Some(HostSymptom { pid: pid.or(h.as_ref().and_then(|x| x.pid)), ..s }),
        }
    }

    /// True when this event is only C++'s announcement of an uncaught OOM exception (`terminate
    /// called after throwing an instance of 'c10::OutOfMemoryError'`) and `family` starts its
    /// message (`  what():  CUDA out of memory. Tried to allocate …`): one failure. Also when
    /// PyTorch's 1.x message was hard-wrapped right before its clause of numbers, which would
    /// otherwise start a headless message of its own (`… Tried to allocate 1.86 GiB` / `(GPU 0;
    /// 4.00 GiB total capacity; …`), and when [`Self::llama_host_buffer`].
    fn announces(&self, family: Family, c: &str) -> bool {
        let torch = self.family == Family::Torch && family == Family::Torch;
        (torch
            && self.compact.starts_with("terminatecalledafterthrowinganinstanceof")
            && !self.compact.contains("what()"))
            || (torch
                && !self.complete
                && (c.starts_with("(gpu") || c.starts_with("(npu"))
                && self.compact.contains("triedtoallocate")
                && !self.compact.contains("(gpu")
                && !self.compact.contains("(npu"))
            || self.headline_of(family, c)
            || (family == Family::Ggml && self.llama_host_buffer())
            // The TPU compiler's account of the memory after its headline.
            || (self.family == Family::Jax && family == Family::Jax && frameworks::tpu_usage_summary(c))
            // A paste that begins at TensorFlow's OOM advice (the trailer of an error cut off
            // above it), then the error's next root error: one failure.
            || (self.family == Family::TfTensor
                && family == Family::TfTensor
                && frameworks::tf_oom_hint(&self.compact)
                && !self.compact.contains("resourceexhausted")
                && !self.compact.contains("oomwhenallocating"))
    }

    /// True when this event is so far only the headline of a PyTorch OOM — its message's lines
    /// end with the exception's name or `CUDA out of memory.`, no number yet — and `c`, a PyTorch
    /// line right after it (a blank line between at most), goes on with its message: a paste that
    /// broke the line after the headline (`torch.OutOfMemoryError: CUDA out of memory.` / `Tried
    /// to allocate 1.02 GiB. GPU 0 has …`; `torch.cuda.OutOfMemoryError:` / `CUDA out of memory.`
    /// / `Tried to allocate …`).
    fn headline_of(&self, family: Family, c: &str) -> bool {
        family == Family::Torch
            && self.idle <= 1
            && self.headline()
            && (c.contains("triedtoallocate")
                || c.starts_with("cudaoutofmemory")
                || c.starts_with("hipoutofmemory"))
    }

    /// True when the line this event took last (the line before, `fed` being this one's number)
    /// ends inside one of [`WRAPPED_WORDS`] that compact line `c` completes: one line a hard or a
    /// word wrap cut inside the failure's words (`… OutOfMemoryError('CUDA out` / `of memory.
    /// Tried to allocate 128.00 MiB. …`), whose second piece reads as a failure of its own.
    fn words_run_on(&self, c: &str, fed: u64) -> bool {
        self.last.fed + 1 == fed
            && WRAPPED_WORDS
                .iter()
                .any(|w| (1..w.len()).any(|k| self.compact.ends_with(&w[..k]) && c.starts_with(&w[k..])))
    }

    /// True when this event's message so far is only a PyTorch OOM's headline, or a device's
    /// `… out of memory.` in a program's words (`Generation failed: NPU out of memory.`), whose
    /// message may follow ([`Self::headline_of`]).
    fn headline(&self) -> bool {
        matches!(self.family, Family::Torch | Family::Cuda)
            && !self.in_traceback
            && self.compact.len() <= MAX_HEAD_BYTES
            && !self.compact.contains("triedtoallocate")
            && HEADLINE_ENDS.iter().any(|end| self.compact.ends_with(end))
    }

    /// True when `body` is (the next line of) a traceback printed right after this event's message
    /// ([`Self::in_traceback`]); not for an event that began with its own traceback, nor for a
    /// host-memory symptom (a process killed from outside has no traceback of its failure).
    fn takes_traceback(&self, body: &str) -> bool {
        if self.in_traceback {
            return is_frame(body) && !traceback_header(body);
        }
        !self.traceback && self.family != Family::Host && self.idle == 0 && traceback_header(body)
    }

    /// Gives up the traceback it took ([`Self::in_traceback`]) when that traceback ends in another
    /// failure, whose own it is: its first line number and its lines.
    fn give_up_traceback(&mut self) -> Option<(u64, RawLines)> {
        let (at, line) = self.taken_traceback.take()?;
        self.in_traceback = false;
        let mut raw = RawLines::default();
        for l in self.raw.lines.drain(at.min(self.raw.lines.len())..) {
            self.raw.bytes = self.raw.bytes.saturating_sub(l.len() + 1);
            raw.push(&l);
        }
        Some((line, raw))
    }

    /// True when this event is llama.cpp's CPU backend refusing a host buffer: the engine's lines
    /// that follow (`llama_kv_cache_init: failed to allocate buffer for kv cache`, `failed to load
    /// model`) report that same failure.
    fn llama_host_buffer(&self) -> bool {
        self.family == Family::Host && self.host.as_ref().is_some_and(|h| h.framework == "llama.cpp")
    }

    /// True when `line` (the parser's `fed`-th, of `origin`) may be the next piece of the last line
    /// this event took, cut by a terminal's hard wrap: it comes right after it, that line filled a
    /// terminal's width ([`MIN_WRAP_WIDTH`]), and this one is decorated as a piece ([`wrap_piece`]).
    fn cut_before(&self, line: &Line<'_>, origin: &Origin, fed: u64) -> bool {
        let Line { raw, body, c } = *line;
        self.last.fed + 1 == fed
            && self.last.width >= MIN_WRAP_WIDTH
            && self.last.piece.len() + c.len() <= MAX_PIECE_BYTES
            && wrap_piece(&self.last.lead, &self.last.start, &self.origin, raw, body, origin)
                .is_some_and(|lead| self.last.width.saturating_sub(lead) >= MIN_WRAP_WIDTH)
    }

    /// True when `line` is the next piece of a line of this event that a terminal cut
    /// ([`Self::cut_before`]) and the two read whole say more than apart: a number or a phrase
    /// runs across the cut (`… requested buffer of size 2830` / `172160`, `… at …/THC/generic` /
    /// `/THCStorage.cu:58`, old PyTorch's own storage). Asked of a line no event takes by its own
    /// words.
    fn continued_by_wrap(&self, line: &Line<'_>, origin: &Origin, fed: u64) -> bool {
        // A word wrap after `… out of memory at` (old PyTorch's THC): the next line is the source
        // location the message names, `/…/THC/generic/THCStorage.cu:58`.
        if self.last.fed + 1 == fed
            && !self.in_traceback
            && self.compact.ends_with("outofmemoryat")
            && source_location(line.body)
        {
            return true;
        }
        if !self.cut_before(line, origin, fed) || self.in_traceback {
            return false;
        }
        if self.family == Family::Torch {
            if self.complete {
                return false;
            }
            let joined = format!("{}{}", self.compact, line.c);
            let mut apart = Fields::default();
            pytorch::extract(&self.compact, &mut apart);
            let mut whole = Fields::default();
            pytorch::extract(&joined, &mut whole);
            return whole != apart || pytorch::complete(&joined);
        }
        // The middle piece of a line cut in three or more — as wide as the piece before, which
        // does not end a sentence, and going on inside a word or a number or with a character no
        // line begins with — is the line's though it says nothing alone: the pieces after it are
        // read with it (`… [[node lm/RNN_0/…/min (` / `defined at …/training.py:410)  =
        // Const[_class=["loc:` / `@lm/RNN_0/…` / `… _device="/job:…/device:GPU:0"]()]]`).
        let width = line.raw.chars().count();
        if (width == self.last.width || width + 1 == self.last.width)
            && self.last.piece.ends_with(|c: char| !".!?".contains(c))
            && line.body.trim_start().starts_with(|c: char| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || "@\"')]},.:;_-=/".contains(c)
            })
        {
            return true;
        }
        let joined = format!("{}{}", self.last.piece, line.c);
        let mut whole = self.last.before_piece.clone();
        frameworks::extract(&joined, &mut whole);
        whole.fill_from(&self.fields);
        // Or the event's whole text, read as the event reads it when it ends (PyTorch's words and
        // every framework's), says more with the piece: a size the cut split in PyTorch's words of
        // another family's line (`DefaultCPUAllocator: can't allocate memory: yo` / `u tried to
        // allocate 90177536 bytes.`), a reading that needs the message's head (TensorFlow's
        // device in a node line of the refused tensor's message).
        let read = |text: &str| {
            let mut f = Fields::default();
            pytorch::extract(text, &mut f);
            frameworks::extract(text, &mut f);
            f
        };
        whole != self.fields
            || hint::message_hint(&joined) != hint::message_hint(&self.last.piece)
            || read(&format!("{}{}", self.compact, line.c)) != read(&self.compact)
    }

    fn accepts(&self, body: &str, compact: &str, origin: &Origin) -> bool {
        if self.takes_traceback(body) {
            return true;
        }
        // The program reporting what the failure cost it: `Stable diffusion model failed to
        // load` after the message places the failure at load.
        if phase::model_load_failed(compact) {
            return true;
        }
        if self.family == Family::Torch {
            // Frames printed after a complete message (debuggers print innermost first), each
            // with its source line.
            let trailer = self.complete
                && (frames::frame_of(body).is_some()
                    || (self.after_frame && body.starts_with([' ', '\t']) && !body.trim().is_empty()));
            pytorch::continues(body) || trailer
        } else {
            frameworks::continues(self.family, compact, origin, self.fields.pid)
        }
    }
}

/// An event reported recently (for dropping repeated prints of it).
#[derive(Debug)]
struct Recent {
    fields: Fields,
    /// A host-memory symptom (the kind of the event).
    host: bool,
    framework: &'static str,
    key: String,
    signature: String,
    ended: u64,
}

/// The streaming parser. Feed it lines in order; it returns events as they close.
#[derive(Debug, Default)]
pub struct LogParser {
    line: u64,
    pending: Vec<Pending>,
    tracebacks: Vec<Traceback>,
    recent: VecDeque<Recent>,
    fed: u64,
    work: usize,
    duplicates: u64,
    /// The parser's counter at llama.cpp's last Metal warning that its buffers passed the GPU's
    /// recommended working set ([`METAL_OVER_BUDGET`]).
    metal_over_budget: Option<u64>,
    /// When (lines fed) the last device failure started: TensorFlow's OOM advice within
    /// [`TRAILER_LINES`] of it is that failure's trailer, not a failure of its own
    /// (`frameworks::tf_oom_hint`).
    device_failure_at: Option<u64>,
    /// The last serving-engine memory-profiling line: (line number, compact text).
    profile: Option<(u64, String)>,
    /// Workers gunicorn reported timed out (the newest [`MAX_TIMED_OUT`]): it kills them itself.
    timed_out: VecDeque<u32>,
    /// The previous line when it started nothing and ended in a colon or filled a terminal's width
    /// (`Held::words` when it may be a failure's first part, `may_wrap_failure`): a head whose
    /// message a hard wrap moved to the next line (`…State.hs:86 (unhandled): CUDA Exception:` /
    /// `out of memory`).
    head: Option<Held>,
    /// The indentation of a traceback header that was indented (a paste inside a list, a log
    /// quoted with spaces): removed from the lines after it while they have it, so that its
    /// frames and exception line read as they were printed.
    margin: String,
    /// The last line no event took (kept in one buffer, its line number and the parser's counter
    /// then): a failure that starts on the line after it begins with it when it is a source line
    /// of PyTorch's own code that places a failure (`phase::signature_line`; a paste that kept only
    /// the last source line of the traceback). Asked only when a failure starts, so a line costs a
    /// copy, not a search.
    untaken: String,
    untaken_at: (u64, u64),
}

/// llama.cpp's Metal backend when its buffers pass what macOS recommends for the GPU:
/// `ggml_metal_add_buffer: allocated 'data' buffer, size = 160.00 MB, (12018.69 / 10922.67),
/// warning: current allocated size is greater than the recommended max working set size` — its
/// first words (compact), which a terminal's wrap of that long line leaves whole.
const METAL_OVER_BUDGET: &str = "warning:currentallocatedsizeisgreaterthan";

/// Lines after [`METAL_OVER_BUDGET`] within which a failed Metal command buffer is read as its
/// consequence.
const METAL_BUDGET_LINES: u64 = 500;

/// Lines after a device failure's start within which TensorFlow's OOM advice is that failure's
/// trailer (its traceback and the error printed again by Python may lie between).
const TRAILER_LINES: u64 = 500;

impl LogParser {
    /// A Metal command buffer that failed (`ggml_metal_graph_compute: command buffer 0 failed with
    /// status 5`, `MTLCommandBufferStatusError`) after llama.cpp warned that its buffers passed
    /// the GPU's recommended working set: out of memory. Newer builds print the reason on the next
    /// line (`error: Insufficient Memory (… kIOGPUCommandBufferCallbackErrorOutOfMemory)`, read on
    /// its own); older ones print only the status, which alone can be a timeout or a fault.
    fn metal_failed_over_budget(&self, c: &str, fed: u64) -> Option<Family> {
        let warned = self.metal_over_budget.is_some_and(|at| fed.saturating_sub(at) <= METAL_BUDGET_LINES);
        (warned && c.contains("ggml_metal_graph_compute:commandbuffer") && c.contains("failedwithstatus5"))
            .then_some(Family::Ggml)
    }

    /// The family of the device failure compact line `c` (fed as line `fed`) starts
    /// (`frameworks::detect`) — but not TensorFlow's OOM advice within [`TRAILER_LINES`] of a
    /// device failure's start: the trailer of that failure.
    fn device_failure(&self, c: &str, fed: u64) -> Option<Family> {
        let trailer = || {
            frameworks::tf_oom_hint(c)
                && self.device_failure_at.is_some_and(|at| fed.saturating_sub(at) <= TRAILER_LINES)
        };
        frameworks::detect(c).filter(|_| !trailer())
    }

    /// A parser at line 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lines fed so far.
    pub fn lines_fed(&self) -> u64 {
        self.fed
    }

    /// The first line of the oldest event still open (pending message or traceback): an event
    /// closed later starts at this line or after it.
    pub fn earliest_open_line(&self) -> Option<u64> {
        self.pending.iter().map(|p| p.start).chain(self.tracebacks.iter().map(|t| t.start)).min()
    }

    /// Repeated prints of an already reported failure that were dropped.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Bytes of lines currently held (open events and the open traceback).
    pub fn buffered_bytes(&self) -> usize {
        self.pending.iter().map(|p| p.raw.bytes + p.compact.len()).sum::<usize>()
            + self.tracebacks.iter().map(Traceback::bytes).sum::<usize>()
    }

    /// Lines currently held.
    pub fn buffered_lines(&self) -> usize {
        self.pending.iter().map(|p| p.raw.lines.len()).sum::<usize>()
            + self.tracebacks.iter().map(Traceback::lines).sum::<usize>()
    }

    /// Bytes examined for the last line (bounded by [`MAX_LINE_WORK`]).
    pub fn last_line_work(&self) -> usize {
        self.work
    }

    /// Feeds the next line (with or without its newline); returns the events it closed. Lines
    /// are numbered 1, 2, … in the order fed.
    pub fn feed_line(&mut self, line: &str) -> Vec<ParsedOom> {
        self.feed_numbered_line(self.fed + 1, line)
    }

    /// Feeds a line whose number in its file is `number` (1-based): for callers that join
    /// physical lines (CRI / Docker partial lines) and report where each logical line began.
    /// A line holding a JSON record (`structured.rs`) is read as the lines its values carry, each
    /// numbered as the record's line.
    pub fn feed_numbered_line(&mut self, number: u64, line: &str) -> Vec<ParsedOom> {
        match structured::expand(line) {
            Some(lines) => lines.iter().flat_map(|l| self.feed_one(number, l)).collect(),
            None => self.feed_one(number, line),
        }
    }

    fn feed_one(&mut self, number: u64, line: &str) -> Vec<ParsedOom> {
        self.feed_cleaned(number, &text::clean(line))
    }

    /// [`Self::feed_numbered_line`] for one line already expanded and cleaned (`text::clean`):
    /// the mixed reader cleans each line once for both parsers.
    pub(crate) fn feed_cleaned(&mut self, number: u64, raw: &str) -> Vec<ParsedOom> {
        self.fed += 1;
        let fed = self.fed;
        self.line = number;
        let (body, origin) = prefix::strip(raw);
        let body = self.dedent(body);
        let c = text::compact(body);
        self.work = raw.len() + c.len();
        let mut out = Vec::new();

        if c.contains("memoryprofilingresults:") || c.contains("total_gpu_memory=") {
            self.profile = Some((self.line, c.clone()));
        }
        if c.contains(METAL_OVER_BUDGET) {
            self.metal_over_budget = Some(fed);
        }
        if let Some(pid) = host::worker_timeout_pid(body) {
            if self.timed_out.len() == MAX_TIMED_OUT {
                self.timed_out.pop_front();
            }
            self.timed_out.push_back(pid);
        }
        let mut symptom = None;
        // A test runner's line is read for its failure's reason only, never for the test's name
        // (`tests/test_oom.py::test_sigkill PASSED`).
        let test_line = runner::reason(body);
        let (read_body, read_c) = match test_line {
            Some(why) => (why, Cow::Owned(text::compact(why))),
            None => (body, Cow::Borrowed(c.as_str())),
        };
        let family = (!read_c.is_empty() && !raise_source(body))
            .then(|| {
                self.device_failure(&read_c, fed)
                    .or_else(|| bfc_dump(&origin, raw, &read_c))
                    .or_else(|| driver_alloc(&origin, &read_c))
                    .or_else(|| self.metal_failed_over_budget(&read_c, fed))
                    .or_else(|| {
                        symptom = host::detect(read_body)
                            .filter(|s| !self.launcher_explained(s, &origin) && !self.timeout_explained(s));
                        symptom.as_ref().map(|_| Family::Host)
                    })
            })
            .flatten();
        // A blank line between a head and its message (ComfyUI's `Error occurred when executing
        // KSampler:`, an empty line, `Allocation on device`) keeps the head.
        let head = if c.is_empty() { None } else { self.head.take() };
        // A line read only by the last-resort wordings (`generic.rs`) may be the tail of a held
        // line whose own words, joined, say more (`… terminated` + ` with signal 9 -> abort job`).
        let generic_only = family.is_none_or(|f| generic_reading(f, symptom.as_ref(), &c));
        // A logger's info or warning line is not a failure, whatever its words: read in words
        // no specific rule names (PyTorch's `[W906 …CUDACachingAllocator.cpp:3934] memory
        // allocation failed with OOM on device 0` before its own error), it starts nothing.
        let (family, symptom) = if family.is_some() && generic_only && quiet_level(&origin) {
            (None, None)
        } else {
            (family, symptom)
        };
        // A line that begins inside a word or a number after a held line that filled a terminal's
        // width and ends inside one (`00 MiB on device 0: cudaMalloc failed: out of memory` after
        // `… ggml_backend_cuda_buffer_type_alloc_buffer: allocating 422`) is read with it even when
        // its own words name a failure: the program that printed it (or the process, in its
        // prefix) is named before the cut.
        let piece_of = |h: &Held| {
            let head_body = prefix::strip(&h.raw).0;
            let start: String = head_body.trim_start().chars().take(START_SHAPE).collect();
            wrap_piece(lead(&h.raw, head_body).unwrap_or_default(), &start, &h.origin, raw, body, &origin)
                .is_some_and(|lead| h.width.saturating_sub(lead) >= MIN_WRAP_WIDTH)
        };
        let cut_tail = family.is_some()
            && head.as_ref().is_some_and(|h| {
                h.words && h.raw.trim_end().ends_with(|c: char| c.is_ascii_alphanumeric()) && piece_of(h)
            })
            && body.trim_start().starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && family.zip(head.as_ref()).is_some_and(|(alone, h)| {
                // Or the held line's prefix names the process the piece's words do not (vLLM's
                // `(VllmWorkerProcess pid=195295) ERROR … torch.OutOfMemor` / `yError: CUDA out of
                // memory. …`).
                joined_says_more(&h.c, &c, alone) || (h.origin.pid.is_some() && origin.pid.is_none())
            });
        // A line that starts nothing (or only a last-resort reading) after a line that filled a
        // terminal's width, decorated as its piece, the cut between two characters of a word: the
        // two may be one line whose failure words the cut split anywhere (MXNet's `…
        // pooled_storage_ma` / `nager.h:84: cudaMalloc failed: out of mem`, `kubectl`'s `… 0/1
        // OO` / `MKilled`) — read together, and kept only when a program's own rule reads them
        // and only across the cut (`reads_apart`).
        let wide_cut = generic_only
            && raw.starts_with(word_char)
            && head
                .as_ref()
                .is_some_and(|h| h.raw.ends_with(word_char) && failure_near_cut(&h.c, &c) && piece_of(h));
        // The held line and this one as a wrap by their words: this one starts nothing, or is the
        // tail of the held one, or a failure's words run across the cut.
        let by_words = head.as_ref().is_some_and(|h| {
            (family.is_none() || looks_like_tail(prefix::strip(&h.raw).0, body) || words_cut(&h.c, &c))
                && ((family.is_none() && h.c.ends_with(':')) || wrapped_failure(&h.c, &c))
        });
        let wrapped = match (generic_only || cut_tail, &head) {
            (true, Some(Held { line: number, raw: head_raw, c: head_c, origin: head_origin, .. }))
                if test_line.is_none() && head_origin.compatible(&origin) && (by_words || wide_cut) =>
            {
                // A device failure's words, else a host symptom's (matched on the line as it was
                // before the wrap: the head's body and this line's text).
                let joined_c = format!("{head_c}{c}");
                self.device_failure(&joined_c, fed)
                    .map(|f| (f, None))
                    .or_else(|| {
                        // Cut inside a word by a terminal's hard wrap, or at a space by a word
                        // wrap (`… DefaultCPUAllocator: not` / `enough memory: …`; a piece that
                        // goes on with a sentence begins in lower case, so only such a piece is
                        // read the second way).
                        let head_body = prefix::strip(head_raw).0;
                        host::detect(&format!("{head_body}{raw}"))
                            .or_else(|| {
                                raw.starts_with(|c: char| c.is_ascii_lowercase())
                                    .then(|| host::detect(&format!("{} {raw}", head_body.trim_end())))
                                    .flatten()
                            })
                            .filter(|s| {
                                !self.launcher_explained(s, head_origin) && !self.timeout_explained(s)
                            })
                            .map(|s| (Family::Host, Some(s)))
                    })
                    .filter(|(f, s)| {
                        !((quiet_level(head_origin) || !by_words)
                            && generic_reading(*f, s.as_ref(), &joined_c))
                            && (by_words || !reads_apart(head_c, &c, prefix::strip(head_raw).0, raw))
                    })
                    .map(|(f, s)| (f, s, *number, head_raw.clone(), head_c.clone(), head_origin.clone()))
            }
            _ => None,
        };
        let starts_nothing = family.is_none() && wrapped.is_none() && test_line.is_none();
        if let Some(held) = head.filter(|h| starts_nothing && h.continued_by(raw, &c, &origin)) {
            // The middle piece of a line a terminal cut into three or more: held with the
            // pieces before it, for the next piece to complete.
            self.head = Some(held.extended(raw, &c));
        } else if starts_nothing
            && c.len() <= MAX_HEAD_BYTES
            && (c.ends_with(':')
                || may_wrap_failure(raw, &c)
                || (fills_width(raw) && raw.ends_with(word_char)))
        {
            self.head = Some(Held {
                line: self.line,
                raw: raw.to_owned(),
                c: c.clone(),
                origin: origin.clone(),
                width: raw.chars().count(),
                words: c.ends_with(':') || may_wrap_failure(raw, &c),
            });
        }
        if let Some((family, wrapped_symptom, number, head_raw, head_c, head_origin)) = wrapped {
            // The head and its wrapped message: one failure that starts at the head.
            let this_line = self.line;
            self.line = number;
            let head = Line { raw: &head_raw, body: prefix::strip(&head_raw).0, c: &head_c };
            self.start(family, head, head_origin, wrapped_symptom, &mut out);
            self.line = this_line;
            if let Some(p) = self.pending.last_mut() {
                // The head was the line before this one.
                p.last.fed = fed.saturating_sub(1);
                p.push_line(Line { raw, body, c: &c }, &origin, fed);
            }
        } else if let Some(family) = family {
            self.start(family, Line { raw, body, c: &c }, origin, symptom, &mut out);
        } else {
            self.work += c.len() * self.pending.len();
            let line = Line { raw, body, c: &c };
            let taker = self
                .pending
                .iter()
                .rposition(|p| p.origin.compatible(&origin) && p.accepts(body, &c, &origin))
                .or_else(|| self.pending.iter().rposition(|p| p.continued_by_wrap(&line, &origin, fed)));
            match taker {
                Some(i) => {
                    // A line an event took is that event's, not a head a failure may begin with
                    // (`… | Tried to allocate 1.36 GiB.` behind a long logger prefix, then `GPU 0
                    // has a total capacity …`: the message's next sentence, not a new failure).
                    self.head = None;
                    let p = &mut self.pending[i];
                    p.push_line(Line { raw, body, c: &c }, &origin, fed);
                    if p.in_traceback && traceback_header(body) {
                        p.taken_traceback = Some((p.raw.lines.len().saturating_sub(1), self.line));
                    }
                }
                // PyTorch's advice on fragmentation, which only its OOM message prints, in a paste
                // that begins inside it (`llocated memory try setting max_split_size_mb to avoid
                // fragmentation.`): the message, cut before its numbers. (A line of an open
                // message is taken above.)
                None if pytorch::fragmentation_advice(&c) => {
                    self.start(Family::Torch, Line { raw, body, c: &c }, origin, None, &mut out);
                }
                None => {
                    self.untaken.clear();
                    self.untaken.push_str(raw);
                    self.untaken_at = (self.line, fed);
                    self.track_traceback(raw, body, &c, origin.clone(), &mut out);
                    let mut i = 0;
                    while i < self.pending.len() {
                        let p = &mut self.pending[i];
                        p.idle += 1;
                        // A blank line after a headline keeps it open for its message.
                        let awaited = c.is_empty() && p.idle == 1 && p.headline();
                        if p.complete && p.origin.compatible(&origin) && !awaited {
                            let p = self.pending.remove(i);
                            self.close(p, &mut out);
                        } else {
                            i += 1;
                        }
                    }
                }
            }
        }
        let now = self.fed;
        let mut i = 0;
        while i < self.pending.len() {
            let p = &self.pending[i];
            if p.idle > p.idle_limit() || now.saturating_sub(p.fed_start) >= MAX_EVENT_SPAN {
                let p = self.pending.remove(i);
                self.close(p, &mut out);
            } else {
                i += 1;
            }
        }
        out
    }

    /// End of input: closes every open event.
    pub fn finish(&mut self) -> Vec<ParsedOom> {
        let mut out = Vec::new();
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|p| p.start);
        for p in pending {
            self.close(p, &mut out);
        }
        for tb in std::mem::take(&mut self.tracebacks) {
            self.close_named(tb, &mut out);
        }
        out
    }

    /// True when a launcher's `Killing subprocess` (or Jupyter's restart of a kernel that died) is
    /// explained by another failure of the job: one open or ended within [`LAUNCHER_GRACE`] lines,
    /// or an open traceback. A kernel that aborted on its own GPU failure is restarted as well.
    fn launcher_explained(&self, s: &HostSymptom, origin: &Origin) -> bool {
        (s.evidence == HostEvidence::Launcher
            || (s.evidence == HostEvidence::Exited && s.framework == "jupyter"))
            && (self.pending.iter().any(|p| p.family != Family::Host)
                || self.traceback_of(origin).is_some()
                || self.recent.iter().any(|r| self.line.saturating_sub(r.ended) <= LAUNCHER_GRACE))
    }

    /// True when gunicorn's SIGKILL of a worker follows its own timeout of that worker.
    fn timeout_explained(&self, s: &HostSymptom) -> bool {
        s.framework == host::GUNICORN && s.pid.is_some_and(|pid| self.timed_out.contains(&pid))
    }

    fn start(
        &mut self,
        family: Family,
        line: Line<'_>,
        origin: Origin,
        symptom: Option<HostSymptom>,
        out: &mut Vec<ParsedOom>,
    ) {
        let c = line.c;
        let fed = self.fed;
        if family != Family::Host {
            self.device_failure_at = Some(fed);
        }
        // The same failure printed again by another layer joins the open event.
        if let Some(p) = self.pending.iter_mut().rev().find(|p| {
            p.origin.compatible(&origin)
                && (frameworks::absorbs(p.family, family)
                    || p.announces(family, c)
                    || p.words_run_on(c, fed)
                    || (p.in_traceback && p.family == family))
        }) {
            if family == Family::Torch && (p.headline_of(family, c) || p.words_run_on(c, fed)) {
                // The rest of a PyTorch message whose headline alone was read as a CUDA error.
                p.family = Family::Torch;
                p.complete = false;
            }
            p.families |= family.bit();
            p.push_line(line, &origin, fed);
            p.add_symptom(symptom);
            if matches!(family, Family::TfTensor | Family::Jax | Family::Paddle) {
                p.complete = true;
            }
            return;
        }
        // A traceback an open event took after its message, ending in this other failure, is this
        // failure's.
        let given_up = self
            .pending
            .iter_mut()
            .rev()
            .find(|p| p.in_traceback && p.origin.compatible(&origin))
            .and_then(Pending::give_up_traceback);
        // A new failure of the same stream ends the complete ones before it.
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].complete && self.pending[i].origin.compatible(&origin) {
                let p = self.pending.remove(i);
                self.close(p, out);
            } else {
                i += 1;
            }
        }
        if self.pending.len() >= MAX_PENDING {
            let p = self.pending.remove(0);
            self.close(p, out);
        }
        let (start, raw_lines, traceback) = match (given_up, self.traceback_of(&origin)) {
            (Some((line, raw)), _) => (line, raw, true),
            (None, Some(i)) => {
                let tb = self.tracebacks.remove(i);
                (tb.start, tb.into_raw(), true)
            }
            // A source line of PyTorch's own code right before it, without its traceback.
            (None, None)
                if self.untaken_at.1 + 1 == fed && phase::signature_line(&self.untaken).is_some() =>
            {
                let mut lines = RawLines::default();
                lines.push(&self.untaken);
                (self.untaken_at.0, lines, false)
            }
            (None, None) => (self.line, RawLines::default(), false),
        };
        let mut p = Pending {
            family,
            families: family.bit(),
            origin: Origin { pid: None, gpu: None, ..origin.clone() },
            start,
            raw: raw_lines,
            compact: String::new(),
            fields: Fields::default(),
            idle: 0,
            // PaddlePaddle's operator reporting its allocator's exception awaits the message
            // (`… raises an exception paddle::memory::allocation::BadAlloc,`, `The exception
            // content is`, a blank line, `Out of memory error on GPU 0. Cannot allocate …`).
            // TensorFlow's OOM advice alone (a paste begun after its error) awaits the error's next
            // root error (`announces`).
            complete: !matches!(family, Family::Torch | Family::Bfc)
                && !frameworks::paddle_report_head(c)
                && !frameworks::tf_oom_hint(c),
            signature: String::new(),
            fed_start: self.fed,
            host: None,
            traceback,
            after_frame: false,
            in_traceback: false,
            taken_traceback: None,
            last: LastLine::default(),
        };
        if family == Family::Vllm
            && let Some((at, profile)) = self.profile.take()
            && self.line.saturating_sub(at) <= PROFILE_REACH
        {
            frameworks::extract(&profile, &mut p.fields);
        }
        p.push_line(line, &origin, fed);
        p.add_symptom(symptom);
        self.pending.push(p);
    }

    /// `body` without the indentation of the indented traceback it is part of ([`Self::margin`]).
    fn dedent<'b>(&mut self, body: &'b str) -> &'b str {
        let rest = body.trim_start_matches([' ', '\t']);
        if traceback_header(rest) || ipython_header(rest).is_some() {
            let indent = &body[..body.len() - rest.len()];
            self.margin.clear();
            if indent.len() <= MAX_MARGIN {
                self.margin.push_str(indent);
            }
        }
        if self.margin.is_empty() {
            return body;
        }
        match body.strip_prefix(self.margin.as_str()) {
            Some(b) => b,
            None if rest.is_empty() => rest,
            None => {
                self.margin.clear();
                body
            }
        }
    }

    /// The open traceback of `origin`'s stream: same key, else (no key) the latest.
    fn traceback_of(&self, origin: &Origin) -> Option<usize> {
        self.tracebacks
            .iter()
            .rposition(|tb| tb.origin.key == origin.key)
            .or_else(|| self.tracebacks.iter().rposition(|tb| tb.origin.compatible(origin)))
    }

    /// `c` is the compact form of `body`.
    fn track_traceback(&mut self, raw: &str, body: &str, c: &str, origin: Origin, out: &mut Vec<ParsedOom>) {
        let open = self.traceback_of(&origin);
        let named = ipython_header(body);
        if body.starts_with("Traceback (most recent call last)")
            || named.is_some()
            || frames::boxed_header(body)
        {
            match open {
                // A chained exception continues the same traceback.
                Some(i) if self.tracebacks[i].origin.key == origin.key => {
                    let tb = &mut self.tracebacks[i];
                    tb.push(raw);
                    tb.since_exception = None;
                    tb.named = tb.named.or(named.flatten());
                }
                _ => {
                    if self.tracebacks.len() >= MAX_PENDING {
                        let tb = self.tracebacks.remove(0);
                        self.close_named(tb, out);
                    }
                    let mut tb = Traceback::new(self.line, origin, raw);
                    tb.named = named.flatten();
                    self.tracebacks.push(tb);
                }
            }
            return;
        }
        let Some(i) = open else {
            // A paste that starts inside a traceback (its header cut off; its first frame line
            // perhaps cut by a terminal's wrap too), or at DataParallel's wrapper (the outer
            // traceback cut off): the wrapper names the traceback its replica's message ends.
            let frame = frames::frame_of(body).is_some()
                || body.trim_start().starts_with("File \"")
                || frames::boxed_frame(body);
            let wrapper = !frame && frameworks::replica_wrapper(c);
            if frame || wrapper {
                if self.tracebacks.len() >= MAX_PENDING {
                    let tb = self.tracebacks.remove(0);
                    self.close_named(tb, out);
                }
                let mut tb = Traceback::new(self.line, origin, raw);
                if wrapper {
                    tb.named = Some(Family::Torch);
                }
                self.tracebacks.push(tb);
            }
            return;
        };
        let tb = &mut self.tracebacks[i];
        tb.push(raw);
        // DataParallel re-raises a replica's OOM as `torch.OutOfMemoryError: Caught
        // OutOfMemoryError in replica 0 on device 0.` and prints the original traceback and
        // message after it: that message is the event; the wrapper only names the traceback.
        if frameworks::replica_wrapper(c) {
            tb.named = Some(Family::Torch);
        }
        if is_frame(body) || native_frame(body) {
            tb.since_exception = None;
        } else if !body.bytes().any(|b| b.is_ascii_alphanumeric()) {
            // Blank lines and rules (`-----`) end nothing.
        } else {
            let n = tb.since_exception.map_or(0, |n| n + 1);
            tb.since_exception = Some(n);
            if n >= TRACEBACK_GRACE {
                let tb = self.tracebacks.remove(i);
                self.close_named(tb, out);
            }
        }
    }

    /// Reports a traceback that ends without its message when its IPython header named an
    /// out-of-memory failure (a number-less event of that family); drops any other.
    fn close_named(&mut self, tb: Traceback, out: &mut Vec<ParsedOom>) {
        let Some(family) = tb.named else {
            return;
        };
        let header = tb.head.first().map_or("", String::as_str);
        let compact = text::compact(prefix::strip(header).0);
        let p = Pending {
            family,
            families: family.bit(),
            origin: Origin { pid: None, gpu: None, ..tb.origin.clone() },
            start: tb.start,
            signature: oomlens_schema::text::clip(&compact, 256).to_owned(),
            compact,
            fields: Fields::default(),
            idle: 0,
            complete: true,
            fed_start: self.fed,
            host: None,
            traceback: true,
            after_frame: false,
            in_traceback: false,
            taken_traceback: None,
            last: LastLine::default(),
            raw: tb.into_raw(),
        };
        self.close(p, out);
    }

    fn close(&mut self, p: Pending, out: &mut Vec<ParsedOom>) {
        self.work += p.compact.len() * 2;
        // TensorRT's builder could not get a tactic's workspace and went on without that tactic
        // (`Skipping tactic 8 due to insufficient memory …`): the build continues, no failure.
        if frameworks::tactic_skipped(&p.compact) {
            return;
        }
        // The numbers read from the message's lines joined (hard-wrapped numbers and words) and
        // from each line alone (`push_line`). PyTorch's message is read joined only. For the
        // other families each line's own reading wins: joined lines run into each other without
        // a separator (`current device: 0` + `2023/11/22 …` reads as device 02023).
        let mut joined = Fields::default();
        pytorch::extract(&p.compact, &mut joined);
        frameworks::extract(&p.compact, &mut joined);
        let mut fields = if p.family == Family::Torch {
            joined.fill_from(&p.fields);
            joined
        } else {
            let mut own = p.fields.clone();
            own.fill_from(&joined);
            own
        };
        resolve_own_process(&mut fields);
        let numbered = fields.requested.is_some() || fields.capacity.is_some() || fields.allocated.is_some();
        let (kind, framework, host_evidence) = match &p.host {
            Some(_) if p.family == Family::Host && tinygrad_device(&p.raw.lines) => {
                (OomKind::CudaOom, "tinygrad", None)
            }
            Some(h) if p.family == Family::Host => (OomKind::HostOomKill, h.framework, Some(h.evidence)),
            // TensorFlow's allocation on the host (`… on /job:…/device:CPU:0 by allocator cpu`).
            _ if p.family == Family::TfTensor && p.compact.contains("byallocatorcpu") => {
                (OomKind::HostOomKill, "tensorflow", Some(HostEvidence::Allocation))
            }
            _ => (
                OomKind::CudaOom,
                frameworks::framework(p.families, &p.compact, p.origin.src.as_deref()),
                None,
            ),
        };
        if let Some(h) = &p.host
            && fields.pid.is_none()
        {
            fields.pid = h.pid;
        }
        let end = self.line;
        // One death, several reports: a host-memory symptom after another one of the same stream
        // (the shell's `Killed` and the scheduler's summary after the job's output, Slurm's `task 0:
        // Out Of Memory` and its `oom-kill event` line, each DataLoader worker killed) is the
        // same failure.
        let same_death = |r: &Recent| {
            r.host
                && p.family == Family::Host
                && end.saturating_sub(r.ended) <= DEDUP_WINDOW
                && (r.key.is_empty() || p.origin.key.is_empty() || r.key == p.origin.key)
        };
        let dup = self.recent.iter().any(|r| {
            same_death(r)
                || r.framework == framework
                && end.saturating_sub(r.ended) <= DEDUP_WINDOW
                && (r.key.is_empty() || p.origin.key.is_empty() || r.key == p.origin.key)
                && fields.subsumed_by(&r.fields)
                // Without numbers: the same words again, or a wrapper re-raising the failure
                // with its own words right after it.
                && (numbered
                    || same_words(&r.signature, &p.signature)
                    || (thc_check_raised(&r.signature, &p.signature)
                        && p.start.saturating_sub(r.ended) <= RERAISE_WINDOW)
                    || (p.traceback && p.start.saturating_sub(r.ended) <= RERAISE_WINDOW)
                    || (r.fields.requested.is_some() || r.fields.capacity.is_some() || r.fields.allocated.is_some())
                        && p.start.saturating_sub(r.ended) <= REMAINDER_WINDOW)
        });
        // A failure in a program's own words only (framework `other`) while or right after a
        // known GPU failure of the same stream is that failure's explanation or echo, not a
        // second failure: a device failure without numbers (RELION's `You ran out of memory on
        // the GPU(s).`, ComfyUI's `This error means you ran out of memory on your GPU.`), a host
        // allocation refused (an encoder's `Cannot allocate memory` after the driver's refusal).
        let echo_words = match kind {
            OomKind::CudaOom => framework == "other" && !numbered,
            OomKind::HostOomKill => {
                framework == host::GENERIC && host_evidence == Some(HostEvidence::Allocation)
            }
            _ => false,
        };
        let explains = echo_words
            && (self.pending.iter().any(|q| q.family != Family::Host && q.origin.compatible(&p.origin))
                || self.recent.iter().any(|r| {
                    !r.host
                        && p.start.saturating_sub(r.ended) <= RERAISE_WINDOW
                        && (r.key.is_empty() || p.origin.key.is_empty() || r.key == p.origin.key)
                }));
        if dup || explains {
            self.duplicates += 1;
            return;
        }
        if self.recent.len() == MAX_PENDING {
            self.recent.pop_front();
        }
        self.recent.push_back(Recent {
            fields: fields.clone(),
            host: p.family == Family::Host,
            framework,
            key: p.origin.key.clone(),
            signature: p.signature,
            ended: end,
        });
        let lines = p.raw.into_lines();
        // The lines without their loggers' prefixes (`kubectl logs --timestamps` stamps every
        // frame): tracebacks are read from these.
        let bodies: Vec<&str> = lines.iter().map(|l| prefix::strip(l).0).collect();
        // `rich`'s boxed frames in Python's form, frame lines a wrap cut joined again.
        let bodies = frames::readable(&bodies);
        let bodies: Vec<&str> = bodies.iter().map(AsRef::as_ref).collect();
        let phase = if p.compact.contains("dataloaderworker") {
            Some(PhaseFinding { phase: Phase::DataLoading, clue: "message: a DataLoader worker".into() })
        } else {
            phase::phase_of(&bodies, &p.compact)
        };
        // An allocation in attention code says more than the generic graph-tensor hint; a
        // start-up check's own words say more than either.
        let mut hint = hint::message_hint(&p.compact).or_else(|| {
            // The driver wrapper's refusal cut before its `from device: CUDA_ERROR_OUT_OF_MEMORY`.
            driver_alloc(&p.origin, &p.compact).map(|_| "device_preallocation")
        });
        // The refused tensor's shape says more than "a graph tensor".
        if hint.is_none_or(|h| h == "graph_tensor") {
            hint = hint::tensor_role(&p.compact).or(hint);
        }
        let op = op::attention_clue(&bodies).filter(|_| {
            hint.is_none_or(|h| {
                matches!(
                    h,
                    "graph_tensor" | "tensor_storage" | "weight_tensor" | "batch_tensor" | "long_tensor"
                )
            })
        });
        if op.is_some() {
            hint = Some(ATTENTION_HINT);
        }
        // A bare runtime error (no allocator's numbers, no other hint) raised while pinning host
        // memory: the host's memory in the device's words (`op.rs`).
        let pinned = (kind == OomKind::CudaOom && hint.is_none() && !numbered)
            .then(|| op::pinned_clue(&bodies))
            .flatten();
        let op = match pinned {
            Some(clue) => {
                hint = Some(PINNED_HOST_HINT);
                Some(clue)
            }
            None => op,
        };
        out.push(ParsedOom {
            kind,
            framework,
            xid: None,
            fields,
            phase,
            host_evidence,
            hint,
            op,
            line: p.start,
            lines,
        });
    }
}

/// tinygrad's GPU runtimes raise Python's own `MemoryError` (`Cannot allocate N bytes: no memory
/// is available.`) when the device refuses an allocation: a traceback whose innermost frame is
/// one of them (`tinygrad/runtime/ops_amd.py`, `ops_nv.py`, …) is the device's memory, not the
/// host's. Its CPU back-ends (`ops_cpu.py`, `ops_clang.py`, …) are the host's.
fn tinygrad_device(lines: &[String]) -> bool {
    const GPU_RUNTIMES: [&str; 8] = ["amd", "nv", "cuda", "hip", "metal", "gpu", "qcom", "webgpu"];
    lines
        .iter()
        .map(|l| prefix::strip(l).0)
        .rev()
        .find(|l| l.trim_start().starts_with("File \""))
        .is_some_and(|l| {
            l.split("tinygrad/runtime/ops_")
                .nth(1)
                .and_then(|rest| rest.split(".py").next())
                .is_some_and(|m| GPU_RUNTIMES.contains(&m))
        })
}

/// TensorFlow's CUDA driver wrapper refusing a device allocation, in a paste cut before the error
/// it names (`E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 7.63`; whole:
/// `… failed to allocate 7.63G (8193245184 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY`). At that
/// source the words mean the device's memory was refused, whatever followed them.
fn driver_alloc(origin: &Origin, c: &str) -> Option<Family> {
    (c.starts_with("failedtoallocate")
        && origin.src.as_deref().is_some_and(|s| s.ends_with("/cuda_driver.cc")))
    .then_some(Family::Cuda)
}

/// The allocator dump TensorFlow's BFC allocator prints only when it ran out of memory, in a paste
/// that lacks its first line: the chunk map (`bfc_allocator.cc:270] ****xxxx____`) or the summary
/// (`Summary of in-use Chunks by size`).
fn bfc_dump(origin: &Origin, raw: &str, c: &str) -> Option<Family> {
    let bfc = origin.src.as_deref().is_some_and(|s| s.contains("bfc_allocator"))
        || raw.contains("bfc_allocator.cc:");
    // The body after the source location (`… bfc_allocator.cc:270] ****xxxx`).
    let c = c.rsplit_once(']').map_or(c, |(_, rest)| rest);
    let map = c.len() >= 32 && c.bytes().all(|b| matches!(b, b'*' | b'_' | b'x'));
    (bfc && (map || c.starts_with("summaryofin-usechunksbysize"))).then_some(Family::Bfc)
}

/// Which listed process is the failing one. PyTorch 2.x lists every process NVML sees on the GPU
/// and prints the failing one as `Including non-PyTorch memory, this process has X` — unless the
/// job runs in its own PID namespace (containers), where NVML's host pid differs from the job's
/// own and the failing process appears as one more `Process P has X`. Then it is the listed
/// process that holds at least the allocator's reserved (else allocated) bytes — its allocator's
/// memory is part of its GPU memory — with the least memory above them; with no allocator numbers
/// (a cut message) a lone listed process is the failing one. An allocator that holds nothing
/// (`0 bytes is allocated by PyTorch`: the process's first tensor failed) makes "at least the
/// reserved bytes" say nothing: then only a process holding no more than a context and its
/// libraries' workspaces ([`OWN_WITHOUT_TENSORS`]) can be the failing one, and a process holding
/// the GPU is another. Returns its index in `listed` and whether it is certain (no other listed
/// process qualifies).
pub fn own_process_index(
    listed: &[OtherProcess],
    reserved: Option<u64>,
    allocated: Option<u64>,
) -> Option<(usize, bool)> {
    let Some(floor) = reserved.or(allocated) else {
        return (listed.len() == 1).then_some((0, true));
    };
    let ceiling = if floor == 0 { OWN_WITHOUT_TENSORS } else { u64::MAX };
    let holding =
        || listed.iter().enumerate().filter(|(_, o)| o.used_bytes >= floor && o.used_bytes <= ceiling);
    let count = holding().count();
    holding().min_by_key(|(_, o)| o.used_bytes).map(|(i, _)| (i, count == 1))
}

/// The most GPU memory a process whose caching allocator holds nothing is taken to have: a CUDA
/// context (hundreds of MiB) and its libraries' workspaces (cuBLAS, cuDNN, NCCL).
pub const OWN_WITHOUT_TENSORS: u64 = 2 << 30;

/// Moves the failing process out of the listed ones ([`own_process_index`]): its memory becomes
/// `process_used`, its pid the event's when certain.
fn resolve_own_process(f: &mut Fields) {
    // `Process P has X` where P is the failing process itself (pid known from a prefix).
    if let Some(pid) = f.pid
        && let Some(i) = f.other_processes.iter().position(|o| o.pid == pid)
    {
        let own = f.other_processes.remove(i);
        f.process_used.get_or_insert(own.used_bytes);
        return;
    }
    if f.process_used.is_some() {
        return;
    }
    if let Some((i, certain)) = own_process_index(&f.other_processes, f.reserved, f.allocated) {
        let own = f.other_processes.remove(i);
        f.process_used = Some(own.used_bytes);
        if certain && f.pid.is_none() {
            f.pid = Some(own.pid);
        }
    }
}

/// `s` cut to the wire limit of a label value (at a character boundary).
fn clip(s: &str) -> String {
    oomlens_schema::text::clip(s, oomlens_schema::limits::MAX_STRING).to_owned()
}

/// Parses a whole text (tests, the `parse` command on small inputs).
pub fn parse_all<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<ParsedOom> {
    let mut p = LogParser::new();
    let mut out = Vec::new();
    for l in lines {
        out.extend(p.feed_line(l));
    }
    out.extend(p.finish());
    out
}

#[cfg(test)]
mod tests;
