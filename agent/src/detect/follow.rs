//! Follows job log files (`[logs] paths`: files and globs such as `/var/log/pods/**/*.log`) and
//! feeds their lines, per file, to a [`LineHandler`] (the OOM parser), turning what it finds into
//! `log` events.
//!
//! * **New files** are found by re-expanding the globs every `rescan_interval`. Files present at
//!   the very first start (no state file yet) start at their end — old failures are not
//!   reported — unless `from_start`; files that appear later (while running, or while the agent
//!   was stopped: created after the state was saved) are read from their start.
//! * **Rotation**: rename + create (the path now names another inode: the old file is read to its
//!   end, then the new one from its start; a renamed file that still matches a glob keeps its
//!   position) and copytruncate (the file shrank, or its first bytes changed: read again from 0).
//! * **Restart**: positions are saved (see [`offsets`](super::offsets)) at each rescan and on
//!   stop; a restarted agent resumes each file at its saved offset when device, inode and the
//!   fingerprint of its first bytes agree, so nothing is reported twice after a clean stop (after
//!   a crash, at most the lines of the last `rescan_interval` are read again).
//! * **Bounds**: at most `max_files` files; lines longer than `max_line_bytes` are cut (the rest
//!   is skipped up to the newline, and counted); at most [`MAX_READ_PER_POLL`] bytes per file per
//!   poll. A quiet file's pending multi-line message is flushed after `idle_flush`, its last line
//!   too when it has no newline (a job that died in the middle of a line never ends it).
//!
//! **Event identity.** A log event's `event_id` is a hash of where its first line is: the file
//! (device, inode — as positions are keyed), the file's rotation identity (its first bytes before
//! that line, and the first bytes of the line itself) and the line's byte offset. Lines read again
//! after a crash (positions are saved only every rescan) therefore give the same `event_id`, and
//! the collector's queries and `oom_events`' `ReplacingMergeTree` collapse the copies instead of
//! counting a second failure. (A file rewritten with byte-identical content at the same offsets
//! would also give the same ids; runtime timestamps in CRI / Docker lines make that practically
//! impossible for container logs.) An event whose start is unknown gets a random id.
//!
//! Every event gets `source = log`, `ts_ms` = the time the container runtime stamped on its first
//! line (CRI prefix, Docker `"time"`, see [`line_time_ms`]) or else when it was read, the label
//! `log.path=<file>` and, when the message names a pid and a [`PidLabeler`] is given (the runner
//! passes `WorkloadResolver::labels`), the workload labels of that pid.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oomlens_schema::limits::{MAX_LABELS, MAX_STRING};
use oomlens_schema::{EventSource, Label, OomEvent};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::detect::confine::{ConfineError, Roots};
use crate::detect::offsets::{FINGERPRINT_BYTES, FileOffset, Fingerprint, OffsetState};
use crate::detect::parse::lines::line_time_ms;
use crate::detect::parse::mixed::MixedParser;
use crate::detect::parse::{LineDecoder, LineFormat, MAX_EVENT_SPAN, ParsedOom};
use crate::metrics::AgentMetrics;
use crate::source::Reading;
use oomlens_schema::text::now_ms;

/// Most bytes read from one file in one poll (the rest waits for the next poll).
pub const MAX_READ_PER_POLL: usize = 4 * 1024 * 1024;
/// Label naming the file an event was read from.
pub const PATH_LABEL: &str = "log.path";

/// Where an event's first line is in its file, and what that line says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineStart {
    /// Byte offset of the line in the file.
    pub offset: u64,
    /// Hash of the line's first bytes (part of the event's identity).
    pub line_hash: u64,
    /// The time the container runtime stamped on the line (epoch ms), when it has one.
    pub ts_ms: Option<i64>,
}

/// An event a [`LineHandler`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The event (`event_id`, `source`, `ts_ms` and labels are set by the follower).
    pub event: OomEvent,
    /// Where it starts (`None`: unknown — the event gets a random id and the read time).
    pub start: Option<LineStart>,
}

impl From<OomEvent> for Found {
    fn from(event: OomEvent) -> Self {
        Found { event, start: None }
    }
}

/// Turns the lines of one file into events (one handler per file, so multi-line messages of
/// different files never mix).
pub trait LineHandler: Send {
    /// Takes one line (without its newline) that starts at byte `offset` of the file; returns the
    /// events it completes.
    fn feed_line(&mut self, offset: u64, line: &str) -> Vec<Found>;
    /// Returns what is pending (the file went quiet, rotated, or the agent stops).
    fn finish(&mut self) -> Vec<Found>;
}

/// Most line starts a [`ParserHandler`] remembers (an open event spans at most
/// [`MAX_EVENT_SPAN`] lines; normally only the lines of open events are kept).
const MAX_STARTS: usize = MAX_EVENT_SPAN as usize + 16;

