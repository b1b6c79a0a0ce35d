//! The hook socket's wire format, versions 1 and 2: one JSON object per line, parsed and
//! validated into an [`OomEvent`] (or a ping), plus the JSON reply lines. Pure: no I/O.
//!
//! Version 2 adds `gpu_uuid` (the GPU as NVML names it; the CUDA index a container sees is kept
//! as label `hook.cuda_index` and the event stage maps the UUID to the node's GPU index) and
//! `allocator` (the allocator summary, `allocator.rs`). In both versions the exception text is
//! run through the log parser, which fills the numbers the report leaves out (capacity, free,
//! allocated, other processes, the phase from its traceback).
//!
//! `docs/hook-protocol.md` is the reference for every field. Parsing is strict where a mistake
//! would lose meaning (unknown top-level or `job` keys, wrong types, out-of-range numbers are
//! errors that name the field) and lenient where PyTorch evolves (unknown `memory_stats` keys are
//! ignored).

use std::collections::BTreeMap;

use oomlens_schema::limits::MAX_RAW_MESSAGE;
use oomlens_schema::{EventSource, JobShape, Label, OomEvent, OomKind, Phase};
use serde_json::{Map, Value, json};

/// The newest protocol version this agent speaks.
pub const VERSION: u64 = 2;
/// Every version this agent accepts.
pub const VERSIONS: &[u64] = &[1, 2];
/// Label with the GPU's UUID as the hook reported it (v2).
pub const GPU_UUID_LABEL: &str = "gpu.uuid";
/// Label with the CUDA device index the job saw, when it sent a UUID (v2).
pub const CUDA_INDEX_LABEL: &str = "hook.cuda_index";
/// Longest GPU UUID accepted (`GPU-` + 36, MIG UUIDs are longer).
pub const MAX_GPU_UUID: usize = 128;
/// Most `memory_stats` entries accepted (PyTorch reports about a hundred).
pub const MAX_MEMORY_STATS: usize = 1024;
/// Most user `labels`.
pub const MAX_USER_LABELS: usize = 16;
/// Longest user label key / short string field (`framework`, `precision`, `optimizer`), bytes.
pub const MAX_SHORT: usize = 64;
/// Longest user label value, bytes.
pub const MAX_LABEL_VALUE: usize = 256;
/// Prefix of user labels.
pub const USER_LABEL_PREFIX: &str = "job.";
/// Prefix of the allocator statistics kept as labels.
pub const STAT_LABEL_PREFIX: &str = "torch.";
/// Label carrying the pid the job reported when the socket peer's pid differs.
pub const REPORTED_PID_LABEL: &str = "hook.reported_pid";

/// `memory_stats` keys that become event fields.
const ALLOCATED: &str = "allocated_bytes.all.current";
const RESERVED: &str = "reserved_bytes.all.current";
/// `memory_stats` keys kept as `torch.<key>` labels.
pub const STAT_LABELS: &[&str] = &[
    "allocated_bytes.all.peak",
    "reserved_bytes.all.peak",
    "active_bytes.all.current",
    "active_bytes.all.peak",
    "inactive_split_bytes.all.current",
    "num_alloc_retries",
    "num_ooms",
];

/// Keys of a v2 report beyond v1's.
const V2_KEYS: &[&str] = &["gpu_uuid", "allocator"];
const TOP_KEYS: &[&str] = &[
    "v",
    "type",
    "pid",
    "gpu_index",
    "requested_bytes",
    "message",
    "framework",
    "phase",
    "memory_stats",
    "mem_get_info",
    "process_used_bytes",
    "job",
    "labels",
];
const JOB_KEYS: &[&str] = &[
    "params",
    "batch",
    "seq_len",
    "hidden",
    "layers",
    "heads",
    "precision",
    "optimizer",
    "zero_stage",
    "tp",
    "pp",
    "dp",
    "activation_checkpointing",
    "flash_attention",
];

/// A line was refused. `reason` is the metrics label, `message` goes into the error reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BadRequest {
    /// Metrics label: `not_json`, `not_object`, `version`, `type`, `field`, `too_long`.
    pub reason: &'static str,
    /// Human-readable detail naming the field.
    pub message: String,
}

impl BadRequest {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        BadRequest { reason, message: message.into() }
    }

    fn field(message: impl Into<String>) -> Self {
        Self::new("field", message)
    }
}

