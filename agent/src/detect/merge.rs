//! Merging and de-duplication of OOM events from several detectors, and the `[detect]` settings.
//!
//! Every event that names a pid (and every pid-less report that may pair with a suspected OOM,
//! see below) is held for a grace window (`merge_grace_ms`, measured in source time: the caller
//! passes the latest source timestamp). While held, another event for the same pid (and the same
//! GPU when both know it) is folded into it, so ONE event goes out:
//!
//! * **suspected + detailed** — a `suspected_oom` (NVML) and a log / hook / simulator / kernel
//!   event: the detailed event wins, the suspected one fills its missing fields (GPU, capacity,
//!   free, process memory, other processes), label `merged.from=suspected_oom`.
//! * **same kind, two sources** — e.g. log + hook (the requested size, when both print it, must
//!   agree within 1 %): hook fields win (phase, job shape, allocator numbers), then the
//!   simulator's, then the log's; the log's `raw_message` wins; missing fields are filled from
//!   the other; label `merged.from=<other source>`.
//! * **duplicate** — the same report delivered twice: an event id already held (a log line read
//!   again after a restart, a journaled event replayed), or a suspected OOM of a pid reported
//!   twice. The second is dropped. A repeat of the same failure — a retry loop printing the same
//!   message, identical hook reports a second apart — is **not** a duplicate: each report has its
//!   own event id (the hook returns it to its client) and becomes its own event, so "failed five
//!   times" stays five events.
//!
//! * **suspected + pid-less report** — most framework messages (PyTorch's among them) print no
//!   pid. A log or hook `cuda_oom` without a pid but with a GPU index pairs with a held
//!   `suspected_oom` of the **same GPU** whose timestamp is within the grace window of its own, in
//!   either arrival order: the report keeps its numbers and message and gains the pid (and
//!   workload labels, process memory, other processes …) of the suspected one, label
//!   `merged.from=suspected_oom`. When several candidates match, the nearest in time is taken
//!   (the older on a tie), decided when the second of the pair arrives; an event is paired at most
//!   once (a suspected OOM folded into a report is gone from the hold, a report that gained a
//!   pid is no longer pid-less). A pid naming the same process always wins over this pairing. A
//!   pid-less report **without** a GPU index is never paired: on a multi-GPU node nothing ties
//!   it to one vanished process, and a wrong pid is worse than a second row; it goes out at once.
//! * **pid-less report + another source's report of the pid** — a job under the hook reports
//!   its failure with its pid (and the suspected OOM of that pid folds into the report) while its
//!   log prints the same failure without one. A pid-less log / hook `cuda_oom` pairs with a held
//!   `cuda_oom` of the other source that names a pid, on the same GPU (either numbering, as
//!   above), within the grace window, in either arrival order — only when both print the request
//!   and agree on it within 1 % and that report has not merged a report of this source already.
//!   Rule and precedence as for **same kind, two sources**; label `merged.from=<other source>`.
//! * **pid-less report + process exit** — a refused request that was large leaves the GPU short
//!   of the suspected threshold, so the process's end is only an *exit* (`detect/vanish.rs`):
//!   never sent, remembered (at most [`MAX_EXITS`]) for the grace window. A pid-less report pairs
//!   with the nearest exit from the same GPU within the grace window (either arrival order) when
//!   its "this process has X in use" agrees with the process's last reading (within 5 % +
//!   512 MiB); without that figure nothing ties the line to the exit. The report gains the pid
//!   and the process's labels and readings; label `merged.from=process_exit`.
//!   Caveat: the GPU index in a message is the process's CUDA ordinal, which equals the NVML
//!   index only when `CUDA_VISIBLE_DEVICES` does not renumber the GPUs (in a container that sees
//!   one GPU, the message says `GPU 0` whatever the NVML index) — then the two rows stay apart.
//!
//! Everything else is held separately. Events without a pid are held only when they can pair as
//! above (pid-less log / hook `cuda_oom` with a GPU index); other pid-less events (Xid, …) and
//! pid-less reports are never merged with each other (two ranks may print the same message). At
//! most `max_held` events are held; beyond that the oldest goes out at once.
//!
//! The batcher's event stage (`pipeline/event_stage.rs`) runs vanish detection on the samples,
//! then the merger. With a disk spool it also writes every event to the pending-events journal
//! (`spool/journal.rs`) before the event enters the merger, and marks it done once the batch
//! carrying it is spooled; after a crash it hands the outstanding events back to the merger. The merger therefore tracks, for every held
//! event, the journal keys of all the events folded into it ([`Released::keys`]).

use std::collections::VecDeque;

use oomlens_schema::{EventSource, JobShape, Label, OomEvent, OomKind, Phase};
use serde::{Deserialize, Serialize};

/// Label added to merged events.
pub const MERGED_LABEL: &str = "merged.from";
/// Default cap on held events.
pub const DEFAULT_MAX_HELD: usize = 1024;
/// Most process exits remembered for pairing (the oldest are forgotten first).
pub const MAX_EXITS: usize = 256;
/// `merged.from` value of a process exit folded into a report.
pub const EXIT_TAG: &str = "process_exit";

/// What the merger did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Suspected OOMs folded into a detailed event.
    pub suspected: u64,
    /// Same failure from two sources folded into one.
    pub cross_source: u64,
    /// Exact duplicates dropped.
    pub duplicates: u64,
    /// Events released early because the hold cap was reached.
    pub evicted: u64,
    /// Process exits (below the suspected threshold) folded into a pid-less report.
    pub exits: u64,
}

#[derive(Debug)]
struct Held {
    event: OomEvent,
    deadline: i64,
    keys: Vec<u64>,
    /// Event ids of the reports folded into it (its own first), at most [`MAX_FOLDED_IDS`].
    ids: Vec<u64>,
}

/// Event ids remembered per held event (one failure is reported by a handful of sources).
const MAX_FOLDED_IDS: usize = 16;

/// An event leaving the merger, with the journal keys of every event folded into it (its own,
/// those merged into it and the duplicates dropped in its favour).
#[derive(Debug, Clone, PartialEq)]
pub struct Released {
    /// The event to send.
    pub event: OomEvent,
    /// Journal keys it covers (empty without a journal).
    pub keys: Vec<u64>,
}

fn events(released: Vec<Released>) -> Vec<OomEvent> {
    released.into_iter().map(|r| r.event).collect()
}

/// Holds events for a grace window and merges those that describe the same failure.
#[derive(Debug)]
pub struct EventMerger {
    grace_ms: i64,
    max_held: usize,
    held: VecDeque<Held>,
    /// Recent process exits from GPUs below the suspected threshold, oldest first.
    exits: VecDeque<OomEvent>,
    now_ms: i64,
    stats: MergeStats,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Suspected,
    CrossSource,
    Duplicate,
}

