//! `oomlens demo`, the README's main command, end to end: a throw-away ClickHouse, a collector and
//! agent processes play a small simulated fleet and the closing report shows every row stored and
//! the attribution against the ground truth; Ctrl-C stops it cleanly (agents terminated and
//! reaped, ClickHouse stopped, a clear message, a failing exit status).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn demo(args: &[&str], keep: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oomlens"));
    cmd.arg("demo")
        .args(args)
        .arg("--agent-bin")
        .arg(common::agent_binary())
        .arg("--keep")
        .arg(keep)
        .env("OOMLENS_LOG", "warn")
        .stdin(Stdio::null());
    cmd
}

/// Processes named `name` whose command line mentions `dir` (the demo passes its directory to its
/// agents and its ClickHouse server).
fn running_in(dir: &std::path::Path, name: &str) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(name) && c.contains(&needle))
        .collect()
}

#[test]
fn demo_stores_every_row_and_ends_with_the_attribution_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo(&["--nodes", "2", "--gpus", "2", "--duration-s", "240", "--speed", "80"], dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    for table in ["gpu_samples", "process_samples", "oom_events"] {
        let line =
            stdout.lines().find(|l| l.trim_start().starts_with(table)).unwrap_or_else(|| panic!("{stdout}"));
        assert!(line.contains('✓'), "{table}: stored = sent: {line}");
    }
    assert!(stdout.contains("OOM events:") && stdout.contains("By scenario:"), "{stdout}");
    assert!(stdout.contains("macro-averaged accuracy"), "{stdout}");
    assert!(running_in(dir.path(), "oomlens-agent run ").is_empty(), "every agent exited");
}

#[test]
fn ctrl_c_stops_the_demo_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough to be interrupted mid-run.
    let child = demo(&["--nodes", "2", "--gpus", "2", "--duration-s", "3600", "--speed", "10"], dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while running_in(dir.path(), "oomlens-agent run ").len() < 2 {
        assert!(Instant::now() < deadline, "the demo never started its agents");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    let sent = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an interrupted demo does not report success");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(
        running_in(dir.path(), "oomlens-agent run ").is_empty(),
        "agents terminated and reaped: {stderr}"
    );
    assert!(running_in(dir.path(), "clickhouse").is_empty(), "its ClickHouse stopped: {stderr}");
}
