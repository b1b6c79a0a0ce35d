//! Whole-simulator tests: determinism, scenario coverage, message/field consistency, memory
//! accounting invariants, labels, logs, healthy-only runs, configuration, and random
//! configurations (proptest).

use std::collections::{BTreeMap, BTreeSet};

use oomlens_schema::{Label, OomEvent, OomKind, Phase, Scenario};
use proptest::prelude::*;

use super::job::{Job, Outcome, TickCtx};
use super::memory::static_bytes_of;
use super::messages::{parse_size, size_tolerance};
use super::templates::{Env, Template};
use super::*;

const START: i64 = 1_700_000_000_000;
const NODES: [&str; 2] = ["gpu-node-01", "dgx-b7-13"];

fn run(node: &str, cfg: SimConfig, secs: i64, interval_ms: i64) -> Vec<Reading> {
    let mut sim = Simulator::new(node, cfg, START).unwrap();
    (1..=secs * 1000 / interval_ms).map(|k| sim.sample(START + k * interval_ms)).collect()
}

fn events(readings: &[Reading]) -> Vec<OomEvent> {
    readings.iter().flat_map(|r| r.events.iter().cloned()).collect()
}

fn scenarios(readings: &[Reading]) -> BTreeSet<Scenario> {
    events(readings).iter().filter_map(|e| e.truth).collect()
}

const FAILURES: [Scenario; 6] = [
    Scenario::Static,
    Scenario::Batch,
    Scenario::Sequence,
    Scenario::Contention,
    Scenario::Fragmentation,
    Scenario::HostOom,
];

/// Memory accounting of one reading.
fn check_reading(cfg: &SimConfig, r: &Reading, ts: i64) {
    let models = cfg.validate().unwrap();
    assert_eq!(r.gpu_samples.len(), cfg.gpus as usize);
    assert_eq!((r.missing_fields, r.timed_out_calls), (0, 0));
    for s in &r.gpu_samples {
        assert_eq!(s.ts_ms, ts);
        let m = models[s.gpu_index as usize];
        let (used, free, total) =
            (s.memory_used_bytes.unwrap(), s.memory_free_bytes.unwrap(), s.memory_total_bytes.unwrap());
        assert_eq!(total, m.total_bytes());
        assert!(used <= total, "used {used} > total {total}");
        assert_eq!(free, total - used);
        let procs: Vec<_> = r.process_samples.iter().filter(|p| p.gpu_index == s.gpu_index).collect();
        let sum: u64 = procs.iter().map(|p| p.used_bytes.unwrap()).sum();
        assert_eq!(used, m.driver_reserved_bytes() + sum, "gpu {}", s.gpu_index);
        assert!(sum <= m.capacity_bytes());
        assert!(procs.len() <= MAX_PROCESSES_PER_GPU);
        let pids: BTreeSet<u32> = procs.iter().map(|p| p.pid).collect();
        assert_eq!(pids.len(), procs.len(), "duplicate pid on gpu {}", s.gpu_index);
        assert!(s.util_gpu_pct.unwrap() <= 100 && s.util_mem_pct.unwrap() <= 100);
        let power = s.power_mw.unwrap();
        assert!(power >= m.idle_w * 900 && power <= m.tdp_w * 1000 + 5000, "power {power}");
        assert!((20..=95).contains(&s.temperature_c.unwrap()));
        assert!(s.sm_clock_mhz.unwrap() <= m.max_sm_mhz);
    }
    for p in &r.process_samples {
        assert_eq!(p.ts_ms, ts);
        assert!(p.pid >= cfg.pid_base && u64::from(p.pid) < PID_MAX && !p.name.is_empty());
        assert!(p.labels.iter().any(|l| l.key == "job"));
    }
    for e in &r.events {
        assert!(e.ts_ms <= ts);
        check_event(cfg, e);
    }
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> &'a str {
    let i = s.find(start).unwrap_or_else(|| panic!("{start:?} not in {s}")) + start.len();
    let j = s[i..].find(end).unwrap_or_else(|| panic!("{end:?} not after {start:?} in {s}")) + i;
    &s[i..j]
}

fn assert_size(text: &str, value: u64, what: &str) {
    let parsed = parse_size(text).unwrap_or_else(|| panic!("{what}: bad size {text:?}"));
    assert!(parsed.abs_diff(value) <= size_tolerance(value), "{what}: message {text} vs field {value}");
}

