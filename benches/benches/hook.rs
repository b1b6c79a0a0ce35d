//! Cost of one hook report in the agent (`detect::hook_schema::parse_line`): a v1 report with
//! the allocator's statistics, and a v2 report that adds the allocator summary (8 sites, each
//! classified by its frame) and whose message the log parser reads to fill what the report leaves
//! out — against decoding the same JSON line alone (`serde_json`, the baseline measured in the same
//! run). A job sends one report per OOM, so this is latency, not throughput; it must stay far below
//! the hook's 0.5 s client timeout.
//!
//! `cargo bench -p oomlens-benches --bench hook -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use oomlens_agent::detect::hook_schema::parse_line;

const MESSAGE: &str = "Traceback (most recent call last):\n  File \"/job/train.py\", line 210, in <module>\n    loss.backward()\n  File \"/venv/lib/python3.11/site-packages/torch/_tensor.py\", line 522, in backward\n    torch.autograd.backward(\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. Of the allocated memory 70.50 GiB is allocated by PyTorch, and 6.80 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";

fn v1() -> String {
    serde_json::json!({
        "v": 1, "type": "oom", "pid": 4242, "gpu_index": 0, "requested_bytes": 2u64 << 30, "phase": "backward",
        "message": MESSAGE,
        "memory_stats": {"allocated_bytes.all.current": 75u64 << 30, "reserved_bytes.all.current": 77u64 << 30,
                         "allocated_bytes.all.peak": 76u64 << 30, "num_alloc_retries": 3, "num_ooms": 1},
        "mem_get_info": {"free_bytes": 1u64 << 30, "total_bytes": 80u64 << 30},
        "job": {"params": 7_000_000_000u64, "batch": 16, "seq_len": 8192, "precision": "bf16"},
        "labels": {"team": "nlp", "rank": 3},
    })
    .to_string()
}

fn v2() -> String {
    let sites: Vec<_> = (0..8)
        .map(|i| {
            let function =
                ["forward", "from_pretrained", "_init_group", "scaled_dot_product_attention"][i % 4];
            serde_json::json!({"site": format!("/job/model/layer_{i}.py:{}", 40 + i), "function": function,
                               "bytes": (8 - i as u64) << 30, "blocks": 100 + i})
        })
        .collect();
    let mut report: serde_json::Value = serde_json::from_str(&v1()).unwrap_or_default();
    report["v"] = 2.into();
    report["gpu_uuid"] = "GPU-5f8e0c2a-1111-2222-3333-444455556666".into();
    report["allocator"] = serde_json::json!({
        "device": 0, "segments": 1900, "reserved_bytes": 77u64 << 30, "allocated_bytes": 70u64 << 30,
        "cached_free_bytes": 6u64 << 30, "largest_free_block_bytes": 700u64 << 20, "free_blocks": 4100,
        "free_block_histogram": [3000, 900, 180, 20, 0, 0], "history_recorded": true, "sites": sites,
    });
    report.to_string()
}

fn hook(c: &mut Criterion) {
    let (one, two) = (v1(), v2());
    println!("report sizes: v1 {} B, v2 {} B", one.len(), two.len());
    let mut g = c.benchmark_group("hook_report");
    g.bench_function("json_decode_only_v2", |b| {
        b.iter(|| black_box(serde_json::from_slice::<serde_json::Value>(black_box(two.as_bytes())).is_ok()))
    });
    g.bench_function("parse_v1", |b| b.iter(|| black_box(parse_line(black_box(one.as_bytes())).is_ok())));
    g.bench_function("parse_v2", |b| b.iter(|| black_box(parse_line(black_box(two.as_bytes())).is_ok())));
    g.finish();
}

criterion_group!(benches, hook);
criterion_main!(benches);