/// The log OOM parser as a [`LineHandler`]: container framing decoded (CRI / Docker partial
/// lines joined) by [`LineDecoder`], then [`MixedParser`] (the job's own messages, and kernel
/// lines the job log carries, as `oomlens explain` reads a paste). It remembers where each physical line
/// that an open event may start at begins, so every event comes with its [`LineStart`].
#[derive(Debug)]
pub struct ParserHandler {
    format: LineFormat,
    decoder: LineDecoder,
    parser: MixedParser,
    /// Physical lines fed so far (the decoder's and parser's line numbers).
    fed: u64,
    /// (physical line number, start) of the lines an open event may start at, in order.
    starts: VecDeque<(u64, LineStart)>,
}

impl ParserHandler {
    /// A handler for lines framed as `format`.
    pub fn new(format: LineFormat) -> Self {
        ParserHandler {
            format,
            decoder: LineDecoder::new(format),
            parser: MixedParser::new(),
            fed: 0,
            starts: VecDeque::new(),
        }
    }

    fn found(&self, p: &ParsedOom) -> Found {
        let start = self
            .starts
            .binary_search_by_key(&p.line, |(n, _)| *n)
            .ok()
            .and_then(|i| self.starts.get(i))
            .map(|(_, s)| *s);
        Found { event: p.to_event(0), start }
    }

    /// The first physical line an open event (or a fragment waiting for its end) may start at.
    fn keep_from(&self) -> u64 {
        [self.parser.earliest_open_line(), self.decoder.earliest_partial()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.fed + 1)
    }

    /// Forgets the starts of lines no open event (or waiting fragment) can start at.
    fn prune(&mut self) {
        let keep_from = self.keep_from();
        while self.starts.front().is_some_and(|(n, _)| *n < keep_from) || self.starts.len() > MAX_STARTS {
            self.starts.pop_front();
        }
    }
}

impl LineHandler for ParserHandler {
    fn feed_line(&mut self, offset: u64, line: &str) -> Vec<Found> {
        self.fed += 1;
        let parsed = match self.decoder.push(line) {
            Some(text) => self.parser.feed_numbered_line(self.decoder.line_start(), &text),
            None => Vec::new(),
        };
        // A line's start is kept only when an event found now begins at it or an open event may
        // (most lines are neither): the hash and the runtime time are computed for those alone.
        if parsed.iter().any(|p| p.line == self.fed) || self.keep_from() <= self.fed {
            let start = LineStart {
                offset,
                line_hash: Fingerprint::of(line.as_bytes()).hash,
                ts_ms: line_time_ms(self.format, line),
            };
            self.starts.push_back((self.fed, start));
        }
        let out = parsed.iter().map(|p| self.found(p)).collect();
        self.prune();
        out
    }

    fn finish(&mut self) -> Vec<Found> {
        let mut found = Vec::new();
        for (start, text) in self.decoder.finish() {
            found.extend(self.parser.feed_numbered_line(start, &text));
        }
        found.extend(self.parser.finish());
        let out = found.iter().map(|p| self.found(p)).collect();
        self.prune();
        out
    }
}

/// A factory of [`ParserHandler`]s.
pub fn parser_factory(format: LineFormat) -> HandlerFactory {
    Box::new(move |_| Box::new(ParserHandler::new(format)))
}

/// pid → workload labels (e.g. `WorkloadResolver::labels`).
pub type PidLabeler = Box<dyn FnMut(u32) -> Vec<Label> + Send>;

/// Makes the handler of a newly followed file.
pub type HandlerFactory = Box<dyn Fn(&Path) -> Box<dyn LineHandler> + Send>;

/// `[logs]`: which job logs to follow.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogsConfig {
    /// Files and globs (`*`, `?`, `[…]`, `**` for any depth). Empty: no log following.
    pub paths: Vec<String>,
    /// Line framing: `auto`, `cri`, `docker` or `plain`.
    pub format: LineFormat,
    /// Where read positions are saved.
    pub state_file: PathBuf,
    /// Read files found at the first start from their beginning (default: from their end).
    pub from_start: bool,
    /// Time between reads, ms.
    pub poll_interval_ms: u64,
    /// Time between glob expansions (new files, rotation by rename), ms.
    pub rescan_interval_ms: u64,
    /// Most files followed.
    pub max_files: usize,
    /// Longest line passed to the parser (longer lines are cut and counted).
    pub max_line_bytes: usize,
    /// A file quiet this long gets its pending multi-line message flushed, and its last line read
    /// when it has no newline, ms.
    pub idle_flush_ms: u64,
    /// Directories besides the patterns' own (their literal prefixes) that followed files may
    /// resolve into through symlinks (see `confine.rs`), e.g. `/var/lib/docker/containers`.
    pub allowed_roots: Vec<PathBuf>,
}

impl Default for LogsConfig {
    fn default() -> Self {
        LogsConfig {
            paths: Vec::new(),
            format: LineFormat::Auto,
            state_file: PathBuf::from("/var/lib/oomlens/log-offsets.json"),
            from_start: false,
            poll_interval_ms: 250,
            rescan_interval_ms: 5000,
            max_files: 1024,
            max_line_bytes: 64 * 1024,
            idle_flush_ms: 2000,
            allowed_roots: Vec::new(),
        }
    }
}