impl EventMerger {
    /// A merger with a grace window of `grace_ms` (≤ 0: nothing is held) and the default cap.
    pub fn new(grace_ms: i64) -> Self {
        EventMerger {
            grace_ms,
            max_held: DEFAULT_MAX_HELD,
            held: VecDeque::new(),
            exits: VecDeque::new(),
            now_ms: i64::MIN,
            stats: MergeStats::default(),
        }
    }

    /// Sets the cap on held events (at least 1).
    pub fn with_max_held(mut self, max_held: usize) -> Self {
        self.max_held = max_held.max(1);
        self
    }

    /// Counters so far.
    pub fn stats(&self) -> MergeStats {
        self.stats
    }

    /// Number of events held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Takes one event at source time `now_ms`; returns the events ready to send (those whose
    /// grace has passed, an evicted one, or this one when it is not held).
    pub fn push(&mut self, event: OomEvent, now_ms: i64) -> Vec<OomEvent> {
        events(self.push_keyed(event, Vec::new(), now_ms))
    }

    /// [`push`](Self::push) for an event covering the journal keys `keys`.
    pub fn push_keyed(&mut self, event: OomEvent, keys: Vec<u64>, now_ms: i64) -> Vec<Released> {
        let mut out = self.poll_keyed(now_ms);
        let deadline = self.now_ms.saturating_add(self.grace_ms);
        self.hold(event, keys, deadline, &mut out);
        out
    }

    /// Takes a process's exit from a GPU below the suspected threshold
    /// ([`super::vanish::Vanished::exits`]): folded into the nearest held pid-less report it
    /// matches ([`exit_matches`]), else remembered (at most [`MAX_EXITS`], for the grace window)
    /// for a report that arrives later. Never sent alone. Returns what is ready at `now_ms`.
    pub fn exit(&mut self, exit: OomEvent, now_ms: i64) -> Vec<Released> {
        let out = self.poll_keyed(now_ms);
        let grace = self.grace_ms;
        let best = self
            .held
            .iter()
            .enumerate()
            .filter(|(_, h)| exit_matches(&exit, &h.event, grace))
            .map(|(i, h)| (h.event.ts_ms.abs_diff(exit.ts_ms), i))
            .min();
        if let Some((_, i)) = best {
            let held = &mut self.held[i];
            held.event = merge_tagged(std::mem::take(&mut held.event), exit, EXIT_TAG);
            self.stats.exits += 1;
        } else if grace > 0 {
            if self.exits.len() >= MAX_EXITS {
                self.exits.pop_front();
            }
            self.exits.push_back(exit);
        }
        out
    }

    /// The remembered exit a new pid-less report pairs with, taken out of the memory.
    fn take_exit(&mut self, report: &OomEvent) -> Option<OomEvent> {
        let horizon = self.now_ms.saturating_sub(self.grace_ms.saturating_mul(2));
        self.exits.retain(|e| e.ts_ms >= horizon);
        let (_, i) = self
            .exits
            .iter()
            .enumerate()
            .filter(|(_, e)| exit_matches(e, report, self.grace_ms))
            .map(|(i, e)| (e.ts_ms.abs_diff(report.ts_ms), i))
            .min()?;
        self.exits.remove(i)
    }

    /// Takes back an event that was held when the agent stopped (from the journal): it is held
    /// until its own grace would have ended (`event.ts_ms + grace`), merging as usual; returns
    /// what is ready at once.
    pub fn restore(&mut self, event: OomEvent, keys: Vec<u64>) -> Vec<Released> {
        let mut out = Vec::new();
        let deadline = event.ts_ms.saturating_add(self.grace_ms);
        self.hold(event, keys, deadline, &mut out);
        out
    }

    fn hold(&mut self, event: OomEvent, keys: Vec<u64>, deadline: i64, out: &mut Vec<Released>) {
        if (event.pid.is_none() && !pidless_report(&event)) || self.grace_ms <= 0 {
            out.push(Released { event, keys });
            return;
        }
        let by_pid = self.held.iter().enumerate().find_map(|(i, h)| Some((i, rule(h, &event)?)));
        if let Some((i, rule)) = by_pid.or_else(|| self.pair_by_gpu(&event)) {
            let held = &mut self.held[i];
            held.keys.extend(keys);
            if held.ids.len() < MAX_FOLDED_IDS && !held.ids.contains(&event.event_id) {
                held.ids.push(event.event_id);
            }
            match rule {
                Rule::Duplicate => self.stats.duplicates += 1,
                Rule::Suspected => {
                    self.stats.suspected += 1;
                    held.event = merge(std::mem::take(&mut held.event), event);
                }
                Rule::CrossSource => {
                    self.stats.cross_source += 1;
                    held.event = merge(std::mem::take(&mut held.event), event);
                }
            }
            return;
        }
        let mut event = event;
        if pidless_report(&event)
            && let Some(exit) = self.take_exit(&event)
        {
            event = merge_tagged(event, exit, EXIT_TAG);
            self.stats.exits += 1;
        }
        if self.held.len() >= self.max_held
            && let Some(old) = self.held.pop_front()
        {
            self.stats.evicted += 1;
            out.push(Released { event: old.event, keys: old.keys });
        }
        let ids = vec![event.event_id];
        self.held.push_back(Held { event, deadline, keys, ids });
    }

    /// The held event a pid-less report pairs with on the same GPU (see the module docs): a
    /// suspected OOM, or another source's report of the same failure that knows the pid; the
    /// nearest in time within the grace window, the older on a tie.
    fn pair_by_gpu(&self, new: &OomEvent) -> Option<(usize, Rule)> {
        new.gpu_index?;
        let pair = |h: &OomEvent| -> Option<Rule> {
            if new.kind == OomKind::SuspectedOom && new.pid.is_some() {
                (pidless_report(h) && !has_merged(h, OomKind::SuspectedOom.as_str()))
                    .then_some(Rule::Suspected)
            } else if pidless_report(new) {
                if h.kind == OomKind::SuspectedOom && h.pid.is_some() {
                    Some(Rule::Suspected)
                } else {
                    same_report_other_source(h, new).then_some(Rule::CrossSource)
                }
            } else {
                (pidless_report(h) && same_report_other_source(new, h)).then_some(Rule::CrossSource)
            }
        };
        self.held
            .iter()
            .enumerate()
            .filter(|(_, h)| h.event.gpu_index.is_some() && same_gpu(&h.event, new))
            .filter_map(|(i, h)| Some((h.event.ts_ms.abs_diff(new.ts_ms), i, pair(&h.event)?)))
            .filter(|(dt, _, _)| *dt <= self.grace_ms.unsigned_abs())
            .min_by_key(|(dt, i, _)| (*dt, *i))
            .map(|(_, i, rule)| (i, rule))
    }

