//! Suspected OOMs from NVML: a process that disappears from a GPU's process list while that GPU
//! was at least `threshold_pct` % used at its previous sample becomes a `suspected_oom` event
//! (source `nvml`), with the GPU's capacity and free memory and the process's last used memory
//! from that previous sample, and the other processes on the GPU then.
//!
//! A process that disappears from a GPU that was less full is an **exit**: not an event, but a
//! candidate the merger pairs with a pid-less OOM report of that GPU whose "this process has X in
//! use" matches the process's last reading (`detect/merge.rs`). A request refused because it was
//! large leaves the GPU short of full — seen on a real GPU: a 128 GiB request refused at 94.7 %
//! used, a 15.6 GiB one at 93.7 % — and the job's log line names no pid.
//!
//! A process list that could not be read looks empty; so when *every* process vanished at once, it
//! only counts if the GPU's used memory visibly fell (by at least half of what they held);
//! otherwise the reading is ignored and the previous state kept. State is bounded
//! by the processes currently on the GPUs ([`MAX_TRACKED_PER_GPU`] per GPU, [`MAX_GPUS`] GPUs).

use std::collections::{BTreeMap, HashMap};

use oomlens_schema::{EventSource, GpuSample, OomEvent, OomKind, OtherProcess, ProcessSample};

/// Most processes remembered per GPU.
pub const MAX_TRACKED_PER_GPU: usize = 4096;
/// Most GPUs remembered.
pub const MAX_GPUS: usize = oomlens_schema::limits::MAX_GPUS;

#[derive(Debug, Clone)]
struct GpuState {
    used: Option<u64>,
    total: Option<u64>,
    free: Option<u64>,
    /// pid → last sample.
    processes: BTreeMap<u32, ProcessSample>,
}

/// Detects processes that vanished from a nearly full GPU.
#[derive(Debug, Clone)]
pub struct VanishDetector {
    threshold_pct: f64,
    gpus: HashMap<u32, GpuState>,
}

impl VanishDetector {
    /// `threshold_pct`: how full (used / total, percent) the GPU must have been.
    pub fn new(threshold_pct: f64) -> Self {
        let threshold_pct = if threshold_pct.is_finite() { threshold_pct.clamp(0.0, 100.0) } else { 95.0 };
        VanishDetector { threshold_pct, gpus: HashMap::new() }
    }

    /// Feeds one reading (the GPU samples and the process samples taken with them); returns the
    /// suspected OOMs it reveals (`event_id` random, `ts_ms` of the GPU sample that shows the
    /// disappearance). GPUs without a sample in this reading keep their state.
    pub fn observe(&mut self, gpu_samples: &[GpuSample], process_samples: &[ProcessSample]) -> Vec<OomEvent> {
        self.observe_all(gpu_samples, process_samples).suspected
    }

    /// [`observe`](Self::observe), with the exits from GPUs below the threshold too (built like
    /// suspected OOMs: the process's last reading and the GPU's then).
    pub fn observe_all(&mut self, gpu_samples: &[GpuSample], process_samples: &[ProcessSample]) -> Vanished {
        let mut out = Vanished::default();
        for g in gpu_samples {
            let mut now: BTreeMap<u32, ProcessSample> = BTreeMap::new();
            for p in process_samples.iter().filter(|p| p.gpu_index == g.gpu_index) {
                if now.len() < MAX_TRACKED_PER_GPU {
                    now.insert(p.pid, p.clone());
                }
            }
            let next = GpuState {
                used: g.memory_used_bytes,
                total: g.memory_total_bytes,
                free: g.memory_free_bytes,
                processes: now,
            };
            let Some(prev) = self.gpus.get(&g.gpu_index) else {
                if self.gpus.len() < MAX_GPUS {
                    self.gpus.insert(g.gpu_index, next);
                }
                continue;
            };
            let gone: Vec<&ProcessSample> =
                prev.processes.values().filter(|p| !next.processes.contains_key(&p.pid)).collect();
            if gone.is_empty() {
                self.gpus.insert(g.gpu_index, next);
                continue;
            }
            let gone_used: u64 = gone.iter().filter_map(|p| p.used_bytes).sum();
            let freed = match (prev.used, next.used) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                _ => None,
            };
            // Everything vanished but the memory did not visibly go: the list (or the GPU) was not
            // read. Keep the old state and judge at the next good reading.
            if next.processes.is_empty() && gone_used > 0 && freed.is_none_or(|f| f < gone_used / 2) {
                continue;
            }
            let full = matches!((prev.used, prev.total), (Some(used), Some(total))
                if total > 0 && used as f64 * 100.0 >= self.threshold_pct * total as f64);
            for p in &gone {
                let e = suspected(g.ts_ms, g.gpu_index, prev, p);
                if full { out.suspected.push(e) } else { out.exits.push(e) }
            }
            self.gpus.insert(g.gpu_index, next);
        }
        out
    }
}