impl LogsConfig {
    /// Checks ranges and patterns.
    pub fn validate(&self) -> Result<(), String> {
        validate_patterns(&self.paths).map_err(|e| e.to_string())?;
        if self.poll_interval_ms == 0 || self.rescan_interval_ms == 0 {
            return Err("logs.poll_interval_ms and logs.rescan_interval_ms must be > 0".into());
        }
        if self.max_files == 0 || self.max_line_bytes < 256 {
            return Err("logs.max_files must be > 0 and logs.max_line_bytes at least 256".into());
        }
        if let Some(r) = self.allowed_roots.iter().find(|r| !r.is_absolute()) {
            return Err(format!("logs.allowed_roots must be absolute directories, got {:?}", r.display()));
        }
        Ok(())
    }

    /// The follower settings.
    pub fn options(&self) -> FollowOptions {
        FollowOptions {
            patterns: self.paths.clone(),
            state_file: (!self.state_file.as_os_str().is_empty()).then(|| self.state_file.clone()),
            from_start: self.from_start,
            poll_interval: Duration::from_millis(self.poll_interval_ms),
            rescan_interval: Duration::from_millis(self.rescan_interval_ms),
            max_files: self.max_files,
            max_line_bytes: self.max_line_bytes,
            idle_flush: Duration::from_millis(self.idle_flush_ms),
            allowed_roots: self.allowed_roots.clone(),
        }
    }
}

/// A file missing from the saved state counts as created after the save when its creation time is
/// at most this much before the save's time (coarse file clocks, whole-second filesystems).
pub const CREATED_SLACK_MS: i64 = 2000;

/// Follower settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FollowOptions {
    /// Files and globs.
    pub patterns: Vec<String>,
    /// Where positions are saved (None: not saved).
    pub state_file: Option<PathBuf>,
    /// Read files found at the first start from their beginning.
    pub from_start: bool,
    /// Time between reads.
    pub poll_interval: Duration,
    /// Time between glob expansions (new files, rotation by rename).
    pub rescan_interval: Duration,
    /// Most files followed.
    pub max_files: usize,
    /// Longest line passed on (longer ones are cut).
    pub max_line_bytes: usize,
    /// A file quiet this long gets its pending message flushed.
    pub idle_flush: Duration,
    /// Directories besides the patterns' literal prefixes that files may resolve into.
    pub allowed_roots: Vec<PathBuf>,
}

impl Default for FollowOptions {
    fn default() -> Self {
        FollowOptions {
            patterns: Vec::new(),
            state_file: None,
            from_start: false,
            poll_interval: Duration::from_millis(250),
            rescan_interval: Duration::from_secs(5),
            max_files: 1024,
            max_line_bytes: 64 * 1024,
            idle_flush: Duration::from_secs(2),
            allowed_roots: Vec::new(),
        }
    }
}

/// The follower cannot start.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// A path pattern is not a valid glob.
    #[error("invalid [logs] path pattern {pattern:?}: {message}")]
    Pattern {
        /// The `[logs]` path pattern as configured.
        pattern: String,
        /// What is wrong.
        message: String,
    },
}

/// Checks that every pattern is a valid glob.
pub fn validate_patterns(patterns: &[String]) -> Result<(), FollowError> {
    for p in patterns {
        glob::Pattern::new(p)
            .map_err(|e| FollowError::Pattern { pattern: p.clone(), message: e.to_string() })?;
    }
    Ok(())
}

/// Counters of a follower.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowStats {
    /// Lines read.
    pub lines_read: u64,
    /// Lines longer than the limit (cut).
    pub lines_cut: u64,
    /// Files followed now.
    pub files_followed: u64,
    /// Files renamed away or replaced.
    pub rotations: u64,
    /// Files truncated or rewritten in place.
    pub truncations: u64,
    /// Files not followed because of `max_files` (at the last scan).
    pub files_skipped: u64,
    /// Failures to read or save the state file, or to read a file.
    pub errors: u64,
    /// Paths refused because they resolve outside the roots or are not regular files (each
    /// counted once).
    pub refused: u64,
}

struct Tracked {
    path: PathBuf,
    file: File,
    dev: u64,
    ino: u64,
    /// Start of the first line not yet passed on.
    offset: u64,
    /// Next byte to read.
    read_pos: u64,
    partial: Vec<u8>,
    /// The current line is over the limit: skip to its newline.
    cutting: bool,
    fp: Fingerprint,
    last_size: u64,
    handler: Box<dyn LineHandler>,
    last_data: Instant,
    flushed: bool,
}

impl std::fmt::Debug for Tracked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracked")
            .field("path", &self.path)
            .field("ino", &self.ino)
            .field("offset", &self.offset)
            .field("read_pos", &self.read_pos)
            .finish_non_exhaustive()
    }
}

