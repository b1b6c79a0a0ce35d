//! The batcher's event stage: process samples → vanished processes (suspected OOMs); every event
//! → the pending-events journal (with a disk spool) → the merger, which folds the reports of one
//! failure into one event; missing capacities filled from the node's GPU inventory. The detectors
//! own how events are found and merged (`detect/`); this stage owns when, in which order and how
//! durably they pass on to the batches.

use std::collections::VecDeque;
use std::sync::Arc;

use oomlens_schema::{Label, OomEvent, OomKind};
use tracing::{info, warn};

use crate::detect::merge::{DetectConfig, EventMerger, MergeStats, Released};
use crate::detect::vanish::VanishDetector;
use crate::metrics::AgentMetrics;
use crate::source::Reading;
use crate::spool::EventJournal;

/// The batcher's event stage: process samples → [`VanishDetector`] → suspected OOMs; every event
/// → (the journal, with a disk spool) → [`EventMerger`]. `run_batcher` calls
/// [`EventStage::on_reading`] for each reading, [`EventStage::poll`] on its timer,
/// [`EventStage::drain`] at the end, and [`EventStage::spooled`] after every batch it pushes.
#[derive(Debug)]
pub struct EventStage {
    vanish: VanishDetector,
    merger: EventMerger,
    latest_ms: i64,
    metrics: Option<Arc<AgentMetrics>>,
    seen: MergeStats,
    journal: Option<EventJournal>,
    /// Journal keys of the released events not yet confirmed spooled, in release order (only
    /// kept with a journal).
    awaiting: VecDeque<Vec<u64>>,
    /// Restored events released at once, handed out on the next call.
    ready: Vec<Released>,
    /// The node's GPUs' total memory by NVML index, for events whose message gives no capacity.
    capacity: CapacityFill,
}

/// Label saying the event's capacity is the GPU's NVML total (its message had none).
pub const CAPACITY_SOURCE_LABEL: &str = "capacity.source";

/// Fills what the node's inventory knows about a GPU event: the node's GPU index of a GPU a hook
/// report named by UUID (label `gpu.uuid`; the job's CUDA index is its own numbering), and a
/// missing capacity — the NVML total of its GPU, or, when the message names no GPU, the total
/// every GPU of the node shares (a node of one GPU model). A filled capacity carries the label
/// `capacity.source=nvml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapacityFill {
    by_index: std::collections::BTreeMap<u32, u64>,
    by_uuid: std::collections::BTreeMap<String, u32>,
}

impl CapacityFill {
    /// The totals of `inventory` (GPUs and MIG instances with a known total).
    pub fn new(inventory: &[oomlens_schema::GpuInfo]) -> Self {
        CapacityFill {
            by_index: inventory
                .iter()
                .filter(|g| g.memory_total_bytes > 0)
                .map(|g| (g.index, g.memory_total_bytes))
                .collect(),
            by_uuid: inventory
                .iter()
                .filter(|g| !g.uuid.is_empty())
                .map(|g| (g.uuid.clone(), g.index))
                .collect(),
        }
    }

    /// Sets the GPU index of an event that names its GPU only by UUID, when the node has it.
    pub fn locate(&self, e: &mut OomEvent) {
        if e.gpu_index.is_some() {
            return;
        }
        let uuid = e.labels.iter().find(|l| l.key == crate::detect::hook_schema::GPU_UUID_LABEL);
        if let Some(index) = uuid.and_then(|l| self.by_uuid.get(&l.value)) {
            e.gpu_index = Some(*index);
        }
    }

    /// The capacity for an event on `gpu` (any GPU when `None`).
    pub fn total(&self, gpu: Option<u32>) -> Option<u64> {
        match gpu {
            Some(i) => self.by_index.get(&i).copied(),
            None => {
                let mut totals = self.by_index.values();
                let first = *totals.next()?;
                totals.all(|t| *t == first).then_some(first)
            }
        }
    }

