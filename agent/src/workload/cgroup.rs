//! `/proc/<pid>/cgroup` → workload labels: Kubernetes pod UID, container id and runtime, systemd
//! unit, Slurm job and step. Pure: the caller reads the file.
//!
//! Both cgroup versions are handled. v2 has one line `0::<path>`; v1 has one line per hierarchy
//! (`<id>:<controllers>:<path>`), and the first path that names a thing wins for that thing. The
//! recognised path shapes:
//!
//! | shape | example |
//! |---|---|
//! | Kubernetes, systemd driver | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope` |
//! | Kubernetes, cgroupfs driver | `/kubepods/burstable/pod<uid>/<id>`, `/kubepods/pod<uid>/<id>` |
//! | containerd / CRI-O / Docker / Podman scopes | `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`, `libpod-<id>.scope` |
//! | Docker, cgroupfs driver | `/docker/<id>` |
//! | systemd | the innermost `*.service` / `*.scope` (else `*.slice`) outside a container |
//! | Slurm | `/slurm/uid_<u>/job_<j>/step_<s>/…`, `/system.slice/slurmstepd.scope/job_<j>/step_<s>/…` |

use oomlens_schema::Label;

/// Label keys this module produces.
pub mod keys {
    /// Kubernetes pod UID (dashed form).
    pub const POD_UID: &str = "k8s.pod_uid";
    /// Container id (hex).
    pub const CONTAINER_ID: &str = "container.id";
    /// `containerd`, `cri-o`, `docker`, `podman`.
    pub const CONTAINER_RUNTIME: &str = "container.runtime";
    /// systemd unit (or slice when no unit).
    pub const SYSTEMD_UNIT: &str = "systemd.unit";
    /// Slurm job id.
    pub const SLURM_JOB_ID: &str = "slurm.job_id";
    /// Slurm step id.
    pub const SLURM_STEP_ID: &str = "slurm.step_id";
}

/// What one cgroup path says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupInfo {
    /// Kubernetes pod UID, dashed.
    pub pod_uid: Option<String>,
    /// Container id.
    pub container_id: Option<String>,
    /// Container runtime, when the path names it.
    pub runtime: Option<&'static str>,
    /// systemd unit or slice.
    pub systemd_unit: Option<String>,
    /// Slurm job id.
    pub slurm_job: Option<String>,
    /// Slurm step id.
    pub slurm_step: Option<String>,
}

impl CgroupInfo {
    /// Fills the fields still unset from `other`.
    fn merge(&mut self, other: CgroupInfo) {
        if self.container_id.is_none() && other.container_id.is_some() {
            self.container_id = other.container_id;
            self.runtime = other.runtime;
        }
        self.pod_uid = self.pod_uid.take().or(other.pod_uid);
        self.systemd_unit = self.systemd_unit.take().or(other.systemd_unit);
        self.slurm_job = self.slurm_job.take().or(other.slurm_job);
        self.slurm_step = self.slurm_step.take().or(other.slurm_step);
    }

    /// The labels, in a fixed order.
    pub fn labels(&self) -> Vec<Label> {
        let mut out = Vec::new();
        let mut push = |key: &str, value: &Option<String>| {
            if let Some(v) = value {
                out.push(Label { key: key.to_owned(), value: v.clone() });
            }
        };
        push(keys::POD_UID, &self.pod_uid);
        push(keys::CONTAINER_ID, &self.container_id);
        push(keys::CONTAINER_RUNTIME, &self.runtime.map(str::to_owned));
        push(keys::SYSTEMD_UNIT, &self.systemd_unit);
        push(keys::SLURM_JOB_ID, &self.slurm_job);
        push(keys::SLURM_STEP_ID, &self.slurm_step);
        out
    }
}

/// Parses the whole `/proc/<pid>/cgroup` text (v1 or v2). Malformed lines are skipped.
pub fn parse_cgroup_file(text: &str) -> CgroupInfo {
    let mut info = CgroupInfo::default();
    // v1 lists `name=systemd` and the resource controllers; any of them may carry the path.
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(_controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        info.merge(parse_path(path));
    }
    info
}

