//! Host RAM: every job's main process and dataloader workers have a resident set; the node's RAM
//! is `host_memory_bytes`, of which the kernel and system daemons take a fixed share. When the sum
//! exceeds the RAM, the simulated OOM killer ends the largest process (by RSS, as the kernel's
//! badness score does for equal `oom_score_adj`), repeatedly until the node fits again.
//!
//! Resident sets ramp up while a job loads. The `host_oom` template leaks: once it starts training,
//! its pinned-memory prefetch queue (main process, 3/4) and its forked workers' copy-on-read pages
//! (1/4) grow so that the node's free RAM at that moment is exhausted within a drawn time.

use super::messages::OomKill;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// RAM the kernel, page tables and system daemons keep for themselves.
pub(crate) fn system_reserved(host_total: u64) -> u64 {
    2 * GIB + host_total / 64
}

/// What a job asks of the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HostSpec {
    /// Steady RSS of the main process.
    pub main_rss: u64,
    /// Dataloader worker processes.
    pub workers: u32,
    /// Steady RSS of one worker.
    pub worker_rss: u64,
    /// `Some(seconds)`: leak so that the node's free RAM is gone after this long.
    pub leak_secs: Option<f64>,
}

/// A job's host processes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HostProcs {
    spec: HostSpec,
    pub main_rss: u64,
    pub worker_rss: u64,
    main_leak: u64,
    worker_leak: u64,
    leaking: bool,
}

impl HostProcs {
    pub(crate) fn new(spec: HostSpec) -> Self {
        HostProcs { spec, main_rss: 0, worker_rss: 0, main_leak: 0, worker_leak: 0, leaking: false }
    }

    /// One 100 ms tick: ramp toward the steady RSS, plus the leak.
    pub(crate) fn tick(&mut self) {
        let ramp = |cur: u64, target: u64| if cur < target { cur + (target - cur).div_ceil(20) } else { cur };
        self.main_rss = ramp(self.main_rss, self.spec.main_rss) + self.main_leak;
        self.worker_rss = ramp(self.worker_rss, self.spec.worker_rss) + self.worker_leak;
    }

    /// Training starts: a leaking job sizes its leak against the node's free RAM.
    pub(crate) fn start_training(&mut self, host_free: u64) {
        if self.leaking {
            return;
        }
        self.leaking = true;
        if let Some(secs) = self.spec.leak_secs {
            let per_tick = (host_free as f64 / (secs.max(1.0) * 10.0)) as u64 + MIB;
            if self.spec.workers == 0 {
                self.main_leak = per_tick;
            } else {
                self.main_leak = per_tick / 4 * 3;
                self.worker_leak = per_tick / 4 / u64::from(self.spec.workers);
            }
        }
    }

    /// Total RSS of all the job's processes.
    pub(crate) fn total(&self) -> u64 {
        self.main_rss + u64::from(self.spec.workers) * self.worker_rss
    }

    /// The largest process: `(worker index or None for main, rss)`.
    pub(crate) fn largest(&self) -> (Option<u32>, u64) {
        if self.spec.workers > 0 && self.worker_rss > self.main_rss {
            (Some(0), self.worker_rss)
        } else {
            (None, self.main_rss)
        }
    }
}

/// The numbers the kernel prints for a killed process with resident set `rss`.
pub(crate) fn kill_numbers<'a>(pid: u32, rss: u64, is_main: bool, uid: u32, adj: i32) -> OomKill<'a> {
    let rss_kb = rss / 1024;
    let (file, shmem, vm_extra) =
        if is_main { (1_228_800u64, 0u64, 280 * GIB / 1024) } else { (307_200, 65_536, 24 * GIB / 1024) };
    let file = file.min(rss_kb / 2);
    let shmem = shmem.min(rss_kb / 4);
    OomKill {
        pid,
        comm: "python",
        total_vm_kb: rss_kb + vm_extra,
        anon_rss_kb: rss_kb - file - shmem,
        file_rss_kb: file,
        shmem_rss_kb: shmem,
        uid,
        pgtables_kb: rss_kb / 500 + 1024,
        oom_score_adj: adj,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_ramps_and_leaks() {
        let mut h = HostProcs::new(HostSpec {
            main_rss: 8 * GIB,
            workers: 4,
            worker_rss: GIB,
            leak_secs: Some(100.0),
        });
        for _ in 0..200 {
            h.tick();
        }
        assert!(h.main_rss > 7 * GIB && h.main_rss <= 8 * GIB);
        let before = h.total();
        h.start_training(400 * GIB);
        for _ in 0..1000 {
            h.tick();
        }
        let grown = h.total() - before;
        assert!(grown > 380 * GIB && grown < 420 * GIB, "{}", grown / GIB);
        assert_eq!(h.largest().0, None);
    }

    #[test]
    fn kill_numbers_add_up() {
        let k = kill_numbers(4242, 300 * GIB, true, 1000, 0);
        assert_eq!((k.anon_rss_kb + k.file_rss_kb + k.shmem_rss_kb) * 1024, 300 * GIB);
        assert!(k.total_vm_kb > k.anon_rss_kb);
        let small = kill_numbers(1, 4096, false, 0, 0);
        assert_eq!(small.anon_rss_kb + small.file_rss_kb + small.shmem_rss_kb, 4);
    }
}
