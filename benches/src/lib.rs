//! `oomlens-benches`: deterministic fixtures for the codec benchmarks, and the baselines they are
//! compared with.
//!
//! * [`sample_batch`] — a realistic [`Batch`]: H100 nodes, training/inference processes with
//!   Kubernetes labels, a couple of OOM events. The reference shape is
//!   [`REFERENCE_GPUS`] × [`REFERENCE_PROCS_PER_GPU`] × [`REFERENCE_SAMPLES`].
//! * [`prometheus_text`] — the same GPU readings as dcgm-exporter serves them (Prometheus text
//!   exposition format), and [`parse_prometheus_text`], a scraper-side parser for the decode side.
//! * [`json`] / [`json_decode`] — the same readings as plain JSON objects, one per GPU sample.
//!
//! Everything is a pure function of its arguments: the same call gives the same bytes.
//!
//! Whole-pipeline benchmarks (the `loadgen` binary):
//!
//! * [`loadgen`] — simulated agents over real QUIC: pre-encoded frame pool, protocol driver, counters.
//! * [`chbaseline`] — the same rows inserted by `clickhouse-client` (RowBinary) and as JSONEachRow
//!   over HTTP, the baselines of the pipeline's throughput.
//! * [`procfs`] — CPU and memory of a process from `/proc`.
//! * [`workspace`] — the workspace binaries the benchmarks run as child processes.

pub mod chbaseline;
pub mod loadgen;
pub mod procfs;
pub mod workspace;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use oomlens_schema::{
    Batch, EventSource, GpuInfo, GpuSample, JobShape, Label, OomEvent, OomKind, OtherProcess, Phase,
    ProcessSample, Scenario,
};
use serde::{Deserialize, Serialize};

/// GPUs per node in the reference batch.
pub const REFERENCE_GPUS: u32 = 8;
/// Processes per GPU in the reference batch.
pub const REFERENCE_PROCS_PER_GPU: u32 = 16;
/// Samples per GPU in the reference batch (one per second: a 10 s batch).
pub const REFERENCE_SAMPLES: u32 = 10;

/// Node name of the fixtures (dcgm-exporter's `Hostname` label).
pub const HOSTNAME: &str = "gpu-node-017.dc1.example.com";
/// GPU model of the fixtures.
pub const MODEL: &str = "NVIDIA H100 80GB HBM3";
/// Framebuffer of an H100 80GB HBM3 as NVML reports it (81 559 MiB).
pub const GPU_TOTAL_BYTES: u64 = 81_559 * MIB;
/// Memory reserved by driver and firmware (NVML v2 `reserved`).
pub const GPU_RESERVED_BYTES: u64 = 531 * MIB;
/// First timestamp of the fixtures (Unix ms).
pub const BASE_TS_MS: i64 = 1_754_000_000_000;
/// Interval between samples, ms.
pub const INTERVAL_MS: i64 = 1_000;

const MIB: u64 = 1 << 20;

