//! Per-core ingest cost of the collector: validated decode of realistic `Batch` frames
//! from the fleet simulator (`Frame::decode`: header, bytecheck, deserialise, limits), and decode +
//! what `Sink::store` does per batch: RowBinary of the samples straight from the batch
//! (`rowbinary::encode_batch`) plus the event rows; and, for comparison, the conversion into owned
//! row structs it replaced (`convert::batch_rows` / `batch_rows_owned`, which still left the
//! RowBinary serialisation of those structs to the writer).
//! Single-threaded, so the figures are per core.
//!
//! `cargo bench -p oomlens-benches --bench ingest -- --warm-up-time 1 --measurement-time 3`
//!
//! Throughput is in frame bytes (criterion prints MB/s as MiB/s-free "MB/s" with decimal units);
//! frames/s = 1 / time per frame; rows/s = rows per frame / time (printed at start per shape).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use oomlens_benches::loadgen::{FrameTemplate, PoolSpec, build_pool};
use oomlens_collector::clickhouse::convert::{batch_rows, batch_rows_owned, event_row};
use oomlens_collector::clickhouse::rowbinary::encode_batch;
use oomlens_collector::identity::AgentIdentity;
use oomlens_schema::{Batch, Frame};

/// Shapes of realistic frames: (name, seconds per batch, extra processes per GPU).
const SHAPES: &[(&str, u32, u32)] = &[
    // What an agent sends with its defaults: one 1 s batch of 8 GPUs and their 1–3 jobs.
    ("agent_1s_8gpu", 1, 0),
    // A busier node: 16 more processes per GPU, 1 s batches (the loadgen throughput shape).
    ("busy_1s_8gpu_16proc", 1, 16),
    // The same node batching 10 s (fewer, larger frames).
    ("busy_10s_8gpu_16proc", 10, 16),
];

fn frames(batch_seconds: u32, procs_per_gpu: u32) -> Vec<FrameTemplate> {
    let spec = PoolSpec {
        nodes: 4,
        batches_per_node: 8,
        batch_seconds,
        gpus: 8,
        procs_per_gpu,
        seed: 1,
        start_ms: 1_754_000_000_000,
    };
    build_pool(&spec)
        .unwrap_or_else(|e| panic!("frame pool: {e}"))
        .into_iter()
        .flat_map(|n| n.frames)
        .collect()
}

/// Validates and decodes one batch frame (the collector's receive path).
fn decode_batch(frame: &[u8]) -> Batch {
    match Frame::decode(frame) {
        Ok(Frame::Batch(batch)) => batch,
        Ok(other) => panic!("not a batch: {other:?}"),
        Err(e) => panic!("decode: {e}"),
    }
}

fn identity() -> AgentIdentity {
    AgentIdentity {
        cluster: "bench".into(),
        node: "gpu-node-017.dc1.example.com".into(),
        agent_id: "gpu-node-017".into(),
        boot_id: 42,
        agent_version: "0.1.0".into(),
        gpus: Vec::new(),
    }
}

fn ingest(c: &mut Criterion) {
    let id = identity();
    for &(name, secs, procs) in SHAPES {
        let pool = frames(secs, procs);
        let encoded: Vec<Vec<u8>> = pool.iter().enumerate().map(|(i, t)| t.with_seq(i as u64 + 1)).collect();
        let bytes: usize = encoded.iter().map(Vec::len).sum();
        let rows: u64 = pool.iter().map(|t| t.rows.total()).sum();
        eprintln!(
            "{name}: {} frames, {:.0} bytes and {:.1} rows per frame on average",
            encoded.len(),
            bytes as f64 / encoded.len() as f64,
            rows as f64 / encoded.len() as f64
        );
        let mut group = c.benchmark_group(format!("ingest/{name}"));
        // One iteration handles every frame of the pool once.
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function("decode_validated", |b| {
            b.iter(|| {
                for f in &encoded {
                    black_box(Frame::decode(black_box(f)).unwrap_or_else(|e| panic!("decode: {e}")));
                }
            })
        });
        group.bench_function("decode_and_encode_rowbinary", |b| {
            b.iter(|| {
                for f in &encoded {
                    let batch = decode_batch(black_box(f));
                    let samples = encode_batch(&id, &batch);
                    let events: Vec<_> = batch.events.iter().map(|e| event_row(&id, e, 0)).collect();
                    drop(batch);
                    black_box((samples, events));
                }
            })
        });
        group.bench_function("decode_and_convert_borrowed", |b| {
            b.iter(|| {
                for f in &encoded {
                    let batch = decode_batch(black_box(f));
                    black_box(batch_rows(&id, &batch, 0));
                }
            })
        });
        group.bench_function("decode_and_convert", |b| {
            b.iter(|| {
                for f in &encoded {
                    let batch = decode_batch(black_box(f));
                    black_box(batch_rows_owned(&id, batch, 0));
                }
            })
        });
        group.finish();
    }
}

criterion_group!(benches, ingest);
criterion_main!(benches);
