//! Hard limits on what a peer may send, and their enforcement on decoded frames.
//!
//! rkyv validation guarantees a payload is structurally sound; these limits guarantee it is also
//! reasonable, so a hostile or broken agent cannot make the collector allocate or store without
//! bound. Memory needed to decode a frame is already bounded by [`MAX_FRAME_PAYLOAD`], because every
//! archived string or vector lies inside the payload.

use crate::wire::v1::{Batch, ErrorReply, GpuInfo, Hello, JobShape, Label, OomEvent, ProcessSample, Welcome};

/// Largest payload of one frame, bytes.
pub const MAX_FRAME_PAYLOAD: u32 = 8 * 1024 * 1024;
/// Largest payload of a control frame (`Hello`, `Welcome`, `Ack`, `ErrorReply`), bytes: a Hello
/// announcing 512 GPUs with typical names and UUIDs is about 150 KiB; a peer cannot make the other
/// side reserve a batch-sized buffer before it has even said who it is.
pub const MAX_CONTROL_PAYLOAD: u32 = 256 * 1024;
/// Longest identifier-like string (names, ids, labels), bytes.
pub const MAX_STRING: usize = 1024;
/// Longest raw OOM message, bytes.
pub const MAX_RAW_MESSAGE: usize = 64 * 1024;
/// Most GPUs (and MIG instances) announced by one agent.
pub const MAX_GPUS: usize = 512;
/// Most GPU samples in one batch.
pub const MAX_GPU_SAMPLES: usize = 64 * 1024;
/// Most process samples in one batch.
pub const MAX_PROCESS_SAMPLES: usize = 256 * 1024;
/// Most events in one batch.
pub const MAX_EVENTS: usize = 4096;
/// Most labels on one process or event.
pub const MAX_LABELS: usize = 64;
/// Most "other processes" listed in one event.
pub const MAX_OTHER_PROCESSES: usize = 1024;

/// A decoded value exceeded a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {actual} exceeds the limit of {limit}")]
pub struct LimitError {
    /// Which field.
    pub field: &'static str,
    /// Its size.
    pub actual: usize,
    /// The limit.
    pub limit: usize,
}

fn check(field: &'static str, actual: usize, limit: usize) -> Result<(), LimitError> {
    if actual > limit { Err(LimitError { field, actual, limit }) } else { Ok(()) }
}

fn check_str(field: &'static str, s: &str) -> Result<(), LimitError> {
    check(field, s.len(), MAX_STRING)
}

fn check_opt_str(field: &'static str, s: &Option<String>) -> Result<(), LimitError> {
    s.as_deref().map_or(Ok(()), |s| check_str(field, s))
}

fn check_labels(labels: &[Label]) -> Result<(), LimitError> {
    check("labels", labels.len(), MAX_LABELS)?;
    labels.iter().try_for_each(|l| {
        check_str("label.key", &l.key)?;
        check_str("label.value", &l.value)
    })
}

/// Values that can be checked against the limits.
pub trait WithinLimits {
    /// `Ok` when every string and vector is within its limit.
    fn check_limits(&self) -> Result<(), LimitError>;
}

impl WithinLimits for GpuInfo {
    fn check_limits(&self) -> Result<(), LimitError> {
        check_str("gpu.uuid", &self.uuid)?;
        check_str("gpu.name", &self.name)
    }
}

impl WithinLimits for Hello {
    fn check_limits(&self) -> Result<(), LimitError> {
        check_str("agent_id", &self.agent_id)?;
        check_str("node", &self.node)?;
        check_str("cluster", &self.cluster)?;
        check_str("agent_version", &self.agent_version)?;
        check("gpus", self.gpus.len(), MAX_GPUS)?;
        self.gpus.iter().try_for_each(WithinLimits::check_limits)
    }
}

impl WithinLimits for Welcome {
    fn check_limits(&self) -> Result<(), LimitError> {
        check_str("collector_id", &self.collector_id)
    }
}

impl WithinLimits for ErrorReply {
    fn check_limits(&self) -> Result<(), LimitError> {
        check("error.message", self.message.len(), MAX_RAW_MESSAGE)
    }
}

impl WithinLimits for ProcessSample {
    fn check_limits(&self) -> Result<(), LimitError> {
        check_str("process.name", &self.name)?;
        check_labels(&self.labels)
    }
}

impl WithinLimits for JobShape {
    fn check_limits(&self) -> Result<(), LimitError> {
        check_opt_str("job.precision", &self.precision)?;
        check_opt_str("job.optimizer", &self.optimizer)
    }
}

impl WithinLimits for OomEvent {
    fn check_limits(&self) -> Result<(), LimitError> {
        check_str("event.framework", &self.framework)?;
        check("event.other_processes", self.other_processes.len(), MAX_OTHER_PROCESSES)?;
        self.job.check_limits()?;
        check_labels(&self.labels)?;
        check("event.raw_message", self.raw_message.len(), MAX_RAW_MESSAGE)
    }
}

impl WithinLimits for Batch {
    fn check_limits(&self) -> Result<(), LimitError> {
        check("gpu_samples", self.gpu_samples.len(), MAX_GPU_SAMPLES)?;
        check("process_samples", self.process_samples.len(), MAX_PROCESS_SAMPLES)?;
        check("events", self.events.len(), MAX_EVENTS)?;
        self.process_samples.iter().try_for_each(WithinLimits::check_limits)?;
        self.events.iter().try_for_each(WithinLimits::check_limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_strings_and_vectors_are_refused() {
        let mut hello = Hello { node: "n".repeat(MAX_STRING), ..Hello::default() };
        assert!(hello.check_limits().is_ok());
        hello.node.push('x');
        let err = hello.check_limits().unwrap_err();
        assert_eq!(err.field, "node");

        let batch = Batch { events: vec![OomEvent::default(); MAX_EVENTS + 1], ..Batch::default() };
        assert_eq!(batch.check_limits().unwrap_err().field, "events");

        // The collector's frames too: an agent does not hold an unbounded id or error text.
        let welcome = Welcome { collector_id: "c".repeat(MAX_STRING + 1), last_acked_seq: 0 };
        assert_eq!(welcome.check_limits().unwrap_err().field, "collector_id");
        let error = ErrorReply { code: 1, message: "e".repeat(MAX_RAW_MESSAGE + 1) };
        assert_eq!(error.check_limits().unwrap_err().field, "error.message");
        assert!(ErrorReply { code: 1, message: "bad frame".into() }.check_limits().is_ok());
    }
}
