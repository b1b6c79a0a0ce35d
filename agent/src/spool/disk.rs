//! [`DiskSpool`]: batches in checksummed segment files until acknowledged, replayed after a restart.
//!
//! Layout of the spool directory:
//! * `seg-<first seq>.log` — records (see `segment.rs`), appended in sequence order; a new segment
//!   is started at `segment_bytes`, and whenever the agent starts.
//! * `meta` — boot id, highest acknowledged seq and highest seq ever spooled (36 bytes with a CRC,
//!   replaced atomically by write + rename). It is written (and synced) before any segment is
//!   deleted or rewritten, so a sequence number is never issued twice under one boot id.
//! * `lock` — held (`flock`) while an agent uses the directory.
//!
//! Memory stays bounded: only an index (seq → segment, offset, length, row counts) is kept; frames
//! are read from disk when the uplink asks for them. Segments are deleted once every record in them
//! is acknowledged. Over the byte cap, the oldest segment holding samples is rewritten without them
//! (records without events vanish, records with events keep their events), never touching events.
//!
//! **When the disk refuses** a write (full, read-only, over quota, I/O error), the batch is not
//! lost: it waits in a [`MemorySpool`] of `memory_fallback_bytes`, and so do the batches after it
//! (records stay in sequence order on disk). Every later push and acknowledgement retries the disk
//! and moves the waiting batches there in order. Over the memory cap, the oldest samples go first
//! — those on disk (their segment is compacted, which also frees disk space), then those in memory
//! — and events never. While batches wait in memory the spool is degraded: the reason is set on the
//! telemetry's [`Degraded`] (`/readyz` 503), `spool_degraded` is 1, and one warning is logged per
//! episode. The sequence numbers of the batches in memory are recorded in `meta` (rewritten in
//! place when no new file can be created), so a restart never reuses them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::ops::Bound;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::{error, info, warn};

use oomlens_schema::telemetry::Degraded;

use super::segment::{self, RecordHeader};
use super::{Dropped, MemorySpool, PendingBatch, RowCounts, Spool, SpoolError};
use crate::metrics::AgentMetrics;

/// When the spool forces its writes to stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// After every record (safest, slowest).
    Always,
    /// At most once per second (on the next write or acknowledgement after a second has passed).
    #[default]
    Interval,
    /// Never; the kernel writes back when it likes (survives `kill -9`, not a power cut).
    Never,
}

/// Longest time between syncs under [`FsyncPolicy::Interval`].
const SYNC_INTERVAL: Duration = Duration::from_secs(1);
/// Largest segment file before a new one is started.
const MAX_SEGMENT_BYTES: u64 = 8 * 1024 * 1024;
/// Smallest segment size (small caps still get several segments).
const MIN_SEGMENT_BYTES: u64 = 64 * 1024;
/// Default memory for batches the disk refuses (`spool.memory_fallback_bytes`).
pub const DEFAULT_MEMORY_FALLBACK_BYTES: usize = 64 * 1024 * 1024;
/// Name of the component on the telemetry's [`Degraded`].
const DEGRADED_COMPONENT: &str = "spool";

/// Sequence numbers skipped after records were lost at start-up: a lost record may have reached a
/// collector, and its seq must not be reused for different rows under the same boot id.
const SEQ_GAP_AFTER_LOSS: u64 = 1 << 20;

const META_MAGIC: [u8; 4] = *b"OSPM";
const META_VERSION: u32 = 1;
const META_LEN: usize = 36;

/// What the spool carries across agent restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolState {
    /// Boot id to announce in `Hello` (kept for the spool's lifetime).
    pub boot_id: u64,
    /// Sequence number of the next batch.
    pub next_seq: u64,
    /// What opening the spool found.
    pub recovery: Recovery,
}

