//! The ordered rule set: one [`OomFeatures`] row → scenario, confidence, evidence and remedy.
//!
//! The rules follow the triage order of the domain document (`shared/seed/oom-scenarios.zh.txt`):
//! host OOMs by kind; then (1) when it failed, (2) the static state against the capacity, (3) batch
//! and sequence — only when the process alone needed more than the GPU at the failure, (4) the
//! other processes and fragmentation — when it would have fitted alone, (5) the remedy of the
//! scenario ([`Scenario::remedy`]). The first rule that matches wins; `docs/attribution.md`
//! documents each one. `collector/sql/oom_attribution.sql` is the same rule set in SQL (a test
//! checks that both give the same rule and confidence on every event).
//!
//! "need alone" = context (process used − reserved) + allocated + requested: the memory the
//! process needed at the failure without any other process on the GPU.
//!
//! Confidence is an integer percent: the rule's base, minus, for the GPU rules, 10 without a job
//! shape, 10 without process samples, 15 without the allocator's numbers, 5 when the phase is
//! neither reported nor inferable; kept within 5–99. The evidence says what was missing.

use std::fmt::Write as _;

use oomlens_schema::Scenario;
use serde::Serialize;

use super::features::OomFeatures;
use crate::report::human_bytes;

const MIB: u64 = 1 << 20;

/// Version of the rule set, stored with every attribution (`oom_attributions.rules_version`).
/// Bump it when a rule, its order or its confidence changes: readers always re-run the current
/// rules on the stored features; the version tells which rules the stored `scenario` came from.
pub const RULES_VERSION: u32 = 2;

/// One rule of the ordered set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// 1. The Linux OOM killer ended the process.
    HostOomKill,
    /// 2. An Xid error: a GPU fault, not memory exhaustion.
    XidError,
    /// 3. Context + weights + gradients + optimizer state (job shape) exceed the GPU.
    StaticEstimate,
    /// 4. Failed at load / optimizer init / start-up needing more than the GPU alone.
    StaticAtStartup,
    /// 5. Needed more than the GPU alone, and the failed request is one layer's seq² attention matrix.
    SequenceAttention,
    /// 6. Needed more than the GPU alone, no job shape, and one request of ≥ ¼ of the GPU that is
    ///    larger than the process's whole swing (peak − floor) in the window before (when sampled).
    SequenceSingleRequest,
    /// 7. Needed more than the GPU alone in forward/backward: activations.
    BatchActivations,
    /// 8. The allocator's cache held at least the requested bytes, not in one block.
    CacheCouldServe,
    /// 9. Would have fitted alone (with its own cache); other processes held the difference.
    NeighboursTookIt,
    /// 10. Would have fitted alone, and nobody else was there: its own cache was in pieces.
    FragmentedCache,
    /// 11. No allocator numbers, but the neighbours grew by ≥ 10 % of the GPU before it vanished.
    NeighbourGrowth,
    /// 12. Nothing matched.
    NoEvidence,
}

impl Rule {
    /// Every rule, in evaluation order.
    pub const ALL: [Rule; 12] = [
        Rule::HostOomKill,
        Rule::XidError,
        Rule::StaticEstimate,
        Rule::StaticAtStartup,
        Rule::SequenceAttention,
        Rule::SequenceSingleRequest,
        Rule::BatchActivations,
        Rule::CacheCouldServe,
        Rule::NeighboursTookIt,
        Rule::FragmentedCache,
        Rule::NeighbourGrowth,
        Rule::NoEvidence,
    ];