/// Parses one cgroup path.
pub fn parse_path(path: &str) -> CgroupInfo {
    let mut info = CgroupInfo::default();
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let in_kubepods = comps.first().is_some_and(|c| *c == "kubepods" || c.starts_with("kubepods"));
    let mut in_slurm = false;
    let mut unit: Option<&str> = None;
    let mut slice: Option<&str> = None;
    for (i, comp) in comps.iter().enumerate() {
        if let Some(uid) = pod_uid(comp) {
            info.pod_uid = Some(uid);
            continue;
        }
        if let Some((runtime, id)) = container_scope(comp) {
            info.container_id = Some(id.to_owned());
            info.runtime = runtime;
            continue;
        }
        // cgroupfs drivers: `/docker/<id>`, `/kubepods/…/pod<uid>/<id>`.
        if is_container_id(comp) && i > 0 {
            let parent = comps[i - 1];
            if parent == "docker" {
                info.container_id = Some((*comp).to_owned());
                info.runtime = Some("docker");
                continue;
            }
            if in_kubepods && parent.starts_with("pod") {
                info.container_id = Some((*comp).to_owned());
                continue;
            }
        }
        if *comp == "slurm" || comp.starts_with("slurmstepd") {
            in_slurm = true;
        }
        if in_slurm {
            if let Some(job) = comp.strip_prefix("job_").filter(|j| is_slurm_id(j)) {
                info.slurm_job = Some(job.to_owned());
            } else if let Some(step) = comp.strip_prefix("step_").filter(|s| is_slurm_id(s)) {
                info.slurm_step = Some(step.to_owned());
            }
        }
        if comp.ends_with(".service") || comp.ends_with(".scope") {
            unit = Some(comp);
        } else if comp.ends_with(".slice") {
            slice = Some(comp);
        }
    }
    if info.container_id.is_none() && info.pod_uid.is_none() {
        info.systemd_unit = unit.or(slice).map(str::to_owned);
    }
    info
}

/// `kubepods-burstable-pod<uid>.slice` (underscores → dashes) or `pod<uid>`.
fn pod_uid(comp: &str) -> Option<String> {
    let raw = if let Some(stem) = comp.strip_suffix(".slice") {
        if !stem.starts_with("kubepods") {
            return None;
        }
        let at = stem.rfind("-pod")?;
        &stem[at + 4..]
    } else {
        comp.strip_prefix("pod")?
    };
    let uid = raw.replace('_', "-");
    is_uid(&uid).then_some(uid)
}

