//! Which pod holds which GPU: the kubelet's pod-resources API (`v1.PodResourcesLister/List` over
//! gRPC on `/var/lib/kubelet/pod-resources/kubelet.sock`), polled, cached and used to add
//! `k8s.namespace` / `k8s.pod` / `k8s.container` to the workload labels the cgroups give.
//!
//! cgroups tell *which pod UID* a pid belongs to (`k8s.pod_uid`, see [`super::cgroup`]) but not the
//! pod's name; the kubelet tells *which container holds which device* (`nvidia.com/gpu` device ids
//! are GPU UUIDs, `nvidia.com/mig-…` ones MIG UUIDs; with time-slicing the device plugin appends
//! `::<replica>`) but not the pod's UID. [`PodDirectory::annotate`] joins them:
//!
//! 1. A process whose cgroup names a pod UID gets that pod's namespace and name from the pod log
//!    directories (`/var/log/pods/<namespace>_<pod>_<uid>`, [`pod_names_from_log_dirs`]) when they
//!    are mounted, and the container that holds the process's GPU within that pod.
//! 2. Otherwise, when exactly one pod holds the process's GPU, the process gets that pod (and the
//!    container, when exactly one of its containers holds the GPU).
//! 3. A process that its cgroup places outside any pod (a systemd unit, a Slurm job, a plain
//!    Docker container) is never given a pod by device; one whose cgroup could not be read at all
//!    is (rule 2).
//!
//! Labels already naming a pod (`k8s.pod`) are left alone. Nothing here blocks the sampler: the
//! poller ([`run_poller`]) runs on the async runtime and swaps a snapshot behind a lock that the
//! sampler thread only reads. Each poll connects afresh (the kubelet recreates the socket when it
//! restarts), is bounded by a timeout and a response size cap, and keeps at most
//! [`PodResourcesConfig::max_pods`] pods; a snapshot older than three polls is dropped rather than
//! trusted. The messages are the few of `k8s.io/kubelet/pkg/apis/podresources/v1/api.proto` that
//! `List` needs, written by hand with `prost` derives ([`api`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use oomlens_schema::Label;
use oomlens_schema::limits::{MAX_LABELS, MAX_STRING};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::cgroup::keys;

/// Label key: Kubernetes namespace.
pub const NAMESPACE: &str = "k8s.namespace";
/// Label key: Kubernetes pod name.
pub const POD: &str = "k8s.pod";
/// Label key: Kubernetes container name.
pub const CONTAINER: &str = "k8s.container";

/// gRPC path of `List`.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";

/// Most pod log directories read per refresh.
const MAX_LOG_DIRS: usize = 65_536;

/// The `List` messages of the kubelet's pod-resources v1 API (field numbers as in `api.proto`;
/// fields oomlens does not use — cpu ids, memory, dynamic resources, topology — are skipped by
/// prost as unknown fields).
pub mod api {
    /// `ListPodResourcesRequest` (empty).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodResourcesRequest {}

    /// `ListPodResourcesResponse`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodResourcesResponse {
        /// Every pod the kubelet runs.
        #[prost(message, repeated, tag = "1")]
        pub pod_resources: Vec<PodResources>,
    }

    /// `PodResources`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodResources {
        /// Pod name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Pod namespace.
        #[prost(string, tag = "2")]
        pub namespace: String,
        /// Its containers.
        #[prost(message, repeated, tag = "3")]
        pub containers: Vec<ContainerResources>,
    }

    /// `ContainerResources`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerResources {
        /// Container name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Devices allocated by device plugins.
        #[prost(message, repeated, tag = "2")]
        pub devices: Vec<ContainerDevices>,
    }

    /// `ContainerDevices`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerDevices {
        /// Extended resource name, e.g. `nvidia.com/gpu`.
        #[prost(string, tag = "1")]
        pub resource_name: String,
        /// Device ids (GPU or MIG UUIDs for the NVIDIA device plugin).
        #[prost(string, repeated, tag = "2")]
        pub device_ids: Vec<String>,
    }
}