    /// The stable name (as `oom_attribution` returns it).
    pub const fn id(self) -> &'static str {
        match self {
            Rule::HostOomKill => "host_oom_kill",
            Rule::XidError => "xid_error",
            Rule::StaticEstimate => "static_estimate",
            Rule::StaticAtStartup => "static_at_startup",
            Rule::SequenceAttention => "sequence_attention",
            Rule::SequenceSingleRequest => "sequence_single_request",
            Rule::BatchActivations => "batch_activations",
            Rule::CacheCouldServe => "cache_could_serve",
            Rule::NeighboursTookIt => "neighbours_took_it",
            Rule::FragmentedCache => "fragmented_cache",
            Rule::NeighbourGrowth => "neighbour_growth",
            Rule::NoEvidence => "no_evidence",
        }
    }

    /// The rule called `id`.
    pub fn from_id(id: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.id() == id)
    }

    /// The scenario it concludes.
    pub const fn scenario(self) -> Scenario {
        match self {
            Rule::HostOomKill => Scenario::HostOom,
            Rule::StaticEstimate | Rule::StaticAtStartup => Scenario::Static,
            Rule::SequenceAttention | Rule::SequenceSingleRequest => Scenario::Sequence,
            Rule::BatchActivations => Scenario::Batch,
            Rule::CacheCouldServe | Rule::FragmentedCache => Scenario::Fragmentation,
            Rule::NeighboursTookIt | Rule::NeighbourGrowth => Scenario::Contention,
            Rule::XidError | Rule::NoEvidence => Scenario::Unknown,
        }
    }

    /// Confidence in percent with complete data.
    pub const fn base_confidence(self) -> u8 {
        match self {
            Rule::HostOomKill | Rule::StaticEstimate => 95,
            Rule::SequenceAttention | Rule::CacheCouldServe => 90,
            Rule::BatchActivations | Rule::NeighboursTookIt => 85,
            Rule::StaticAtStartup | Rule::FragmentedCache => 75,
            Rule::SequenceSingleRequest => 60,
            Rule::NeighbourGrowth => 50,
            Rule::XidError => 30,
            Rule::NoEvidence => 20,
        }
    }
}

/// What the rules concluded about one event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attribution {
    /// The scenario.
    #[serde(serialize_with = "scenario_name")]
    pub scenario: Scenario,
    /// The rule that fired.
    pub rule: Rule,
    /// Confidence, percent (5–99).
    pub confidence_pct: u8,
    /// Human-readable evidence, in triage order, with the numbers.
    pub evidence: Vec<String>,
    /// The domain document's first remedy for the scenario.
    pub remedy: &'static str,
    /// The data that was missing (`job shape`, `process samples`, `allocator numbers`, `phase`,
    /// `capacity`, `other processes`).
    pub missing: Vec<&'static str>,
}

impl Attribution {
    /// Confidence as a fraction in `[0, 1]`.
    pub fn confidence(&self) -> f64 {
        f64::from(self.confidence_pct) / 100.0
    }
}

fn scenario_name<S: serde::Serializer>(sc: &Scenario, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(sc.as_str())
}

/// The intermediate quantities of the rules (the SQL computes the same).
#[derive(Debug, Clone, Copy)]
struct Facts {
    ctx: u64,
    too_big_alone: bool,
    startup: bool,
}

fn facts(f: &OomFeatures) -> Facts {
    let ctx = f.context_bytes.unwrap_or(0);
    let too_big_alone = matches!((f.need_alone_bytes, f.capacity_bytes), (Some(n), Some(c)) if n > c);
    let startup = matches!(f.phase_effective.as_str(), "load" | "optimizer_init" | "startup");
    Facts { ctx, too_big_alone, startup }
}

/// The first rule of the ordered set that matches `f`.
pub fn first_rule(f: &OomFeatures) -> Rule {
    let Facts { ctx, too_big_alone, startup } = facts(f);
    let cap = f.capacity_bytes;
    let lt = |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(a), Some(b)) if u128::from(a) <= u128::from(b));
    if f.kind == "host_oom_kill" {
        return Rule::HostOomKill;
    }
    if f.kind == "xid" {
        return Rule::XidError;
    }
    if let (Some(s), Some(c)) = (f.static_estimate_bytes, cap)
        && u128::from(ctx) + u128::from(s) > u128::from(c)
    {
        return Rule::StaticEstimate;
    }
    if startup && too_big_alone {
        return Rule::StaticAtStartup;
    }
    if too_big_alone {
        if let (Some(att), Some(req)) = (f.attention_bytes, f.requested_bytes)
            && att > 0
        {
            let tolerance = (2 * MIB).max(att / 20);
            if u128::from(req) + u128::from(tolerance) >= u128::from(att)
                && u128::from(req) <= u128::from(att) + u128::from(tolerance)
            {
                return Rule::SequenceAttention;
            }
        }
        // A step's activations come back every step, so the process's swing before the failure
        // covers requests of that size; one request beyond the whole swing is new: a longer
        // sequence's attention / logits.
        if f.attention_bytes.is_none()
            && let (Some(req), Some(c)) = (f.requested_bytes, cap)
            && u128::from(req) * 4 >= u128::from(c)
            && f.own_swing_bytes.is_none_or(|swing| req > swing)
        {
            return Rule::SequenceSingleRequest;
        }
        return Rule::BatchActivations;
    }
    if lt(f.requested_bytes, f.cached_free_bytes) {
        return Rule::CacheCouldServe;
    }
    if f.others_bytes.is_some_and(|o| o > 0) {
        // With the allocator's numbers: would it have fitted alone even with its own cache?
        let with_cache = match (f.reserved_bytes.or(f.allocated_bytes), f.requested_bytes) {
            (Some(held), Some(req)) => Some(u128::from(ctx) + u128::from(held) + u128::from(req)),
            _ => f.need_alone_bytes.map(u128::from),
        };
        if let (Some(n), Some(c)) = (with_cache, cap)
            && n <= u128::from(c)
        {
            return Rule::NeighboursTookIt;
        }
    }
    if !f.no_allocator() && lt(f.need_alone_bytes, cap) {
        return Rule::FragmentedCache;
    }
    if f.no_allocator()
        && let Some(c) = cap
        && i128::from(f.others_growth_bytes) * 10 >= i128::from(c)
    {
        return Rule::NeighbourGrowth;
    }
    Rule::NoEvidence
}