/// What opening the spool found on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Records pending (to be re-sent).
    pub replayed_batches: u64,
    /// Rows of those records.
    pub replayed_rows: RowCounts,
    /// Corrupt ranges skipped in the middle of segments.
    pub corrupt_ranges: u64,
    /// Bytes of torn segment tails truncated.
    pub truncated_bytes: u64,
    /// Bytes skipped as corrupt (middle ranges).
    pub corrupt_bytes: u64,
    /// The meta file was missing or unreadable while segments existed (new boot id chosen).
    pub meta_lost: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    boot_id: u64,
    acked: u64,
    max_seq: u64,
}

impl Meta {
    fn encode(&self) -> [u8; META_LEN] {
        let mut b = [0u8; META_LEN];
        b[0..4].copy_from_slice(&META_MAGIC);
        b[4..8].copy_from_slice(&META_VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.boot_id.to_le_bytes());
        b[16..24].copy_from_slice(&self.acked.to_le_bytes());
        b[24..32].copy_from_slice(&self.max_seq.to_le_bytes());
        let crc = crc32fast::hash(&b[..32]);
        b[32..36].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Meta> {
        if b.len() != META_LEN || b[0..4] != META_MAGIC {
            return None;
        }
        let u32_at = |at: usize| b.get(at..at + 4).and_then(|s| s.try_into().ok()).map(u32::from_le_bytes);
        let u64_at = |at: usize| b.get(at..at + 8).and_then(|s| s.try_into().ok()).map(u64::from_le_bytes);
        if crc32fast::hash(&b[..32]) != u32_at(32)? || u32_at(4)? != META_VERSION {
            return None;
        }
        Some(Meta { boot_id: u64_at(8)?, acked: u64_at(16)?, max_seq: u64_at(24)? })
    }
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    file: File,
    /// Bytes in the file.
    len: u64,
    /// Pending records (in the index) and their bytes and sample rows.
    pending: u64,
    pending_bytes: u64,
    pending_samples: u64,
}

impl Segment {
    fn reclaimable(&self) -> bool {
        self.pending_samples > 0 || self.len > self.pending_bytes
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    segment: u64,
    offset: u64,
    len: u32,
    rows: RowCounts,
}

/// On-disk spool with a byte cap.
#[derive(Debug)]
pub struct DiskSpool {
    dir: PathBuf,
    max_bytes: u64,
    segment_bytes: u64,
    fsync: FsyncPolicy,
    _lock: File,
    meta: Meta,
    meta_written: Meta,
    segments: BTreeMap<u64, Segment>,
    index: BTreeMap<u64, Entry>,
    active: Option<u64>,
    disk_bytes: u64,
    unsynced: bool,
    last_sync: Instant,
    last_meta_write: Instant,
    warned_events_only: bool,
    metrics: Option<Arc<AgentMetrics>>,
    buf: Vec<u8>,
    /// Batches the disk refused, in sequence order after every record on disk.
    fallback: MemorySpool,
    /// Why the disk refused the last write, while batches wait in memory.
    refused: Option<String>,
    degraded: Degraded,
}

impl DiskSpool {
    /// Opens (or creates) the spool in `dir`: verifies every record, truncates torn tails, skips
    /// corrupt ranges (with warnings), deletes fully acknowledged segments and indexes the rest.
    pub fn open(
        dir: &Path,
        max_bytes: u64,
        fsync: FsyncPolicy,
    ) -> Result<(DiskSpool, SpoolState), SpoolError> {
        std::fs::create_dir_all(dir).map_err(SpoolError::io(dir))?;
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(SpoolError::io(&lock_path))?;
        match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => return Err(SpoolError::Locked(dir.to_owned())),
            Err(e) => return Err(SpoolError::io(&lock_path)(e.into())),
        }