/// `[pod_resources]`: the kubelet pod-resources API.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PodResourcesConfig {
    /// Poll the kubelet when its socket exists (checked before every poll).
    pub enabled: bool,
    /// The kubelet's pod-resources socket as the agent sees it.
    pub socket: PathBuf,
    /// Milliseconds between polls.
    pub refresh_ms: u64,
    /// Limit of one poll (connect + `List`), ms.
    pub timeout_ms: u64,
    /// Largest `List` response accepted, bytes.
    pub max_response_bytes: usize,
    /// Most pods kept from one response (the rest are ignored and logged).
    pub max_pods: usize,
    /// Resource names whose device ids are GPU or MIG UUIDs; a name ending in `*` is a prefix.
    pub resource_names: Vec<String>,
    /// The kubelet's pod log root (`<namespace>_<pod>_<uid>` directories) for pod UID → name;
    /// unset or missing: pods are named only through their devices.
    pub pod_logs_root: Option<PathBuf>,
}

impl Default for PodResourcesConfig {
    fn default() -> Self {
        PodResourcesConfig {
            enabled: true,
            socket: PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"),
            refresh_ms: 10_000,
            timeout_ms: 2_000,
            max_response_bytes: 16 * 1024 * 1024,
            max_pods: 4096,
            resource_names: vec!["nvidia.com/gpu".to_owned(), "nvidia.com/mig-*".to_owned()],
            pod_logs_root: Some(PathBuf::from("/var/log/pods")),
        }
    }
}

impl PodResourcesConfig {
    /// Checks ranges; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.refresh_ms < 100 {
            return Err("pod_resources.refresh_ms must be at least 100".to_owned());
        }
        if self.timeout_ms == 0 || self.timeout_ms > self.refresh_ms {
            return Err(
                "pod_resources.timeout_ms must be > 0 and at most pod_resources.refresh_ms".to_owned()
            );
        }
        if self.max_pods == 0 || self.max_response_bytes < 4096 {
            return Err(
                "pod_resources.max_pods must be > 0 and pod_resources.max_response_bytes at least 4096"
                    .to_owned(),
            );
        }
        if self.resource_names.iter().any(|n| n.is_empty() || n == "*") {
            return Err("pod_resources.resource_names must not contain empty names or a bare `*`".to_owned());
        }
        Ok(())
    }

    fn is_gpu_resource(&self, name: &str) -> bool {
        self.resource_names.iter().any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == pattern,
        })
    }
}

/// A poll of the kubelet failed.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// The socket could not be connected.
    #[error("cannot connect to the kubelet pod-resources socket {path}: {source}")]
    Connect {
        /// Socket path.
        path: PathBuf,
        /// Transport error.
        source: tonic::transport::Error,
    },
    /// The kubelet answered with an error (or the response was too large / malformed).
    #[error("kubelet pod-resources List failed: {0}")]
    Status(#[from] tonic::Status),
    /// No answer within the timeout.
    #[error("kubelet pod-resources List did not answer within {0:?}")]
    Timeout(Duration),
}

/// One container holding a device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Holder {
    /// Kubernetes namespace of the pod, as the kubelet's pod-resources `List` reports it.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
}

/// GPU (or MIG) UUID → the containers holding it, from one `List`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDevices {
    by_uuid: HashMap<String, Vec<Holder>>,
    pods: usize,
    truncated: usize,
}

impl PodDevices {
    /// Indexes a `List` response: only devices of `cfg.resource_names`, at most `cfg.max_pods`
    /// pods, strings cut to the wire limit, time-slicing replica suffixes (`::N`) removed.
    pub fn from_response(resp: &api::ListPodResourcesResponse, cfg: &PodResourcesConfig) -> Self {
        let mut out = PodDevices::default();
        for pod in &resp.pod_resources {
            if out.pods >= cfg.max_pods {
                out.truncated += 1;
                continue;
            }
            out.pods += 1;
            for c in &pod.containers {
                for d in c.devices.iter().filter(|d| cfg.is_gpu_resource(&d.resource_name)) {
                    for id in &d.device_ids {
                        let uuid = id.split("::").next().unwrap_or(id);
                        if uuid.is_empty() || uuid.len() > MAX_STRING {
                            continue;
                        }
                        let holder = Holder {
                            namespace: cut(&pod.namespace),
                            pod: cut(&pod.name),
                            container: cut(&c.name),
                        };
                        let holders = out.by_uuid.entry(uuid.to_owned()).or_default();
                        if !holders.contains(&holder) {
                            holders.push(holder);
                            holders.sort();
                        }
                    }
                }
            }
        }
        out
    }

