//! Measuring attribution against ground truth: a confusion matrix of truth × attributed scenario,
//! per-scenario precision and recall and the macro averages ([`ConfusionMatrix`]); per-rule
//! precision ([`RuleScores`]); and the calibration of the confidence ([`Reliability`]: in each
//! confidence band, the mean confidence against the share that was right).
//!
//! "Macro-averaged accuracy" is the mean of the per-scenario recalls over the scenarios present in
//! the truth (balanced accuracy): every scenario weighs the same, however rare.

use std::collections::BTreeMap;
use std::fmt;

use oomlens_schema::Scenario;

use super::AttributedEvent;

/// Counts of (truth, attributed) pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfusionMatrix {
    counts: BTreeMap<(Scenario, Scenario), u64>,
}

impl ConfusionMatrix {
    /// An empty matrix.
    pub fn new() -> Self {
        Self::default()
    }

    /// The events that carry a ground-truth label (simulated ones), each once.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a AttributedEvent>) -> Self {
        let mut m = Self::new();
        for e in events {
            if let Ok(truth) = e.features.truth_scenario.parse::<Scenario>() {
                m.add(truth, e.attribution.scenario);
            }
        }
        m
    }

    /// Counts one event.
    pub fn add(&mut self, truth: Scenario, attributed: Scenario) {
        *self.counts.entry((truth, attributed)).or_default() += 1;
    }

    /// Events with this truth and this attribution.
    pub fn count(&self, truth: Scenario, attributed: Scenario) -> u64 {
        self.counts.get(&(truth, attributed)).copied().unwrap_or(0)
    }

    /// Every counted event.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Events attributed to their true scenario.
    pub fn correct(&self) -> u64 {
        self.counts.iter().filter(|((t, a), _)| t == a).map(|(_, n)| n).sum()
    }

    /// Events whose truth is `s`.
    pub fn support(&self, s: Scenario) -> u64 {
        self.counts.iter().filter(|((t, _), _)| *t == s).map(|(_, n)| n).sum()
    }

    fn attributed(&self, s: Scenario) -> u64 {
        self.counts.iter().filter(|((_, a), _)| *a == s).map(|(_, n)| n).sum()
    }

    /// The scenarios that occur in the truth, in taxonomy order.
    pub fn truths(&self) -> Vec<Scenario> {
        Scenario::ALL.into_iter().filter(|s| self.support(*s) > 0).collect()
    }

    /// Of the events attributed to `s`, the share that truly are `s` (None: none attributed).
    pub fn precision(&self, s: Scenario) -> Option<f64> {
        let n = self.attributed(s);
        (n > 0).then(|| self.count(s, s) as f64 / n as f64)
    }

    /// Of the events that truly are `s`, the share attributed to `s` (None: none occurred).
    pub fn recall(&self, s: Scenario) -> Option<f64> {
        let n = self.support(s);
        (n > 0).then(|| self.count(s, s) as f64 / n as f64)
    }

    /// The share of all events attributed correctly (None when empty).
    pub fn accuracy(&self) -> Option<f64> {
        let n = self.total();
        (n > 0).then(|| self.correct() as f64 / n as f64)
    }

    /// Mean recall over the scenarios present in the truth (None when empty).
    pub fn macro_accuracy(&self) -> Option<f64> {
        mean(self.truths().into_iter().filter_map(|s| self.recall(s)))
    }

    /// Mean precision over the scenarios present in the truth (a scenario never attributed counts 0).
    pub fn macro_precision(&self) -> Option<f64> {
        mean(self.truths().into_iter().map(|s| self.precision(s).unwrap_or(0.0)))
    }
}

/// How often each rule was right, and the true scenarios of the events each rule took. A rule's
/// `unknown` verdicts are abstentions: they count in its events (and the routing ceiling) but not
/// in its precision, which is over the verdicts it committed to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleScores {
    /// Per rule: its events' true scenarios (counts) and its tally.
    counts: BTreeMap<&'static str, (BTreeMap<Scenario, u64>, Tally)>,
}

/// One rule's verdicts: right, and `unknown` (abstained).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tally {
    right: u64,
    abstained: u64,
}

impl RuleScores {
    /// Counts one event of true scenario `truth` that `rule` attributed to `attributed`.
    pub fn add(&mut self, rule: &'static str, truth: Scenario, attributed: Scenario) {
        let e = self.counts.entry(rule).or_default();
        *e.0.entry(truth).or_default() += 1;
        e.1.right += u64::from(truth == attributed);
        e.1.abstained += u64::from(attributed == Scenario::Unknown);
    }

