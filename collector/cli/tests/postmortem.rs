//! `oomlens postmortem` end to end: the real binary against a real ClickHouse loaded with the SQL
//! fixtures (`collector/tests/fixtures/sql`, whose hand-made `attr-lab` cases have known answers)
//! plus GPU samples written here: JSON keys and values, the text report's triage order and
//! sparklines, the HTML page, every selector (event id, node + GPU + RFC 3339 range, job, pod) and
//! the memory curve checked against an independent computation from the fixture file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;

use common::*;
use oomlens_cli::timearg::format_ms;
use oomlens_collector::clickhouse::Ch;
use serde_json::Value;

const EVENT4: u64 = 7_000_000_000_000_000_004;
const TS4: i64 = 1_764_571_200_000;
const GIB: u64 = 1 << 30;

fn fixture_dir() -> std::path::PathBuf {
    common::repo_root().join("collector/tests/fixtures/sql")
}

async fn load(ch: &Ch) {
    insert_sql_fixtures(ch, &FIXTURE_TABLES, 1).await;
    // GPU samples of gpu-node-21 GPU 3 for the two minutes before event 4 (the fixtures have
    // none there): used climbs 100 MiB per second from 40 GiB, capacity 80 GiB; every row twice
    // (a re-sent batch must not change the curve).
    let mut rows = String::new();
    for i in 0..=120i64 {
        let used = 40 * GIB + (i as u64) * 100 * (1 << 20);
        let row = format!(
            "{{\"cluster\":\"attr-lab\",\"node\":\"gpu-node-21\",\"gpu_index\":3,\"ts_ms\":{},\"agent_id\":\"a\",\"memory_used_bytes\":{used},\"memory_free_bytes\":{},\"memory_total_bytes\":{},\"memory_reserved_bytes\":0,\"util_gpu_pct\":90,\"util_mem_pct\":50,\"power_mw\":1,\"temperature_c\":50,\"sm_clock_mhz\":1,\"mem_clock_mhz\":1}}\n",
            TS4 - 120_000 + i * 1000,
            80 * GIB - used,
            80 * GIB
        );
        rows.push_str(&row);
        rows.push_str(&row);
    }
    ch.client()
        .query_raw(&format!("INSERT INTO oomlens.gpu_samples FORMAT JSONEachRow\n{rows}"))
        .execute()
        .await
        .unwrap();
}