/// What was missing for `f` (GPU events only).
pub fn missing(f: &OomFeatures) -> Vec<&'static str> {
    if !f.gpu_event() {
        return Vec::new();
    }
    let mut m = Vec::new();
    if f.no_shape() {
        m.push("job shape");
    }
    if f.own_samples == 0 {
        m.push("process samples");
    }
    if f.no_allocator() {
        m.push("allocator numbers");
    }
    if f.phase_source == "unknown" {
        m.push("phase");
    }
    if f.capacity_bytes.is_none() {
        m.push("capacity");
    }
    if f.others_bytes.is_none() {
        m.push("other processes");
    }
    m
}

/// The confidence of `rule` for `f`, percent.
pub fn confidence_pct(rule: Rule, f: &OomFeatures) -> u8 {
    let mut pct = i32::from(rule.base_confidence());
    if f.gpu_event() {
        pct -= 10 * i32::from(f.no_shape())
            + 10 * i32::from(f.own_samples == 0)
            + 15 * i32::from(f.no_allocator())
            + 5 * i32::from(f.phase_source == "unknown");
    }
    pct.clamp(5, 99) as u8
}

fn b(v: u64) -> String {
    human_bytes(Some(v))
}

fn bi(v: i64) -> String {
    if v < 0 { format!("-{}", b(v.unsigned_abs())) } else { format!("+{}", b(v.unsigned_abs())) }
}

fn pct_of(part: u64, whole: u64) -> String {
    if whole == 0 { "-".to_owned() } else { format!("{:.0} %", part as f64 * 100.0 / whole as f64) }
}