/// SplitMix64: a tiny deterministic generator, enough for fixtures.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// The NVML uuid of fixture GPU `index`.
pub fn gpu_uuid(index: u32) -> String {
    let mut r = Rng(0x00C0_FFEE ^ u64::from(index));
    let (a, b) = (r.next(), r.next());
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// The inventory of a fixture node (what its `Hello` announces).
pub fn gpu_inventory(gpus: u32) -> Vec<GpuInfo> {
    (0..gpus)
        .map(|index| GpuInfo {
            index,
            uuid: gpu_uuid(index),
            name: MODEL.to_owned(),
            memory_total_bytes: GPU_TOTAL_BYTES,
            mig: false,
        })
        .collect()
}

const NAMESPACES: &[&str] = &["ml-research", "llm-serving", "recsys", "vision-train"];
const WORKLOADS: &[(&str, &str, &str)] = &[
    ("llama3-70b-sft", "trainer", "pt_main_thread"),
    ("mixtral-8x7b-serve", "vllm", "python3"),
    ("dlrm-v2-train", "trainer", "python"),
    ("vit-h14-pretrain", "trainer", "torchrun"),
];

/// Deterministic description of process `p` on GPU `g`.
fn workload(g: u32, p: u32) -> (u32, &'static str, Vec<Label>) {
    let w = ((g / 2 + p) as usize) % WORKLOADS.len();
    let (app, container, comm) = WORKLOADS[w];
    let ns = NAMESPACES[w % NAMESPACES.len()];
    let mut r = Rng(u64::from(g) << 32 | u64::from(p));
    let pod = format!("{app}-{:08x}-{:05x}", r.next() as u32, r.next() & 0xfffff);
    let labels = vec![
        Label { key: "k8s.namespace".into(), value: ns.into() },
        Label { key: "k8s.pod".into(), value: pod },
        Label { key: "k8s.container".into(), value: container.into() },
        Label { key: "team".into(), value: ns.split('-').next().unwrap_or(ns).into() },
    ];
    (100_000 + g * 1_000 + p * 7, comm, labels)
}

/// A realistic batch: `samples` readings (one per second) of `gpus` GPUs with `procs_per_gpu`
/// processes each, plus two OOM events (a PyTorch CUDA OOM and a suspected OOM) when there is at
/// least one GPU. Deterministic.
pub fn sample_batch(gpus: u32, procs_per_gpu: u32, samples: u32) -> Batch {
    let mut rng = Rng(0x0011_2233_4455_6677);
    let n_gpu = (gpus * samples) as usize;
    let mut gpu_samples = Vec::with_capacity(n_gpu);
    let mut process_samples = Vec::with_capacity(n_gpu * procs_per_gpu as usize);
    // Each process's static floor, then a forward/backward saw-tooth on top.
    let budget = (GPU_TOTAL_BYTES - GPU_RESERVED_BYTES) * 9 / 10 / u64::from(procs_per_gpu.max(1));
    let floors: Vec<u64> =
        (0..gpus * procs_per_gpu).map(|_| rng.range(budget / 3, budget / 2) / MIB * MIB).collect();
    for s in 0..samples {
        let ts_ms = BASE_TS_MS + i64::from(s) * INTERVAL_MS;
        for g in 0..gpus {
            let mut used = GPU_RESERVED_BYTES + 4 * MIB * u64::from(procs_per_gpu);
            for p in 0..procs_per_gpu {
                let floor = floors[(g * procs_per_gpu + p) as usize];
                let phase = u64::from((s + p) % 4);
                let proc_used = floor + phase * (budget - floor) / 4 + rng.range(0, 64) * MIB;
                used += proc_used;
                let (pid, comm, labels) = workload(g, p);
                process_samples.push(ProcessSample {
                    ts_ms,
                    gpu_index: g,
                    pid,
                    name: comm.to_owned(),
                    used_bytes: Some(proc_used),
                    labels,
                });
            }
            let used = used.min(GPU_TOTAL_BYTES);
            let busy = procs_per_gpu > 0;
            gpu_samples.push(GpuSample {
                ts_ms,
                gpu_index: g,
                memory_used_bytes: Some(used),
                memory_free_bytes: Some(GPU_TOTAL_BYTES - used),
                memory_total_bytes: Some(GPU_TOTAL_BYTES),
                memory_reserved_bytes: Some(GPU_RESERVED_BYTES),
                util_gpu_pct: Some(if busy { rng.range(72, 100) as u8 } else { 0 }),
                util_mem_pct: Some(if busy { rng.range(25, 61) as u8 } else { 0 }),
                power_mw: Some(rng.range(if busy { 420_000 } else { 68_000 }, 699_000) as u32),
                temperature_c: Some(rng.range(38, 79) as i16),
                sm_clock_mhz: Some(if busy { 1_980 } else { 345 }),
                mem_clock_mhz: Some(2_619),
            });
        }
    }
    let events = if gpus == 0 { Vec::new() } else { oom_events(gpus, procs_per_gpu, samples) };
    Batch { seq: 42, gpu_samples, process_samples, events }
}

fn oom_events(gpus: u32, procs_per_gpu: u32, samples: u32) -> Vec<OomEvent> {
    let g = 3 % gpus;
    let (pid, _, labels) = workload(g, 0);
    let ts_ms = BASE_TS_MS + i64::from(samples.saturating_sub(1)) * INTERVAL_MS + 317;
    let others = (1..procs_per_gpu.min(8))
        .map(|p| OtherProcess { pid: workload(g, p).0, used_bytes: (2_100 + u64::from(p) * 311) * MIB })
        .collect();
    let raw = format!(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU {g} has a total \
         capacity of 79.65 GiB of which 1.19 GiB is free. Process {pid} has 71.02 GiB memory in use. Of \
         the allocated memory 66.31 GiB is allocated by PyTorch, and 3.87 GiB is reserved by PyTorch \
         but unallocated. If reserved but unallocated memory is large try setting \
         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    );
    let cuda_oom = OomEvent {
        event_id: 0x5EED_0000_0000_0001,
        ts_ms,
        kind: OomKind::CudaOom,
        source: EventSource::Log,
        framework: "pytorch".into(),
        gpu_index: Some(g),
        pid: Some(pid),
        requested_bytes: Some(2_560 * MIB),
        capacity_bytes: Some(GPU_TOTAL_BYTES),
        free_bytes: Some(1_219 * MIB),
        allocated_bytes: Some(67_901 * MIB),
        reserved_bytes: Some(71_864 * MIB),
        process_used_bytes: Some(72_724 * MIB),
        other_processes: others,
        phase: Phase::Backward,
        job: JobShape {
            params: Some(70_000_000_000),
            batch: Some(4),
            seq_len: Some(8_192),
            hidden: Some(8_192),
            layers: Some(80),
            heads: Some(64),
            precision: Some("bf16".into()),
            optimizer: Some("adamw".into()),
            zero_stage: Some(3),
            tensor_parallel: Some(8),
            pipeline_parallel: Some(1),
            data_parallel: Some(16),
            activation_checkpointing: Some(false),
            flash_attention: Some(true),
        },
        labels,
        truth: Some(Scenario::Batch),
        raw_message: raw,
        ..OomEvent::default()
    };
    let g2 = 5 % gpus;
    let (pid2, _, labels2) = workload(g2, 1);
    let suspected = OomEvent {
        event_id: 0x5EED_0000_0000_0002,
        ts_ms: ts_ms - 4_211,
        kind: OomKind::SuspectedOom,
        source: EventSource::Nvml,
        framework: "unknown".into(),
        gpu_index: Some(g2),
        pid: Some(pid2),
        capacity_bytes: Some(GPU_TOTAL_BYTES),
        free_bytes: Some(212 * MIB),
        process_used_bytes: Some(38_204 * MIB),
        labels: labels2,
        raw_message: format!("process {pid2} vanished while GPU {g2} had 212 MiB free"),
        ..OomEvent::default()
    };
    vec![cuda_oom, suspected]
}

/// The batch without its process samples and events: the GPU-only readings.
pub fn gpu_only(batch: &Batch) -> Batch {
    Batch {
        seq: batch.seq,
        gpu_samples: batch.gpu_samples.clone(),
        process_samples: Vec::new(),
        events: Vec::new(),
    }
}

/// The batch without its events (Prometheus and the JSON baseline carry no events).
pub fn without_events(batch: &Batch) -> Batch {
    Batch { events: Vec::new(), ..batch.clone() }
}

/// Writes one reading in dcgm-exporter's unit; false when the reading is missing.
type ValueWriter = fn(&GpuSample, &mut String) -> bool;

fn put<T: std::fmt::Display>(out: &mut String, v: Option<T>) -> bool {
    v.is_some_and(|v| write!(out, "{v}").is_ok())
}

/// The metric families dcgm-exporter serves for the readings of a [`GpuSample`]: name, help and
/// how to write the value. Units are dcgm-exporter's: MiB, %, W, °C, MHz.
const DCGM_FAMILIES: [(&str, &str, ValueWriter); 8] = [
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", |s, o| put(o, s.sm_clock_mhz)),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", |s, o| put(o, s.mem_clock_mhz)),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |s, o| put(o, s.temperature_c)),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |s, o| {
        s.power_mw.is_some_and(|mw| write!(o, "{:.3}", f64::from(mw) / 1000.0).is_ok())
    }),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |s, o| put(o, s.util_gpu_pct)),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", |s, o| put(o, s.util_mem_pct)),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", |s, o| {
        put(o, s.memory_free_bytes.map(|b| b / MIB))
    }),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", |s, o| {
        put(o, s.memory_used_bytes.map(|b| b / MIB))
    }),
];