    /// Fills `e`'s capacity when it is a GPU event without one.
    pub fn fill(&self, e: &mut OomEvent) {
        if e.capacity_bytes.is_some() || !matches!(e.kind, OomKind::CudaOom | OomKind::SuspectedOom) {
            return;
        }
        if let Some(total) = self.total(e.gpu_index) {
            e.capacity_bytes = Some(total);
            if e.labels.len() < oomlens_schema::limits::MAX_LABELS {
                e.labels.push(Label { key: CAPACITY_SOURCE_LABEL.into(), value: "nvml".into() });
            }
        }
    }
}

impl EventStage {
    /// The stage for the `[detect]` settings.
    pub fn from_config(cfg: &DetectConfig, metrics: Option<Arc<AgentMetrics>>) -> EventStage {
        EventStage::new(cfg.vanish_threshold_pct, cfg.merge_grace_ms as i64, cfg.max_held_events, metrics)
    }

    /// A stage with the `[detect]` settings; `metrics` counts suspected OOMs and merges.
    pub fn new(
        vanish_threshold_pct: f64,
        merge_grace_ms: i64,
        max_held: usize,
        metrics: Option<Arc<AgentMetrics>>,
    ) -> Self {
        EventStage {
            vanish: VanishDetector::new(vanish_threshold_pct),
            merger: EventMerger::new(merge_grace_ms).with_max_held(max_held),
            latest_ms: i64::MIN,
            metrics,
            seen: MergeStats::default(),
            journal: None,
            awaiting: VecDeque::new(),
            ready: Vec::new(),
            capacity: CapacityFill::default(),
        }
    }

    /// Fills the missing capacity of GPU events from `inventory` (see [`CapacityFill`]).
    pub fn with_inventory(mut self, inventory: &[oomlens_schema::GpuInfo]) -> Self {
        self.capacity = CapacityFill::new(inventory);
        self
    }

    /// Journals every event from now on, and takes back the events `pending` that the journal
    /// held when it was opened (they are held until their own grace ends, then sent as usual).
    pub fn with_journal(mut self, journal: EventJournal, pending: Vec<(u64, OomEvent)>) -> Self {
        if !pending.is_empty() {
            info!(events = pending.len(), "replaying journaled events that were not spooled");
        }
        if let Some(m) = &self.metrics {
            m.event_journal_replayed.inc_by(pending.len() as u64);
        }
        for (key, event) in pending {
            let ready = self.merger.restore(event, vec![key]);
            self.ready.extend(ready);
        }
        self.journal = Some(journal);
        self.count();
        self
    }

    /// Events in the journal not yet confirmed spooled (0 without a journal).
    pub fn journal_outstanding(&self) -> usize {
        self.journal.as_ref().map_or(0, EventJournal::outstanding)
    }

    /// Takes the reading's events (and the suspected OOMs its samples reveal) into the merger;
    /// returns the events ready to send. The reading's samples are left untouched.
    pub fn on_reading(&mut self, reading: &mut Reading) -> Vec<OomEvent> {
        let ts = reading
            .gpu_samples
            .iter()
            .map(|g| g.ts_ms)
            .chain(reading.process_samples.iter().map(|p| p.ts_ms))
            .chain(reading.ts_ms)
            .max();
        if let Some(ts) = ts {
            self.latest_ms = self.latest_ms.max(ts);
        }
        let mut events = std::mem::take(&mut reading.events);
        let vanished = self.vanish.observe_all(&reading.gpu_samples, &reading.process_samples);
        let suspected = vanished.suspected;
        if let Some(m) = &self.metrics {
            for e in &suspected {
                m.events
                    .get_or_create(&vec![
                        ("kind", e.kind.as_str().to_owned()),
                        ("source", e.source.as_str().to_owned()),
                    ])
                    .inc();
            }
        }
        events.extend(suspected);
        let mut out = std::mem::take(&mut self.ready);
        out.extend(self.merger.poll_keyed(self.latest_ms));
        for mut e in events {
            self.capacity.locate(&mut e);
            let keys = self.journal_event(&e);
            out.extend(self.merger.push_keyed(e, keys, self.latest_ms));
        }
        for exit in vanished.exits {
            out.extend(self.merger.exit(exit, self.latest_ms));
        }
        self.count();
        self.release(out)
    }