    /// The containers holding `uuid` (sorted; empty when none).
    pub fn holders(&self, uuid: &str) -> &[Holder] {
        self.by_uuid.get(uuid).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Number of devices held by at least one container.
    pub fn devices(&self) -> usize {
        self.by_uuid.len()
    }

    /// Number of pods indexed.
    pub fn pods(&self) -> usize {
        self.pods
    }

    /// Number of pods ignored because of `max_pods`.
    pub fn truncated(&self) -> usize {
        self.truncated
    }
}

/// Namespace and name of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodName {
    /// Kubernetes namespace (the part of the log directory name before the first `_`).
    pub namespace: String,
    /// Pod name.
    pub pod: String,
}

/// Pod UID → namespace and name from the kubelet's pod log directories
/// (`<root>/<namespace>_<pod>_<uid>`; namespaces and pod names cannot contain `_`). At most
/// [`MAX_LOG_DIRS`] entries are read; other names are skipped. Empty when `root` is unreadable.
pub fn pod_names_from_log_dirs(root: &Path) -> HashMap<String, PodName> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(root) else { return out };
    for entry in dir.flatten().take(MAX_LOG_DIRS) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let mut parts = name.splitn(3, '_');
        let (Some(ns), Some(pod), Some(uid)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if ns.is_empty() || pod.is_empty() || uid.is_empty() || uid.contains('_') || name.len() > MAX_STRING {
            continue;
        }
        out.insert(uid.to_owned(), PodName { namespace: ns.to_owned(), pod: pod.to_owned() });
    }
    out
}

#[derive(Debug, Default)]
struct Snapshot {
    devices: PodDevices,
    names: HashMap<String, PodName>,
    taken: Option<Instant>,
}

/// The latest pod ↔ device snapshot, shared between the poller (writer) and the samplers
/// (readers). Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct PodDirectory {
    inner: Arc<RwLock<Arc<Snapshot>>>,
}

impl PodDirectory {
    /// An empty directory (annotates nothing until a poll succeeds).
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the snapshot.
    pub fn set(&self, devices: PodDevices, names: HashMap<String, PodName>) {
        let snap = Arc::new(Snapshot { devices, names, taken: Some(Instant::now()) });
        match self.inner.write() {
            Ok(mut g) => *g = snap,
            Err(poisoned) => *poisoned.into_inner() = snap,
        }
    }