/// An event's message says what its fields say, and its truth follows the rules.
fn check_event(cfg: &SimConfig, e: &OomEvent) {
    let models = cfg.validate().unwrap();
    assert_eq!(e.source, oomlens_schema::EventSource::Simulator);
    assert!(e.labels.iter().any(|l| l.key == "job"));
    assert!(e.labels.iter().any(|l| l.key == "k8s.pod" || l.key == "slurm.job_id"));
    let truth = e.truth.unwrap();
    match e.kind {
        OomKind::HostOomKill => {
            assert_eq!(truth, Scenario::HostOom);
            assert_eq!((e.gpu_index, e.phase, e.framework.as_str()), (None, Phase::DataLoading, "kernel"));
            let m = &e.raw_message;
            assert!(m.starts_with("Out of memory: Killed process "), "{m}");
            assert_eq!(between(m, "Killed process ", " (").parse::<u32>().unwrap(), e.pid.unwrap());
            let kb = |k: &str| between(m, &format!("{k}:"), "kB").parse::<u64>().unwrap();
            assert_eq!((kb("anon-rss") + kb("file-rss") + kb("shmem-rss")) * 1024, e.host_rss_bytes.unwrap());
            assert!(kb("total-vm") > kb("anon-rss"));
            assert!(m.contains(" UID:") && m.contains(" oom_score_adj:"));
        }
        OomKind::CudaOom => {
            assert_ne!(truth, Scenario::HostOom);
            assert_eq!(e.framework, "pytorch");
            let gpu = e.gpu_index.unwrap();
            let cap = models[gpu as usize].capacity_bytes();
            let (req, free, alloc, res, used) = (
                e.requested_bytes.unwrap(),
                e.free_bytes.unwrap(),
                e.allocated_bytes.unwrap(),
                e.reserved_bytes.unwrap(),
                e.process_used_bytes.unwrap(),
            );
            assert_eq!(e.capacity_bytes, Some(cap));
            let others: u64 = e.other_processes.iter().map(|o| o.used_bytes).sum();
            assert_eq!(free + used + others, cap, "free + this + others = capacity");
            assert!(alloc <= res && res < used);
            assert!(req > free || req > res - alloc, "the request could have been served");
            let m = &e.raw_message;
            assert_size(
                between(m, "Tried to allocate ", if m.contains(". GPU ") { ". GPU " } else { " (GPU " }),
                req,
                "req",
            );
            if m.contains(" has a total capacity of ") {
                assert!(
                    m.starts_with("torch.OutOfMemoryError: ")
                        || m.starts_with("torch.cuda.OutOfMemoryError: ")
                );
                assert_eq!(between(m, ". GPU ", " has").parse::<u32>().unwrap(), gpu);
                assert_size(between(m, "total capacity of ", " of which"), cap, "capacity");
                assert_size(between(m, " of which ", " is free"), free, "free");
                assert_size(between(m, "this process has ", " memory in use"), used, "process_used");
                assert_size(
                    between(m, "Of the allocated memory ", " is allocated by PyTorch"),
                    alloc,
                    "allocated",
                );
                assert_size(
                    between(m, "PyTorch, and ", " is reserved by PyTorch but unallocated"),
                    res - alloc,
                    "cached",
                );
                let mut listed = BTreeMap::new();
                for part in m.split("Process ").skip(1) {
                    let pid: u32 = part[..part.find(' ').unwrap()].parse().unwrap();
                    listed.insert(pid, between(part, " has ", " memory in use"));
                }
                assert_eq!(listed.len(), e.other_processes.len(), "{m}");
                for o in &e.other_processes {
                    assert_size(listed[&o.pid], o.used_bytes, "other process");
                }
            } else {
                assert!(m.starts_with("RuntimeError: ") || m.starts_with("torch.cuda.OutOfMemoryError: "));
                assert_eq!(between(m, " (GPU ", ";").parse::<u32>().unwrap(), gpu);
                assert_size(between(m, "; ", " total capacity"), cap, "capacity");
                assert_size(between(m, "total capacity; ", " already allocated"), alloc, "allocated");
                assert_size(between(m, "already allocated; ", " free;"), free, "free");
                assert_size(between(m, " free; ", " reserved in total by PyTorch"), res, "reserved");
            }
            // The ordered rules, re-checked from the event alone.
            let ctx = used - res;
            let static_bytes = static_bytes_of(&e.job).unwrap();
            assert_eq!(truth == Scenario::Static, ctx + static_bytes > cap, "static rule: {e:?}");
            // The cache beyond the routine split remainders (at most MAX_STRANDED of allocated).
            let split_max = (alloc as f64 * allocator::MAX_STRANDED) as u64;
            let beyond_split = (res - alloc).saturating_sub(split_max);
            match truth {
                Scenario::Static => assert!(matches!(e.phase, Phase::Load | Phase::OptimizerInit)),
                Scenario::Fragmentation => assert!(res - alloc >= req || e.other_processes.is_empty()),
                Scenario::Contention => assert!(others > 0 && beyond_split < req),
                Scenario::Sequence => {
                    assert!(e.job.flash_attention == Some(false) || e.phase == Phase::Inference);
                    assert!(beyond_split < req);
                }
                Scenario::Batch => {
                    assert!(matches!(
                        e.phase,
                        Phase::Forward | Phase::Backward | Phase::Eval | Phase::OptimizerStep
                    ));
                    assert!(beyond_split < req);
                }
                other => panic!("unexpected truth {other}"),
            }
        }
        other => panic!("unexpected kind {other}"),
    }
}