    /// Releases the held events whose grace has passed at `now_ms`, oldest first.
    pub fn poll(&mut self, now_ms: i64) -> Vec<OomEvent> {
        events(self.poll_keyed(now_ms))
    }

    /// [`poll`](Self::poll) with the journal keys.
    pub fn poll_keyed(&mut self, now_ms: i64) -> Vec<Released> {
        self.now_ms = self.now_ms.max(now_ms);
        let mut out = Vec::new();
        // Deadlines are in order except for restored events: look at every held event.
        if self.held.iter().any(|h| h.deadline <= self.now_ms) {
            let now = self.now_ms;
            let mut keep = VecDeque::with_capacity(self.held.len());
            for h in self.held.drain(..) {
                if h.deadline <= now {
                    out.push(Released { event: h.event, keys: h.keys });
                } else {
                    keep.push_back(h);
                }
            }
            self.held = keep;
        }
        out
    }

    /// Releases everything held (shutdown).
    pub fn drain(&mut self) -> Vec<OomEvent> {
        events(self.drain_keyed())
    }

    /// [`drain`](Self::drain) with the journal keys.
    pub fn drain_keyed(&mut self) -> Vec<Released> {
        self.held.drain(..).map(|h| Released { event: h.event, keys: h.keys }).collect()
    }
}

/// How `new` relates to the held event `h`, if they describe the same failure.
fn rule(h: &Held, new: &OomEvent) -> Option<Rule> {
    let held = &h.event;
    if held.pid.is_none() || held.pid != new.pid {
        return None;
    }
    if !same_gpu(held, new) {
        return None;
    }
    let sus = (held.kind == OomKind::SuspectedOom, new.kind == OomKind::SuspectedOom);
    match sus {
        (true, true) => Some(Rule::Duplicate),
        (true, false) | (false, true) => {
            let detailed = if sus.0 { new } else { held };
            if has_merged(detailed, OomKind::SuspectedOom.as_str()) {
                Some(Rule::Duplicate)
            } else {
                Some(Rule::Suspected)
            }
        }
        (false, false) if held.kind != new.kind => None,
        // The same report again; another report of the same source is another failure.
        (false, false) if h.ids.contains(&new.event_id) => Some(Rule::Duplicate),
        (false, false) if held.source == new.source => None,
        (false, false) => {
            let close = match (held.requested_bytes, new.requested_bytes) {
                (Some(a), Some(b)) => a.abs_diff(b) <= a.max(b) / 100 + 1024,
                _ => true,
            };
            if !close {
                None
            } else if has_merged(held, new.source.as_str()) {
                // That source's report of this failure is merged already: a new failure.
                None
            } else {
                Some(Rule::CrossSource)
            }
        }
    }
}

/// Whether two events of one pid can be on the same GPU. A hook v2 report names the node's GPU
/// (mapped from its UUID) and keeps the job's own CUDA index as `hook.cuda_index`; the job's log
/// line names that CUDA index ("GPU 0" in every one-GPU container). Either numbering agreeing is
/// enough; an unknown GPU on either side agrees with anything.
fn same_gpu(a: &OomEvent, b: &OomEvent) -> bool {
    let cuda_index = |e: &OomEvent| {
        e.labels
            .iter()
            .find(|l| l.key == super::hook_schema::CUDA_INDEX_LABEL)
            .and_then(|l| l.value.parse::<u32>().ok())
    };
    match (a.gpu_index, b.gpu_index) {
        (Some(x), Some(y)) => x == y || cuda_index(a) == Some(y) || cuda_index(b) == Some(x),
        _ => true,
    }
}

/// Whether `pidless` (a pid-less report) and `known` (a report naming the pid) can be one failure
/// told by two sources: the same kind from another source that has not merged that source's report
/// yet, both printing the request and agreeing on it within 1 % (without the request, nothing
/// ties a pid-less line to one process).
fn same_report_other_source(known: &OomEvent, pidless: &OomEvent) -> bool {
    known.pid.is_some()
        && known.kind == pidless.kind
        && known.source != pidless.source
        && !has_merged(known, pidless.source.as_str())
        && matches!((known.requested_bytes, pidless.requested_bytes),
            (Some(a), Some(b)) if a.abs_diff(b) <= a.max(b) / 100 + 1024)
}

/// A log or hook `cuda_oom` without a pid but with a GPU index: it may pair with a suspected OOM
/// of that GPU, or with another source's report of the same failure that names the pid
/// ([`EventMerger::pair_by_gpu`]).
fn pidless_report(e: &OomEvent) -> bool {
    e.pid.is_none()
        && e.gpu_index.is_some()
        && e.kind == OomKind::CudaOom
        && matches!(e.source, EventSource::Log | EventSource::Hook)
}

fn has_merged(e: &OomEvent, what: &str) -> bool {
    e.labels.iter().any(|l| l.key == MERGED_LABEL && l.value.split(',').any(|v| v == what))
}

/// Precedence of the event that gives the merged event its identity and its numbers.
fn rank(e: &OomEvent) -> u8 {
    if e.kind == OomKind::SuspectedOom {
        return 0;
    }
    match e.source {
        EventSource::Hook => 5,
        EventSource::Simulator => 4,
        EventSource::Log => 3,
        EventSource::Kmsg => 2,
        EventSource::Nvml => 1,
    }
}

/// Whether `exit` (a process gone from a GPU below the suspected threshold) is the process of the
/// pid-less report `report`: the same GPU, within the grace window, and the report's "this process
/// has X in use" agreeing with the process's last reading (within 5 % + 512 MiB: the process may
/// have grown in its failing step after that reading). Without the report's figure nothing ties
/// the line to the exit; a report that gained a pid already is not pid-less.
fn exit_matches(exit: &OomEvent, report: &OomEvent, grace_ms: i64) -> bool {
    const SLACK: u64 = 512 << 20;
    pidless_report(report)
        && !has_merged(report, OomKind::SuspectedOom.as_str())
        && exit.gpu_index.is_some()
        && exit.gpu_index == report.gpu_index
        && exit.ts_ms.abs_diff(report.ts_ms) <= grace_ms.unsigned_abs()
        && matches!((exit.process_used_bytes, report.process_used_bytes),
            (Some(a), Some(b)) if a.abs_diff(b) <= a.max(b) / 20 + SLACK)
}

