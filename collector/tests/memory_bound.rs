//! The collector's memory under hostile connections: a separate `oomlens-collector serve` process
//! with a small memory budget; many connections with valid agent certificates announce large
//! frames and send little or nothing, fill their QUIC windows, or exceed the per-certificate
//! limit. Its peak RSS (`VmHWM`) must stay within its configured `max_memory_bytes`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::exact::http_get;
use common::*;
use oomlens_schema::tls::{TlsFiles, client_config};
use oomlens_schema::transport::read_frame;
use oomlens_schema::{Frame, FrameHeader, FrameKind, Hello, PROTOCOL_VERSION, limits};

fn status_kib(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn endpoint(files: &TlsFiles) -> quinn::Endpoint {
    let mut ep = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    ep.set_default_client_config(client_config(files, Duration::from_secs(60)).unwrap());
    ep
}

fn header(kind: FrameKind, len: u32) -> [u8; 16] {
    FrameHeader { version: PROTOCOL_VERSION, kind, len }.to_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_connections_stay_within_the_memory_budget() {
    let t0 = std::time::Instant::now();
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<String> = (0..50).map(|i| format!("node-{i:02}")).collect();
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let pki = pki(dir.path(), &names);
    let addr = reserve_addr();
    let telemetry = reserve_tcp_addr();
    let mut cfg = collector_config(&pki, &ch.url(), addr);
    cfg.collector.handshake_timeout_ms = 60_000;
    cfg.collector.idle_timeout_ms = 60_000;
    // 256 MiB: 96 MiB base, 250 connections × 384 KiB, the rest (11 MB) for frames in flight.
    cfg.collector.max_memory_bytes = 256 << 20;
    cfg.collector.max_bytes_in_flight = 0;
    cfg.collector.max_connections = 250;
    cfg.telemetry.listen = Some(telemetry);
    let cfg = cfg.finish().unwrap();
    let config = dir.path().join("collector.toml");
    std::fs::write(&config, toml::to_string(&cfg).unwrap()).unwrap();
    let log = std::fs::File::create(dir.path().join("collector.log")).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oomlens-collector"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("OOMLENS_LOG", "warn")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(common::exact::wait_ready(telemetry, true, Duration::from_secs(30)).await, "collector not ready");
    let base = status_kib(pid, "VmRSS:");
    step!(t0, "collector up: RSS {base} KiB, in flight cap {} bytes", cfg.collector.max_bytes_in_flight);

    let mut endpoints = Vec::new();
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for (i, (_, files)) in pki.agents.iter().enumerate() {
        let ep = endpoint(&TlsFiles { ca: pki.ca.clone(), cert: files.cert.clone(), key: files.key.clone() });
        for k in 0..4u64 {
            let conn = ep.connect(addr, "localhost").unwrap().await.unwrap();
            let (mut send, recv) = conn.open_bi().await.unwrap();
            if k < 2 {
                // The largest Hello a peer may announce, and nothing of it.
                send.write_all(&header(FrameKind::Hello, limits::MAX_CONTROL_PAYLOAD)).await.unwrap();
            } else {
                // A valid Hello, then a batch announced at 8 MiB and 200 KiB of it: the batch's
                // charge blocks most of them, and their bytes wait in the QUIC window.
                let hello = Frame::Hello(Hello {
                    agent_id: format!("a{i}-{k}"),
                    node: nodes[i].clone(),
                    boot_id: 1 + k,
                    ..Hello::default()
                });
                send.write_all(&hello.encode().unwrap()).await.unwrap();
                send.write_all(&header(FrameKind::Batch, limits::MAX_FRAME_PAYLOAD)).await.unwrap();
                let _ =
                    tokio::time::timeout(Duration::from_millis(20), send.write_all(&[0u8; 200 << 10])).await;
            }
            held.push((conn, send, recv));
        }
        // A fifth connection with the same certificate: one of the five is refused (the
        // collector handles them concurrently, so not necessarily the last).
        let extra = ep.connect(addr, "localhost").unwrap().await.unwrap();
        refused.push(extra);
        endpoints.push(ep);
    }
    let per_certificate = |i: usize| -> Vec<quinn::Connection> {
        let mut v: Vec<quinn::Connection> =
            held[i * 4..i * 4 + 4].iter().map(|(c, _, _)| c.clone()).collect();
        v.push(refused[i].clone());
        v
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for (i, node) in nodes.iter().enumerate() {
        let closed = loop {
            let closed: Vec<_> =
                per_certificate(i).iter().filter_map(quinn::Connection::close_reason).collect();
            if !closed.is_empty() || tokio::time::Instant::now() > deadline {
                break closed;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let [quinn::ConnectionError::ApplicationClosed(c)] = closed.as_slice() else {
            panic!("{node}: not exactly one of five connections refused: {closed:?}");
        };
        assert_eq!(c.reason.as_ref(), b"too many connections for this certificate");
    }
    let open = held.len() + refused.len() - nodes.len();
    step!(t0, "{open} connections held");
    // A Hello announced at 8 MiB is refused on its header (a fresh certificate slot: one of
    // node-00's connections closes first).
    let ep = &endpoints[0];
    for (c, _, _) in held.iter().take(4) {
        c.close(0u32.into(), b"");
    }
    refused[0].close(0u32.into(), b"");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let conn = ep.connect(addr, "localhost").unwrap().await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&header(FrameKind::Hello, limits::MAX_FRAME_PAYLOAD)).await.unwrap();
    let answer =
        tokio::time::timeout(Duration::from_secs(10), read_frame(&mut recv, &mut Vec::new())).await.unwrap();
    assert!(
        matches!(&answer, Ok(Some(Frame::Error(e))) if e.message.contains("exceeds the limit")),
        "{answer:?}"
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    let peak = status_kib(pid, "VmHWM:");
    let metrics = http_get(telemetry, "/metrics").await.unwrap();
    let rejects = |reason: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("oomlens_collector_rejects_total")
                    && l.contains(&format!("reason=\"{reason}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    eprintln!(
        "RSS: {base} KiB idle, peak {peak} KiB with {open} connections ({:.0} KiB each); budget {} KiB",
        (peak - base) as f64 / open as f64,
        cfg.collector.max_memory_bytes >> 10
    );
    assert_eq!(rejects("too_many_connections_per_certificate"), 50.0, "{metrics}");
    assert!(rejects("too_large") >= 1.0, "{metrics}");
    assert!(
        peak << 10 <= cfg.collector.max_memory_bytes,
        "peak RSS {peak} KiB over the budget of {} KiB",
        cfg.collector.max_memory_bytes >> 10
    );
    drop(held);
    drop(refused);
    let _ = child.kill();
    let _ = child.wait();
    // 51 refusals, at most a window's worth of warning lines (the rest counted, summarised later).
    let log = std::fs::read_to_string(dir.path().join("collector.log")).unwrap();
    let lines = log.matches("session refused or failed").count();
    assert!(
        (1..=oomlens_collector::ingest::warnlimit::WARNINGS_PER_WINDOW as usize).contains(&lines),
        "{lines} refusal warnings logged"
    );
}