/// A UUID-like pod UID: hex digits and dashes, 32 hex digits (static pods use a 32-hex hash).
fn is_uid(s: &str) -> bool {
    let hex = s.chars().filter(char::is_ascii_hexdigit).count();
    hex == 32 && s.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`, `libpod-<id>.scope`.
fn container_scope(comp: &str) -> Option<(Option<&'static str>, &str)> {
    let stem = comp.strip_suffix(".scope")?;
    const PREFIXES: &[(&str, &str)] = &[
        ("cri-containerd-", "containerd"),
        ("crio-conmon-", "cri-o"),
        ("crio-", "cri-o"),
        ("docker-", "docker"),
        ("libpod-conmon-", "podman"),
        ("libpod-", "podman"),
    ];
    PREFIXES.iter().find_map(|(prefix, runtime)| {
        stem.strip_prefix(prefix).filter(|id| is_container_id(id)).map(|id| (Some(*runtime), id))
    })
}

/// 12 to 64 lower-case hex digits.
fn is_container_id(s: &str) -> bool {
    (12..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Slurm ids: digits, or `batch` / `extern` / `interactive` steps.
fn is_slurm_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    const CID: &str = "4f1c3ad0e0b5c1e4f9a8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6";
    const UID: &str = "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d";

    fn get(info: &CgroupInfo) -> Vec<(String, String)> {
        info.labels().into_iter().map(|l| (l.key, l.value)).collect()
    }

    #[test]
    fn kubernetes_systemd_driver_containerd() {
        let path = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope\n",
            UID.replace('-', "_")
        );
        let info = parse_cgroup_file(&path);
        assert_eq!(info.pod_uid.as_deref(), Some(UID));
        assert_eq!(info.container_id.as_deref(), Some(CID));
        assert_eq!(info.runtime, Some("containerd"));
        assert_eq!(info.systemd_unit, None);
    }

    #[test]
    fn kubernetes_guaranteed_and_besteffort_and_crio() {
        let g = parse_path(&format!(
            "/kubepods.slice/kubepods-pod{}.slice/crio-{CID}.scope",
            UID.replace('-', "_")
        ));
        assert_eq!((g.pod_uid.as_deref(), g.runtime), (Some(UID), Some("cri-o")));
        let b = parse_path(&format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/docker-{CID}.scope",
            UID.replace('-', "_")
        ));
        assert_eq!(
            (b.pod_uid.as_deref(), b.runtime, b.container_id.as_deref()),
            (Some(UID), Some("docker"), Some(CID))
        );
    }

    #[test]
    fn kubernetes_cgroupfs_driver_v1() {
        let text = format!(
            "12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n"
        );
        let info = parse_cgroup_file(&text);
        assert_eq!(
            get(&info),
            vec![("k8s.pod_uid".to_owned(), UID.to_owned()), ("container.id".to_owned(), CID.to_owned()),]
        );
        let guaranteed = parse_path(&format!("/kubepods/pod{UID}/{CID}"));
        assert_eq!(guaranteed.container_id.as_deref(), Some(CID));
    }

    #[test]
    fn docker_both_drivers() {
        let a = parse_path(&format!("/docker/{CID}"));
        assert_eq!((a.container_id.as_deref(), a.runtime), (Some(CID), Some("docker")));
        let b = parse_path(&format!("/system.slice/docker-{CID}.scope"));
        assert_eq!((b.container_id.as_deref(), b.runtime, b.systemd_unit), (Some(CID), Some("docker"), None));
    }

    #[test]
    fn systemd_units_and_slices() {
        assert_eq!(
            parse_path("/system.slice/slurmd.service").systemd_unit.as_deref(),
            Some("slurmd.service")
        );
        assert_eq!(
            parse_path("/user.slice/user-1000.slice/session-3.scope").systemd_unit.as_deref(),
            Some("session-3.scope")
        );
        assert_eq!(parse_path("/machine.slice").systemd_unit.as_deref(), Some("machine.slice"));
        assert_eq!(parse_path("/").systemd_unit, None);
        // v1 with an empty memory path but a systemd path.
        let info = parse_cgroup_file("5:memory:/\n1:name=systemd:/system.slice/train.service\n");
        assert_eq!(info.systemd_unit.as_deref(), Some("train.service"));
    }

    #[test]
    fn slurm_paths() {
        let v1 = parse_path("/slurm/uid_1000/job_4242/step_0/task_0");
        assert_eq!((v1.slurm_job.as_deref(), v1.slurm_step.as_deref()), (Some("4242"), Some("0")));
        let v2 = parse_path("/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0");
        assert_eq!((v2.slurm_job.as_deref(), v2.slurm_step.as_deref()), (Some("77"), Some("batch")));
        // `job_` outside a Slurm hierarchy means nothing.
        assert_eq!(parse_path("/user.slice/job_1").slurm_job, None);
    }

    #[test]
    fn garbage_is_ignored() {
        assert_eq!(parse_cgroup_file("no colons here\n::\n0::/docker/XYZ\n"), CgroupInfo::default());
        assert_eq!(parse_path("/kubepods/burstable/podnot-a-uid/abc").pod_uid, None);
        assert_eq!(parse_path("/x/cri-containerd-short.scope").container_id, None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,300}") {
            let _ = parse_cgroup_file(&text).labels();
        }

        #[test]
        fn never_panics_on_path_like_input(parts in proptest::collection::vec("[a-z0-9_.:-]{0,70}", 0..8)) {
            let text = format!("0::/{}", parts.join("/"));
            let _ = parse_cgroup_file(&text).labels();
        }
    }
}
