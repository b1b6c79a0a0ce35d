#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The failures of a real GPU, replayed through the pipeline. On an NVIDIA H200 an agent with
//! `source.kind = "nvml"` followed the jobs of `deploy/gpu-check/scenarios.py` (each built to fail
//! of one known cause) and, with no collector reachable, kept everything in its disk spool: NVML
//! samples, flight-recorder windows, and the events of the job logs, the hook and the kernel log.
//! That spool (`fixtures/h200/`, provenance in its README) is sent here by a real agent
//! (`source.kind = "none"`, the fixture's spool as its own) over QUIC to a collector into
//! ClickHouse, attributed there, and scored against the cause each job was built to have.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use oomlens_agent::config::SourceKind;
use oomlens_collector::analysis::{self, AttributedEvent, FeatureWindow};

const NODE: &str = "gpu-check";

fn fixture() -> PathBuf {
    repo_root().join("collector/tests/fixtures/h200")
}

/// One job of the run: its log file and the cause it was built to have.
#[derive(Debug, Clone)]
struct Job {
    log: String,
    truth: String,
}

fn jobs() -> Vec<Job> {
    let text = std::fs::read_to_string(fixture().join("scenarios.tsv")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Job { log: f[0].to_owned(), truth: f[1].to_owned() }
        })
        .collect()
}

/// The events in the spool's segment files (event id → kind and source).
fn spooled_events(dir: &Path) -> BTreeMap<u64, (String, String)> {
    spooled_batches(dir)
        .iter()
        .flat_map(|(_, b)| b.events.iter())
        .map(|e| (e.event_id, (e.kind.as_str().to_owned(), e.source.as_str().to_owned())))
        .collect()
}

/// The job an event belongs to: the log file it was read from, else (hook, kernel) the job
/// running at its time.
fn job_of<'a>(e: &AttributedEvent, path: &str, jobs: &'a [Job], times: &[(i64, i64)]) -> Option<&'a Job> {
    let name = Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned());
    if let Some(j) = name.and_then(|n| jobs.iter().find(|j| j.log == n)) {
        return Some(j);
    }
    let ts = e.features.evidence.ts_ms;
    jobs.iter().zip(times).find(|(_, (start, end))| ts >= *start && ts <= *end + 2000).map(|(j, _)| j)
}

/// One stored event scored against its job.
#[derive(Debug)]
struct Scored {
    job: Job,
    right: bool,
    /// A GPU event that knows its pid.
    gpu_pid: bool,
    own_samples: u64,
    line: String,
}

