//! `oomlens fit` end to end: the binary on Hugging Face configs (`tests/fixtures/fit/`) and flags,
//! text and JSON, the exit codes (0 fits, 1 does not, 2 bad input) for every kind of bad input,
//! and the calibration by the fleet against a real ClickHouse holding OOM attributions and
//! process samples of the same shape.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{Value, json};

const GIB: u64 = 1 << 30;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fit")
        .join(name)
        .join("config.json")
        .display()
        .to_string()
}

/// Runs `oomlens fit ARGS`: exit code, stdout, stderr.
fn fit(args: &[&str]) -> (i32, String, String) {
    let out = oomlens_devkit::clitest::command(env!("CARGO_BIN_EXE_oomlens"))
        .arg("fit")
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{args:?}: {stderr}");
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), stderr)
}

fn json_of(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn part(doc: &Value, name: &str) -> u64 {
    doc["estimate"]["parts"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap()["bytes"]
        .as_u64()
        .unwrap()
}

/// Llama-2-7B under ZeRO-3 over 8 H100s with FlashAttention, 4096 tokens: fits.
fn llama_zero3() -> Vec<String> {
    [
        "--model-config",
        &fixture("llama-2-7b"),
        "--gpu",
        "H100 80GB",
        "--precision",
        "bf16",
        "--zero",
        "3",
        "--dp",
        "8",
        "--seq",
        "4096",
        "--flash-attention",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn text_and_json_of_a_config() {
    let args = llama_zero3();
    let (code, text, err) = fit(&strs(&args));
    assert_eq!(code, 0, "{err}");
    for want in [
        "model: 6.738 B parameters (counted from the config)",
        "llama: hidden 4096 × 32 layers",
        "H100-80GB (NVIDIA H100 80GB HBM3): 79.11 GiB usable",
        "weights",
        "gradients",
        "optimizer state",
        "activations",
        "attention",
        "context",
        "allocator slack",
        "predicted peak",
        "fits: ",
        "largest micro-batch that fits at sequence 4096: ",
        "longest sequence that fits at micro-batch 1: ",
        "DeepSpeed estimate_zero3_model_states_mem_needs",
    ] {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }

    let mut json_args = strs(&args);
    json_args.push("--json");
    let (code, out, _) = fit(&json_args);
    assert_eq!(code, 0);
    let doc = json_of(&out);
    assert_eq!(doc["job"]["params"], 6_738_415_616u64);
    assert_eq!(doc["job"]["arch_source"], "config");
    assert_eq!(doc["job"]["arch"]["max_position"], 4096);
    assert_eq!(doc["gpu"]["model"], "H100-80GB");
    assert_eq!(doc["fits"], true);
    let parts: Vec<&str> =
        doc["estimate"]["parts"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        parts,
        ["weights", "gradients", "optimizer_state", "activations", "attention", "context", "allocator_slack"]
    );
    let sum: u64 =
        doc["estimate"]["parts"].as_array().unwrap().iter().map(|p| p["bytes"].as_u64().unwrap()).sum();
    assert_eq!(doc["estimate"]["peak_bytes"].as_u64().unwrap(), sum);
    assert_eq!(doc["peak_bytes"], doc["estimate"]["peak_bytes"]);
    // 16 B per parameter over 8 ranks, the optimizer's 12 of them.
    assert_eq!(part(&doc, "optimizer_state"), 6_738_415_616 * 12 / 8);
    assert_eq!(part(&doc, "attention"), 0, "FlashAttention");
    let capacity = doc["capacity_bytes"].as_u64().unwrap();
    assert_eq!(doc["headroom_bytes"].as_i64().unwrap(), capacity as i64 - sum as i64);
    assert!(doc["largest_batch"].as_u64().unwrap() >= 1);
    assert!(doc["largest_seq"].as_u64().unwrap() >= 4096);
    assert!(doc["calibration"].is_null());
    // DeepSpeed's estimator counts the sharded model states only; accelerate's knows no sharding.
    assert!(doc["anchors"]["deepspeed_bytes"].as_u64().unwrap() < sum / 2, "model states only");
    assert_eq!(doc["anchors"]["accelerate_bytes"], 4 * 2 * 6_738_415_616u64);
}

#[test]
fn does_not_fit_exits_1() {
    // 7B with AdamW on one 24 GB card: 16 B per parameter is 112 GB.
    let (code, text, _) = fit(&["--params", "7B", "--gpu", "A10", "--seq", "1024"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("does not fit: "), "{text}");
    assert!(text.contains("ASSUMED from the nearest reference model"), "{text}");
    assert!(text.contains("largest micro-batch that fits at sequence 1024: none"), "{text}");
    let (code, out, _) = fit(&["--params", "7B", "--gpu", "A10", "--json"]);
    assert_eq!(code, 1);
    let doc = json_of(&out);
    assert_eq!((doc["fits"].as_bool(), doc["largest_batch"].as_u64()), (Some(false), Some(0)));
    assert!(doc["headroom_bytes"].as_i64().unwrap() < 0);
    assert_eq!(doc["job"]["arch_source"], "assumed");
}

#[test]
fn gpt2_inference_and_flags() {
    let cfg = fixture("gpt2");
    let (code, out, err) = fit(&[
        "--model-config",
        &cfg,
        "--mode",
        "inference",
        "--gpu-memory",
        "16GiB",
        "--batch",
        "8",
        "--seq",
        "1024",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let doc = json_of(&out);
    assert_eq!(doc["job"]["params"], 124_439_808u64);
    assert_eq!(doc["job"]["precision"], "bf16", "no torch_dtype: bf16");
    assert_eq!(doc["gpu"]["model"], "custom");
    assert_eq!(doc["capacity_bytes"], 16 * GIB);
    // 2 × 12 layers × 12 heads × 64 × 1024 tokens × 8 sequences × 2 B.
    assert_eq!(part(&doc, "kv_cache"), 2 * 12 * 12 * 64 * 1024 * 8 * 2);
    assert_eq!(part(&doc, "weights"), 124_439_808 * 2);
    // The longest sequence is beyond GPT-2's 1024 positions: the text says so.
    let (code, text, _) =
        fit(&["--model-config", &cfg, "--mode", "inference", "--gpu", "T4", "--flash-attention"]);
    assert_eq!(code, 0);
    assert!(text.contains("beyond the model's 1024-token context"), "{text}");
    // Dimensions from flags, grouped-query attention, tensor parallelism.
    let (code, out, err) = fit(&[
        "--hidden",
        "8192",
        "--layers",
        "80",
        "--heads",
        "64",
        "--kv-heads",
        "8",
        "--intermediate",
        "28672",
        "--tp",
        "8",
        "--pp",
        "2",
        "--dp",
        "4",
        "--zero",
        "1",
        "--checkpointing",
        "--gpu",
        "h100-80gb",
        "--json",
    ]);
    assert!(code == 0 || code == 1, "{err}");
    let doc = json_of(&out);
    assert_eq!(doc["job"]["params"], 68_976_648_192u64, "Llama-2-70B's count from its dimensions");
    assert_eq!(doc["job"]["checkpointing"], "full");
    assert_eq!(doc["job"]["arch_source"], "flags");
}

#[test]
fn bad_input_exits_2_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("config.json");
    std::fs::write(&broken, "{\"hidden_size\": 4096, ").unwrap();
    let incomplete = dir.path().join("incomplete.json");
    std::fs::write(&incomplete, json!({"hidden_size": 4096, "num_attention_heads": 32}).to_string()).unwrap();
    let (broken, incomplete) = (broken.display().to_string(), incomplete.display().to_string());
    for (args, want) in [
        (vec!["--gpu", "H100-80GB"], "no model shape"),
        (vec!["--params", "7B"], "no GPU: give --gpu"),
        (vec!["--params", "7B", "--gpu", "B300"], "unknown GPU model \"B300\": known are T4-16GB"),
        (
            vec!["--model-config", "/nonexistent/config.json", "--gpu", "T4"],
            "cannot read /nonexistent/config.json",
        ),
        (vec!["--model-config", &broken, "--gpu", "T4"], "is not valid JSON"),
        (vec!["--model-config", &incomplete, "--gpu", "T4"], "the config has no num_hidden_layers"),
        (vec!["--params", "0", "--gpu", "T4"], "must be more than 0"),
        (vec!["--params=-7B", "--gpu", "T4"], "is not a count"),
        (vec!["--params", "7B", "--gpu", "T4", "--batch", "0"], "--batch"),
        (vec!["--params", "7B", "--gpu", "T4", "--seq=-1"], "--seq"),
        (vec!["--hidden", "0", "--layers", "2", "--heads", "2", "--gpu", "T4"], "--hidden"),
        (vec!["--hidden", "4096", "--gpu", "T4"], "--hidden, --layers and --heads go together"),
        (
            vec!["--hidden", "4294967296", "--layers", "4294967296", "--heads", "1", "--gpu", "T4"],
            "beyond any model",
        ),
        (vec!["--hidden", "100", "--layers", "2", "--heads", "3", "--gpu", "T4"], "do not divide"),
        (vec!["--params", "7B", "--gpu-memory", "0GiB"], "must be more than 0"),
        (vec!["--params", "7B", "--gpu-memory", "lots"], "is not a size"),
        (vec!["--params", "7B", "--gpu", "T4", "--zero", "4"], "--zero"),
        (vec!["--params", "7B", "--gpu", "T4", "--precision", "fp64"], "is not one of fp32, bf16"),
        (vec!["--params", "7B", "--gpu", "T4", "--optimizer", "lion"], "is not one of adamw"),
        (vec!["--params", "7B", "--gpu", "T4", "--precision", "int4"], "not modelled"),
        (vec!["--params", "7B", "--gpu", "T4", "--pp", "64"], "pipeline stages"),
        (vec!["--params", "7B", "--gpu", "T4", "--gpu-memory", "16GiB"], "cannot be used with"),
    ] {
        let (code, out, err) = fit(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    // The fleet unreachable.
    let (code, _, err) =
        fit(&["--params", "7B", "--gpu", "T4", "--calibrate", "--clickhouse-url", "http://127.0.0.1:9"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("oomlens fit: "), "{err}");
}

/// One stored attribution row of the Llama-2-7B shape of [`llama_zero3`] (batch 1, seq 4096).
fn attribution(
    event_id: u64,
    workload: &str,
    ts_ms: i64,
    attributed_ms: i64,
    shape: Value,
    numbers: Value,
) -> String {
    let mut row = json!({
        "cluster": "train", "node": "gpu-node-1", "event_id": event_id, "ts_ms": ts_ms, "kind": "cuda_oom",
        "source": "job_log", "framework": "pytorch", "workload": workload, "params": 6_738_415_616u64,
        "batch_size": 1, "seq_len": 4096, "precision": "bf16", "optimizer": "adamw", "zero_stage": 3,
        "tensor_parallel": 1, "data_parallel": 8, "flash_attention": 1, "window_ms": 60000,
        "scenario": "batch", "rule": "batch_growth", "confidence_pct": 80, "rules_version": 1,
        "attributed_ms": attributed_ms,
    });
    for (k, v) in shape.as_object().unwrap().iter().chain(numbers.as_object().unwrap()) {
        row[k] = v.clone();
    }
    format!("{row}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibration_by_the_fleet() {
    let t0 = std::time::Instant::now();
    let (server, ch) = migrated_clickhouse().await;
    let url = server.url();
    step!(t0, "ClickHouse up");
    let now = oomlens_cli::timearg::now_ms();
    let ts = now - 3_600_000;
    let h100 = oomlens_schema::gpu::H100_80GB.capacity_bytes();
    let a100 = oomlens_schema::gpu::A100_40GB.capacity_bytes();
    let none = json!({});
    let mut rows = String::new();
    // Three events of the shape: the largest need at a failure is 85 GiB.
    rows += &attribution(
        1,
        "llama7b-ft",
        ts,
        now,
        none.clone(),
        json!({"capacity_bytes": h100,
        "need_alone_bytes": 85 * GIB, "own_samples": 10, "own_min_used": 60 * GIB, "own_max_used": 80 * GIB}),
    );
    rows += &attribution(
        2,
        "llama7b-ft",
        ts + 1000,
        now,
        json!({"params": 6_900_000_000u64}),
        json!({
        "capacity_bytes": h100, "need_alone_bytes": 81 * GIB, "own_samples": 5, "own_min_used": 70 * GIB,
        "own_max_used": 78 * GIB}),
    );
    rows += &attribution(
        3,
        "llama7b-ft-b",
        ts + 2000,
        now,
        none.clone(),
        json!({"capacity_bytes": a100,
        "need_alone_bytes": 41 * GIB}),
    );
    // An older attribution of event 1 (replaced: its numbers must not count).
    rows += &attribution(
        1,
        "llama7b-ft",
        ts,
        now - 60_000,
        none.clone(),
        json!({"capacity_bytes": h100,
        "need_alone_bytes": 99 * GIB}),
    );
    // Other shapes: another micro-batch, params beyond 3 %, another precision, too old.
    rows +=
        &attribution(10, "other", ts, now, json!({"batch_size": 2}), json!({"need_alone_bytes": 120 * GIB}));
    rows += &attribution(
        11,
        "other",
        ts,
        now,
        json!({"params": 7_500_000_000u64}),
        json!({"need_alone_bytes": 120 * GIB}),
    );
    rows += &attribution(
        12,
        "other",
        ts,
        now,
        json!({"precision": "fp16"}),
        json!({"need_alone_bytes": 120 * GIB}),
    );
    rows += &attribution(
        13,
        "other",
        now - 40 * 86_400_000,
        now,
        none.clone(),
        json!({"need_alone_bytes": 120 * GIB}),
    );
    // Inserted twice: re-sent copies change nothing.
    for _ in 0..2 {
        ch.client()
            .query_raw(&format!("INSERT INTO oomlens.oom_attributions FORMAT JSONEachRow\n{rows}"))
            .execute()
            .await
            .unwrap();
    }
    // Process samples: the shape's workload peaks at 83 GiB; another workload's 90 GiB does not count.
    let mut samples = String::new();
    for (pid, workload, used) in
        [(100, "llama7b-ft", [70, 83, 20]), (101, "llama7b-ft", [71, 72, 73]), (200, "other", [90, 90, 90])]
    {
        for (i, gib) in used.iter().enumerate() {
            let row = json!({"cluster": "train", "node": "gpu-node-1", "gpu_index": pid - 100,
                "ts_ms": ts - 10_000 + i as i64 * 1000, "pid": pid, "agent_id": "a", "process_name": "python",
                "used_bytes": gib * GIB, "workload": workload});
            samples += &format!("{row}\n{row}\n");
        }
    }
    ch.client()
        .query_raw(&format!("INSERT INTO oomlens.process_samples FORMAT JSONEachRow\n{samples}"))
        .execute()
        .await
        .unwrap();
    step!(t0, "rows inserted");

    let args = llama_zero3();
    let mut calibrated = strs(&args);
    calibrated.extend(["--calibrate", "--clickhouse-url", &url, "--json"]);
    let (code, out, err) = tokio::task::spawn_blocking({
        let calibrated: Vec<String> = calibrated.iter().map(|s| s.to_string()).collect();
        move || fit(&strs(&calibrated))
    })
    .await
    .unwrap();
    // The model alone says it fits (exit 0, see text_and_json_of_a_config); the fleet knows better.
    assert_eq!(code, 1, "{out}{err}");
    let doc = json_of(&out);
    let c = &doc["calibration"];
    assert_eq!(
        (c["events"].as_u64(), c["events_same_gpu"].as_u64(), c["events_with_need"].as_u64()),
        (Some(3), Some(2), Some(3)),
        "{c}"
    );
    assert_eq!((c["workloads"].as_u64(), c["samples"].as_u64()), (Some(1), Some(6 + 15)), "{c}");
    assert_eq!(
        (c["floor_bytes"].as_u64(), c["peak_bytes"].as_u64()),
        (Some(85 * GIB), Some(83 * GIB)),
        "{c}"
    );
    let predicted = doc["estimate"]["peak_bytes"].as_u64().unwrap();
    assert_eq!(c["predicted_bytes"].as_u64(), Some(predicted));
    assert!(predicted < 60 * GIB, "{predicted}");
    assert_eq!(c["corrected_bytes"].as_u64(), Some(85 * GIB));
    assert_eq!(c["correction_bytes"].as_u64(), Some(85 * GIB - predicted));
    let ratio = c["ratio"].as_f64().unwrap();
    assert!((ratio - (85 * GIB) as f64 / predicted as f64).abs() < 1e-9);
    assert_eq!(doc["peak_bytes"].as_u64(), Some(85 * GIB));
    assert_eq!(doc["fits"], false);
    assert!(c["summary"].as_str().unwrap().contains("3 OOM event(s) of this shape"), "{c}");

    // The text says by how much, and on what.
    let mut text_args = strs(&args);
    text_args.extend(["--calibrate", "--clickhouse-url", &url]);
    let text_args: Vec<String> = text_args.iter().map(|s| s.to_string()).collect();
    let (code, text, _) = tokio::task::spawn_blocking(move || fit(&strs(&text_args))).await.unwrap();
    assert_eq!(code, 1);
    assert!(text.contains("fleet-corrected") && text.contains("corrected to 85.00 GiB"), "{text}");
    assert!(text.contains("does not fit: 85.00 GiB needed"), "{text}");

    // Another shape: nothing known, the model stands.
    let mut other: Vec<String> =
        args.iter().map(|a| if a == "4096" { "2048".to_owned() } else { a.clone() }).collect();
    other.extend(["--calibrate", "--clickhouse-url", &url].map(str::to_owned));
    let (code, text, err) = tokio::task::spawn_blocking(move || fit(&strs(&other))).await.unwrap();
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("fleet calibration: no fleet data for this shape"), "{text}");
    step!(t0, "done");
}
