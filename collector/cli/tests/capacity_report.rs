//! `oomlens report capacity` end to end: the real binary against a real ClickHouse loaded with the
//! SQL fixtures (`collector/tests/fixtures/sql`, with re-sent duplicate rows); the headroom and OOM
//! numbers are checked against an independent computation from the fixture files, the scenarios
//! against the attribution API, plus the GPU-model grouping and the HTML page; and one frame of
//! `oomlens top --once` against the latest fixture readings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Command;

use common::*;
use oomlens_collector::analysis::{self, FeatureWindow};
use serde_json::Value;

/// `kill -TERM pid`; its exit status.
fn send_sigterm(pid: i32) -> i32 {
    Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().code().unwrap_or(-1)
}

/// The path of `name` on the PATH.
fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()).ok_or(())
}

fn report(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oomlens"))
        .args(["report", "capacity"])
        .args(args)
        .args(["--clickhouse-url", url])
        .env_remove("OOMLENS_COLLECTOR_CONFIG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Per node: (GPUs, samples, sorted used/total ratios, samples >= 90 %), GPU samples collapsed
/// by (cluster, node, gpu_index, ts_ms).
fn headroom_by_node() -> BTreeMap<String, (usize, Vec<f64>)> {
    let mut collapsed: HashMap<(String, String, u64, i64), (u64, u64)> = HashMap::new();
    for (r, used, total) in fixture_gpu_usage() {
        let key = (
            r["cluster"].as_str().unwrap().to_owned(),
            r["node"].as_str().unwrap().to_owned(),
            r["gpu_index"].as_u64().unwrap(),
            r["ts_ms"].as_i64().unwrap(),
        );
        let e = collapsed.entry(key).or_default();
        *e = (e.0.max(used), e.1.max(total));
    }
    let mut by: BTreeMap<String, (BTreeSet<u64>, Vec<f64>)> = BTreeMap::new();
    for ((_, node, gpu, _), (used, total)) in collapsed {
        let e = by.entry(node).or_default();
        e.0.insert(gpu);
        e.1.push(used as f64 / total as f64);
    }
    by.into_iter()
        .map(|(k, (gpus, mut r))| {
            r.sort_by(f64::total_cmp);
            (k, (gpus.len(), r))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_report_numbers() {
    let (server, ch) = migrated_clickhouse().await;
    // Twice: re-sent rows must not change any number.
    insert_sql_fixtures(&ch, &FIXTURE_TABLES, 2).await;
    let url = server.url();

    // Rates from any sampled time (the default asks for a GPU-day; see below).
    let (rc, out, err) = report(&url, &["--since", "0", "--by", "node", "--json", "--min-gpu-days", "0"]);
    assert_eq!(rc, 0, "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(doc["by"], "node");
    let groups: BTreeMap<String, &Value> = doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["key"].as_str().unwrap().to_owned(), g))
        .collect();

    // Headroom, independently.
    let expected = headroom_by_node();
    assert!(expected.len() >= 4, "the fixtures sample several nodes");
    for (node, (gpus, ratios)) in &expected {
        let g = groups.get(node).unwrap_or_else(|| panic!("node {node} missing: {doc}"));
        assert_eq!(g["gpus"].as_u64(), Some(*gpus as u64), "{node}");
        assert_eq!(g["samples"].as_u64(), Some(ratios.len() as u64), "{node}: duplicates collapsed");
        let max = *ratios.last().unwrap();
        assert!((g["max"].as_f64().unwrap() - max).abs() < 1e-9, "{node}: max {} vs {max}", g["max"]);
        let above = ratios.iter().filter(|r| **r >= 0.9).count() as f64 / ratios.len() as f64;
        assert!((g["above_90_share"].as_f64().unwrap() - above).abs() < 1e-9, "{node}");
        // The quantiles come from the per-minute rollup's 0.1 % buckets weighted by distinct
        // sample counts (quantilesExactWeighted: the bucket lower bound of the sample at rank
        // ⌈n·p⌉, no interpolation); the rows were loaded twice and collapse.
        for (key, p) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)] {
            let got = g[key].as_f64().unwrap();
            let rank = ((ratios.len() as f64 * p).ceil() as usize).max(1);
            let want = (ratios[rank - 1] * 1000.0).floor() / 1000.0;
            assert!((got - want).abs() < 1e-12, "{node} {key}: {got}, expected {want} (rank {rank})");
        }
        assert!(g["p50"].as_f64() <= g["p95"].as_f64() && g["p95"].as_f64() <= g["p99"].as_f64());
    }

    // OOMs per node: distinct event ids from the fixture file; scenarios as the attribution API says.
    let mut ids: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for line in sql_fixture("oom_events").lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        ids.entry(r["node"].as_str().unwrap().to_owned())
            .or_default()
            .insert(r["event_id"].as_u64().unwrap());
    }
    let total: usize = ids.values().map(BTreeSet::len).sum();
    assert_eq!(doc["ooms"].as_u64(), Some(total as u64));
    let attributed = analysis::attribute_window(ch.client(), "oomlens", &FeatureWindow::ALL).await.unwrap();
    let mut scen: BTreeMap<(String, String), u64> = BTreeMap::new();
    for e in &attributed {
        *scen.entry((e.features.node.clone(), e.attribution.scenario.as_str().to_owned())).or_default() += 1;
    }
    for (node, set) in &ids {
        let g = groups[node];
        assert_eq!(g["ooms"].as_u64(), Some(set.len() as u64), "{node}");
        let by: BTreeMap<String, u64> = serde_json::from_value(g["ooms_by_scenario"].clone()).unwrap();
        let want: BTreeMap<String, u64> =
            scen.iter().filter(|((n, _), _)| n == node).map(|((_, s), c)| (s.clone(), *c)).collect();
        assert_eq!(by, want, "{node}");
        if g["samples"].as_u64() == Some(0) {
            // Seen only in events: no headroom figures at all, not 0 %.
            assert!(
                g["p50"].is_null() && g["max"].is_null() && g["ooms_per_gpu_day"].is_null(),
                "{node}: {g}"
            );
        } else {
            let rate = g["ooms_per_gpu_day"]
                .as_f64()
                .unwrap_or_else(|| panic!("{node}: a rate with --min-gpu-days 0: {g}"));
            assert!(rate > 0.0);
            // Per scenario: the same GPU-days, so the rates are proportional to the counts and
            // add up to the group's rate.
            let rates: BTreeMap<String, f64> =
                serde_json::from_value(g["ooms_per_gpu_day_by_scenario"].clone()).unwrap();
            assert_eq!(rates.keys().collect::<Vec<_>>(), by.keys().collect::<Vec<_>>(), "{node}");
            let sum: f64 = rates.values().sum();
            assert!((sum - rate).abs() <= 1e-9 * rate.max(1.0), "{node}: {sum} vs {rate}");
            for (scenario, r) in &rates {
                let expected = rate * by[scenario] as f64 / set.len() as f64;
                assert!((r - expected).abs() <= 1e-9 * expected.max(1.0), "{node} {scenario}");
            }
        }
    }
    // The hand-made contention case: pod-60004 grew 34 GiB before attr-case-4 failed.
    let noisy = doc["noisy_neighbours"].as_array().unwrap();
    let n = noisy.iter().find(|n| n["workload"] == "pod-60004").expect("pod-60004 is a noisy neighbour");
    assert_eq!(n["growth_bytes"].as_i64(), Some(34 << 30));
    assert!(
        doc["co_scheduling"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["failed"] == "attr-case-4" && p["neighbour"] == "pod-60004" && p["events"] == 1)
    );
    let edge = doc["closest_to_edge"].as_array().unwrap();
    assert!(!edge.is_empty());
    assert!(edge.windows(2).all(|w| w[0]["p99"].as_f64() >= w[1]["p99"].as_f64()), "sorted by p99");

    // By GPU model: every sampled GPU of the fixtures' agents is an H100 or A100 by name.
    let (rc, out, err) = report(&url, &["--since", "0", "--by", "gpu_model", "--json"]);
    assert_eq!(rc, 0, "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    let samples: u64 = doc["groups"].as_array().unwrap().iter().map(|g| g["samples"].as_u64().unwrap()).sum();
    let all: usize = expected.values().map(|(_, r)| r.len()).sum();
    assert_eq!(samples, all as u64, "every sample in exactly one model");
    assert!(
        doc["groups"].as_array().unwrap().iter().any(|g| g["key"].as_str().unwrap().contains("H100")),
        "{doc}"
    );

    // By namespace and by workload (the process rollup join): every sampled GPU second in exactly
    // one group, every OOM in the group of its own label, the fixture's "ml" namespace present.
    for (by, expect_key) in [("namespace", "ml"), ("workload", "多模态-训练")] {
        let (rc, out, err) = report(&url, &["--since", "0", "--by", by, "--json"]);
        assert_eq!(rc, 0, "{by}: {err}");
        let doc: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(doc["by"], by);
        let groups = doc["groups"].as_array().unwrap();
        let samples: u64 = groups.iter().map(|g| g["samples"].as_u64().unwrap()).sum();
        assert_eq!(samples, all as u64, "{by}: every sample in exactly one group");
        let ooms: u64 = groups.iter().map(|g| g["ooms"].as_u64().unwrap()).sum();
        assert_eq!(ooms, total as u64, "{by}: every OOM in exactly one group");
        assert!(groups.iter().any(|g| g["key"] == expect_key), "{by}: {doc}");
    }

    // Text and HTML.
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("cap.html");
    let (rc, text, err) =
        report(&url, &["--since", "0", "--by", "cluster", "--html", html.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        text.contains("by cluster") && text.contains("train-east") && text.contains("closest to the edge"),
        "{text}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.matches("<svg").count() == 2);
    assert!(page.contains("90 %") && page.contains("train-east") && !page.contains("<script"));
    if let Some(layout) = check_page_in_browser(&html, "capacity-by-cluster") {
        assert_eq!((layout.charts, layout.legends), (2, 2), "{layout:?}");
    }
    let by_workload = dir.path().join("cap-workload.html");
    let (rc, _, err) =
        report(&url, &["--since", "0", "--by", "workload", "--html", by_workload.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    check_page_in_browser(&by_workload, "capacity-by-workload");
    // `oomlens top --once` at a fixture time: one line per GPU read in the minute before, with the
    // latest reading; the OOMs of the day before.
    let at: i64 = 1_764_460_890_000;
    let mut latest: BTreeMap<(String, String, u64), (i64, u64)> = BTreeMap::new();
    for line in sql_fixture("gpu_samples").lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let ts = r["ts_ms"].as_i64().unwrap();
        if ts >= at - 60_000 && ts <= at {
            let key = (
                r["cluster"].as_str().unwrap().into(),
                r["node"].as_str().unwrap().into(),
                r["gpu_index"].as_u64().unwrap(),
            );
            let e = latest.entry(key).or_insert((i64::MIN, 0));
            // The latest known reading (a failed reading is NULL and skipped).
            if let Some(used) = r["memory_used_bytes"].as_u64()
                && ts > e.0
            {
                *e = (ts, used);
            }
        }
    }
    assert!(latest.len() >= 4);
    let out = Command::new(env!("CARGO_BIN_EXE_oomlens"))
        .args([
            "top",
            "--once",
            "--at",
            &at.to_string(),
            "--live",
            "60s",
            "--recent",
            "1d",
            "--clickhouse-url",
            &url,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let frame = String::from_utf8(out.stdout).unwrap();
    assert!(!frame.contains('\x1b'), "--once prints no escape codes");
    assert!(
        frame.starts_with(&format!(
            "oomlens top — {} — {} GPUs",
            oomlens_cli::timearg::format_ms(at),
            latest.len()
        )),
        "{frame}"
    );
    let gpu_lines: Vec<&str> = frame.lines().filter(|l| l.trim_start().starts_with("GPU ")).collect();
    assert_eq!(gpu_lines.len(), latest.len(), "{frame}");
    for ((cluster, node, gpu), (_, used)) in &latest {
        let at_node = frame
            .split(&format!("{cluster}/{node}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("{cluster}/{node}: {frame}"));
        let line = at_node.lines().find(|l| l.trim_start().starts_with(&format!("GPU {gpu:<2}"))).unwrap();
        assert!(line.contains(&oomlens_cli::render::human_bytes(Some(*used))), "{line}");
    }
    let day_events: BTreeSet<(String, u64)> = sql_fixture("oom_events")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| (at - 86_400_000..=at).contains(&r["ts_ms"].as_i64().unwrap()))
        .map(|r| (r["node"].as_str().unwrap().to_owned(), r["event_id"].as_u64().unwrap()))
        .collect();
    assert!(
        frame.contains(&format!("Recent OOMs ({}) of the last 86400 s:", day_events.len().min(10))),
        "{frame}"
    );

    // One node: only its GPUs and OOMs, and the header says so.
    let ((cluster, node, _), _) = latest.iter().next().unwrap();
    let top_once = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_oomlens"))
            .args(["top", "--once", "--at", &at.to_string(), "--live", "60s", "--recent", "1d"])
            .args(extra)
            .args(["--clickhouse-url", &url])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let one = top_once(&["--node", node, "--cluster-name", cluster]);
    let gpus_of_node = latest.keys().filter(|(c, n, _)| c == cluster && n == node).count();
    assert!(
        one.starts_with(&format!(
            "oomlens top — {} — {gpus_of_node} GPUs on 1 nodes",
            oomlens_cli::timearg::format_ms(at)
        )),
        "{one}"
    );
    assert_eq!(one.lines().nth(1), Some(format!("showing cluster {cluster}, node {node}").as_str()), "{one}");
    assert!(
        one.lines().filter(|l| l.contains('/') && !l.starts_with(' ') && l.contains(node.as_str())).count()
            == 1,
        "{one}"
    );
    let none = top_once(&["--node", "no-such-node"]);
    assert!(none.contains("No GPU reading of node no-such-node in the 60 s before"), "{none}");
    assert!(none.contains("  none on node no-such-node"), "{none}");

    // The interactive screen in a real pseudo-terminal (util-linux `script`): the alternate screen
    // is entered, the header and the key help drawn, and both `q` and SIGTERM end it with the
    // terminal restored.
    if let Ok(script) = which("script") {
        for (marker, how) in [("7", "q"), ("8", "SIGTERM")] {
            let cmd = format!(
                "{} top --at {at} --live 60s --recent 1d --interval 0.5 --max-ooms {marker} --clickhouse-url {url}",
                env!("CARGO_BIN_EXE_oomlens")
            );
            let mut child = Command::new(&script)
                .args(["-qfec", &cmd, "/dev/null"])
                .env("TERM", "xterm")
                .env("COLUMNS", "120")
                .env("LINES", "30")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_secs(3));
            if how == "q" {
                use std::io::Write as _;
                child.stdin.as_mut().unwrap().write_all(b"q").unwrap();
            } else {
                // The oomlens process under `script`, found by its own command line.
                let needle = format!("--max-ooms\0{marker}\0");
                let pid = std::fs::read_dir("/proc")
                    .unwrap()
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                    .find(|pid| {
                        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                            let c = String::from_utf8_lossy(&c);
                            c.contains(&needle) && !c.contains("-qfec")
                        })
                    })
                    .expect("the oomlens top process");
                assert_eq!(send_sigterm(pid), 0, "kill -TERM {pid}");
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while child.try_wait().unwrap().is_none() {
                assert!(std::time::Instant::now() < deadline, "{how} did not end oomlens top");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let out = child.wait_with_output().unwrap();
            let screen = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{how}: {screen}\n{}", String::from_utf8_lossy(&out.stderr));
            let enter =
                screen.find("\x1b[?1049h").unwrap_or_else(|| panic!("no alternate screen: {screen:?}"));
            let leave =
                screen.rfind("\x1b[?1049l").unwrap_or_else(|| panic!("{how}: not restored: {screen:?}"));
            assert!(enter < leave);
            assert!(
                screen[enter..leave].contains("oomlens top — ") && screen[enter..leave].contains("q quit"),
                "{screen:?}"
            );
        }
    } else {
        eprintln!("skipping the pseudo-terminal check of oomlens top: no `script` (util-linux)");
    }

    let (rc, _, err) = report(&url, &["--since", "0", "--by", "rack"]);
    assert_ne!(rc, 0);
    assert!(err.contains("unknown grouping"), "{err}");
}

/// What the report claims is backed by the data: rates only from enough sampled GPU-time (the
/// fixtures hold minutes, so by default only counts), `–` rather than 0 % where a group has no
/// samples, reversed windows refused, and an empty window says so, naming the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_report_says_only_what_the_data_supports() {
    let (server, ch) = migrated_clickhouse().await;
    insert_sql_fixtures(&ch, &FIXTURE_TABLES, 1).await;
    let url = server.url();

    let (rc, out, err) = report(&url, &["--since", "0", "--by", "node", "--json"]);
    assert_eq!(rc, 0, "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(doc["min_gpu_days"].as_f64(), Some(1.0));
    let groups = doc["groups"].as_array().unwrap();
    let with_ooms = groups.iter().filter(|g| g["ooms"].as_u64() > Some(0)).count();
    assert!(with_ooms > 0);
    for g in groups {
        let days = g["gpu_days"].as_f64().unwrap();
        assert!(days < 1.0, "the fixtures hold minutes, not days: {g}");
        assert!(g["ooms_per_gpu_day"].is_null(), "no rate from {days} GPU-days: {g}");
        assert!(g["ooms_per_gpu_day_by_scenario"].as_object().unwrap().is_empty(), "{g}");
    }
    let (rc, text, err) = report(&url, &["--since", "0", "--by", "node"]);
    assert_eq!(rc, 0, "{err}");
    assert!(text.contains("GPU-days") && text.contains("show their OOM count only"), "{text}");
    // Groups seen only in OOM events (no samples) show `–`, never 0.0 %.
    let mut unsampled = 0;
    for by in ["node", "namespace", "workload", "gpu_model"] {
        let (_, out, _) = report(&url, &["--since", "0", "--by", by, "--json"]);
        let (_, text, _) = report(&url, &["--since", "0", "--by", by]);
        let doc: Value = serde_json::from_str(out.trim()).unwrap();
        for g in doc["groups"].as_array().unwrap().iter().filter(|g| g["samples"].as_u64() == Some(0)) {
            unsampled += 1;
            assert!(g["p50"].is_null() && g["above_90_share"].is_null(), "{by}: {g}");
            let key = match g["key"].as_str().unwrap() {
                "" => "(none)",
                k => k,
            };
            let line = text.lines().find(|l| l.trim_start().starts_with(key)).unwrap();
            assert!(line.contains('–') && !line.contains('%'), "{by}: {line}");
        }
    }
    assert!(unsampled > 0, "the fixtures have OOMs in groups without samples");

    // A reversed window is refused, naming both ends.
    let (rc, _, err) = report(&url, &["--since", "1h", "--until", "2h"]);
    assert_eq!(rc, 1, "{err}");
    assert!(err.contains("empty window") && err.contains("--since 1h"), "{err}");

    // An empty window: the message names the window, in text, JSON (on stderr) and HTML.
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("empty.html");
    let window = ["--since", "2001-01-01T00:00:00Z", "--until", "2001-01-02T00:00:00Z"];
    let (rc, text, err) = report(&url, &[&window[..], &["--html", html.to_str().unwrap()]].concat());
    assert_eq!(rc, 0, "{err}");
    assert!(
        text.contains(
            "No GPU samples and no OOM events from 2001-01-01T00:00:00.000Z – 2001-01-02T00:00:00.000Z"
        ),
        "{text}"
    );
    assert!(!text.contains("p50"), "no empty tables: {text}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("No GPU samples and no OOM events") && !page.contains("<svg"), "{page}");
    check_page_in_browser(&html, "capacity-empty");
    let (rc, out, err) = report(&url, &[&window[..], &["--json"]].concat());
    assert_eq!(rc, 0, "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((doc["ooms"].as_u64(), doc["samples"].as_u64()), (Some(0), Some(0)));
    assert!(err.contains("No GPU samples and no OOM events"), "{err}");
    let (rc, _, err) = report(&url, &["--since", "0", "--min-gpu-days=-1"]);
    assert_eq!(rc, 1);
    assert!(err.contains("--min-gpu-days"), "{err}");
}
