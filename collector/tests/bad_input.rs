//! Hostile and broken clients: refused or cut off, counted, and never disturbing other agents.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use oomlens_schema::tls::{TlsFiles, client_config};
use oomlens_schema::transport::read_frame;
use oomlens_schema::{ErrorCode, Frame, Hello};

fn endpoint(files: &TlsFiles) -> quinn::Endpoint {
    let mut ep = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    ep.set_default_client_config(client_config(files, Duration::from_secs(3)).unwrap());
    ep
}

fn rejects(c: &oomlens_collector::service::RunningCollector, reason: &str) -> u64 {
    c.metrics.rejects.get_or_create(&vec![("reason", reason.to_owned())]).get()
}

/// Opens a session and sends `bytes` after a valid Hello; returns what the collector answered.
async fn send_after_hello(ep: &quinn::Endpoint, addr: SocketAddr, node: &str, bytes: &[u8]) -> Option<Frame> {
    let conn = ep.connect(addr, "localhost").unwrap().await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello =
        Frame::Hello(Hello { agent_id: node.into(), node: node.into(), boot_id: 7, ..Hello::default() });
    send.write_all(&hello.encode().unwrap()).await.unwrap();
    let mut buf = Vec::new();
    let welcome = read_frame(&mut recv, &mut buf).await.unwrap();
    assert!(matches!(welcome, Some(Frame::Welcome(_))), "{welcome:?}");
    let _ = send.write_all(bytes).await;
    let answer = tokio::time::timeout(Duration::from_secs(5), read_frame(&mut recv, &mut buf))
        .await
        .unwrap()
        .ok()
        .flatten();
    // The collector closes the connection after a bad frame.
    let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await;
    assert!(closed.is_ok(), "connection closed by the collector");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_clients_are_refused_and_counted_while_good_agents_stream() {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &["good-node", "rogue-node"]);
    let (collector, _stop) =
        start_collector(collector_config(&pki, &ch.url(), SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let addr = collector.addr;

    // A well-behaved agent streams the whole time.
    let good = spawn_agent(agent_config(&pki, "good-node", addr, 5, 120, 30.0));

    // 1. A certificate from an unknown CA: the handshake or the first stream fails.
    let other_dir = tempfile::tempdir().unwrap();
    let other = common::pki(other_dir.path(), &["intruder"]);
    let intruder = endpoint(&TlsFiles {
        ca: pki.ca.clone(),
        cert: other.agents[0].1.cert.clone(),
        key: other.agents[0].1.key.clone(),
    });
    let refused = async {
        let conn = intruder.connect(addr, "localhost").unwrap().await?;
        let (mut send, mut recv) = conn.open_bi().await?;
        send.write_all(&Frame::Hello(Hello::default()).encode().unwrap()).await?;
        let mut buf = Vec::new();
        match read_frame(&mut recv, &mut buf).await {
            Ok(Some(f)) => Err(anyhow::anyhow!("unexpected answer {f:?}")),
            _ => Ok::<_, anyhow::Error>(()),
        }
    }
    .await;
    // Either the connect failed (handshake) or the stream died: no Welcome in any case.
    if let Err(e) = &refused {
        assert!(!e.to_string().contains("unexpected answer"), "{e}");
    }
    assert!(
        wait_until(Duration::from_secs(5), || rejects(&collector, "unknown_ca") >= 1).await,
        "TLS refusal counted"
    );

    // 2. Garbage after a valid Hello: an error reply, the connection is closed, counted.
    let rogue_files = &pki.agents.iter().find(|(n, _)| n == "rogue-node").unwrap().1;
    let rogue = endpoint(&TlsFiles {
        ca: pki.ca.clone(),
        cert: rogue_files.cert.clone(),
        key: rogue_files.key.clone(),
    });
    let answer = send_after_hello(&rogue, addr, "rogue-node", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    match answer {
        Some(Frame::Error(e)) => assert_eq!(e.code, ErrorCode::BadFrame as u16, "{e:?}"),
        other => panic!("expected an error reply, got {other:?}"),
    }
    assert!(wait_until(Duration::from_secs(5), || rejects(&collector, "bad_magic") >= 1).await);

    // 3. An oversized frame header: refused without reading the payload.
    let mut header =
        oomlens_schema::FrameHeader { version: 1, kind: oomlens_schema::FrameKind::Batch, len: 0 }.to_bytes();
    header[8..12].copy_from_slice(&(64u32 * 1024 * 1024).to_le_bytes());
    let answer = send_after_hello(&rogue, addr, "rogue-node", &header).await;
    assert!(matches!(answer, Some(Frame::Error(_))), "{answer:?}");
    assert!(wait_until(Duration::from_secs(5), || rejects(&collector, "too_large") >= 1).await);

    // 4. A valid header with a payload that fails validation.
    let mut frame = Frame::Batch(oomlens_schema::Batch { seq: 1, ..Default::default() }).encode().unwrap();
    let n = frame.len();
    for b in &mut frame[16..n] {
        *b = 0xff;
    }
    let answer = send_after_hello(&rogue, addr, "rogue-node", &frame).await;
    assert!(matches!(answer, Some(Frame::Error(_))), "{answer:?}");
    assert!(wait_until(Duration::from_secs(5), || rejects(&collector, "invalid_payload") >= 1).await);

    // 5. A Hello claimed as a batch (the first frame must be a Hello): refused on its header.
    let conn = rogue.connect(addr, "localhost").unwrap().await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&Frame::Batch(oomlens_schema::Batch { seq: 1, ..Default::default() }).encode().unwrap())
        .await
        .unwrap();
    let answer = read_frame(&mut recv, &mut Vec::new()).await;
    assert!(
        matches!(&answer, Ok(Some(Frame::Error(e))) if e.message.contains("expected a hello frame")),
        "{answer:?}"
    );
    assert!(wait_until(Duration::from_secs(5), || rejects(&collector, "protocol") >= 1).await);

    // 6. A client that closes cleanly between frames (after its Welcome) is not a reject.
    let before: u64 =
        ["truncated_stream", "stream_io", "connection"].iter().map(|r| rejects(&collector, r)).sum();
    for _ in 0..3 {
        let conn = rogue.connect(addr, "localhost").unwrap().await.unwrap();
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        let hello = Frame::Hello(Hello {
            agent_id: "quiet".into(),
            node: "rogue-node".into(),
            boot_id: 9,
            ..Hello::default()
        });
        send.write_all(&hello.encode().unwrap()).await.unwrap();
        assert!(matches!(read_frame(&mut recv, &mut Vec::new()).await, Ok(Some(Frame::Welcome(_)))));
        conn.close(0u32.into(), b"done");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after: u64 =
        ["truncated_stream", "stream_io", "connection"].iter().map(|r| rejects(&collector, r)).sum();
    assert_eq!(after, before, "clean closes counted as rejects");

    // The good agent was not disturbed.
    let t = tokio::time::timeout(Duration::from_secs(60), good).await.unwrap().unwrap();
    assert_eq!(t.pending_batches, 0);
    collector.shutdown().await;
    let db = client(&ch.url());
    assert_eq!(
        count(&db, "SELECT count() FROM oomlens.gpu_samples WHERE node = 'good-node'").await,
        t.gpu_samples
    );
    assert_eq!(count(&db, "SELECT count() FROM oomlens.gpu_samples WHERE node != 'good-node'").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clickhouse_unreachable_at_start_is_retried_without_panic() {
    let mut ch = start_clickhouse();
    let url = ch.url();
    ch.kill().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &["late-node"]);
    let cfg = collector_config(&pki, &url, SocketAddr::from(([127, 0, 0, 1], 0)));
    // A missing certificate is reported at once, not after ClickHouse answers.
    let mut broken = cfg.clone();
    broken.collector.cert = dir.path().join("missing.pem");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let err = tokio::time::timeout(
        Duration::from_secs(5),
        oomlens_collector::service::start(broken.finish().unwrap(), rx),
    )
    .await
    .expect("refused without waiting for ClickHouse")
    .unwrap_err();
    assert!(err.to_string().contains("missing.pem"), "{err}");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let starting = tokio::spawn(oomlens_collector::service::start(cfg.finish().unwrap(), stop_rx));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!starting.is_finished(), "still retrying while ClickHouse is down");
    let mut ch = tokio::task::spawn_blocking(move || {
        ch.restart().unwrap();
        ch
    })
    .await
    .unwrap();
    let collector = tokio::time::timeout(Duration::from_secs(30), starting).await.unwrap().unwrap().unwrap();
    let t = tokio::time::timeout(
        Duration::from_secs(60),
        spawn_agent(agent_config(&pki, "late-node", collector.addr, 3, 30, 60.0)),
    )
    .await
    .unwrap()
    .unwrap();
    collector.shutdown().await;
    assert_eq!(count(&client(&url), "SELECT count() FROM oomlens.gpu_samples").await, t.gpu_samples);
    drop(stop_tx);
    ch.stop().unwrap();
}
