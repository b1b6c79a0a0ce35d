#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The hook socket end to end on a real Unix socket: the round trip into the reading channel,
//! SO_PEERCRED, workload labels, error replies and counters, caps, socket-file handling.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oomlens_agent::detect::hook::{HookConfig, HookError, HookListener};
use oomlens_agent::metrics::AgentMetrics;
use oomlens_agent::source::Reading;
use oomlens_agent::workload::{WorkloadConfig, WorkloadResolver};
use oomlens_schema::{EventSource, OomKind, Phase};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};

struct Running {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    rx: mpsc::Receiver<Reading>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    metrics: Arc<AgentMetrics>,
}

fn etc(dir: &Path) -> std::path::PathBuf {
    let etc = dir.join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("group"), "root:x:0:\ngpu:x:4242:alice\n").unwrap();
    std::fs::write(etc.join("passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    etc
}

fn start(tweak: impl FnOnce(&mut HookConfig)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = HookConfig { path: dir.path().join("run/oomlens/hook.sock"), ..HookConfig::default() };
    tweak(&mut cfg);
    let etc_root = etc(dir.path());
    let listener = HookListener::bind(&cfg, &etc_root).unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = AgentMetrics::register(&mut registry);
    let resolver = Arc::new(Mutex::new(WorkloadResolver::with_config(WorkloadConfig {
        etc_root,
        revalidate_ms: 0,
        ..WorkloadConfig::default()
    })));
    let (tx, rx) = mpsc::channel(8);
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(listener.run(tx, resolver, metrics.clone(), stop_rx));
    Running { path: cfg.path.clone(), _dir: dir, rx, stop, task, metrics }
}

struct Client {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
}

impl Client {
    async fn connect(path: &Path) -> Client {
        let (r, w) = UnixStream::connect(path).await.unwrap().into_split();
        Client { reader: BufReader::new(r), writer: w }
    }

    async fn send(&mut self, bytes: &[u8]) -> Value {
        self.writer.write_all(bytes).await.unwrap();
        self.reply().await
    }

    async fn reply(&mut self) -> Value {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(5), self.reader.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply {line:?} is not JSON: {e}"))
    }
}

fn count(m: &AgentMetrics, result: &str) -> u64 {
    m.hook_requests.get_or_create(&vec![("result", result.to_owned())]).get()
}

#[tokio::test]
async fn report_round_trip_with_peer_pid_and_labels() {
    let mut s = start(|_| {});
    let mut c = Client::connect(&s.path).await;
    let line = r#"{"v":1,"type":"oom","pid":1,"gpu_index":2,"requested_bytes":2147483648,"phase":"forward",
        "message":"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "memory_stats":{"allocated_bytes.all.current":70000000000,"reserved_bytes.all.current":75000000000,"num_alloc_retries":3},
        "mem_get_info":{"free_bytes":1000,"total_bytes":85899345920},
        "job":{"params":7000000000,"batch":16,"seq_len":8192,"precision":"bf16","zero_stage":3,"tp":2,"flash_attention":true},
        "labels":{"team":"nlp"}}"#
        .replace('\n', " ");
    let reply = c.send(format!("{line}\n").as_bytes()).await;
    assert_eq!(reply["ok"], Value::Bool(true), "{reply}");
    let id: u64 = reply["event_id"].as_str().unwrap().parse().unwrap();

    let reading = tokio::time::timeout(Duration::from_secs(5), s.rx.recv()).await.unwrap().unwrap();
    let e = &reading.events[0];
    assert_eq!(e.event_id, id);
    assert_eq!((e.kind, e.source, e.phase), (OomKind::CudaOom, EventSource::Hook, Phase::Forward));
    // SO_PEERCRED: the connected process (this test) wins over the claimed pid 1.
    assert_eq!(e.pid, Some(std::process::id()));
    assert_eq!((e.gpu_index, e.requested_bytes), (Some(2), Some(2 << 30)));
    assert_eq!((e.allocated_bytes, e.reserved_bytes), (Some(70_000_000_000), Some(75_000_000_000)));
    assert_eq!((e.free_bytes, e.capacity_bytes), (Some(1000), Some(80 << 30)));
    assert_eq!((e.job.seq_len, e.job.zero_stage, e.job.flash_attention), (Some(8192), Some(3), Some(true)));
    let label = |k: &str| e.labels.iter().find(|l| l.key == k).map(|l| l.value.clone());
    assert_eq!(label("hook.reported_pid").as_deref(), Some("1"));
    assert_eq!(label("job.team").as_deref(), Some("nlp"));
    assert_eq!(label("torch.num_alloc_retries").as_deref(), Some("3"));
    // Workload labels of this very process from the real /proc.
    assert!(label("cmdline").is_some_and(|c| c.contains("hook")), "{:?}", e.labels);
    assert!(label("user").is_some());
    assert!(e.ts_ms > 1_600_000_000_000);
    assert_eq!(count(&s.metrics, "ok"), 1);

    // A ping on the same connection.
    assert_eq!(c.send(b"{\"v\":1,\"type\":\"ping\"}\n").await, serde_json::json!({"ok": true}));
    s.stop.send(true).unwrap();
    s.task.await.unwrap();
    assert!(!s.path.exists(), "socket removed on shutdown");
    assert!(s.rx.recv().await.is_none(), "every sender dropped on shutdown");
}

