#![allow(clippy::unwrap_used, clippy::expect_used)]
//! One failure, one event, end to end on the agent's own pieces: a PyTorch OOM (no pid, as
//! PyTorch prints it) read from a job log by the real [`Follower`] and parser, and the process
//! vanishing from its nearly full GPU in the NVML samples, go through the batcher's
//! [`EventStage`] (vanish detection + merger) and come out as ONE event with the message's
//! numbers and the vanished process's pid — whichever arrives first.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use oomlens_agent::detect::merge::MERGED_LABEL;
use oomlens_agent::pipeline::event_stage::EventStage;
use oomlens_agent::source::Reading;
use oomlens_schema::{EventSource, GpuSample, Label, OomEvent, OomKind, ProcessSample};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

const PYTORCH_OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
GPU 1 has a total capacity of 79.15 GiB of which 1.10 GiB is free. Including non-PyTorch memory, \
this process has 78.04 GiB memory in use. Of the allocated memory 74.50 GiB is allocated by \
PyTorch, and 2.05 GiB is reserved by PyTorch but unallocated.\n";

/// The events the real follower + parser report for a log holding one PyTorch OOM.
fn log_events(dir: &Path) -> Vec<OomEvent> {
    let path = dir.join("train.log");
    std::fs::write(&path, format!("epoch 3 step 120\n{PYTORCH_OOM}")).unwrap();
    let mut f = common::log_follower(dir, None, Duration::ZERO);
    common::poll_rounds(&mut f, &mut Instant::now())
}

/// GPUs 0 and 1 at `ts_ms`; GPU 1 nearly full with pid 4242 on it while `alive`.
fn reading(ts_ms: i64, alive: bool, events: Vec<OomEvent>) -> Reading {
    let gpu = |index: u32, used: u64| GpuSample {
        ts_ms,
        gpu_index: index,
        memory_used_bytes: Some(used),
        memory_free_bytes: Some(80 * GIB - used),
        memory_total_bytes: Some(80 * GIB),
        ..GpuSample::default()
    };
    let mut process_samples = vec![ProcessSample {
        ts_ms,
        gpu_index: 0,
        pid: 77,
        name: "other".into(),
        used_bytes: Some(10 * GIB),
        labels: Vec::new(),
    }];
    if alive {
        process_samples.push(ProcessSample {
            ts_ms,
            gpu_index: 1,
            pid: 4242,
            name: "python".into(),
            used_bytes: Some(78 * GIB),
            labels: vec![Label { key: "k8s.pod".into(), value: "trainer-0".into() }],
        });
    }
    let used1 = if alive { 79 * GIB } else { 500 * MIB };
    Reading {
        gpu_samples: vec![gpu(0, 10 * GIB), gpu(1, used1)],
        process_samples,
        events,
        ..Reading::default()
    }
}

fn check(out: &[OomEvent], log: &OomEvent) {
    assert_eq!(out.len(), 1, "one failure, one event: {out:#?}");
    let e = &out[0];
    assert_eq!((e.kind, e.source, e.framework.as_str()), (OomKind::CudaOom, EventSource::Log, "pytorch"));
    assert_eq!((e.event_id, e.ts_ms), (log.event_id, log.ts_ms));
    assert_eq!((e.pid, e.gpu_index), (Some(4242), Some(1)));
    assert_eq!(e.requested_bytes, Some(2 * GIB), "the message's numbers");
    assert_eq!(e.process_used_bytes, log.process_used_bytes, "the message's own value wins");
    assert_ne!(e.process_used_bytes, Some(78 * GIB));
    assert!(e.labels.iter().any(|l| l.key == "k8s.pod" && l.value == "trainer-0"));
    assert!(e.labels.iter().any(|l| l.key == MERGED_LABEL && l.value == "suspected_oom"));
    assert!(e.raw_message.starts_with("torch.OutOfMemoryError"));
}

#[test]
fn a_pidless_pytorch_oom_and_the_vanished_process_are_one_event_in_either_order() {
    let dir = tempfile::tempdir().unwrap();
    let events = log_events(dir.path());
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!((events[0].pid, events[0].gpu_index), (None, Some(1)), "PyTorch prints no pid");
    let t = events[0].ts_ms;

    // The log line first (with the last sample before the death), the vanish a second later.
    let mut stage = EventStage::new(95.0, 10_000, 64, None);
    let mut out = stage.on_reading(&mut reading(t - 100, true, events.clone()));
    out.extend(stage.on_reading(&mut reading(t + 1_000, false, Vec::new())));
    out.extend(stage.on_reading(&mut reading(t + 20_000, false, Vec::new())));
    check(&out, &events[0]);

    // The vanish first, the log line read three seconds later.
    let mut stage = EventStage::new(95.0, 10_000, 64, None);
    let mut out = stage.on_reading(&mut reading(t - 3_000, true, Vec::new()));
    out.extend(stage.on_reading(&mut reading(t - 2_000, false, Vec::new())));
    out.extend(stage.on_reading(&mut reading(t, false, events.clone())));
    out.extend(stage.drain());
    check(&out, &events[0]);

    // The log line long after the vanish: two events.
    let mut stage = EventStage::new(95.0, 10_000, 64, None);
    let mut out = stage.on_reading(&mut reading(t - 30_000, true, Vec::new()));
    out.extend(stage.on_reading(&mut reading(t - 29_000, false, Vec::new())));
    out.extend(stage.on_reading(&mut reading(t, false, events)));
    out.extend(stage.drain());
    assert_eq!(out.len(), 2);
    assert!(out.iter().any(|e| e.kind == OomKind::SuspectedOom && e.pid == Some(4242)));
    assert!(out.iter().any(|e| e.kind == OomKind::CudaOom && e.pid.is_none()));
}
