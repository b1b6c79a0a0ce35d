//! The kernel log (`/dev/kmsg`): NVIDIA Xid errors and Linux OOM-killer kills.
//!
//! * [`parse_record`] splits one `/dev/kmsg` record (`priority,seq,ts_us,flags;message`); the
//!   continuation lines of a record (` KEY=value`) are ignored.
//! * [`KmsgParser`] turns messages into events: `NVRM: Xid (PCI:…): N, pid=…, name=…` → `xid`
//!   (GPU index through the [`PciMap`]); `Out of memory: Killed process N (comm) total-vm:…,
//!   anon-rss:…kB, file-rss:…kB, shmem-rss:…kB` (also the `Memory cgroup out of memory:` variant
//!   and the old two-line `Kill process … / Killed process …` form) → `host_oom_kill` with
//!   `host_rss_bytes` = anon + file + shmem RSS; the preceding `oom-kill:constraint=…,task_memcg=…`
//!   line adds the victim's cgroup as a label.
//! * [`kernel_message`] finds the kernel message in a line of kernel log *output* (dmesg,
//!   `dmesg -T`, `journalctl -k`, syslog, `/dev/kmsg` records), so `oomlens-agent parse` runs the
//!   same [`KmsgParser`] over saved kernel logs.
//! * [`KmsgReader`] reads records without blocking (`O_NONBLOCK`), starting at the end of the log
//!   (records from before the agent started are skipped), and survives `EPIPE` (the ring buffer
//!   overwrote unread records: counted, reading goes on). Any path can be read, so tests use
//!   fixture files in the record format.
//! * [`spawn_kmsg`] runs the reader as a task that sends events as readings until stopped.

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use oomlens_schema::{EventSource, Label, OomEvent, OomKind};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::detect::pci::PciMap;
use crate::metrics::AgentMetrics;
use crate::sampler::now_ms;
use crate::source::Reading;

/// Longest record kept (the kernel's own limit is 8 KiB with its dictionary).
pub const MAX_RECORD_BYTES: usize = 16 * 1024;
/// Most records handled per poll (the rest wait for the next poll).
pub const MAX_RECORDS_PER_POLL: usize = 10_000;

/// One `/dev/kmsg` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsgRecord<'a> {
    /// Syslog priority and facility (`facility << 3 | level`).
    pub priority: u32,
    /// Sequence number (gaps mean lost records).
    pub seq: u64,
    /// Microseconds since boot.
    pub ts_us: u64,
    /// The message text (escaped by the kernel: `\xNN` for non-printable bytes).
    pub message: &'a str,
}

/// Parses `priority,seq,ts_us,flags[,…];message`. `None` for continuation lines and junk.
pub fn parse_record(line: &str) -> Option<KmsgRecord<'_>> {
    let line = line.trim_end_matches(['\n', '\r']);
    let (header, message) = line.split_once(';')?;
    let mut fields = header.split(',');
    let priority = fields.next()?.parse().ok()?;
    let seq = fields.next()?.parse().ok()?;
    let ts_us = fields.next()?.parse().ok()?;
    Some(KmsgRecord { priority, seq, ts_us, message })
}

/// The kernel message in one line of kernel log output, whatever printed it: strips (repeatedly,
/// in any order) a `/dev/kmsg` record header (`4,123,456,-;`), a syslog priority (`<4>`), a
/// dmesg time in brackets (`[ 1234.567890]`, `dmesg -T`'s `[Wed May  1 12:00:00 2024]`) and a
/// journal / syslog prefix up to `kernel: ` (`May 01 12:00:00 host kernel: `). A line without
/// such a prefix is returned as it is (trimmed).
pub fn kernel_message(line: &str) -> &str {
    let mut s = line.trim_matches(['\n', '\r']).trim_start();
    for _ in 0..4 {
        let before = s.len();
        if let Some(r) = parse_record(s) {
            s = r.message;
        }
        if let Some(rest) = s.strip_prefix('<')
            && let Some((n, r)) = rest.split_once('>')
            && (1..=3).contains(&n.len())
            && n.bytes().all(|b| b.is_ascii_digit())
        {
            s = r;
        }
        if let Some(rest) = s.strip_prefix('[')
            && let Some(end) = rest.find(']')
            && end <= 40
            && rest[..end].contains(['.', ':'])
            && rest[..end].bytes().all(|b| b.is_ascii_alphanumeric() || b" .:+-".contains(&b))
        {
            s = &rest[end + 1..];
        }
        // `… host kernel: message` — only in a short prefix without brackets (a job's own text
        // mentioning "kernel: " further on is left alone).
        if let Some(i) = s.find("kernel: ")
            && i <= 120
            && (i == 0 || s.as_bytes()[i - 1] == b' ')
            && !s[..i].contains(['[', '(', ';'])
        {
            s = &s[i + "kernel: ".len()..];
        }
        s = s.trim_start();
        if s.len() == before {
            break;
        }
    }
    s
}