/// What one reading revealed.
#[derive(Debug, Default)]
pub struct Vanished {
    /// Processes gone from a GPU at least the threshold full: `suspected_oom` events.
    pub suspected: Vec<OomEvent>,
    /// Processes gone from a less full GPU: candidates for pairing, never sent alone.
    pub exits: Vec<OomEvent>,
}

fn suspected(ts_ms: i64, gpu_index: u32, prev: &GpuState, p: &ProcessSample) -> OomEvent {
    let free = prev.free.or_else(|| Some(prev.total?.saturating_sub(prev.used?)));
    OomEvent {
        event_id: rand::random::<u64>() | 1,
        ts_ms,
        kind: OomKind::SuspectedOom,
        source: EventSource::Nvml,
        framework: String::new(),
        gpu_index: Some(gpu_index),
        pid: Some(p.pid),
        capacity_bytes: prev.total,
        free_bytes: free,
        process_used_bytes: p.used_bytes,
        other_processes: prev
            .processes
            .values()
            .filter(|o| o.pid != p.pid)
            .filter_map(|o| Some(OtherProcess { pid: o.pid, used_bytes: o.used_bytes? }))
            .take(oomlens_schema::limits::MAX_OTHER_PROCESSES)
            .collect(),
        labels: p.labels.iter().take(oomlens_schema::limits::MAX_LABELS).cloned().collect(),
        ..OomEvent::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn gpu(ts: i64, idx: u32, used_gib: Option<u64>) -> GpuSample {
        GpuSample {
            ts_ms: ts,
            gpu_index: idx,
            memory_used_bytes: used_gib.map(|u| u * GIB),
            memory_total_bytes: Some(80 * GIB),
            memory_free_bytes: used_gib.map(|u| (80 - u) * GIB),
            ..GpuSample::default()
        }
    }

    fn proc_(ts: i64, idx: u32, pid: u32, used_gib: u64) -> ProcessSample {
        ProcessSample {
            ts_ms: ts,
            gpu_index: idx,
            pid,
            name: "python".into(),
            used_bytes: Some(used_gib * GIB),
            ..ProcessSample::default()
        }
    }

    #[test]
    fn a_process_vanishing_from_a_full_gpu_is_a_suspected_oom() {
        let mut d = VanishDetector::new(95.0);
        assert!(d.observe(&[gpu(0, 0, Some(78))], &[proc_(0, 0, 1, 60), proc_(0, 0, 2, 18)]).is_empty());
        let ev = d.observe(&[gpu(1000, 0, Some(18))], &[proc_(1000, 0, 2, 18)]);
        assert_eq!(ev.len(), 1);
        let e = &ev[0];
        assert_eq!((e.kind, e.source, e.framework.as_str()), (OomKind::SuspectedOom, EventSource::Nvml, ""));
        assert_eq!((e.ts_ms, e.gpu_index, e.pid), (1000, Some(0), Some(1)));
        assert_eq!(
            (e.capacity_bytes, e.free_bytes, e.process_used_bytes),
            (Some(80 * GIB), Some(2 * GIB), Some(60 * GIB))
        );
        assert_eq!(e.other_processes, vec![OtherProcess { pid: 2, used_bytes: 18 * GIB }]);
        assert_ne!(e.event_id, 0);
        // Gone is gone: no second event.
        assert!(d.observe(&[gpu(2000, 0, Some(18))], &[proc_(2000, 0, 2, 18)]).is_empty());
    }

    #[test]
    fn below_the_threshold_or_unknown_usage_is_a_normal_exit() {
        let mut d = VanishDetector::new(95.0);
        d.observe(&[gpu(0, 0, Some(70))], &[proc_(0, 0, 1, 70)]);
        let gone = d.observe_all(&[gpu(1, 0, Some(0))], &[]);
        assert!(gone.suspected.is_empty());
        assert_eq!(gone.exits.len(), 1, "an exit: a candidate for pairing, not an event");
        assert_eq!((gone.exits[0].pid, gone.exits[0].process_used_bytes), (Some(1), Some(70 * GIB)));
        let mut d = VanishDetector::new(95.0);
        d.observe(&[gpu(0, 0, Some(70))], &[proc_(0, 0, 1, 70)]);
        assert!(d.observe(&[gpu(1, 0, Some(0))], &[]).is_empty());
        d.observe(&[gpu(2, 0, None)], &[proc_(2, 0, 1, 79)]);
        assert!(d.observe(&[gpu(3, 0, Some(0))], &[]).is_empty());
        // Exactly at the threshold counts.
        let mut d = VanishDetector::new(95.0);
        d.observe(&[gpu(0, 0, Some(76))], &[proc_(0, 0, 1, 76)]);
        assert_eq!(d.observe(&[gpu(1, 0, Some(0))], &[]).len(), 1);
        let mut d = VanishDetector::new(50.0);
        d.observe(&[gpu(0, 0, Some(41))], &[proc_(0, 0, 1, 41)]);
        assert_eq!(d.observe(&[gpu(1, 0, Some(0))], &[]).len(), 1);
    }

    #[test]
    fn an_unread_process_list_is_not_a_mass_vanishing() {
        let mut d = VanishDetector::new(95.0);
        d.observe(&[gpu(0, 0, Some(79))], &[proc_(0, 0, 1, 40), proc_(0, 0, 2, 39)]);
        // The list failed (empty) but the memory is still used: nothing, and the state is kept.
        assert!(d.observe(&[gpu(1, 0, Some(79))], &[]).is_empty());
        // The next good reading shows pid 1 really gone.
        let ev = d.observe(&[gpu(2, 0, Some(39))], &[proc_(2, 0, 2, 39)]);
        assert_eq!(ev.iter().map(|e| e.pid).collect::<Vec<_>>(), vec![Some(1)]);
        assert_eq!(ev[0].capacity_bytes, Some(80 * GIB));
    }

    #[test]
    fn gpus_are_independent_and_missing_gpus_keep_their_state() {
        let mut d = VanishDetector::new(95.0);
        d.observe(&[gpu(0, 0, Some(79)), gpu(0, 1, Some(79))], &[proc_(0, 0, 1, 79), proc_(0, 1, 1, 79)]);
        // Only GPU 1 reported this time: GPU 0 keeps its processes.
        let ev = d.observe(&[gpu(1, 1, Some(0))], &[]);
        assert_eq!(ev.iter().map(|e| e.gpu_index).collect::<Vec<_>>(), vec![Some(1)]);
        let ev = d.observe(&[gpu(2, 0, Some(0))], &[]);
        assert_eq!(ev.iter().map(|e| e.gpu_index).collect::<Vec<_>>(), vec![Some(0)]);
        // A nonsense threshold falls back to 95 %.
        let mut d = VanishDetector::new(f64::NAN);
        d.observe(&[gpu(0, 0, Some(70))], &[proc_(0, 0, 1, 70)]);
        assert!(d.observe(&[gpu(1, 0, Some(0))], &[]).is_empty());
    }
}