/// Follows files; call [`Follower::poll`] every `poll_interval` and [`Follower::shutdown`] at the end.
pub struct Follower {
    opts: FollowOptions,
    factory: HandlerFactory,
    resolver: Option<PidLabeler>,
    files: Vec<Tracked>,
    draining: Vec<Tracked>,
    saved: HashMap<(u64, u64), FileOffset>,
    had_state: bool,
    saved_at_ms: i64,
    initial_done: bool,
    last_scan: Option<Instant>,
    dirty: bool,
    warned_cap: bool,
    warned_save: bool,
    stats: FollowStats,
    roots: Roots,
    /// Paths refused already (warned and counted once; bounded).
    refused: HashSet<PathBuf>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("opts", &self.opts)
            .field("files", &self.files)
            .field("draining", &self.draining)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Follower {
    /// A follower; loads the state file (a corrupt one is reported, set aside and ignored).
    pub fn new(
        opts: FollowOptions,
        factory: HandlerFactory,
        resolver: Option<PidLabeler>,
    ) -> Result<Self, FollowError> {
        validate_patterns(&opts.patterns)?;
        let roots = Roots::new(&opts.patterns, &opts.allowed_roots);
        let mut f = Follower {
            opts,
            factory,
            resolver,
            files: Vec::new(),
            draining: Vec::new(),
            saved: HashMap::new(),
            had_state: false,
            saved_at_ms: 0,
            initial_done: false,
            last_scan: None,
            dirty: false,
            warned_cap: false,
            warned_save: false,
            stats: FollowStats::default(),
            roots,
            refused: HashSet::new(),
        };
        if let Some(path) = f.opts.state_file.clone() {
            match OffsetState::load(&path) {
                Ok(Some(state)) => {
                    f.had_state = true;
                    f.saved_at_ms = state.saved_at_ms;
                    f.saved = state.files.into_iter().map(|e| ((e.dev, e.ino), e)).collect();
                }
                Ok(None) => {}
                Err(e) => {
                    f.stats.errors += 1;
                    warn!(error = %e, "log positions unusable: starting as on a first start");
                    OffsetState::set_aside(&path);
                }
            }
        }
        Ok(f)
    }

    /// Counters so far.
    pub fn stats(&self) -> FollowStats {
        FollowStats { files_followed: self.files.len() as u64, ..self.stats }
    }

    /// Paths followed now.
    pub fn followed(&self) -> Vec<PathBuf> {
        self.files.iter().map(|t| t.path.clone()).collect()
    }

    /// Rescans when due, reads what is new, flushes quiet files; returns the events found.
    pub fn poll(&mut self, now: Instant) -> Vec<OomEvent> {
        let mut out = Vec::new();
        if self.last_scan.is_none_or(|t| now.duration_since(t) >= self.opts.rescan_interval) {
            self.last_scan = Some(now);
            self.scan();
            if self.dirty {
                self.save();
            }
        }
        for i in 0..self.files.len() {
            let t = &mut self.files[i];
            let events = read_new(t, now, &self.opts, &mut self.stats);
            if !t.flushed && now.duration_since(t.last_data) >= self.opts.idle_flush {
                t.flushed = true;
                let mut evs = events;
                evs.extend(feed_unterminated(t, &mut self.stats));
                evs.extend(t.handler.finish());
                self.emit(i, false, evs, &mut out);
            } else {
                self.emit(i, false, events, &mut out);
            }
        }
        let mut i = 0;
        while i < self.draining.len() {
            let t = &mut self.draining[i];
            let before = t.read_pos;
            let mut events = read_new(t, now, &self.opts, &mut self.stats);
            let size = t.file.metadata().map(|m| m.len()).unwrap_or(0);
            let quiet = t.read_pos == before
                && t.read_pos >= size
                && now.duration_since(t.last_data) >= self.opts.idle_flush;
            if quiet {
                events.extend(feed_unterminated(t, &mut self.stats));
                events.extend(t.handler.finish());
            }
            self.emit(i, true, events, &mut out);
            if quiet {
                self.draining.remove(i);
                self.dirty = true;
            } else {
                i += 1;
            }
        }
        out
    }

    /// Reads what is left, flushes every handler and saves the positions.
    pub fn shutdown(&mut self) -> Vec<OomEvent> {
        let mut out = Vec::new();
        let now = Instant::now();
        for i in 0..self.files.len() {
            let t = &mut self.files[i];
            let mut events = read_new(t, now, &self.opts, &mut self.stats);
            events.extend(t.handler.finish());
            self.emit(i, false, events, &mut out);
        }
        for i in 0..self.draining.len() {
            let t = &mut self.draining[i];
            let mut events = read_new(t, now, &self.opts, &mut self.stats);
            events.extend(t.handler.finish());
            self.emit(i, true, events, &mut out);
        }
        self.save();
        out
    }

    fn emit(&mut self, i: usize, draining: bool, events: Vec<Found>, out: &mut Vec<OomEvent>) {
        if events.is_empty() {
            return;
        }
        let t = if draining { &self.draining[i] } else { &self.files[i] };
        let path = clip(&t.path.to_string_lossy());
        let ts = now_ms();
        for Found { event: mut e, start } in events {
            e.event_id = start.map_or_else(|| rand::random::<u64>() | 1, |s| event_id(t, &s));
            e.source = EventSource::Log;
            e.ts_ms = start.and_then(|s| s.ts_ms).unwrap_or(ts);
            if !e.labels.iter().any(|l| l.key == PATH_LABEL) {
                e.labels.push(Label { key: PATH_LABEL.into(), value: path.clone() });
            }
            if let (Some(pid), Some(r)) = (e.pid, self.resolver.as_mut()) {
                for l in r(pid) {
                    if !e.labels.iter().any(|x| x.key == l.key) {
                        e.labels.push(l);
                    }
                }
            }
            e.labels.truncate(MAX_LABELS);
            out.push(e);
        }
    }

    /// Expands the globs; handles new, moved, replaced and vanished files.
    fn scan(&mut self) {
        let mut paths: Vec<PathBuf> = Vec::new();
        let mut seen_paths = HashSet::new();
        let walk_cap = self.opts.max_files.saturating_mul(4).max(64);
        for p in &self.opts.patterns {
            let Ok(iter) = glob::glob(p) else { continue };
            for entry in iter.flatten().take(walk_cap) {
                if seen_paths.insert(entry.clone()) {
                    paths.push(entry);
                }
            }
        }
        // Followed files whose path now names another inode, or nothing: read them to the end.
        let mut i = 0;
        while i < self.files.len() {
            let t = &self.files[i];
            let same = std::fs::metadata(&t.path).is_ok_and(|m| m.dev() == t.dev && m.ino() == t.ino);
            if same && seen_paths.contains(&t.path) {
                i += 1;
            } else {
                self.stats.rotations += 1;
                self.dirty = true;
                self.draining.push(self.files.remove(i));
            }
        }
        let followed: HashSet<PathBuf> = self.files.iter().map(|t| t.path.clone()).collect();
        let mut skipped = 0u64;
        for path in paths {
            if followed.contains(&path) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(&path) else { continue };
            if !meta.is_file() {
                continue;
            }
            let key = (meta.dev(), meta.ino());
            if self.files.iter().any(|t| (t.dev, t.ino) == key) {
                continue; // the same file under another name (symlink)
            }
            // A renamed file that still matches: keep its position.
            if let Some(j) = self.draining.iter().position(|t| (t.dev, t.ino) == key) {
                let mut t = self.draining.remove(j);
                t.path = path;
                self.files.push(t);
                self.dirty = true;
                continue;
            }
            if self.files.len() >= self.opts.max_files {
                skipped += 1;
                continue;
            }
            match self.open(&path, meta.created().or_else(|_| meta.modified()).ok()) {
                Ok(t) => {
                    self.files.push(t);
                    self.dirty = true;
                }
                Err(e @ (ConfineError::Outside { .. } | ConfineError::NotRegular(_))) => {
                    if self.refused.len() >= self.opts.max_files.saturating_mul(4).max(64) {
                        self.refused.clear();
                    }
                    if self.refused.insert(path.clone()) {
                        self.stats.refused += 1;
                        warn!(error = %e, "log file refused");
                    }
                }
                Err(e) => {
                    self.stats.errors += 1;
                    warn!(path = %path.display(), error = %e, "cannot follow a log file");
                }
            }
        }
        if skipped > 0 && !self.warned_cap {
            self.warned_cap = true;
            warn!(
                max_files = self.opts.max_files,
                skipped, "too many log files: some are not followed (raise [logs] max_files)"
            );
        }
        self.stats.files_skipped = skipped;
        self.initial_done = true;
    }

    fn open(&mut self, path: &Path, created: Option<std::time::SystemTime>) -> Result<Tracked, ConfineError> {
        let file = self.roots.open(path)?;
        let m = file.metadata().map_err(|source| ConfineError::Io { path: path.to_owned(), source })?;
        let key = (m.dev(), m.ino());
        let size = m.len();
        let fp_now = head_fingerprint(&file, size);
        let start = match self.saved.remove(&key) {
            Some(saved) if matches_head(&file, size, saved.fingerprint) => {
                if saved.offset <= size {
                    saved.offset
                } else {
                    0
                }
            }
            // A known inode with other first bytes: rewritten or reused while we were down.
            Some(_) => 0,
            _ if self.initial_done => 0,
            _ if self.opts.from_start => 0,
            _ if self.had_state => {
                let created_ms = created
                    .and_then(|c| c.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as i64);
                // File times come from the kernel's coarse clock (a tick behind the system clock)
                // and some filesystems keep whole seconds: a file made just after the save can
                // look older. A file not in the state that is that close was never read anyway.
                if created_ms.is_some_and(|c| c >= self.saved_at_ms - CREATED_SLACK_MS) { 0 } else { size }
            }
            _ => size,
        };
        info!(path = %path.display(), offset = start, size, "following log file");
        Ok(Tracked {
            path: path.to_owned(),
            file,
            dev: key.0,
            ino: key.1,
            offset: start,
            read_pos: start,
            partial: Vec::new(),
            cutting: false,
            fp: fp_now,
            last_size: size,
            handler: (self.factory)(path),
            last_data: Instant::now(),
            flushed: true,
        })
    }

    fn save(&mut self) {
        let Some(path) = self.opts.state_file.clone() else { return };
        let files = self
            .files
            .iter()
            .chain(self.draining.iter())
            .map(|t| FileOffset {
                path: t.path.clone(),
                dev: t.dev,
                ino: t.ino,
                offset: t.offset,
                fingerprint: t.fp,
            })
            .collect();
        let state = OffsetState { version: 1, saved_at_ms: now_ms(), files };
        match state.save(&path) {
            Ok(()) => self.dirty = false,
            Err(e) => {
                self.stats.errors += 1;
                if !self.warned_save {
                    self.warned_save = true;
                    warn!(error = %e, "cannot save log positions (a restart will start files at their end; further failures not logged)");
                }
            }
        }
    }
}

/// Reads what is new in one file and feeds complete lines to its handler.
fn read_new(t: &mut Tracked, now: Instant, opts: &FollowOptions, stats: &mut FollowStats) -> Vec<Found> {
    let mut out = Vec::new();
    let Ok(meta) = t.file.metadata() else {
        stats.errors += 1;
        return out;
    };
    let size = meta.len();
    let rewritten =
        size < t.read_pos || (size != t.last_size && t.fp.len > 0 && !matches_head(&t.file, size, t.fp));
    if rewritten {
        stats.truncations += 1;
        out.extend(t.handler.finish());
        t.offset = 0;
        t.read_pos = 0;
        t.partial.clear();
        t.cutting = false;
        t.fp = Fingerprint::default();
    }
    if size != t.last_size && (t.fp.len as usize) < FINGERPRINT_BYTES {
        t.fp = head_fingerprint(&t.file, size);
    }
    t.last_size = size;
    let mut budget = MAX_READ_PER_POLL;
    let mut buf = vec![0u8; 64 * 1024];
    while t.read_pos < size && budget > 0 {
        let want = buf.len().min(budget).min((size - t.read_pos) as usize);
        let n = match t.file.read_at(&mut buf[..want], t.read_pos) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => {
                stats.errors += 1;
                break;
            }
        };
        budget -= n;
        t.last_data = now;
        t.flushed = false;
        let mut chunk = &buf[..n];
        let mut pos = t.read_pos;
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    take_bytes(t, &chunk[..nl], opts.max_line_bytes);
                    if t.cutting {
                        stats.lines_cut += 1;
                    }
                    stats.lines_read += 1;
                    let line = line_text(&t.partial);
                    out.extend(t.handler.feed_line(t.offset, &line));
                    t.partial.clear();
                    t.cutting = false;
                    pos += nl as u64 + 1;
                    t.offset = pos;
                    chunk = &chunk[nl + 1..];
                }
                None => {
                    take_bytes(t, chunk, opts.max_line_bytes);
                    pos += chunk.len() as u64;
                    chunk = &[];
                }
            }
        }
        t.read_pos = pos;
    }
    out
}

