//! The pending-events journal: OOM events are durable from the moment the batcher sees them, not
//! only once their batch reaches the spool.
//!
//! The event merger (`detect/merge.rs`) holds every event with a pid for a grace window (10 s by
//! default) so that a suspected OOM can merge with the log or hook report of the same failure, and
//! a batch waits up to `uplink.batch_interval_ms` before it is spooled. Without the journal, a
//! `kill -9` in that time loses the event. With a disk spool, the batcher therefore appends every
//! event to `events.journal` in the spool directory *before* it enters the merger, and appends a
//! "done" record for it once the batch carrying it (merged or not) is in the spool. At start-up
//! the events without a "done" record are handed back to the merger (see
//! `EventStage::restore`), keeping their event ids, so they are sent once more as they would have
//! been; the collector stores events by event id, so even a re-send of an event that did reach
//! the spool just before the kill stores nothing twice.
//!
//! Records use the spool's record format (`segment.rs`: magic, length, CRC32, body):
//! * pending: header `seq` = journal key, `events` = 1, frame = a `Batch` frame holding the event;
//! * done: header `seq` = journal key, no rows, empty frame.
//!
//! A torn tail (an interrupted append) is truncated and a corrupt record skipped, with warnings,
//! as in the spool. Bounded: the file is emptied whenever no event is outstanding (the usual state
//! a few seconds after an OOM), and rewritten with only the outstanding records (write a temporary
//! file, sync, rename) when it grows beyond [`COMPACT_BYTES`]; outstanding events are themselves
//! bounded by `detect.max_held_events` plus the events of one unsent batch.
//!
//! Durability follows `spool.fsync`: `always` syncs after every record, `interval` at most once a
//! second (on the next record or on the batcher's tick, see [`EventJournal::sync_if_due`]),
//! `never` leaves it to the kernel (which survives `kill -9`, not a power cut).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oomlens_schema::{Batch, Frame, OomEvent};
use tracing::{info, warn};

use super::segment::{self, RecordHeader};
use super::{FsyncPolicy, RowCounts, SpoolError};

/// File name of the journal inside the spool directory.
pub const JOURNAL_FILE: &str = "events.journal";
/// The journal is rewritten with only its outstanding records once it is larger than this.
pub const COMPACT_BYTES: u64 = 1024 * 1024;
/// Longest time between syncs under [`FsyncPolicy::Interval`].
const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// What opening the journal found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JournalReplay {
    /// Events detected but not known to be spooled, in detection order, with their journal keys.
    pub pending: Vec<(u64, OomEvent)>,
    /// Corrupt ranges skipped (checksum failures, undecodable events).
    pub corrupt_ranges: u64,
    /// Bytes of a torn tail truncated.
    pub truncated_bytes: u64,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    offset: u64,
    len: u32,
}

/// The journal of events not yet in the spool. See the module docs.
#[derive(Debug)]
pub struct EventJournal {
    path: PathBuf,
    file: File,
    len: u64,
    fsync: FsyncPolicy,
    next_key: u64,
    /// Outstanding (pending, not done) records.
    outstanding: BTreeMap<u64, Slot>,
    outstanding_bytes: u64,
    unsynced: bool,
    last_sync: Instant,
    buf: Vec<u8>,
}

impl EventJournal {
    /// Opens (or creates) `events.journal` in the spool directory `dir` and returns the events
    /// still outstanding. The caller must hold the spool directory (open the `DiskSpool` first:
    /// its lock covers the journal).
    pub fn open(dir: &Path, fsync: FsyncPolicy) -> Result<(EventJournal, JournalReplay), SpoolError> {
        let path = dir.join(JOURNAL_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(SpoolError::io(&path)(e)),
        };
        let (pending, mut replay) = parse(&bytes);
        if replay.truncated_bytes > 0 {
            warn!(journal = %path.display(), bytes = replay.truncated_bytes, "event journal: torn tail truncated");
        }
        if replay.corrupt_ranges > 0 {
            warn!(journal = %path.display(), ranges = replay.corrupt_ranges, "event journal: corrupt records skipped");
        }
        let next_key = pending.last().map_or(1, |(k, _)| k + 1);
        // Start from a compact file: only the outstanding records, written before the old one is
        // replaced (so a crash during this leaves either file whole).
        let mut buf = Vec::new();
        let mut outstanding = BTreeMap::new();
        for (key, event) in &pending {
            let offset = buf.len() as u64;
            let len = encode_pending(*key, event, &mut buf)?;
            outstanding.insert(*key, Slot { offset, len });
        }
        let durable = fsync != FsyncPolicy::Never;
        if !bytes.is_empty() || !path.exists() {
            replace_file(dir, &path, &buf, durable)?;
        }
        let file = OpenOptions::new().read(true).write(true).open(&path).map_err(SpoolError::io(&path))?;
        let journal = EventJournal {
            path,
            file,
            len: buf.len() as u64,
            fsync,
            next_key,
            outstanding_bytes: buf.len() as u64,
            outstanding,
            unsynced: false,
            last_sync: Instant::now(),
            buf: Vec::new(),
        };
        replay.pending = pending;
        if !replay.pending.is_empty() {
            info!(journal = %journal.path.display(), events = replay.pending.len(), "event journal: replaying events that were not spooled");
        }
        Ok((journal, replay))
    }