    /// Forgets everything (the kubelet stopped answering for too long).
    pub fn clear(&self) {
        match self.inner.write() {
            Ok(mut g) => *g = Arc::default(),
            Err(poisoned) => *poisoned.into_inner() = Arc::default(),
        }
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        match self.inner.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// How long ago the current snapshot was taken (`None`: never / cleared).
    pub fn age(&self) -> Option<Duration> {
        self.snapshot().taken.map(|t| t.elapsed())
    }

    /// The containers holding `uuid` now.
    pub fn holders(&self, uuid: &str) -> Vec<Holder> {
        self.snapshot().devices.holders(uuid).to_vec()
    }

    /// Adds `k8s.namespace`, `k8s.pod` and (when unambiguous) `k8s.container` to the labels of a
    /// process on the GPU `gpu_uuid` (`None`: GPU unknown), by the rules in the module docs.
    /// Returns whether labels were added.
    pub fn annotate(&self, gpu_uuid: Option<&str>, labels: &mut Vec<Label>) -> bool {
        if labels.iter().any(|l| l.key == POD) || labels.len() + 3 > MAX_LABELS {
            return false;
        }
        let snap = self.snapshot();
        let holders = gpu_uuid.map(|u| snap.devices.holders(u)).unwrap_or(&[]);
        let pod_uid = labels.iter().find(|l| l.key == keys::POD_UID).map(|l| l.value.as_str());
        let found: Option<(String, String, Option<String>)> = match pod_uid {
            Some(uid) => match snap.names.get(uid) {
                Some(n) => {
                    let mut mine = holders.iter().filter(|h| h.namespace == n.namespace && h.pod == n.pod);
                    let container = match (mine.next(), mine.next()) {
                        (Some(h), None) => Some(h.container.clone()),
                        _ => None,
                    };
                    Some((n.namespace.clone(), n.pod.clone(), container))
                }
                None => by_device(holders),
            },
            None if has_cgroup_owner(labels) => None,
            None => by_device(holders),
        };
        let Some((namespace, pod, container)) = found else { return false };
        labels.push(Label { key: NAMESPACE.to_owned(), value: namespace });
        labels.push(Label { key: POD.to_owned(), value: pod });
        if let Some(c) = container {
            labels.push(Label { key: CONTAINER.to_owned(), value: c });
        }
        true
    }
}

/// The pod (and container) when exactly one pod (container) holds the device.
fn by_device(holders: &[Holder]) -> Option<(String, String, Option<String>)> {
    let first = holders.first()?;
    if holders.iter().any(|h| h.namespace != first.namespace || h.pod != first.pod) {
        return None;
    }
    let container = (holders.len() == 1).then(|| first.container.clone());
    Some((first.namespace.clone(), first.pod.clone(), container))
}

/// The cgroup placed the process somewhere definite (outside any pod, since it has no pod UID).
fn has_cgroup_owner(labels: &[Label]) -> bool {
    labels
        .iter()
        .any(|l| [keys::CONTAINER_ID, keys::SYSTEMD_UNIT, keys::SLURM_JOB_ID].contains(&l.key.as_str()))
}

fn cut(s: &str) -> String {
    oomlens_schema::text::clip(s, MAX_STRING).to_owned()
}

/// One `List` call over the Unix socket `socket`, bounded by `timeout` (connect included) and
/// `max_response_bytes`.
pub async fn list(
    socket: &Path,
    timeout: Duration,
    max_response_bytes: usize,
) -> Result<api::ListPodResourcesResponse, PodResourcesError> {
    let call = async {
        let path = socket.to_owned();
        // The URI is required by the HTTP/2 layer but never resolved: the connector dials the socket.
        let channel = tonic::transport::Endpoint::from_static("http://kubelet.pod-resources")
            .connect_timeout(timeout)
            .timeout(timeout)
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move { tokio::net::UnixStream::connect(path).await.map(hyper_util::rt::TokioIo::new) }
            }))
            .await
            .map_err(|source| PodResourcesError::Connect { path: socket.to_owned(), source })?;
        let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(max_response_bytes);
        grpc.ready()
            .await
            .map_err(|source| PodResourcesError::Connect { path: socket.to_owned(), source })?;
        let codec =
            tonic_prost::ProstCodec::<api::ListPodResourcesRequest, api::ListPodResourcesResponse>::default();
        let resp = grpc
            .unary(
                tonic::Request::new(api::ListPodResourcesRequest {}),
                http::uri::PathAndQuery::from_static(LIST_PATH),
                codec,
            )
            .await?;
        Ok(resp.into_inner())
    };
    tokio::time::timeout(timeout, call).await.map_err(|_| PodResourcesError::Timeout(timeout))?
}

/// One refresh: `List` (when the socket exists) and the pod log directories. `Ok(None)`: no socket.
pub async fn refresh_once(
    cfg: &PodResourcesConfig,
) -> Result<Option<(PodDevices, HashMap<String, PodName>)>, PodResourcesError> {
    if !cfg.socket.exists() {
        return Ok(None);
    }
    let resp = list(&cfg.socket, Duration::from_millis(cfg.timeout_ms), cfg.max_response_bytes).await?;
    let devices = PodDevices::from_response(&resp, cfg);
    let names = match &cfg.pod_logs_root {
        Some(root) => {
            let root = root.clone();
            tokio::task::spawn_blocking(move || pod_names_from_log_dirs(&root)).await.unwrap_or_default()
        }
        None => HashMap::new(),
    };
    Ok(Some((devices, names)))
}

