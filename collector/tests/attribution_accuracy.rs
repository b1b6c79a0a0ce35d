//! Attribution accuracy on the simulated fleet through the real pipeline: simulated agents with
//! labelled OOMs (realistic messages: allocator rounding and routine cached slack, the CUDA
//! context, memory outside PyTorch) → QUIC (mutual TLS) → collector → a real ClickHouse →
//! `oom_features` → features → rules. Prints the confusion matrix and per-scenario precision /
//! recall; asserts ≥ 95 % macro-averaged accuracy with the job's full evidence, that the
//! adversarial cases occur and are attributed right, and that the ground truth is never an input.
//! The simulator is a load and regression tool: the evidence that the rules explain real failures
//! is the corpus of real messages (`attribution_corpus`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use oomlens_agent::source::sim::ScenarioMix;
use oomlens_collector::analysis::{
    self, AttributedEvent, ConfusionMatrix, EventEvidence, FeatureWindow, OomFeatures, Rule, attribute,
};
use oomlens_schema::Scenario;

/// The failure-heavy mix of `oomlens accuracy`.
fn mix() -> ScenarioMix {
    let mut text = String::new();
    for (name, weight) in analysis::accuracy::ACCURACY_MIX {
        text.push_str(&format!("{name} = {weight}\n"));
    }
    toml::from_str(&text).unwrap()
}

/// The job shape removed, the process samples kept: a job that reports no shape through the hook.
fn without_shape(f: &OomFeatures) -> OomFeatures {
    OomFeatures::derive(EventEvidence {
        params: None,
        batch_size: None,
        seq_len: None,
        hidden: None,
        layers: None,
        heads: None,
        precision: String::new(),
        optimizer: String::new(),
        zero_stage: None,
        tensor_parallel: None,
        pipeline_parallel: None,
        data_parallel: None,
        activation_checkpointing: None,
        flash_attention: None,
        ..f.evidence.clone()
    })
}