/// Sends the spool in `spool` through a real agent (`source.kind = "none"`, that spool as its own)
/// over QUIC to a collector into ClickHouse, attributes every stored event and scores it against
/// its job. Asserts every spooled event stored once, one event per job, and the process's samples
/// on every GPU event that knows its pid.
async fn replay_and_score(spool: &Path) -> Vec<Scored> {
    show_warnings();
    let jobs = jobs();
    let times: Vec<(i64, i64)> = std::fs::read_to_string(fixture().join("scenarios.tsv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[4].parse().unwrap(), f[5].parse().unwrap())
        })
        .collect();
    let events = spooled_events(spool);
    assert!(!events.is_empty(), "the spool holds events");
    let dir = tempfile::tempdir().unwrap();
    let ch = start_clickhouse();
    let pki = pki(dir.path(), &[NODE]);
    let (collector, _stop) =
        start_collector(collector_config(&pki, &ch.url(), SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let mut cfg = agent_config(&pki, NODE, collector.addr, 1, 0, 1.0);
    cfg.source.kind = SourceKind::None;
    cfg.spool.dir = Some(spool.to_owned());
    cfg.kmsg.enabled = false;
    cfg.hook.enabled = false;
    let (stop_agent, stop_rx) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(oomlens_agent::runner::run_agent(cfg.finish().unwrap(), stop_rx));

    let db = client(&ch.url());
    wait_for_events(&db, NODE, events.len(), Duration::from_secs(60)).await;
    let _ = stop_agent.send(true);
    tokio::time::timeout(Duration::from_secs(60), agent).await.unwrap().unwrap().unwrap();
    collector.shutdown().await;
    assert_eq!(stored_events(&db, NODE).await as usize, events.len(), "every spooled event is stored once");
    let samples = count(&db, "SELECT count() FROM oomlens.gpu_samples WHERE node = 'gpu-check'").await;
    assert!(samples > 0, "the NVML samples are stored");

    #[derive(Debug, clickhouse::Row, serde::Deserialize)]
    struct Row {
        event_id: u64,
        path: String,
    }
    let paths: BTreeMap<u64, String> = db
        .query("SELECT event_id, label_values[indexOf(label_keys, 'log.path')] AS path FROM oomlens.oom_events WHERE node = ?")
        .bind(NODE)
        .fetch_all::<Row>()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.event_id, r.path))
        .collect();
    let attributed = analysis::attribute_window_live(&db, "oomlens", &FeatureWindow::ALL).await.unwrap();
    assert_eq!(attributed.len(), events.len());
    let scored: Vec<Scored> = attributed
        .iter()
        .map(|e| {
            let f = &e.features;
            let path = paths.get(&f.evidence.event_id).cloned().unwrap_or_default();
            let job = job_of(e, &path, &jobs, &times).unwrap_or_else(|| panic!("no job for {f:?}")).clone();
            let a = &e.attribution;
            let line = format!(
                "{:<28} {:<13} {:<7} truth {:<13} got {:<13} {:>3}% {:<22} phase {} ({}), {} own samples",
                job.log,
                f.evidence.kind,
                f.evidence.source,
                job.truth,
                a.scenario.as_str(),
                a.confidence_pct,
                a.rule.id(),
                f.phase_effective,
                f.phase_source,
                f.own_samples,
            );
            println!("{line}");
            Scored {
                right: a.scenario.as_str() == job.truth,
                gpu_pid: f.evidence.kind == "cuda_oom" && f.evidence.pid.is_some(),
                own_samples: f.own_samples,
                job,
                line,
            }
        })
        .collect();
    println!(
        "{} of {} failures attributed to the cause their job was built to have",
        scored.iter().filter(|s| s.right).count(),
        scored.len()
    );
    // One event per failure: the job's log line, its hook report, NVML's vanished process and the
    // kernel's kill are folded into one.
    for j in &jobs {
        assert_eq!(scored.iter().filter(|s| s.job.log == j.log).count(), 1, "{}: one event", j.log);
    }
    // A failure whose line gained the pid (from NVML's vanished process, the hook, or the
    // process's exit) has that process's samples.
    for s in scored.iter().filter(|s| s.gpu_pid) {
        assert!(s.own_samples > 0, "NVML's samples of the failing process reach the event: {}", s.line);
    }
    scored
}

/// A copy of the fixture's spool in `dir`.
fn fixture_spool(dir: &Path) -> PathBuf {
    let spool = dir.join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    for e in std::fs::read_dir(fixture().join("spool")).unwrap() {
        let path = e.unwrap().path();
        std::fs::copy(&path, spool.join(path.file_name().unwrap())).unwrap();
    }
    spool
}

/// The spool as the H200's agent wrote it. Every GPU failure knows its process (a pid-less line
/// is paired with the process that exited holding what it says it held, or with NVML's vanished
/// process, or with the hook's report), has that process's samples, and is attributed to the
/// cause its job was built to have — plain and under the hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_real_gpus_failures_replayed_from_its_spool() {
    let dir = tempfile::tempdir().unwrap();
    let scored = replay_and_score(&fixture_spool(dir.path())).await;
    assert_eq!(scored.iter().filter(|s| s.gpu_pid).count(), 16, "every GPU failure knows its process");
    let wrong: Vec<&str> = scored.iter().filter(|s| !s.right).map(|s| s.line.as_str()).collect();
    assert!(wrong.is_empty(), "attributed wrongly: {wrong:#?}");
}

