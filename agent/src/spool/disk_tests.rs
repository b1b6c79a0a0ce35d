//! Tests of the disk spool: round trip, replay, torn tails, corruption, cap, deletion on ack.

use std::path::Path;

use super::super::test_util::{batch, decode};
use super::*;

const BIG: u64 = 64 * 1024 * 1024;

fn open(dir: &Path, max: u64) -> (DiskSpool, SpoolState) {
    DiskSpool::open(dir, max, FsyncPolicy::Never).unwrap()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).and_then(segment::parse_segment_name).is_some())
        .collect();
    v.sort();
    v
}

fn pending(s: &mut DiskSpool) -> Vec<PendingBatch> {
    let mut out = Vec::new();
    let mut after = 0;
    while let Some(b) = s.next_after(after).unwrap() {
        after = b.seq;
        out.push(b);
    }
    out
}

fn seqs(s: &mut DiskSpool) -> Vec<u64> {
    pending(s).iter().map(|b| b.seq).collect()
}

#[test]
fn batches_round_trip_and_acks_are_cumulative() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, st) = open(dir.path(), BIG);
    assert_eq!(st.next_seq, 1);
    assert_ne!(st.boot_id, 0);
    let sent: Vec<PendingBatch> = (1..=5).map(|seq| batch(seq, 3, (seq % 2) as usize)).collect();
    for b in &sent {
        assert_eq!(s.push(b.clone()).unwrap(), Dropped::default());
    }
    let got = pending(&mut s);
    assert_eq!(got.len(), 5);
    for (a, b) in sent.iter().zip(&got) {
        assert_eq!((a.seq, &a.frame, a.rows), (b.seq, &b.frame, b.rows));
    }
    assert_eq!(s.ack_through(2), 2);
    assert_eq!(s.first_seq(), Some(3));
    assert_eq!(s.next_after(0).unwrap().map(|b| b.seq), Some(3));
    assert_eq!(s.next_after(4).unwrap().map(|b| b.seq), Some(5));
    assert!(s.next_after(5).unwrap().is_none());
    assert_eq!(s.ack_through(10), 3);
    assert!(s.is_empty());
    assert_eq!(s.bytes(), 0);
    assert!(segments(dir.path()).is_empty(), "acknowledged segments are deleted");
    assert!(matches!(s.push(batch(5, 1, 0)), Err(SpoolError::OutOfOrder { .. })));
}

#[test]
fn reopening_replays_pending_batches_under_the_same_boot_id() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, st) = open(dir.path(), BIG);
    for seq in 1..=6 {
        s.push(batch(seq, 2, 1)).unwrap();
    }
    s.ack_through(2);
    drop(s);
    let (mut s, st2) = open(dir.path(), BIG);
    assert_eq!(st2.boot_id, st.boot_id);
    assert_eq!(st2.next_seq, 7);
    assert_eq!(st2.recovery.replayed_batches, 4);
    assert_eq!(st2.recovery.replayed_rows.events, 4);
    assert_eq!(seqs(&mut s), [3, 4, 5, 6]);
    assert_eq!(decode(&s.next_after(0).unwrap().unwrap()).events[0].event_id, 3000);
    // New batches continue the sequence, in a new segment.
    s.push(batch(7, 1, 0)).unwrap();
    assert_eq!(segments(dir.path()).len(), 2);
    s.ack_through(7);
    drop(s);
    let (mut s, st3) = open(dir.path(), BIG);
    assert_eq!((st3.boot_id, st3.next_seq), (st.boot_id, 8));
    assert!(s.is_empty() && seqs(&mut s).is_empty());
    assert!(segments(dir.path()).is_empty());
}

#[test]
fn a_second_agent_cannot_open_a_spool_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, _) = open(dir.path(), BIG);
    let err = DiskSpool::open(dir.path(), BIG, FsyncPolicy::Always).unwrap_err();
    assert!(matches!(err, SpoolError::Locked(_)), "{err}");
}