/// Feeds the file's last line when it has no newline yet and the file has been quiet for
/// `idle_flush`: a job that died in the middle of a line (a C++ `abort()` after an unterminated
/// `fprintf`, a `print(…, end="")`) never completes it, and its last words are often the failure.
/// The line is passed on from where it starts; bytes the writer appends later begin a new line
/// (a writer silent for `idle_flush` in the middle of a line is cut there — the parser reads a
/// line cut in two as it reads a hard wrap).
fn feed_unterminated(t: &mut Tracked, stats: &mut FollowStats) -> Vec<Found> {
    if t.partial.is_empty() {
        return Vec::new();
    }
    if t.cutting {
        stats.lines_cut += 1;
    }
    stats.lines_read += 1;
    let line = line_text(&t.partial);
    let found = t.handler.feed_line(t.offset, &line);
    t.partial.clear();
    t.cutting = false;
    t.offset = t.read_pos;
    found
}

/// Appends to the current line up to the limit; marks it cut beyond.
fn take_bytes(t: &mut Tracked, bytes: &[u8], max: usize) {
    let room = max.saturating_sub(t.partial.len());
    if bytes.len() > room {
        t.partial.extend_from_slice(&bytes[..room]);
        t.cutting = true;
    } else {
        t.partial.extend_from_slice(bytes);
    }
}

