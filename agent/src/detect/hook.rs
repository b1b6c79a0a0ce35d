//! The hook socket: a local Unix socket where jobs report their own OOMs as JSON lines
//! (`hook_schema` defines the lines; `docs/hook-protocol.md` documents them).
//!
//! [`HookListener::bind`] creates the socket file with the configured mode and group, replacing a
//! stale socket left by a dead agent but refusing to touch a live one or a non-socket file; the
//! file is removed when the listener ends (only if it is still the one this listener created).
//! [`HookListener::run`] serves connections until the stop signal: each line gets one reply line;
//! an accepted report becomes an [`OomEvent`] (source `hook`, the peer's pid, its workload
//! labels) sent into the agent's reading channel before `{"ok":true,…}` is written. Bad lines are
//! answered with `{"ok":false,"error":…}` and counted; line length, connection count and idle
//! time are capped, so a misbehaving client can neither crash the agent nor hold it.

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oomlens_schema::{Label, OomEvent};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::detect::hook_schema::{self, BadRequest, REPORTED_PID_LABEL, Request};
use crate::metrics::AgentMetrics;
use crate::source::Reading;
use crate::workload::passwd::{UnknownGroup, group_id};
use crate::workload::{WorkloadConfig, WorkloadResolver};
use oomlens_schema::text::now_ms;

/// `[hook]`: the job-report socket.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HookConfig {
    /// Serve the socket.
    pub enabled: bool,
    /// Socket file.
    pub path: PathBuf,
    /// Permission bits of the socket file (`0o660`: owner and group may connect).
    pub mode: u32,
    /// Group owning the socket file (name or gid; empty: the agent's group).
    pub group: String,
    /// Longest request line, bytes (longer lines are refused).
    pub max_line_bytes: usize,
    /// Most simultaneous connections (more are refused with an error line).
    pub max_connections: usize,
    /// A connection silent for this long is closed, ms.
    pub idle_timeout_ms: u64,
}

impl Default for HookConfig {
    fn default() -> Self {
        HookConfig {
            enabled: true,
            path: PathBuf::from("/run/oomlens/hook.sock"),
            mode: 0o660,
            group: String::new(),
            max_line_bytes: 256 * 1024,
            max_connections: 64,
            idle_timeout_ms: 30_000,
        }
    }
}

impl HookConfig {
    /// Checks ranges; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.mode > 0o777 {
            return Err(format!("hook.mode {:#o} has bits beyond 0o777", self.mode));
        }
        if !(1024..=16 * 1024 * 1024).contains(&self.max_line_bytes) {
            return Err("hook.max_line_bytes must be between 1024 and 16777216".to_owned());
        }
        if self.max_connections == 0 || self.idle_timeout_ms == 0 {
            return Err("hook.max_connections and hook.idle_timeout_ms must be > 0".to_owned());
        }
        if self.enabled && self.path.as_os_str().is_empty() {
            return Err("hook.path must not be empty".to_owned());
        }
        Ok(())
    }
}

/// The socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// Another process is serving the socket.
    #[error("hook socket {0} is in use by another process (another agent running?)")]
    InUse(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{0} exists and is not a socket: refusing to replace it (remove it or set hook.path)")]
    NotASocket(PathBuf),
    /// A file-system step failed.
    #[error("hook socket {path}: cannot {what}: {source}")]
    Io {
        /// Socket path.
        path: PathBuf,
        /// The step.
        what: &'static str,
        /// The I/O error the step failed with.
        source: std::io::Error,
    },
    /// `hook.group` does not exist.
    #[error("hook.group: {0}")]
    Group(#[from] UnknownGroup),
}

fn io_err<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> HookError + 'a {
    move |source| HookError::Io { path: path.to_owned(), what, source }
}

/// Removes the socket file on drop, if it is still the one created.
#[derive(Debug)]
struct SocketFile {
    path: PathBuf,
    id: (u64, u64),
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path)
            && (m.dev(), m.ino()) == self.id
            && let Err(e) = std::fs::remove_file(&self.path)
        {
            warn!(path = %self.path.display(), error = %e, "cannot remove the hook socket");
        }
    }
}