    /// Appends `event` (synced per the fsync policy); returns its journal key.
    pub fn append(&mut self, event: &OomEvent) -> Result<u64, SpoolError> {
        let key = self.next_key;
        self.buf.clear();
        let len = encode_pending(key, event, &mut self.buf)?;
        self.write_buf()?;
        self.next_key += 1;
        self.outstanding.insert(key, Slot { offset: self.len - u64::from(len), len });
        self.outstanding_bytes += u64::from(len);
        self.sync(false)?;
        Ok(key)
    }

    /// Records that the events of `keys` are in the spool. Empties the file when nothing is
    /// outstanding any more, compacts it when it has grown beyond [`COMPACT_BYTES`].
    pub fn mark_done(&mut self, keys: &[u64]) -> Result<(), SpoolError> {
        let keys: Vec<u64> = keys.iter().copied().filter(|k| self.outstanding.contains_key(k)).collect();
        if keys.is_empty() {
            return Ok(());
        }
        for k in &keys {
            if let Some(slot) = self.outstanding.remove(k) {
                self.outstanding_bytes -= u64::from(slot.len);
            }
        }
        if self.outstanding.is_empty() {
            // Nothing to replay: an empty file says so (a lost truncation only means re-sends).
            self.file.set_len(0).map_err(SpoolError::io(&self.path))?;
            self.len = 0;
            self.outstanding_bytes = 0;
            self.unsynced = false;
            return Ok(());
        }
        self.buf.clear();
        for k in &keys {
            segment::encode_record(&RecordHeader { seq: *k, rows: RowCounts::default() }, &[], &mut self.buf);
        }
        self.write_buf()?;
        self.sync(false)?;
        if self.len > COMPACT_BYTES && self.len > 2 * self.outstanding_bytes {
            self.compact()?;
        }
        Ok(())
    }

    /// Syncs unsynced records under [`FsyncPolicy::Interval`] once a second has passed.
    pub fn sync_if_due(&mut self) -> Result<(), SpoolError> {
        self.sync(false)
    }

    /// Events appended and not yet marked done.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Bytes in the journal file.
    pub fn bytes(&self) -> u64 {
        self.len
    }

    fn write_buf(&mut self) -> Result<(), SpoolError> {
        self.file.write_all_at(&self.buf, self.len).map_err(SpoolError::io(&self.path))?;
        self.len += self.buf.len() as u64;
        self.unsynced = true;
        Ok(())
    }

    fn sync(&mut self, force: bool) -> Result<(), SpoolError> {
        let due = match self.fsync {
            FsyncPolicy::Always => true,
            FsyncPolicy::Interval => force || self.last_sync.elapsed() >= SYNC_INTERVAL,
            FsyncPolicy::Never => false,
        };
        if self.unsynced && due {
            self.file.sync_data().map_err(SpoolError::io(&self.path))?;
            self.unsynced = false;
            self.last_sync = Instant::now();
        }
        Ok(())
    }

    /// Rewrites the file with only the outstanding records.
    fn compact(&mut self) -> Result<(), SpoolError> {
        let mut buf = Vec::with_capacity(self.outstanding_bytes as usize);
        let mut moved = BTreeMap::new();
        for (key, slot) in &self.outstanding {
            let start = buf.len();
            buf.resize(start + slot.len as usize, 0);
            self.file.read_exact_at(&mut buf[start..], slot.offset).map_err(SpoolError::io(&self.path))?;
            moved.insert(*key, Slot { offset: start as u64, len: slot.len });
        }
        let dir = self.path.parent().map(Path::to_owned).unwrap_or_default();
        replace_file(&dir, &self.path, &buf, self.fsync != FsyncPolicy::Never)?;
        self.file =
            OpenOptions::new().read(true).write(true).open(&self.path).map_err(SpoolError::io(&self.path))?;
        self.len = buf.len() as u64;
        self.outstanding = moved;
        self.unsynced = false;
        Ok(())
    }
}

