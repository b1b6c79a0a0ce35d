//! The spool: batches between the sampler and the uplink, kept until a collector acknowledges them.
//!
//! [`Spool`] is what the uplink needs. Two implementations:
//! * [`MemorySpool`] (`memory.rs`) keeps encoded batches in memory under a byte cap;
//! * [`DiskSpool`] (`disk.rs`, records in `segment.rs`) keeps them in checksummed segment files so
//!   that nothing is lost when the agent is killed, and carries the boot id and the sequence space
//!   across restarts.
//!
//! Both enforce their cap the same way: the oldest *samples* are dropped first (a batch with events
//! is re-encoded with its events only) — OOM events are never dropped — and every dropped row is
//! reported to the caller for metrics and logs.

mod disk;
pub mod journal;
mod memory;
pub mod segment;

use std::path::PathBuf;

use oomlens_schema::{Batch, Frame, FrameError};

pub use disk::{DiskSpool, FsyncPolicy, Recovery, SpoolState};
pub use journal::{EventJournal, JournalReplay};
pub use memory::MemorySpool;

/// Rows of a batch, by table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowCounts {
    /// GPU samples.
    pub gpu_samples: u64,
    /// Process samples.
    pub process_samples: u64,
    /// OOM events (rows of `oom_events`).
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

    /// Sample rows (GPU and process).
    pub fn samples(&self) -> u64 {
        self.gpu_samples + self.process_samples
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

    /// The same batch with its samples removed (events kept), and the rows that removed.
    /// `None` when the frame is not a batch.
    pub fn strip_samples(&self) -> Result<Option<(PendingBatch, RowCounts)>, FrameError> {
        let Frame::Batch(mut batch) = Frame::decode(&self.frame)? else {
            return Ok(None);
        };
        let dropped = RowCounts {
            gpu_samples: batch.gpu_samples.len() as u64,
            process_samples: batch.process_samples.len() as u64,
            events: 0,
        };
        batch.gpu_samples.clear();
        batch.process_samples.clear();
        Ok(Some((PendingBatch::encode(batch)?, dropped)))
    }
}

/// What making room cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Rows dropped.
    pub rows: RowCounts,
}

/// The spool failed.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A batch could not be encoded or re-encoded.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A spool file could not be read or written.
    #[error("spool I/O on {path}: {source}")]
    Io {
        /// File or directory.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// Another process holds the spool directory.
    #[error("spool directory {0} is in use by another agent (lock held)")]
    Locked(PathBuf),
    /// Sequence numbers must strictly increase.
    #[error("batch seq {seq} is not above the last spooled seq {last}")]
    OutOfOrder {
        /// Sequence number of the batch offered to the spool.
        seq: u64,
        /// Last spooled.
        last: u64,
    },
    /// A batch frame is larger than a record may be.
    #[error("batch seq {seq} is {len} bytes, more than a spool record may hold")]
    TooLarge {
        /// Sequence number.
        seq: u64,
        /// Frame length.
        len: usize,
    },
}

impl SpoolError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> SpoolError {
        let path = path.into();
        move |source| SpoolError::Io { path, source }
    }
}

/// Holds batches until acknowledged.
pub trait Spool: Send {
    /// Adds a batch (sequence numbers strictly increase), making room by dropping old samples.
    fn push(&mut self, batch: PendingBatch) -> Result<Dropped, SpoolError>;
    /// The first pending batch with `seq > after` (an owned copy: the disk spool reads it from disk).
    fn next_after(&mut self, after: u64) -> Result<Option<PendingBatch>, SpoolError>;
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

#[cfg(test)]
pub(crate) mod test_util {
    use super::*;
    use oomlens_schema::{GpuSample, OomEvent};

    /// A batch with `samples` GPU samples and `events` events.
    pub fn batch(seq: u64, samples: usize, events: usize) -> PendingBatch {
        PendingBatch::encode(Batch {
            seq,
            gpu_samples: vec![GpuSample { ts_ms: seq as i64, ..GpuSample::default() }; samples],
            events: (0..events)
                .map(|i| OomEvent { event_id: seq * 1000 + i as u64, ..OomEvent::default() })
                .collect(),
            ..Batch::default()
        })
        .unwrap()
    }

    /// Decodes a spooled frame.
    pub fn decode(p: &PendingBatch) -> Batch {
        match Frame::decode(&p.frame).unwrap() {
            Frame::Batch(b) => b,
            other => panic!("not a batch: {:?}", other.kind()),
        }
    }
}