/// A bound hook socket.
#[derive(Debug)]
pub struct HookListener {
    listener: UnixListener,
    file: SocketFile,
    cfg: HookConfig,
}

impl HookListener {
    /// Creates the socket (parent directory included) with `cfg.mode` and `cfg.group` (resolved
    /// in `<etc_root>/group`). Must be called inside a Tokio runtime.
    pub fn bind(cfg: &HookConfig, etc_root: &Path) -> Result<Self, HookError> {
        let path = cfg.path.as_path();
        let gid = (!cfg.group.is_empty()).then(|| group_id(etc_root, &cfg.group)).transpose()?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io_err(path, "create its directory"))?;
        }
        replace_stale(path)?;
        let std_listener = std::os::unix::net::UnixListener::bind(path).map_err(io_err(path, "bind"))?;
        let meta = std::fs::symlink_metadata(path).map_err(io_err(path, "stat"))?;
        // From here on the guard removes the file whatever fails.
        let file = SocketFile { path: path.to_owned(), id: (meta.dev(), meta.ino()) };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(cfg.mode))
            .map_err(io_err(path, "set its mode"))?;
        if let Some(gid) = gid {
            std::os::unix::fs::chown(path, None, Some(gid)).map_err(io_err(path, "change its group"))?;
        }
        std_listener.set_nonblocking(true).map_err(io_err(path, "make it non-blocking"))?;
        let listener = UnixListener::from_std(std_listener).map_err(io_err(path, "register it"))?;
        info!(path = %path.display(), mode = format!("{:#o}", cfg.mode), group = %cfg.group, "hook socket listening");
        Ok(HookListener { listener, file, cfg: cfg.clone() })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// Serves connections until `stop` turns true (or its sender is gone), then lets open
    /// connections finish their current line (at most 2 s), drops every clone of `tx` and removes
    /// the socket file.
    pub async fn run(
        self,
        tx: mpsc::Sender<Reading>,
        resolver: Arc<Mutex<WorkloadResolver>>,
        metrics: Arc<AgentMetrics>,
        mut stop: watch::Receiver<bool>,
    ) {
        let HookListener { listener, file, cfg } = self;
        let ctx = Arc::new(Conn { tx, resolver, metrics, cfg, stop: stop.clone() });
        let slots = Arc::new(Semaphore::new(ctx.cfg.max_connections));
        let mut tasks = JoinSet::new();
        loop {
            if *stop.borrow() {
                break;
            }
            tokio::select! {
                changed = stop.changed() => if changed.is_err() { break },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => match slots.clone().try_acquire_owned() {
                        Ok(permit) => {
                            ctx.connection("accepted");
                            let ctx = ctx.clone();
                            tasks.spawn(async move {
                                ctx.serve(stream).await;
                                drop(permit);
                            });
                        }
                        Err(_) => {
                            ctx.connection("refused");
                            let line = format!("{}\n", hook_schema::reply_error("too many connections to the hook socket; retry later"));
                            let _ = stream.try_write(line.as_bytes());
                        }
                    },
                    Err(e) => {
                        warn!(error = %e, "hook socket accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        drop(ctx);
        if tokio::time::timeout(Duration::from_secs(2), async { while tasks.join_next().await.is_some() {} })
            .await
            .is_err()
        {
            tasks.shutdown().await;
        }
        drop(listener);
        drop(file);
        debug!("hook socket closed");
    }
}

/// Starts the hook listener of a running agent when `cfg.enabled`. A socket that cannot be
/// created (no permission on its directory, another agent serving it, unknown group) is logged
/// as an error and the agent runs on without it: losing the hook must not stop GPU monitoring.
pub fn spawn_listener(
    cfg: &HookConfig,
    workload: &WorkloadConfig,
    tx: mpsc::Sender<Reading>,
    metrics: Arc<AgentMetrics>,
    stop: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    if !cfg.enabled {
        return None;
    }
    match HookListener::bind(cfg, &workload.etc_root) {
        Ok(listener) => {
            let resolver = Arc::new(Mutex::new(WorkloadResolver::with_config(workload.clone())));
            Some(tokio::spawn(listener.run(tx, resolver, metrics, stop)))
        }
        Err(e) => {
            metrics.hook_connections.get_or_create(&vec![("result", "bind_failed".to_owned())]).inc();
            tracing::error!(error = %e, "hook socket disabled: jobs cannot report OOMs through it");
            None
        }
    }
}

/// `oomlens-agent hook-listen`: serves only the hook socket until `stop`, writing each accepted
/// event to `out` as one JSON line (when `print`). Returns the number of events accepted.
pub async fn listen_and_print(
    cfg: &HookConfig,
    workload: &WorkloadConfig,
    print: bool,
    mut out: impl std::io::Write,
    stop: watch::Receiver<bool>,
) -> Result<u64, HookError> {
    let listener = HookListener::bind(cfg, &workload.etc_root)?;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = AgentMetrics::register(&mut registry);
    let resolver = Arc::new(Mutex::new(WorkloadResolver::with_config(workload.clone())));
    let (tx, mut rx) = mpsc::channel(64);
    let task = tokio::spawn(listener.run(tx, resolver, metrics, stop));
    let mut events = 0u64;
    while let Some(reading) = rx.recv().await {
        for event in reading.events {
            events += 1;
            if print {
                let line = hook_schema::event_json(&event).to_string();
                if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
                    warn!(error = %e, "cannot print an event");
                }
            }
        }
    }
    let _ = task.await;
    Ok(events)
}

/// Removes a socket file nobody listens on; refuses a live socket or a non-socket.
fn replace_stale(path: &Path) -> Result<(), HookError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path, "stat")(e)),
    };
    if !meta.file_type().is_socket() {
        return Err(HookError::NotASocket(path.to_owned()));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(HookError::InUse(path.to_owned())),
        Err(_) => {
            info!(path = %path.display(), "replacing a stale hook socket");
            std::fs::remove_file(path).map_err(io_err(path, "remove the stale socket"))
        }
    }
}

