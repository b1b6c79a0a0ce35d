//! The on-disk record format of the disk spool and the scanner that recovers records from a
//! segment file, skipping corrupt ranges and finding a torn tail. Pure: no I/O.
//!
//! A segment file (`seg-<first seq, 20 digits>.log`) is a sequence of records:
//!
//! ```text
//! magic "OSR1" | body length u32 LE | CRC32 of the body u32 LE | body
//! body = seq u64 | gpu_samples u32 | process_samples u32 | events u32 | flags u32 (bit 0: has events)
//!        | the encoded Batch frame
//! ```
//!
//! A record whose magic, length or checksum does not hold is bad. The scanner then looks for the
//! next valid record (by its magic and checksum): if one exists, the bad range is skipped (corrupt
//! middle); if none does, the file is torn from that offset on (an interrupted write).

use std::ops::Range;

use oomlens_schema::HEADER_LEN;
use oomlens_schema::limits::MAX_FRAME_PAYLOAD;

use super::RowCounts;

/// Marks the start of every record.
pub const RECORD_MAGIC: [u8; 4] = *b"OSR1";
/// Magic, length and checksum.
pub const PREFIX_LEN: usize = 12;
/// Sequence number, row counts and flags.
pub const BODY_HEADER_LEN: usize = 24;
/// Largest body a record may have (a maximal frame plus the body header).
pub const MAX_BODY_LEN: usize = BODY_HEADER_LEN + HEADER_LEN + MAX_FRAME_PAYLOAD as usize;
/// Offset of the frame inside a record.
pub const FRAME_OFFSET: usize = PREFIX_LEN + BODY_HEADER_LEN;

const FLAG_HAS_EVENTS: u32 = 1;

/// What a record says about its batch, readable without decoding the frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// Batch sequence number.
    pub seq: u64,
    /// Rows of the batch.
    pub rows: RowCounts,
}

impl RecordHeader {
    /// True when the batch carries events (such a record is never dropped to make room).
    pub fn has_events(&self) -> bool {
        self.rows.events > 0
    }
}

/// Appends one record to `out`. `None` when the frame is too large for a record.
pub fn encode_record(header: &RecordHeader, frame: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let body_len = BODY_HEADER_LEN + frame.len();
    if body_len > MAX_BODY_LEN {
        return None;
    }
    let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&header.seq.to_le_bytes());
    out.extend_from_slice(&clamp(header.rows.gpu_samples).to_le_bytes());
    out.extend_from_slice(&clamp(header.rows.process_samples).to_le_bytes());
    out.extend_from_slice(&clamp(header.rows.events).to_le_bytes());
    let flags = if header.has_events() { FLAG_HAS_EVENTS } else { 0 };
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(frame);
    let crc = crc32fast::hash(&out[start + PREFIX_LEN..]);
    out[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
    Some(out.len() - start)
}

/// Why the bytes at an offset are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRecord {
    /// Fewer bytes left than the record needs.
    Incomplete,
    /// The magic does not match.
    Magic,
    /// The length is impossible.
    Length,
    /// The checksum does not match.
    Checksum,
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    let mut b = [0; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Parses the record starting at `at`: its header, the frame's byte range and the record's end.
pub fn parse_at(buf: &[u8], at: usize) -> Result<(RecordHeader, Range<usize>, usize), BadRecord> {
    let rest = buf.get(at..).ok_or(BadRecord::Incomplete)?;
    if rest.len() < PREFIX_LEN {
        return Err(if RECORD_MAGIC.starts_with(&rest[..rest.len().min(4)]) {
            BadRecord::Incomplete
        } else {
            BadRecord::Magic
        });
    }
    if rest[..4] != RECORD_MAGIC {
        return Err(BadRecord::Magic);
    }
    let body_len = u32_at(rest, 4) as usize;
    if !(BODY_HEADER_LEN..=MAX_BODY_LEN).contains(&body_len) {
        return Err(BadRecord::Length);
    }
    let end = PREFIX_LEN + body_len;
    if rest.len() < end {
        return Err(BadRecord::Incomplete);
    }
    let body = &rest[PREFIX_LEN..end];
    if crc32fast::hash(body) != u32_at(rest, 8) {
        return Err(BadRecord::Checksum);
    }
    let header = RecordHeader {
        seq: u64_at(body, 0),
        rows: RowCounts {
            gpu_samples: u64::from(u32_at(body, 8)),
            process_samples: u64::from(u32_at(body, 12)),
            events: u64::from(u32_at(body, 16)),
        },
    };
    Ok((header, at + FRAME_OFFSET..at + end, at + end))
}

/// A valid record found by [`scan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScannedRecord {
    /// Offset of the record in the file.
    pub offset: u64,
    /// Length of the whole record.
    pub len: u32,
    /// Its header.
    pub header: RecordHeader,
}

/// What a segment file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Valid records, in file order.
    pub records: Vec<ScannedRecord>,
    /// Corrupt byte ranges followed by a valid record (skipped).
    pub skipped: Vec<Range<u64>>,
    /// Where the valid part of the file ends; bytes after it are a torn tail.
    pub valid_len: u64,
}