/// Folds two events of one failure into one: the higher-ranked one, with the other's fields
/// filling what it lacks.
fn merge(a: OomEvent, b: OomEvent) -> OomEvent {
    let lower = if rank(&b) > rank(&a) { &a } else { &b };
    let tag = if lower.kind == OomKind::SuspectedOom {
        OomKind::SuspectedOom.as_str()
    } else {
        lower.source.as_str()
    };
    merge_tagged(a, b, tag)
}

/// [`merge`], naming the folded event `tag` in `merged.from`.
fn merge_tagged(a: OomEvent, b: OomEvent, tag: &str) -> OomEvent {
    let (mut p, s) = if rank(&b) > rank(&a) { (b, a) } else { (a, b) };
    fill(&mut p.gpu_index, s.gpu_index);
    fill(&mut p.pid, s.pid);
    fill(&mut p.requested_bytes, s.requested_bytes);
    fill(&mut p.capacity_bytes, s.capacity_bytes);
    fill(&mut p.free_bytes, s.free_bytes);
    fill(&mut p.allocated_bytes, s.allocated_bytes);
    fill(&mut p.reserved_bytes, s.reserved_bytes);
    fill(&mut p.process_used_bytes, s.process_used_bytes);
    fill(&mut p.xid, s.xid);
    fill(&mut p.host_rss_bytes, s.host_rss_bytes);
    fill(&mut p.truth, s.truth);
    if p.other_processes.is_empty() {
        p.other_processes = s.other_processes;
    }
    if p.phase == Phase::Unknown {
        p.phase = s.phase;
    }
    if p.framework.is_empty() {
        p.framework = s.framework;
    }
    fill_job(&mut p.job, s.job);
    if (s.source == EventSource::Log && s.kind != OomKind::SuspectedOom && !s.raw_message.is_empty())
        || p.raw_message.is_empty()
    {
        p.raw_message = s.raw_message;
    }
    for l in s.labels {
        if l.key != MERGED_LABEL && !p.labels.iter().any(|x| x.key == l.key) {
            p.labels.push(l);
        }
    }
    match p.labels.iter_mut().find(|l| l.key == MERGED_LABEL) {
        Some(l) => {
            l.value.push(',');
            l.value.push_str(tag);
        }
        None => p.labels.push(Label { key: MERGED_LABEL.into(), value: tag.into() }),
    }
    if p.labels.len() > oomlens_schema::limits::MAX_LABELS {
        // Keep the merge marker: drop the last ordinary labels.
        let marker = p.labels.iter().position(|l| l.key == MERGED_LABEL);
        if let Some(i) = marker {
            let m = p.labels.remove(i);
            p.labels.truncate(oomlens_schema::limits::MAX_LABELS - 1);
            p.labels.push(m);
        }
    }
    p
}

/// `[detect]`: suspected OOMs and merging.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectConfig {
    /// A process vanishing from a GPU at least this full (percent) is a suspected OOM.
    pub vanish_threshold_pct: f64,
    /// How long events wait for a matching event from another detector, ms (0: no merging).
    pub merge_grace_ms: u64,
    /// Most events held at once.
    pub max_held_events: usize,
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig { vanish_threshold_pct: 95.0, merge_grace_ms: 10_000, max_held_events: DEFAULT_MAX_HELD }
    }
}

impl DetectConfig {
    /// Checks ranges.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.vanish_threshold_pct.is_finite() && (0.0..=100.0).contains(&self.vanish_threshold_pct)) {
            return Err("detect.vanish_threshold_pct must be between 0 and 100".into());
        }
        if self.merge_grace_ms > 3_600_000 || self.max_held_events == 0 {
            return Err("detect.merge_grace_ms must be at most 3600000 and detect.max_held_events > 0".into());
        }
        Ok(())
    }
}

fn fill<T>(dst: &mut Option<T>, src: Option<T>) {
    if dst.is_none() {
        *dst = src;
    }
}

fn fill_job(dst: &mut JobShape, src: JobShape) {
    fill(&mut dst.params, src.params);
    fill(&mut dst.batch, src.batch);
    fill(&mut dst.seq_len, src.seq_len);
    fill(&mut dst.hidden, src.hidden);
    fill(&mut dst.layers, src.layers);
    fill(&mut dst.heads, src.heads);
    fill(&mut dst.precision, src.precision);
    fill(&mut dst.optimizer, src.optimizer);
    fill(&mut dst.zero_stage, src.zero_stage);
    fill(&mut dst.tensor_parallel, src.tensor_parallel);
    fill(&mut dst.pipeline_parallel, src.pipeline_parallel);
    fill(&mut dst.data_parallel, src.data_parallel);
    fill(&mut dst.activation_checkpointing, src.activation_checkpointing);
    fill(&mut dst.flash_attention, src.flash_attention);
}

#[cfg(test)]
pub(crate) mod tests {
    use oomlens_schema::OtherProcess;

    use super::*;

    const GIB: u64 = 1 << 30;

    pub(crate) fn suspected(pid: u32, gpu: u32) -> OomEvent {
        OomEvent {
            event_id: 1,
            ts_ms: 1000,
            kind: OomKind::SuspectedOom,
            source: EventSource::Nvml,
            gpu_index: Some(gpu),
            pid: Some(pid),
            capacity_bytes: Some(80 * GIB),
            free_bytes: Some(GIB),
            process_used_bytes: Some(60 * GIB),
            other_processes: vec![OtherProcess { pid: 9, used_bytes: 19 * GIB }],
            labels: vec![Label { key: "k8s.pod".into(), value: "trainer-0".into() }],
            ..OomEvent::default()
        }
    }

    pub(crate) fn log(pid: u32, gpu: Option<u32>) -> OomEvent {
        OomEvent {
            event_id: 2,
            ts_ms: 1500,
            kind: OomKind::CudaOom,
            source: EventSource::Log,
            framework: "pytorch".into(),
            gpu_index: gpu,
            pid: Some(pid),
            requested_bytes: Some(2 * GIB),
            capacity_bytes: Some(79 * GIB),
            raw_message: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB".into(),
            labels: vec![Label { key: "log.path".into(), value: "/var/log/x.log".into() }],
            ..OomEvent::default()
        }
    }

    fn hook(pid: u32) -> OomEvent {
        OomEvent {
            event_id: 3,
            ts_ms: 1400,
            kind: OomKind::CudaOom,
            source: EventSource::Hook,
            framework: "pytorch".into(),
            gpu_index: Some(0),
            pid: Some(pid),
            requested_bytes: Some(2 * GIB + 12345),
            allocated_bytes: Some(70 * GIB),
            reserved_bytes: Some(75 * GIB),
            phase: Phase::Backward,
            job: JobShape { batch: Some(32), seq_len: Some(4096), ..JobShape::default() },
            raw_message: "hook report".into(),
            ..OomEvent::default()
        }
    }

