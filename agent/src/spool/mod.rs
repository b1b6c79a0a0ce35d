//! The spool: batches between the sampler and the uplink, kept until a collector acknowledges them.
//!
//! This is the seam for the on-disk spool: [`Spool`] is what the uplink needs; [`MemorySpool`] keeps
//! encoded batches in memory under a byte cap. When the cap is reached the oldest *samples* are
//! dropped first (their batch is re-encoded with its events only) — OOM events are never dropped —
//! and every dropped row is reported to the caller for metrics and logs.

use std::collections::VecDeque;

use oomlens_schema::{Batch, Frame, FrameError};

/// Rows of a batch, by table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowCounts {
    /// GPU samples.
    pub gpu_samples: u64,
    /// Process samples.
    pub process_samples: u64,
    /// Events.
    pub events: u64,
}

impl RowCounts {
    /// Counts the rows of a batch.
    pub fn of(batch: &Batch) -> Self {
        RowCounts {
            gpu_samples: batch.gpu_samples.len() as u64,
            process_samples: batch.process_samples.len() as u64,
            events: batch.events.len() as u64,
        }
    }

    /// Adds another count.
    pub fn add(&mut self, other: RowCounts) {
        self.gpu_samples += other.gpu_samples;
        self.process_samples += other.process_samples;
        self.events += other.events;
    }
}

/// One encoded batch waiting for its acknowledgement.
#[derive(Debug, Clone)]
pub struct PendingBatch {
    /// Sequence number.
    pub seq: u64,
    /// The encoded `Batch` frame, ready to write.
    pub frame: Vec<u8>,
    /// Rows it carries.
    pub rows: RowCounts,
}

impl PendingBatch {
    /// Encodes a batch.
    pub fn encode(batch: Batch) -> Result<Self, FrameError> {
        let rows = RowCounts::of(&batch);
        let seq = batch.seq;
        let frame = Frame::Batch(batch).encode()?;
        Ok(PendingBatch { seq, frame, rows })
    }
}

/// What making room cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Rows dropped.
    pub rows: RowCounts,
}

/// Holds batches until acknowledged.
pub trait Spool: Send {
    /// Adds a batch (sequence numbers strictly increase), making room by dropping old samples.
    fn push(&mut self, batch: PendingBatch) -> Result<Dropped, FrameError>;
    /// The first pending batch with `seq > after`.
    fn next_after(&self, after: u64) -> Option<&PendingBatch>;
    /// Forgets every batch with `seq <= seq`; returns how many.
    fn ack_through(&mut self, seq: u64) -> usize;
    /// Pending batches.
    fn len(&self) -> usize;
    /// True when nothing is pending.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes held.
    fn bytes(&self) -> usize;
    /// Lowest pending sequence number.
    fn first_seq(&self) -> Option<u64>;
}

/// In-memory spool with a byte cap.
#[derive(Debug)]
pub struct MemorySpool {
    queue: VecDeque<PendingBatch>,
    bytes: usize,
    max_bytes: usize,
}

impl MemorySpool {
    /// A spool holding at most `max_bytes` of encoded batches (events may exceed it: they are never dropped).
    pub fn new(max_bytes: usize) -> Self {
        MemorySpool { queue: VecDeque::new(), bytes: 0, max_bytes }
    }

    /// Strips the samples of the oldest batch that still has some. Returns false when none has.
    fn drop_oldest_samples(&mut self, dropped: &mut Dropped) -> Result<bool, FrameError> {
        let Some(pos) = self.queue.iter().position(|b| b.rows.gpu_samples + b.rows.process_samples > 0)
        else {
            return Ok(false);
        };
        let old = &self.queue[pos];
        let Frame::Batch(mut batch) = Frame::decode(&old.frame)? else {
            return Ok(false);
        };
        dropped.rows.gpu_samples += batch.gpu_samples.len() as u64;
        dropped.rows.process_samples += batch.process_samples.len() as u64;
        batch.gpu_samples.clear();
        batch.process_samples.clear();
        let replacement = PendingBatch::encode(batch)?;
        self.bytes = self.bytes - old.frame.len() + replacement.frame.len();
        self.queue[pos] = replacement;
        Ok(true)
    }
}

impl Spool for MemorySpool {
    fn push(&mut self, batch: PendingBatch) -> Result<Dropped, FrameError> {
        let mut dropped = Dropped::default();
        self.bytes += batch.frame.len();
        self.queue.push_back(batch);
        while self.bytes > self.max_bytes && self.drop_oldest_samples(&mut dropped)? {}
        Ok(dropped)
    }

    fn next_after(&self, after: u64) -> Option<&PendingBatch> {
        self.queue.iter().find(|b| b.seq > after)
    }

    fn ack_through(&mut self, seq: u64) -> usize {
        let mut n = 0;
        while self.queue.front().is_some_and(|b| b.seq <= seq) {
            if let Some(b) = self.queue.pop_front() {
                self.bytes -= b.frame.len();
                n += 1;
            }
        }
        n
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn bytes(&self) -> usize {
        self.bytes
    }

    fn first_seq(&self) -> Option<u64> {
        self.queue.front().map(|b| b.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomlens_schema::{GpuSample, OomEvent};

    fn batch(seq: u64, samples: usize, events: usize) -> PendingBatch {
        PendingBatch::encode(Batch {
            seq,
            gpu_samples: vec![GpuSample::default(); samples],
            events: vec![OomEvent { event_id: seq, ..OomEvent::default() }; events],
            ..Batch::default()
        })
        .unwrap()
    }

    #[test]
    fn acks_are_cumulative_and_resend_starts_after_the_ack() {
        let mut s = MemorySpool::new(1 << 20);
        for seq in 1..=5 {
            s.push(batch(seq, 1, 0)).unwrap();
        }
        assert_eq!(s.ack_through(2), 2);
        assert_eq!(s.first_seq(), Some(3));
        assert_eq!(s.next_after(0).map(|b| b.seq), Some(3));
        assert_eq!(s.next_after(4).map(|b| b.seq), Some(5));
        assert!(s.next_after(5).is_none());
        assert_eq!(s.ack_through(10), 3);
        assert!(s.is_empty());
        assert_eq!(s.bytes(), 0);
    }

    #[test]
    fn a_full_spool_drops_oldest_samples_but_never_events() {
        let one = batch(1, 100, 1).frame.len();
        let mut s = MemorySpool::new(one * 5 / 2);
        s.push(batch(1, 100, 1)).unwrap();
        s.push(batch(2, 100, 1)).unwrap();
        let dropped = s.push(batch(3, 100, 1)).unwrap();
        assert_eq!(dropped.rows.gpu_samples, 100);
        assert_eq!(s.len(), 3);
        assert!(s.bytes() <= one * 5 / 2);
        let Frame::Batch(first) = Frame::decode(&s.next_after(0).unwrap().frame).unwrap() else { panic!() };
        assert!(first.gpu_samples.is_empty());
        assert_eq!(first.events.len(), 1);
    }
}
