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