/// A valid request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `{"v":1,"type":"ping"}`: liveness check, answered `{"ok":true}`.
    Ping,
    /// An OOM report.
    Oom(Box<OomReport>),
}

/// A validated OOM report, before the agent adds time, id, pid and workload labels.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OomReport {
    /// pid the job says it has (the socket peer's pid wins when known).
    pub pid: Option<u32>,
    /// The event, without `event_id`, `ts_ms` and workload labels.
    pub event: OomEvent,
}

/// Parses one line (without its newline).
pub fn parse_line(line: &[u8]) -> Result<Request, BadRequest> {
    let value: Value = serde_json::from_slice(line)
        .map_err(|e| BadRequest::new("not_json", format!("not a JSON object: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(BadRequest::new("not_object", "a request is one JSON object per line"));
    };
    let version = match obj.get("v") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|v| VERSIONS.contains(&v)) => {
            n.as_u64().unwrap_or(1)
        }
        Some(Value::Number(n)) => {
            return Err(BadRequest::new(
                "version",
                format!("unsupported protocol version {n} (this agent speaks v1 and v{VERSION})"),
            ));
        }
        Some(_) => return Err(BadRequest::new("version", "\"v\" must be the number 1 or 2")),
        None => {
            return Err(BadRequest::new(
                "version",
                "missing \"v\" (protocol version; this agent speaks v1 and v2)",
            ));
        }
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("ping") => return Ok(Request::Ping),
        Some("oom") => {}
        Some(other) => {
            return Err(BadRequest::new(
                "type",
                format!("unknown \"type\" {other:?} (expected \"oom\" or \"ping\")"),
            ));
        }
        None => {
            return Err(BadRequest::new(
                "type",
                "missing or non-string \"type\" (expected \"oom\" or \"ping\")",
            ));
        }
    }
    parse_oom(&obj, version).map(|r| Request::Oom(Box::new(r)))
}

fn parse_oom(obj: &Map<String, Value>, version: u64) -> Result<OomReport, BadRequest> {
    if version < 2
        && let Some(k) = V2_KEYS.iter().find(|k| obj.contains_key(**k))
    {
        return Err(BadRequest::field(format!("field \"{k}\" needs protocol version 2 (\"v\":2)")));
    }
    let known: Vec<&str> = TOP_KEYS.iter().chain(V2_KEYS).copied().collect();
    refuse_unknown(obj, &known, "")?;
    let f = Fields { obj, path: "" };
    let mut e = OomEvent {
        kind: OomKind::CudaOom,
        source: EventSource::Hook,
        framework: f.short_str("framework")?.unwrap_or_else(|| "pytorch".to_owned()),
        gpu_index: f.u32("gpu_index")?,
        requested_bytes: f.u64("requested_bytes")?,
        process_used_bytes: f.u64("process_used_bytes")?,
        raw_message: f.string("message")?.map(|m| truncate(m, MAX_RAW_MESSAGE)).unwrap_or_default(),
        ..OomEvent::default()
    };
    let pid = f.u32("pid")?;
    if let Some(phase) = f.string("phase")? {
        e.phase = Phase::from_name(&phase).ok_or_else(|| {
            let names: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
            BadRequest::field(format!("\"phase\": unknown phase {phase:?} (one of {})", names.join(", ")))
        })?;
    }
    if let Some(stats) = f.object("memory_stats")? {
        if stats.len() > MAX_MEMORY_STATS {
            return Err(BadRequest::field(format!("\"memory_stats\": more than {MAX_MEMORY_STATS} entries")));
        }
        let s = Fields { obj: stats, path: "memory_stats." };
        e.allocated_bytes = s.u64(ALLOCATED)?;
        e.reserved_bytes = s.u64(RESERVED)?;
        for key in STAT_LABELS {
            if let Some(v) = s.u64(key)? {
                e.labels.push(Label { key: format!("{STAT_LABEL_PREFIX}{key}"), value: v.to_string() });
            }
        }
    }
    if let Some(info) = f.object("mem_get_info")? {
        refuse_unknown(info, &["free_bytes", "total_bytes"], "mem_get_info.")?;
        let m = Fields { obj: info, path: "mem_get_info." };
        e.free_bytes = m.u64("free_bytes")?;
        e.capacity_bytes = m.u64("total_bytes")?;
    }
    if let Some(alloc) = f.object("allocator")? {
        let summary = super::allocator::parse(alloc).map_err(BadRequest::field)?;
        e.allocated_bytes = e.allocated_bytes.or(summary.allocated_bytes);
        e.reserved_bytes = e.reserved_bytes.or(summary.reserved_bytes);
        e.requested_bytes = e.requested_bytes.or(summary.requested_bytes);
        e.labels.extend(summary.labels());
    }
    if let Some(uuid) = f.string("gpu_uuid")? {
        let good = !uuid.is_empty()
            && uuid.len() <= MAX_GPU_UUID
            && uuid.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'/' | b'_'));
        if !good {
            return Err(BadRequest::field(format!(
                "\"gpu_uuid\": expected 1-{MAX_GPU_UUID} characters of [A-Za-z0-9-/_] (GPU-…, MIG-…)"
            )));
        }
        // The CUDA index is the job's own numbering; the UUID names the GPU on the node.
        if let Some(cuda) = e.gpu_index.take() {
            e.labels.push(Label { key: CUDA_INDEX_LABEL.to_owned(), value: cuda.to_string() });
        }
        e.labels.push(Label { key: GPU_UUID_LABEL.to_owned(), value: uuid });
    }
    fill_from_message(&mut e);
    if let Some(job) = f.object("job")? {
        e.job = parse_job(job)?;
    }
    if let Some(labels) = f.object("labels")? {
        e.labels.extend(parse_user_labels(labels)?);
    }
    Ok(OomReport { pid, event: e })
}