fn secs(ms: i64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// Applies the rule set to `f`. Never reads `truth_scenario`.
pub fn attribute(f: &OomFeatures) -> Attribution {
    let rule = first_rule(f);
    let scenario = rule.scenario();
    let missing = missing(f);
    let mut ev = Vec::new();
    ev.push(format!("rule {}: {}", rule.id(), conclusion(rule, f)));
    if f.gpu_event() {
        gpu_evidence(f, &mut ev);
    } else if let Some(rss) = f.host_rss_bytes {
        ev.push(format!("host: the killed process held {} of host RAM", b(rss)));
    }
    if !missing.is_empty() {
        ev.push(format!("missing: {} (confidence lowered)", missing.join(", ")));
    }
    Attribution {
        scenario,
        rule,
        confidence_pct: confidence_pct(rule, f),
        evidence: ev,
        remedy: scenario.remedy(),
        missing,
    }
}

fn conclusion(rule: Rule, f: &OomFeatures) -> String {
    let cap = f.capacity_bytes.map_or_else(|| "-".to_owned(), b);
    match rule {
        Rule::HostOomKill => "the Linux OOM killer ended the process: host RAM ran out".to_owned(),
        Rule::XidError => format!(
            "Xid {} is a GPU/driver error, not GPU memory exhaustion",
            f.xid.map_or_else(|| "?".to_owned(), |x| x.to_string())
        ),
        Rule::StaticEstimate => format!(
            "weights + gradients + optimizer state alone ({}) exceed the GPU ({cap})",
            f.static_estimate_bytes.map_or_else(|| "-".to_owned(), b)
        ),
        Rule::StaticAtStartup => format!(
            "failed during {} needing {} alone on a {cap} GPU: the static state does not fit",
            phase_words(f),
            f.need_alone_bytes.map_or_else(|| "-".to_owned(), b)
        ),
        Rule::SequenceAttention => format!(
            "the failed request ({}) is one layer's seq² attention matrix at seq {}",
            f.requested_bytes.map_or_else(|| "-".to_owned(), b),
            f.seq_len.map_or_else(|| "?".to_owned(), |s| s.to_string())
        ),
        Rule::SequenceSingleRequest => format!(
            "one single request of {} ({} of the GPU{}) while the job alone needed more than the GPU",
            f.requested_bytes.map_or_else(|| "-".to_owned(), b),
            pct_of(f.requested_bytes.unwrap_or(0), f.capacity_bytes.unwrap_or(0)),
            f.own_swing_bytes
                .map_or_else(String::new, |s| format!(", more than its whole swing of {}", b(s)))
        ),
        Rule::BatchActivations => format!(
            "the job alone needed {} > {cap} in {}: the activations of batch {} do not fit",
            f.need_alone_bytes.map_or_else(|| "-".to_owned(), b),
            phase_words(f),
            f.batch_size.map_or_else(|| "?".to_owned(), |s| s.to_string())
        ),
        Rule::CacheCouldServe => format!(
            "the allocator had {} cached (reserved − allocated) ≥ the {} requested, but not in one block",
            f.cached_free_bytes.map_or_else(|| "-".to_owned(), b),
            f.requested_bytes.map_or_else(|| "-".to_owned(), b)
        ),
        Rule::NeighboursTookIt => format!(
            "the job alone would have fitted ({} needed of {cap}); other processes held {}",
            f.need_alone_bytes.map_or_else(|| "-".to_owned(), b),
            f.others_bytes.map_or_else(|| "-".to_owned(), b)
        ),
        Rule::FragmentedCache => format!(
            "the job alone would have fitted ({} needed of {cap}) and no other process held memory: its cache was in unusable pieces",
            f.need_alone_bytes.map_or_else(|| "-".to_owned(), b)
        ),
        Rule::NeighbourGrowth => format!(
            "no allocator numbers; the other processes on the GPU grew by {} in the {} before",
            bi(f.others_growth_bytes),
            secs(f.window_ms)
        ),
        Rule::NoEvidence => "not enough evidence for any scenario".to_owned(),
    }
}

fn phase_words(f: &OomFeatures) -> String {
    match (f.phase_effective.as_str(), f.phase_source.as_str()) {
        ("", _) => "an unknown phase".to_owned(),
        ("startup", _) => "start-up (inferred)".to_owned(),
        ("steady", _) => "steady-state steps (inferred)".to_owned(),
        (p, _) => p.replace('_', " "),
    }
}

fn gpu_evidence(f: &OomFeatures, ev: &mut Vec<String>) {
    // 1. when
    let when = match f.phase_source.as_str() {
        "reported" => format!("when: {} (reported)", f.phase.replace('_', " ")),
        "inferred" => format!(
            "when: {} (inferred: first seen {} before the failure at {}, last {} of a {} peak)",
            phase_words(f),
            secs(f.ts_ms - f.own_first_ts),
            b(f.own_first_used),
            b(f.own_last_used),
            b(f.own_max_used)
        ),
        _ => "when: unknown (no phase reported, no process samples)".to_owned(),
    };
    ev.push(when);
    if f.own_samples > 0 {
        ev.push(format!(
            "curve: {} samples in the {} before: first {}, floor {}, peak {}, last {} (swing {})",
            f.own_samples,
            secs(f.window_ms),
            b(f.own_first_used),
            b(f.own_min_used),
            b(f.own_max_used),
            b(f.own_last_used),
            b(f.own_swing_bytes.unwrap_or(0))
        ));
    }
    // 2. static
    match (f.static_estimate_bytes, f.capacity_bytes) {
        (Some(s), Some(c)) => {
            let mut line = format!(
                "static: {} from the job shape ({} params/GPU × {} B weights",
                b(s),
                f.params_per_gpu.map_or_else(|| "?".to_owned(), |p| format!("{:.2} B", p as f64 / 1e9)),
                f.weight_bytes_per_param.unwrap_or(0)
            );
            if !f.optimizer.is_empty() {
                let _ = write!(
                    line,
                    " + {} B grads + {} B {} state",
                    f.weight_bytes_per_param.unwrap_or(0),
                    f.optimizer_bytes_per_param.unwrap_or(0),
                    f.optimizer
                );
            }
            if f.zero_stage.unwrap_or(0) > 0 {
                let _ = write!(line, ", ZeRO-{} over {}", f.zero_stage.unwrap_or(0), f.zero_divisor);
            }
            let _ = write!(line, ") = {} of the {} GPU", pct_of(s, c), b(c));
            ev.push(line);
        }
        _ => ev.push("static: no estimate (job shape or precision not known)".to_owned()),
    }
    // 3. batch / sequence
    if let (Some(need), Some(c)) = (f.need_alone_bytes, f.capacity_bytes) {
        let parts = match f.need_alone_from.as_str() {
            "allocator" => format!(
                "context {} + allocated {} + requested {}",
                b(f.context_bytes.unwrap_or(0)),
                b(f.allocated_bytes.unwrap_or(0)),
                b(f.requested_bytes.unwrap_or(0))
            ),
            "process" => format!(
                "its GPU memory {} + requested {} (no allocator numbers)",
                b(need.saturating_sub(f.requested_bytes.unwrap_or(0))),
                b(f.requested_bytes.unwrap_or(0))
            ),
            _ => format!(
                "its last sample {} + requested {} (no allocator numbers)",
                b(f.own_last_used),
                b(f.requested_bytes.unwrap_or(0))
            ),
        };
        ev.push(format!("need alone: {} = {parts} ({} of capacity {})", b(need), pct_of(need, c), b(c)));
    }
    if f.batch_size.is_some() || f.seq_len.is_some() {
        let mut line = format!(
            "shape: batch {}, seq {}",
            f.batch_size.map_or_else(|| "?".to_owned(), |v| v.to_string()),
            f.seq_len.map_or_else(|| "?".to_owned(), |v| v.to_string())
        );
        match f.attention_bytes {
            Some(0) => line.push_str(", FlashAttention on (no seq² matrix)"),
            Some(a) => {
                let _ = write!(line, ", one layer's attention matrix {}", b(a));
            }
            None => {}
        }
        if f.activation_checkpointing == Some(1) {
            line.push_str(", activation checkpointing on");
        }
        ev.push(line);
    }
    // 4. others and fragmentation
    match f.others_bytes {
        Some(0) => ev.push("others: no other process held memory on the GPU".to_owned()),
        Some(o) => {
            let mut line = if f.others_listed > 0 {
                format!("others: {} other process(es) held {} at the failure", f.others_listed, b(o))
            } else {
                format!("others: other processes held {} at the failure (process samples)", b(o))
            };
            if f.others_seen > 0 {
                let _ = write!(
                    line,
                    "; they grew by {} in the {} before (largest {})",
                    bi(f.others_growth_bytes),
                    secs(f.window_ms),
                    bi(f.top_neighbour_growth_bytes)
                );
            }
            ev.push(line);
        }
        None => {}
    }
    if let (Some(cached), Some(req)) = (f.cached_free_bytes, f.requested_bytes) {
        ev.push(format!(
            "allocator: reserved − allocated = {} cached, {} requested, {} free on the GPU",
            b(cached),
            b(req),
            f.free_bytes.map_or_else(|| "-".to_owned(), b)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// A fully observed CUDA OOM on an 80 GiB GPU, refined per case.
    fn base() -> OomFeatures {
        OomFeatures {
            cluster: "c".into(),
            node: "n".into(),
            event_id: 1,
            ts_ms: 100_000,
            kind: "cuda_oom".into(),
            gpu_index: Some(0),
            pid: Some(42),
            phase: "forward".into(),
            phase_effective: "forward".into(),
            phase_source: "reported".into(),
            requested_bytes: Some(2 * GIB),
            capacity_bytes: Some(80 * GIB),
            free_bytes: Some(GIB),
            allocated_bytes: Some(78 * GIB),
            reserved_bytes: Some(78 * GIB),
            process_used_bytes: Some(78 * GIB + GIB / 2),
            params: Some(1_000_000_000),
            batch_size: Some(8),
            seq_len: Some(2048),
            heads: Some(16),
            precision: "bf16".into(),
            optimizer: "adamw".into(),
            flash_attention: Some(1),
            context_bytes: Some(GIB / 2),
            cached_free_bytes: Some(0),
            need_alone_from: "allocator".into(),
            need_alone_bytes: Some(GIB / 2 + 80 * GIB),
            params_per_gpu: Some(1_000_000_000),
            weight_bytes_per_param: Some(2),
            optimizer_bytes_per_param: Some(12),
            zero_divisor: 1,
            static_estimate_bytes: Some(16_000_000_000),
            attention_bytes: Some(0),
            window_ms: 60_000,
            own_samples: 60,
            own_first_ts: 40_000,
            own_first_used: 60 * GIB,
            own_min_used: 60 * GIB,
            own_max_used: 70 * GIB,
            own_last_used: 70 * GIB,
            own_swing_bytes: Some(10 * GIB),
            others_bytes: Some(0),
            ..OomFeatures::default()
        }
    }

    fn rule(f: &OomFeatures) -> Rule {
        attribute(f).rule
    }

    #[test]
    fn each_rule_fires_on_its_case() {
        let f = base();
        assert_eq!(rule(&f), Rule::BatchActivations);
        assert_eq!(attribute(&f).scenario, Scenario::Batch);
        assert_eq!(attribute(&f).confidence_pct, 85);

        let host = OomFeatures { kind: "host_oom_kill".into(), gpu_index: None, ..OomFeatures::default() };
        assert_eq!(rule(&host), Rule::HostOomKill);
        assert_eq!(attribute(&host).confidence_pct, 95, "no GPU penalties for host OOMs");
        assert!(attribute(&host).missing.is_empty());
        let xid = OomFeatures { kind: "xid".into(), xid: Some(79), ..OomFeatures::default() };
        assert_eq!(attribute(&xid).scenario, Scenario::Unknown);

        let stat = OomFeatures { static_estimate_bytes: Some(100 * GIB), ..base() };
        assert_eq!(rule(&stat), Rule::StaticEstimate);
        let startup = OomFeatures {
            phase: "optimizer_init".into(),
            phase_effective: "optimizer_init".into(),
            static_estimate_bytes: None,
            ..base()
        };
        assert_eq!(rule(&startup), Rule::StaticAtStartup);

        let att = 20 * GIB;
        let seq = OomFeatures { attention_bytes: Some(att), requested_bytes: Some(att), ..base() };
        assert_eq!(rule(&seq), Rule::SequenceAttention);
        let off = OomFeatures { attention_bytes: Some(att), requested_bytes: Some(att / 2), ..base() };
        assert_eq!(rule(&off), Rule::BatchActivations, "a request that is not the attention matrix");
        let no_shape = OomFeatures {
            params: None,
            batch_size: None,
            seq_len: None,
            attention_bytes: None,
            static_estimate_bytes: None,
            requested_bytes: Some(30 * GIB),
            need_alone_bytes: Some(100 * GIB),
            ..base()
        };
        assert_eq!(rule(&no_shape), Rule::SequenceSingleRequest, "30 GiB > the 10 GiB swing");
        assert_eq!(attribute(&no_shape).confidence_pct, 50);
        assert_eq!(attribute(&no_shape).missing, ["job shape"]);
        // The same request within the swing of the steps before: a step's activations (batch).
        let within_swing = OomFeatures { own_swing_bytes: Some(40 * GIB), ..no_shape.clone() };
        assert_eq!(rule(&within_swing), Rule::BatchActivations);
        let unsampled = OomFeatures { own_samples: 0, own_swing_bytes: None, ..within_swing.clone() };
        assert_eq!(rule(&unsampled), Rule::SequenceSingleRequest, "no samples: the request size alone");

        let fits = OomFeatures { need_alone_bytes: Some(60 * GIB), ..base() };
        let cache = OomFeatures { cached_free_bytes: Some(3 * GIB), ..fits.clone() };
        assert_eq!(rule(&cache), Rule::CacheCouldServe);
        let contention = OomFeatures {
            allocated_bytes: Some(50 * GIB),
            reserved_bytes: Some(50 * GIB),
            others_bytes: Some(28 * GIB),
            ..fits.clone()
        };
        assert_eq!(rule(&contention), Rule::NeighboursTookIt);
        let own_cache = OomFeatures { reserved_bytes: Some(79 * GIB), ..contention.clone() };
        assert_eq!(
            rule(&own_cache),
            Rule::FragmentedCache,
            "its own cache, not the neighbours, left no room"
        );
        assert_eq!(rule(&fits), Rule::FragmentedCache);

        let vanished = OomFeatures {
            kind: "suspected_oom".into(),
            requested_bytes: None,
            allocated_bytes: None,
            reserved_bytes: None,
            need_alone_bytes: None,
            cached_free_bytes: None,
            others_growth_bytes: 20 * GIB as i64,
            ..base()
        };
        assert_eq!(rule(&vanished), Rule::NeighbourGrowth);
        // TensorFlow / JAX: a request and the process's memory, no allocator numbers.
        let tf = OomFeatures {
            allocated_bytes: None,
            reserved_bytes: None,
            cached_free_bytes: None,
            need_alone_from: "process".into(),
            need_alone_bytes: Some(70 * GIB),
            others_bytes: Some(20 * GIB),
            ..base()
        };
        assert_eq!(rule(&tf), Rule::NeighboursTookIt);
        assert_eq!(
            rule(&OomFeatures { others_bytes: Some(0), ..tf.clone() }),
            Rule::NoEvidence,
            "fragmentation needs the allocator"
        );
        assert_eq!(
            rule(&OomFeatures { need_alone_bytes: Some(90 * GIB), ..tf.clone() }),
            Rule::BatchActivations
        );
        assert!(
            attribute(&tf)
                .evidence
                .iter()
                .any(|l| l.contains("its GPU memory 68.00 GiB + requested 2.00 GiB")),
            "{:?}",
            attribute(&tf).evidence
        );
        assert_eq!(rule(&OomFeatures { others_growth_bytes: 0, ..vanished }), Rule::NoEvidence);
    }

    #[test]
    fn partial_data_lowers_confidence_and_says_what_is_missing() {
        let message_only = OomFeatures {
            own_samples: 0,
            own_first_ts: 0,
            own_first_used: 0,
            own_min_used: 0,
            own_max_used: 0,
            own_last_used: 0,
            own_swing_bytes: None,
            params: None,
            batch_size: None,
            seq_len: None,
            heads: None,
            precision: String::new(),
            optimizer: String::new(),
            static_estimate_bytes: None,
            attention_bytes: None,
            phase: String::new(),
            phase_effective: String::new(),
            phase_source: "unknown".into(),
            others_bytes: None,
            ..base()
        };
        let a = attribute(&message_only);
        assert_eq!(a.rule, Rule::BatchActivations);
        assert_eq!(a.confidence_pct, 85 - 10 - 10 - 5);
        assert_eq!(a.missing, ["job shape", "process samples", "phase", "other processes"]);
        assert!(a.evidence.iter().any(|e| e.starts_with("missing: job shape, process samples")), "{a:?}");
        assert!(a.evidence.iter().any(|e| e.contains("when: unknown")), "{a:?}");
        let nothing = OomFeatures {
            kind: "suspected_oom".into(),
            phase_source: "unknown".into(),
            ..OomFeatures::default()
        };
        let a = attribute(&nothing);
        assert_eq!((a.rule, a.confidence_pct), (Rule::NoEvidence, 5));
        assert_eq!(a.remedy, Scenario::Unknown.remedy());
    }

    #[test]
    fn evidence_has_the_numbers_in_human_units() {
        let a = attribute(&base());
        let text = a.evidence.join("\n");
        assert!(
            text.contains(
                "need alone: 80.50 GiB = context 512.00 MiB + allocated 78.00 GiB + requested 2.00 GiB"
            ),
            "{text}"
        );
        assert!(text.contains("static: 14.90 GiB from the job shape (1.00 B params/GPU × 2 B weights + 2 B grads + 12 B adamw state) = 19 % of the 80.00 GiB GPU"), "{text}");
        assert!(text.contains("FlashAttention on"), "{text}");
        assert!(text.contains("others: no other process"), "{text}");
        assert_eq!(a.remedy, Scenario::Batch.remedy());
    }

    #[test]
    fn truth_is_never_an_input() {
        for mut f in [base(), OomFeatures { kind: "host_oom_kill".into(), ..base() }] {
            let before = attribute(&f);
            for truth in ["", "static", "contention", "nonsense"] {
                f.truth_scenario = truth.to_owned();
                assert_eq!(attribute(&f), before);
            }
        }
    }

    #[test]
    fn rule_ids_round_trip() {
        for r in Rule::ALL {
            assert_eq!(Rule::from_id(r.id()), Some(r));
            assert!((5..=99).contains(&r.base_confidence()));
        }
        assert_eq!(Rule::from_id("nope"), None);
    }
}