#[test]
fn a_torn_tail_is_truncated_at_every_byte_offset_of_the_last_record() {
    let src = tempfile::tempdir().unwrap();
    let (mut s, st) = open(src.path(), BIG);
    for seq in 1..=3 {
        s.push(batch(seq, 1, 1)).unwrap();
    }
    drop(s);
    let seg = segments(src.path()).pop().unwrap();
    let full = std::fs::read(&seg).unwrap();
    let last_start = segment::scan(&full).records[2].offset as usize;
    let meta = std::fs::read(src.path().join("meta")).unwrap();
    for cut in last_start..full.len() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("meta"), &meta).unwrap();
        let seg_path = dir.path().join(seg.file_name().unwrap());
        std::fs::write(&seg_path, &full[..cut]).unwrap();
        let (mut s, st2) = open(dir.path(), BIG);
        assert_eq!(st2.boot_id, st.boot_id);
        assert_eq!(seqs(&mut s), [1, 2], "cut at {cut}");
        assert_eq!(st2.recovery.truncated_bytes, (cut - last_start) as u64, "cut at {cut}");
        assert_eq!(std::fs::metadata(&seg_path).unwrap().len(), last_start as u64, "tail truncated on disk");
        if cut > last_start {
            assert!(st2.next_seq > 3 + SEQ_GAP_AFTER_LOSS - 1, "a lost seq is never reused");
        } else {
            assert_eq!(st2.next_seq, 4);
        }
        // The spool keeps working, and a second reopen finds nothing to repair.
        let next = st2.next_seq;
        s.push(batch(next, 1, 1)).unwrap();
        drop(s);
        let (mut s, st3) = open(dir.path(), BIG);
        assert_eq!(st3.recovery.truncated_bytes, 0);
        assert_eq!(seqs(&mut s), [1, 2, next]);
    }
}

#[test]
fn a_corrupt_record_in_the_middle_is_skipped_and_the_rest_replays() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = open(dir.path(), BIG);
    for seq in 1..=4 {
        s.push(batch(seq, 4, 1)).unwrap();
    }
    drop(s);
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let r = segment::scan(&bytes).records[1];
    bytes[r.offset as usize + r.len as usize / 2] ^= 0x5a;
    std::fs::write(&seg, &bytes).unwrap();
    let (mut s, st) = open(dir.path(), BIG);
    assert_eq!(seqs(&mut s), [1, 3, 4]);
    assert_eq!(st.recovery.corrupt_ranges, 1);
    assert_eq!(st.recovery.corrupt_bytes, u64::from(r.len));
    assert_eq!(st.recovery.truncated_bytes, 0);
}

#[test]
fn corruption_found_when_reading_back_skips_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = open(dir.path(), BIG);
    for seq in 1..=3 {
        s.push(batch(seq, 4, 0)).unwrap();
    }
    let seg = segments(dir.path()).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    let r = segment::scan(&bytes).records[1];
    let f = OpenOptions::new().write(true).open(&seg).unwrap();
    f.write_all_at(&[0xff], r.offset + u64::from(r.len) - 1).unwrap();
    assert_eq!(seqs(&mut s), [1, 3]);
    assert_eq!(s.len(), 2);
}

#[test]
fn a_lost_meta_file_replays_everything_under_a_new_boot_id() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, st) = open(dir.path(), BIG);
    for seq in 1..=3 {
        s.push(batch(seq, 1, 1)).unwrap();
    }
    drop(s);
    std::fs::write(dir.path().join("meta"), b"garbage").unwrap();
    let (mut s, st2) = open(dir.path(), BIG);
    assert!(st2.recovery.meta_lost);
    assert_ne!(st2.boot_id, st.boot_id);
    assert_eq!(seqs(&mut s), [1, 2, 3]);
    assert_eq!(st2.next_seq, 4);
}