fn oomlens(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oomlens"))
        .arg("postmortem")
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

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// Peak per 5 s bucket of one pid's fixture samples on gpu-node-21 GPU 3 in `[from, to]`.
fn fixture_peaks(pid: u64, from: i64, to: i64) -> Vec<(i64, u64)> {
    let text = std::fs::read_to_string(fixture_dir().join("process_samples.jsonl")).unwrap();
    let mut peaks = std::collections::BTreeMap::<i64, u64>::new();
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let ts = r["ts_ms"].as_i64().unwrap();
        if r["node"] == "gpu-node-21" && r["gpu_index"] == 3 && r["pid"] == pid && ts >= from && ts <= to {
            let used = r["used_bytes"].as_u64().unwrap_or(0);
            let e = peaks.entry(ts - ts.rem_euclid(5000)).or_default();
            *e = (*e).max(used);
        }
    }
    peaks.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postmortem_text_json_html() {
    let (server, ch) = migrated_clickhouse().await;
    load(&ch).await;
    let url = server.url();

    // By event id, JSON.
    let (rc, out, err) = oomlens(&url, &[&EVENT4.to_string(), "--json"]);
    assert_eq!(rc, 0, "{err}");
    let docs = json_lines(&out);
    assert_eq!(docs.len(), 1, "{out}");
    let d = &docs[0];
    for key in [
        "event_id",
        "ts_ms",
        "cluster",
        "node",
        "gpu_index",
        "pid",
        "workload",
        "kind",
        "scenario",
        "confidence",
        "evidence",
        "remedy",
        "neighbours",
        "alternatives",
        "decide",
        "labels",
    ] {
        assert!(d.get(key).is_some(), "missing {key}: {d}");
    }
    assert_eq!(d["event_id"], EVENT4.to_string(), "a string: jq and JavaScript round a u64");
    assert_eq!(d["labels"]["pod"], "attr-case-4-0");
    assert_eq!(d["ts_ms"], TS4);
    assert_eq!(d["time"], format_ms(TS4));
    assert_eq!((d["cluster"].as_str(), d["node"].as_str()), (Some("attr-lab"), Some("gpu-node-21")));
    assert_eq!((d["gpu_index"].as_u64(), d["pid"].as_u64()), (Some(3), Some(50_004)));
    assert_eq!((d["workload"].as_str(), d["pod"].as_str()), (Some("attr-case-4"), Some("attr-case-4-0")));
    assert_eq!((d["kind"].as_str(), d["scenario"].as_str()), (Some("cuda_oom"), Some("contention")));
    assert_eq!(d["rule"], "neighbours_took_it");
    assert_eq!(d["confidence"].as_f64(), Some(0.80));
    assert_eq!(d["others_from"], "message");
    assert_eq!(d["capacity_bytes"].as_u64(), Some(80 * GIB));
    assert!(
        d["evidence"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().contains("grew by +33.50 GiB"))
    );
    assert!(d["remedy"].as_str().unwrap().len() > 10);
    let neighbours = d["neighbours"].as_array().unwrap();
    let pids: Vec<u64> = neighbours.iter().map(|n| n["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids, [60_004, 60_005], "ranked by growth, the failing process excluded");
    assert_eq!(neighbours[0]["growth_bytes"].as_i64(), Some(34 << 30));
    assert_eq!(neighbours[0]["workload"], "pod-60004");
    assert!(neighbours[0]["used_bytes"].as_u64().unwrap() > 0);
    // The curve: 10 minutes in 5 s buckets, the GPU's samples collapsed (each row was sent twice).
    let curve = &d["curve"];
    assert_eq!(curve["bucket_ms"], 5000);
    assert_eq!(curve["since_ms"].as_i64(), Some(TS4 - 600_000));
    let gpu = curve["gpu"].as_array().unwrap();
    assert_eq!(gpu.len(), 25, "121 samples at 1 Hz in 5 s buckets");
    assert_eq!(gpu[0]["bucket_ms"].as_i64(), Some(TS4 - 120_000));
    assert_eq!(gpu[0]["used_bytes"].as_u64(), Some(40 * GIB + 4 * 100 * (1 << 20)), "peak of the bucket");
    assert_eq!(gpu[24]["used_bytes"].as_u64(), Some(40 * GIB + 120 * 100 * (1 << 20)));
    assert!(gpu.iter().all(|p| p["total_bytes"].as_u64() == Some(80 * GIB)));
    let procs = curve["processes"].as_array().unwrap();
    let own = procs.iter().find(|p| p["pid"] == 50_004).expect("the failing process's curve");
    let points: Vec<(i64, u64)> = own["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_i64().unwrap(), p[1].as_u64().unwrap()))
        .collect();
    assert_eq!(points, fixture_peaks(50_004, TS4 - 600_000, TS4));
    assert!(!points.is_empty());
    assert!(procs.iter().any(|p| p["pid"] == 60_004));

    // By node + GPU + RFC 3339 range, text: the triage order, sparklines, neighbours, remedy.
    let (since, until) = (format_ms(TS4 - 100_000), format_ms(TS4 + 100_000));
    let (rc, text, err) =
        oomlens(&url, &["--node", "gpu-node-21", "--gpu", "3", "--since", &since, "--until", &until]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(text.matches("OOM 7000000000000000").count(), 1, "{text}");
    assert!(text.contains(&format!("OOM {EVENT4} at {}", format_ms(TS4))), "{text}");
    assert!(
        text.contains("verdict: contention (80 %, rule neighbours_took_it; or batch 10 %, sequence 10 %)"),
        "{text}"
    );
    let order: Vec<usize> =
        ["1 when:", "2 static:", "3 dynamic:", "4 others:", "evidence:", "neighbours (ranked", "5 remedy:"]
            .iter()
            .map(|s| text.find(s).unwrap_or_else(|| panic!("{s} missing: {text}")))
            .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "triage order: {order:?}\n{text}");
    let gpu_line = text.lines().find(|l| l.trim_start().starts_with("GPU total")).expect("GPU sparkline");
    // 40.4 GiB of 80 at the start of the samples (level 5 of 8), 51.7 GiB at the failure (level 6),
    // 121 s of samples in 15 s columns.
    let bars: String = gpu_line
        .trim_start()
        .trim_start_matches("GPU total")
        .trim()
        .chars()
        .take_while(|c| *c != ' ')
        .collect();
    assert_eq!(bars, "▅▅▅▅▅▅▆▆▆", "{gpu_line}");
    assert!(text.contains("1. pid 60004"), "{text}");
    assert!(text.contains("80.00 GiB"), "{text}");

    // By job and by pod: the same event; host OOM without a GPU: no curve, neighbours on the node.
    let (_, out, _) = oomlens(&url, &["--job", "attr-case-4", "--since", "0", "--json"]);
    assert_eq!(
        json_lines(&out)
            .iter()
            .map(|d| d["event_id"].as_str().unwrap().parse::<u64>().unwrap())
            .collect::<Vec<_>>(),
        [EVENT4]
    );
    let (_, out, _) = oomlens(
        &url,
        &["--pod", "attr-case-4-0", "--since", "1764571200000", "--until", "1764571200001", "--json"],
    );
    assert_eq!(json_lines(&out).len(), 1, "{out}");
    let (rc, out, err) = oomlens(&url, &["--job", "attr-case-7", "--since", "0", "--json"]);
    assert_eq!(rc, 0, "{err}");
    let d = &json_lines(&out)[0];
    assert_eq!((d["kind"].as_str(), d["scenario"].as_str()), (Some("host_oom_kill"), Some("host_oom")));
    assert!(d["gpu_index"].is_null() && d["curve"].is_null());
    let pids: Vec<u64> =
        d["neighbours"].as_array().unwrap().iter().map(|n| n["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids, [60_007, 60_008]);

    // HTML: self-contained, the stacked chart, capacity, the OOM marked, the evidence.
    let dir = tempfile::tempdir().unwrap();
    let html_path = dir.path().join("pm.html");
    let (rc, _, err) = oomlens(&url, &[&EVENT4.to_string(), "--html", html_path.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    assert!(html.contains("<svg") && html.matches("<polygon").count() >= 3, "one area per process");
    assert!(html.contains("capacity 80.00 GiB") && html.contains(">OOM<"));
    assert!(html.contains("grew by +33.50 GiB") && html.contains("pod-60004"));
    assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href="));

    // More events than --max-events: the cut is said (text first line; stderr beside JSON Lines;
    // the HTML page's heading), and the page has an index with one link per event.
    let (rc, out, err) = oomlens(&url, &["--since", "0", "--max-events", "100", "--json"]);
    assert_eq!(rc, 0, "{err}");
    let all = json_lines(&out).len();
    assert!(all > 3, "{all}");
    assert!(err.is_empty(), "nothing cut: {err}");
    let (rc, text, err) = oomlens(&url, &["--since", "0", "--max-events", "2"]);
    assert_eq!(rc, 0, "{err}");
    let note = format!("showing the newest 2 of {all} OOM events matching any node from the first event to ");
    assert!(text.starts_with(&note), "{text}");
    let (_, out, err) = oomlens(&url, &["--since", "0", "--max-events", "2", "--json"]);
    assert_eq!(json_lines(&out).len(), 2);
    assert!(err.starts_with(&note), "{err}");
    let multi = dir.path().join("multi.html");
    let (rc, _, err) =
        oomlens(&url, &["--since", "0", "--max-events", "3", "--html", multi.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    let page = std::fs::read_to_string(&multi).unwrap();
    assert!(page.contains(&format!("showing the newest 3 of {all} OOM events")), "{page}");
    assert_eq!(page.matches("<li><a href=\"#event-").count(), 3, "an index entry per event");
    assert_eq!(page.matches("<section id=\"event-").count(), 3);
    // In a real browser, at a desktop's and a phone's width: nothing overlaps, is cut off or
    // widens the page; every chart has its legend.
    // (The three newest fixture events have no samples before them: no charts, a note each.)
    assert_eq!(page.matches("No GPU samples before this failure").count(), 3, "{page}");
    for (path, name, charts) in [(&html_path, "postmortem-event", 1), (&multi, "postmortem-3-events", 0)] {
        if let Some(layout) = check_page_in_browser(path, name) {
            assert_eq!((layout.charts, layout.legends), (charts, charts), "{name}: {layout:?}");
            assert!(layout.chart_labels >= 10 * layout.charts, "ticks on both axes: {layout:?}");
        }
    }

    // Nothing matched: exit 2, and the message repeats the filter and the window.
    let (rc, out, err) = oomlens(&url, &["--node", "no-such-node", "--since", "0", "--json"]);
    assert_eq!((rc, out.as_str()), (2, ""));
    assert!(err.contains("no OOM event matched node=no-such-node from the first event to "), "{err}");
    let (rc, out, _) =
        oomlens(&url, &["--node", "no-such-node", "--gpu", "3", "--since", "2025-12-01T00:00:00Z"]);
    assert_eq!(rc, 2);
    assert!(
        out.starts_with("no OOM event matched node=no-such-node, GPU 3 from 2025-12-01T00:00:00.000Z to "),
        "{out}"
    );
    // Bad time argument: a clear error.
    let (rc, _, err) = oomlens(&url, &["--since", "yesterday"]);
    assert_ne!(rc, 0);
    assert!(err.contains("bad time \"yesterday\""), "{err}");
}