/// Scans a whole segment. Never panics; linear in the input (each offset is tried at most once).
pub fn scan(buf: &[u8]) -> Scan {
    let mut out = Scan::default();
    let mut at = 0;
    while at < buf.len() {
        match parse_at(buf, at) {
            Ok((header, _, end)) => {
                out.records.push(ScannedRecord { offset: at as u64, len: (end - at) as u32, header });
                at = end;
            }
            Err(_) => match resync(buf, at + 1) {
                Some(next) => {
                    out.skipped.push(at as u64..next as u64);
                    at = next;
                }
                None => {
                    out.valid_len = at as u64;
                    return out;
                }
            },
        }
    }
    out.valid_len = at as u64;
    out
}

/// The first offset at or after `from` where a valid record starts.
fn resync(buf: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while at + PREFIX_LEN <= buf.len() {
        let pos = buf[at..].windows(4).position(|w| w == RECORD_MAGIC)?;
        at += pos;
        if parse_at(buf, at).is_ok() {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// File name of the segment whose first record has `first_seq`.
pub fn segment_name(first_seq: u64) -> String {
    format!("seg-{first_seq:020}.log")
}

/// The id (first seq) of a segment file name, `None` for other files.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("seg-")?.strip_suffix(".log")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(seq: u64, frame: &[u8], events: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let h = RecordHeader { seq, rows: RowCounts { gpu_samples: 3, process_samples: 4, events } };
        encode_record(&h, frame, &mut out).unwrap();
        out
    }

    #[test]
    fn records_round_trip() {
        let mut buf = record(7, b"frame-bytes", 1);
        buf.extend(record(8, b"", 0));
        let s = scan(&buf);
        assert_eq!(s.records.len(), 2);
        assert!(s.skipped.is_empty());
        assert_eq!(s.valid_len, buf.len() as u64);
        let (h, frame, _) = parse_at(&buf, 0).unwrap();
        assert_eq!(h.seq, 7);
        assert!(h.has_events());
        assert_eq!(h.rows.process_samples, 4);
        assert_eq!(&buf[frame], b"frame-bytes");
        assert_eq!(s.records[1].header.seq, 8);
        assert!(!s.records[1].header.has_events());
    }

    #[test]
    fn a_torn_tail_is_found_at_every_offset() {
        let mut buf = record(1, &[9; 100], 0);
        let first = buf.len();
        buf.extend(record(2, &[8; 100], 1));
        for cut in first..buf.len() {
            let s = scan(&buf[..cut]);
            assert_eq!(s.records.len(), 1, "cut at {cut}");
            assert_eq!(s.valid_len, first as u64, "cut at {cut}");
            assert!(s.skipped.is_empty());
        }
    }

    #[test]
    fn a_corrupt_middle_record_is_skipped() {
        let mut buf = record(1, &[1; 50], 0);
        let a = buf.len();
        buf.extend(record(2, &[2; 50], 0));
        let b = buf.len();
        buf.extend(record(3, &[3; 50], 1));
        buf[a + 40] ^= 0xff;
        let s = scan(&buf);
        let seqs: Vec<u64> = s.records.iter().map(|r| r.header.seq).collect();
        assert_eq!(seqs, [1, 3]);
        assert_eq!(s.skipped, vec![a as u64..b as u64]);
        assert_eq!(s.valid_len, buf.len() as u64);
    }

    #[test]
    fn a_corrupt_length_is_skipped_by_resync() {
        let mut buf = record(1, &[1; 50], 0);
        let a = buf.len();
        buf.extend(record(2, &[2; 50], 0));
        buf.extend(record(3, &[3; 50], 0));
        buf[a + 4..a + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        let seqs: Vec<u64> = scan(&buf).records.iter().map(|r| r.header.seq).collect();
        assert_eq!(seqs, [1, 3]);
    }

    #[test]
    fn segment_names_sort_and_parse() {
        assert_eq!(parse_segment_name(&segment_name(42)), Some(42));
        assert!(segment_name(9) < segment_name(10));
        for bad in ["seg-.log", "seg-12.log.tmp", "meta", "seg-1x.log", "seg-99999999999999999999999.log"] {
            assert_eq!(parse_segment_name(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn scanning_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let s = scan(&bytes);
            prop_assert!(s.valid_len as usize <= bytes.len());
        }

        #[test]
        fn mutated_segments_keep_every_untouched_record(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..8),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..3),
        ) {
            let mut buf = Vec::new();
            let mut spans = Vec::new();
            for (i, f) in frames.iter().enumerate() {
                let start = buf.len();
                let mut rec = Vec::new();
                encode_record(&RecordHeader { seq: i as u64 + 1, rows: RowCounts::default() }, f, &mut rec).unwrap();
                buf.extend(rec);
                spans.push(start..buf.len());
            }
            let orig = buf.clone();
            for (idx, x) in &flips {
                let at = idx.index(buf.len());
                buf[at] ^= x;
            }
            let touched: Vec<bool> = spans.iter().map(|s| buf[s.clone()] != orig[s.clone()]).collect();
            let s = scan(&buf);
            let found: Vec<u64> = s.records.iter().map(|r| r.header.seq).collect();
            for (i, t) in touched.iter().enumerate() {
                let seq = i as u64 + 1;
                // Every intact record is found (resync), every damaged one is rejected (CRC).
                if !t { prop_assert!(found.contains(&seq), "record {} lost: {:?}", seq, found); }
                else { prop_assert!(!found.contains(&seq)); }
            }
        }
    }
}
