//! Container log line formats: turns one physical line of a log file into the text the job printed.
//!
//! * [`LineFormat::Plain`] — the line is the text.
//! * [`LineFormat::Cri`] — Kubernetes/CRI: `2024-05-01T12:00:00.123456789Z stderr F message`; a `P`
//!   (partial) line is continued by the following lines up to the next `F` line.
//! * [`LineFormat::DockerJson`] — Docker's json-file driver:
//!   `{"log":"message\n","stream":"stderr","time":"…"}`; an entry whose `log` does not end in `\n`
//!   is a partial line (Docker splits lines longer than 16 KiB).
//! * [`LineFormat::Auto`] — CRI or Docker when the line is one, else plain.
//!
//! [`line_time_ms`] reads the time the container runtime stamped on a line (CRI's prefix, Docker's
//! `"time"`), so an event's time is when the job printed it, not when the agent read it.
//!
//! [`decode_line`] decodes one physical line on its own (a partial fragment comes back as the
//! fragment). [`LineDecoder`] is the stateful form a log follower uses: it joins partial fragments
//! with the line that completes them (bounded by [`MAX_JOINED_BYTES`]), and passes lines that are
//! not in the expected format through unchanged (counted), so nothing is lost.

/// Most bytes of one joined (partial + final) line that are kept; the rest is dropped and counted.
pub const MAX_JOINED_BYTES: usize = 64 * 1024;

/// How the lines of a log file are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineFormat {
    /// Plain text (Slurm output, files a job writes itself).
    Plain,
    /// CRI (containerd, CRI-O): `/var/log/pods/**/*.log`.
    Cri,
    /// Docker json-file: `/var/lib/docker/containers/*/*-json.log`.
    #[serde(alias = "docker")]
    DockerJson,
    /// Detect per line.
    #[default]
    Auto,
}

impl std::str::FromStr for LineFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "plain" => Ok(LineFormat::Plain),
            "cri" => Ok(LineFormat::Cri),
            "docker" | "docker_json" | "docker-json" => Ok(LineFormat::DockerJson),
            "auto" => Ok(LineFormat::Auto),
            other => Err(format!("unknown line format {other:?} (expected plain, cri, docker or auto)")),
        }
    }
}

/// One decoded physical line: the text, and whether it is only the start of a longer line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decoded {
    text: String,
    partial: bool,
    /// 0 stdout (and plain), 1 stderr: partial lines are joined per stream.
    stream: usize,
}

fn strip_eol(s: &str) -> &str {
    let s = s.strip_suffix('\n').unwrap_or(s);
    s.strip_suffix('\r').unwrap_or(s)
}

fn cri(raw: &str) -> Option<Decoded> {
    let raw = strip_eol(raw);
    let (ts, rest) = raw.split_once(' ')?;
    let tb = ts.as_bytes();
    if tb.len() < 20 || !tb[..4].iter().all(u8::is_ascii_digit) || tb[4] != b'-' || tb[10] != b'T' {
        return None;
    }
    let (stream, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let stream = match stream {
        "stdout" => 0,
        "stderr" => 1,
        _ => return None,
    };
    let (tags, msg) = rest.split_once(' ').unwrap_or((rest, ""));
    let partial = match tags.split(':').next() {
        Some("P") => true,
        Some("F") => false,
        _ => return None,
    };
    Some(Decoded { text: msg.to_owned(), partial, stream })
}

#[derive(serde::Deserialize)]
struct DockerLine {
    log: String,
    #[serde(default)]
    stream: String,
}

fn docker(raw: &str) -> Option<Decoded> {
    let raw = strip_eol(raw);
    if !raw.starts_with('{') {
        return None;
    }
    let line: DockerLine = serde_json::from_str(raw).ok()?;
    let partial = !line.log.ends_with('\n');
    let stream = usize::from(line.stream == "stderr");
    Some(Decoded { text: strip_eol(&line.log).to_owned(), partial, stream })
}

fn decode(format: LineFormat, raw: &str) -> Option<Decoded> {
    match format {
        LineFormat::Plain => Some(plain(raw)),
        LineFormat::Cri => cri(raw),
        LineFormat::DockerJson => docker(raw),
        LineFormat::Auto => cri(raw).or_else(|| docker(raw)).or_else(|| Some(plain(raw))),
    }
}

fn plain(raw: &str) -> Decoded {
    Decoded { text: strip_eol(raw).to_owned(), partial: false, stream: 0 }
}

/// The text of one physical line in `format` (a partial fragment is returned as it is; use
/// [`LineDecoder`] to join fragments). `None` when the line is not in `format` (never for
/// `Plain` and `Auto`).
pub fn decode_line(format: LineFormat, raw: &str) -> Option<String> {
    decode(format, raw).map(|d| d.text)
}

/// The time (Unix epoch ms) the runtime stamped on one physical line: the RFC 3339 prefix of a CRI
/// line, the `"time"` of a Docker json-file line; `None` for plain text (or `format` `Plain`), or
/// a time that does not parse.
pub fn line_time_ms(format: LineFormat, raw: &str) -> Option<i64> {
    let raw = strip_eol(raw);
    let cri = || {
        let (ts, rest) = raw.split_once(' ')?;
        if !(rest.starts_with("stdout ") || rest.starts_with("stderr ")) {
            return None;
        }
        rfc3339_ms(ts)
    };
    let docker = || {
        if !(raw.starts_with('{') && raw.ends_with('}')) {
            return None;
        }
        // `"time"` is the last key Docker writes; a `"time":"` inside the message is escaped.
        let key = "\"time\":\"";
        let rest = &raw[raw.rfind(key)? + key.len()..];
        rfc3339_ms(&rest[..rest.find('"')?])
    };
    match format {
        LineFormat::Plain => None,
        LineFormat::Cri => cri(),
        LineFormat::DockerJson => docker(),
        LineFormat::Auto => cri().or_else(docker),
    }
}

/// An RFC 3339 time (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`) → Unix epoch ms (the fraction
/// truncated to ms); `None` when it does not parse.
pub fn rfc3339_ms(s: &str) -> Option<i64> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000)).ok()
}