#[test]
fn same_inputs_give_identical_readings() {
    let cfg = SimConfig { seed: 7, ..SimConfig::default() };
    let a = run("gpu-node-01", cfg.clone(), 240, 1000);
    let b = run("gpu-node-01", cfg.clone(), 240, 1000);
    assert_eq!(a, b);
    assert!(!events(&a).is_empty());
    let other_node = run("gpu-node-02", cfg.clone(), 240, 1000);
    assert_ne!(a, other_node);
    let other_seed = run("gpu-node-01", SimConfig { seed: 8, ..cfg }, 240, 1000);
    assert_ne!(a, other_seed);
}

#[test]
fn sampling_interval_does_not_change_what_happens() {
    let cfg = SimConfig { seed: 3, ..SimConfig::default() };
    let slow = run(NODES[0], cfg.clone(), 180, 1000);
    let fast = run(NODES[0], cfg.clone(), 180, 100);
    let odd = run(NODES[0], cfg, 180, 1300);
    assert_eq!(events(&slow), events(&fast));
    let cut =
        |v: Vec<OomEvent>| v.into_iter().filter(|e| e.ts_ms <= START + 180_000 - 1300).collect::<Vec<_>>();
    assert_eq!(cut(events(&slow)), cut(events(&odd)));
    // The 1 s readings are every tenth 100 ms reading.
    for (k, r) in slow.iter().enumerate() {
        assert_eq!(r.gpu_samples, fast[k * 10 + 9].gpu_samples);
        assert_eq!(r.process_samples, fast[k * 10 + 9].process_samples);
    }
}

#[test]
fn every_scenario_within_300_seconds() {
    for seed in 1..=5 {
        for node in NODES {
            let cfg = SimConfig { seed, ..SimConfig::default() };
            let seen = scenarios(&run(node, cfg, 300, 1000));
            for s in FAILURES {
                assert!(seen.contains(&s), "seed {seed} node {node}: no {s} in {seen:?}");
            }
        }
    }
}

#[test]
fn every_scenario_on_every_gpu_model() {
    for model in GPU_MODELS {
        for seed in 1..=3 {
            let cfg = SimConfig { seed, gpu_models: vec![model.key.to_owned()], ..SimConfig::default() };
            let r = run("node-a", cfg.clone(), 300, 1000);
            for reading in &r {
                for e in &reading.events {
                    check_event(&cfg, e);
                }
            }
            let seen = scenarios(&r);
            for s in FAILURES {
                assert!(seen.contains(&s), "{} seed {seed}: no {s} in {seen:?}", model.key);
            }
        }
    }
}