        let mut recovery = Recovery::default();
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(SpoolError::io(dir))? {
            let entry = entry.map_err(SpoolError::io(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(id) = segment::parse_segment_name(&name) {
                names.push(id);
            } else if name.ends_with(".tmp") {
                // An interrupted rewrite or meta update: the original is still in place.
                let _ = std::fs::remove_file(entry.path());
            }
        }
        names.sort_unstable();

        let meta_path = dir.join("meta");
        let meta = match std::fs::read(&meta_path) {
            Ok(bytes) => Meta::decode(&bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(SpoolError::io(&meta_path)(e)),
        };
        let meta = match meta {
            Some(m) => m,
            None => {
                if !names.is_empty() {
                    warn!(dir = %dir.display(), "spool meta file missing or corrupt: replaying every record under a new boot id");
                    recovery.meta_lost = true;
                }
                Meta { boot_id: rand::random::<u64>() | 1, acked: 0, max_seq: 0 }
            }
        };

        let mut spool = DiskSpool {
            dir: dir.to_owned(),
            max_bytes,
            segment_bytes: (max_bytes / 8).clamp(MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES),
            fsync,
            _lock: lock,
            meta,
            meta_written: meta,
            segments: BTreeMap::new(),
            index: BTreeMap::new(),
            active: None,
            disk_bytes: 0,
            unsynced: false,
            last_sync: Instant::now(),
            last_meta_write: Instant::now(),
            warned_events_only: false,
            metrics: None,
            buf: Vec::new(),
            fallback: MemorySpool::new(DEFAULT_MEMORY_FALLBACK_BYTES),
            refused: None,
            degraded: Degraded::default(),
        };
        let mut max_seen = meta.max_seq.max(meta.acked);
        for id in names {
            spool.load_segment(id, &mut max_seen, &mut recovery)?;
        }
        let lost = recovery.truncated_bytes > 0 || recovery.corrupt_ranges > 0;
        let next_seq = max_seen + 1 + if lost { SEQ_GAP_AFTER_LOSS } else { 0 };
        spool.meta.max_seq = next_seq - 1;
        spool.write_meta(fsync != FsyncPolicy::Never)?;
        spool.delete_finished_segments()?;
        recovery.replayed_batches = spool.index.len() as u64;
        for e in spool.index.values() {
            recovery.replayed_rows.add(e.rows);
        }
        if recovery.replayed_batches > 0 || lost {
            info!(
                dir = %dir.display(),
                boot_id = meta.boot_id,
                next_seq,
                replayed_batches = recovery.replayed_batches,
                replayed_events = recovery.replayed_rows.events,
                corrupt_ranges = recovery.corrupt_ranges,
                truncated_bytes = recovery.truncated_bytes,
                meta_lost = recovery.meta_lost,
                "spool reopened"
            );
        }
        let state = SpoolState { boot_id: spool.meta.boot_id, next_seq, recovery };
        Ok((spool, state))
    }

    /// Counts later corruption (records that fail their checksum when read back) in these metrics.
    pub fn set_metrics(&mut self, metrics: Arc<AgentMetrics>) {
        self.metrics = Some(metrics);
    }

    /// Memory for batches the disk refuses, and where to report the degraded state.
    pub fn set_memory_fallback(&mut self, max_bytes: usize, degraded: Degraded) {
        self.fallback.set_max_bytes(max_bytes);
        self.degraded = degraded;
    }

    /// Why the disk refuses writes, while batches wait in memory.
    pub fn degraded_reason(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Batches waiting in memory because the disk refused them.
    pub fn batches_in_memory(&self) -> usize {
        self.fallback.len()
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Segment files on disk.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn load_segment(
        &mut self,
        id: u64,
        max_seen: &mut u64,
        recovery: &mut Recovery,
    ) -> Result<(), SpoolError> {
        let path = self.dir.join(segment::segment_name(id));
        let bytes = std::fs::read(&path).map_err(SpoolError::io(&path))?;
        let scan = segment::scan(&bytes);
        for r in &scan.skipped {
            warn!(segment = %path.display(), from = r.start, to = r.end, "spool: corrupt records skipped (checksum mismatch)");
            recovery.corrupt_ranges += 1;
            recovery.corrupt_bytes += r.end - r.start;
        }
        let file = OpenOptions::new().read(true).write(true).open(&path).map_err(SpoolError::io(&path))?;
        if scan.valid_len < bytes.len() as u64 {
            let torn = bytes.len() as u64 - scan.valid_len;
            warn!(segment = %path.display(), offset = scan.valid_len, bytes = torn, "spool: torn tail truncated");
            recovery.truncated_bytes += torn;
            file.set_len(scan.valid_len).map_err(SpoolError::io(&path))?;
            if self.fsync != FsyncPolicy::Never {
                file.sync_all().map_err(SpoolError::io(&path))?;
            }
        }
        let mut seg =
            Segment { path, file, len: scan.valid_len, pending: 0, pending_bytes: 0, pending_samples: 0 };
        for r in scan.records {
            let seq = r.header.seq;
            if seq <= self.meta.acked {
                continue;
            }
            if self.index.last_key_value().is_some_and(|(last, _)| *last >= seq) {
                warn!(segment = %seg.path.display(), seq, "spool: record out of sequence skipped");
                continue;
            }
            *max_seen = (*max_seen).max(seq);
            seg.pending += 1;
            seg.pending_bytes += u64::from(r.len);
            seg.pending_samples += r.header.rows.samples();
            self.index.insert(seq, Entry { segment: id, offset: r.offset, len: r.len, rows: r.header.rows });
        }
        self.disk_bytes += seg.len;
        self.segments.insert(id, seg);
        Ok(())
    }

    fn sync_due(&self, force: bool) -> bool {
        match self.fsync {
            FsyncPolicy::Always => true,
            FsyncPolicy::Interval => force || self.last_sync.elapsed() >= SYNC_INTERVAL,
            FsyncPolicy::Never => false,
        }
    }

    /// Syncs the active segment when the policy says so.
    fn maybe_sync(&mut self, force: bool) -> Result<(), SpoolError> {
        if !self.unsynced || !self.sync_due(force) {
            return Ok(());
        }
        if let Some(seg) = self.active.and_then(|id| self.segments.get(&id)) {
            seg.file.sync_data().map_err(SpoolError::io(&seg.path))?;
        }
        self.unsynced = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Replaces `meta` (write to `meta.tmp`, rename); `durable` syncs the file and the directory.
    /// When no new file can be made (a full disk), the existing `meta` is overwritten in place:
    /// its 36 bytes are already allocated, and a torn write fails the CRC, which a restart treats as
    /// a lost meta (a new boot id: a fresh sequence space, never a reused seq).
    fn write_meta(&mut self, durable: bool) -> Result<(), SpoolError> {
        let tmp = self.dir.join("meta.tmp");
        let path = self.dir.join("meta");
        let encoded = self.meta.encode();
        let replaced = (|| {
            let mut f = File::create(&tmp).map_err(SpoolError::io(&tmp))?;
            f.write_all(&encoded).map_err(SpoolError::io(&tmp))?;
            if durable {
                f.sync_all().map_err(SpoolError::io(&tmp))?;
            }
            drop(f);
            std::fs::rename(&tmp, &path).map_err(SpoolError::io(&path))
        })();
        if let Err(e) = replaced {
            let _ = std::fs::remove_file(&tmp);
            let f = OpenOptions::new().write(true).open(&path).map_err(|_| e)?;
            f.write_all_at(&encoded, 0).map_err(SpoolError::io(&path))?;
            if durable {
                f.sync_data().map_err(SpoolError::io(&path))?;
            }
        } else if durable {
            self.sync_dir()?;
        }
        self.meta_written = self.meta;
        self.last_meta_write = Instant::now();
        Ok(())
    }

    fn sync_dir(&self) -> Result<(), SpoolError> {
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(SpoolError::io(&self.dir))
    }

    /// Makes sure `meta` on disk records every seq issued, durably, before records disappear.
    fn persist_meta_before_delete(&mut self) -> Result<(), SpoolError> {
        if self.meta_written != self.meta || self.fsync != FsyncPolicy::Never {
            self.write_meta(self.fsync != FsyncPolicy::Never)?;
        }
        Ok(())
    }

    /// Deletes segments without pending records (the active one too: the next push starts a new one).
    fn delete_finished_segments(&mut self) -> Result<usize, SpoolError> {
        let done: Vec<u64> =
            self.segments.iter().filter(|(_, s)| s.pending == 0).map(|(id, _)| *id).collect();
        if done.is_empty() {
            return Ok(0);
        }
        self.persist_meta_before_delete()?;
        for id in &done {
            if let Some(seg) = self.segments.remove(id) {
                std::fs::remove_file(&seg.path).map_err(SpoolError::io(&seg.path))?;
                self.disk_bytes -= seg.len;
            }
            if self.active == Some(*id) {
                self.active = None;
                self.unsynced = false;
            }
        }
        Ok(done.len())
    }

    fn remove_entry(&mut self, seq: u64) -> Option<Entry> {
        let e = self.index.remove(&seq)?;
        if let Some(seg) = self.segments.get_mut(&e.segment) {
            seg.pending -= 1;
            seg.pending_bytes -= u64::from(e.len);
            seg.pending_samples -= e.rows.samples();
        }
        Some(e)
    }

    /// The segment to append to, starting a new one when there is none or it is full.
    fn active_segment(&mut self, seq: u64) -> Result<u64, SpoolError> {
        if let Some(id) = self.active
            && self.segments.get(&id).is_some_and(|s| s.len < self.segment_bytes)
        {
            return Ok(id);
        }
        self.maybe_sync(true)?;
        let path = self.dir.join(segment::segment_name(seq));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(SpoolError::io(&path))?;
        if self.fsync != FsyncPolicy::Never {
            self.sync_dir()?;
        }
        self.segments
            .insert(seq, Segment { path, file, len: 0, pending: 0, pending_bytes: 0, pending_samples: 0 });
        self.active = Some(seq);
        Ok(seq)
    }

    /// Reads and verifies the record of `e`; `Ok(None)` when it no longer verifies.
    fn read_record(&self, seq: u64, e: &Entry) -> Result<Option<Vec<u8>>, SpoolError> {
        let Some(seg) = self.segments.get(&e.segment) else {
            return Ok(None);
        };
        let mut bytes = vec![0; e.len as usize];
        seg.file.read_exact_at(&mut bytes, e.offset).map_err(SpoolError::io(&seg.path))?;
        match segment::parse_at(&bytes, 0) {
            Ok((h, frame, _)) if h.seq == seq => {
                bytes.truncate(frame.end);
                bytes.drain(..frame.start);
                Ok(Some(bytes))
            }
            _ => Ok(None),
        }
    }

    fn count_corrupt(&self, seq: u64, rows: RowCounts) {
        warn!(dir = %self.dir.display(), seq, gpu_samples = rows.gpu_samples, process_samples = rows.process_samples, events = rows.events,
            "spool: record failed its checksum when read back; skipped");
        if let Some(m) = &self.metrics {
            m.spool_corrupt_records.inc();
            for (table, n) in [
                ("gpu_samples", rows.gpu_samples),
                ("process_samples", rows.process_samples),
                ("oom_events", rows.events),
            ] {
                m.dropped_rows.get_or_create(&vec![("table", table.to_owned())]).inc_by(n);
            }
        }
    }

    /// Rewrites segment `id` without its samples: records without events go, records with events
    /// keep only their events; acknowledged and unreadable records go too.
    fn compact(&mut self, id: u64, dropped: &mut Dropped) -> Result<(), SpoolError> {
        let entries: Vec<(u64, Entry)> =
            self.index.iter().filter(|(_, e)| e.segment == id).map(|(s, e)| (*s, *e)).collect();
        self.persist_meta_before_delete()?;
        // Build the new content first; the spool changes only once it is safely on disk.
        let mut out = Vec::new();
        let mut kept = Vec::new();
        let mut lost = RowCounts::default();
        let mut corrupt = Vec::new();
        for (seq, e) in &entries {
            let Some(frame) = self.read_record(*seq, e)? else {
                corrupt.push((*seq, e.rows));
                continue;
            };
            if e.rows.events == 0 {
                lost.add(e.rows);
                continue;
            }
            let pending = PendingBatch { seq: *seq, frame, rows: e.rows };
            let Ok(Some((stripped, rows))) = pending.strip_samples() else {
                corrupt.push((*seq, e.rows));
                continue;
            };
            lost.add(rows);
            let offset = out.len() as u64;
            let header = RecordHeader { seq: *seq, rows: stripped.rows };
            let len = segment::encode_record(&header, &stripped.frame, &mut out)
                .ok_or(SpoolError::TooLarge { seq: *seq, len: stripped.frame.len() })?;
            kept.push((*seq, Entry { segment: id, offset, len: len as u32, rows: stripped.rows }));
        }
        if self.active == Some(id) {
            self.maybe_sync(true)?;
            self.active = None;
        }
        let Some(path) = self.segments.get(&id).map(|s| s.path.clone()) else {
            return Ok(());
        };
        let file = if kept.is_empty() {
            std::fs::remove_file(&path).map_err(SpoolError::io(&path))?;
            None
        } else {
            let tmp = path.with_extension("log.tmp");
            let mut f = File::create(&tmp).map_err(SpoolError::io(&tmp))?;
            f.write_all(&out).map_err(SpoolError::io(&tmp))?;
            f.sync_all().map_err(SpoolError::io(&tmp))?;
            drop(f);
            std::fs::rename(&tmp, &path).map_err(SpoolError::io(&path))?;
            self.sync_dir()?;
            Some(OpenOptions::new().read(true).write(true).open(&path).map_err(SpoolError::io(&path))?)
        };

        for (seq, rows) in corrupt {
            self.count_corrupt(seq, rows);
        }
        dropped.rows.add(lost);
        for (seq, _) in &entries {
            self.remove_entry(*seq);
        }
        if let Some(old) = self.segments.remove(&id) {
            self.disk_bytes -= old.len;
        }
        let Some(file) = file else {
            return Ok(());
        };
        let mut new =
            Segment { path, file, len: out.len() as u64, pending: 0, pending_bytes: 0, pending_samples: 0 };
        for (seq, e) in kept {
            new.pending += 1;
            new.pending_bytes += u64::from(e.len);
            new.pending_samples += e.rows.samples();
            self.index.insert(seq, e);
        }
        self.disk_bytes += new.len;
        self.segments.insert(id, new);
        Ok(())
    }

    /// Drops the oldest samples until the spool fits its cap (or only events are left). A failure
    /// is logged and leaves the spool over its cap; the batch already written stays spooled.
    fn enforce_cap(&mut self) -> Dropped {
        let mut dropped = Dropped::default();
        while self.disk_bytes > self.max_bytes {
            let Some(id) = self.segments.iter().find(|(_, s)| s.reclaimable()).map(|(id, _)| *id) else {
                if !self.warned_events_only {
                    warn!(dir = %self.dir.display(), bytes = self.disk_bytes, max_bytes = self.max_bytes,
                        "spool over its cap with only OOM events left: keeping them (events are never dropped)");
                    self.warned_events_only = true;
                }
                break;
            };
            if let Err(e) = self.compact(id, &mut dropped) {
                warn!(error = %e, "spool: cannot make room under the cap");
                break;
            }
        }
        if self.disk_bytes <= self.max_bytes {
            self.warned_events_only = false;
        }
        dropped
    }
}

impl DiskSpool {
    /// Appends one record to the active segment; on failure nothing of it stays on disk.
    fn append(&mut self, batch: &PendingBatch) -> Result<(), SpoolError> {
        self.buf.clear();
        let header = RecordHeader { seq: batch.seq, rows: batch.rows };
        let len = segment::encode_record(&header, &batch.frame, &mut self.buf)
            .ok_or(SpoolError::TooLarge { seq: batch.seq, len: batch.frame.len() })?;
        let id = self.active_segment(batch.seq)?;
        let Some(seg) = self.segments.get_mut(&id) else {
            return Err(SpoolError::io(&self.dir)(std::io::Error::other("active segment missing")));
        };
        let offset = seg.len;
        if let Err(e) = seg.file.write_all_at(&self.buf, offset) {
            // Leave no partial record behind.
            let _ = seg.file.set_len(offset);
            return Err(SpoolError::io(&seg.path)(e));
        }
        seg.len += len as u64;
        seg.pending += 1;
        seg.pending_bytes += len as u64;
        seg.pending_samples += batch.rows.samples();
        self.disk_bytes += len as u64;
        self.index.insert(batch.seq, Entry { segment: id, offset, len: len as u32, rows: batch.rows });
        self.meta.max_seq = self.meta.max_seq.max(batch.seq);
        self.unsynced = true;
        if let Err(e) = self.maybe_sync(false) {
            // The record is written (page cache); only its durability is late.
            warn!(error = %e, "spool: fsync failed");
        }
        Ok(())
    }

    /// The disk refused a write: batches wait in memory until it takes them again.
    fn refuse(&mut self, e: &SpoolError) {
        if let Some(m) = &self.metrics {
            m.spool_write_errors.inc();
        }
        if self.refused.is_none() {
            warn!(dir = %self.dir.display(), error = %e,
                "spool: the disk refused a write; batches wait in memory (spool.memory_fallback_bytes) and move to disk once it takes writes again");
        }
        self.refused = Some(format!("the disk refused a write ({e}); batches wait in memory"));
    }

    /// Moves the batches waiting in memory to disk, in order, while it takes them.
    fn retry_disk(&mut self) {
        while let Ok(Some(next)) = self.fallback.next_after(0) {
            match self.append(&next) {
                Ok(()) => {
                    self.fallback.ack_through(next.seq);
                }
                Err(e) => {
                    self.refuse(&e);
                    break;
                }
            }
        }
        if self.fallback.is_empty() && self.refused.take().is_some() {
            info!(dir = %self.dir.display(), "spool: the disk takes writes again; every batch held in memory is on disk");
        }
        self.report_state();
    }

    /// Publishes the degraded state and the memory held.
    fn report_state(&self) {
        match &self.refused {
            Some(reason) => self.degraded.set(
                DEGRADED_COMPONENT,
                format!("{reason}: {} batches, {} bytes", self.fallback.len(), self.fallback.bytes()),
            ),
            None => self.degraded.clear(DEGRADED_COMPONENT),
        }
        if let Some(m) = &self.metrics {
            m.spool_degraded.set(i64::from(self.refused.is_some()));
            m.spool_memory_bytes.set(i64::try_from(self.fallback.bytes()).unwrap_or(i64::MAX));
        }
    }

    /// Batches in memory over their cap: drops the oldest samples on disk first (compacting their
    /// segment frees disk space too), then moves what waits in memory to disk if it now fits.
    fn make_room_for(&mut self, bytes: usize, dropped: &mut Dropped) {
        if self.fallback.bytes().saturating_add(bytes) <= self.fallback.max_bytes() {
            return;
        }
        if let Some(id) = self.segments.iter().find(|(_, s)| s.pending_samples > 0).map(|(id, _)| *id) {
            match self.compact(id, dropped) {
                Ok(()) => self.retry_disk(),
                Err(e) => warn!(error = %e, "spool: cannot drop old samples on a disk that refuses writes"),
            }
        }
    }
}

impl Spool for DiskSpool {
    fn push(&mut self, batch: PendingBatch) -> Result<Dropped, SpoolError> {
        let last = self.meta.max_seq;
        if batch.seq <= last || self.index.last_key_value().is_some_and(|(s, _)| *s >= batch.seq) {
            return Err(SpoolError::OutOfOrder { seq: batch.seq, last });
        }
        let mut dropped = Dropped::default();
        if !self.fallback.is_empty() {
            self.retry_disk();
        }
        if self.fallback.is_empty() {
            match self.append(&batch) {
                Ok(()) => {
                    dropped.rows.add(self.enforce_cap().rows);
                    return Ok(dropped);
                }
                Err(e @ SpoolError::Io { .. }) => self.refuse(&e),
                Err(e) => return Err(e),
            }
        }
        // Behind the batches already waiting: records stay in sequence order.
        self.make_room_for(batch.frame.len(), &mut dropped);
        self.meta.max_seq = batch.seq;
        if let Err(e) = self.write_meta(self.fsync != FsyncPolicy::Never) {
            warn!(error = %e, seq = batch.seq, "spool: cannot record the sequence number of a batch held in memory");
        }
        if self.fallback.is_empty() && self.refused.is_none() {
            // Making room let the disk take everything: this one goes there too.
            if self.append(&batch).is_ok() {
                dropped.rows.add(self.enforce_cap().rows);
                self.report_state();
                return Ok(dropped);
            }
        }
        dropped.rows.add(self.fallback.push(batch)?.rows);
        self.report_state();
        Ok(dropped)
    }

    fn next_after(&mut self, after: u64) -> Result<Option<PendingBatch>, SpoolError> {
        loop {
            let Some((&seq, &e)) = self.index.range((Bound::Excluded(after), Bound::Unbounded)).next() else {
                // Every batch in memory comes after every record on disk.
                return self.fallback.next_after(after);
            };
            if let Some(frame) = self.read_record(seq, &e)? {
                return Ok(Some(PendingBatch { seq, frame, rows: e.rows }));
            }
            self.count_corrupt(seq, e.rows);
            self.remove_entry(seq);
            self.delete_finished_segments()?;
        }
    }

    fn ack_through(&mut self, seq: u64) -> usize {
        let acked: Vec<u64> = self.index.range(..=seq).map(|(s, _)| *s).collect();
        for s in &acked {
            self.remove_entry(*s);
        }
        let in_memory = self.fallback.ack_through(seq);
        if seq > self.meta.acked {
            self.meta.acked = seq.min(self.meta.max_seq.max(self.meta.acked));
        }
        let result = self.delete_finished_segments().and_then(|_| {
            let due = self.fsync == FsyncPolicy::Always || self.last_meta_write.elapsed() >= SYNC_INTERVAL;
            if self.meta != self.meta_written && due {
                self.write_meta(self.fsync == FsyncPolicy::Always)?;
            }
            self.maybe_sync(false)
        });
        if let Err(e) = result {
            // The acknowledgement itself is kept in memory; a failed delete is retried with the
            // next one and a stale meta only means re-sending batches the collector dedups.
            warn!(error = %e, "spool: cannot record an acknowledgement on disk");
        }
        if self.refused.is_some() {
            // Deleted segments may have made room.
            self.retry_disk();
        }
        acked.len() + in_memory
    }

    fn len(&self) -> usize {
        self.index.len() + self.fallback.len()
    }

    fn bytes(&self) -> usize {
        usize::try_from(self.disk_bytes).unwrap_or(usize::MAX).saturating_add(self.fallback.bytes())
    }

    fn first_seq(&self) -> Option<u64> {
        self.index.first_key_value().map(|(s, _)| *s).or_else(|| self.fallback.first_seq())
    }
}

impl Drop for DiskSpool {
    fn drop(&mut self) {
        if !self.fallback.is_empty() {
            self.retry_disk();
        }
        let mut lost = RowCounts::default();
        while let Ok(Some(b)) = self.fallback.next_after(0) {
            lost.add(b.rows);
            self.fallback.ack_through(b.seq);
        }
        if lost != RowCounts::default() {
            error!(dir = %self.dir.display(), gpu_samples = lost.gpu_samples, process_samples = lost.process_samples,
                events = lost.events, "spool: closing with batches the disk never took; they are lost");
            if let Some(m) = &self.metrics {
                for (table, n) in [
                    ("gpu_samples", lost.gpu_samples),
                    ("process_samples", lost.process_samples),
                    ("oom_events", lost.events),
                ] {
                    m.dropped_rows.get_or_create(&vec![("table", table.to_owned())]).inc_by(n);
                }
            }
        }
        let result = self.maybe_sync(true).and_then(|()| self.write_meta(self.fsync != FsyncPolicy::Never));
        if let Err(e) = result {
            warn!(error = %e, "spool: cannot sync on close");
        }
    }
}

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;
