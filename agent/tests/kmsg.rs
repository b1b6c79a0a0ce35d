#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The kernel log task on a fixture in the `/dev/kmsg` record format: records present before the
//! start are skipped, records appended later become events (Xid with the GPU index from the PCI
//! map, host and cgroup OOM kills with the victim's RSS), and the task ends on the stop signal.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use oomlens_agent::detect::kmsg::{KmsgOptions, spawn_kmsg};
use oomlens_agent::detect::pci::PciMap;
use oomlens_agent::metrics::AgentMetrics;
use oomlens_schema::{EventSource, OomKind};
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};

#[tokio::test]
async fn fixture_records_appended_after_start_become_events() {
    let fixture = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kmsg/gpu-node.kmsg"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmsg");
    std::fs::write(&path, &fixture).unwrap(); // already there at start: skipped
    let metrics = AgentMetrics::register(&mut Registry::default());
    let (tx, mut rx) = mpsc::channel(64);
    let (stop_tx, stop_rx) = watch::channel(false);
    let opts = KmsgOptions {
        path: path.clone(),
        poll_interval: Duration::from_millis(20),
        pci: PciMap::from_pairs([("00000000:3B:00.0", 0), ("00000000:AF:00.0", 5)]),
    };
    let task = spawn_kmsg(opts, tx, stop_rx, metrics.clone()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(fixture.as_bytes()).unwrap();

    let mut events = Vec::new();
    while events.len() < 5 {
        let r = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
        events.extend(r.events);
    }
    stop_tx.send(true).unwrap();
    task.await.unwrap();
    assert!(rx.recv().await.is_none(), "the task dropped its sender");
    assert_eq!(events.len(), 5, "{events:#?}");
    assert!(
        events.iter().all(|e| e.source == EventSource::Kmsg && e.framework == "kernel" && e.event_id != 0)
    );
    let xids: Vec<_> =
        events.iter().filter(|e| e.kind == OomKind::Xid).map(|e| (e.xid, e.gpu_index, e.pid)).collect();
    assert_eq!(
        xids,
        vec![(Some(31), Some(0), Some(48213)), (Some(79), Some(5), None), (Some(13), Some(0), None)]
    );
    let kills: Vec<_> =
        events.iter().filter(|e| e.kind == OomKind::HostOomKill).map(|e| (e.pid, e.host_rss_bytes)).collect();
    assert_eq!(
        kills,
        vec![
            (Some(51877), Some((62_914_560 + 524_288 + 1_048_576) * 1024)),
            (Some(60001), Some((50_331_648 + 2048) * 1024)),
        ]
    );
    let cgroup = events[3].labels.iter().find(|l| l.key == "cgroup").unwrap();
    assert!(cgroup.value.ends_with("cri-containerd-5e1c.scope"));
    assert_eq!(metrics.kmsg_unreadable.get(), 0);
}

#[tokio::test]
async fn an_unreadable_kernel_log_is_one_warning_and_no_task() {
    let metrics = AgentMetrics::register(&mut Registry::default());
    let (tx, _rx) = mpsc::channel(1);
    let (_stop_tx, stop_rx) = watch::channel(false);
    let opts = KmsgOptions {
        path: "/nonexistent/kmsg".into(),
        poll_interval: Duration::from_millis(20),
        pci: PciMap::default(),
    };
    assert!(spawn_kmsg(opts, tx, stop_rx, metrics.clone()).is_none());
    assert_eq!(metrics.kmsg_unreadable.get(), 1);
}