    /// `(rule, events, right)` per rule, by name.
    pub fn rows(&self) -> Vec<(&'static str, u64, u64)> {
        self.counts.iter().map(|(r, (truths, t))| (*r, truths.values().sum(), t.right)).collect()
    }

    /// A rule's precision: right / the verdicts other than `unknown` (None: it only abstained).
    fn precision(truths: &BTreeMap<Scenario, u64>, t: Tally) -> Option<f64> {
        let committed = truths.values().sum::<u64>() - t.abstained;
        (committed > 0).then(|| t.right as f64 / committed as f64)
    }

    /// The lowest precision of a rule that committed to a verdict at least `min_events` times.
    pub fn worst(&self, min_events: u64) -> Option<(&'static str, f64)> {
        self.counts
            .iter()
            .filter(|(_, (truths, t))| truths.values().sum::<u64>() - t.abstained >= min_events)
            .filter_map(|(r, (truths, t))| Some((*r, Self::precision(truths, *t)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The routing ceiling: the highest macro accuracy (mean recall) any choice of one verdict
    /// per rule could score, with the events divided among the rules as they are (None when
    /// empty). Each scenario's recall adds `events of it / its support`, so the best verdict of a
    /// rule is the scenario with the largest share of its support among the rule's events. A goal
    /// above the ceiling needs evidence that divides the events differently, not other verdicts.
    pub fn routing_ceiling(&self) -> Option<f64> {
        let mut support: BTreeMap<Scenario, u64> = BTreeMap::new();
        for (truths, _) in self.counts.values() {
            for (s, n) in truths {
                *support.entry(*s).or_default() += n;
            }
        }
        let mut m = ConfusionMatrix::new();
        for (truths, _) in self.counts.values() {
            let share = |s: &Scenario| truths.get(s).map_or(0.0, |n| *n as f64 / support[s] as f64);
            let Some(best) =
                truths.keys().copied().max_by(|a, b| share(a).total_cmp(&share(b)).then(b.cmp(a)))
            else {
                continue;
            };
            for (truth, n) in truths {
                for _ in 0..*n {
                    m.add(*truth, best);
                }
            }
        }
        m.macro_accuracy()
    }
}

impl fmt::Display for RuleScores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<24} {:>6} {:>6} {:>10}  true scenarios", "rule", "events", "right", "precision")?;
        for (r, (truths, t)) in &self.counts {
            let n: u64 = truths.values().sum();
            let mut by: Vec<(&Scenario, &u64)> = truths.iter().collect();
            by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let listed = by.iter().map(|(s, c)| format!("{s} {c}")).collect::<Vec<_>>().join(", ");
            let precision = match Self::precision(truths, *t) {
                Some(p) => pct(Some(p)),
                None => "abstains".to_owned(),
            };
            writeln!(f, "{r:<24} {n:>6} {:>6} {precision:>10}  {listed}", t.right)?;
        }
        Ok(())
    }
}

/// Confidence bands of the reliability table (percent, lower bound inclusive).
pub const BANDS: [(u8, u8); 5] = [(0, 20), (20, 40), (40, 60), (60, 80), (80, 101)];

/// The reliability table: per confidence band, how many events, their mean confidence and the
/// share that was right. A calibrated attribution has mean confidence ≈ share right in every band.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reliability {
    bands: [(u64, u64, u64); 5],
}

impl Reliability {
    /// Counts one event given `confidence_pct` that was `right`.
    pub fn add(&mut self, confidence_pct: u8, right: bool) {
        let i = BANDS.iter().position(|(lo, hi)| confidence_pct >= *lo && confidence_pct < *hi).unwrap_or(4);
        let b = &mut self.bands[i];
        b.0 += 1;
        b.1 += u64::from(confidence_pct);
        b.2 += u64::from(right);
    }

    /// `(band, events, mean confidence, share right)` per band with events.
    pub fn rows(&self) -> Vec<((u8, u8), u64, f64, f64)> {
        BANDS
            .iter()
            .zip(self.bands)
            .filter(|(_, b)| b.0 > 0)
            .map(|(band, (n, conf, right))| {
                (*band, n, conf as f64 / n as f64 / 100.0, right as f64 / n as f64)
            })
            .collect()
    }