/// The deterministic id of an event starting at `start` in the file of `t` (see the module docs):
/// FNV-1a over device, inode, the fingerprint of the file's bytes before the line (at most
/// [`FINGERPRINT_BYTES`]), the offset and the line's hash; never 0.
fn event_id(t: &Tracked, start: &LineStart) -> u64 {
    let head = head_fingerprint(&t.file, start.offset);
    let words = [t.dev, t.ino, u64::from(head.len), head.hash, start.offset, start.line_hash];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    crate::hash::fnv1a64(&bytes) | 1
}

fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

fn head_fingerprint(file: &File, size: u64) -> Fingerprint {
    let len = (size as usize).min(FINGERPRINT_BYTES);
    let mut head = vec![0u8; len];
    match file.read_exact_at(&mut head, 0) {
        Ok(()) => Fingerprint::of(&head),
        Err(_) => Fingerprint::default(),
    }
}

/// True when the file's first `fp.len` bytes still hash to `fp`.
fn matches_head(file: &File, size: u64, fp: Fingerprint) -> bool {
    if size < u64::from(fp.len) {
        return false;
    }
    let mut head = vec![0u8; fp.len as usize];
    file.read_exact_at(&mut head, 0).is_ok() && Fingerprint::of(&head) == fp
}

fn clip(s: &str) -> String {
    oomlens_schema::text::clip(s, MAX_STRING).to_owned()
}

