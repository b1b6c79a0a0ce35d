#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `WorkloadResolver` on fixture `/proc` trees built in a temp dir: cgroup v1 and v2, every
//! container runtime, Slurm, an unreadable environ, pid reuse, the cache bound.

use std::collections::BTreeMap;
use std::path::Path;

use oomlens_agent::workload::{WorkloadConfig, WorkloadResolver};

const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const UID: &str = "8f3c2b1a-7d6e-4f5a-9b8c-0d1e2f3a4b5c";

struct Proc<'a> {
    pid: u32,
    start: u64,
    cgroup: &'a str,
    environ: Option<&'a [u8]>,
    uid: u32,
    cmdline: &'a [u8],
}

fn write_proc(root: &Path, p: &Proc<'_>) {
    let dir = root.join("proc").join(p.pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let stat = format!(
        "{} (python3 (x)) S 1 {0} {0} 0 -1 4194560 120 0 0 0 7 3 0 0 20 0 4 0 {} 123456 789",
        p.pid, p.start
    );
    std::fs::write(dir.join("stat"), stat).unwrap();
    std::fs::write(dir.join("cgroup"), p.cgroup).unwrap();
    let environ = dir.join("environ");
    let _ = std::fs::remove_dir(&environ);
    match p.environ {
        Some(env) => std::fs::write(&environ, env).unwrap(),
        // A directory cannot be read as a file, even by root: "unreadable".
        None => {
            let _ = std::fs::remove_file(&environ);
            std::fs::create_dir(&environ).unwrap();
        }
    }
    std::fs::write(dir.join("status"), format!("Name:\tpython3\nUid:\t{0}\t{0}\t{0}\t{0}\n", p.uid)).unwrap();
    std::fs::write(dir.join("cmdline"), p.cmdline).unwrap();
}

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("etc")).unwrap();
    std::fs::write(
        dir.path().join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n",
    )
    .unwrap();
    dir
}

fn resolver(dir: &Path, revalidate_ms: u64, cache_entries: usize) -> WorkloadResolver {
    WorkloadResolver::with_config(WorkloadConfig {
        proc_root: dir.join("proc"),
        etc_root: dir.join("etc"),
        cache_entries,
        revalidate_ms,
        cmdline_max_bytes: 64,
    })
}

fn map(labels: Vec<oomlens_schema::Label>) -> BTreeMap<String, String> {
    labels.into_iter().map(|l| (l.key, l.value)).collect()
}

fn base(pid: u32, cgroup: &str) -> Proc<'_> {
    Proc {
        pid,
        start: 1000,
        cgroup,
        environ: Some(b"PATH=/bin\0"),
        uid: 1000,
        cmdline: b"python3\0train.py\0",
    }
}

#[test]
fn cgroup_v2_kubernetes_each_runtime() {
    let dir = tree();
    let u = UID.replace('-', "_");
    let cases = [
        (
            101,
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope\n"
            ),
            "containerd",
        ),
        (102, format!("0::/kubepods.slice/kubepods-pod{u}.slice/crio-{CID}.scope\n"), "cri-o"),
        (
            103,
            format!(
                "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/docker-{CID}.scope\n"
            ),
            "docker",
        ),
    ];
    for (pid, cgroup, _) in &cases {
        write_proc(dir.path(), &base(*pid, cgroup));
    }
    let mut r = resolver(dir.path(), 0, 16);
    for (pid, _, runtime) in &cases {
        let l = map(r.labels(*pid));
        assert_eq!(l["k8s.pod_uid"], UID, "pid {pid}");
        assert_eq!(l["container.id"], CID);
        assert_eq!(l["container.runtime"], *runtime);
        assert_eq!(l["user"], "alice");
        assert_eq!(l["cmdline"], "python3 train.py");
        assert!(!l.contains_key("systemd.unit") && !l.contains_key("slurm.job_id"), "{l:?}");
    }
}

#[test]
fn cgroup_v1_kubernetes_cgroupfs_and_docker() {
    let dir = tree();
    let k8s = format!(
        "12:memory:/kubepods/burstable/pod{UID}/{CID}\n4:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n"
    );
    let docker = format!("11:memory:/docker/{CID}\n1:name=systemd:/docker/{CID}\n");
    let unit = "10:memory:/system.slice/train.service\n1:name=systemd:/system.slice/train.service\n";
    write_proc(dir.path(), &base(201, &k8s));
    write_proc(dir.path(), &base(202, &docker));
    write_proc(dir.path(), &base(203, unit));
    let mut r = resolver(dir.path(), 0, 16);
    let l = map(r.labels(201));
    assert_eq!((l["k8s.pod_uid"].as_str(), l["container.id"].as_str()), (UID, CID));
    assert!(!l.contains_key("container.runtime"), "cgroupfs paths do not name the runtime: {l:?}");
    let l = map(r.labels(202));
    assert_eq!((l["container.id"].as_str(), l["container.runtime"].as_str()), (CID, "docker"));
    let l = map(r.labels(203));
    assert_eq!(l["systemd.unit"], "train.service");
}

