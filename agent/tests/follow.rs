#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The log follower end to end on a real directory: appends, rotation by rename, copytruncate, a
//! new file matching the glob, and a restart from the state file — exactly the expected events,
//! none reported twice. Time is driven by hand (`poll(Instant)`), so the test is deterministic.

mod common;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use oomlens_agent::detect::follow::{
    FollowOptions, Follower, Found, LineHandler, PATH_LABEL, parser_factory,
};
use oomlens_agent::detect::parse::LineFormat;
use oomlens_schema::{EventSource, OomEvent, OomKind};

/// Reports each `OOM pid=N` line as one event.
struct Probe;

impl LineHandler for Probe {
    fn feed_line(&mut self, _offset: u64, line: &str) -> Vec<Found> {
        line.strip_prefix("OOM pid=")
            .and_then(|n| n.parse().ok())
            .map(|pid| {
                Found::from(OomEvent { kind: OomKind::CudaOom, pid: Some(pid), ..OomEvent::default() })
            })
            .into_iter()
            .collect()
    }

    fn finish(&mut self) -> Vec<Found> {
        Vec::new()
    }
}

fn follower(dir: &Path) -> Follower {
    let opts = FollowOptions {
        patterns: vec![format!("{}/**/*.log", dir.display())],
        state_file: Some(dir.join("state/offsets.json")),
        rescan_interval: Duration::ZERO,
        idle_flush: Duration::from_millis(100),
        ..FollowOptions::default()
    };
    Follower::new(opts, Box::new(|_| Box::new(Probe)), None).unwrap()
}

fn append(path: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

fn oom(pids: &[u32]) -> String {
    pids.iter().map(|p| format!("OOM pid={p}\n")).collect()
}

/// Polls until nothing new comes (quiet files drained), returns the pids seen.
fn settle(f: &mut Follower, clock: &mut Instant) -> Vec<u32> {
    let mut pids = Vec::new();
    for e in common::poll_rounds(f, clock) {
        assert_eq!(e.source, EventSource::Log);
        assert!(e.labels.iter().any(|l| l.key == PATH_LABEL));
        pids.push(e.pid.unwrap());
    }
    pids.sort_unstable();
    pids
}

#[test]
fn append_rotate_truncate_new_file_and_restart_report_each_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("pods/ns_a/c")).unwrap();
    let app = root.join("pods/ns_a/c/0.log");
    let slurm = root.join("slurm.log");
    append(&app, &oom(&[1])); // before the first start: not reported
    append(&slurm, "starting\n");

    let mut clock = Instant::now();
    let mut f = follower(root);
    assert_eq!(settle(&mut f, &mut clock), Vec::<u32>::new());
    assert_eq!(f.followed().len(), 2);

    // Append.
    append(&app, &oom(&[2]));
    append(&slurm, &oom(&[3]));
    assert_eq!(settle(&mut f, &mut clock), vec![2, 3]);

    // Rotation by rename + create: unread lines of the old file, lines the writer still
    // appends to it, and the new file from its start.
    append(&app, &oom(&[4]));
    let rotated = root.join("pods/ns_a/c/0.log.20240501");
    std::fs::rename(&app, &rotated).unwrap();
    append(&app, &oom(&[5]));
    let mut clock2 = clock;
    let first = f.poll(clock2).into_iter().map(|e| e.pid.unwrap()).collect::<BTreeSet<_>>();
    append(&rotated, &oom(&[6]));
    clock2 += Duration::from_millis(10);
    let mut all: Vec<u32> = first.into_iter().chain(settle(&mut f, &mut clock2)).collect();
    all.sort_unstable();
    assert_eq!(all, vec![4, 5, 6]);
    clock = clock2;
    assert_eq!(f.stats().rotations, 1);

    // A rename to a name that still matches keeps the position (nothing re-read).
    let renamed = root.join("slurm-1.log");
    std::fs::rename(&slurm, &renamed).unwrap();
    append(&renamed, &oom(&[7]));
    assert_eq!(settle(&mut f, &mut clock), vec![7]);

    // copytruncate: the file shrinks (copy kept elsewhere), the writer goes on at offset 0.
    append(&app, &oom(&[8]));
    assert_eq!(settle(&mut f, &mut clock), vec![8]);
    std::fs::copy(&app, root.join("pods/ns_a/c/0.log.1")).unwrap();
    std::fs::OpenOptions::new().write(true).open(&app).unwrap().set_len(0).unwrap();
    append(&app, &oom(&[9]));
    assert_eq!(settle(&mut f, &mut clock), vec![9]);
    // copytruncate where the new content outgrows the old position before the next read.
    std::fs::OpenOptions::new().write(true).open(&app).unwrap().set_len(0).unwrap();
    append(&app, &oom(&[10, 11, 12]));
    assert_eq!(settle(&mut f, &mut clock), vec![10, 11, 12]);
    assert_eq!(f.stats().truncations, 2);

    // A new file matching the glob is read from its start.
    std::fs::create_dir_all(root.join("pods/ns_b/c")).unwrap();
    append(&root.join("pods/ns_b/c/0.log"), &oom(&[13]));
    assert_eq!(settle(&mut f, &mut clock), vec![13]);

    // Stop; while the agent is down: appends, a rename within the glob, a new file.
    let final_events = f.shutdown();
    assert!(final_events.is_empty());
    drop(f);
    append(&app, &oom(&[14]));
    std::fs::rename(&renamed, root.join("slurm-2.log")).unwrap();
    append(&root.join("slurm-2.log"), &oom(&[15]));
    append(&root.join("pods/ns_b/c/1.log"), &oom(&[16]));

    let mut f = follower(root);
    assert_eq!(settle(&mut f, &mut clock), vec![14, 15, 16]);
    // And once more: a second restart re-reports nothing.
    f.shutdown();
    let mut f = follower(root);
    assert_eq!(settle(&mut f, &mut clock), Vec::<u32>::new());
    append(&app, &oom(&[17]));
    assert_eq!(settle(&mut f, &mut clock), vec![17]);
    assert_eq!(f.stats().errors, 0);
}

