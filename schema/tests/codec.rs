//! Frame codec properties: round trips, golden frames of protocol v1, and a fuzz-style barrage of
//! random and mutated frames that must only ever produce errors, never panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use oomlens_schema::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn arb_string(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!(".{{0,{max}}}")).unwrap()
}

fn arb_labels() -> impl Strategy<Value = Vec<Label>> {
    proptest::collection::vec(
        (arb_string(12), arb_string(24)).prop_map(|(key, value)| Label { key, value }),
        0..4,
    )
}

prop_compose! {
    fn arb_gpu_sample()(ts_ms in any::<i64>(), gpu_index in 0u32..64, used in any::<Option<u64>>(), free in any::<Option<u64>>(),
        total in any::<Option<u64>>(), reserved in any::<Option<u64>>(), ug in any::<Option<u8>>(), um in any::<Option<u8>>(),
        power in any::<Option<u32>>(), temp in any::<Option<i16>>(), sm in any::<Option<u32>>(), mem in any::<Option<u32>>()) -> GpuSample {
        GpuSample { ts_ms, gpu_index, memory_used_bytes: used, memory_free_bytes: free, memory_total_bytes: total,
            memory_reserved_bytes: reserved, util_gpu_pct: ug, util_mem_pct: um, power_mw: power, temperature_c: temp,
            sm_clock_mhz: sm, mem_clock_mhz: mem }
    }
}

prop_compose! {
    fn arb_process_sample()(ts_ms in any::<i64>(), gpu_index in 0u32..64, pid in any::<u32>(), name in arb_string(16),
        used in any::<Option<u64>>(), labels in arb_labels()) -> ProcessSample {
        ProcessSample { ts_ms, gpu_index, pid, name, used_bytes: used, labels }
    }
}

prop_compose! {
    fn arb_job()(params in any::<Option<u64>>(), batch in any::<Option<u32>>(), seq_len in any::<Option<u32>>(),
        precision in proptest::option::of(arb_string(6)), zero in any::<Option<u8>>(), flash in any::<Option<bool>>()) -> JobShape {
        JobShape { params, batch, seq_len, precision, zero_stage: zero, flash_attention: flash, ..JobShape::default() }
    }
}

prop_compose! {
    fn arb_event()(event_id in any::<u64>(), ts_ms in any::<i64>(), kind in 0usize..4, source in 0usize..5, phase in 0usize..9,
        framework in arb_string(10), gpu in any::<Option<u32>>(), pid in any::<Option<u32>>(),
        req in any::<Option<u64>>(), cap in any::<Option<u64>>(), others in proptest::collection::vec((any::<u32>(), any::<u64>()), 0..5),
        job in arb_job(), truth in proptest::option::of(0usize..7), raw in arb_string(200), labels in arb_labels()) -> OomEvent {
        OomEvent {
            event_id, ts_ms, kind: OomKind::ALL[kind], source: EventSource::ALL[source], phase: Phase::ALL[phase], framework,
            gpu_index: gpu, pid, requested_bytes: req, capacity_bytes: cap,
            other_processes: others.into_iter().map(|(pid, used_bytes)| OtherProcess { pid, used_bytes }).collect(),
            job, truth: truth.map(|i| Scenario::ALL[i]), raw_message: raw, labels, ..OomEvent::default()
        }
    }
}

prop_compose! {
    fn arb_batch()(seq in any::<u64>(), g in proptest::collection::vec(arb_gpu_sample(), 0..20),
        p in proptest::collection::vec(arb_process_sample(), 0..20), e in proptest::collection::vec(arb_event(), 0..4)) -> Batch {
        Batch { seq, gpu_samples: g, process_samples: p, events: e }
    }
}