#[test]
fn invariants_hold_at_every_sample() {
    for (seed, models) in
        [(1, vec!["H100-80GB"]), (2, vec!["A10-24GB", "H200-141GB", "A100-40GB", "A100-80GB"])]
    {
        let cfg = SimConfig {
            seed,
            gpu_models: models.into_iter().map(str::to_owned).collect(),
            ..SimConfig::default()
        };
        let mut sim = Simulator::new(NODES[1], cfg.clone(), START).unwrap();
        let mut max_tenants = 0;
        for k in 1..=6000 {
            let ts = START + k * 100;
            let r = sim.sample(ts);
            check_reading(&cfg, &r, ts);
            for g in 0..cfg.gpus {
                max_tenants = max_tenants.max(r.process_samples.iter().filter(|p| p.gpu_index == g).count());
            }
        }
        assert!(max_tenants >= 2, "co-scheduled tenants expected");
    }
}

#[test]
fn labels_follow_the_process() {
    let cfg = SimConfig { seed: 4, ..SimConfig::default() };
    let mut labels: BTreeMap<u32, Vec<Label>> = BTreeMap::new();
    let mut names = BTreeSet::new();
    let mut sim = Simulator::new(NODES[0], cfg, START).unwrap();
    let mut checked = 0;
    for k in 1..=3000 {
        let r = sim.sample(START + k * 100);
        for e in &r.events {
            if let Some(l) = labels.get(&e.pid.unwrap()) {
                assert_eq!(l, &e.labels);
                checked += 1;
            }
        }
        for p in &r.process_samples {
            let prev = labels.entry(p.pid).or_insert_with(|| p.labels.clone());
            assert_eq!(prev, &p.labels, "labels of pid {} changed", p.pid);
            let job = p.labels.iter().find(|l| l.key == "job").unwrap();
            names.insert(job.value.clone());
            for l in &p.labels {
                assert!(!l.value.is_empty());
                for bad in ["static", "batch", "sequence", "contention", "fragment", "host_oom", "healthy"] {
                    assert!(!l.value.contains(bad), "label {l:?} gives the scenario away");
                }
            }
        }
    }
    assert!(checked > 3, "events of sampled processes");
    assert_eq!(names.len(), labels.len(), "one job name per process");
}

#[test]
fn message_versions_are_mixed() {
    let mut v1 = 0;
    let mut v2 = 0;
    for seed in 1..=5 {
        for e in events(&run(NODES[0], SimConfig { seed, ..SimConfig::default() }, 300, 1000)) {
            if e.kind == OomKind::CudaOom {
                if e.raw_message.contains("reserved in total by PyTorch") { v1 += 1 } else { v2 += 1 }
            }
        }
    }
    assert!(v1 >= 5 && v2 >= 5, "1.x: {v1}, 2.x: {v2}");
}

#[test]
fn logs_carry_the_messages() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SimConfig { seed: 2, log_dir: Some(dir.path().join("logs")), ..SimConfig::default() };
    let r = run(NODES[0], cfg, 300, 1000);
    let evs = events(&r);
    assert!(evs.len() >= 6);
    for e in &evs {
        let job = &e.labels.iter().find(|l| l.key == "job").unwrap().value;
        let log = std::fs::read_to_string(dir.path().join("logs").join(format!("{job}.log"))).unwrap();
        match e.kind {
            OomKind::CudaOom => {
                assert!(log.contains(&format!("{}\n", e.raw_message)));
                assert!(log.contains("Traceback (most recent call last):\n  File \""));
                let tb = log.rfind("Traceback").unwrap();
                assert!(log[tb..].find(&e.raw_message).is_some(), "traceback precedes the message");
            }
            _ => {
                let kern = std::fs::read_to_string(dir.path().join("logs/kern.log")).unwrap();
                assert!(kern.contains(&format!("] {}\n", e.raw_message)));
                assert!(log.contains("Killed"));
            }
        }
    }
    let all: String = std::fs::read_dir(dir.path().join("logs"))
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap())
        .collect();
    assert!(all.contains("\nstep 10 loss "), "ordinary training lines");
}

#[test]
fn healthy_only_never_fails() {
    for seed in 1..=4 {
        for node in NODES {
            let cfg = SimConfig {
                seed,
                mix: ScenarioMix::healthy_only(),
                gpu_models: GPU_MODELS.iter().map(|m| m.key.to_owned()).collect(),
                ..SimConfig::default()
            };
            let r = run(node, cfg.clone(), 900, 1000);
            assert!(events(&r).is_empty(), "seed {seed} {node}: {:?}", events(&r).first());
            assert!(r.iter().any(|x| x.process_samples.len() > cfg.gpus as usize), "tenants expected");
        }
    }
}