/// Turns kernel messages into events (without `event_id` and `ts_ms`, which the reader sets).
#[derive(Debug, Clone, Default)]
pub struct KmsgParser {
    pci: PciMap,
    /// `(pid, task_memcg)` of the last `oom-kill:` line, for the `Killed process` line after it.
    last_constraint: Option<(u32, String)>,
    /// `true` after a `Memory cgroup out of memory: Kill process` line (old two-line form).
    cgroup_pending: Option<u32>,
}

impl KmsgParser {
    /// A parser mapping Xid PCI addresses through `pci`.
    pub fn new(pci: PciMap) -> Self {
        KmsgParser { pci, last_constraint: None, cgroup_pending: None }
    }

    /// Parses one message (the text after `;`).
    pub fn parse_message(&mut self, message: &str) -> Option<OomEvent> {
        if let Some(pos) = message.find("NVRM: Xid (") {
            return self.xid(&message[pos..]);
        }
        if let Some(rest) = message.strip_prefix("oom-kill:") {
            let pid = kv(rest, "pid").and_then(|p| p.parse().ok());
            let memcg = kv(rest, "task_memcg").map(str::to_owned);
            self.last_constraint = pid.zip(memcg);
            return None;
        }
        if message.starts_with("Memory cgroup out of memory: Kill process ") {
            self.cgroup_pending = number_after(message, "Kill process ");
            return None;
        }
        let pos = message.find("Killed process ")?;
        if !message[pos..].contains("total-vm:") && !message[pos..].contains("anon-rss:") {
            return None;
        }
        self.oom_kill(message, pos)
    }

    fn xid(&self, text: &str) -> Option<OomEvent> {
        // NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, Ch 00000010, …
        let after = &text["NVRM: Xid (".len()..];
        let (addr, rest) = after.split_once("):")?;
        let rest = rest.trim_start();
        let digits: &str = &rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())];
        let xid: u32 = digits.parse().ok()?;
        let pid = kv(rest, "pid").and_then(|p| p.trim_matches('\'').parse().ok());
        let name = kv(rest, "name").filter(|n| !n.is_empty() && *n != "<unknown>");
        let mut labels =
            vec![Label { key: "gpu.pci_bus_id".into(), value: clip(addr.trim_start_matches("PCI:")) }];
        if let Some(n) = name {
            labels.push(Label { key: "process.name".into(), value: clip(n) });
        }
        Some(OomEvent {
            kind: OomKind::Xid,
            source: EventSource::Kmsg,
            framework: "kernel".into(),
            xid: Some(xid),
            pid,
            gpu_index: self.pci.index_of(addr),
            labels,
            raw_message: clip_raw(text),
            ..OomEvent::default()
        })
    }

    fn oom_kill(&mut self, message: &str, pos: usize) -> Option<OomEvent> {
        let body = &message[pos + "Killed process ".len()..];
        let pid: u32 = number_after(message, "Killed process ")?;
        let head = body.find(" total-vm:").map_or(body, |end| &body[..end]);
        let comm = head
            .split_once(" (")
            .and_then(|(_, r)| r.strip_suffix(')').or_else(|| r.split_once(") ").map(|(c, _)| c)));
        let rss: Vec<u64> =
            ["anon-rss:", "file-rss:", "shmem-rss:"].iter().filter_map(|k| kb_after(body, k)).collect();
        let cgroup =
            message.starts_with("Memory cgroup out of memory:") || self.cgroup_pending.take() == Some(pid);
        let mut labels =
            vec![Label { key: "oom.scope".into(), value: if cgroup { "cgroup" } else { "host" }.into() }];
        if let Some(c) = comm {
            labels.push(Label { key: "process.name".into(), value: clip(c) });
        }
        if let Some((p, memcg)) = self.last_constraint.take()
            && p == pid
        {
            labels.push(Label { key: "cgroup".into(), value: clip(&memcg) });
        }
        Some(OomEvent {
            kind: OomKind::HostOomKill,
            source: EventSource::Kmsg,
            framework: "kernel".into(),
            pid: Some(pid),
            host_rss_bytes: (!rss.is_empty()).then(|| rss.iter().sum::<u64>().saturating_mul(1024)),
            labels,
            raw_message: clip_raw(message),
            ..OomEvent::default()
        })
    }
}