/// What every connection shares.
#[derive(Debug)]
struct Conn {
    tx: mpsc::Sender<Reading>,
    resolver: Arc<Mutex<WorkloadResolver>>,
    metrics: Arc<AgentMetrics>,
    cfg: HookConfig,
    stop: watch::Receiver<bool>,
}

/// One read attempt of a line.
#[derive(Debug, PartialEq, Eq)]
enum LineRead {
    Line(Vec<u8>),
    TooLong,
    Eof,
}

impl Conn {
    fn connection(&self, result: &str) {
        self.metrics.hook_connections.get_or_create(&vec![("result", result.to_owned())]).inc();
    }

    fn request(&self, result: &str) {
        self.metrics.hook_requests.get_or_create(&vec![("result", result.to_owned())]).inc();
    }

    async fn serve(&self, stream: UnixStream) {
        // SO_PEERCRED: the kernel's word for who is connected, in the agent's pid namespace.
        let peer_pid = stream.peer_cred().ok().and_then(|c| c.pid()).and_then(|p| u32::try_from(p).ok());
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::with_capacity(16 * 1024, read);
        let mut stop = self.stop.clone();
        let idle = Duration::from_millis(self.cfg.idle_timeout_ms);
        loop {
            let read = tokio::select! {
                _ = stop.changed() => break,
                r = tokio::time::timeout(idle, read_line(&mut reader, self.cfg.max_line_bytes)) => r,
            };
            let reply = match read {
                Err(_) => {
                    self.request("idle");
                    let _ = write_line(&mut write, &hook_schema::reply_error("idle timeout: closing")).await;
                    break;
                }
                Ok(Err(e)) => {
                    debug!(error = %e, "hook connection read failed");
                    break;
                }
                Ok(Ok(LineRead::Eof)) => break,
                Ok(Ok(LineRead::TooLong)) => {
                    self.request("too_long");
                    hook_schema::reply_error(&format!("line longer than {} bytes", self.cfg.max_line_bytes))
                }
                Ok(Ok(LineRead::Line(line))) => self.handle(&line, peer_pid).await,
            };
            if write_line(&mut write, &reply).await.is_err() {
                break;
            }
        }
    }