/// Name of the per-process gauge in [`prometheus_text`]. dcgm-exporter has no per-process metric;
/// this is the gauge one would have to add to carry what oomlens's process samples carry.
pub const PROCESS_METRIC: &str = "gpu_process_memory_used_bytes";

/// Appends a label value, escaped for the text format.
fn push_escaped(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// dcgm-exporter's label set of one GPU, without the closing brace.
fn gpu_labels(g: u32) -> String {
    format!(
        "{{gpu=\"{g}\",UUID=\"{}\",device=\"nvidia{g}\",modelName=\"{MODEL}\",Hostname=\"{HOSTNAME}\"",
        gpu_uuid(g)
    )
}

/// The batch's GPU readings as dcgm-exporter serves them: Prometheus text exposition format,
/// `# HELP` / `# TYPE` once per family, labels `gpu`, `UUID`, `device`, `modelName`, `Hostname`,
/// explicit millisecond timestamps; readings that are `None` are absent. Process samples, when the
/// batch has any, follow as the [`PROCESS_METRIC`] gauge with `pid`, `process` and the Kubernetes
/// labels. Events are not represented.
pub fn prometheus_text(batch: &Batch) -> String {
    let mut out =
        String::with_capacity(batch.gpu_samples.len() * 8 * 200 + batch.process_samples.len() * 260);
    if batch.gpu_samples.is_empty() {
        return out;
    }
    // Label sets are rendered once per GPU, as an exporter would cache them.
    let labels: BTreeMap<u32, String> = batch
        .gpu_samples
        .iter()
        .map(|s| (s.gpu_index, gpu_labels(s.gpu_index)))
        .chain(batch.process_samples.iter().map(|p| (p.gpu_index, gpu_labels(p.gpu_index))))
        .collect();
    let labels_of = |g: u32| labels.get(&g).map_or("{", String::as_str);
    for (name, help, value) in DCGM_FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for s in &batch.gpu_samples {
            let line_start = out.len();
            out.push_str(name);
            out.push_str(labels_of(s.gpu_index));
            out.push_str("} ");
            if value(s, &mut out) {
                let _ = writeln!(out, " {}", s.ts_ms);
            } else {
                out.truncate(line_start);
            }
        }
    }
    if !batch.process_samples.is_empty() {
        let _ = writeln!(out, "# HELP {PROCESS_METRIC} GPU memory used by one process (in B).");
        let _ = writeln!(out, "# TYPE {PROCESS_METRIC} gauge");
        for p in &batch.process_samples {
            let Some(used) = p.used_bytes else { continue };
            out.push_str(PROCESS_METRIC);
            out.push_str(labels_of(p.gpu_index));
            let _ = write!(out, ",pid=\"{}\",process=\"", p.pid);
            push_escaped(&mut out, &p.name);
            out.push('"');
            for l in &p.labels {
                out.push(',');
                out.extend(l.key.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }));
                out.push_str("=\"");
                push_escaped(&mut out, &l.value);
                out.push('"');
            }
            let _ = writeln!(out, "}} {used} {}", p.ts_ms);
        }
    }
    out
}

