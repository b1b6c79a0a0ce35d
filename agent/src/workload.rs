//! Who owns a process: pid → workload labels (Kubernetes pod, container, systemd unit, Slurm job,
//! user, command line), read from `/proc` and cached per pid.
//!
//! * [`cgroup`] — `/proc/<pid>/cgroup` (v1 and v2) → pod UID, container id/runtime, systemd unit,
//!   Slurm job/step from the cgroup path.
//! * [`procfs`] — `stat` (start time), `status` (uid), `environ` (Slurm variables), `cmdline`.
//! * [`passwd`] — uid → user name, group name → gid.
//! * [`podresources`] — the kubelet pod-resources API: which pod holds which GPU (namespace, pod
//!   and container names added to the labels).
//!
//! The cache holds at most `cache_entries` pids. An entry is trusted for `revalidate_ms`; after
//! that the process's start time (field 22 of `/proc/<pid>/stat`) is compared with the cached one
//! and a different start time (the pid was reused) resolves the labels afresh. A pid whose
//! `/proc` entry is gone keeps its cached labels (the process just ended: its OOM still needs its
//! owner).

pub mod cgroup;
pub mod passwd;
pub mod podresources;
pub mod procfs;

use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oomlens_schema::Label;
use oomlens_schema::limits::MAX_STRING;
use serde::{Deserialize, Serialize};

pub use cgroup::keys;

/// Label key: Slurm job user (`SLURM_JOB_USER`).
pub const SLURM_USER: &str = "slurm.user";
/// Label key: the process owner's user name (or numeric uid when not in passwd).
pub const USER: &str = "user";
/// Label key: the command line.
pub const CMDLINE: &str = "cmdline";

/// Largest `environ` read, bytes.
const MAX_ENVIRON_BYTES: u64 = 256 * 1024;
/// Largest `cgroup` / `status` / `stat` read, bytes.
const MAX_SMALL_FILE_BYTES: u64 = 64 * 1024;

/// `[workload]`: where `/proc` and `/etc` are and how much to cache.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkloadConfig {
    /// The host's `/proc` as the agent sees it (e.g. `/host/proc` in a container).
    pub proc_root: PathBuf,
    /// Directory holding the host's `passwd` (uid → user name).
    pub etc_root: PathBuf,
    /// Most pids kept in the cache.
    pub cache_entries: usize,
    /// How long a cached entry is used before its start time is checked again, ms (0: every time).
    pub revalidate_ms: u64,
    /// Longest `cmdline` label, bytes.
    pub cmdline_max_bytes: usize,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            proc_root: PathBuf::from("/proc"),
            etc_root: PathBuf::from("/etc"),
            cache_entries: 4096,
            revalidate_ms: 1000,
            cmdline_max_bytes: 512,
        }
    }
}

