#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Message-only attribution of the corpus of real OOMs (`corpus/`): every labelled message is
//! parsed and attributed exactly as `oomlens explain` does (the agent's parser → the event it
//! would send → features → rules; no samples, no job shape). Prints the confusion matrix with
//! per-scenario precision and recall, the macro accuracy, every rule's precision and the
//! reliability table of the confidence, and asserts the goals of `docs/attribution.md`.
//!
//! `OOMLENS_CORPUS_REPORT=FILE` also writes one line per labelled record (id, label, verdict,
//! confidence, rule, alternatives) for whoever re-derives the rules.

use std::fmt::Write as _;

use oomlens_collector::analysis::accuracy::{ConfusionMatrix, Reliability, RuleScores};
use oomlens_collector::analysis::explain::explain_text;
use oomlens_collector::analysis::rules::MESSAGE_RULES_VERSION;
use oomlens_schema::Scenario;

/// The lowest macro accuracy accepted: a regression floor under the measured value (54.1 % on
/// 1032 labelled) with a margin for records added later, which have pulled it down by about a
/// point per batch of fresh records (62.7 % on 318, 59.2 % on 419, 55.9 % on 572, 55.0 % on 733,
/// 54.5 % on 824, 54.3 % on 860, 53.8 % on 981; the goal, 85 %, is in `docs/attribution.md`).
const MIN_MACRO: f64 = 0.53;
/// The lowest precision of a rule that fired at least five times (the same kind of floor: the
/// undecidable `batch_activations` — batch, sequence and static in one set of numbers — sits
/// between 34 % and 42 % as records are added, around its calibrated 40 %).
const MIN_RULE_PRECISION: f64 = 0.30;

#[test]
fn real_messages_are_attributed_to_their_established_cause() {
    let records = oomlens_corpus::load().expect("corpus");
    let mut matrix = ConfusionMatrix::new();
    // The records collected after these rules' verdicts were fixed: the honest measure.
    let mut fresh = ConfusionMatrix::new();
    let mut rules = RuleScores::default();
    let mut reliability = Reliability::default();
    let mut report = String::new();
    let mut unknown = 0;
    for r in records.iter() {
        let Some(label) = &r.label else { continue };
        let truth: Scenario = label.parse().unwrap();
        let explained = explain_text(&r.text);
        let primary = explained
            .iter()
            .find(|e| e.event.kind.as_str() == r.expect)
            .unwrap_or_else(|| panic!("{}: no {} event", r.id, r.expect));
        let a = &primary.attribution;
        let right = a.scenario == truth;
        matrix.add(truth, a.scenario);
        if r.fresh_for(MESSAGE_RULES_VERSION) {
            fresh.add(truth, a.scenario);
        }
        rules.add(a.rule.id(), truth, a.scenario);
        if a.scenario == Scenario::Unknown {
            unknown += 1;
        } else {
            reliability.add(a.confidence_pct, right);
        }
        let alts: Vec<String> =
            a.alternatives.iter().map(|x| format!("{} {}", x.scenario, x.confidence_pct)).collect();
        let f = &primary.features;
        let gib = |v: Option<u64>| {
            v.map_or_else(|| "-".to_owned(), |v| format!("{:.2}", v as f64 / (1u64 << 30) as f64))
        };
        let _ = writeln!(
            report,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\tfw={} phase={}/{} hint={} Q={} C={} F={} A={} R={} P={} others={}({}) out={}",
            if right { "ok" } else { "MISS" },
            r.id,
            label,
            a.scenario,
            a.confidence_pct,
            a.rule.id(),
            alts.join(", "),
            f.framework,
            f.phase_effective,
            f.phase_source,
            f.message_hint,
            gib(f.requested_bytes),
            gib(f.capacity_bytes),
            gib(f.free_bytes),
            gib(f.allocated_bytes),
            gib(f.reserved_bytes),
            gib(f.process_used_bytes),
            gib(f.others_bytes),
            f.others_from,
            gib(f.outside_bytes),
        );
    }
    if let Ok(path) = std::env::var("OOMLENS_CORPUS_REPORT") {
        std::fs::write(&path, &report).unwrap();
    }
    println!("{} labelled real messages, message only (parse -> features -> rules):", matrix.total());
    println!("{matrix}");
    println!("per rule:\n{rules}");
    // What the best verdict per rule would score: the bound of the evidence the rules split on.
    println!(
        "routing ceiling (the best one verdict per rule could score): macro {:.1} %\n",
        rules.routing_ceiling().unwrap() * 100.0
    );
    println!("reliability (verdicts other than unknown; {unknown} unknown):\n{reliability}");
    if fresh.total() > 0 {
        println!(
            "fresh records (collected after rules version {MESSAGE_RULES_VERSION}'s message-only verdicts were fixed): {} of {} right ({:.1} %), macro {:.1} %",
            fresh.correct(),
            fresh.total(),
            fresh.accuracy().unwrap() * 100.0,
            fresh.macro_accuracy().unwrap() * 100.0
        );
    }
    let macro_accuracy = matrix.macro_accuracy().unwrap();
    assert!(matrix.total() >= 60);
    // The goal is 85 % (docs/attribution.md); what the message alone supports today is asserted
    // so that a change cannot lower it unnoticed.
    assert!(
        macro_accuracy >= MIN_MACRO,
        "macro accuracy {:.1} % < {:.0} %",
        macro_accuracy * 100.0,
        MIN_MACRO * 100.0
    );
    if let Some((rule, p)) = rules.worst(5) {
        assert!(p >= MIN_RULE_PRECISION, "rule {rule} right {:.0} % of the time", p * 100.0);
    }
    let gap = reliability.max_gap(10).unwrap();
    assert!(gap <= 10.0, "calibration gap {gap:.1} points > 10");
}