/// `key=value` in a comma-separated list (value up to the next `,`).
fn kv<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split(',').find_map(|part| {
        let (k, v) = part.trim().split_once('=')?;
        (k == key).then(|| v.trim())
    })
}

/// The decimal number right after `marker`.
fn number_after<T: std::str::FromStr>(text: &str, marker: &str) -> Option<T> {
    let rest = &text[text.find(marker)? + marker.len()..];
    rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())].parse().ok()
}

/// `key:NNNkB` → NNN.
fn kb_after(text: &str, key: &str) -> Option<u64> {
    let rest = &text[text.find(key)? + key.len()..];
    let digits = &rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())];
    if !rest[digits.len()..].starts_with("kB") {
        return None;
    }
    digits.parse().ok()
}

fn clip(s: &str) -> String {
    clip_to(s, oomlens_schema::limits::MAX_STRING)
}

fn clip_raw(s: &str) -> String {
    clip_to(s, oomlens_schema::limits::MAX_RAW_MESSAGE)
}

fn clip_to(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// Why the kernel log cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum KmsgError {
    /// Opening failed.
    #[error("cannot read the kernel log {path}: {source}{hint}")]
    Open {
        /// Path.
        path: PathBuf,
        /// Error.
        source: std::io::Error,
        /// What is missing.
        hint: &'static str,
    },
}

/// Counters of one reader.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KmsgStats {
    /// Records read.
    pub records: u64,
    /// Times the ring buffer overwrote unread records (`EPIPE`) or sequence numbers jumped.
    pub overruns: u64,
    /// Lines that are not records (ignored).
    pub malformed: u64,
}

/// Reads kernel log records without blocking, from the end of the log at open.
#[derive(Debug)]
pub struct KmsgReader<R> {
    reader: BufReader<R>,
    partial: Vec<u8>,
    last_seq: Option<u64>,
    parser: KmsgParser,
    stats: KmsgStats,
}