#[test]
fn the_cap_drops_the_oldest_samples_and_never_events() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(1, 200, 1).frame.len() as u64;
    let max = 1024 * 1024;
    let (mut s, _) = open(dir.path(), max);
    let mut dropped = RowCounts::default();
    let (mut samples_in, mut events_in) = (0, 0);
    let n = 3 * max / one;
    for seq in 1..=n {
        let events = usize::from(seq % 3 == 0);
        s.push(batch(seq, 200, events)).map(|d| dropped.add(d.rows)).unwrap();
        samples_in += 200;
        events_in += events as u64;
        assert!(s.bytes() as u64 <= max, "over the cap after seq {seq}: {}", s.bytes());
    }
    assert!(dropped.gpu_samples > 0);
    assert_eq!(dropped.events, 0);
    let check = |s: &mut DiskSpool| {
        let all = pending(s);
        let events: usize = all.iter().map(|b| decode(b).events.len()).sum();
        let samples: u64 = all.iter().map(|b| decode(b).gpu_samples.len() as u64).sum();
        assert_eq!(events as u64, events_in, "every event is kept");
        assert_eq!(samples + dropped.gpu_samples, samples_in, "every dropped row is counted");
        // The samples kept are the newest ones.
        let first_with_samples = all.iter().find(|b| b.rows.gpu_samples > 0).map(|b| b.seq).unwrap();
        assert!(all.iter().filter(|b| b.seq > first_with_samples).all(|b| b.rows.gpu_samples == 200));
        assert!(all.iter().all(|b| b.rows.gpu_samples == decode(b).gpu_samples.len() as u64));
    };
    check(&mut s);
    drop(s);
    let (mut s, st) = open(dir.path(), max);
    assert_eq!(st.next_seq, n + 1);
    check(&mut s);
}

#[test]
fn over_the_cap_with_only_events_left_events_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let max = 1024 * 1024;
    let (mut s, _) = open(dir.path(), max);
    let one = batch(1, 0, 50).frame.len() as u64;
    let n = 2 * max / one;
    for seq in 1..=n {
        assert_eq!(s.push(batch(seq, 0, 50)).unwrap(), Dropped::default());
    }
    assert!(s.bytes() as u64 > max);
    assert_eq!(s.len() as u64, n);
    let events: usize = pending(&mut s).iter().map(|b| decode(b).events.len()).sum();
    assert_eq!(events as u64, 50 * n);
}

#[test]
fn acknowledgements_delete_whole_segments() {
    let dir = tempfile::tempdir().unwrap();
    let max = 1024 * 1024; // 128 KiB segments
    let (mut s, _) = open(dir.path(), 64 * max);
    let one = batch(1, 100, 0).frame.len() as u64;
    let n = 4 * s.segment_bytes / one;
    for seq in 1..=n {
        s.push(batch(seq, 100, 0)).unwrap();
    }
    let before = segments(dir.path()).len();
    assert!(before >= 4, "{before} segments");
    assert_eq!(before, s.segment_count());
    s.ack_through(n / 2);
    let middle = segments(dir.path()).len();
    assert!(middle < before && middle >= before / 2 - 1, "{before} -> {middle}");
    assert_eq!(s.first_seq(), Some(n / 2 + 1));
    let bytes_on_disk: u64 = segments(dir.path()).iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(bytes_on_disk, s.bytes() as u64);
    s.ack_through(n);
    assert!(segments(dir.path()).is_empty());
    assert_eq!(s.bytes(), 0);
}

#[test]
fn every_fsync_policy_round_trips() {
    for policy in [FsyncPolicy::Always, FsyncPolicy::Interval, FsyncPolicy::Never] {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, st) = DiskSpool::open(dir.path(), BIG, policy).unwrap();
        for seq in 1..=3 {
            s.push(batch(seq, 1, 1)).unwrap();
        }
        s.ack_through(1);
        drop(s);
        let (mut s, st2) = DiskSpool::open(dir.path(), BIG, policy).unwrap();
        assert_eq!(st2.boot_id, st.boot_id);
        assert_eq!(seqs(&mut s), [2, 3], "{policy:?}");
    }
}

use oomlens_devkit::tinyfs::TinyFs;