#[test]
fn a_reused_inode_or_rewritten_file_is_not_resumed_at_the_old_offset() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = root.join("a.log");
    append(&a, &oom(&[1, 2, 3]));
    let mut clock = Instant::now();
    let mut f = follower(root);
    settle(&mut f, &mut clock);
    f.shutdown();
    // While down the file is rewritten in place with other content of the same length.
    std::fs::write(&a, oom(&[7, 8, 9])).unwrap();
    let mut f = follower(root);
    assert_eq!(settle(&mut f, &mut clock), vec![7, 8, 9]);
}

#[test]
fn a_last_line_without_its_newline_is_read_once_the_file_is_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut clock = Instant::now();
    let mut f = follower(root);
    assert_eq!(settle(&mut f, &mut clock), Vec::<u32>::new());
    let a = root.join("a.log");
    append(&a, "starting\nOOM pid=1");
    // Not while the writer may still be in the middle of it.
    assert!(f.poll(clock).is_empty());
    assert_eq!(settle(&mut f, &mut clock), vec![1]);
    // The writer ends the line later and goes on: nothing read twice.
    append(&a, "\nOOM pid=2\nOOM pid=3");
    assert_eq!(settle(&mut f, &mut clock), vec![2, 3]);
    // A restart resumes after it.
    f.shutdown();
    let mut f = follower(root);
    append(&a, "\nOOM pid=4\n");
    assert_eq!(settle(&mut f, &mut clock), vec![4]);
    assert_eq!(f.stats().errors, 0);

    // The real parser: a PyTorch failure printed without a final newline, as a job that died
    // before ending its line leaves it.
    let real = root.join("real");
    std::fs::create_dir_all(&real).unwrap();
    let mut f = common::log_follower(&real, None, Duration::ZERO);
    append(
        &real.join("job.log"),
        "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    loss.backward()\n\
         torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity \
         of 7.79 GiB of which 10.00 MiB is free.",
    );
    let events = common::poll_rounds(&mut f, &mut clock);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].kind, OomKind::CudaOom);
    assert_eq!(events[0].requested_bytes, Some(20 << 20));
}

/// `(requested, capacity, gpu, pid)` of one event.
type Key = (Option<u64>, Option<u64>, Option<u64>, Option<u64>);

/// The keys of the expected JSON lines of a parser fixture.
fn expected(name: &str) -> Vec<Key> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/logs")
        .join(format!("{name}.expected.jsonl"));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let n = |k: &str| v[k].as_u64();
            (n("requested_bytes"), n("capacity_bytes"), n("gpu_index"), n("pid"))
        })
        .collect()
}

#[test]
fn real_parser_on_fixture_logs_written_while_following() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let opts = FollowOptions {
        patterns: vec![format!("{}/**/*.log", root.display())],
        state_file: Some(root.join("offsets.json")),
        rescan_interval: Duration::ZERO,
        idle_flush: Duration::from_millis(100),
        ..FollowOptions::default()
    };
    let make = || Follower::new(opts.clone(), parser_factory(LineFormat::Auto), None).unwrap();
    let mut f = make();
    let mut clock = Instant::now();
    assert!(f.poll(clock).is_empty());
    let names = ["cri", "docker", "structured", "pytorch_v1", "pytorch_v2", "tensorflow", "jax"];
    let mut got = Vec::new();
    for name in names {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs").join(format!("{name}.log")),
        )
        .unwrap();
        let target = root.join(format!("pods/{name}/0.log"));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        // Written in two halves (cut mid-line), read in between.
        let cut = text.len() / 2;
        let cut = (cut..text.len()).find(|&i| text.is_char_boundary(i)).unwrap();
        append(&target, &text[..cut]);
        got.extend(f.poll(clock));
        clock += Duration::from_millis(10);
        append(&target, &text[cut..]);
        for _ in 0..4 {
            got.extend(f.poll(clock));
            clock += Duration::from_millis(150);
        }
    }
    for name in names {
        let path_end = format!("pods/{name}/0.log");
        let mut mine: Vec<_> = got
            .iter()
            .filter(|e| e.labels.iter().any(|l| l.key == PATH_LABEL && l.value.ends_with(&path_end)))
            .map(|e| (e.requested_bytes, e.capacity_bytes, e.gpu_index.map(u64::from), e.pid.map(u64::from)))
            .collect();
        let mut want = expected(name);
        mine.sort_unstable();
        want.sort_unstable();
        assert_eq!(mine, want, "{name}");
    }
    assert!(
        got.iter().all(|e| e.source == EventSource::Log && e.kind == OomKind::CudaOom && e.event_id != 0)
    );
    assert!(got.iter().all(|e| !e.raw_message.is_empty()));
    f.shutdown();
    let mut f = make();
    assert!(settle(&mut f, &mut clock).is_empty());
}