impl KmsgReader<File> {
    /// Opens `path` non-blocking and seeks to its end (`/dev/kmsg` supports `SEEK_END`).
    pub fn open(path: &Path, pci: PciMap) -> Result<Self, KmsgError> {
        let open_err = |source: std::io::Error| {
            let hint = match source.kind() {
                ErrorKind::PermissionDenied => {
                    " (the agent needs CAP_SYSLOG or root to read /dev/kmsg when kernel.dmesg_restrict=1; \
                     in a container, run privileged or mount /dev/kmsg and add CAP_SYSLOG)"
                }
                ErrorKind::NotFound => " (no such device: in a container, mount the host's /dev/kmsg)",
                _ => "",
            };
            KmsgError::Open { path: path.to_owned(), source, hint }
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(open_err)?;
        file.seek(SeekFrom::End(0)).map_err(open_err)?;
        Ok(Self::from_reader(file, pci))
    }
}

impl<R: Read> KmsgReader<R> {
    /// Reads records from `reader` as they are (no seek).
    pub fn from_reader(reader: R, pci: PciMap) -> Self {
        KmsgReader {
            reader: BufReader::with_capacity(MAX_RECORD_BYTES, reader),
            partial: Vec::new(),
            last_seq: None,
            parser: KmsgParser::new(pci),
            stats: KmsgStats::default(),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> KmsgStats {
        self.stats
    }

    /// Reads every record available now (at most [`MAX_RECORDS_PER_POLL`]) and returns the events
    /// found, stamped `ts_ms` with fresh event ids. Read errors other than `EPIPE`/`EAGAIN` end
    /// this poll and are returned after the events found so far are kept in `out`.
    pub fn poll(&mut self, ts_ms: i64, out: &mut Vec<OomEvent>) -> std::io::Result<()> {
        for _ in 0..MAX_RECORDS_PER_POLL {
            let mut limited = (&mut self.reader)
                .take((MAX_RECORD_BYTES - self.partial.len().min(MAX_RECORD_BYTES)) as u64 + 1);
            match limited.read_until(b'\n', &mut self.partial) {
                Ok(0) => {
                    if self.partial.len() > MAX_RECORD_BYTES {
                        self.partial.clear();
                        self.stats.malformed += 1;
                    }
                    return Ok(());
                }
                Ok(_) if self.partial.last() != Some(&b'\n') && self.partial.len() <= MAX_RECORD_BYTES => {
                    // A record split across reads of a plain file: wait for the rest.
                    continue;
                }
                Ok(_) => {
                    let line = std::mem::take(&mut self.partial);
                    if line.len() > MAX_RECORD_BYTES {
                        self.stats.malformed += 1;
                        continue;
                    }
                    self.handle_line(&String::from_utf8_lossy(&line), ts_ms, out);
                }
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                    self.stats.overruns += 1;
                    self.partial.clear();
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn handle_line(&mut self, line: &str, ts_ms: i64, out: &mut Vec<OomEvent>) {
        if line.starts_with(' ') || line.trim().is_empty() {
            return; // continuation (dictionary) line of the previous record
        }
        let Some(rec) = parse_record(line) else {
            self.stats.malformed += 1;
            return;
        };
        self.stats.records += 1;
        if let Some(last) = self.last_seq
            && rec.seq > last + 1
        {
            self.stats.overruns += 1;
        }
        self.last_seq = Some(rec.seq);
        if let Some(mut e) = self.parser.parse_message(rec.message) {
            e.event_id = rand::random::<u64>() | 1;
            e.ts_ms = ts_ms;
            out.push(e);
        }
    }
}

/// `[kmsg]`: the kernel log.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KmsgConfig {
    /// Read the kernel log (when readable).
    pub enabled: bool,
    /// `/dev/kmsg`, or a file in its record format.
    pub path: PathBuf,
    /// Time between reads, ms.
    pub poll_interval_ms: u64,
}

impl Default for KmsgConfig {
    fn default() -> Self {
        KmsgConfig { enabled: true, path: PathBuf::from(DEV_KMSG), poll_interval_ms: 500 }
    }
}

impl KmsgConfig {
    /// Checks ranges.
    pub fn validate(&self) -> Result<(), String> {
        if self.enabled && self.poll_interval_ms == 0 {
            return Err("kmsg.poll_interval_ms must be > 0".into());
        }
        Ok(())
    }
}

/// The kernel's log device.
pub const DEV_KMSG: &str = "/dev/kmsg";

/// Task settings.
#[derive(Debug, Clone, PartialEq)]
pub struct KmsgOptions {
    /// `/dev/kmsg` or a file in its record format.
    pub path: PathBuf,
    /// Time between polls.
    pub poll_interval: Duration,
    /// PCI address → GPU index.
    pub pci: PciMap,
}

/// Starts the kernel log reader per `[kmsg]` (`None` when disabled or unreadable). With the
/// simulator as source the host's `/dev/kmsg` is not read (the simulator plays its own kernel);
/// a different `path` (a fixture) still is. On a real node the PCI map comes from the driver's
/// `/proc/driver/nvidia/gpus/*/information` joined with the NVML inventory.
pub fn spawn_configured(
    cfg: &KmsgConfig,
    simulated: bool,
    inventory: &[oomlens_schema::GpuInfo],
    tx: mpsc::Sender<Reading>,
    stop: watch::Receiver<bool>,
    metrics: Arc<AgentMetrics>,
) -> Option<tokio::task::JoinHandle<()>> {
    if !cfg.enabled {
        return None;
    }
    if simulated && cfg.path == Path::new(DEV_KMSG) {
        info!("simulator source: the host's kernel log is not read");
        return None;
    }
    let pci = if simulated { PciMap::default() } else { PciMap::from_procfs(Path::new("/proc"), inventory) };
    let opts = KmsgOptions {
        path: cfg.path.clone(),
        poll_interval: Duration::from_millis(cfg.poll_interval_ms),
        pci,
    };
    spawn_kmsg(opts, tx, stop, metrics)
}

/// Opens the kernel log and runs a task that sends its events as readings until `stop` turns
/// true (then drops `tx`). Not readable → one warning, `kmsg_unreadable` = 1, and no task.
pub fn spawn_kmsg(
    opts: KmsgOptions,
    tx: mpsc::Sender<Reading>,
    mut stop: watch::Receiver<bool>,
    metrics: Arc<AgentMetrics>,
) -> Option<tokio::task::JoinHandle<()>> {
    let mut reader = match KmsgReader::open(&opts.path, opts.pci.clone()) {
        Ok(r) => r,
        Err(e) => {
            warn!(error = %e, "kernel log not readable: Xid errors and host OOM kills will not be reported");
            metrics.kmsg_unreadable.set(1);
            return None;
        }
    };
    metrics.kmsg_unreadable.set(0);
    info!(path = %opts.path.display(), gpus_mapped = opts.pci.len(), "following the kernel log");
    Some(tokio::spawn(async move {
        let mut seen = KmsgStats::default();
        loop {
            if *stop.borrow() {
                break;
            }
            let res = tokio::task::spawn_blocking(move || {
                let mut events = Vec::new();
                let res = reader.poll(now_ms(), &mut events);
                (reader, events, res)
            })
            .await;
            let Ok((r, events, res)) = res else { break };
            reader = r;
            let stats = reader.stats();
            metrics.kmsg_overruns.inc_by(stats.overruns - seen.overruns);
            seen = stats;
            if let Err(e) = res {
                warn!(error = %e, "kernel log read failed; stopping the kernel log reader");
                metrics.kmsg_unreadable.set(1);
                send_all(&tx, events).await;
                break;
            }
            if !send_all(&tx, events).await {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(opts.poll_interval) => {}
                r = stop.changed() => if r.is_err() { break },
            }
        }
    }))
}

/// Sends each event as its own reading; false when the batcher is gone.
pub(crate) async fn send_all(tx: &mpsc::Sender<Reading>, events: Vec<OomEvent>) -> bool {
    for e in events {
        if tx.send(Reading { events: vec![e], ..Reading::default() }).await.is_err() {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(messages: &[&str]) -> Vec<OomEvent> {
        let mut p = KmsgParser::new(PciMap::from_pairs([("0000:3b:00.0", 2)]));
        messages.iter().filter_map(|m| p.parse_message(m)).collect()
    }

    fn label<'a>(e: &'a OomEvent, key: &str) -> Option<&'a str> {
        e.labels.iter().find(|l| l.key == key).map(|l| l.value.as_str())
    }

    #[test]
    fn kernel_messages_are_found_behind_every_tool_prefix() {
        let msg = "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python";
        for line in [
            msg.to_owned(),
            format!("[ 1234.567890] {msg}"),
            format!("[Wed May  1 12:00:00 2024] {msg}"),
            format!("<4>[ 1234.567890] {msg}"),
            format!("<4>{msg}"),
            format!("4,123,456,-;{msg}"),
            format!("May 01 12:00:00 gpu-node-1 kernel: {msg}"),
            format!("2024-05-01T12:00:00.123456+00:00 gpu-node-1 kernel: {msg}\r\n"),
            format!("[ 1234.567890] gpu-node-1 kernel: {msg}"),
        ] {
            assert_eq!(kernel_message(&line), msg, "{line:?}");
        }
        // Not a prefix: left alone.
        assert_eq!(
            kernel_message("[rank0]: RuntimeError: x (kernel: y)"),
            "[rank0]: RuntimeError: x (kernel: y)"
        );
        // The parser then sees exactly what /dev/kmsg would have given it.
        let mut p = KmsgParser::default();
        let e = p
            .parse_message(kernel_message(
                "[ 9.1] Memory cgroup out of memory: Killed process 7 (python) total-vm:10kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
            ))
            .unwrap();
        assert_eq!((e.kind, e.pid, label(&e, "oom.scope")), (OomKind::HostOomKill, Some(7), Some("cgroup")));
    }

    #[test]
    fn records_are_split_and_junk_is_refused() {
        let r = parse_record("4,1523,8476329111,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=1\n").unwrap();
        assert_eq!((r.priority, r.seq, r.ts_us), (4, 1523, 8_476_329_111));
        assert_eq!(r.message, "NVRM: Xid (PCI:0000:3b:00): 31, pid=1");
        assert_eq!(parse_record("6,2,3,c,extra;msg").unwrap().message, "msg");
        assert_eq!(parse_record("6,2,3;").unwrap().message, "");
        for bad in ["", " SUBSYSTEM=pci", "no header", "x,1,2,-;m", "6,1;m", "6,-1,2,-;m"] {
            assert_eq!(parse_record(bad), None, "{bad}");
        }
    }

    #[test]
    fn xid_lines_of_every_driver_generation() {
        let ev = parse(&[
            "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, Ch 00000010, intr 10000000. MMU Fault: \
             ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
            "NVRM: Xid (PCI:0000:af:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            "NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
            "NVRM: Xid (0000:3b:00): 48, pid=77, name=pt_main_thread, An uncorrectable double bit error (DBE) has been detected",
            "NVRM: GPU at PCI:0000:3b:00: GPU-8c3e7e4b-1d2c-4a2b-9d4f-0b5c6d7e8f90",
            "NVRM: Xid (PCI:0000:3b:00): notanumber",
        ]);
        assert_eq!(ev.len(), 4);
        let e = &ev[0];
        assert_eq!((e.kind, e.source, e.framework.as_str()), (OomKind::Xid, EventSource::Kmsg, "kernel"));
        assert_eq!((e.xid, e.pid, e.gpu_index), (Some(31), Some(1234), Some(2)));
        assert_eq!(label(e, "process.name"), Some("python"));
        assert_eq!(label(e, "gpu.pci_bus_id"), Some("0000:3b:00"));
        assert!(e.raw_message.starts_with("NVRM: Xid (PCI:0000:3b:00): 31"));
        assert_eq!((ev[1].xid, ev[1].pid, ev[1].gpu_index), (Some(79), None, None));
        assert_eq!(label(&ev[1], "process.name"), None);
        assert_eq!((ev[2].xid, ev[2].pid, ev[2].gpu_index), (Some(13), None, Some(2)));
        assert_eq!((ev[3].xid, ev[3].pid, ev[3].gpu_index), (Some(48), Some(77), Some(2)));
    }

    #[test]
    fn oom_killer_lines_modern_cgroup_and_old() {
        let ev = parse(&[
            "python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=936",
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri-containerd-9f1.scope,mems_allowed=0-1,\
             oom_memcg=/kubepods.slice/kubepods-burstable-podab12.slice,task_memcg=/kubepods.slice/\
             kubepods-burstable-podab12.slice/cri-containerd-9f1.scope,task=python,pid=4242,uid=1000",
            "Memory cgroup out of memory: Killed process 4242 (python) total-vm:123456kB, anon-rss:65432kB, \
             file-rss:1234kB, shmem-rss:10kB, UID:1000 pgtables:2048kB oom_score_adj:936",
            "oom_reaper: reaped process 4242 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
            "Out of memory: Killed process 12345 (pt_main_thread) total-vm:98765432kB, anon-rss:50000000kB, \
             file-rss:100kB, shmem-rss:0kB, UID:0 pgtables:150000kB oom_score_adj:0",
            "Out of memory: Kill process 9999 (java) score 903 or sacrifice child",
            "Killed process 9999 (java) total-vm:20000000kB, anon-rss:15000000kB, file-rss:0kB, shmem-rss:0kB",
            "Memory cgroup out of memory: Kill process 8888 (python3) score 1000 or sacrifice child",
            "Killed process 8888 (python3) total-vm:2000kB, anon-rss:1000kB, file-rss:24kB",
            "Killed process 7 (x) with no numbers",
        ]);
        assert_eq!(ev.len(), 4, "{ev:#?}");
        let e = &ev[0];
        assert_eq!(
            (e.kind, e.source, e.framework.as_str()),
            (OomKind::HostOomKill, EventSource::Kmsg, "kernel")
        );
        assert_eq!((e.pid, e.host_rss_bytes), (Some(4242), Some((65432 + 1234 + 10) * 1024)));
        assert_eq!(label(e, "oom.scope"), Some("cgroup"));
        assert_eq!(label(e, "process.name"), Some("python"));
        assert!(label(e, "cgroup").unwrap().ends_with("cri-containerd-9f1.scope"));
        assert_eq!((ev[1].pid, ev[1].host_rss_bytes), (Some(12345), Some(50_000_100 * 1024)));
        assert_eq!(label(&ev[1], "oom.scope"), Some("host"));
        assert_eq!(label(&ev[1], "cgroup"), None);
        assert_eq!(label(&ev[1], "process.name"), Some("pt_main_thread"));
        assert_eq!((ev[2].pid, ev[2].host_rss_bytes), (Some(9999), Some(15_000_000 * 1024)));
        assert_eq!(label(&ev[2], "oom.scope"), Some("host"));
        assert_eq!((ev[3].pid, ev[3].host_rss_bytes), (Some(8888), Some(1024 * 1024)));
        assert_eq!(label(&ev[3], "oom.scope"), Some("cgroup"));
        assert_eq!(label(&ev[3], "process.name"), Some("python3"));
    }

    /// A reader that fails with `EPIPE` once, as `/dev/kmsg` does after a ring-buffer overrun.
    struct Overrun {
        chunks: Vec<std::io::Result<Vec<u8>>>,
    }

    impl Read for Overrun {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.chunks.is_empty() {
                return Err(ErrorKind::WouldBlock.into());
            }
            let chunk = self.chunks.remove(0)?;
            buf[..chunk.len()].copy_from_slice(&chunk);
            Ok(chunk.len())
        }
    }

    #[test]
    fn epipe_and_sequence_gaps_are_counted_and_reading_goes_on() {
        let rec = |seq: u64, msg: &str| Ok(format!("3,{seq},1000,-;{msg}\n").into_bytes());
        let kill =
            "Out of memory: Killed process 5 (a) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB";
        let mut r = KmsgReader::from_reader(
            Overrun {
                chunks: vec![
                    rec(1, "hello"),
                    Err(std::io::Error::from_raw_os_error(libc::EPIPE)),
                    rec(40, kill),
                    Ok(b" SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n".to_vec()),
                    rec(41, "NVRM: Xid (PCI:0000:3b:00): 31, pid=9, name=p, Ch 1"),
                ],
            },
            PciMap::default(),
        );
        let mut out = Vec::new();
        r.poll(5, &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|e| e.ts_ms == 5 && e.event_id != 0));
        assert_eq!(out[0].kind, OomKind::HostOomKill);
        assert_eq!(out[1].kind, OomKind::Xid);
        let s = r.stats();
        assert_eq!((s.records, s.overruns, s.malformed), (3, 2, 0));
    }

    #[test]
    fn open_skips_old_records_and_reads_appended_ones_even_split() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg");
        let old = "3,1,1,-;Out of memory: Killed process 1 (old) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB\n";
        std::fs::write(&path, old).unwrap();
        let mut r = KmsgReader::open(&path, PciMap::default()).unwrap();
        let mut out = Vec::new();
        r.poll(1, &mut out).unwrap();
        assert!(out.is_empty());
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"3,2,2,-;Out of memory: Killed process 2 (new) total-vm:1kB, anon-").unwrap();
        r.poll(2, &mut out).unwrap();
        assert!(out.is_empty());
        f.write_all(b"rss:2kB, file-rss:0kB, shmem-rss:0kB\nnot a record\n").unwrap();
        r.poll(3, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].pid, out[0].host_rss_bytes, out[0].ts_ms), (Some(2), Some(2048), 3));
        assert_eq!(r.stats().malformed, 1);
        let err = KmsgReader::open(&dir.path().join("missing"), PciMap::default()).unwrap_err();
        assert!(err.to_string().contains("mount the host's /dev/kmsg"), "{err}");
    }

    #[test]
    fn overlong_records_are_dropped_not_buffered_forever() {
        let mut data = vec![b'x'; MAX_RECORD_BYTES * 3];
        data.extend_from_slice(b"\n3,2,2,-;NVRM: Xid (PCI:0000:3b:00): 43, pid=3, name=p, Ch 1\n");
        let mut r = KmsgReader::from_reader(std::io::Cursor::new(data), PciMap::default());
        let mut out = Vec::new();
        r.poll(1, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert!(r.stats().malformed >= 1);
    }
}