    /// Events whose grace has passed.
    pub fn poll(&mut self) -> Vec<OomEvent> {
        let mut out = std::mem::take(&mut self.ready);
        out.extend(self.merger.poll_keyed(self.latest_ms));
        self.release(out)
    }

    /// Everything still held (shutdown).
    pub fn drain(&mut self) -> Vec<OomEvent> {
        let mut out = std::mem::take(&mut self.ready);
        out.extend(self.merger.drain_keyed());
        self.release(out)
    }

    /// The batcher pushed a batch carrying the next `events` released events (in release order)
    /// to the spool: `ok` when the spool took it. Marks their journal records done; a batch the
    /// spool refused leaves them outstanding (replayed at the next start).
    pub fn spooled(&mut self, events: usize, ok: bool) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        let mut keys = Vec::new();
        for _ in 0..events {
            match self.awaiting.pop_front() {
                Some(k) => keys.extend(k),
                None => break,
            }
        }
        if ok
            && !keys.is_empty()
            && let Err(e) = journal.mark_done(&keys)
        {
            warn!(error = %e, "event journal: cannot record spooled events (they may be sent again after a restart)");
            if let Some(m) = &self.metrics {
                m.event_journal_errors.inc();
            }
        }
        self.journal_gauge();
    }

    /// Syncs the journal when its fsync policy says it is due (the batcher's tick).
    pub fn sync_journal(&mut self) {
        if let Some(j) = &mut self.journal
            && let Err(e) = j.sync_if_due()
        {
            warn!(error = %e, "event journal: sync failed");
            if let Some(m) = &self.metrics {
                m.event_journal_errors.inc();
            }
        }
    }

    fn journal_event(&mut self, event: &OomEvent) -> Vec<u64> {
        let Some(journal) = &mut self.journal else {
            return Vec::new();
        };
        match journal.append(event) {
            Ok(key) => {
                if let Some(m) = &self.metrics {
                    m.event_journal_appends.inc();
                }
                vec![key]
            }
            Err(e) => {
                warn!(event_id = event.event_id, error = %e, "event journal: cannot write an event (it is kept in memory only)");
                if let Some(m) = &self.metrics {
                    m.event_journal_errors.inc();
                }
                Vec::new()
            }
        }
    }

    fn release(&mut self, released: Vec<Released>) -> Vec<OomEvent> {
        let journaled = self.journal.is_some();
        let out = released
            .into_iter()
            .map(|r| {
                if journaled {
                    self.awaiting.push_back(r.keys);
                }
                let mut e = r.event;
                self.capacity.fill(&mut e);
                e
            })
            .collect();
        self.journal_gauge();
        out
    }

    fn journal_gauge(&self) {
        if let (Some(m), Some(j)) = (&self.metrics, &self.journal) {
            m.event_journal_outstanding.set(j.outstanding() as i64);
        }
    }

    fn count(&mut self) {
        let s = self.merger.stats();
        if let Some(m) = &self.metrics {
            for (rule, now, before) in [
                ("suspected", s.suspected, self.seen.suspected),
                ("cross_source", s.cross_source, self.seen.cross_source),
                ("duplicate", s.duplicates, self.seen.duplicates),
                ("evicted", s.evicted, self.seen.evicted),
                ("process_exit", s.exits, self.seen.exits),
            ] {
                if now > before {
                    m.merged_events.get_or_create(&vec![("rule", rule.to_owned())]).inc_by(now - before);
                }
            }
        }
        self.seen = s;
    }
}

#[cfg(test)]
mod tests {
    use oomlens_schema::{EventSource, GpuInfo};

    use super::*;
    use crate::detect::merge::tests::{log, suspected};

