#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `oomlens explain` gives the same answer as the pipeline: every labelled message of the corpus of
//! real OOMs is written to a job log followed by a real agent (`source.kind = "none"`: no GPU
//! readings, the evidence is the message alone), and the kernel log lines of the kernel records go
//! through the agent's kmsg reader (a file in the `/dev/kmsg` record format); the events travel
//! over QUIC to a collector into ClickHouse, and their attribution there (`oom_features` → features
//! → rules) equals what `explain` says of the same text, event for event.

mod common;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use oomlens_agent::config::SourceKind;
use oomlens_collector::analysis::explain::explain_text;
use oomlens_collector::analysis::{self, FeatureWindow};
use oomlens_parse::kernel::kernel_message;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_and_the_pipeline_agree_on_every_labelled_message() {
    let records: Vec<_> = oomlens_corpus::load().unwrap().into_iter().filter(|r| r.label.is_some()).collect();
    let node = "explain-node";
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &[node]);
    let (collector, _stop) =
        start_collector(collector_config(&pki, &ch.url(), SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let jobs = dir.path().join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    let kmsg = dir.path().join("kmsg");
    std::fs::write(&kmsg, "").unwrap();

    let mut cfg = agent_config(&pki, node, collector.addr, 1, 0, 1.0);
    cfg.source.kind = SourceKind::None;
    cfg.logs.paths = vec![format!("{}/*.log", jobs.display())];
    cfg.logs.state_file = dir.path().join("log-offsets.json");
    cfg.logs.poll_interval_ms = 50;
    cfg.logs.rescan_interval_ms = 100;
    cfg.logs.from_start = true;
    // One job log per record: more than the agent follows by default (`logs.max_files`, 1024).
    cfg.logs.max_files = records.len();
    cfg.kmsg.enabled = true;
    cfg.kmsg.path = kmsg.clone();
    cfg.kmsg.poll_interval_ms = 50;
    let cfg = cfg.finish().unwrap();
    let (stop_agent, stop_rx) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(oomlens_agent::runner::run_agent(cfg, stop_rx));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The expected answers: explain on each log file's text, and on the kernel records' kernel
    // lines.
    let mut expected: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut seq = 0u64;
    let mut kernel_text = String::new();
    // Pids of the host kills the job logs report: the agent folds the kernel's report of the same
    // death (same pid) into the log's event (`detect/merge.rs`), as on a node.
    let mut log_killed_pids = std::collections::BTreeSet::new();
    for r in &records {
        if r.framework == "kernel" {
            for line in r.text.lines() {
                let message = kernel_message(line);
                seq += 1;
                kernel_text.push_str(&format!("6,{seq},{},-;{message}\n", seq * 1000));
            }
            continue;
        }
        let path = jobs.join(format!("{}.log", r.id));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(r.text.as_bytes()).unwrap();
        for e in explain_text(&r.text) {
            if e.event.kind.as_str() == "host_oom_kill"
                && let Some(pid) = e.event.pid
            {
                log_killed_pids.insert(pid);
            }
            let a = &e.attribution;
            expected
                .entry((path.display().to_string(), e.event.raw_message.clone()))
                .or_default()
                .push(format!("{} {} {} {:?}", a.scenario, a.rule.id(), a.confidence_pct, a.alternatives));
        }
    }
    let mut f = std::fs::OpenOptions::new().append(true).open(&kmsg).unwrap();
    f.write_all(kernel_text.as_bytes()).unwrap();
    drop(f);
    let kernel_expected: Vec<String> = {
        let lines: String = kernel_text
            .lines()
            .map(|l| l.split_once(';').map_or(l, |(_, m)| m))
            .map(|m| format!("{m}\n"))
            .collect();
        // The kernel parser's events; a report cut before its `Killed process` line is an event
        // only offline (live, that line always follows in the ring buffer).
        explain_text(&lines)
            .iter()
            .filter(|e| e.event.framework == "kernel" && !e.event.raw_message.contains("invoked oom-killer"))
            .filter(|e| e.event.pid.is_none_or(|pid| !log_killed_pids.contains(&pid)))
            .map(|e| {
                format!("{} {} {}", e.event.kind.as_str(), e.event.pid.unwrap_or(0), e.attribution.scenario)
            })
            .collect()
    };
    let want: usize = expected.values().map(Vec::len).sum::<usize>() + kernel_expected.len();

    let db = client(&ch.url());
    let started = tokio::time::Instant::now();
    let stored = wait_for_events(&db, node, want, Duration::from_secs(90)).await;
    eprintln!("stored {stored} of {want} after {:?}", started.elapsed());
    let _ = stop_agent.send(true);
    tokio::time::timeout(Duration::from_secs(60), agent).await.unwrap().unwrap().unwrap();
    eprintln!("agent stopped");
    collector.shutdown().await;

    #[derive(Debug, clickhouse::Row, serde::Deserialize)]
    struct Row {
        event_id: u64,
        path: String,
        raw_message: String,
    }
    let rows: Vec<Row> = db
        .query(
            "SELECT event_id, label_values[indexOf(label_keys, 'log.path')] AS path, raw_message \
             FROM oomlens.oom_events WHERE node = ?",
        )
        .bind(node)
        .fetch_all()
        .await
        .unwrap();
    if rows.len() != want {
        let mut stored: BTreeMap<(String, String), usize> = BTreeMap::new();
        for r in &rows {
            *stored.entry((r.path.clone(), r.raw_message.clone())).or_default() += 1;
        }
        for (k, v) in &expected {
            let n = stored.get(k).copied().unwrap_or(0);
            if n != v.len() {
                eprintln!("STORED {n} OF {} {}: {:.300}", v.len(), k.0, k.1);
            }
        }
        for (k, n) in &stored {
            if !expected.contains_key(k) {
                eprintln!("UNEXPECTED x{n} {}: {:.300}", k.0, k.1);
            }
        }
    }
    assert_eq!(rows.len(), want, "one stored event per failure explain finds");
    let events = analysis::attribute_window_live(&db, "oomlens", &FeatureWindow::ALL).await.unwrap();
    assert_eq!(events.len(), want);
    let by_id: BTreeMap<u64, &Row> = rows.iter().map(|r| (r.event_id, r)).collect();
    let mut got: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut kernel_got = Vec::new();
    for e in &events {
        let a = &e.attribution;
        let row = by_id[&e.features.event_id];
        if e.features.source == "kmsg" {
            kernel_got.push(format!("{} {} {}", e.features.kind, e.features.pid.unwrap_or(0), a.scenario));
        } else {
            got.entry((row.path.clone(), row.raw_message.clone())).or_default().push(format!(
                "{} {} {} {:?}",
                a.scenario,
                a.rule.id(),
                a.confidence_pct,
                a.alternatives
            ));
        }
    }
    let mismatches: Vec<String> = expected
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(v))
        .map(|((path, msg), v)| {
            format!(
                "{path}: explain {v:?}, pipeline {:?}\n  {msg:.200}",
                got.get(&(path.clone(), msg.clone()))
            )
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        expected.len(),
        mismatches.join("\n")
    );
    kernel_got.sort();
    let mut kernel_want = kernel_expected;
    kernel_want.sort();
    assert_eq!(kernel_got, kernel_want);
    println!("{want} failures of {} labelled real messages: explain and the pipeline agree", records.len());
    drop(db);
    tokio::time::sleep(Duration::from_millis(100)).await;
}
