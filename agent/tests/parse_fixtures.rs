#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The OOM log parser against its fixture corpus (`tests/fixtures/logs/*.log`, one per family of
//! messages, each with the exact `parse --json` output in `*.expected.jsonl`), the real binary on
//! one fixture, and the simulator's messages parsed back to the simulator's own event fields.
//!
//! `structured.log` holds messages of three corpus records (`pytorch-haoming02-sd-webui-forge-
//! classic-395`, `vllm-vllm-project-vllm-10439`, `pytorch-pinokiofactory-flux-webui-25`) as JSON
//! carries them: a python-json-logger record with the traceback in `exc_info`, a server's JSON
//! error response after a prefix, and Docker json-file lines around a JSON logger's records; its
//! events have the numbers the plain records give.
//!
//! `h200_variants.log` holds seven failures as PyTorch 2.11 (CUDA 13.0) printed them on an NVIDIA
//! H200 (driver 580.159.04, 2026-12-04), one job each, written by `deploy/gpu-check/variants.py`:
//! the default caching allocator, `expandable_segments:True`, the `cudaMallocAsync` backend (its
//! own wording: `Allocation on device 0 would exceed allowed memory`, `Device limit`, `Free
//! (according to CUDA)`), a per-process memory fraction (`… allowed;`), a CUDA graph's private
//! pool (`… allocated in private pools (e.g., CUDA Graphs)`), cuBLAS creating its handle on a full
//! GPU, and a pinned host buffer larger than the machine's memory — host memory, which CUDA
//! reports as `torch.AcceleratorError: CUDA error: out of memory` (read with the hint
//! `pinned_host` from its innermost frame, whose line pins). Each job's output is kept as
//! printed (its script path shortened to `/work/`), one blank line between jobs.

use std::path::{Path, PathBuf};

use oomlens_agent::detect::parse::command::parse_reader;
use oomlens_agent::detect::parse::{LineFormat, LogParser};
use oomlens_agent::source::Source;
use oomlens_agent::source::sim::{ScenarioMix, SimConfig, Simulator};
use oomlens_schema::{OomKind, Scenario};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs")
}