    fn label<'a>(e: &'a OomEvent, key: &str) -> Option<&'a str> {
        e.labels.iter().find(|l| l.key == key).map(|l| l.value.as_str())
    }

    #[test]
    fn a_uuid_named_hook_report_merges_with_the_containers_log_line_and_the_vanished_process() {
        // The job in a one-GPU container: its log says "GPU 0", its v2 hook report named the
        // GPU by UUID (mapped to the node's GPU 5) and kept the CUDA index 0; NVML saw pid 7
        // vanish from GPU 5. One failure, one event, on the node's GPU 5.
        let mut m = EventMerger::new(10_000);
        let mut h = hook(7);
        h.gpu_index = Some(5);
        h.labels.push(Label { key: crate::detect::hook_schema::CUDA_INDEX_LABEL.into(), value: "0".into() });
        assert!(m.push(h, 1400).is_empty());
        assert!(m.push(log(7, Some(0)), 1500).is_empty());
        assert!(m.push(suspected(7, 5), 1600).is_empty());
        let out = m.poll(20_000);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!((out[0].source, out[0].gpu_index), (EventSource::Hook, Some(5)));
        let merged = label(&out[0], MERGED_LABEL).unwrap_or("");
        assert!(merged.contains("log") && merged.contains("suspected_oom"), "{merged}");
        // Without the CUDA index label a different GPU is a different failure.
        let mut m = EventMerger::new(10_000);
        let mut other = hook(7);
        other.gpu_index = Some(5);
        m.push(other, 1400);
        m.push(log(7, Some(0)), 1500);
        assert_eq!(m.poll(20_000).len(), 2);
    }

    #[test]
    fn suspected_then_log_within_grace_is_one_detailed_event() {
        let mut m = EventMerger::new(10_000);
        assert!(m.push(suspected(7, 0), 1000).is_empty());
        assert!(m.push(log(7, None), 5000).is_empty());
        assert!(m.poll(10_999).is_empty());
        let out = m.poll(11_000);
        assert_eq!(out.len(), 1);
        let e = &out[0];
        assert_eq!((e.kind, e.source, e.event_id, e.ts_ms), (OomKind::CudaOom, EventSource::Log, 2, 1500));
        assert_eq!(e.gpu_index, Some(0)); // filled from the suspected one
        assert_eq!(e.capacity_bytes, Some(79 * GIB)); // the detailed one's own value wins
        assert_eq!((e.free_bytes, e.process_used_bytes), (Some(GIB), Some(60 * GIB)));
        assert_eq!(e.other_processes.len(), 1);
        assert_eq!(label(e, MERGED_LABEL), Some("suspected_oom"));
        assert_eq!(label(e, "k8s.pod"), Some("trainer-0"));
        assert_eq!(label(e, "log.path"), Some("/var/log/x.log"));
        assert!(e.raw_message.starts_with("torch.OutOfMemoryError"));
        assert_eq!(m.stats().suspected, 1);
    }

    #[test]
    fn log_then_suspected_merges_too() {
        let mut m = EventMerger::new(10_000);
        assert!(m.push(log(7, Some(0)), 0).is_empty());
        assert!(m.push(suspected(7, 0), 1000).is_empty());
        let out = m.drain();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].kind, out[0].source), (OomKind::CudaOom, EventSource::Log));
        assert_eq!(label(&out[0], MERGED_LABEL), Some("suspected_oom"));
    }

    #[test]
    fn suspected_alone_goes_out_after_the_grace_unchanged() {
        let mut m = EventMerger::new(10_000);
        assert!(m.push(suspected(7, 0), 1000).is_empty());
        // A log event after the grace is a separate event.
        let out = m.push(log(7, Some(0)), 11_000);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0], suspected(7, 0));
        assert_eq!(m.drain().len(), 1);
    }

    #[test]
    fn different_pid_or_gpu_or_kind_does_not_merge() {
        let mut m = EventMerger::new(10_000);
        m.push(suspected(7, 0), 0);
        m.push(log(8, Some(0)), 0); // other pid
        m.push(log(7, Some(1)), 0); // same pid, other GPU
        let host = OomEvent {
            kind: OomKind::HostOomKill,
            source: EventSource::Kmsg,
            pid: Some(8),
            ..OomEvent::default()
        };
        m.push(host, 0); // other kind than the held log event of pid 8
        assert_eq!(m.held(), 4);
        assert_eq!(m.stats(), MergeStats::default());
        assert_eq!(m.drain().len(), 4);
    }

    #[test]
    fn suspected_merges_into_a_host_oom_kill() {
        let mut m = EventMerger::new(10_000);
        let host = OomEvent {
            kind: OomKind::HostOomKill,
            source: EventSource::Kmsg,
            framework: "kernel".into(),
            pid: Some(7),
            host_rss_bytes: Some(GIB),
            ..OomEvent::default()
        };
        m.push(host, 0);
        m.push(suspected(7, 3), 0);
        let out = m.drain();
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].kind, out[0].gpu_index, out[0].host_rss_bytes),
            (OomKind::HostOomKill, Some(3), Some(GIB))
        );
    }

    #[test]
    fn log_and_hook_merge_hook_fields_win_log_message_wins() {
        for hook_first in [true, false] {
            let mut m = EventMerger::new(10_000);
            let (a, b) = if hook_first { (hook(7), log(7, None)) } else { (log(7, None), hook(7)) };
            m.push(a, 0);
            m.push(b, 10);
            m.push(suspected(7, 0), 20);
            let out = m.drain();
            assert_eq!(out.len(), 1, "hook_first={hook_first}");
            let e = &out[0];
            assert_eq!((e.source, e.event_id), (EventSource::Hook, 3));
            assert_eq!(e.requested_bytes, Some(2 * GIB + 12345));
            assert_eq!((e.phase, e.job.batch, e.job.seq_len), (Phase::Backward, Some(32), Some(4096)));
            assert_eq!(e.capacity_bytes, Some(79 * GIB)); // from the log
            assert_eq!(e.process_used_bytes, Some(60 * GIB)); // from the suspected one
            assert!(e.raw_message.starts_with("torch.OutOfMemoryError"));
            assert_eq!(label(e, "log.path"), Some("/var/log/x.log"));
            assert_eq!(label(e, MERGED_LABEL), Some("log,suspected_oom"));
            assert_eq!(m.stats().cross_source, 1);
            assert_eq!(m.stats().suspected, 1);
            // The same log line once more is a duplicate of the merged event.
            m.push(hook(7), 0);
            m.push(log(7, None), 0);
            m.push(log(7, None), 0);
            assert_eq!(m.drain().len(), 1);
        }
    }

    #[test]
    fn two_sources_disagreeing_on_the_request_are_two_failures() {
        let mut m = EventMerger::new(10_000);
        m.push(hook(7), 0);
        m.push(OomEvent { requested_bytes: Some(GIB), ..log(7, None) }, 0);
        assert_eq!(m.drain().len(), 2);
    }

    #[test]
    fn duplicates_are_dropped_distinct_retries_are_kept() {
        let mut m = EventMerger::new(10_000);
        m.push(log(7, Some(0)), 0);
        m.push(log(7, Some(0)), 1); // the same line seen again
        m.push(suspected(7, 0), 2);
        m.push(suspected(7, 0), 3); // reported twice
        let retry = OomEvent {
            event_id: 20,
            requested_bytes: Some(GIB),
            raw_message: "… Tried to allocate 1.00 GiB".into(),
            ..log(7, Some(0))
        };
        m.push(retry, 4); // a second, smaller attempt: a real second failure
        let out = m.drain();
        assert_eq!(out.len(), 2);
        assert_eq!(m.stats().duplicates, 2);
        assert_eq!(m.stats().suspected, 1);
    }

    #[test]
    fn a_retry_loop_failing_five_times_is_five_events() {
        // Identical hook reports a second apart, each with the id the hook returned to its client.
        let mut m = EventMerger::new(10_000);
        let mut out = Vec::new();
        for k in 0..5u64 {
            out.extend(
                m.push(OomEvent { event_id: 100 + k, ts_ms: 1000 * k as i64, ..hook(7) }, 1000 * k as i64),
            );
        }
        // The same log line printed by each attempt, and one of them re-read (same id).
        for k in 0..5u64 {
            out.extend(m.push(OomEvent { event_id: 200 + k, ..log(7, Some(0)) }, 5000));
        }
        out.extend(m.push(OomEvent { event_id: 200, ..log(7, Some(0)) }, 5000));
        out.extend(m.drain());
        let hooks: Vec<u64> =
            out.iter().filter(|e| e.source == EventSource::Hook).map(|e| e.event_id).collect();
        assert_eq!(hooks, [100, 101, 102, 103, 104], "every id the hook returned is sent");
        let logs = out.iter().filter(|e| e.source == EventSource::Log).count();
        let merged = out.iter().filter(|e| has_merged(e, "log")).count();
        assert_eq!(logs + merged, 5, "five log lines: merged into a hook report or sent");
        assert_eq!(out.len(), 5 + logs);
        assert_eq!(m.stats().duplicates, 1, "only the re-read line is a duplicate");
    }

    #[test]
    fn events_without_pid_or_without_grace_pass_straight_through() {
        let mut m = EventMerger::new(10_000);
        let xid =
            OomEvent { kind: OomKind::Xid, source: EventSource::Kmsg, xid: Some(79), ..OomEvent::default() };
        assert_eq!(m.push(xid.clone(), 0), vec![xid]);
        let mut m = EventMerger::new(0);
        assert_eq!(m.push(suspected(1, 0), 0).len(), 1);
        assert_eq!(m.held(), 0);
    }

    #[test]
    fn the_hold_is_capped_and_time_never_runs_backwards() {
        let mut m = EventMerger::new(10_000).with_max_held(2);
        assert!(m.push(suspected(1, 0), 0).is_empty());
        assert!(m.push(suspected(2, 0), 0).is_empty());
        let out = m.push(suspected(3, 0), 0);
        assert_eq!(out.iter().map(|e| e.pid).collect::<Vec<_>>(), vec![Some(1)]);
        assert_eq!(m.stats().evicted, 1);
        assert!(m.poll(5_000).is_empty());
        assert!(m.poll(100).is_empty()); // an older timestamp does not move the clock back
        assert_eq!(m.poll(10_000).len(), 2);
    }

    #[test]
    fn released_events_carry_the_keys_of_everything_folded_into_them() {
        let mut m = EventMerger::new(10_000);
        assert!(m.push_keyed(log(7, Some(0)), vec![1], 0).is_empty());
        assert!(m.push_keyed(log(7, Some(0)), vec![2], 1).is_empty()); // duplicate
        assert!(m.push_keyed(suspected(7, 0), vec![3], 2).is_empty()); // merged
        assert!(m.push_keyed(log(8, Some(0)), vec![4], 3).is_empty());
        let out = m.poll_keyed(10_003);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].event.pid, out[0].keys.clone()), (Some(7), vec![1, 2, 3]));
        assert_eq!((out[1].event.pid, out[1].keys.clone()), (Some(8), vec![4]));
        // An event that is not held keeps its keys too.
        let xid = OomEvent { kind: OomKind::Xid, source: EventSource::Kmsg, ..OomEvent::default() };
        assert_eq!(m.push_keyed(xid, vec![5], 10_000)[0].keys, vec![5]);
    }

    #[test]
    fn restored_events_wait_for_their_own_grace_and_still_merge() {
        let mut m = EventMerger::new(10_000);
        // Held before a restart: suspected at 1 s (grace until 11 s), log at 50 s (until 60 s).
        assert!(m.restore(OomEvent { ts_ms: 50_000, ..log(8, Some(0)) }, vec![2]).is_empty());
        assert!(m.restore(suspected(7, 0), vec![1]).is_empty());
        // The log report of pid 7 arrives after the restart, within the suspected one's grace.
        assert!(m.push_keyed(log(7, None), vec![3], 5_000).is_empty());
        let out = m.poll_keyed(11_000);
        assert_eq!(out.len(), 1, "the later-restored event is released first when its grace ends first");
        assert_eq!((out[0].event.source, out[0].keys.clone()), (EventSource::Log, vec![1, 3]));
        assert_eq!(label(&out[0].event, MERGED_LABEL), Some("suspected_oom"));
        assert!(m.poll_keyed(59_999).is_empty());
        assert_eq!(m.poll_keyed(60_000)[0].keys, vec![2]);
    }

    /// A PyTorch report without a pid (the usual case), on `gpu`, at `ts_ms`.
    fn pidless(gpu: Option<u32>, ts_ms: i64) -> OomEvent {
        OomEvent { pid: None, ts_ms, ..log(0, gpu) }
    }

    #[test]
    fn pidless_log_then_suspected_on_the_same_gpu_is_one_event_with_the_pid() {
        let mut m = EventMerger::new(10_000);
        assert!(m.push(pidless(Some(0), 1500), 1500).is_empty(), "a pairable pid-less report is held");
        assert!(m.push(suspected(7, 0), 3000).is_empty());
        assert_eq!(m.held(), 1);
        assert!(m.poll(11_499).is_empty());
        let out = m.poll(11_500);
        assert_eq!(out.len(), 1);
        let e = &out[0];
        assert_eq!((e.kind, e.source, e.event_id, e.ts_ms), (OomKind::CudaOom, EventSource::Log, 2, 1500));
        assert_eq!(e.pid, Some(7), "gains the pid of the vanished process");
        assert_eq!(
            (e.requested_bytes, e.capacity_bytes),
            (Some(2 * GIB), Some(79 * GIB)),
            "the message's numbers"
        );
        assert_eq!(
            (e.free_bytes, e.process_used_bytes),
            (Some(GIB), Some(60 * GIB)),
            "NVML's numbers fill the gaps"
        );
        assert_eq!(e.other_processes.len(), 1);
        assert_eq!(label(e, "k8s.pod"), Some("trainer-0"));
        assert_eq!(label(e, MERGED_LABEL), Some("suspected_oom"));
        assert!(e.raw_message.starts_with("torch.OutOfMemoryError"));
        assert_eq!(m.stats().suspected, 1);
    }

    #[test]
    fn suspected_then_pidless_log_on_the_same_gpu_is_one_event_with_the_pid() {
        let mut m = EventMerger::new(10_000);
        assert!(m.push(suspected(7, 2), 1000).is_empty());
        assert!(m.push(pidless(Some(2), 1500), 1500).is_empty());
        let out = m.poll(11_000);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].source, out[0].pid, out[0].gpu_index), (EventSource::Log, Some(7), Some(2)));
        assert_eq!(out[0].requested_bytes, Some(2 * GIB));
        assert_eq!(label(&out[0], MERGED_LABEL), Some("suspected_oom"));
        // The same suspected OOM reported again is a duplicate of the merged event.
        m.push(pidless(Some(2), 20_000), 20_000);
        m.push(OomEvent { ts_ms: 20_000, ..suspected(7, 2) }, 20_000);
        m.push(OomEvent { ts_ms: 20_000, ..suspected(7, 2) }, 20_001);
        assert_eq!(m.drain().len(), 1);
        assert_eq!(m.stats().duplicates, 1);
    }

    #[test]
    fn pidless_log_and_suspected_on_other_gpus_or_outside_the_window_stay_apart() {
        // Other GPU, both orders.
        for log_first in [true, false] {
            let mut m = EventMerger::new(10_000);
            let (a, b) = (pidless(Some(1), 1000), suspected(7, 0));
            if log_first {
                m.push(a, 1000);
                m.push(b, 1000);
            } else {
                m.push(b, 1000);
                m.push(a, 1000);
            }
            let out = m.drain();
            assert_eq!(out.len(), 2, "log_first={log_first}");
            assert!(out.iter().all(|e| label(e, MERGED_LABEL).is_none()));
        }
        // The suspected one's grace has passed before the report arrives: released on its own.
        let mut m = EventMerger::new(10_000);
        m.push(suspected(7, 0), 1000);
        let out = m.push(pidless(Some(0), 11_000), 11_000);
        assert_eq!((out.len(), out[0].kind), (1, OomKind::SuspectedOom));
        assert_eq!(m.drain()[0].pid, None);
        // Held (a restored event, say) but more than the grace apart in source time.
        let mut m = EventMerger::new(10_000);
        m.restore(OomEvent { ts_ms: 50_000, ..suspected(7, 0) }, Vec::new());
        m.push(pidless(Some(0), 30_000), 30_000);
        assert_eq!(m.drain().len(), 2);
        assert_eq!(m.stats(), MergeStats::default());
    }

    #[test]
    fn a_pidless_report_without_a_gpu_is_never_paired_and_not_held() {
        let mut m = EventMerger::new(10_000);
        m.push(suspected(7, 0), 1000);
        let out = m.push(pidless(None, 1500), 1500);
        assert_eq!((out.len(), out[0].pid), (1, None), "passes straight through");
        // Pid-less reports are not merged with each other: two ranks may print the same message.
        m.push(pidless(Some(1), 1600), 1600);
        m.push(pidless(Some(1), 1600), 1600);
        assert_eq!(m.drain().len(), 3);
        // Pid-less events of other kinds or sources are not held either.
        let kmsg = OomEvent { source: EventSource::Kmsg, ..pidless(Some(0), 0) };
        assert_eq!(m.push(kmsg, 0).len(), 1);
    }

    #[test]
    fn pidless_pairing_takes_the_nearest_and_never_pairs_an_event_twice() {
        let mut m = EventMerger::new(10_000);
        m.push(OomEvent { ts_ms: 1000, ..suspected(7, 0) }, 1000);
        m.push(OomEvent { ts_ms: 4000, ..suspected(8, 0) }, 4000);
        // Nearer to pid 8's (1000 ms) than to pid 7's (2000 ms).
        m.push(pidless(Some(0), 3000), 4000);
        // Next report: pid 8 is taken, pid 7 is left.
        m.push(OomEvent { requested_bytes: Some(GIB), ..pidless(Some(0), 3900) }, 4000);
        // A third report finds nothing left to pair with.
        m.push(OomEvent { requested_bytes: Some(3 * GIB), ..pidless(Some(0), 3950) }, 4000);
        let out = m.drain();
        assert!(out.iter().all(|e| e.kind == OomKind::CudaOom));
        let mut got: Vec<_> = out.iter().map(|e| (e.requested_bytes.map(|b| b / GIB), e.pid)).collect();
        got.sort();
        assert_eq!(got, vec![(Some(1), Some(7)), (Some(2), Some(8)), (Some(3), None)]);
        assert_eq!(m.stats().suspected, 2);
        // Equally near to two suspected OOMs: the older one.
        let mut m = EventMerger::new(10_000);
        m.push(OomEvent { ts_ms: 1000, ..suspected(7, 0) }, 1000);
        m.push(OomEvent { ts_ms: 3000, ..suspected(8, 0) }, 3000);
        m.push(pidless(Some(0), 2000), 3000);
        let pids: Vec<_> = m.drain().iter().filter(|e| e.kind == OomKind::CudaOom).map(|e| e.pid).collect();
        assert_eq!(pids, vec![Some(7)]);
    }

    #[test]
    fn a_pid_match_wins_over_gpu_pairing() {
        let mut m = EventMerger::new(10_000);
        m.push(pidless(Some(0), 1000), 1000);
        m.push(log(7, Some(0)), 1000);
        m.push(suspected(7, 0), 1000);
        let out = m.drain();
        assert_eq!(out.len(), 2);
        assert_eq!(out.iter().filter(|e| e.pid == Some(7)).count(), 1);
        assert_eq!(out.iter().filter(|e| e.pid.is_none()).count(), 1);
    }

    #[test]
    fn a_hooked_jobs_report_and_its_pidless_log_line_are_one_event_in_either_order() {
        // As seen on a real GPU: the hook reports first (with the pid), NVML's vanished process
        // folds into that report, and the job's log prints the same failure without a pid.
        let merged = |order: &[OomEvent]| {
            let mut m = EventMerger::new(10_000);
            let mut out = Vec::new();
            for e in order {
                out.extend(m.push(e.clone(), e.ts_ms));
            }
            out.extend(m.drain());
            (out, m.stats())
        };
        let (h, s, l) = (hook(7), suspected(7, 0), pidless(Some(0), 4000));
        for order in [vec![h.clone(), s.clone(), l.clone()], vec![l.clone(), h.clone(), s.clone()]] {
            let (out, stats) = merged(&order);
            assert_eq!(out.len(), 1, "{out:?}");
            let e = &out[0];
            assert_eq!(
                (e.source, e.pid, e.phase),
                (EventSource::Hook, Some(7), Phase::Backward),
                "the hook's fields"
            );
            assert!(e.raw_message.starts_with("torch.OutOfMemoryError"), "the log's message");
            let from = label(e, MERGED_LABEL).unwrap();
            assert!(from.contains("suspected_oom") && from.contains("log"), "{from}");
            assert_eq!((stats.suspected, stats.cross_source), (1, 1));
        }
        // The request differs, or the line prints none: nothing ties the line to the pid.
        let other = OomEvent { requested_bytes: Some(4 * GIB), ..l.clone() };
        assert_eq!(merged(&[h.clone(), s.clone(), other]).0.len(), 2);
        let bare = OomEvent { requested_bytes: None, ..l.clone() };
        assert_eq!(merged(&[h.clone(), s.clone(), bare]).0.len(), 2);
        // Another GPU, or outside the grace window: apart.
        assert_eq!(merged(&[h.clone(), pidless(Some(1), 4000)]).0.len(), 2);
        assert_eq!(merged(&[h.clone(), pidless(Some(0), 20_000)]).0.len(), 2);
        // Two pid-less lines of the same failure size (two ranks printing one message): one pairs.
        let (out, _) = merged(&[h.clone(), l.clone(), OomEvent { event_id: 9, ..l.clone() }]);
        assert_eq!(out.len(), 2);
        assert_eq!(out.iter().filter(|e| e.pid == Some(7)).count(), 1);
    }

    #[test]
    fn a_process_exit_below_the_threshold_gives_its_pid_to_the_matching_pidless_line() {
        // As seen on a real GPU: a 15.6 GiB request refused with the GPU 93.7 % used; the job's
        // line says "this process has 131.01 GiB"; NVML's last reading of the pid said 131.00.
        let line =
            OomEvent { process_used_bytes: Some(131 * GIB + 10 * (1 << 20)), ..pidless(Some(0), 4000) };
        let exit = OomEvent { ts_ms: 3000, process_used_bytes: Some(131 * GIB), ..suspected(942, 0) };
        let run = |exit_first: bool, line: OomEvent, exit: OomEvent| {
            let mut m = EventMerger::new(10_000);
            let mut out = Vec::new();
            if exit_first {
                out.extend(events(m.exit(exit, 3000)));
                out.extend(m.push(line, 4000));
            } else {
                out.extend(m.push(line, 4000));
                out.extend(events(m.exit(exit, 4500)));
            }
            out.extend(m.drain());
            (out, m.stats().exits)
        };
        for exit_first in [true, false] {
            let (out, exits) = run(exit_first, line.clone(), exit.clone());
            assert_eq!(out.len(), 1, "the exit is never an event of its own: {out:?}");
            let e = &out[0];
            assert_eq!((e.kind, e.source, e.pid), (OomKind::CudaOom, EventSource::Log, Some(942)));
            assert_eq!(label(e, MERGED_LABEL), Some(EXIT_TAG));
            assert_eq!(label(e, "k8s.pod"), Some("trainer-0"), "the process's workload labels");
            assert_eq!(e.process_used_bytes, line.process_used_bytes, "the message's figure stays");
            assert_eq!(exits, 1);
        }
        // Nothing ties them: another figure, no figure, another GPU, too far apart in time.
        let apart = |line: OomEvent, exit: OomEvent| {
            for exit_first in [true, false] {
                let (out, exits) = run(exit_first, line.clone(), exit.clone());
                assert_eq!((out.len(), out[0].pid, exits), (1, None, 0), "{line:?} / {exit:?}");
            }
        };
        apart(OomEvent { process_used_bytes: Some(100 * GIB), ..line.clone() }, exit.clone());
        apart(OomEvent { process_used_bytes: None, ..line.clone() }, exit.clone());
        apart(line.clone(), OomEvent { gpu_index: Some(1), ..exit.clone() });
        apart(OomEvent { ts_ms: 40_000, ..line.clone() }, exit.clone());
        // A line that paired with a suspected OOM keeps that pid; the exit stays unused.
        let mut m = EventMerger::new(10_000);
        m.push(suspected(7, 0), 1000);
        m.push(line.clone(), 4000);
        m.exit(exit.clone(), 4500);
        let out = m.drain();
        assert_eq!(out.iter().map(|e| e.pid).collect::<Vec<_>>(), vec![Some(7)]);
        // The memory of exits is bounded.
        let mut m = EventMerger::new(10_000);
        for pid in 0..(MAX_EXITS as u32 + 10) {
            m.exit(OomEvent { ts_ms: 1000, ..suspected(pid, 3) }, 1000);
        }
        assert_eq!(m.exits.len(), MAX_EXITS);
    }

    #[test]
    fn merged_label_survives_the_label_cap() {
        let many: Vec<Label> = (0..oomlens_schema::limits::MAX_LABELS)
            .map(|i| Label { key: format!("k{i}"), value: "v".into() })
            .collect();
        let mut m = EventMerger::new(10_000);
        m.push(OomEvent { labels: many, ..log(7, Some(0)) }, 0);
        m.push(suspected(7, 0), 0);
        let e = m.drain().remove(0);
        assert_eq!(e.labels.len(), oomlens_schema::limits::MAX_LABELS);
        assert_eq!(label(&e, MERGED_LABEL), Some("suspected_oom"));
    }
}