    /// The largest |mean confidence − share right| (points) over the bands with at least
    /// `min_events` events.
    pub fn max_gap(&self, min_events: u64) -> Option<f64> {
        self.rows()
            .into_iter()
            .filter(|r| r.1 >= min_events)
            .map(|(_, _, conf, right)| (conf - right).abs() * 100.0)
            .max_by(f64::total_cmp)
    }
}

impl fmt::Display for Reliability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<12} {:>6} {:>16} {:>11} {:>6}",
            "confidence", "events", "mean confidence", "right", "gap"
        )?;
        for ((lo, hi), n, conf, right) in self.rows() {
            let band = format!("{lo}-{}", hi.min(100));
            writeln!(
                f,
                "{band:<12} {n:>6} {:>16} {:>11} {:>6.1}",
                pct(Some(conf)),
                pct(Some(right)),
                (conf - right).abs() * 100.0
            )?;
        }
        Ok(())
    }
}

/// The simulator placement weights of the accuracy runs (`oomlens accuracy`, the
/// `attribution_accuracy` test): every failure template, healthy jobs rarer than by default.
pub const ACCURACY_MIX: [(&str, u32); 7] = [
    ("static", 2),
    ("batch", 2),
    ("sequence", 2),
    ("contention", 3),
    ("fragmentation", 2),
    ("host_oom", 1),
    ("healthy", 1),
];

/// One adversarial case in a run: how many events matched it, how many of those were
/// attributed to their true scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdversarialCase {
    /// What the case is.
    pub name: &'static str,
    /// The true scenario of its events.
    pub scenario: Scenario,
    /// Events of the run that are this case.
    pub events: u64,
    /// Of those, attributed to `scenario`.
    pub right: u64,
}

/// The adversarial cases, each recognised by its truth and an observable property:
/// a victim with normal usage (needing ≤ 70 % of the GPU alone) killed by a growing neighbour;
/// fragmentation at modest usage (allocated ≤ half the GPU); a long-sequence job at batch ≤ 2; a
/// large model failing at optimizer init; a host OOM during data loading.
pub fn adversarial_cases(events: &[AttributedEvent]) -> Vec<AdversarialCase> {
    type Matcher = fn(&super::OomFeatures) -> bool;
    let cases: [(&'static str, Scenario, Matcher); 5] = [
        ("a victim with normal usage killed by a growing neighbour", Scenario::Contention, |f| {
            f.need_alone_bytes
                .zip(f.capacity_bytes)
                .is_some_and(|(n, c)| u128::from(n) * 10 <= u128::from(c) * 7)
                && f.top_neighbour_growth_bytes > 0
        }),
        ("fragmentation at modest usage (allocated <= half the GPU)", Scenario::Fragmentation, |f| {
            f.allocated_bytes.zip(f.capacity_bytes).is_some_and(|(a, c)| u128::from(a) * 2 <= u128::from(c))
        }),
        ("a long-sequence job at small batch (<= 2)", Scenario::Sequence, |f| {
            f.batch_size.is_some_and(|b| b <= 2)
        }),
        ("a large model failing at optimizer init", Scenario::Static, |f| f.phase == "optimizer_init"),
        ("a host OOM during data loading", Scenario::HostOom, |f| f.phase == "data_loading"),
    ];
    cases
        .into_iter()
        .map(|(name, scenario, matches)| {
            let hits: Vec<&AttributedEvent> = events
                .iter()
                .filter(|e| e.features.truth_scenario == scenario.as_str() && matches(&e.features))
                .collect();
            let right = hits.iter().filter(|e| e.attribution.scenario == scenario).count() as u64;
            AdversarialCase { name, scenario, events: hits.len() as u64, right }
        })
        .collect()
}

impl fmt::Display for AdversarialCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}/{} attributed {}", self.name, self.right, self.events, self.scenario)
    }
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{:.1} %", v * 100.0))
}