/// Fills what the report leaves out from its exception text, read by the log parser (the same
/// numbers a log line of that text would give): sizes, other processes, the phase and its clue.
/// The report's own values win; the GPU index only comes from the text when the report names
/// no GPU at all.
fn fill_from_message(e: &mut OomEvent) {
    if e.raw_message.is_empty() {
        return;
    }
    let parsed = oomlens_parse::parse_all(e.raw_message.lines());
    let Some(p) = parsed.iter().find(|p| p.kind == OomKind::CudaOom) else { return };
    let from = p.to_event(0);
    e.requested_bytes = e.requested_bytes.or(from.requested_bytes);
    e.capacity_bytes = e.capacity_bytes.or(from.capacity_bytes);
    e.free_bytes = e.free_bytes.or(from.free_bytes);
    e.allocated_bytes = e.allocated_bytes.or(from.allocated_bytes);
    e.reserved_bytes = e.reserved_bytes.or(from.reserved_bytes);
    e.process_used_bytes = e.process_used_bytes.or(from.process_used_bytes);
    if e.other_processes.is_empty() {
        e.other_processes = from.other_processes;
    }
    if e.gpu_index.is_none() && !e.labels.iter().any(|l| l.key == GPU_UUID_LABEL) {
        e.gpu_index = from.gpu_index;
    }
    let took_phase = e.phase == Phase::Unknown && from.phase != Phase::Unknown;
    if took_phase {
        e.phase = from.phase;
    }
    let phase_label =
        |k: &str| k == oomlens_parse::PHASE_SOURCE_LABEL || k == oomlens_parse::PHASE_CLUE_LABEL;
    for label in from.labels {
        if (took_phase || !phase_label(&label.key)) && !e.labels.iter().any(|l| l.key == label.key) {
            e.labels.push(label);
        }
    }
}

fn parse_job(obj: &Map<String, Value>) -> Result<JobShape, BadRequest> {
    refuse_unknown(obj, JOB_KEYS, "job.")?;
    let f = Fields { obj, path: "job." };
    let zero_stage = match f.u64("zero_stage")? {
        None => None,
        Some(z @ 0..=3) => Some(z as u8),
        Some(z) => {
            return Err(BadRequest::field(format!("\"job.zero_stage\": {z} is not a ZeRO stage (0-3)")));
        }
    };
    let degree = |key: &str| -> Result<Option<u32>, BadRequest> {
        match f.u32(key)? {
            Some(0) => Err(BadRequest::field(format!("\"job.{key}\": a parallel degree must be at least 1"))),
            v => Ok(v),
        }
    };
    Ok(JobShape {
        params: f.u64("params")?,
        batch: f.u32("batch")?,
        seq_len: f.u32("seq_len")?,
        hidden: f.u32("hidden")?,
        layers: f.u32("layers")?,
        heads: f.u32("heads")?,
        precision: f.short_str("precision")?,
        optimizer: f.short_str("optimizer")?,
        zero_stage,
        tensor_parallel: degree("tp")?,
        pipeline_parallel: degree("pp")?,
        data_parallel: degree("dp")?,
        activation_checkpointing: f.bool("activation_checkpointing")?,
        flash_attention: f.bool("flash_attention")?,
    })
}