/// Decodes a stream of physical lines, joining partial fragments (per stream: a CRI `P` line of
/// stderr is completed by the next stderr line, whatever stdout printed in between). See the
/// module docs.
#[derive(Debug)]
pub struct LineDecoder {
    format: LineFormat,
    /// Per stream: the physical line number where the fragment began, and its text.
    partial: [Option<(u64, String)>; 2],
    physical: u64,
    start: u64,
    undecodable: u64,
    truncated_bytes: u64,
}

impl LineDecoder {
    /// A decoder for `format`.
    pub fn new(format: LineFormat) -> Self {
        LineDecoder {
            format,
            partial: [None, None],
            physical: 0,
            start: 0,
            undecodable: 0,
            truncated_bytes: 0,
        }
    }

    /// Feeds one physical line; returns the complete logical line when this one completes it.
    pub fn push(&mut self, raw: &str) -> Option<String> {
        self.physical += 1;
        let d = match decode(self.format, raw) {
            Some(d) => d,
            None => {
                self.undecodable += 1;
                plain(raw)
            }
        };
        let (start, joined) = match self.partial[d.stream].take() {
            Some((start, mut head)) => {
                let room = MAX_JOINED_BYTES.saturating_sub(head.len());
                push_bounded(&mut head, &d.text, room, &mut self.truncated_bytes);
                (start, head)
            }
            None => {
                let mut s = String::new();
                push_bounded(&mut s, &d.text, MAX_JOINED_BYTES, &mut self.truncated_bytes);
                (self.physical, s)
            }
        };
        if d.partial {
            self.partial[d.stream] = Some((start, joined));
            None
        } else {
            self.start = start;
            Some(joined)
        }
    }

    /// The fragments still waiting for their final part (end of input), oldest first.
    pub fn finish(&mut self) -> Vec<(u64, String)> {
        let mut rest: Vec<(u64, String)> = self.partial.iter_mut().filter_map(Option::take).collect();
        rest.sort_by_key(|(n, _)| *n);
        rest
    }

    /// Physical line number (1-based) where the oldest fragment still waiting for its final part
    /// began.
    pub fn earliest_partial(&self) -> Option<u64> {
        self.partial.iter().flatten().map(|(n, _)| *n).min()
    }

    /// Physical line number (1-based) where the line last returned by [`Self::push`] began.
    pub fn line_start(&self) -> u64 {
        self.start
    }

    /// Lines that were not in the decoder's format (passed through as plain text).
    pub fn undecodable(&self) -> u64 {
        self.undecodable
    }

    /// Bytes dropped because a joined line exceeded [`MAX_JOINED_BYTES`].
    pub fn truncated_bytes(&self) -> u64 {
        self.truncated_bytes
    }
}

fn push_bounded(out: &mut String, text: &str, room: usize, dropped: &mut u64) {
    let kept = oomlens_schema::text::clip(text, room);
    out.push_str(kept);
    *dropped += (text.len() - kept.len()) as u64;
}

#[cfg(test)]
mod time_tests {
    use super::*;