/// The matrix (rows: truth, columns: attributed), then precision / recall per scenario and the
/// averages.
impl fmt::Display for ConfusionMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cols: Vec<Scenario> =
            Scenario::ALL.into_iter().filter(|s| self.support(*s) > 0 || self.attributed(*s) > 0).collect();
        write!(f, "{:<15}", "truth \\ rules")?;
        for c in &cols {
            write!(f, " {:>13}", c.as_str())?;
        }
        writeln!(f, " {:>8} {:>10} {:>9}", "support", "precision", "recall")?;
        for t in &cols {
            write!(f, "{:<15}", t.as_str())?;
            for c in &cols {
                write!(f, " {:>13}", self.count(*t, *c))?;
            }
            writeln!(
                f,
                " {:>8} {:>10} {:>9}",
                self.support(*t),
                pct(self.precision(*t)),
                pct(self.recall(*t))
            )?;
        }
        writeln!(
            f,
            "events {}, correct {}, accuracy {}, macro-averaged accuracy (mean recall) {}, macro precision {}",
            self.total(),
            self.correct(),
            pct(self.accuracy()),
            pct(self.macro_accuracy()),
            pct(self.macro_precision())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_recall_and_macro_average() {
        let mut m = ConfusionMatrix::new();
        for _ in 0..9 {
            m.add(Scenario::Batch, Scenario::Batch);
        }
        m.add(Scenario::Batch, Scenario::Sequence);
        m.add(Scenario::Sequence, Scenario::Sequence);
        assert_eq!(m.total(), 11);
        assert_eq!(m.correct(), 10);
        assert_eq!(m.recall(Scenario::Batch), Some(0.9));
        assert_eq!(m.recall(Scenario::Sequence), Some(1.0));
        assert_eq!(m.precision(Scenario::Sequence), Some(0.5));
        assert_eq!(m.precision(Scenario::Static), None);
        assert!((m.macro_accuracy().unwrap() - 0.95).abs() < 1e-12);
        assert!((m.macro_precision().unwrap() - 0.75).abs() < 1e-12);
        assert_eq!(m.truths(), [Scenario::Batch, Scenario::Sequence]);
        let text = m.to_string();
        assert!(text.contains("macro-averaged accuracy (mean recall) 95.0 %"), "{text}");
        assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("batch") && l.contains(" 9 ")), "{text}");
        assert_eq!(ConfusionMatrix::new().macro_accuracy(), None);
    }

    #[test]
    fn rule_scores_precision_and_routing_ceiling() {
        use Scenario::{Batch, Sequence, Static};
        let mut r = RuleScores::default();
        // rule a: 3 batch (answered batch), 2 sequence; rule b: 1 static answered sequence.
        for _ in 0..3 {
            r.add("a", Batch, Batch);
        }
        r.add("a", Sequence, Batch);
        r.add("a", Sequence, Batch);
        r.add("b", Static, Sequence);
        assert_eq!(r.rows(), [("a", 5, 3), ("b", 1, 0)]);
        assert_eq!(r.worst(1), Some(("b", 0.0)));
        assert_eq!(r.worst(2), Some(("a", 0.6)));
        // Best verdicts: a -> batch (3 of 3 batch beat 2 of 2 sequence? no: both are all of their
        // support, the tie goes to batch, first in the taxonomy), b -> static: 1, 0, 1.
        assert!((r.routing_ceiling().unwrap() - 2.0 / 3.0).abs() < 1e-12);
        // Rarer scenarios weigh more: 1 fragmentation among 2 batch events is worth more (1/1)
        // than the 2 batch events (2 of 5 batch).
        let mut w = RuleScores::default();
        for _ in 0..3 {
            w.add("x", Batch, Batch);
        }
        w.add("y", Batch, Batch);
        w.add("y", Batch, Batch);
        w.add("y", Scenario::Fragmentation, Batch);
        // x -> batch (3/5), y -> fragmentation (1/1): (0.6 + 1) / 2.
        assert!((w.routing_ceiling().unwrap() - 0.8).abs() < 1e-12);
        let text = r.to_string();
        assert!(text.lines().nth(1).is_some_and(|l| l.ends_with("batch 3, sequence 2")), "{text}");
        assert_eq!(RuleScores::default().routing_ceiling(), None);
        // `unknown` verdicts are abstentions: not in the precision, still events.
        r.add("c", Batch, Scenario::Unknown);
        r.add("c", Batch, Scenario::Unknown);
        r.add("a", Sequence, Scenario::Unknown);
        assert_eq!(r.worst(1), Some(("b", 0.0)), "c only abstained");
        assert_eq!(r.worst(2), Some(("a", 0.6)), "a committed 5 times, right 3");
        assert!(r.to_string().lines().any(|l| l.starts_with("c ") && l.contains("abstains")), "{r}");
    }
}
