//! Helpers shared by the agent's integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use oomlens_agent::detect::follow::{FollowOptions, Follower, parser_factory};
use oomlens_agent::detect::parse::LineFormat;
use oomlens_schema::OomEvent;

/// Polls `f` four times, 150 ms of its clock apart (enough for quiet files to flush their pending
/// messages), and returns every event reported.
pub fn poll_rounds(f: &mut Follower, clock: &mut Instant) -> Vec<OomEvent> {
    let mut events = Vec::new();
    for _ in 0..4 {
        events.extend(f.poll(*clock));
        *clock += Duration::from_millis(150);
    }
    events
}

/// A follower with the real parser on `dir/*.log`, reading files from their start, quiet files
/// flushed after 100 ms; `state_file` and `rescan_interval` as given.
pub fn log_follower(dir: &Path, state_file: Option<&Path>, rescan_interval: Duration) -> Follower {
    let opts = FollowOptions {
        patterns: vec![format!("{}/*.log", dir.display())],
        state_file: state_file.map(Path::to_path_buf),
        from_start: true,
        rescan_interval,
        idle_flush: Duration::from_millis(100),
        ..FollowOptions::default()
    };
    Follower::new(opts, parser_factory(LineFormat::Auto), None).unwrap()
}