#[test]
fn a_full_disk_keeps_every_batch_in_memory_and_moves_them_back_in_order() {
    let Some(fs) = TinyFs::mount(512 * 1024) else { return };
    let dir = fs.path().join("spool");
    let (mut s, st) = open(&dir, BIG);
    let degraded = Degraded::default();
    s.set_memory_fallback(64 << 20, degraded.clone());
    // ~34 KiB per batch: the 512 KiB disk refuses after about fifteen.
    let mut seq = st.next_seq;
    while s.degraded_reason().is_none() {
        assert_eq!(s.push(batch(seq, 300, 1)).unwrap(), Dropped::default());
        seq += 1;
        assert!(seq < 100, "the disk never filled up");
    }
    for _ in 0..10 {
        s.push(batch(seq, 300, 1)).unwrap();
        seq += 1;
    }
    let issued = seq - 1;
    assert!(s.batches_in_memory() >= 10);
    assert!(degraded.summary().unwrap().contains("the disk refused a write"), "{:?}", degraded.summary());
    // Nothing lost, in order, disk and memory together.
    assert_eq!(seqs(&mut s), (st.next_seq..=issued).collect::<Vec<_>>());
    assert_eq!(s.len() as u64, issued - st.next_seq + 1);
    // Acknowledging what is on disk frees it: the batches in memory move there, in order.
    let on_disk = s.index.last_key_value().map(|(k, _)| *k).unwrap();
    s.ack_through(on_disk);
    assert_eq!(s.batches_in_memory(), 0, "moved to disk once it had room");
    assert!(s.degraded_reason().is_none() && degraded.summary().is_none());
    assert_eq!(seqs(&mut s), (on_disk + 1..=issued).collect::<Vec<_>>());
    for b in pending(&mut s) {
        assert_eq!(decode(&b).events.len(), 1);
    }
}

#[test]
fn a_full_disk_drops_old_samples_beyond_the_memory_cap_never_events() {
    let Some(fs) = TinyFs::mount(512 * 1024) else { return };
    let dir = fs.path().join("spool");
    let (mut s, st) = open(&dir, BIG);
    let one = batch(1, 2000, 1).frame.len();
    s.set_memory_fallback(one * 3, Degraded::default());
    let mut dropped = RowCounts::default();
    let mut seq = st.next_seq;
    for _ in 0..40 {
        dropped.add(s.push(batch(seq, 2000, 1)).unwrap().rows);
        seq += 1;
    }
    assert!(dropped.gpu_samples > 0 && dropped.events == 0, "{dropped:?}");
    // Every batch is still there with its event; the oldest samples went first.
    let all = pending(&mut s);
    assert_eq!(all.iter().map(|b| b.seq).collect::<Vec<_>>(), (st.next_seq..seq).collect::<Vec<_>>());
    assert!(all.iter().all(|b| decode(b).events.len() == 1));
    let kept: u64 = all.iter().map(|b| b.rows.gpu_samples).sum();
    assert_eq!(kept + dropped.gpu_samples, 2000 * 40);
    assert_eq!(all[0].rows.gpu_samples, 0, "the oldest samples are dropped first");
    assert_eq!(all.last().unwrap().rows.gpu_samples, 2000, "the newest are kept");
}

#[test]
fn sequence_numbers_of_batches_in_memory_are_never_reused_after_a_restart() {
    let Some(fs) = TinyFs::mount(256 * 1024) else { return };
    let dir = fs.path().join("spool");
    let (mut s, st) = open(&dir, BIG);
    let mut seq = st.next_seq;
    while s.batches_in_memory() < 3 {
        s.push(batch(seq, 2000, 1)).unwrap();
        seq += 1;
    }
    let issued = seq - 1;
    // Killed while batches wait in memory: the lock goes as with a kill, and `mem::forget` skips
    // the close (its last attempt to write them).
    rustix::fs::flock(&s._lock, rustix::fs::FlockOperation::Unlock).unwrap();
    std::mem::forget(s);
    let (_s, st2) = DiskSpool::open(&dir, BIG, FsyncPolicy::Never).unwrap();
    assert!(
        st2.boot_id != st.boot_id || st2.next_seq > issued,
        "seq {} would be reused under boot id {} (issued up to {issued})",
        st2.next_seq,
        st2.boot_id
    );
}