    #[test]
    fn runtime_timestamps_are_read_from_cri_and_docker_lines() {
        // 2024-05-01T12:00:00Z = 1714564800 s.
        let cri = "2024-05-01T12:00:00.123456789Z stderr F torch.OutOfMemoryError: CUDA out of memory.";
        assert_eq!(line_time_ms(LineFormat::Auto, cri), Some(1_714_564_800_123));
        assert_eq!(line_time_ms(LineFormat::Cri, cri), Some(1_714_564_800_123));
        assert_eq!(line_time_ms(LineFormat::Plain, cri), None);
        let docker = r#"{"log":"RuntimeError: CUDA out of memory \"time\":\"x\"\n","stream":"stderr","time":"2024-05-01T12:00:01.5+02:00"}"#;
        assert_eq!(line_time_ms(LineFormat::Auto, docker), Some(1_714_564_801_500 - 7_200_000));
        assert_eq!(line_time_ms(LineFormat::DockerJson, docker), Some(1_714_564_801_500 - 7_200_000));
        assert_eq!(line_time_ms(LineFormat::Cri, docker), None);
        for plain in ["RuntimeError: CUDA out of memory", "2024-05-01 12:00:00 INFO x", "", "{}"] {
            assert_eq!(line_time_ms(LineFormat::Auto, plain), None, "{plain:?}");
        }
        assert_eq!(rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_ms("2000-02-29T23:59:59.999-00:30"), Some(951_868_799_999 + 1_800_000));
        for bad in [
            "2024-13-01T00:00:00Z",
            "2024-05-01T00:00:00",
            "2024-05-01T00:00:00.Z",
            "nonsense-but-long-enough",
        ] {
            assert_eq!(rfc3339_ms(bad), None, "{bad}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cri_lines() {
        let f = LineFormat::Cri;
        assert_eq!(
            decode_line(f, "2024-05-01T12:00:00.123456789Z stderr F hello world\n").as_deref(),
            Some("hello world")
        );
        assert_eq!(decode_line(f, "2024-05-01T12:00:00.123456789Z stdout F ").as_deref(), Some(""));
        assert_eq!(decode_line(f, "2024-05-01T12:00:00.123456789Z stdout F").as_deref(), Some(""));
        assert_eq!(decode_line(f, "hello"), None);
        assert_eq!(decode_line(f, "2024-05-01T12:00:00Z stdin F x"), None);
        let mut d = LineDecoder::new(f);
        assert_eq!(d.push("2024-05-01T12:00:00.1Z stderr P torch.OutOfMemoryError: CUDA out"), None);
        assert_eq!(d.push("2024-05-01T12:00:00.1Z stderr P  of mem"), None);
        assert_eq!(d.push("2024-05-01T12:00:00.1Z stdout F step 3").as_deref(), Some("step 3"));
        assert_eq!(d.line_start(), 3);
        assert_eq!(
            d.push("2024-05-01T12:00:00.1Z stderr F ory.").as_deref(),
            Some("torch.OutOfMemoryError: CUDA out of memory.")
        );
        assert_eq!(d.line_start(), 1);
        assert_eq!(d.push("garbage").as_deref(), Some("garbage"));
        assert_eq!(d.undecodable(), 1);
        assert_eq!(d.push("2024-05-01T12:00:00.1Z stderr P tail"), None);
        assert_eq!(d.finish(), vec![(6, "tail".to_owned())]);
    }

    #[test]
    fn docker_lines() {
        let f = LineFormat::DockerJson;
        let raw = r#"{"log":"RuntimeError: CUDA error: out of memory\n","stream":"stderr","time":"2024-05-01T12:00:00.1Z"}"#;
        assert_eq!(decode_line(f, raw).as_deref(), Some("RuntimeError: CUDA error: out of memory"));
        assert_eq!(
            decode_line(LineFormat::Auto, raw).as_deref(),
            Some("RuntimeError: CUDA error: out of memory")
        );
        assert_eq!(decode_line(f, "{not json"), None);
        assert_eq!(decode_line(LineFormat::Auto, "{not json").as_deref(), Some("{not json"));
        let mut d = LineDecoder::new(LineFormat::Auto);
        assert_eq!(d.push(r#"{"log":"a \u00e9","stream":"stderr","time":"t"}"#), None);
        assert_eq!(d.push(r#"{"log":"b\n","stream":"stderr","time":"t"}"#).as_deref(), Some("a éb"));
    }

    #[test]
    fn joined_lines_are_bounded() {
        let mut d = LineDecoder::new(LineFormat::Cri);
        let chunk = "x".repeat(10_000);
        for _ in 0..20 {
            assert_eq!(d.push(&format!("2024-05-01T12:00:00.1Z stderr P {chunk}")), None);
        }
        let line = d.push("2024-05-01T12:00:00.1Z stderr F end").unwrap_or_default();
        assert_eq!(line.len(), MAX_JOINED_BYTES);
        assert_eq!(d.truncated_bytes(), 200_003 - MAX_JOINED_BYTES as u64);
    }

    #[test]
    fn format_names() {
        assert_eq!("docker".parse::<LineFormat>(), Ok(LineFormat::DockerJson));
        assert!("xml".parse::<LineFormat>().is_err());
    }

    proptest! {
        #[test]
        fn decoding_never_panics(raw in "\\PC{0,200}") {
            for f in [LineFormat::Plain, LineFormat::Cri, LineFormat::DockerJson, LineFormat::Auto] {
                let _ = decode_line(f, &raw);
                let mut d = LineDecoder::new(f);
                let _ = d.push(&raw);
                let _ = d.finish();
            }
        }
    }
}