/// One sample line of the Prometheus text format.
#[derive(Debug, Clone, PartialEq)]
pub struct PromSample {
    /// Metric name.
    pub name: String,
    /// Labels in order of appearance.
    pub labels: Vec<(String, String)>,
    /// The sample value, parsed as a float.
    pub value: f64,
    /// Timestamp, ms, when present.
    pub ts_ms: Option<i64>,
}

/// Why a Prometheus text line could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct PromParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: &'static str,
}

/// A scraper-side parser for the subset of the text exposition format [`prometheus_text`] writes
/// (comments skipped, quoted label values with `\\`, `\"`, `\n` escapes, optional timestamp).
pub fn parse_prometheus_text(text: &str) -> Result<Vec<PromSample>, PromParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let err = |reason| PromParseError { line: i + 1, reason };
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, mut rest) = match line.find(['{', ' ']) {
            Some(pos) => line.split_at(pos),
            None => return Err(err("no value")),
        };
        let mut labels = Vec::new();
        if let Some(mut r) = rest.strip_prefix('{') {
            loop {
                if let Some(after) = r.strip_prefix('}') {
                    rest = after;
                    break;
                }
                r = r.strip_prefix(',').unwrap_or(r);
                let eq = r.find('=').ok_or_else(|| err("label without '='"))?;
                let key = &r[..eq];
                let mut chars =
                    r[eq + 1..].strip_prefix('"').ok_or_else(|| err("unquoted label"))?.char_indices();
                let mut value = String::new();
                let end = loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, c)) => value.push(c),
                            None => return Err(err("dangling escape")),
                        },
                        Some((j, '"')) => break j,
                        Some((_, c)) => value.push(c),
                        None => return Err(err("unterminated label value")),
                    }
                };
                labels.push((key.to_owned(), value));
                r = &r[eq + 2 + end + 1..];
            }
        }
        let mut fields = rest.split_ascii_whitespace();
        let value = fields.next().and_then(|v| v.parse::<f64>().ok()).ok_or_else(|| err("bad value"))?;
        let ts_ms = match fields.next() {
            Some(ts) => Some(ts.parse::<i64>().map_err(|_| err("bad timestamp"))?),
            None => None,
        };
        out.push(PromSample { name: name.to_owned(), labels, value, ts_ms });
    }
    Ok(out)
}

