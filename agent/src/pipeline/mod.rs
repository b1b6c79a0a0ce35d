//! The agent's pipeline between the sources and the spool: the sampler thread takes readings at a
//! fixed interval ([`sampler`]), the flight recorder decides which samples are sent
//! ([`recorder`]), the event stage folds and journals the detectors' events ([`event_stage`]), and
//! the batcher builds batches and hands them to the uplink's spool.

pub mod event_stage;
pub mod recorder;
pub mod sampler;