#[test]
fn a_single_scenario_mix_gives_that_scenario() {
    for s in FAILURES {
        let cfg = SimConfig { seed: 11, gpus: 4, mix: ScenarioMix::only(s), ..SimConfig::default() };
        let seen = scenarios(&run(NODES[1], cfg, 300, 1000));
        assert!(seen.contains(&s), "{s}: {seen:?}");
    }
    assert!(matches!(
        Simulator::new(
            "n",
            SimConfig { mix: ScenarioMix::only(Scenario::Unknown), ..SimConfig::default() },
            0
        ),
        Err(SimError::EmptyMix)
    ));
}

#[test]
fn inventory_and_name() {
    let cfg = SimConfig {
        gpus: 3,
        gpu_models: vec!["A10-24GB".into(), "H200-141GB".into()],
        ..SimConfig::default()
    };
    let sim = Simulator::new("n1", cfg, START).unwrap();
    assert_eq!(sim.name(), "simulator");
    let inv = sim.inventory();
    assert_eq!(
        inv.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        ["NVIDIA A10", "NVIDIA H200", "NVIDIA A10"]
    );
    assert_eq!(inv[1].memory_total_bytes, 143_771 << 20);
    let uuids: BTreeSet<_> = inv.iter().map(|g| g.uuid.clone()).collect();
    assert_eq!(uuids.len(), 3);
    assert!(inv.iter().all(|g| g.uuid.starts_with("GPU-") && g.uuid.len() == 40 && !g.mig));
    assert_eq!(
        inv,
        Simulator::new("n1", SimConfig { seed: 9, ..sim.config().clone() }, 0).unwrap().inventory()
    );
}

#[test]
fn config_is_validated_and_serde_friendly() {
    let bad = |cfg: SimConfig| Simulator::new("n", cfg, 0).unwrap_err().to_string();
    let d = SimConfig::default();
    assert!(
        bad(SimConfig { gpu_models: vec!["V100".into()], ..d.clone() })
            .contains("unknown simulated GPU model \"V100\"")
    );
    assert!(bad(SimConfig { gpu_models: vec![], ..d.clone() }).contains("H100-80GB"));
    assert!(bad(SimConfig { gpus: 0, ..d.clone() }).contains("gpus must be"));
    assert!(bad(SimConfig { mix: ScenarioMix::NONE, ..d.clone() }).contains("enables nothing"));
    assert!(bad(SimConfig { host_memory_bytes: 1 << 20, ..d.clone() }).contains("host_memory_bytes"));
    assert!(bad(SimConfig { pid_base: 0, ..d.clone() }).contains("pid_base"));
    let file = tempfile::NamedTempFile::new().unwrap();
    let msg = bad(SimConfig { log_dir: Some(file.path().join("sub")), ..d.clone() });
    assert!(msg.contains("cannot write simulator job logs to"), "{msg}");

    let text =
        "seed = 5\ngpus = 4\ngpu_models = [\"A100-80GB\", \"h200-141gb\"]\n[mix]\nstatic = 3\nhealthy = 0\n";
    let cfg: SimConfig = toml::from_str(text).unwrap();
    assert_eq!((cfg.seed, cfg.gpus, cfg.pid_base), (5, 4, 10_000));
    assert_eq!(cfg.mix, ScenarioMix { static_model: 3, healthy: 0, ..ScenarioMix::default() });
    assert!(Simulator::new("n", cfg.clone(), 0).is_ok());
    let back: SimConfig = toml::from_str(&toml::to_string(&cfg).unwrap()).unwrap();
    assert_eq!(back, cfg);
    assert!(toml::from_str::<SimConfig>("gpu = 3").is_err());
    assert!(toml::from_str::<SimConfig>("[mix]\nstatics = 1").is_err());
}

#[test]
fn clock_edge_cases() {
    let cfg = SimConfig::default();
    let mut sim = Simulator::new("n", cfg.clone(), START).unwrap();
    let r = sim.sample(START - 5000);
    check_reading(&cfg, &r, START - 5000);
    let a = sim.sample(START + 10_000);
    let again = sim.sample(START + 10_000);
    assert_eq!(a.gpu_samples, again.gpu_samples);
    assert!(again.events.is_empty());
    let _ = sim.sample(START + 5_000);
    assert_eq!(sim.now_ms(), START + 10_000, "time never runs backwards");
    let far = START + 10 * 86_400_000;
    let r = sim.sample(far);
    check_reading(&cfg, &r, far);
    assert_eq!(sim.now_ms(), far);
    assert!(sim.host_used_bytes() <= cfg.host_memory_bytes);
}