/// The job shape and the process samples removed: what a log line alone (PyTorch 2.x message)
/// tells.
fn message_only(f: &OomFeatures) -> OomFeatures {
    OomFeatures::derive(EventEvidence {
        own_samples: 0,
        own_first_ts: 0,
        own_first_used: 0,
        own_min_used: 0,
        own_max_used: 0,
        own_last_used: 0,
        own_max_rise: None,
        others_seen: 0,
        others_first_bytes: 0,
        others_last_bytes: 0,
        own_sampled_bytes: 0,
        others_growth_bytes: 0,
        top_neighbour_growth_bytes: 0,
        ..without_shape(f).evidence
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simulated_fleet_is_attributed_with_95_percent_macro_accuracy() {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["acc-1", "acc-2", "acc-3", "acc-4", "acc-5", "acc-6"];
    let pki = pki(dir.path(), &nodes);
    let (collector, _stop) =
        start_collector(collector_config(&pki, &ch.url(), SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let duration_s = 900;
    let agents: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut cfg = agent_config(&pki, n, collector.addr, 500 + i as u64, duration_s, 600.0);
            cfg.simulator.mix = mix();
            // Every GPU size of the catalog, 24 to 141 GiB.
            cfg.simulator.gpu_models =
                ["A10-24GB", "A100-40GB", "H100-80GB", "H200-141GB"].map(str::to_owned).to_vec();
            spawn_agent(cfg)
        })
        .collect();
    let mut events_sent = 0;
    for a in agents {
        let t = tokio::time::timeout(Duration::from_secs(180), a).await.unwrap().unwrap();
        assert_eq!(t.pending_batches, 0);
        events_sent += t.events;
    }
    collector.shutdown().await;

    let db = client(&ch.url());
    let started = std::time::Instant::now();
    let events = analysis::attribute_window(&db, "oomlens", &FeatureWindow::ALL).await.unwrap();
    let took = started.elapsed();
    assert_eq!(events.len() as u64, events_sent, "one feature row per event");
    let matrix = ConfusionMatrix::from_events(&events);
    println!(
        "\n{} events from {} nodes × 4 GPUs × {duration_s} simulated s (features + rules in {took:?}):",
        events.len(),
        nodes.len()
    );
    println!("{matrix}");
    let mut rules: BTreeMap<(&str, Rule), u64> = BTreeMap::new();
    for e in &events {
        *rules.entry((e.features.truth_scenario.as_str(), e.attribution.rule)).or_default() += 1;
    }
    println!("rules fired (truth, rule): {rules:?}");
    for e in events.iter().filter(|e| e.features.truth_scenario != e.attribution.scenario.as_str()) {
        println!("MISS truth {} → {:?}: {:#?}", e.features.truth_scenario, e.attribution, e.features);
    }

    // Every scenario of the taxonomy but `unknown` occurs, and the goal is met.
    for s in [
        Scenario::Static,
        Scenario::Batch,
        Scenario::Sequence,
        Scenario::Contention,
        Scenario::Fragmentation,
        Scenario::HostOom,
    ] {
        assert!(matrix.support(s) >= 2, "{s}: too few events to measure\n{matrix}");
    }
    let macro_acc = matrix.macro_accuracy().unwrap();
    assert!(macro_acc >= 0.95, "macro-averaged accuracy {macro_acc:.3} < 0.95\n{matrix}");

    // The adversarial cases, each present and attributed right.
    adversarial(&events);

    // Ground truth is never an input: blanking it changes nothing.
    for e in &events {
        let blank = OomFeatures::derive(EventEvidence {
            truth_scenario: String::new(),
            ..e.features.evidence.clone()
        });
        assert_eq!(attribute(&blank), e.attribution);
    }

    // Partial data: the message alone (no job shape, no samples) still attributes most events,
    // with lower confidence and the missing data named.
    // The same events with some of their features removed, attributed again.
    let reattributed = |strip: fn(&OomFeatures) -> OomFeatures| -> Vec<AttributedEvent> {
        events
            .iter()
            .map(|e| {
                let features = strip(&e.features);
                let attribution = attribute(&features);
                AttributedEvent { features, attribution }
            })
            .collect()
    };
    let partial = reattributed(message_only);
    let partial_matrix = ConfusionMatrix::from_events(&partial);
    println!("message only (no job shape, no process samples):\n{partial_matrix}");
    for (p, e) in partial.iter().zip(&events) {
        if e.features.kind == "cuda_oom" {
            assert!(p.attribution.missing.contains(&"job shape"), "{:?}", p.attribution);
            assert!(p.attribution.confidence_pct <= e.attribution.confidence_pct);
        }
    }
    assert!(partial_matrix.macro_accuracy().unwrap() >= 0.6, "{partial_matrix}");
    let no_shape = reattributed(without_shape);
    let no_shape_matrix = ConfusionMatrix::from_events(&no_shape);
    println!("samples without a job shape:\n{no_shape_matrix}");
    // Without the shape the samples still tell a step's activations (within the swing before)
    // from one new, larger allocation (a longer sequence): `single_huge_request` against the swing.
    assert!(no_shape_matrix.macro_accuracy().unwrap() >= 0.95, "{no_shape_matrix}");

    // Neighbours: every contention event names at least one neighbour that was present.
    let neighbours =
        analysis::features::fetch_neighbours(&db, "oomlens", &FeatureWindow::ALL, 5).await.unwrap();
    for e in events.iter().filter(|e| e.attribution.rule == Rule::NeighboursTookIt) {
        let mine: Vec<_> = neighbours
            .iter()
            .filter(|n| {
                (n.cluster.as_str(), n.node.as_str(), n.event_id)
                    == (e.features.cluster.as_str(), e.features.node.as_str(), e.features.event_id)
            })
            .collect();
        assert!(!mine.is_empty() && mine[0].present == 1, "event {}: {mine:?}", e.features.event_id);
        assert!(mine.len() <= 5);
        assert!(mine.iter().all(|n| Some(n.neighbour_pid) != e.features.pid));
    }
    drop(db);
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Checks the adversarial cases (`docs/attribution.md`): each must occur in the run and be attributed
/// to its true scenario.
fn adversarial(events: &[AttributedEvent]) {
    for case in analysis::accuracy::adversarial_cases(events) {
        println!("adversarial: {case}");
        assert!(case.events > 0, "the run has no case of: {}", case.name);
        assert_eq!(case.right, case.events, "{case}");
    }
}
