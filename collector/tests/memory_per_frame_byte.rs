//! The collector bounds its memory by charging each frame's wire size against the bytes-in-flight
//! caps; `config::IN_FLIGHT_EXPANSION` claims how much heap one wire byte can turn into while its
//! batch is in the collector (read buffer + aligned copy + decoded batch while decoding; decoded
//! batch + RowBinary of its samples and event rows stamped with the identity while encoding
//! (`Sink::store`); the encoded rows until stored). This test measures
//! that with a counting global allocator over realistic simulator batches of several sizes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use oomlens_agent::source::Source;
use oomlens_agent::source::sim::{SimConfig, Simulator};
use oomlens_collector::clickhouse::convert::event_row;
use oomlens_collector::clickhouse::rowbinary::encode_batch;
use oomlens_collector::config::IN_FLIGHT_EXPANSION;
use oomlens_collector::identity::AgentIdentity;
use oomlens_schema::{Batch, Frame};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts bytes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// A batch of `seconds` readings of an 8-GPU simulated node.
fn batch(seconds: i64) -> Batch {
    let start = 1_767_225_600_000;
    let mut sim =
        Simulator::new("gpu-node-01", SimConfig { gpus: 8, seed: 5, ..Default::default() }, start).unwrap();
    let mut b = Batch { seq: 1, ..Batch::default() };
    for k in 0..seconds {
        let r = sim.sample(start + k * 1000);
        b.gpu_samples.extend(r.gpu_samples);
        b.process_samples.extend(r.process_samples);
        b.events.extend(r.events);
    }
    b
}

#[test]
fn heap_per_wire_byte_stays_under_the_configured_expansion() {
    let identity = AgentIdentity {
        cluster: "train-east".into(),
        node: "gpu-node-01".into(),
        agent_id: "agent-0123456789abcdef".into(),
        boot_id: 7,
        ..AgentIdentity::default()
    };
    for seconds in [1, 10, 60, 600] {
        let wire = Frame::Batch(batch(seconds)).encode().unwrap();
        let wire_len = wire.len();
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        // What the collector does with one frame: the read buffer (`wire`), decode and validate,
        // encode the samples and convert the events (`Sink::store`), drop the batch, keep the
        // encoded rows until they are stored.
        let Frame::Batch(decoded) = Frame::decode(&wire).unwrap() else { panic!("not a batch") };
        let samples = encode_batch(&identity, &decoded);
        let events: Vec<_> = decoded.events.iter().map(|e| event_row(&identity, e, 0)).collect();
        drop(decoded);
        let held = LIVE.load(Ordering::Relaxed) - base;
        drop(wire);
        let peak = PEAK.load(Ordering::Relaxed) - base + wire_len;
        let ratio = peak as f64 / wire_len as f64;
        eprintln!(
            "{seconds:>4} s batch: {wire_len:>9} wire bytes, peak heap {peak:>9} ({ratio:.2}×), rows held {held:>9} ({:.2}×), {} rows",
            held as f64 / wire_len as f64,
            samples.gpu.rows + samples.process.rows + events.len()
        );
        assert!(
            ratio <= IN_FLIGHT_EXPANSION as f64,
            "{seconds} s: {ratio:.2} heap bytes per wire byte exceeds IN_FLIGHT_EXPANSION = {IN_FLIGHT_EXPANSION}"
        );
        drop((samples, events));
    }
}