fn parse_user_labels(obj: &Map<String, Value>) -> Result<Vec<Label>, BadRequest> {
    if obj.len() > MAX_USER_LABELS {
        return Err(BadRequest::field(format!("\"labels\": more than {MAX_USER_LABELS} labels")));
    }
    let mut out = Vec::with_capacity(obj.len());
    for (key, value) in obj {
        let good_key = !key.is_empty()
            && key.len() <= MAX_SHORT
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !good_key {
            return Err(BadRequest::field(format!(
                "\"labels\": key {key:?} must be 1-{MAX_SHORT} characters of [A-Za-z0-9_.-]"
            )));
        }
        let value = match value {
            Value::String(s) if s.len() <= MAX_LABEL_VALUE => s.clone(),
            Value::String(_) => {
                return Err(BadRequest::field(format!(
                    "\"labels.{key}\": longer than {MAX_LABEL_VALUE} bytes"
                )));
            }
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                return Err(BadRequest::field(format!(
                    "\"labels.{key}\": must be a string, number or boolean"
                )));
            }
        };
        out.push(Label { key: format!("{USER_LABEL_PREFIX}{key}"), value });
    }
    Ok(out)
}

fn refuse_unknown(obj: &Map<String, Value>, known: &[&str], path: &str) -> Result<(), BadRequest> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => {
            Err(BadRequest::field(format!("unknown field \"{path}{k}\" (known: {})", known.join(", "))))
        }
        None => Ok(()),
    }
}

/// Typed access to the fields of one object; `null` counts as absent.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    path: &'static str,
}

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, expected: &str, got: &Value) -> BadRequest {
        let got = match got {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        BadRequest::field(format!("\"{}{key}\": expected {expected}, got {got}", self.path))
    }

    fn u64(&self, key: &str) -> Result<Option<u64>, BadRequest> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| self.wrong(key, "a non-negative integer", v)),
        }
    }

    fn u32(&self, key: &str) -> Result<Option<u32>, BadRequest> {
        match self.u64(key)? {
            None => Ok(None),
            Some(v) => u32::try_from(v)
                .map(Some)
                .map_err(|_| BadRequest::field(format!("\"{}{key}\": {v} is out of range", self.path))),
        }
    }

    fn bool(&self, key: &str) -> Result<Option<bool>, BadRequest> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| self.wrong(key, "true or false", v)),
        }
    }

    fn string(&self, key: &str) -> Result<Option<String>, BadRequest> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.wrong(key, "a string", v)),
        }
    }

    fn short_str(&self, key: &str) -> Result<Option<String>, BadRequest> {
        match self.string(key)? {
            Some(s) if s.len() > MAX_SHORT => {
                Err(BadRequest::field(format!("\"{}{key}\": longer than {MAX_SHORT} bytes", self.path)))
            }
            other => Ok(other),
        }
    }

    fn object(&self, key: &str) -> Result<Option<&Map<String, Value>>, BadRequest> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o)),
            Some(v) => Err(self.wrong(key, "an object", v)),
        }
    }
}

use oomlens_schema::text::truncate;

/// The reply to an accepted report.
pub fn reply_ok(event_id: Option<u64>) -> String {
    match event_id {
        Some(id) => json!({"ok": true, "event_id": id.to_string()}).to_string(),
        None => json!({"ok": true}).to_string(),
    }
}

/// The reply to a refused line.
pub fn reply_error(message: &str) -> String {
    json!({"ok": false, "error": message}).to_string()
}

