//! The kubelet pod-resources client against a real gRPC server (tonic, HTTP/2) on a Unix socket:
//! `List` decoded into GPU → pod holders, the timeout of a kubelet that does not answer, the
//! poller filling and clearing a `PodDirectory`, and process samples of a wrapped source labelled
//! with pod names through their cgroup pod UID.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use oomlens_agent::source::pods::PodAttributed;
use oomlens_agent::source::{Reading, Source};
use oomlens_agent::workload::podresources::{self, PodDirectory, PodResourcesConfig, PodResourcesError, api};
use oomlens_schema::{GpuInfo, Label, ProcessSample};
use tokio::sync::watch;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A `v1.PodResourcesLister` serving fixed pods after an optional delay; counts `List` calls.
#[derive(Clone)]
struct Lister {
    pods: Arc<Vec<api::PodResources>>,
    delay: Duration,
    calls: Arc<AtomicUsize>,
}

impl tonic::server::NamedService for Lister {
    const NAME: &'static str = "v1.PodResourcesLister";
}

struct ListCall(Lister);

impl tonic::server::UnaryService<api::ListPodResourcesRequest> for ListCall {
    type Response = api::ListPodResourcesResponse;
    type Future = BoxFuture<Result<tonic::Response<Self::Response>, tonic::Status>>;

    fn call(&mut self, _req: tonic::Request<api::ListPodResourcesRequest>) -> Self::Future {
        let lister = self.0.clone();
        Box::pin(async move {
            lister.calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(lister.delay).await;
            Ok(tonic::Response::new(api::ListPodResourcesResponse { pod_resources: lister.pods.to_vec() }))
        })
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Lister {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let lister = self.clone();
        Box::pin(async move {
            if req.uri().path() == podresources::LIST_PATH {
                let codec = tonic_prost::ProstCodec::<
                    api::ListPodResourcesResponse,
                    api::ListPodResourcesRequest,
                >::default();
                Ok(tonic::server::Grpc::new(codec).unary(ListCall(lister), req).await)
            } else {
                Ok(tonic::Status::unimplemented(req.uri().path().to_owned()).into_http())
            }
        })
    }
}

struct Kubelet {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    calls: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

fn pod(ns: &str, name: &str, container: &str, resource: &str, ids: &[&str]) -> api::PodResources {
    api::PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: vec![api::ContainerResources {
            name: container.into(),
            devices: vec![api::ContainerDevices {
                resource_name: resource.into(),
                device_ids: ids.iter().map(|s| (*s).into()).collect(),
            }],
        }],
    }
}

fn fixture() -> Vec<api::PodResources> {
    vec![
        pod("research", "llama-0", "trainer", "nvidia.com/gpu", &["GPU-0000", "GPU-1111"]),
        pod("serving", "vllm-7", "engine", "nvidia.com/mig-3g.40gb", &["MIG-2222"]),
        pod("kube-system", "coredns", "coredns", "cpu", &[]),
    ]
}

async fn kubelet(pods: Vec<api::PodResources>, delay: Duration) -> Kubelet {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = Lister { pods: Arc::new(pods), delay, calls: calls.clone() };
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
            .await
            .unwrap();
    });
    Kubelet { _dir: dir, socket, calls, task }
}

fn cfg(socket: &Path) -> PodResourcesConfig {
    PodResourcesConfig {
        socket: socket.to_owned(),
        refresh_ms: 100,
        timeout_ms: 100,
        pod_logs_root: None,
        ..PodResourcesConfig::default()
    }
}

#[tokio::test]
async fn list_over_a_unix_socket() {
    let k = kubelet(fixture(), Duration::ZERO).await;
    let resp = podresources::list(&k.socket, Duration::from_secs(2), 1 << 20).await.unwrap();
    assert_eq!(resp.pod_resources, fixture());
    let (devices, names) = podresources::refresh_once(&cfg(&k.socket)).await.unwrap().unwrap();
    assert!(names.is_empty());
    assert_eq!((devices.pods(), devices.devices()), (3, 3));
    let h = &devices.holders("MIG-2222")[0];
    assert_eq!((h.namespace.as_str(), h.pod.as_str(), h.container.as_str()), ("serving", "vllm-7", "engine"));
    assert_eq!(devices.holders("GPU-1111")[0].pod, "llama-0");
    // A response over the size cap is refused, not truncated.
    let err = podresources::list(&k.socket, Duration::from_secs(2), 16).await.unwrap_err();
    assert!(matches!(err, PodResourcesError::Status(_)), "{err}");
    k.task.abort();
}