impl WorkloadConfig {
    /// Checks ranges; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.cache_entries == 0 {
            return Err("workload.cache_entries must be > 0".to_owned());
        }
        if !(16..=MAX_STRING).contains(&self.cmdline_max_bytes) {
            return Err(format!("workload.cmdline_max_bytes must be between 16 and {MAX_STRING}"));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Entry {
    start_time: u64,
    labels: Vec<Label>,
    checked: Instant,
    last_used: u64,
}

/// pid → labels, cached, bounded, invalidated on pid reuse.
#[derive(Debug)]
pub struct WorkloadResolver {
    cfg: WorkloadConfig,
    cache: HashMap<u32, Entry>,
    users: passwd::UserDb,
    uses: u64,
    resolved: u64,
}

impl WorkloadResolver {
    /// A resolver reading `proc_root` with the other settings at their defaults.
    pub fn new(proc_root: PathBuf) -> Self {
        Self::with_config(WorkloadConfig { proc_root, ..WorkloadConfig::default() })
    }

    /// A resolver with every setting given (`cache_entries` is at least 1).
    pub fn with_config(mut cfg: WorkloadConfig) -> Self {
        cfg.cache_entries = cfg.cache_entries.max(1);
        WorkloadResolver {
            users: passwd::UserDb::new(&cfg.etc_root),
            cfg,
            cache: HashMap::new(),
            uses: 0,
            resolved: 0,
        }
    }

    /// The labels of `pid` (empty when its `/proc` entry was never readable).
    pub fn labels(&mut self, pid: u32) -> Vec<Label> {
        self.uses += 1;
        let uses = self.uses;
        let revalidate = Duration::from_millis(self.cfg.revalidate_ms);
        if let Some(e) = self.cache.get_mut(&pid)
            && !revalidate.is_zero()
            && e.checked.elapsed() < revalidate
        {
            e.last_used = uses;
            return e.labels.clone();
        }
        let Some(start_time) = self.read_small(pid, "stat").as_deref().and_then(procfs::start_time) else {
            // Gone (or never there): the last known owner is the best answer.
            return self
                .cache
                .get_mut(&pid)
                .map(|e| {
                    e.last_used = uses;
                    e.labels.clone()
                })
                .unwrap_or_default();
        };
        if let Some(e) = self.cache.get_mut(&pid)
            && e.start_time == start_time
        {
            e.checked = Instant::now();
            e.last_used = uses;
            return e.labels.clone();
        }
        let labels = self.resolve(pid);
        if !self.cache.contains_key(&pid) && self.cache.len() >= self.cfg.cache_entries {
            self.evict();
        }
        self.cache.insert(
            pid,
            Entry { start_time, labels: labels.clone(), checked: Instant::now(), last_used: uses },
        );
        labels
    }

    /// Number of cached pids.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Number of times labels were resolved from `/proc` (cache misses and pid reuses).
    pub fn resolved(&self) -> u64 {
        self.resolved
    }

    /// Drops the least recently used eighth of the cache (at least one entry).
    fn evict(&mut self) {
        let n = (self.cache.len() / 8).max(1);
        let mut by_use: Vec<(u64, u32)> = self.cache.iter().map(|(pid, e)| (e.last_used, *pid)).collect();
        by_use.select_nth_unstable(n - 1);
        for (_, pid) in by_use.into_iter().take(n) {
            self.cache.remove(&pid);
        }
    }

    /// Reads every source of labels of `pid` afresh; unreadable files add nothing.
    fn resolve(&mut self, pid: u32) -> Vec<Label> {
        self.resolved += 1;
        let mut info =
            self.read_small(pid, "cgroup").map(|t| cgroup::parse_cgroup_file(&t)).unwrap_or_default();
        let env = read_capped(&self.pid_dir(pid).join("environ"), MAX_ENVIRON_BYTES)
            .map(|raw| procfs::slurm_env(&raw, 256))
            .unwrap_or_default();
        // The environment names the job exactly; the cgroup path is the fallback.
        if env.job_id.is_some() {
            info.slurm_job = env.job_id;
            info.slurm_step = env.step_id.or(info.slurm_step);
        }
        let mut labels = info.labels();
        let mut push = |key: &str, value: String| {
            if !value.is_empty() {
                labels.push(Label { key: key.to_owned(), value: truncate(value, MAX_STRING) });
            }
        };
        if let Some(user) = env.user {
            push(SLURM_USER, user);
        }
        if let Some(uid) = self.read_small(pid, "status").as_deref().and_then(procfs::real_uid) {
            push(USER, self.users.name(uid).unwrap_or_else(|| uid.to_string()));
        }
        if let Some(raw) =
            read_capped(&self.pid_dir(pid).join("cmdline"), self.cfg.cmdline_max_bytes as u64 * 4 + 4)
        {
            push(CMDLINE, procfs::cmdline(&raw, self.cfg.cmdline_max_bytes));
        }
        labels
    }

    fn pid_dir(&self, pid: u32) -> PathBuf {
        self.cfg.proc_root.join(pid.to_string())
    }

    fn read_small(&self, pid: u32, file: &str) -> Option<String> {
        read_capped(&self.pid_dir(pid).join(file), MAX_SMALL_FILE_BYTES)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }
}

/// Reads at most `limit` bytes of `path`; `None` when it cannot be opened or read.
fn read_capped(path: &Path, limit: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    std::fs::File::open(path).ok()?.take(limit).read_to_end(&mut out).ok()?;
    Some(out)
}

use oomlens_schema::text::truncate;