/// One process in the JSON baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonProcess {
    /// Host PID.
    pub pid: u32,
    /// Process name.
    pub name: String,
    /// GPU memory used, bytes.
    pub used_bytes: Option<u64>,
    /// Workload labels.
    pub labels: BTreeMap<String, String>,
}

/// One GPU sample in the JSON baseline: the [`GpuSample`] fields plus that GPU's processes at
/// that time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonGpuSample {
    /// Unix ms.
    pub ts_ms: i64,
    /// GPU index.
    pub gpu_index: u32,
    /// Used bytes.
    pub memory_used_bytes: Option<u64>,
    /// Free bytes.
    pub memory_free_bytes: Option<u64>,
    /// Total bytes.
    pub memory_total_bytes: Option<u64>,
    /// Reserved bytes.
    pub memory_reserved_bytes: Option<u64>,
    /// SM utilisation, %.
    pub util_gpu_pct: Option<u8>,
    /// Memory utilisation, %.
    pub util_mem_pct: Option<u8>,
    /// Power, mW.
    pub power_mw: Option<u32>,
    /// Temperature, °C.
    pub temperature_c: Option<i16>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub mem_clock_mhz: Option<u32>,
    /// Processes on this GPU at this time.
    pub processes: Vec<JsonProcess>,
}

