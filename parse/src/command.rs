//! `oomlens-agent parse [FILE…]`: reads job logs and kernel logs (or stdin), prints the OOM events
//! found — a human summary per event, or one JSON object per event per line (`--json`).
//!
//! Lines go through the [`MixedParser`]: job-log messages through the job-log parser, kernel log
//! lines — as dmesg, `journalctl -k`, syslog or `/dev/kmsg` print them, any prefix — through the
//! agent's own kernel parser, giving `xid` and `host_oom_kill` events with framework `kernel`. Offline,
//! the PCI address of an Xid cannot be mapped to a GPU index (that needs the node's driver and
//! NVML inventory), so their `gpu_index` is `null`; the address is in the printed line.
//!
//! Input is read as bytes (invalid UTF-8 is replaced, never fatal) through the [`LineDecoder`]
//! of the chosen [`LineFormat`]; a physical line longer than [`MAX_READ_LINE`] is cut (the rest up
//! to the newline is skipped), so any input is read in bounded memory. An unreadable file is an
//! error naming the file; a file without events is not.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use super::{LineDecoder, LineFormat, ParsedOom};
use crate::mixed::MixedParser;

/// Longest physical line read (the rest of a longer line is skipped).
pub const MAX_READ_LINE: usize = 256 * 1024;

/// Why `parse` failed.
#[derive(Debug, thiserror::Error)]
pub enum ParseCommandError {
    /// A file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file (`-` for stdin).
        path: PathBuf,
        /// The I/O error from opening or reading it.
        #[source]
        source: std::io::Error,
    },
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Write(#[source] std::io::Error),
}

/// Reads one physical line (without the newline) into `buf`, keeping at most [`MAX_READ_LINE`]
/// bytes. `Ok(false)` at end of input.
fn read_line_bounded(r: &mut dyn BufRead, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    buf.clear();
    let mut any = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(any);
        }
        any = true;
        let (part, used, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (&chunk[..i], i + 1, true),
            None => (chunk, chunk.len(), false),
        };
        let room = MAX_READ_LINE.saturating_sub(buf.len());
        buf.extend_from_slice(&part[..part.len().min(room)]);
        r.consume(used);
        if done {
            return Ok(true);
        }
    }
}

/// Parses everything `r` yields; calls `emit` for each event.
pub fn parse_reader(
    r: &mut dyn BufRead,
    format: LineFormat,
    emit: &mut dyn FnMut(ParsedOom) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut decoder = LineDecoder::new(format);
    let mut parser = MixedParser::new();
    let mut buf = Vec::new();
    while read_line_bounded(r, &mut buf)? {
        let raw = String::from_utf8_lossy(&buf);
        if let Some(line) = decoder.push(&raw) {
            for e in parser.feed_numbered_line(decoder.line_start(), &line) {
                emit(e)?;
            }
        }
    }
    for (number, line) in decoder.finish() {
        for e in parser.feed_numbered_line(number, &line) {
            emit(e)?;
        }
    }
    for e in parser.finish() {
        emit(e)?;
    }
    Ok(())
}

/// Runs the command over `files` (stdin when empty); returns the number of events printed.
pub fn run(
    files: &[PathBuf],
    format: LineFormat,
    json: bool,
    out: &mut dyn Write,
) -> Result<u64, ParseCommandError> {
    let mut count = 0u64;
    let many = files.len() > 1;
    let mut one = |path: &Path, r: &mut dyn BufRead, out: &mut dyn Write| -> Result<(), ParseCommandError> {
        let mut write_err = None;
        let mut emit = |e: ParsedOom| -> std::io::Result<()> {
            count += 1;
            let res = if json {
                writeln!(out, "{}", e.to_json())
            } else if many {
                writeln!(out, "{}: {}\n", path.display(), e.summary())
            } else {
                writeln!(out, "{}\n", e.summary())
            };
            res.map_err(|err| {
                let kind = err.kind();
                write_err = Some(err);
                std::io::Error::from(kind)
            })
        };
        let res = parse_reader(r, format, &mut emit);
        if let Some(e) = write_err {
            return Err(ParseCommandError::Write(e));
        }
        res.map_err(|source| ParseCommandError::Read { path: path.to_path_buf(), source })
    };
    if files.is_empty() {
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        one(Path::new("-"), &mut lock, out)?;
    } else {
        for path in files {
            let file = std::fs::File::open(path)
                .map_err(|source| ParseCommandError::Read { path: path.clone(), source })?;
            let mut r = std::io::BufReader::new(file);
            one(path, &mut r, out)?;
        }
    }
    out.flush().map_err(ParseCommandError::Write)?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lines_and_invalid_utf8() {
        let mut data = vec![b'a'; MAX_READ_LINE + 10];
        data.extend_from_slice(b"\n\xffRuntimeError: CUDA error: out of memory\nlast");
        let mut r = std::io::Cursor::new(data);
        let mut buf = Vec::new();
        assert!(read_line_bounded(&mut r, &mut buf).unwrap());
        assert_eq!(buf.len(), MAX_READ_LINE);
        assert!(read_line_bounded(&mut r, &mut buf).unwrap());
        assert!(buf.ends_with(b"out of memory"));
        assert!(read_line_bounded(&mut r, &mut buf).unwrap());
        assert_eq!(buf, b"last");
        assert!(!read_line_bounded(&mut r, &mut buf).unwrap());
    }

    #[test]
    fn kernel_lines_and_job_messages_in_one_input() {
        let input = "\
[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, Ch 00000008\n\
RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity)\n\
epoch 3\n\
<3>[ 99.5] Out of memory: Killed process 77 (python) total-vm:10kB, anon-rss:8kB, file-rss:0kB, shmem-rss:0kB\n";
        let mut got = Vec::new();
        parse_reader(&mut std::io::Cursor::new(input), LineFormat::Auto, &mut |e| {
            got.push((e.kind, e.framework, e.fields.pid, e.xid, e.line));
            Ok(())
        })
        .unwrap();
        got.sort_by_key(|g| g.4);
        use oomlens_schema::OomKind;
        assert_eq!(
            got,
            vec![
                (OomKind::Xid, "kernel", Some(1234), Some(31), 1),
                (OomKind::CudaOom, "pytorch", None, None, 2),
                (OomKind::HostOomKill, "kernel", Some(77), None, 4),
            ]
        );
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let mut out = Vec::new();
        let err = run(&[PathBuf::from("/nonexistent/x.log")], LineFormat::Auto, true, &mut out).unwrap_err();
        assert!(err.to_string().starts_with("cannot read /nonexistent/x.log: "), "{err}");
    }
}