/// Starts following `[logs]` when paths are configured (`None` when none are, or when the
/// follower cannot start: the reason is logged).
pub fn spawn_configured(
    cfg: &LogsConfig,
    labeler: Option<PidLabeler>,
    tx: mpsc::Sender<Reading>,
    stop: watch::Receiver<bool>,
    metrics: Arc<AgentMetrics>,
) -> Option<tokio::task::JoinHandle<()>> {
    if cfg.paths.is_empty() {
        return None;
    }
    match Follower::new(cfg.options(), parser_factory(cfg.format), labeler) {
        Ok(f) => Some(spawn_follower(f, tx, stop, metrics)),
        Err(e) => {
            warn!(error = %e, "job logs are not followed");
            None
        }
    }
}

/// Runs a follower as a task: polls every `poll_interval`, sends each event as a reading, and
/// when `stop` turns true reads what is left, flushes, saves the positions and drops `tx`.
pub fn spawn_follower(
    mut follower: Follower,
    tx: mpsc::Sender<Reading>,
    mut stop: watch::Receiver<bool>,
    metrics: Arc<AgentMetrics>,
) -> tokio::task::JoinHandle<()> {
    let interval = follower.opts.poll_interval;
    tokio::spawn(async move {
        let mut seen = FollowStats::default();
        let mut stopping = false;
        info!(patterns = %follower.opts.patterns.join(", "), "following job logs");
        loop {
            stopping |= *stop.borrow();
            let last = stopping;
            let res = tokio::task::spawn_blocking(move || {
                let events = if last { follower.shutdown() } else { follower.poll(Instant::now()) };
                (follower, events)
            })
            .await;
            let Ok((f, events)) = res else { break };
            follower = f;
            let s = follower.stats();
            metrics.log_lines_read.inc_by(s.lines_read.saturating_sub(seen.lines_read));
            metrics.log_lines_cut.inc_by(s.lines_cut.saturating_sub(seen.lines_cut));
            metrics.log_files_followed.set(s.files_followed as i64);
            metrics.log_files_refused.inc_by(s.refused.saturating_sub(seen.refused));
            seen = s;
            let sent = crate::detect::kmsg::send_all(&tx, events).await;
            if last || !sent {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                // A dropped stop sender counts as a stop.
                r = stop.changed() => stopping |= r.is_err(),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use oomlens_schema::OomKind;

    use super::*;

    /// Reports `OOM pid=N` lines; a `BEGIN` line opens a message that `END` or `finish` closes.
    struct Probe {
        pending: Option<String>,
    }

    impl LineHandler for Probe {
        fn feed_line(&mut self, _offset: u64, line: &str) -> Vec<Found> {
            if line == "BEGIN" {
                self.pending = Some(String::new());
                return vec![];
            }
            if line == "END" {
                return self.finish();
            }
            if let Some(p) = self.pending.as_mut() {
                p.push_str(line);
                return vec![];
            }
            line.strip_prefix("OOM pid=")
                .and_then(|n| n.parse().ok())
                .map(|pid| OomEvent {
                    kind: OomKind::CudaOom,
                    pid: Some(pid),
                    raw_message: line.into(),
                    ..OomEvent::default()
                })
                .map(Found::from)
                .into_iter()
                .collect()
        }

        fn finish(&mut self) -> Vec<Found> {
            self.pending
                .take()
                .map(|m| {
                    Found::from(OomEvent { kind: OomKind::CudaOom, raw_message: m, ..OomEvent::default() })
                })
                .into_iter()
                .collect()
        }
    }

    fn follower(dir: &Path, max_line: usize) -> Follower {
        let opts = FollowOptions {
            patterns: vec![format!("{}/*.log", dir.display())],
            state_file: Some(dir.join("state.json")),
            rescan_interval: Duration::ZERO,
            idle_flush: Duration::from_millis(100),
            max_line_bytes: max_line,
            max_files: 3,
            ..FollowOptions::default()
        };
        let labeler: PidLabeler =
            Box::new(|pid| vec![Label { key: "k8s.pod".into(), value: format!("pod-{pid}") }]);
        Follower::new(opts, Box::new(|_| Box::new(Probe { pending: None })), Some(labeler)).unwrap()
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

    fn pids(events: &[OomEvent]) -> Vec<Option<u32>> {
        events.iter().map(|e| e.pid).collect()
    }

    #[test]
    fn symlinks_out_of_the_followed_directory_are_refused_and_counted_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("logs");
        std::fs::create_dir(&dir).unwrap();
        // A file the job cannot read but the agent could, holding an OOM line, and a job-written
        // symlink to it inside the followed directory.
        let secret = tmp.path().join("shadow");
        std::fs::write(&secret, "OOM pid=666\n").unwrap();
        std::os::unix::fs::symlink(&secret, dir.join("evil.log")).unwrap();
        // A symlink that stays inside is followed like the file itself would be.
        std::fs::create_dir(dir.join("real")).unwrap();
        std::fs::write(dir.join("real/job.out"), "").unwrap();
        std::os::unix::fs::symlink(dir.join("real/job.out"), dir.join("job.log")).unwrap();
        let opts = FollowOptions {
            patterns: vec![format!("{}/*.log", dir.display())],
            rescan_interval: Duration::ZERO,
            from_start: true,
            ..FollowOptions::default()
        };
        let mut f =
            Follower::new(opts.clone(), Box::new(|_| Box::new(Probe { pending: None })), None).unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(f.poll(t0).is_empty(), "nothing read through the symlink out");
        }
        assert_eq!(f.followed(), [dir.join("job.log")]);
        assert_eq!(f.stats().refused, 1, "refused once, not at every rescan");
        append(&dir.join("real/job.out"), "OOM pid=7\n");
        assert_eq!(pids(&f.poll(t0)), [Some(7)]);
        // With the target's directory allowed, the same link is followed.
        let opts = FollowOptions { allowed_roots: vec![tmp.path().to_owned()], ..opts };
        let mut f = Follower::new(opts, Box::new(|_| Box::new(Probe { pending: None })), None).unwrap();
        assert!(pids(&f.poll(t0)).contains(&Some(666)));
    }

    #[test]
    fn partial_lines_wait_long_lines_are_cut_and_events_are_labelled() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.log");
        std::fs::write(&a, "").unwrap();
        let mut f = follower(dir.path(), 256);
        let t0 = Instant::now();
        assert!(f.poll(t0).is_empty());
        append(&a, "OOM pid=1\r\nOOM pid=");
        let ev = f.poll(t0);
        assert_eq!(pids(&ev), vec![Some(1)]);
        let e = &ev[0];
        assert_eq!(e.source, EventSource::Log);
        assert_ne!(e.event_id, 0);
        assert!(e.ts_ms > 0);
        let labels: Vec<(&str, &str)> = e.labels.iter().map(|l| (l.key.as_str(), l.value.as_str())).collect();
        assert_eq!(labels, vec![(PATH_LABEL, a.to_str().unwrap()), ("k8s.pod", "pod-1")]);
        append(&a, &format!("2\n{}\nOOM pid=3\n", "x".repeat(10_000)));
        assert_eq!(pids(&f.poll(t0)), vec![Some(2), Some(3)]);
        let s = f.stats();
        assert_eq!((s.lines_read, s.lines_cut, s.files_followed), (4, 1, 1));
    }

    #[test]
    fn a_quiet_file_flushes_its_pending_message() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.log");
        std::fs::write(&a, "").unwrap();
        let mut f = follower(dir.path(), 1024);
        let t0 = Instant::now();
        f.poll(t0);
        append(&a, "BEGIN\nline one\n");
        assert!(f.poll(t0).is_empty());
        assert!(f.poll(t0 + Duration::from_millis(50)).is_empty());
        let ev = f.poll(t0 + Duration::from_millis(150));
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].raw_message, "line one");
        assert!(f.poll(t0 + Duration::from_millis(300)).is_empty());
    }

    #[test]
    fn first_start_begins_at_the_end_unless_from_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.log"), "OOM pid=1\n").unwrap();
        let mut f = follower(dir.path(), 1024);
        assert!(f.poll(Instant::now()).is_empty());
        let dir2 = tempfile::tempdir().unwrap();
        std::fs::write(dir2.path().join("a.log"), "OOM pid=1\n").unwrap();
        let mut f = follower(dir2.path(), 1024);
        f.opts.from_start = true;
        assert_eq!(pids(&f.poll(Instant::now())), vec![Some(1)]);
    }

    #[test]
    fn max_files_bounds_what_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join(format!("{i}.log")), "").unwrap();
        }
        let mut f = follower(dir.path(), 1024);
        f.poll(Instant::now());
        assert_eq!(f.stats().files_followed, 3);
        assert_eq!(f.stats().files_skipped, 2);
    }

    #[test]
    fn bad_patterns_and_config_are_refused() {
        let opts = FollowOptions { patterns: vec!["/var/log/[".into()], ..FollowOptions::default() };
        let err = Follower::new(opts, Box::new(|_| Box::new(Probe { pending: None })), None).unwrap_err();
        assert!(err.to_string().contains("/var/log/["), "{err}");
        let cfg = LogsConfig { max_line_bytes: 1, ..LogsConfig::default() };
        assert!(cfg.validate().unwrap_err().contains("max_line_bytes"));
        assert!(LogsConfig::default().validate().is_ok());
        assert_eq!(LogsConfig::default().options().poll_interval, Duration::from_millis(250));
    }

    #[test]
    fn a_corrupt_state_file_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("state.json"), "garbage").unwrap();
        std::fs::write(dir.path().join("a.log"), "OOM pid=1\n").unwrap();
        let mut f = follower(dir.path(), 1024);
        assert_eq!(f.stats().errors, 1);
        assert!(dir.path().join("state.json.corrupt").exists());
        assert!(f.poll(Instant::now()).is_empty()); // as on a first start: from the end
        assert!(dir.path().join("state.json").exists());
    }
}