/// The parser on the run's logs: one failure in each job's log, none in the tenants' (processes
/// that held the GPU and were stopped), and the kernel's two kills of the DataLoader workers the
/// job logs name. `oomlens explain` (the message alone) is printed beside the cause.
#[test]
fn the_parser_finds_each_failure_of_the_real_run_once() {
    let jobs = jobs();
    let mut right = 0;
    for e in std::fs::read_dir(fixture().join("logs")).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let found =
            oomlens_collector::analysis::explain::explain_text(&std::fs::read_to_string(&path).unwrap());
        match jobs.iter().find(|j| j.log == name) {
            None => assert!(found.is_empty(), "{name}: a tenant's log holds no failure: {found:?}"),
            Some(job) => {
                assert_eq!(found.len(), 1, "{name}: one failure");
                let a = &found[0].attribution;
                right += usize::from(a.scenario.as_str() == job.truth);
                println!(
                    "{name:<28} message only: truth {:<13} got {:<13} {:>3}% {}",
                    job.truth,
                    a.scenario.as_str(),
                    a.confidence_pct,
                    a.rule.id()
                );
            }
        }
    }
    println!("message only: {right} of {} right", jobs.len());
    let kernel = std::fs::read_to_string(fixture().join("dmesg-oom-kill.txt")).unwrap();
    let kills: Vec<Option<u32>> =
        oomlens_collector::analysis::explain::explain_text(&kernel).iter().map(|e| e.event.pid).collect();
    assert_eq!(kills.len(), 2, "{kills:?}");
    for pid in kills {
        let pid = pid.unwrap();
        let named = format!("DataLoader worker (pid {pid}) is killed by signal: Killed.");
        let logs: Vec<String> = jobs
            .iter()
            .filter(|j| j.truth == "host_oom")
            .map(|j| std::fs::read_to_string(fixture().join("logs").join(&j.log)).unwrap())
            .collect();
        assert!(
            logs.iter().any(|l| l.contains(&named)),
            "the kernel killed pid {pid}, which a job log names"
        );
    }
}

/// How each of the run's GPU failures found its process, as the agent stored it. A plain job's line
/// carries no pid; the agent pairs it with NVML's vanished process (a process last seen at the
/// vanish threshold), with the hook's report of the same failure, or — for a large request refused
/// short of the threshold — with the process that exited holding what the line says it held
/// (`merged.from = process_exit`): the GPT's batch (15.6 GiB refused at 93.7 % used) and the long
/// context (128 GiB refused at 94.7 %) on the run recorded before that pairing had no pid.
#[test]
fn the_runs_lines_found_their_process_live() {
    let batches = spooled_batches(&fixture().join("spool"));
    let last_used = |pid: u32| {
        batches
            .iter()
            .flat_map(|(_, b)| b.process_samples.iter())
            .filter(|p| p.pid == pid)
            .max_by_key(|p| p.ts_ms)
            .and_then(|p| p.used_bytes)
    };
    let mut by_exit = 0;
    let failures: Vec<_> =
        batches.iter().flat_map(|(_, b)| b.events.iter()).filter(|e| e.kind.as_str() == "cuda_oom").collect();
    assert_eq!(failures.len(), 16, "one GPU event per failing job");
    for e in failures {
        let from = e.labels.iter().find(|l| l.key == "merged.from").map(|l| l.value.as_str());
        let pid = e.pid.unwrap_or_else(|| panic!("no pid for {:.200}", e.raw_message));
        println!("{:<6} pid {pid:<6} merged from {from:?}", e.source.as_str());
        if from == Some("process_exit") {
            by_exit += 1;
            let (said, read) = (e.process_used_bytes.unwrap(), last_used(pid).unwrap());
            assert!(said.abs_diff(read) < 64 << 20, "pid {pid}: the line says {said} B, NVML read {read} B");
        }
    }
    assert_eq!(by_exit, 2, "the two large requests refused short of the threshold: paired by the exit");
}
