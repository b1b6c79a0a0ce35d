//! `cargo run -p oomlens-benches --release --bin wire-size`: bytes per GPU sample on the wire for
//! oomlens rkyv frames vs dcgm-exporter's Prometheus text vs JSON, uncompressed and compressed
//! (LZ4 in-process; gzip and zstd through their command-line tools when installed).

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use oomlens_benches::{
    REFERENCE_GPUS, REFERENCE_PROCS_PER_GPU, REFERENCE_SAMPLES, gpu_only, json, prometheus_text,
    sample_batch, without_events,
};
use oomlens_schema::{Batch, Frame};

/// Compresses `data` with an external tool (`gzip -6 -c`, …); `None` when it is not installed.
fn external(tool: &str, args: &[&str], data: &[u8]) -> Option<usize> {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let input = data.to_vec();
    // Feed stdin from another thread: the tool writes while we still write.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let mut out = Vec::new();
    child.stdout.take()?.read_to_end(&mut out).ok()?;
    writer.join().ok()?.ok()?;
    child.wait().ok()?.success().then_some(out.len())
}

struct Sizes {
    raw: usize,
    lz4: usize,
    gzip: Option<usize>,
    zstd: Option<usize>,
}

fn sizes(data: &[u8]) -> Sizes {
    Sizes {
        raw: data.len(),
        lz4: lz4_flex::block::compress_prepend_size(data).len(),
        gzip: external("gzip", &["-6", "-c"], data),
        zstd: external("zstd", &["-3", "-c", "-q"], data),
    }
}

fn per_sample(bytes: Option<usize>, samples: usize) -> String {
    bytes.map_or_else(|| "n/a".to_owned(), |b| format!("{:.1}", b as f64 / samples as f64))
}

fn report(title: &str, batch: &Batch) -> Result<(), String> {
    let samples = batch.gpu_samples.len();
    let frame = Frame::Batch(batch.clone()).encode().map_err(|e| e.to_string())?;
    let formats = [
        ("rkyv frame (oomlens)", frame),
        ("Prometheus text (dcgm-exporter)", prometheus_text(batch).into_bytes()),
        ("JSON (serde_json)", json(batch).into_bytes()),
    ];
    println!(
        "\n### {title}: {samples} GPU samples, {} process samples per batch\n",
        batch.process_samples.len()
    );
    println!(
        "| format | bytes/batch | B/sample | ×rkyv | LZ4 B/sample | gzip -6 B/sample | zstd -3 B/sample |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut base = None;
    for (name, bytes) in formats {
        let s = sizes(&bytes);
        let base = *base.get_or_insert(s.raw);
        println!(
            "| {name} | {} | {} | {:.2} | {} | {} | {} |",
            s.raw,
            per_sample(Some(s.raw), samples),
            s.raw as f64 / base as f64,
            per_sample(Some(s.lz4), samples),
            per_sample(s.gzip, samples),
            per_sample(s.zstd, samples),
        );
    }
    Ok(())
}

fn main() -> Result<(), String> {
    let reference = sample_batch(REFERENCE_GPUS, REFERENCE_PROCS_PER_GPU, REFERENCE_SAMPLES);
    let one_second = sample_batch(REFERENCE_GPUS, REFERENCE_PROCS_PER_GPU, 1);
    println!(
        "Bytes per GPU sample on the wire (B/sample = batch bytes / GPU samples; process readings are \
         counted with the GPU sample they belong to). Events are left out: Prometheus and JSON carry none."
    );
    report("GPU readings only, 8 GPUs x 10 s", &gpu_only(&reference))?;
    report("GPU + process readings, 8 GPUs x 16 processes x 10 s", &without_events(&reference))?;
    report("GPU readings only, 8 GPUs x 1 s (small batch)", &gpu_only(&one_second))?;
    report(
        "GPU + process readings, 8 GPUs x 16 processes x 1 s (small batch)",
        &without_events(&one_second),
    )?;
    let with_events = Frame::Batch(reference.clone()).encode().map_err(|e| e.to_string())?;
    let without = Frame::Batch(without_events(&reference)).encode().map_err(|e| e.to_string())?;
    println!(
        "\nThe reference batch with its 2 OOM events is {} bytes as an rkyv frame ({} bytes for the events).",
        with_events.len(),
        with_events.len() - without.len()
    );
    Ok(())
}