prop_compose! {
    fn arb_hello()(agent_id in arb_string(20), node in arb_string(20), cluster in arb_string(10), boot_id in any::<u64>(),
        gpus in proptest::collection::vec((0u32..16, arb_string(40), arb_string(20), any::<u64>(), any::<bool>()), 0..9)) -> Hello {
        Hello { agent_id, node, cluster, boot_id, agent_version: "0.1.0".into(),
            gpus: gpus.into_iter().map(|(index, uuid, name, memory_total_bytes, mig)| GpuInfo { index, uuid, name, memory_total_bytes, mig }).collect() }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn batches_round_trip(batch in arb_batch()) {
        let frame = Frame::Batch(batch);
        let bytes = frame.encode().unwrap();
        prop_assert_eq!(Frame::decode(&bytes).unwrap(), frame);
    }

    #[test]
    fn hellos_round_trip(hello in arb_hello()) {
        let frame = Frame::Hello(hello);
        prop_assert_eq!(Frame::decode(&frame.encode().unwrap()).unwrap(), frame);
    }

    #[test]
    fn small_frames_round_trip(seq in any::<u64>(), code in any::<u16>(), msg in arb_string(100), id in arb_string(20)) {
        for frame in [Frame::Ack(Ack { seq }), Frame::Error(ErrorReply { code, message: msg.clone() }),
                      Frame::Welcome(Welcome { collector_id: id.clone(), last_acked_seq: seq })] {
            prop_assert_eq!(Frame::decode(&frame.encode().unwrap()).unwrap(), frame);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Frame::decode(&bytes);
    }
}

/// The reference frames of protocol v1. Changing what they encode to is a protocol change.
fn golden_frames() -> Vec<(&'static str, Frame)> {
    let hello = Hello {
        agent_id: "agent-7".into(),
        node: "gpu-node-07".into(),
        cluster: "prod-eu".into(),
        boot_id: 0x0123_4567_89ab_cdef,
        agent_version: "0.1.0".into(),
        gpus: vec![
            GpuInfo {
                index: 0,
                uuid: "GPU-8f1b2c3d-0000-1111-2222-333344445555".into(),
                name: "NVIDIA H200".into(),
                memory_total_bytes: 150_754_820_096,
                mig: false,
            },
            GpuInfo {
                index: 1,
                uuid: "MIG-1d2e3f40-aaaa-bbbb-cccc-ddddeeeeffff".into(),
                name: "NVIDIA A100-SXM4-80GB MIG 3g.40gb".into(),
                memory_total_bytes: 42_949_672_960,
                mig: true,
            },
        ],
    };
    let event = OomEvent {
        event_id: 0xfeed_beef_0000_0001,
        ts_ms: 1_767_225_612_345,
        kind: OomKind::CudaOom,
        source: EventSource::Log,
        framework: "pytorch".into(),
        gpu_index: Some(0),
        pid: Some(4242),
        requested_bytes: Some(2 * 1024 * 1024 * 1024),
        capacity_bytes: Some(85_045_510_144),
        free_bytes: Some(1_203_765_248),
        allocated_bytes: Some(79_564_554_240),
        reserved_bytes: Some(82_032_820_224),
        process_used_bytes: Some(82_569_691_136),
        other_processes: vec![OtherProcess { pid: 5151, used_bytes: 1_073_741_824 }],
        phase: Phase::Forward,
        job: JobShape { params: Some(7_000_000_000), batch: Some(8), seq_len: Some(4096), precision: Some("bf16".into()), optimizer: Some("adamw".into()), zero_stage: Some(2), data_parallel: Some(8), flash_attention: Some(false), ..JobShape::default() },
        xid: None,
        host_rss_bytes: None,
        labels: vec![Label { key: "k8s.pod".into(), value: "train-llama-0".into() }],
        truth: Some(Scenario::Sequence),
        raw_message: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.21 GiB of which 1.12 GiB is free.".into(),
    };
    let batch = Batch {
        seq: 42,
        gpu_samples: vec![GpuSample {
            ts_ms: 1_767_225_600_000,
            gpu_index: 0,
            memory_used_bytes: Some(80_000_000_000),
            memory_free_bytes: Some(5_045_510_144),
            memory_total_bytes: Some(85_045_510_144),
            memory_reserved_bytes: Some(536_870_912),
            util_gpu_pct: Some(97),
            util_mem_pct: Some(61),
            power_mw: Some(612_000),
            temperature_c: Some(71),
            sm_clock_mhz: Some(1980),
            mem_clock_mhz: None,
        }],
        process_samples: vec![ProcessSample {
            ts_ms: 1_767_225_600_000,
            gpu_index: 0,
            pid: 4242,
            name: "python".into(),
            used_bytes: Some(78_000_000_000),
            labels: vec![Label { key: "k8s.namespace".into(), value: "research".into() }],
        }],
        events: vec![event],
    };
    vec![
        ("v1-hello.bin", Frame::Hello(hello)),
        (
            "v1-welcome.bin",
            Frame::Welcome(Welcome { collector_id: "collector-1".into(), last_acked_seq: 41 }),
        ),
        ("v1-batch.bin", Frame::Batch(batch)),
        ("v1-ack.bin", Frame::Ack(Ack { seq: 42 })),
        (
            "v1-error.bin",
            Frame::Error(ErrorReply { code: ErrorCode::BadFrame as u16, message: "bad magic".into() }),
        ),
    ]
}

#[test]
fn golden_frames_of_v1_decode_and_encode_identically() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let regenerate = std::env::var_os("OOMLENS_REGENERATE_GOLDEN").is_some();
    for (name, frame) in golden_frames() {
        let path = dir.join(name);
        let encoded = frame.encode().unwrap();
        if regenerate {
            std::fs::write(&path, &encoded).unwrap();
        }
        let golden = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (set OOMLENS_REGENERATE_GOLDEN=1 once)", path.display()));
        assert_eq!(Frame::decode(&golden).unwrap(), frame, "{name} decodes to the reference value");
        assert_eq!(encoded, golden, "{name}: the encoding of protocol v1 changed");
    }
}

/// ≥ 100k random and mutated frames: every one must decode to a value or a typed error.
#[test]
fn random_and_mutated_frames_only_ever_produce_errors() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x00ff_00ff);
    let seeds: Vec<Vec<u8>> = golden_frames().into_iter().map(|(_, f)| f.encode().unwrap()).collect();
    let mut errors = 0u64;
    let mut decoded = 0u64;
    const N: u64 = 120_000;
    for i in 0..N {
        let mut bytes = seeds[(i as usize) % seeds.len()].clone();
        match i % 6 {
            // Flip a few random bytes of the payload.
            0 | 1 => {
                for _ in 0..rng.random_range(1..8) {
                    let at = rng.random_range(HEADER_LEN.min(bytes.len() - 1)..bytes.len());
                    bytes[at] = rng.random();
                }
            }
            // Truncate.
            2 => {
                let len = rng.random_range(0..bytes.len());
                bytes.truncate(len);
            }
            // Random garbage behind a valid header.
            3 => {
                let len = rng.random_range(0..300usize);
                let header = FrameHeader {
                    version: PROTOCOL_VERSION,
                    kind: FrameKind::from_u16(rng.random_range(1..=5)).unwrap(),
                    len: len as u32,
                };
                bytes = header.to_bytes().to_vec();
                bytes.extend((0..len).map(|_| rng.random::<u8>()));
            }
            // Completely random bytes.
            4 => {
                let len = rng.random_range(0..200usize);
                bytes = (0..len).map(|_| rng.random()).collect();
            }
            // Corrupt the header (lengths, kinds, versions).
            _ => {
                let at = rng.random_range(0..HEADER_LEN);
                bytes[at] = rng.random();
            }
        }
        match Frame::decode(&bytes) {
            Ok(_) => decoded += 1,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                errors += 1;
            }
        }
    }
    assert_eq!(errors + decoded, N);
    assert!(errors > N / 2, "most mutations are caught: {errors} errors, {decoded} decoded");
}
