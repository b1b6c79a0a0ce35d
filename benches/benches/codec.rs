//! Codec micro-benchmarks: encode and validated decode of the reference batch (8 GPUs × 16
//! processes × 10 samples) as an oomlens rkyv frame, against the same readings rendered and parsed
//! as dcgm-exporter's Prometheus text and as JSON.
//!
//! `cargo bench -p oomlens-benches --bench codec -- --warm-up-time 1 --measurement-time 3`
//!
//! Throughput is in GPU samples (elements) per second for every format, so the numbers compare
//! directly; bytes per batch of each format are printed once at start (MB/s = bytes × batches/s).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use oomlens_benches::{
    REFERENCE_GPUS, REFERENCE_PROCS_PER_GPU, REFERENCE_SAMPLES, gpu_only, json_decode, json_samples,
    parse_prometheus_text, prometheus_text, sample_batch, without_events,
};
use oomlens_schema::{Batch, Frame};

fn bench_shape(c: &mut Criterion, shape: &str, batch: &Batch) {
    let samples = batch.gpu_samples.len() as u64;
    let frame = Frame::Batch(batch.clone());
    let encoded = frame.encode().unwrap_or_else(|e| panic!("encode: {e}"));
    // Prometheus and JSON carry no events: render them from the batch without events.
    let plain = without_events(batch);
    let prom = prometheus_text(&plain);
    let json_structs = json_samples(&plain);
    let json_text = serde_json::to_string(&json_structs).unwrap_or_else(|e| panic!("json: {e}"));
    eprintln!(
        "{shape}: {samples} GPU samples, {} process samples, {} events; bytes per batch: rkyv frame {}, \
         Prometheus text {}, JSON {}",
        batch.process_samples.len(),
        batch.events.len(),
        encoded.len(),
        prom.len(),
        json_text.len()
    );

    let mut group = c.benchmark_group(format!("encode/{shape}"));
    group.throughput(Throughput::Elements(samples));
    let mut buf = Vec::with_capacity(encoded.len());
    group.bench_function("rkyv_frame", |b| {
        b.iter(|| {
            black_box(&frame).encode_into(&mut buf).unwrap_or_else(|e| panic!("encode: {e}"));
            black_box(buf.len())
        })
    });
    group.bench_function("prometheus_text", |b| {
        b.iter(|| black_box(prometheus_text(black_box(&plain))).len())
    });
    let mut json_buf = Vec::with_capacity(json_text.len());
    group.bench_function("json", |b| {
        b.iter(|| {
            json_buf.clear();
            serde_json::to_writer(&mut json_buf, black_box(&json_structs))
                .unwrap_or_else(|e| panic!("json: {e}"));
            black_box(json_buf.len())
        })
    });
    group.finish();

    let mut group = c.benchmark_group(format!("decode/{shape}"));
    group.throughput(Throughput::Elements(samples));
    group.bench_function("rkyv_frame_validated", |b| {
        b.iter(|| Frame::decode(black_box(&encoded)).unwrap_or_else(|e| panic!("decode: {e}")))
    });
    group.bench_function("prometheus_text", |b| {
        b.iter(|| parse_prometheus_text(black_box(&prom)).unwrap_or_else(|e| panic!("parse: {e}")))
    });
    group.bench_function("json", |b| {
        b.iter(|| json_decode(black_box(&json_text)).unwrap_or_else(|e| panic!("json: {e}")))
    });
    group.finish();
}

fn codec(c: &mut Criterion) {
    let reference = sample_batch(REFERENCE_GPUS, REFERENCE_PROCS_PER_GPU, REFERENCE_SAMPLES);
    bench_shape(c, "gpu+proc+events_8x16x10", &reference);
    bench_shape(c, "gpu_only_8x10", &gpu_only(&reference));
}

criterion_group!(benches, codec);
criterion_main!(benches);