/// Follows `root/*.log` from the start (or from the positions in `state`), polls until quiet;
/// returns `(event_id, ts_ms, requested_bytes)` of each event, sorted by id.
fn read_ids(root: &Path, state: Option<&Path>, stop_cleanly: bool) -> Vec<(u64, i64, Option<u64>)> {
    let mut f = common::log_follower(root, state, Duration::from_secs(3600));
    let mut events = common::poll_rounds(&mut f, &mut Instant::now());
    if stop_cleanly {
        events.extend(f.shutdown());
    }
    let mut ids: Vec<_> = events.iter().map(|e| (e.event_id, e.ts_ms, e.requested_bytes)).collect();
    ids.sort_unstable();
    ids
}

#[test]
fn lines_read_again_give_the_same_event_ids_and_runtime_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs");
    for name in ["cri", "docker", "pytorch_v2"] {
        std::fs::copy(fixtures.join(format!("{name}.log")), root.join(format!("{name}.log"))).unwrap();
    }
    let before = oomlens_agent::pipeline::sampler::now_ms();
    let first = read_ids(root, None, false);
    let after = oomlens_agent::pipeline::sampler::now_ms();
    let n = ["cri", "docker", "pytorch_v2"].iter().map(|f| expected(f).len()).sum::<usize>();
    assert_eq!(first.len(), n);
    let unique: BTreeSet<u64> = first.iter().map(|e| e.0).collect();
    assert_eq!(unique.len(), n, "one id per event");
    // Read again from offset 0 (a crash before positions were saved): the same ids, and for
    // container logs the same timestamps.
    let again = read_ids(root, None, false);
    assert_eq!(again.iter().map(|e| e.0).collect::<Vec<_>>(), first.iter().map(|e| e.0).collect::<Vec<_>>());
    // Timestamps: container lines carry their own (2024-05-01T12:00…Z), plain lines get the
    // read time.
    let may_2024 = 1_714_564_800_000..1_714_651_200_000;
    let stamped = first.iter().filter(|e| may_2024.contains(&e.1)).count();
    assert_eq!(stamped, expected("cri").len() + expected("docker").len(), "{first:?}");
    assert!(first.iter().all(|e| may_2024.contains(&e.1) || (before..=after).contains(&e.1)));
    for (a, b) in first.iter().zip(&again) {
        if may_2024.contains(&a.1) {
            assert_eq!(a.1, b.1);
        }
    }
    // Another file with the same content is another failure: other ids.
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(root.join("cri.log"), other.path().join("cri.log")).unwrap();
    let copy: BTreeSet<u64> = read_ids(other.path(), None, false).iter().map(|e| e.0).collect();
    assert!(copy.is_disjoint(&unique));
}

#[test]
fn after_a_crash_the_lines_since_the_last_saved_position_keep_their_ids() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let state = root.join("state/offsets.json");
    let log = root.join("job.log");
    let v2 = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs/pytorch_v2.log"),
    )
    .unwrap();
    // First run: positions saved at the first scan (the file is empty then), then the job writes
    // its OOMs and the agent reports them, and is killed before the next save.
    append(&log, "");
    let opts = FollowOptions {
        patterns: vec![format!("{}/*.log", root.display())],
        state_file: Some(state.clone()),
        rescan_interval: Duration::from_secs(3600),
        idle_flush: Duration::from_millis(100),
        ..FollowOptions::default()
    };
    let mut f = Follower::new(opts, parser_factory(LineFormat::Auto), None).unwrap();
    let mut clock = Instant::now();
    assert!(f.poll(clock).is_empty());
    append(&log, &v2);
    let mut first = Vec::new();
    for _ in 0..4 {
        clock += Duration::from_millis(150);
        first.extend(f.poll(clock).into_iter().map(|e| e.event_id));
    }
    assert_eq!(first.len(), expected("pytorch_v2").len());
    drop(f); // kill -9: no shutdown, no save
    // The restarted agent reads the lines again: same ids.
    let mut again: Vec<u64> = read_ids(root, Some(&state), true).iter().map(|e| e.0).collect();
    first.sort_unstable();
    again.sort_unstable();
    assert_eq!(again, first);
}