/// The labelled messages hard-wrapped at 100 columns (a terminal's copy) keep their verdicts:
/// the parser reads a number, a phrase or a frame line the cut split whole. What still changes (a
/// framework named only in the cut piece of a prefixed line, frames cut inside the path of a
/// prefixed line, …) is counted so that it cannot grow unnoticed.
#[test]
fn hard_wrapped_messages_keep_their_verdicts() {
    const WIDTH: usize = 100;
    // (11 since a line that fills the width is read with its piece wherever the cut split the
    // failure's words: 14 before; 12 with round 25's records: tiny-cuda-nn's `Could not allocate
    // memory: …/gpu_memory.h:109 cudaMalloc(…) failed with error out of memory`, whose cut falls
    // inside the path before `cudaMalloc`, is read as an unknown program's.)
    const MOST_CHANGED: usize = 12;
    let verdict = |text: &str, expect: &str| {
        explain_text(text)
            .into_iter()
            .find(|e| e.event.kind.as_str() == expect)
            .map(|e| e.attribution.scenario)
    };
    let (mut right, mut right_wrapped, mut changed) = (0, 0, Vec::new());
    for r in oomlens_corpus::load().expect("corpus") {
        let Some(label) = &r.label else { continue };
        let truth: Scenario = label.parse().unwrap();
        let wrapped: String = r
            .text
            .lines()
            .flat_map(|line| {
                let chars: Vec<char> = line.chars().collect();
                let pieces: Vec<String> = chars.chunks(WIDTH).map(|p| p.iter().collect()).collect();
                if pieces.is_empty() { vec![String::new()] } else { pieces }
            })
            .map(|l| l + "\n")
            .collect();
        let plain = verdict(&r.text, &r.expect);
        let cut = verdict(&wrapped, &r.expect);
        right += usize::from(plain == Some(truth));
        right_wrapped += usize::from(cut == Some(truth));
        if cut != plain {
            changed.push(r.id);
        }
    }
    println!(
        "hard-wrapped at {WIDTH} columns: {right_wrapped} right (unwrapped {right}), {} verdicts changed: {}",
        changed.len(),
        changed.join(" ")
    );
    assert!(changed.len() <= MOST_CHANGED, "{} changed: {}", changed.len(), changed.join(" "));
}
