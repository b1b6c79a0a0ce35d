//! [`MemorySpool`]: encoded batches in memory under a byte cap (lost when the agent stops).

use std::collections::VecDeque;

use super::{Dropped, PendingBatch, Spool, SpoolError};

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

    /// Changes the cap (applied from the next push).
    pub fn set_max_bytes(&mut self, max_bytes: usize) {
        self.max_bytes = max_bytes;
    }

    /// The cap.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Strips the samples of the oldest batch that still has some. Returns false when none has.
    fn drop_oldest_samples(&mut self, dropped: &mut Dropped) -> Result<bool, SpoolError> {
        let Some(pos) = self.queue.iter().position(|b| b.rows.samples() > 0) else {
            return Ok(false);
        };
        let old = &self.queue[pos];
        let Some((replacement, rows)) = old.strip_samples()? else {
            return Ok(false);
        };
        dropped.rows.add(rows);
        self.bytes = self.bytes - old.frame.len() + replacement.frame.len();
        self.queue[pos] = replacement;
        Ok(true)
    }
}

impl Spool for MemorySpool {
    fn push(&mut self, batch: PendingBatch) -> Result<Dropped, SpoolError> {
        let mut dropped = Dropped::default();
        self.bytes += batch.frame.len();
        self.queue.push_back(batch);
        while self.bytes > self.max_bytes && self.drop_oldest_samples(&mut dropped)? {}
        Ok(dropped)
    }

    fn next_after(&mut self, after: u64) -> Result<Option<PendingBatch>, SpoolError> {
        Ok(self.queue.iter().find(|b| b.seq > after).cloned())
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
    use super::super::test_util::{batch, decode};
    use super::*;

    #[test]
    fn acks_are_cumulative_and_resend_starts_after_the_ack() {
        let mut s = MemorySpool::new(1 << 20);
        for seq in 1..=5 {
            s.push(batch(seq, 1, 0)).unwrap();
        }
        assert_eq!(s.ack_through(2), 2);
        assert_eq!(s.first_seq(), Some(3));
        assert_eq!(s.next_after(0).unwrap().map(|b| b.seq), Some(3));
        assert_eq!(s.next_after(4).unwrap().map(|b| b.seq), Some(5));
        assert!(s.next_after(5).unwrap().is_none());
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
        let first = decode(&s.next_after(0).unwrap().unwrap());
        assert!(first.gpu_samples.is_empty());
        assert_eq!(first.events.len(), 1);
    }
}
