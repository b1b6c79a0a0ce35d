//! A hook v2 report with the allocator summary, end to end: the report goes to the running
//! agent's hook socket (GPU named by UUID, as a container's job sends it), through the collector
//! into ClickHouse, and `oomlens postmortem --json` (the real binary) shows the node's GPU index,
//! the decided scenario and the allocation sites; `alloc_sites` ranks the site.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::*;
use oomlens_agent::source::Source as _;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};

const GIB: u64 = 1 << 30;

async fn send(socket: &std::path::Path, report: &Value) -> u64 {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (read, mut write) = stream.into_split();
    write.write_all(format!("{report}\n").as_bytes()).await.unwrap();
    let mut reply = String::new();
    tokio::io::BufReader::new(read).read_line(&mut reply).await.unwrap();
    let reply: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["ok"], true, "{reply}");
    reply["event_id"].as_str().unwrap().parse().unwrap()
}

fn postmortem(url: &str, event_id: u64) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_oomlens"))
        .args(["postmortem", &event_id.to_string(), "--json", "--clickhouse-url", url])
        .env_remove("OOMLENS_COLLECTOR_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // One JSON document per line, one per event.
    serde_json::from_str(stdout.lines().next().unwrap_or("")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_v2_report_with_a_snapshot_is_decided_and_shows_its_sites() {
    let node = "node-snapshot";
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &[node]);
    let (collector, _stop) =
        start_collector(collector_config(&pki, &ch.url(), SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let socket = dir.path().join("hook.sock");
    let mut cfg = agent_config(&pki, node, collector.addr, 15, 3600, 5.0);
    cfg.hook.enabled = true;
    cfg.hook.path = socket.clone();
    // The node's GPU 2 as NVML (here the simulator) names it.
    let sim = oomlens_agent::source::sim::Simulator::new(node, cfg.simulator.clone(), START_MS).unwrap();
    let gpu2 = sim.inventory().into_iter().find(|g| g.index == 2).unwrap();
    let (stop_agent, stop_rx) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(oomlens_agent::runner::run_agent(cfg.finish().unwrap(), stop_rx));
    // Until the hook socket accepts (its file appears at bind()); an agent that stopped says why.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if agent.is_finished() {
            panic!("the agent stopped before its hook socket accepted: {:?}", agent.await);
        }
        if tokio::net::UnixStream::connect(&socket).await.is_ok() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the hook socket never accepted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Fragmented: 6 GiB free in the allocator's blocks, the largest 700 MiB, 2 GiB asked.
    let fragmented = serde_json::json!({
        "v": 2, "type": "oom", "gpu_index": 0, "gpu_uuid": gpu2.uuid, "phase": "backward",
        "message": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. Of the allocated memory 70.50 GiB is allocated by PyTorch, and 6.80 GiB is reserved by PyTorch but unallocated.",
        "allocator": {
            "segments": 1900, "reserved_bytes": 77 * GIB, "allocated_bytes": 70 * GIB,
            "cached_free_bytes": 6 * GIB, "largest_free_block_bytes": 700u64 << 20, "free_blocks": 4100,
            "free_block_histogram": [3000, 900, 180, 20, 0, 0], "history_recorded": true,
            "sites": [
                {"site": "/job/train.py:88", "function": "forward", "bytes": 41 * GIB, "blocks": 2600},
                {"site": "/job/model.py:40", "function": "load_state_dict", "bytes": 14 * GIB, "blocks": 300}
            ]
        }
    });
    // Weights and optimizer state hold the GPU: static, with nothing fragmented.
    let weights = serde_json::json!({
        "v": 2, "type": "oom", "gpu_index": 0, "gpu_uuid": gpu2.uuid,
        "message": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 300.00 MiB is free. Including non-PyTorch memory, this process has 78.70 GiB memory in use. Of the allocated memory 77.90 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.",
        "allocator": {
            "cached_free_bytes": 100u64 << 20, "largest_free_block_bytes": 60u64 << 20,
            "sites": [
                {"site": "/venv/lib/python3.11/site-packages/transformers/modeling_utils.py:3900", "function": "from_pretrained", "bytes": 52 * GIB, "blocks": 700},
                {"site": "/job/train.py:120", "function": "_init_group", "bytes": 20 * GIB, "blocks": 500},
                {"site": "/job/train.py:88", "function": "forward", "bytes": 5 * GIB, "blocks": 90}
            ]
        }
    });
    let frag_id = send(&socket, &fragmented).await;
    let weights_id = send(&socket, &weights).await;

    let db = client(&ch.url());
    let stored = wait_until(Duration::from_secs(60), || {
        let db = db.clone();
        let ids = (frag_id, weights_id);
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async move {
                db.query("SELECT count() FROM oomlens.oom_events WHERE event_id IN (?, ?)")
                    .bind(ids.0)
                    .bind(ids.1)
                    .fetch_one::<u64>()
                    .await
                    .unwrap_or(0)
            })
        })
        .join()
        .unwrap()
            == 2
    })
    .await;
    let _ = stop_agent.send(true);
    tokio::time::timeout(Duration::from_secs(60), agent).await.unwrap().unwrap().unwrap();
    collector.shutdown().await;
    assert!(stored, "both reports reached ClickHouse");

    let e = postmortem(&ch.url(), frag_id);
    assert_eq!(e["gpu_index"], 2, "the UUID, not the job's CUDA index 0: {e}");
    assert_eq!(e["labels"]["hook.cuda_index"], "0");
    assert_eq!(
        (e["scenario"].as_str(), e["rule"].as_str()),
        (Some("fragmentation"), Some("snapshot_fragmented"))
    );
    assert_eq!(e["confidence"], 0.9);
    let alloc = &e["allocator"];
    assert_eq!(alloc["largest_free_block_bytes"], 700u64 << 20);
    assert_eq!(alloc["free_block_histogram"], serde_json::json!([3000, 900, 180, 20, 0, 0]));
    assert_eq!(alloc["sites"][0]["site"], "/job/train.py:88");
    assert_eq!(alloc["sites"][0]["phase"], "forward");
    assert_eq!(alloc["sites"][1]["phase"], "load");
    assert!(
        e["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("largest free block 700.00 MiB")),
        "{e}"
    );

    // The text report shows the free-block picture too.
    let text = Command::new(env!("CARGO_BIN_EXE_oomlens"))
        .args(["postmortem", &frag_id.to_string(), "--clickhouse-url", &ch.url()])
        .env_remove("OOMLENS_COLLECTOR_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("allocator free blocks by size: 3000 < 1 MiB, 900 < 8 MiB"), "{text}");
    assert!(text.contains("41.00 GiB at train.py:88 forward (forward)"), "{text}");

    let e = postmortem(&ch.url(), weights_id);
    assert_eq!(
        (e["scenario"].as_str(), e["rule"].as_str()),
        (Some("static"), Some("snapshot_weights")),
        "{e}"
    );
    assert_eq!(e["allocator"]["static_bytes"], 72 * GIB, "from_pretrained + the optimizer's _init_group");
    assert_eq!(e["allocator"]["activation_bytes"], 5 * GIB);

    // The fleet ranking: train.py:88 forward is in both summaries (the simulated fleet adds OOMs
    // of its own, without summaries, to the window's total).
    let q = oomlens_collector::analysis::queries::builtin("alloc_sites").unwrap();
    let tsv = q
        .bind(&db, "oomlens", &q.example_args())
        .unwrap()
        .fetch_bytes("TSV")
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = String::from_utf8(tsv.to_vec()).unwrap();
    let first: Vec<&str> = text.lines().next().unwrap().split('\t').collect();
    assert_eq!(&first[..4], ["/job/train.py:88", "forward", "forward", "2"], "{text}");
    assert_eq!(first[5], "100", "in every OOM with a summary: {text}");
    let share: f64 = first[4].parse().unwrap();
    assert!(share > 0.0 && share <= 100.0, "{text}");

    // The capacity report carries the same ranking.
    let out = Command::new(env!("CARGO_BIN_EXE_oomlens"))
        .args(["report", "capacity", "--since", "1h", "--json", "--clickhouse-url", &ch.url()])
        .env_remove("OOMLENS_COLLECTOR_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let top = &report["allocation_sites"][0];
    assert_eq!((top["site"].as_str(), top["ooms"].as_u64()), (Some("/job/train.py:88"), Some(2)), "{report}");
}