    /// One request line → its reply.
    async fn handle(&self, line: &[u8], peer_pid: Option<u32>) -> String {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            self.request("empty");
            return hook_schema::reply_error("empty line");
        }
        let report = match hook_schema::parse_line(line) {
            Ok(Request::Ping) => {
                self.request("ping");
                return hook_schema::reply_ok(None);
            }
            Ok(Request::Oom(r)) => r,
            Err(BadRequest { reason, message }) => {
                self.request(reason);
                debug!(reason, %message, "hook request refused");
                return hook_schema::reply_error(&message);
            }
        };
        let event = self.event(*report, peer_pid).await;
        let event_id = event.event_id;
        let reading = Reading { events: vec![event], ..Reading::default() };
        if self.tx.send(reading).await.is_err() {
            self.request("shutting_down");
            return hook_schema::reply_error("the agent is shutting down; the report was not recorded");
        }
        self.request("ok");
        hook_schema::reply_ok(Some(event_id))
    }

    async fn event(&self, report: hook_schema::OomReport, peer_pid: Option<u32>) -> OomEvent {
        let mut event = report.event;
        event.event_id = rand::random::<u64>() | 1;
        event.ts_ms = now_ms();
        event.pid = peer_pid.or(report.pid);
        if let (Some(peer), Some(claimed)) = (peer_pid, report.pid)
            && peer != claimed
        {
            event.labels.push(Label { key: REPORTED_PID_LABEL.to_owned(), value: claimed.to_string() });
        }
        if let Some(pid) = event.pid {
            let resolver = self.resolver.clone();
            let owner = tokio::task::spawn_blocking(move || {
                resolver.lock().unwrap_or_else(std::sync::PoisonError::into_inner).labels(pid)
            })
            .await
            .unwrap_or_default();
            // Workload labels first: they are what reports group by.
            event.labels.splice(0..0, owner);
        }
        event.labels.truncate(oomlens_schema::limits::MAX_LABELS);
        event
    }
}

/// Reads one `\n`-terminated line of at most `max` bytes (a last line without `\n` counts). A
/// longer line is consumed up to its end and reported as [`LineRead::TooLong`]; memory stays
/// bounded by `max` plus the reader's buffer.
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, max: usize) -> std::io::Result<LineRead> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => LineRead::TooLong,
                (false, true) => LineRead::Eof,
                (false, false) => LineRead::Line(line),
            });
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long {
            if line.len() + chunk.len() > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = done.unwrap_or(buf.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(if too_long { LineRead::TooLong } else { LineRead::Line(line) });
        }
    }
}

async fn write_line<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, reply: &str) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(reply.len() + 1);
    bytes.extend_from_slice(reply.as_bytes());
    bytes.push(b'\n');
    tokio::time::timeout(Duration::from_secs(5), async {
        w.write_all(&bytes).await?;
        w.flush().await
    })
    .await
    .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "reply write timed out")))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<LineRead> {
        let mut r = BufReader::with_capacity(8, input);
        let mut out = Vec::new();
        loop {
            match read_line(&mut r, max).await.unwrap() {
                LineRead::Eof => return out,
                other => out.push(other),
            }
        }
    }

    #[tokio::test]
    async fn lines_are_split_capped_and_resynchronised() {
        let got = lines(b"abc\nthis line is too long\nok\nlast", 10).await;
        assert_eq!(
            got,
            vec![
                LineRead::Line(b"abc".to_vec()),
                LineRead::TooLong,
                LineRead::Line(b"ok".to_vec()),
                LineRead::Line(b"last".to_vec()),
            ]
        );
        assert_eq!(lines(b"", 10).await, vec![]);
        assert_eq!(lines(b"0123456789\n", 10).await, vec![LineRead::Line(b"0123456789".to_vec())]);
        assert_eq!(lines(b"01234567890", 10).await, vec![LineRead::TooLong]);
    }

    #[test]
    fn config_ranges() {
        assert!(HookConfig::default().validate().is_ok());
        assert!(
            HookConfig { mode: 0o1777, ..HookConfig::default() }
                .validate()
                .unwrap_err()
                .contains("hook.mode")
        );
        assert!(HookConfig { max_line_bytes: 10, ..HookConfig::default() }.validate().is_err());
    }
}