#[tokio::test]
async fn bad_lines_get_errors_are_counted_and_the_connection_survives() {
    let mut s = start(|c| c.max_line_bytes = 1024);
    let mut c = Client::connect(&s.path).await;
    let cases: [(&[u8], &str, &str); 6] = [
        (b"this is not json\n", "not_json", "JSON"),
        (b"{\"v\":3,\"type\":\"oom\"}\n", "version", "version 3"),
        (b"{\"v\":1,\"type\":\"oom\",\"pid\":\"12\"}\n", "field", "pid"),
        (b"{\"v\":1,\"type\":\"reboot\"}\n", "type", "reboot"),
        (b"\n", "empty", "empty"),
        (b"[]\n", "not_object", "object"),
    ];
    for (line, reason, needle) in cases {
        let reply = c.send(line).await;
        assert_eq!(reply["ok"], Value::Bool(false));
        assert!(reply["error"].as_str().unwrap().contains(needle), "{reply}");
        assert_eq!(count(&s.metrics, reason), 1, "{reason}");
    }
    let mut long = vec![b'x'; 5000];
    long.push(b'\n');
    let reply = c.send(&long).await;
    assert!(reply["error"].as_str().unwrap().contains("longer than 1024"), "{reply}");
    assert_eq!(count(&s.metrics, "too_long"), 1);
    // Still in sync: a good line works after all that.
    let reply = c.send(b"{\"v\":1,\"type\":\"oom\",\"gpu_index\":0}\r\n").await;
    assert_eq!(reply["ok"], Value::Bool(true), "{reply}");
    assert_eq!(s.rx.recv().await.unwrap().events.len(), 1);
    // A last line without a newline, then EOF, is still answered.
    c.writer.write_all(b"{\"v\":1,\"type\":\"ping\"}").await.unwrap();
    c.writer.shutdown().await.unwrap();
    assert_eq!(c.reply().await["ok"], Value::Bool(true));
    s.stop.send(true).unwrap();
    s.task.await.unwrap();
}

#[tokio::test]
async fn connection_cap_and_idle_timeout() {
    let s = start(|c| {
        c.max_connections = 1;
        c.idle_timeout_ms = 300;
    });
    let mut first = Client::connect(&s.path).await;
    assert_eq!(first.send(b"{\"v\":1,\"type\":\"ping\"}\n").await["ok"], Value::Bool(true));
    let mut second = Client::connect(&s.path).await;
    let reply = second.reply().await;
    assert!(reply["error"].as_str().unwrap().contains("too many connections"), "{reply}");
    assert_eq!(s.metrics.hook_connections.get_or_create(&vec![("result", "refused".to_owned())]).get(), 1);
    // The first connection goes idle and is closed with a reason; its slot is free again.
    let reply = first.reply().await;
    assert!(reply["error"].as_str().unwrap().contains("idle"), "{reply}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut third = Client::connect(&s.path).await;
    assert_eq!(third.send(b"{\"v\":1,\"type\":\"ping\"}\n").await["ok"], Value::Bool(true));
    s.stop.send(true).unwrap();
    s.task.await.unwrap();
}

#[tokio::test]
async fn socket_file_mode_group_stale_and_live() {
    let dir = tempfile::tempdir().unwrap();
    let etc_root = etc(dir.path());
    let path = dir.path().join("hook.sock");
    // A stale socket (its listener is gone) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let gid = own_gid();
    let cfg = HookConfig { path: path.clone(), mode: 0o640, group: gid.to_string(), ..HookConfig::default() };
    let live = HookListener::bind(&cfg, &etc_root).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    assert_eq!(meta.gid(), gid);
    // A live socket is not taken over.
    match HookListener::bind(&cfg, &etc_root) {
        Err(HookError::InUse(p)) => assert_eq!(p, path),
        other => panic!("{other:?}"),
    }
    drop(live);
    assert!(!path.exists(), "dropping the listener removes its socket");

    // A named group is resolved; an unknown one is a clear error and leaves nothing behind.
    let cfg = HookConfig { path: path.clone(), group: "gpu".to_owned(), ..HookConfig::default() };
    let named = HookListener::bind(&cfg, &etc_root);
    if nix_is_root() {
        assert_eq!(std::fs::metadata(&path).unwrap().gid(), 4242);
    }
    drop(named);
    let cfg = HookConfig { path: path.clone(), group: "no-such-group".to_owned(), ..HookConfig::default() };
    let err = HookListener::bind(&cfg, &etc_root).unwrap_err().to_string();
    assert!(err.contains("no-such-group") && err.contains("hook.group"), "{err}");
    assert!(!path.exists());

    // A regular file in the way is refused, not deleted.
    std::fs::write(&path, "precious").unwrap();
    let cfg = HookConfig { path: path.clone(), ..HookConfig::default() };
    assert!(matches!(HookListener::bind(&cfg, &etc_root), Err(HookError::NotASocket(_))));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
}

fn status_id(field: &str) -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn nix_is_root() -> bool {
    status_id("Uid:") == 0
}

fn own_gid() -> u32 {
    status_id("Gid:")
}