    #[test]
    fn source_time_advances_without_samples() {
        // `source.kind = "none"`: readings carry only their time; held events still come out
        // once their grace has passed.
        let mut stage = EventStage::new(90.0, 2_000, 64, None);
        let mut r = Reading {
            events: vec![OomEvent {
                kind: OomKind::CudaOom,
                source: EventSource::Log,
                gpu_index: Some(0),
                event_id: 1,
                ts_ms: 1_000,
                ..OomEvent::default()
            }],
            ts_ms: Some(1_000),
            ..Reading::default()
        };
        assert!(stage.on_reading(&mut r).is_empty(), "held for merging");
        let mut tick = Reading { ts_ms: Some(5_000), ..Reading::default() };
        assert_eq!(stage.on_reading(&mut tick).len(), 1);
    }

    #[test]
    fn a_process_gone_from_a_gpu_short_of_full_names_the_pidless_line_that_matches_it() {
        // The readings of the H200 run (MiB): pid 942 held 134 150 of the GPU's 134 773 used
        // (93.7 %, under the 95 % threshold) when a 15.6 GiB request was refused; its line says
        // "this process has 131.01 GiB" and arrives a second after the exit.
        const MIB: u64 = 1 << 20;
        let sample = |ts_ms: i64, used: u64| oomlens_schema::GpuSample {
            ts_ms,
            gpu_index: 0,
            memory_used_bytes: Some(used * MIB),
            memory_total_bytes: Some(143_771 * MIB),
            memory_free_bytes: Some((143_771 - used) * MIB),
            ..oomlens_schema::GpuSample::default()
        };
        let process = |ts_ms: i64| oomlens_schema::ProcessSample {
            ts_ms,
            gpu_index: 0,
            pid: 942,
            used_bytes: Some(134_150 * MIB),
            ..oomlens_schema::ProcessSample::default()
        };
        let mut stage = EventStage::new(95.0, 10_000, 64, None);
        let mut before = Reading {
            gpu_samples: vec![sample(1_000, 134_773)],
            process_samples: vec![process(1_000)],
            ..Reading::default()
        };
        assert!(stage.on_reading(&mut before).is_empty());
        let mut gone = Reading { gpu_samples: vec![sample(1_100, 615)], ..Reading::default() };
        assert!(stage.on_reading(&mut gone).is_empty(), "an exit is no event");
        let line =
            OomEvent { pid: None, ts_ms: 2_100, process_used_bytes: Some(134_154 * MIB), ..log(0, Some(0)) };
        let mut read = Reading { events: vec![line], ts_ms: Some(2_100), ..Reading::default() };
        assert!(stage.on_reading(&mut read).is_empty(), "held for merging");
        let out = stage.drain();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].kind, out[0].pid), (OomKind::CudaOom, Some(942)));
    }

    #[test]
    fn a_gpu_named_by_uuid_gets_the_nodes_index_and_capacity() {
        let gpu = |index, uuid: &str| GpuInfo {
            index,
            uuid: uuid.to_owned(),
            memory_total_bytes: 80 << 30,
            ..GpuInfo::default()
        };
        let fill = CapacityFill::new(&[gpu(0, "GPU-aaa"), gpu(5, "GPU-bbb")]);
        let named = |uuid: &str| OomEvent {
            kind: OomKind::CudaOom,
            labels: vec![Label { key: "gpu.uuid".into(), value: uuid.into() }],
            ..OomEvent::default()
        };
        let mut e = named("GPU-bbb");
        fill.locate(&mut e);
        fill.fill(&mut e);
        assert_eq!((e.gpu_index, e.capacity_bytes), (Some(5), Some(80 << 30)));
        let mut unknown = named("GPU-zzz");
        fill.locate(&mut unknown);
        assert_eq!(unknown.gpu_index, None, "a GPU this node does not have stays unnamed");
    }

    #[test]
    fn a_missing_capacity_is_the_gpus_nvml_total() {
        let gpu = |index, total| GpuInfo { index, memory_total_bytes: total, ..GpuInfo::default() };
        let fill = CapacityFill::new(&[gpu(0, 80 << 30), gpu(1, 80 << 30)]);
        let mut e = OomEvent { kind: OomKind::CudaOom, gpu_index: Some(1), ..OomEvent::default() };
        fill.fill(&mut e);
        assert_eq!(e.capacity_bytes, Some(80 << 30));
        assert!(e.labels.iter().any(|l| l.key == CAPACITY_SOURCE_LABEL && l.value == "nvml"));
        // No GPU named: the total all GPUs share; none when they differ.
        let mut bare = OomEvent { kind: OomKind::CudaOom, ..OomEvent::default() };
        fill.fill(&mut bare);
        assert_eq!(bare.capacity_bytes, Some(80 << 30));
        let mixed = CapacityFill::new(&[gpu(0, 80 << 30), gpu(1, 40 << 30)]);
        let mut bare = OomEvent { kind: OomKind::CudaOom, ..OomEvent::default() };
        mixed.fill(&mut bare);
        assert_eq!(bare.capacity_bytes, None);
        // The message's own capacity stays; host OOM kills have none.
        let mut own = OomEvent {
            kind: OomKind::CudaOom,
            capacity_bytes: Some(5),
            gpu_index: Some(0),
            ..OomEvent::default()
        };
        fill.fill(&mut own);
        assert_eq!((own.capacity_bytes, own.labels.len()), (Some(5), 0));
        let mut host = OomEvent { kind: OomKind::HostOomKill, ..OomEvent::default() };
        fill.fill(&mut host);
        assert_eq!(host.capacity_bytes, None);
        assert_eq!(CapacityFill::default().total(None), None);
    }

    fn reading(ts_ms: i64, events: Vec<OomEvent>) -> Reading {
        let gpu = oomlens_schema::GpuSample { ts_ms, ..oomlens_schema::GpuSample::default() };
        Reading { gpu_samples: vec![gpu], events, ..Reading::default() }
    }

    #[test]
    fn the_stage_journals_events_until_they_are_spooled() {
        use crate::spool::{EventJournal, FsyncPolicy};
        let dir = tempfile::tempdir().unwrap();
        let open = || EventJournal::open(dir.path(), FsyncPolicy::Always).unwrap();
        let (j, replay) = open();
        let mut stage = EventStage::new(95.0, 10_000, 16, None).with_journal(j, replay.pending);
        // A suspected OOM and its log report merge; an Xid (no pid) goes out at once.
        let xid =
            OomEvent { event_id: 9, kind: OomKind::Xid, source: EventSource::Kmsg, ..OomEvent::default() };
        let out = stage.on_reading(&mut reading(1_000, vec![suspected(7, 0), xid]));
        assert_eq!(out.len(), 1);
        assert_eq!(stage.journal_outstanding(), 2);
        stage.spooled(1, true);
        assert_eq!(stage.journal_outstanding(), 1, "the Xid is done, the held event is not");
        assert!(stage.on_reading(&mut reading(2_000, vec![log(7, None)])).is_empty());
        assert_eq!(stage.journal_outstanding(), 2);
        // The agent dies here: the held event comes back from the journal, both of its parts.
        drop(stage);
        let (j, replay) = open();
        assert_eq!(replay.pending.len(), 2);
        let mut stage = EventStage::new(95.0, 10_000, 16, None).with_journal(j, replay.pending);
        assert!(stage.poll().is_empty(), "no source time yet: held");
        let out = stage.on_reading(&mut reading(20_000, Vec::new()));
        assert_eq!(out.len(), 1, "merged again into one event");
        assert_eq!((out[0].event_id, out[0].source), (2, EventSource::Log));
        // A batch the spool refused leaves the event outstanding; a spooled one clears it.
        stage.spooled(1, false);
        assert_eq!(stage.journal_outstanding(), 2);
        drop(stage);
        let (j, replay) = open();
        let mut stage = EventStage::new(95.0, 10_000, 16, None).with_journal(j, replay.pending);
        assert_eq!(stage.drain().len(), 1);
        stage.spooled(1, true);
        assert_eq!(stage.journal_outstanding(), 0);
        drop(stage);
        assert!(open().1.pending.is_empty());
        assert_eq!(std::fs::metadata(dir.path().join(crate::spool::journal::JOURNAL_FILE)).unwrap().len(), 0);
    }
}