#[test]
fn slurm_from_environ_and_from_cgroup_when_environ_is_unreadable() {
    let dir = tree();
    let cgroup = "0::/system.slice/slurmstepd.scope/job_900/step_2/user/task_0\n";
    write_proc(
        dir.path(),
        &Proc {
            environ: Some(b"HOME=/home/alice\0SLURM_JOB_ID=4242\0SLURM_STEP_ID=7\0SLURM_JOB_USER=alice\0"),
            ..base(301, cgroup)
        },
    );
    write_proc(dir.path(), &Proc { environ: None, uid: 4321, ..base(302, cgroup) });
    let mut r = resolver(dir.path(), 0, 16);
    let l = map(r.labels(301));
    assert_eq!(
        (l["slurm.job_id"].as_str(), l["slurm.step_id"].as_str(), l["slurm.user"].as_str()),
        ("4242", "7", "alice")
    );
    let l = map(r.labels(302));
    assert_eq!((l["slurm.job_id"].as_str(), l["slurm.step_id"].as_str()), ("900", "2"), "{l:?}");
    assert!(!l.contains_key("slurm.user"));
    assert_eq!(l["user"], "4321", "a uid missing from passwd is shown as the number");
}

#[test]
fn pid_reuse_is_detected_by_start_time() {
    let dir = tree();
    write_proc(dir.path(), &base(401, &format!("0::/docker/{CID}\n")));
    let mut r = resolver(dir.path(), 0, 16);
    assert_eq!(map(r.labels(401))["container.id"], CID);
    assert_eq!(map(r.labels(401))["container.id"], CID);
    assert_eq!(r.resolved(), 1, "second lookup is served from the cache");
    // The process ends and another one gets the pid.
    write_proc(
        dir.path(),
        &Proc {
            start: 2000,
            cmdline: b"bash\0",
            ..base(401, "0::/user.slice/user-1000.slice/session-1.scope\n")
        },
    );
    let l = map(r.labels(401));
    assert_eq!(r.resolved(), 2);
    assert!(!l.contains_key("container.id"), "{l:?}");
    assert_eq!((l["systemd.unit"].as_str(), l["cmdline"].as_str()), ("session-1.scope", "bash"));
}

#[test]
fn a_vanished_process_keeps_its_last_labels_and_unknown_pids_have_none() {
    let dir = tree();
    write_proc(dir.path(), &base(501, &format!("0::/docker/{CID}\n")));
    let mut r = resolver(dir.path(), 0, 16);
    assert_eq!(map(r.labels(501))["container.id"], CID);
    std::fs::remove_dir_all(dir.path().join("proc/501")).unwrap();
    assert_eq!(map(r.labels(501))["container.id"], CID);
    assert!(r.labels(999).is_empty());
}

#[test]
fn revalidation_window_trusts_the_cache() {
    let dir = tree();
    write_proc(dir.path(), &base(601, &format!("0::/docker/{CID}\n")));
    let mut r = resolver(dir.path(), 60_000, 16);
    assert_eq!(map(r.labels(601))["container.id"], CID);
    write_proc(dir.path(), &Proc { start: 5, ..base(601, "0::/\n") });
    assert_eq!(map(r.labels(601))["container.id"], CID, "within revalidate_ms the cached entry is used");
    assert_eq!(r.resolved(), 1);
}

#[test]
fn cache_is_bounded() {
    let dir = tree();
    for pid in 1000..1100 {
        write_proc(dir.path(), &base(pid, "0::/system.slice/x.service\n"));
    }
    let mut r = resolver(dir.path(), 0, 32);
    for pid in 1000..1100 {
        assert_eq!(map(r.labels(pid))["systemd.unit"], "x.service");
        assert!(r.cached() <= 32);
    }
}

#[test]
fn long_and_binary_cmdlines_are_capped() {
    let dir = tree();
    let mut cmd = b"python3\0-c\0".to_vec();
    cmd.extend(std::iter::repeat_n(b'x', 10_000));
    cmd.extend(b"\0\xff\xfe\0");
    write_proc(dir.path(), &Proc { cmdline: &cmd, ..base(701, "0::/\n") });
    let l = map(resolver(dir.path(), 0, 4).labels(701));
    assert!(l["cmdline"].len() <= 64 && l["cmdline"].starts_with("python3 -c xxx"), "{l:?}");
}