/// The batch as plain JSON structs, one per GPU sample (processes nested; events not represented).
pub fn json_samples(batch: &Batch) -> Vec<JsonGpuSample> {
    let mut out: Vec<JsonGpuSample> = batch
        .gpu_samples
        .iter()
        .map(|s| JsonGpuSample {
            ts_ms: s.ts_ms,
            gpu_index: s.gpu_index,
            memory_used_bytes: s.memory_used_bytes,
            memory_free_bytes: s.memory_free_bytes,
            memory_total_bytes: s.memory_total_bytes,
            memory_reserved_bytes: s.memory_reserved_bytes,
            util_gpu_pct: s.util_gpu_pct,
            util_mem_pct: s.util_mem_pct,
            power_mw: s.power_mw,
            temperature_c: s.temperature_c,
            sm_clock_mhz: s.sm_clock_mhz,
            mem_clock_mhz: s.mem_clock_mhz,
            processes: Vec::new(),
        })
        .collect();
    let position: BTreeMap<(i64, u32), usize> =
        out.iter().enumerate().map(|(i, s)| ((s.ts_ms, s.gpu_index), i)).collect();
    for p in &batch.process_samples {
        if let Some(&i) = position.get(&(p.ts_ms, p.gpu_index)) {
            out[i].processes.push(JsonProcess {
                pid: p.pid,
                name: p.name.clone(),
                used_bytes: p.used_bytes,
                labels: p.labels.iter().map(|l| (l.key.clone(), l.value.clone())).collect(),
            });
        }
    }
    out
}

/// [`json_samples`] serialised with serde_json (compact).
pub fn json(batch: &Batch) -> String {
    serde_json::to_string(&json_samples(batch)).unwrap_or_default()
}