/// An event as one JSON object (what `oomlens-agent hook-listen --print` writes).
pub fn event_json(e: &OomEvent) -> Value {
    let j = &e.job;
    let labels: BTreeMap<&str, &str> = e.labels.iter().map(|l| (l.key.as_str(), l.value.as_str())).collect();
    json!({
        "event_id": e.event_id.to_string(),
        "ts_ms": e.ts_ms,
        "kind": e.kind.as_str(),
        "source": e.source.as_str(),
        "framework": e.framework,
        "gpu_index": e.gpu_index,
        "pid": e.pid,
        "requested_bytes": e.requested_bytes,
        "capacity_bytes": e.capacity_bytes,
        "free_bytes": e.free_bytes,
        "allocated_bytes": e.allocated_bytes,
        "reserved_bytes": e.reserved_bytes,
        "process_used_bytes": e.process_used_bytes,
        "phase": e.phase.as_str(),
        "job": {
            "params": j.params, "batch": j.batch, "seq_len": j.seq_len, "hidden": j.hidden,
            "layers": j.layers, "heads": j.heads, "precision": j.precision, "optimizer": j.optimizer,
            "zero_stage": j.zero_stage, "tp": j.tensor_parallel, "pp": j.pipeline_parallel,
            "dp": j.data_parallel, "activation_checkpointing": j.activation_checkpointing,
            "flash_attention": j.flash_attention,
        },
        "labels": labels,
        "message": e.raw_message,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn oom(line: &str) -> OomReport {
        match parse_line(line.as_bytes()) {
            Ok(Request::Oom(r)) => *r,
            other => panic!("{other:?}"),
        }
    }

    fn err(line: &str) -> BadRequest {
        parse_line(line.as_bytes()).unwrap_err()
    }

    fn label<'a>(e: &'a OomEvent, key: &str) -> Option<&'a str> {
        e.labels.iter().find(|l| l.key == key).map(|l| l.value.as_str())
    }

    #[test]
    fn v2_names_the_gpu_by_uuid_and_carries_the_allocator_summary() {
        let r = oom(r#"{"v":2,"type":"oom","gpu_index":0,"gpu_uuid":"GPU-5f8e0c2a-1111-2222-3333-444455556666",
            "message":"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which 6.75 MiB is free. Including non-PyTorch memory, this process has 79.13 GiB memory in use. Of the allocated memory 77.60 GiB is allocated by PyTorch, and 1.03 GiB is reserved by PyTorch but unallocated.",
            "allocator":{"segments":9,"reserved_bytes":84200000000,"allocated_bytes":83300000000,
              "cached_free_bytes":1100000000,"largest_free_block_bytes":19000000,"free_blocks":300,
              "sites":[{"site":"train.py:51","function":"forward","bytes":60000000000,"blocks":900}]}}"#)
        .event;
        assert_eq!(r.gpu_index, None, "the CUDA index is not the node's GPU index");
        assert_eq!(label(&r, CUDA_INDEX_LABEL), Some("0"));
        assert_eq!(label(&r, GPU_UUID_LABEL), Some("GPU-5f8e0c2a-1111-2222-3333-444455556666"));
        assert_eq!(label(&r, "alloc.largest_free_block_bytes"), Some("19000000"));
        assert_eq!(label(&r, "alloc.activation_bytes"), Some("60000000000"));
        // The numbers the report left out come from its message.
        assert_eq!(r.requested_bytes, Some(20 << 20));
        let near =
            |v: Option<u64>, gib: f64| v.is_some_and(|v| (v as f64 - gib * (1u64 << 30) as f64).abs() < 2.0);
        assert!(near(r.capacity_bytes, 79.15), "{:?}", r.capacity_bytes);
        assert!(near(r.process_used_bytes, 79.13), "{:?}", r.process_used_bytes);
        // The allocator's own totals, not the message's rounded ones.
        assert_eq!(r.allocated_bytes, Some(83_300_000_000));
        assert_eq!(r.reserved_bytes, Some(84_200_000_000));
        for (line, needle) in [
            (r#"{"v":1,"type":"oom","gpu_uuid":"GPU-1"}"#, "needs protocol version 2"),
            (r#"{"v":2,"type":"oom","gpu_uuid":"GPU 1"}"#, "gpu_uuid"),
            (r#"{"v":2,"type":"oom","allocator":{"segments":"x"}}"#, "allocator.segments"),
            (r#"{"v":2,"type":"oom","allocator":[]}"#, "allocator"),
        ] {
            let e = err(line);
            assert!(e.reason == "field" && e.message.contains(needle), "{line}: {e:?}");
        }
    }

    #[test]
    fn the_message_fills_a_v1_report_without_numbers() {
        let r = oom(r#"{"v":1,"type":"oom","message":"Traceback (most recent call last):\n  File \"/app/run.py\", line 9, in <module>\n    model = AutoModelForCausalLM.from_pretrained(name, device_map='cuda')\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB. GPU 2 has a total capacity of 23.55 GiB of which 312.00 MiB is free."}"#)
            .event;
        assert_eq!(r.gpu_index, Some(2));
        assert_eq!(r.requested_bytes, Some(500 << 20));
        assert_eq!(r.free_bytes, Some(312 << 20));
        assert_eq!(r.phase, Phase::Load, "from the traceback");
        assert_eq!(label(&r, oomlens_parse::PHASE_SOURCE_LABEL), Some("traceback"));
        // A phase the job reported wins, and the traceback's clue is not attached to it.
        let r = oom(r#"{"v":1,"type":"oom","phase":"forward","message":"  File \"/app/run.py\", line 9, in <module>\n    model = AutoModelForCausalLM.from_pretrained(name)\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB. GPU 2 has a total capacity of 23.55 GiB of which 312.00 MiB is free."}"#)
            .event;
        assert_eq!(r.phase, Phase::Forward);
        assert_eq!(label(&r, oomlens_parse::PHASE_SOURCE_LABEL), None);
    }

    #[test]
    fn full_report_maps_every_field() {
        let r = oom(r#"{"v":1,"type":"oom","pid":42,"gpu_index":3,"requested_bytes":1073741824,
            "message":"torch.OutOfMemoryError: CUDA out of memory.","framework":"pytorch","phase":"backward",
            "memory_stats":{"allocated_bytes.all.current":100,"reserved_bytes.all.current":150,
              "allocated_bytes.all.peak":120,"num_alloc_retries":2,"num_ooms":1,"future.key":[1,2]},
            "mem_get_info":{"free_bytes":10,"total_bytes":1000},"process_used_bytes":160,
            "job":{"params":7000000000,"batch":8,"seq_len":4096,"hidden":4096,"layers":32,"heads":32,
              "precision":"bf16","optimizer":"adamw","zero_stage":2,"tp":2,"pp":1,"dp":4,
              "activation_checkpointing":true,"flash_attention":false},
            "labels":{"team":"nlp","rank":3}}"#);
        let e = &r.event;
        assert_eq!(r.pid, Some(42));
        assert_eq!(
            (e.kind, e.source, e.framework.as_str()),
            (OomKind::CudaOom, EventSource::Hook, "pytorch")
        );
        assert_eq!((e.gpu_index, e.requested_bytes), (Some(3), Some(1 << 30)));
        assert_eq!((e.allocated_bytes, e.reserved_bytes), (Some(100), Some(150)));
        assert_eq!((e.free_bytes, e.capacity_bytes, e.process_used_bytes), (Some(10), Some(1000), Some(160)));
        assert_eq!(e.phase, Phase::Backward);
        assert_eq!(e.job.params, Some(7_000_000_000));
        assert_eq!(
            (e.job.zero_stage, e.job.tensor_parallel, e.job.data_parallel),
            (Some(2), Some(2), Some(4))
        );
        assert_eq!((e.job.activation_checkpointing, e.job.flash_attention), (Some(true), Some(false)));
        assert_eq!(e.job.precision.as_deref(), Some("bf16"));
        let labels: Vec<(&str, &str)> = e.labels.iter().map(|l| (l.key.as_str(), l.value.as_str())).collect();
        assert_eq!(
            labels,
            vec![
                ("torch.allocated_bytes.all.peak", "120"),
                ("torch.num_alloc_retries", "2"),
                ("torch.num_ooms", "1"),
                ("job.rank", "3"),
                ("job.team", "nlp"),
            ]
        );
        assert!(e.raw_message.contains("CUDA out of memory"));
    }

    #[test]
    fn minimal_report_and_nulls() {
        let r = oom(r#"{"v":1,"type":"oom","pid":null,"job":null,"phase":null}"#);
        assert_eq!(r.pid, None);
        assert_eq!(r.event.phase, Phase::Unknown);
        assert_eq!(r.event.framework, "pytorch");
        assert_eq!(parse_line(br#"{"v":1,"type":"ping"}"#), Ok(Request::Ping));
    }

    #[test]
    fn bad_lines_are_named() {
        assert_eq!(err("not json").reason, "not_json");
        assert_eq!(err("[1,2]").reason, "not_object");
        assert_eq!(err(r#"{"type":"oom"}"#).reason, "version");
        let e = err(r#"{"v":3,"type":"oom"}"#);
        assert!(e.reason == "version" && e.message.contains("version 3"), "{e:?}");
        assert_eq!(err(r#"{"v":"1","type":"oom"}"#).reason, "version");
        assert_eq!(err(r#"{"v":1,"type":"crash"}"#).reason, "type");
        assert_eq!(err(r#"{"v":1}"#).reason, "type");
        let cases = [
            (r#"{"v":1,"type":"oom","pid":"42"}"#, "\"pid\": expected a non-negative integer, got a string"),
            (r#"{"v":1,"type":"oom","pid":-1}"#, "\"pid\""),
            (r#"{"v":1,"type":"oom","gpu_index":5000000000}"#, "out of range"),
            (r#"{"v":1,"type":"oom","phase":"warmup"}"#, "unknown phase"),
            (r#"{"v":1,"type":"oom","seqlen":5}"#, "unknown field \"seqlen\""),
            (r#"{"v":1,"type":"oom","job":{"seqlen":5}}"#, "unknown field \"job.seqlen\""),
            (r#"{"v":1,"type":"oom","job":{"zero_stage":4}}"#, "ZeRO"),
            (r#"{"v":1,"type":"oom","job":{"tp":0}}"#, "at least 1"),
            (r#"{"v":1,"type":"oom","job":{"flash_attention":"yes"}}"#, "true or false"),
            (
                r#"{"v":1,"type":"oom","memory_stats":{"allocated_bytes.all.current":1.5}}"#,
                "memory_stats.allocated",
            ),
            (r#"{"v":1,"type":"oom","memory_stats":[]}"#, "expected an object"),
            (r#"{"v":1,"type":"oom","labels":{"bad key":"x"}}"#, "labels"),
            (r#"{"v":1,"type":"oom","labels":{"k":{"x":1}}}"#, "labels.k"),
            (r#"{"v":1,"type":"oom","mem_get_info":{"free":1}}"#, "mem_get_info.free"),
        ];
        for (line, needle) in cases {
            let e = err(line);
            assert_eq!(e.reason, "field", "{line}");
            assert!(e.message.contains(needle), "{line}: {}", e.message);
        }
        let long = format!(r#"{{"v":1,"type":"oom","framework":"{}"}}"#, "x".repeat(MAX_SHORT + 1));
        assert!(err(&long).message.contains("framework"));
    }

    #[test]
    fn long_messages_are_cut_not_refused() {
        let line = format!(r#"{{"v":1,"type":"oom","message":"{}"}}"#, "é".repeat(MAX_RAW_MESSAGE));
        let r = oom(&line);
        assert!(
            r.event.raw_message.len() <= MAX_RAW_MESSAGE && r.event.raw_message.len() > MAX_RAW_MESSAGE - 2
        );
    }

    #[test]
    fn replies_are_json_lines() {
        let ok: Value = serde_json::from_str(&reply_ok(Some(7))).unwrap();
        assert_eq!(ok, json!({"ok": true, "event_id": "7"}));
        let bad: Value = serde_json::from_str(&reply_error("line \"x\"\nbad")).unwrap();
        assert_eq!(bad["ok"], json!(false));
        assert!(!reply_error("a\nb").contains('\n'));
    }

    #[test]
    fn event_json_has_every_field() {
        let r = oom(r#"{"v":1,"type":"oom","job":{"tp":2},"labels":{"team":"x"}}"#);
        let j = event_json(&r.event);
        assert_eq!(j["job"]["tp"], json!(2));
        assert_eq!(j["labels"]["job.team"], json!("x"));
        assert_eq!(j["source"], json!("hook"));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(raw in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = parse_line(&raw);
        }

        #[test]
        fn arbitrary_json_values_never_panic(
            key in proptest::sample::select(TOP_KEYS.to_vec()),
            value in proptest::prop_oneof![
                proptest::num::i64::ANY.prop_map(|n| json!(n)),
                proptest::num::f64::ANY.prop_map(|n| json!(n)),
                "\\PC{0,80}".prop_map(|s| json!(s)),
                proptest::bool::ANY.prop_map(|b| json!(b)),
                proptest::strategy::Just(json!({"batch": -1, "zero_stage": 99, "x": null})),
                proptest::strategy::Just(json!([1, "2", null])),
            ],
        ) {
            let mut obj = json!({"v": 1, "type": "oom"});
            obj[key] = value;
            let line = obj.to_string();
            match parse_line(line.as_bytes()) {
                Ok(_) => {}
                Err(e) => proptest::prop_assert!(!e.message.is_empty()),
            }
        }
    }
}