#[tokio::test]
async fn a_kubelet_that_does_not_answer_times_out() {
    let k = kubelet(fixture(), Duration::from_secs(30)).await;
    let started = std::time::Instant::now();
    let err = podresources::list(&k.socket, Duration::from_millis(200), 1 << 20).await.unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(matches!(err, PodResourcesError::Timeout(_) | PodResourcesError::Status(_)), "{err}");
    assert_eq!(k.calls.load(Ordering::SeqCst), 1);
    // No socket at all: `None`, not an error; a path that is not a socket: a connect error.
    let dir = tempfile::tempdir().unwrap();
    assert!(podresources::refresh_once(&cfg(&dir.path().join("none.sock"))).await.unwrap().is_none());
    std::fs::write(dir.path().join("file.sock"), b"").unwrap();
    let err = podresources::refresh_once(&cfg(&dir.path().join("file.sock"))).await.unwrap_err();
    assert!(matches!(err, PodResourcesError::Connect { .. }), "{err}");
    k.task.abort();
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..100 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn poller_fills_and_clears_the_directory() {
    let k = kubelet(fixture(), Duration::ZERO).await;
    let dir = PodDirectory::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let poller = tokio::spawn(podresources::run_poller(cfg(&k.socket), dir.clone(), stop_rx));
    until("first poll", || !dir.holders("GPU-0000").is_empty()).await;
    until("several polls", || k.calls.load(Ordering::SeqCst) >= 3).await;
    assert!(dir.age().unwrap() < Duration::from_secs(1));
    // The kubelet goes away (socket removed): the snapshot is dropped.
    k.task.abort();
    std::fs::remove_file(&k.socket).unwrap();
    until("cleared", || dir.holders("GPU-0000").is_empty()).await;
    assert!(dir.age().is_none());
    stop_tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(2), poller).await.unwrap().unwrap();
}

/// Two GPUs, one process on each; the labels say which pod (cgroup) each process is in.
#[derive(Debug)]
struct TwoGpus;

impl Source for TwoGpus {
    fn name(&self) -> &'static str {
        "test"
    }

    fn inventory(&self) -> Vec<GpuInfo> {
        ["GPU-0000", "MIG-2222"]
            .iter()
            .enumerate()
            .map(|(i, u)| GpuInfo {
                index: i as u32,
                uuid: (*u).into(),
                name: "t".into(),
                memory_total_bytes: 1,
                mig: false,
            })
            .collect()
    }

    fn sample(&mut self, ts_ms: i64) -> Reading {
        let proc = |gpu_index: u32, pid: u32, labels: Vec<Label>| ProcessSample {
            ts_ms,
            gpu_index,
            pid,
            name: "python".into(),
            used_bytes: Some(1),
            labels,
        };
        let uid = Label { key: "k8s.pod_uid".into(), value: "0b5c1e4f-0000-4000-8000-000000000001".into() };
        let unit = Label { key: "systemd.unit".into(), value: "nvidia-dcgm.service".into() };
        Reading {
            process_samples: vec![
                proc(0, 10, vec![uid.clone()]),
                proc(1, 11, vec![uid]),
                proc(1, 12, vec![unit]),
            ],
            ..Reading::default()
        }
    }
}

#[tokio::test]
async fn wrapped_source_labels_processes_with_their_pod() {
    let k = kubelet(fixture(), Duration::ZERO).await;
    let dir = PodDirectory::new();
    let (devices, names) = podresources::refresh_once(&cfg(&k.socket)).await.unwrap().unwrap();
    dir.set(devices, names);
    let mut source = PodAttributed::new(Box::new(TwoGpus), dir);
    let reading = source.sample(5);
    let labels = |i: usize| -> Vec<(String, String)> {
        reading.process_samples[i].labels.iter().map(|l| (l.key.clone(), l.value.clone())).collect()
    };
    let kv = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert!(labels(0).contains(&kv("k8s.pod", "llama-0")));
    assert!(labels(0).contains(&kv("k8s.namespace", "research")));
    assert!(labels(0).contains(&kv("k8s.container", "trainer")));
    assert!(labels(1).contains(&kv("k8s.pod", "vllm-7")));
    assert_eq!(labels(2), vec![kv("systemd.unit", "nvidia-dcgm.service")], "host daemons are not pods");
    assert_eq!(source.inventory().len(), 2);
    k.task.abort();
}