/// Parses what [`json`] wrote.
pub fn json_decode(text: &str) -> Result<Vec<JsonGpuSample>, serde_json::Error> {
    serde_json::from_str(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomlens_schema::Frame;
    use oomlens_schema::limits::WithinLimits;

    fn reference() -> Batch {
        sample_batch(REFERENCE_GPUS, REFERENCE_PROCS_PER_GPU, REFERENCE_SAMPLES)
    }

    #[test]
    fn reference_batch_has_the_promised_shape() {
        let b = reference();
        assert_eq!(b.gpu_samples.len(), 80);
        assert_eq!(b.process_samples.len(), 8 * 16 * 10);
        assert_eq!(b.events.len(), 2);
        assert!(b.check_limits().is_ok());
        for s in &b.gpu_samples {
            let (used, free, total) =
                (s.memory_used_bytes.unwrap(), s.memory_free_bytes.unwrap(), s.memory_total_bytes.unwrap());
            assert_eq!(used + free, total);
            assert!(used > total / 2 && used <= total, "{used} of {total}");
            assert!(s.util_gpu_pct.unwrap() <= 100 && s.util_mem_pct.unwrap() <= 100);
        }
        // Processes of one GPU at one time fit into the GPU's used memory.
        let per_gpu: u64 = b
            .process_samples
            .iter()
            .filter(|p| p.ts_ms == BASE_TS_MS && p.gpu_index == 0)
            .map(|p| p.used_bytes.unwrap())
            .sum();
        assert!(per_gpu < b.gpu_samples[0].memory_used_bytes.unwrap());
        assert!(b.process_samples.iter().all(|p| p.labels.iter().any(|l| l.key == "k8s.pod")));
        assert_eq!(b.events[0].kind, OomKind::CudaOom);
        assert!(b.events[0].raw_message.contains("CUDA out of memory"));
    }

    #[test]
    fn fixtures_are_deterministic_and_round_trip_the_codec() {
        let b = reference();
        assert_eq!(b, reference());
        let bytes = Frame::Batch(b.clone()).encode().unwrap();
        assert_eq!(bytes, Frame::Batch(reference()).encode().unwrap());
        assert_eq!(Frame::decode(&bytes).unwrap(), Frame::Batch(b));
        assert_ne!(gpu_uuid(0), gpu_uuid(1));
        assert_eq!(gpu_uuid(3).len(), "GPU-d1a4c2b0-3e8f-4a11-9c3b-2f6d7e8a9b0c".len());
        assert_eq!(gpu_inventory(8).len(), 8);
    }

    #[test]
    fn degenerate_shapes_do_not_panic() {
        assert!(sample_batch(0, 16, 10).is_empty());
        let b = sample_batch(2, 0, 3);
        assert_eq!((b.gpu_samples.len(), b.process_samples.len()), (6, 0));
        assert_eq!(prometheus_text(&Batch::default()), "");
        assert_eq!(json(&Batch::default()), "[]");
    }

    #[test]
    fn prometheus_text_looks_like_dcgm_exporter() {
        let b = gpu_only(&reference());
        let text = prometheus_text(&b);
        for name in [
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_MEM_CLOCK",
        ] {
            assert_eq!(text.matches(&format!("# TYPE {name} gauge\n")).count(), 1, "{name}");
            assert_eq!(text.matches(&format!("# HELP {name} ")).count(), 1, "{name}");
        }
        assert!(!text.contains(PROCESS_METRIC));
        let first = text.lines().find(|l| !l.starts_with('#')).unwrap();
        assert!(first.starts_with(&format!(
            "DCGM_FI_DEV_SM_CLOCK{{gpu=\"0\",UUID=\"{}\",device=\"nvidia0\",modelName=\"{MODEL}\",Hostname=\"{HOSTNAME}\"}} 1980 {BASE_TS_MS}",
            gpu_uuid(0)
        )), "{first}");

        let parsed = parse_prometheus_text(&text).unwrap();
        assert_eq!(parsed.len(), 8 * 80);
        let fb_used = parsed
            .iter()
            .find(|s| s.name == "DCGM_FI_DEV_FB_USED" && s.labels[0].1 == "2" && s.ts_ms == Some(BASE_TS_MS))
            .unwrap();
        let want = b.gpu_samples.iter().find(|s| s.gpu_index == 2 && s.ts_ms == BASE_TS_MS).unwrap();
        assert_eq!(fb_used.value, (want.memory_used_bytes.unwrap() / MIB) as f64);
        let power = parsed.iter().find(|s| s.name == "DCGM_FI_DEV_POWER_USAGE").unwrap();
        assert_eq!(power.value, f64::from(b.gpu_samples[0].power_mw.unwrap()) / 1000.0);
    }

    #[test]
    fn prometheus_text_carries_processes_and_skips_missing_readings() {
        let mut b = without_events(&sample_batch(1, 2, 1));
        b.gpu_samples[0].power_mw = None;
        b.process_samples[1].used_bytes = None;
        b.process_samples[0].name = "we\"ird\\name".into();
        let text = prometheus_text(&b);
        assert!(!text.lines().any(|l| l.starts_with("DCGM_FI_DEV_POWER_USAGE{")));
        let parsed = parse_prometheus_text(&text).unwrap();
        let procs: Vec<_> = parsed.iter().filter(|s| s.name == PROCESS_METRIC).collect();
        assert_eq!(procs.len(), 1);
        assert!(procs[0].labels.contains(&("process".into(), "we\"ird\\name".into())));
        assert!(procs[0].labels.iter().any(|(k, _)| k == "k8s_pod"));
        assert_eq!(procs[0].value, b.process_samples[0].used_bytes.unwrap() as f64);
    }

    #[test]
    fn prometheus_parser_refuses_garbage() {
        assert!(parse_prometheus_text("metric{a=\"1\" 5").is_err());
        assert!(parse_prometheus_text("metric{a=1} 5").is_err());
        assert!(parse_prometheus_text("metric notanumber").is_err());
        assert!(parse_prometheus_text("metric 1 notatimestamp").is_err());
        assert_eq!(parse_prometheus_text("# only a comment\n\nm 2").unwrap()[0].value, 2.0);
    }

    #[test]
    fn json_nests_processes_per_gpu_sample_and_round_trips() {
        let b = reference();
        let text = json(&b);
        let back = json_decode(&text).unwrap();
        assert_eq!(back, json_samples(&b));
        assert_eq!(back.len(), 80);
        assert!(back.iter().all(|s| s.processes.len() == 16));
        assert_eq!(back[9].memory_used_bytes, b.gpu_samples[9].memory_used_bytes);
        assert_eq!(back[0].processes[0].labels["k8s.container"], "trainer");
        assert!(json(&gpu_only(&b)).contains("\"processes\":[]"));
    }
}