fn arb_config() -> impl Strategy<Value = SimConfig> {
    (
        any::<u64>(),
        1u32..=10,
        proptest::sample::subsequence(GPU_MODELS.iter().map(|m| m.key.to_owned()).collect::<Vec<_>>(), 1..=5),
        proptest::array::uniform7(0u32..=3),
        8u64..=1024,
        1u32..=MAX_PID_BASE,
    )
        .prop_map(|(seed, gpus, gpu_models, w, host_gib, pid_base)| SimConfig {
            seed,
            gpus,
            gpu_models,
            mix: ScenarioMix {
                static_model: w[0],
                batch: w[1],
                sequence: w[2],
                contention: w[3],
                fragmentation: w[4],
                host_oom: w[5],
                healthy: w[6].max(u32::from(w.iter().all(|x| *x == 0))),
            },
            log_dir: None,
            host_memory_bytes: host_gib << 30,
            pid_base,
            extra_processes_per_gpu: 0,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_configs_keep_the_invariants(
        cfg in arb_config(),
        steps in proptest::collection::vec(1i64..=5000, 20..120),
    ) {
        let mut sim = Simulator::new("prop-node", cfg.clone(), START).unwrap();
        let mut ts = START;
        for dt in steps {
            ts += dt;
            let r = sim.sample(ts);
            check_reading(&cfg, &r, ts);
            prop_assert!(sim.host_used_bytes() <= cfg.host_memory_bytes);
        }
    }
}

#[test]
fn healthy_jobs_stay_within_their_planned_bound() {
    let mut rng = rng::sim_rng(5, 17);
    let mut counter = 0;
    let mut checked = 0;
    for model in GPU_MODELS {
        for _ in 0..6 {
            let mut env =
                Env { rng: &mut rng, model, host_slot: 8 * GIB, node_tag: "test", counter: &mut counter };
            let specs = templates::placement(Template::Healthy, &mut env);
            let total: u64 = specs.iter().map(|(_, s)| s.planned_bound()).sum();
            assert!(total <= model.capacity_bytes(), "{}: {total}", model.key);
            for (_, spec) in specs {
                let bound = spec.planned_bound();
                let mut job = Job::new(spec, 1);
                let mut key_rng = rng::sim_rng(1, 2);
                for _ in 0..3000 {
                    let ctx = TickCtx {
                        limit: u64::MAX / 4,
                        host_free: 64 * GIB,
                        rng: &mut key_rng,
                        logs: None,
                        key: 3,
                    };
                    if job.tick(ctx) != Outcome::Running {
                        break;
                    }
                    assert!(job.used() <= bound, "{}: {} > {bound}", job.spec.job_name, job.used());
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 30);
}

#[test]
fn extra_processes_are_reported_counted_and_bounded() {
    let cfg = SimConfig { seed: 5, gpus: 2, extra_processes_per_gpu: 16, ..SimConfig::default() };
    let readings = run(NODES[0], cfg.clone(), 120, 1000);
    for r in &readings {
        for g in &r.gpu_samples {
            let procs: Vec<_> = r.process_samples.iter().filter(|p| p.gpu_index == g.gpu_index).collect();
            let extras = procs.iter().filter(|p| p.pid > 4_000_000).count();
            assert_eq!(extras, 16);
            let sum: u64 = procs.iter().filter_map(|p| p.used_bytes).sum();
            assert!(g.memory_used_bytes.unwrap() >= sum, "processes never exceed the GPU's used memory");
        }
    }
    let pids: BTreeSet<u32> = readings[0].process_samples.iter().map(|p| p.pid).collect();
    assert_eq!(pids.len(), readings[0].process_samples.len(), "unique pids");
    let err = Simulator::new("n", SimConfig { extra_processes_per_gpu: 65, ..cfg }, START).unwrap_err();
    assert!(err.to_string().contains("extra_processes_per_gpu"), "{err}");
}
