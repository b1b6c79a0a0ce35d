//! The kernel log (`/dev/kmsg`) read live: [`KmsgReader`] reads records without blocking
//! (`O_NONBLOCK`), starting at the end of the log (records from before the agent started are
//! skipped), and survives `EPIPE` (the ring buffer overwrote unread records: counted, reading goes
//! on); each record's message goes through the shared [`KmsgParser`] (`oomlens_parse::kernel`:
//! Xid errors, OOM-killer kills). Any path can be read, so tests use fixture files in the record
//! format; a line of kernel log text in such a file (`dmesg`'s `[ 8123.456789] …`) is read as the
//! message after its prefix. [`spawn_kmsg`] runs the reader as a task that sends events as
//! readings until stopped.

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use oomlens_schema::OomEvent;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

pub use oomlens_parse::kernel::{
    KmsgParser, KmsgRecord, MAX_RECORD_BYTES, MAX_RECORDS_PER_POLL, kernel_message, parse_record,
};
use oomlens_parse::pci::PciMap;

use crate::metrics::AgentMetrics;
use crate::source::Reading;
use oomlens_schema::text::now_ms;

/// Why the kernel log cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum KmsgError {
    /// Opening failed.
    #[error("cannot read the kernel log {path}: {source}{hint}")]
    Open {
        /// The kernel log device that could not be opened (normally `/dev/kmsg`).
        path: PathBuf,
        /// The I/O error from opening or seeking it.
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
    /// Records too long to be a kernel record (dropped).
    pub malformed: u64,
    /// Lines of kernel log text rather than records (`dmesg`'s, a journal's): read as the
    /// kernel's message after their prefix (a file given as `kmsg.path`, never `/dev/kmsg`).
    pub text_lines: u64,
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
            self.stats.text_lines += 1;
            if let Some(e) = self.parser.parse_message(kernel_message(line)) {
                self.push(e, ts_ms, out);
            }
            return;
        };
        self.stats.records += 1;
        if let Some(last) = self.last_seq
            && rec.seq > last + 1
        {
            self.stats.overruns += 1;
        }
        self.last_seq = Some(rec.seq);
        if let Some(e) = self.parser.parse_message(rec.message) {
            self.push(e, ts_ms, out);
        }
    }

    fn push(&self, mut e: OomEvent, ts_ms: i64, out: &mut Vec<OomEvent>) {
        e.event_id = rand::random::<u64>() | 1;
        e.ts_ms = ts_ms;
        out.push(e);
    }
}

/// `[kmsg]`: the kernel log.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KmsgConfig {
    /// Read the kernel log (when readable).
    pub enabled: bool,
    /// `/dev/kmsg`, or a file in its record format or of kernel log text (`dmesg`'s lines), read
    /// from its end (syslog's rotated `kern.log` belongs in `logs.paths`).
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
    use oomlens_schema::OomKind;

    use super::*;

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
        assert_eq!((r.stats().records, r.stats().text_lines, r.stats().malformed), (1, 1, 0));
        // Kernel log text in the file (dmesg's time, syslog's prefix) is read as the kernel's
        // message.
        f.write_all(
            b"[ 8123.456789] Out of memory: Killed process 7 (python) total-vm:9kB, anon-rss:4kB, file-rss:0kB\n\
              May 01 12:00:00 gpu7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n",
        )
        .unwrap();
        r.poll(4, &mut out).unwrap();
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!((out[1].pid, out[1].host_rss_bytes), (Some(7), Some(4096)));
        assert_eq!(out[2].xid, Some(79));
        assert_eq!(r.stats().text_lines, 3);
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