fn parse_file(path: &Path) -> String {
    let mut r = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let mut out = String::new();
    parse_reader(&mut r, LineFormat::Auto, &mut |e| {
        out.push_str(&e.to_json());
        out.push('\n');
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn every_fixture_parses_to_its_expected_json() {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    assert!(logs.len() >= 9, "fixture corpus is missing: {logs:?}");
    let mut frameworks = std::collections::BTreeSet::new();
    for log in &logs {
        let expected_path = log.with_extension("expected.jsonl");
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
        let got = parse_file(log);
        assert_eq!(got, expected, "{}", log.display());
        for line in got.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            frameworks.insert(v["framework"].as_str().unwrap().to_owned());
        }
    }
    for f in [
        "pytorch",
        "tensorflow",
        "jax",
        "cuda",
        "nccl",
        "cublas",
        "cudnn",
        "hip",
        "cupy",
        "llama.cpp",
        "vllm",
    ] {
        assert!(frameworks.contains(f), "no fixture event for {f}: {frameworks:?}");
    }
}

#[test]
fn the_binary_prints_the_same_json_and_fails_clearly() {
    let log = fixtures().join("pytorch_v2.log");
    let bin = env!("CARGO_BIN_EXE_oomlens-agent");
    let out = std::process::Command::new(bin).args(["parse", "--json"]).arg(&log).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let expected = std::fs::read_to_string(log.with_extension("expected.jsonl")).unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);

    // Human summary from stdin, explicit format.
    let mut child = std::process::Command::new(bin)
        .args(["parse", "--format", "plain"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(std::fs::read(&log).unwrap().as_slice()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("line 12: pytorch cuda_oom on GPU 2"), "{text}");
    assert!(text.contains("process 4101"), "{text}");

    // No events: success, empty output. Unreadable file: non-zero, the file named.
    let empty = tempfile::NamedTempFile::new().unwrap();
    let out = std::process::Command::new(bin).args(["parse", "--json"]).arg(empty.path()).output().unwrap();
    assert!(out.status.success() && out.stdout.is_empty());
    let out = std::process::Command::new(bin).args(["parse", "/nonexistent/job.log"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/job.log"));
    let out = std::process::Command::new(bin).args(["parse", "--format", "xml"]).output().unwrap();
    assert!(!out.status.success());
}

/// Half a unit of the last printed digit of `c10::format_size`.
fn tolerance(bytes: u64) -> u64 {
    match bytes {
        0..=1024 => 0,
        1025..=1_048_576 => 6,
        1_048_577..=1_073_741_824 => 6 * 1024,
        _ => 6 * 1024 * 1024,
    }
}

fn close_within(what: &str, got: Option<u64>, want: Option<u64>, roundings: u64) {
    let (g, w) = (got.unwrap_or_else(|| panic!("{what}: not parsed")), want.unwrap());
    assert!(g.abs_diff(w) <= roundings * tolerance(w), "{what}: parsed {g}, simulator {w}");
}

fn close(what: &str, got: Option<u64>, want: Option<u64>) {
    close_within(what, got, want, 1);
}

#[test]
fn simulator_messages_parse_back_to_the_simulator_fields() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (seed, scenario) in
        [(1, Scenario::Contention), (2, Scenario::Batch), (3, Scenario::Fragmentation), (4, Scenario::Static)]
    {
        let cfg = SimConfig {
            seed,
            gpus: 4,
            gpu_models: vec!["H100-80GB".into(), "A100-40GB".into()],
            mix: ScenarioMix::only(scenario),
            log_dir: Some(dir.path().join(format!("s{seed}"))),
            ..SimConfig::default()
        };
        let start = 1_714_564_800_000;
        let mut sim = Simulator::new("node-a", cfg, start).unwrap();
        let mut events = Vec::new();
        for k in 1..=60 {
            events.extend(sim.sample(start + k * 10_000).events);
        }
        for e in events.iter().filter(|e| e.kind == OomKind::CudaOom) {
            // The message as the job printed it, parsed alone.
            let mut p = LogParser::new();
            let mut parsed = p.feed_line(&e.raw_message);
            parsed.extend(p.finish());
            assert_eq!(parsed.len(), 1, "{}", e.raw_message);
            let f = &parsed[0].fields;
            assert_eq!(parsed[0].framework, "pytorch");
            assert_eq!(f.gpu, e.gpu_index);
            close("requested", f.requested, e.requested_bytes);
            close("capacity", f.capacity, e.capacity_bytes);
            close("free", f.free, e.free_bytes);
            close("allocated", f.allocated, e.allocated_bytes);
            // 2.x prints allocated and reserved − allocated: two roundings.
            close_within("reserved", f.reserved, e.reserved_bytes, 2);
            if e.raw_message.contains("this process has") {
                close("process_used", f.process_used, e.process_used_bytes);
                assert_eq!(f.other_processes.len(), e.other_processes.len(), "{}", e.raw_message);
                for (a, b) in f.other_processes.iter().zip(&e.other_processes) {
                    assert_eq!(a.pid, b.pid);
                    close("other process", Some(a.used_bytes), Some(b.used_bytes));
                }
            }
            checked += 1;
        }
        // The job log files (tracebacks, training lines, several jobs) give one event per OOM.
        let mut from_logs = 0;
        for entry in std::fs::read_dir(dir.path().join(format!("s{seed}"))).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|n| n != "kern.log") {
                from_logs += parse_file(&path).lines().count();
            }
        }
        let cuda = events.iter().filter(|e| e.kind == OomKind::CudaOom).count();
        assert_eq!(from_logs, cuda, "seed {seed}");
    }
    assert!(checked >= 4, "too few simulated OOMs ({checked})");
}