/// Reads the outstanding events of the journal in spool directory `dir` without opening it for
/// writing (no lock, no repair): for inspection and tests.
pub fn read_pending(dir: &Path) -> Result<Vec<OomEvent>, SpoolError> {
    let path = dir.join(JOURNAL_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(parse(&bytes).0.into_iter().map(|(_, e)| e).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(SpoolError::io(&path)(e)),
    }
}

/// The outstanding events of a journal image, in key order, and what was wrong with it.
fn parse(bytes: &[u8]) -> (Vec<(u64, OomEvent)>, JournalReplay) {
    let scan = segment::scan(bytes);
    let mut replay = JournalReplay {
        corrupt_ranges: scan.skipped.len() as u64,
        truncated_bytes: bytes.len() as u64 - scan.valid_len,
        ..JournalReplay::default()
    };
    let mut pending: BTreeMap<u64, OomEvent> = BTreeMap::new();
    for r in &scan.records {
        let key = r.header.seq;
        if r.header.rows.events == 0 {
            pending.remove(&key);
            continue;
        }
        let event = segment::parse_at(bytes, r.offset as usize)
            .ok()
            .and_then(|(_, frame, _)| Frame::decode(&bytes[frame]).ok())
            .and_then(|f| match f {
                Frame::Batch(b) => b.events.into_iter().next(),
                _ => None,
            });
        match event {
            Some(e) => {
                pending.insert(key, e);
            }
            None => replay.corrupt_ranges += 1,
        }
    }
    (pending.into_iter().collect(), replay)
}

fn encode_pending(key: u64, event: &OomEvent, out: &mut Vec<u8>) -> Result<u32, SpoolError> {
    let frame = Frame::Batch(Batch { events: vec![event.clone()], ..Batch::default() }).encode()?;
    let header = RecordHeader { seq: key, rows: RowCounts { events: 1, ..RowCounts::default() } };
    let len = segment::encode_record(&header, &frame, out)
        .ok_or(SpoolError::TooLarge { seq: key, len: frame.len() })?;
    Ok(len as u32)
}

/// Replaces `path` by `bytes` (temporary file, optional sync, rename, optional directory sync).
fn replace_file(dir: &Path, path: &Path, bytes: &[u8], durable: bool) -> Result<(), SpoolError> {
    let tmp = path.with_extension("journal.tmp");
    let mut f = File::create(&tmp).map_err(SpoolError::io(&tmp))?;
    f.write_all(bytes).map_err(SpoolError::io(&tmp))?;
    if durable {
        f.sync_all().map_err(SpoolError::io(&tmp))?;
    }
    drop(f);
    std::fs::rename(&tmp, path).map_err(SpoolError::io(path))?;
    if durable {
        File::open(dir).and_then(|d| d.sync_all()).map_err(SpoolError::io(dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use oomlens_schema::{EventSource, Label, OomKind};

    use super::*;

    fn event(id: u64, pid: u32) -> OomEvent {
        OomEvent {
            event_id: id,
            ts_ms: 1_000 + id as i64,
            kind: OomKind::SuspectedOom,
            source: EventSource::Nvml,
            gpu_index: Some(1),
            pid: Some(pid),
            labels: vec![Label { key: "k8s.pod".into(), value: format!("pod-{pid}") }],
            ..OomEvent::default()
        }
    }

    fn ids(replay: &JournalReplay) -> Vec<u64> {
        replay.pending.iter().map(|(_, e)| e.event_id).collect()
    }

    #[test]
    fn outstanding_events_survive_a_reopen_done_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        for policy in [FsyncPolicy::Always, FsyncPolicy::Interval, FsyncPolicy::Never] {
            let (mut j, replay) = EventJournal::open(dir.path(), policy).unwrap();
            assert!(replay.pending.is_empty());
            let a = j.append(&event(11, 1)).unwrap();
            let b = j.append(&event(12, 2)).unwrap();
            let c = j.append(&event(13, 3)).unwrap();
            assert!(a < b && b < c);
            j.mark_done(&[b]).unwrap();
            assert_eq!(j.outstanding(), 2);
            drop(j); // as after kill -9: nothing more is written
            let (mut j, replay) = EventJournal::open(dir.path(), policy).unwrap();
            assert_eq!(ids(&replay), vec![11, 13], "{policy:?}");
            assert_eq!(replay.pending[0].1, event(11, 1), "events come back whole");
            assert_eq!((replay.corrupt_ranges, replay.truncated_bytes), (0, 0));
            // Keys carry over; new keys do not collide with them.
            let keys: Vec<u64> = replay.pending.iter().map(|(k, _)| *k).collect();
            let d = j.append(&event(14, 4)).unwrap();
            assert!(keys.iter().all(|k| *k < d));
            j.mark_done(&keys).unwrap();
            j.mark_done(&[d]).unwrap();
            assert_eq!((j.outstanding(), j.bytes()), (0, 0), "emptied when nothing is outstanding");
            drop(j);
            let (_, replay) = EventJournal::open(dir.path(), policy).unwrap();
            assert!(replay.pending.is_empty());
        }
    }

    #[test]
    fn a_torn_tail_is_truncated_and_the_intact_records_replay() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = EventJournal::open(dir.path(), FsyncPolicy::Never).unwrap();
        j.append(&event(1, 1)).unwrap();
        let k2 = j.append(&event(2, 2)).unwrap();
        let two = j.bytes();
        j.append(&event(3, 3)).unwrap();
        let three = j.bytes();
        j.mark_done(&[k2]).unwrap();
        drop(j);
        let path = dir.path().join(JOURNAL_FILE);
        let full = std::fs::read(&path).unwrap();
        assert!(full.len() as u64 > three);
        // Every cut inside the third event's record, then inside the done record of the second.
        for cut in two as usize + 1..full.len() {
            std::fs::write(&path, &full[..cut]).unwrap();
            let want: Vec<u64> = if (cut as u64) < three { vec![1, 2] } else { vec![1, 2, 3] };
            assert_eq!(
                read_pending(dir.path()).unwrap().iter().map(|e| e.event_id).collect::<Vec<_>>(),
                want
            );
            let (mut j, replay) = EventJournal::open(dir.path(), FsyncPolicy::Never).unwrap();
            assert_eq!(ids(&replay), want, "cut at {cut}");
            let torn = if (cut as u64) < three { cut as u64 - two } else { cut as u64 - three };
            assert_eq!(replay.truncated_bytes, torn, "cut at {cut}");
            assert_eq!(replay.corrupt_ranges, 0, "cut at {cut}: a torn tail is not corruption");
            // The repaired journal takes new records after the intact ones.
            j.append(&event(9, 9)).unwrap();
            drop(j);
            let (_, again) = EventJournal::open(dir.path(), FsyncPolicy::Never).unwrap();
            let mut with_new = want.clone();
            with_new.push(9);
            assert_eq!(ids(&again), with_new, "cut at {cut}");
            assert_eq!((again.truncated_bytes, again.corrupt_ranges), (0, 0));
        }
    }

    #[test]
    fn a_corrupt_record_is_skipped_with_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = EventJournal::open(dir.path(), FsyncPolicy::Never).unwrap();
        j.append(&event(1, 1)).unwrap();
        let mid = j.bytes();
        j.append(&event(2, 2)).unwrap();
        j.append(&event(3, 3)).unwrap();
        drop(j);
        let path = dir.path().join(JOURNAL_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[mid as usize + 40] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
        let (_, replay) = EventJournal::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert_eq!(ids(&replay), vec![1, 3]);
        assert_eq!(replay.corrupt_ranges, 1);
    }

    #[test]
    fn the_file_stays_bounded_under_a_steady_flow_of_events() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = EventJournal::open(dir.path(), FsyncPolicy::Never).unwrap();
        // One event always outstanding, so the file is never emptied: compaction bounds it.
        let mut held = j.append(&event(0, 1)).unwrap();
        let mut max = 0;
        for i in 1..20_000u64 {
            let k = j.append(&OomEvent { raw_message: "x".repeat(200), ..event(i, 2) }).unwrap();
            j.mark_done(&[held]).unwrap();
            held = k;
            max = max.max(j.bytes());
        }
        assert!(max <= COMPACT_BYTES + 4096, "journal grew to {max} bytes");
        assert_eq!(j.outstanding(), 1);
        drop(j);
        let (_, replay) = EventJournal::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert_eq!(ids(&replay), vec![19_999]);
    }
}