/// Polls the kubelet every `cfg.refresh_ms` into `dir` until `stop` turns true. Failures are
/// logged when the state changes (not on every poll); after three failed polls in a row the
/// snapshot is cleared rather than trusted.
pub async fn run_poller(cfg: PodResourcesConfig, dir: PodDirectory, mut stop: watch::Receiver<bool>) {
    let every = Duration::from_millis(cfg.refresh_ms);
    let mut failures = 0u32;
    let mut last: Option<(usize, usize)> = None;
    let mut warned_missing = false;
    loop {
        match refresh_once(&cfg).await {
            Ok(Some((devices, names))) => {
                if failures > 0 || last != Some((devices.pods(), devices.devices())) {
                    info!(
                        pods = devices.pods(),
                        gpus_held = devices.devices(),
                        pod_names = names.len(),
                        "kubelet pod-resources read"
                    );
                }
                if devices.truncated() > 0 {
                    warn!(
                        ignored = devices.truncated(),
                        max_pods = cfg.max_pods,
                        "kubelet pod-resources: more pods than pod_resources.max_pods"
                    );
                }
                last = Some((devices.pods(), devices.devices()));
                failures = 0;
                warned_missing = false;
                dir.set(devices, names);
            }
            Ok(None) => {
                if !warned_missing {
                    debug!(socket = %cfg.socket.display(), "kubelet pod-resources socket absent: GPUs not mapped to pods");
                    warned_missing = true;
                }
                dir.clear();
                last = None;
            }
            Err(e) => {
                failures += 1;
                if failures == 1 {
                    warn!(error = %e, "kubelet pod-resources poll failed; keeping the last snapshot for now");
                }
                if failures == 3 {
                    warn!(error = %e, "kubelet pod-resources failed three times in a row: pod names from devices dropped");
                    dir.clear();
                    last = None;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(k: &str, v: &str) -> Label {
        Label { key: k.into(), value: v.into() }
    }

    fn get<'a>(labels: &'a [Label], key: &str) -> Option<&'a str> {
        labels.iter().find(|l| l.key == key).map(|l| l.value.as_str())
    }

    fn pod(ns: &str, name: &str, containers: &[(&str, &str, &[&str])]) -> api::PodResources {
        api::PodResources {
            name: name.into(),
            namespace: ns.into(),
            containers: containers
                .iter()
                .map(|(c, res, ids)| api::ContainerResources {
                    name: (*c).into(),
                    devices: vec![api::ContainerDevices {
                        resource_name: (*res).into(),
                        device_ids: ids.iter().map(|s| (*s).into()).collect(),
                    }],
                })
                .collect(),
        }
    }

    fn fixture() -> api::ListPodResourcesResponse {
        api::ListPodResourcesResponse {
            pod_resources: vec![
                pod("ml", "train-0", &[("trainer", "nvidia.com/gpu", &["GPU-a", "GPU-b"])]),
                pod("ml", "infer-0", &[("server", "nvidia.com/mig-1g.10gb", &["MIG-c"])]),
                pod("web", "nginx", &[("nginx", "example.com/nic", &["GPU-z"])]),
                // Time-sliced GPU shared by two pods.
                pod("a", "p1", &[("c", "nvidia.com/gpu", &["GPU-s::0"])]),
                pod("b", "p2", &[("c", "nvidia.com/gpu", &["GPU-s::1"])]),
                // One pod, two containers on one GPU.
                pod("ml", "duo", &[("x", "nvidia.com/gpu", &["GPU-d"]), ("y", "nvidia.com/gpu", &["GPU-d"])]),
            ],
        }
    }

    #[test]
    fn response_is_indexed_by_uuid() {
        let d = PodDevices::from_response(&fixture(), &PodResourcesConfig::default());
        let h = |u| {
            d.holders(u)
                .iter()
                .map(|h| format!("{}/{}/{}", h.namespace, h.pod, h.container))
                .collect::<Vec<_>>()
        };
        assert_eq!(h("GPU-a"), ["ml/train-0/trainer"]);
        assert_eq!(h("GPU-b"), ["ml/train-0/trainer"]);
        assert_eq!(h("MIG-c"), ["ml/infer-0/server"]);
        assert!(h("GPU-z").is_empty(), "other resources are not GPUs");
        assert_eq!(h("GPU-s"), ["a/p1/c", "b/p2/c"]);
        assert_eq!(h("GPU-d"), ["ml/duo/x", "ml/duo/y"]);
        assert_eq!((d.pods(), d.devices(), d.truncated()), (6, 5, 0));
        let small = PodResourcesConfig { max_pods: 2, ..PodResourcesConfig::default() };
        let d = PodDevices::from_response(&fixture(), &small);
        assert_eq!((d.pods(), d.truncated()), (2, 4));
        assert!(d.holders("GPU-s").is_empty());
    }

    #[test]
    fn annotation_rules() {
        let dir = PodDirectory::new();
        let mut names = HashMap::new();
        names.insert("uid-p2".to_owned(), PodName { namespace: "b".into(), pod: "p2".into() });
        dir.set(PodDevices::from_response(&fixture(), &PodResourcesConfig::default()), names);

        // In a pod (cgroup), one pod holds the GPU: pod and container.
        let mut l = vec![label(keys::POD_UID, "uid-x"), label(keys::CONTAINER_ID, "abc")];
        assert!(dir.annotate(Some("GPU-a"), &mut l));
        assert_eq!(
            (get(&l, NAMESPACE), get(&l, POD), get(&l, CONTAINER)),
            (Some("ml"), Some("train-0"), Some("trainer"))
        );
        // Shared GPU: the UID's name from the log directories picks the pod.
        let mut l = vec![label(keys::POD_UID, "uid-p2")];
        assert!(dir.annotate(Some("GPU-s"), &mut l));
        assert_eq!((get(&l, POD), get(&l, CONTAINER)), (Some("p2"), Some("c")));
        // Shared GPU, unknown UID: ambiguous, nothing added.
        let mut l = vec![label(keys::POD_UID, "uid-q")];
        assert!(!dir.annotate(Some("GPU-s"), &mut l));
        // Two containers of one pod: the pod, not the container.
        let mut l = vec![label(keys::POD_UID, "uid-d")];
        assert!(dir.annotate(Some("GPU-d"), &mut l));
        assert_eq!((get(&l, POD), get(&l, CONTAINER)), (Some("duo"), None));
        // Outside any pod per the cgroup: never labelled by device.
        let mut l = vec![label(keys::SYSTEMD_UNIT, "dcgm.service")];
        assert!(!dir.annotate(Some("GPU-a"), &mut l));
        // Cgroup unreadable: by device.
        let mut l = vec![label("user", "root")];
        assert!(dir.annotate(Some("MIG-c"), &mut l));
        assert_eq!(get(&l, POD), Some("infer-0"));
        // Already named, or the GPU unknown: untouched.
        let mut l = vec![label(POD, "given")];
        assert!(!dir.annotate(Some("GPU-a"), &mut l));
        assert!(!dir.annotate(None, &mut vec![label(keys::POD_UID, "uid-x")]));
        // Known UID without a GPU (a log line): the name from the log directories.
        let mut l = vec![label(keys::POD_UID, "uid-p2")];
        assert!(dir.annotate(None, &mut l));
        assert_eq!((get(&l, NAMESPACE), get(&l, POD), get(&l, CONTAINER)), (Some("b"), Some("p2"), None));
        dir.clear();
        assert!(!dir.annotate(Some("GPU-a"), &mut vec![]));
    }

    #[test]
    fn log_directories_name_pods() {
        let tmp = tempfile::tempdir().unwrap();
        for d in ["ml_train-0_1a2b-3c", "kube-system_coredns-x_9f9f", "not-a-pod-dir", "a__b"] {
            std::fs::create_dir(tmp.path().join(d)).unwrap();
        }
        let names = pod_names_from_log_dirs(tmp.path());
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(names["1a2b-3c"], PodName { namespace: "ml".into(), pod: "train-0".into() });
        assert!(pod_names_from_log_dirs(&tmp.path().join("missing")).is_empty());
    }

    #[test]
    fn config_ranges() {
        assert!(PodResourcesConfig::default().validate().is_ok());
        let bad = PodResourcesConfig { timeout_ms: 20_000, ..PodResourcesConfig::default() };
        assert!(bad.validate().unwrap_err().contains("timeout_ms"));
        let bad = PodResourcesConfig { resource_names: vec!["*".into()], ..PodResourcesConfig::default() };
        assert!(bad.validate().unwrap_err().contains("resource_names"));
    }
}
