#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The simulator's OOM messages against real ones: the same parser reads the PyTorch messages of
//! the corpus of real OOMs and of a simulated fleet, and the distributions that decide between
//! the scenarios — memory cached by the allocator but free (reserved − allocated) and memory held
//! outside the allocator (capacity − free − reserved), both as a share of the GPU, and the
//! process's own non-allocator memory — are printed side by side (`docs/attribution.md` records
//! them) and must overlap: a simulator without routine cached slack, a CUDA context or memory
//! outside PyTorch trains rules that fail on real messages.

use oomlens_agent::source::Source;
use oomlens_agent::source::sim::{SimConfig, Simulator};
use oomlens_collector::analysis::accuracy::ACCURACY_MIX;
use oomlens_collector::analysis::explain::{Explained, explain_text};

/// The distributions of one set of messages.
#[derive(Debug, Default)]
struct Shares {
    cached_free: Vec<f64>,
    outside: Vec<f64>,
    context_mib: Vec<f64>,
}

impl Shares {
    fn add(&mut self, e: &Explained) {
        let f = &e.features;
        if f.framework != "pytorch" {
            return;
        }
        let (Some(c), Some(_), Some(_)) = (f.capacity_bytes, f.allocated_bytes, f.free_bytes) else {
            return;
        };
        if let Some(u) = f.cached_free_bytes {
            self.cached_free.push(u as f64 / c as f64);
        }
        if let Some(o) = f.outside_bytes {
            self.outside.push(o as f64 / c as f64);
        }
        if let Some(x) = f.context_bytes {
            self.context_mib.push(x as f64 / f64::from(1 << 20));
        }
    }
}

fn quantiles(xs: &[f64]) -> [f64; 5] {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v.get(((v.len() - 1) as f64 * p).round() as usize).copied().unwrap_or(f64::NAN);
    [at(0.1), at(0.25), at(0.5), at(0.75), at(0.9)]
}

fn simulated() -> Shares {
    let mut shares = Shares::default();
    let mut mix = String::new();
    for (name, weight) in ACCURACY_MIX {
        mix.push_str(&format!("{name} = {weight}\n"));
    }
    for seed in 0..4u64 {
        let cfg = SimConfig {
            gpus: 8,
            seed: 900 + seed,
            mix: toml::from_str(&mix).unwrap(),
            gpu_models: ["T4-16GB", "L4-24GB", "A10-24GB", "A100-40GB", "H100-80GB", "H200-141GB"]
                .map(str::to_owned)
                .to_vec(),
            ..SimConfig::default()
        };
        let mut sim = Simulator::new(&format!("realism-{seed}"), cfg, 1_767_225_600_000).unwrap();
        for s in 0..1800i64 {
            for e in sim.sample(1_767_225_600_000 + s * 1000).events {
                if e.kind == oomlens_schema::OomKind::CudaOom {
                    for x in explain_text(&e.raw_message) {
                        shares.add(&x);
                    }
                }
            }
        }
    }
    shares
}

#[test]
fn simulated_messages_look_like_real_ones() {
    let mut real = Shares::default();
    for r in oomlens_corpus::load().unwrap() {
        for e in explain_text(&r.text) {
            real.add(&e);
        }
    }
    let sim = simulated();
    let pct = |q: [f64; 5]| q.map(|v| format!("{:.1}", v * 100.0)).join(" / ");
    let mib = |q: [f64; 5]| q.map(|v| format!("{v:.0}")).join(" / ");
    println!(
        "PyTorch messages: real {} (corpus), simulated {}",
        real.cached_free.len(),
        sim.cached_free.len()
    );
    println!("quantiles p10 / p25 / p50 / p75 / p90");
    println!(
        "cached free / capacity (%):   real {}   simulated {}",
        pct(quantiles(&real.cached_free)),
        pct(quantiles(&sim.cached_free))
    );
    println!(
        "outside / capacity (%):       real {}   simulated {}",
        pct(quantiles(&real.outside)),
        pct(quantiles(&sim.outside))
    );
    println!(
        "own non-allocator (MiB):      real {}   simulated {}",
        mib(quantiles(&real.context_mib)),
        mib(quantiles(&sim.context_mib))
    );

    assert!(real.cached_free.len() >= 100 && sim.cached_free.len() >= 100);
    let (r, s) = (quantiles(&real.cached_free), quantiles(&sim.cached_free));
    // Routine slack: the simulated median within 3× of the real one, and no simulated message
    // without slack at the median.
    assert!(
        s[2] > 0.0 && s[2] <= r[2] * 3.0 && s[2] >= r[2] / 3.0,
        "cached free median: real {} simulated {}",
        r[2],
        s[2]
    );
    // Memory outside the allocator: the simulated median between the real quartiles.
    let (r, s) = (quantiles(&real.outside), quantiles(&sim.outside));
    assert!(s[2] >= r[1] && s[2] <= r[3], "outside median: real {r:?} simulated {s:?}");
    // The process's own non-allocator memory: hundreds of MiB, as real contexts.
    let (r, s) = (quantiles(&real.context_mib), quantiles(&sim.context_mib));
    assert!(s[2] >= r[1] && s[2] <= r[3], "context median: real {r:?} simulated {s:?}");
}
