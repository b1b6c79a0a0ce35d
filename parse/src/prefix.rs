//! Strips the prefixes loggers and launchers put in front of a job's lines, keeping what they say
//! about the line's origin.
//!
//! Recognised (in any nesting, at most [`MAX_PREFIXES`] deep):
//!
//! * NCCL `host:1234:5678 [3] ` (+ `file.cc:12 NCCL WARN ` / `NCCL INFO `) — pid 1234, device 3;
//! * glog `I0501 12:00:00.123456  1234 file.cc:12] ` and c10's `[W501 12:00:00.123 file.cpp:12] `;
//! * TensorFlow/absl `2024-05-01 12:00:00.123456: E tensorflow/…/bfc_allocator.cc:479] ` (the
//!   source path is kept: it tells TensorFlow from XLA/JAX);
//! * Python logging `2024-05-01 12:00:00,123 - ERROR - `, `2024-05-01 12:00:00,123 - name - ERROR - `
//!   (also without the fraction of a second), `ERROR:root:`, loguru's `2024-05-01 12:00:00.123 |
//!   ERROR    | train:main:42 - `;
//! * bracketed stamps: DeepSpeed's `[2024-05-01 12:00:00,123] [ERROR] [stage3.py:12:fn] `, a
//!   script's `[2024-09-16 12:53:56] [INFO] `, SGLang's `[2024-05-01 12:00:00] ` without a level;
//! * vLLM `ERROR 05-01 12:00:00 [engine.py:12] ` / `ERROR 05-01 12:00:00 engine.py:12] ` and its
//!   worker prefixes `(VllmWorkerProcess pid=1234) `, `(VllmWorker rank=1 pid=1234) `,
//!   `(RayWorkerWrapper pid=1234, ip=10.0.0.1) ` — pid 1234;
//! * rank prefixes `[rank3]: `, `[default3]:` (torchrun), `[1,0]<stderr>:` (mpirun), Slurm
//!   `srun --label` ` 3: `, pdsh `worker-1: ` (only in front of another known prefix);
//! * syslog and the journal (`journalctl`, rsyslog's files): `Mar 25 12:15:11 node7
//!   python3[8289]: `, `2024-03-25T12:15:11.123456+00:00 node7 python3[8289]: `;
//! * ISO-8601 stamps `2024-05-01T12:00:00.123Z ` (e.g. `kubectl logs --timestamps`);
//! * Docker Compose's `vllm-1  | ` (the service, its replica number; the stream's key);
//! * `kubectl logs --prefix`'s `[pod/trainer-0/pytorch] `;
//! * quote markers `> ` of a log quoted in a mail or an issue (`> > ` nested).
//!
//! And one suffix: the source location Python's `rich` logging handler right-aligns at the end of
//! a line (`… Error: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 4.00 GiB    model_manager.py:47`),
//! which would otherwise run into the hard-wrapped message's next line.
//!
//! The *stream key* (rank, task, pid, a Compose service, a pod's container, a journal's program
//! and pid) separates interleaved output of several processes: a continuation line is only joined
//! to an event of the same key (or one without a key). Keys of nested prefixes nest (`trainer-1  | [rank0]: ` is `svctrainer-1|rank0`): a line with the outer
//! key alone (the service's message before its rank's traceback) goes with either rank, two ranks
//! stay apart.

/// Most prefixes stripped from one line.
pub const MAX_PREFIXES: usize = 6;

/// What the prefixes of a line said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// Which process or rank printed the line (`rank3`, `pid1234`, `task0`, …); empty when unknown.
    pub key: String,
    /// Process id, when a prefix names it (NCCL, vLLM).
    pub pid: Option<u32>,
    /// CUDA device index, when a prefix names it (NCCL's `[3]`).
    pub gpu: Option<u32>,
    /// Source file of a glog/absl line, lower-cased (`tensorflow/core/…/bfc_allocator.cc`).
    pub src: Option<String>,
    /// Severity of the line, when a logger prefix names it: the first letter of its level (`I`,
    /// `W`, `E`, `F` of glog, c10 and absl; `D`, `I`, `W`, `E`, `C`, `F` of Python's logging,
    /// DeepSpeed and vLLM).
    pub level: Option<u8>,
}

impl Origin {
    /// True when lines of `self` and `other` may belong to the same message: one has no key, or
    /// the keys are equal, or one holds the other (`svctrainer-1` and `svctrainer-1|rank0`: a
    /// service's line and its launcher's rank's).
    pub fn compatible(&self, other: &Origin) -> bool {
        self.key.is_empty()
            || other.key.is_empty()
            || self.key == other.key
            || self.holds(other)
            || other.holds(self)
    }

    /// True when `other`'s key is this key with an inner prefix's key after it (`svctrainer-1`
    /// holds `svctrainer-1|rank0`).
    pub fn holds(&self, other: &Origin) -> bool {
        !self.key.is_empty()
            && other.key.strip_prefix(self.key.as_str()).is_some_and(|rest| rest.starts_with(KEY_SEPARATOR))
    }

    /// Sets the stream key a prefix names; inside an outer prefix's key, after it (`svctrainer-1`
    /// then `[rank0]: ` → `svctrainer-1|rank0`).
    fn add_key(&mut self, key: String) {
        if !self.key.is_empty() {
            self.key.push(KEY_SEPARATOR);
        }
        self.key.push_str(&key);
    }
}

/// Between an outer prefix's key and an inner one's.
const KEY_SEPARATOR: char = '|';

/// A small byte cursor for the prefix grammars.
struct Cur<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    fn new(s: &'a str) -> Self {
        Cur { b: s.as_bytes(), i: 0 }
    }
    fn lit(&mut self, l: &str) -> Option<()> {
        if self.b.get(self.i..self.i + l.len())? == l.as_bytes() {
            self.i += l.len();
            Some(())
        } else {
            None
        }
    }
    fn byte(&mut self, f: impl Fn(u8) -> bool) -> Option<u8> {
        let c = *self.b.get(self.i)?;
        f(c).then(|| {
            self.i += 1;
            c
        })
    }
    /// Between `min` and `max` digits; their value (saturating).
    fn digits(&mut self, min: usize, max: usize) -> Option<u64> {
        let start = self.i;
        let mut v: u64 = 0;
        while self.i - start < max {
            match self.b.get(self.i) {
                Some(c) if c.is_ascii_digit() => {
                    v = v.saturating_mul(10).saturating_add(u64::from(c - b'0'));
                    self.i += 1;
                }
                _ => break,
            }
        }
        (self.i - start >= min).then_some(v)
    }
    /// One or more bytes satisfying `f`; the slice.
    fn run(&mut self, f: impl Fn(u8) -> bool, max: usize) -> Option<&'a [u8]> {
        let start = self.i;
        while self.i - start < max && self.b.get(self.i).is_some_and(|c| f(*c)) {
            self.i += 1;
        }
        (self.i > start).then(|| &self.b[start..self.i])
    }
    fn spaces(&mut self) -> usize {
        let start = self.i;
        while self.b.get(self.i) == Some(&b' ') {
            self.i += 1;
        }
        self.i - start
    }
    fn until(&mut self, stop: u8, max: usize) -> Option<&'a [u8]> {
        let start = self.i;
        while self.i - start < max {
            match self.b.get(self.i) {
                Some(c) if *c == stop => return Some(&self.b[start..self.i]),
                Some(_) => self.i += 1,
                None => return None,
            }
        }
        None
    }
}

fn to_u32(v: u64) -> Option<u32> {
    u32::try_from(v).ok()
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn is_path(c: u8) -> bool {
    c.is_ascii_graphic() && c != b']' && c != b':'
}

fn hhmmss(c: &mut Cur<'_>) -> Option<()> {
    c.digits(2, 2)?;
    c.lit(":")?;
    c.digits(2, 2)?;
    c.lit(":")?;
    c.digits(2, 2)?;
    Some(())
}

fn date(c: &mut Cur<'_>) -> Option<()> {
    c.digits(4, 4)?;
    c.lit("-")?;
    c.digits(2, 2)?;
    c.lit("-")?;
    c.digits(2, 2)?;
    Some(())
}

const LEVELS: &[&str] = &["DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"];

/// The level word at the cursor: its first letter.
fn level(c: &mut Cur<'_>) -> Option<u8> {
    for l in LEVELS {
        let save = c.i;
        if c.lit(l).is_some() {
            return Some(l.as_bytes()[0]);
        }
        c.i = save;
    }
    None
}

/// `file.cc:123` → the file, lower-cased.
fn src_file(c: &mut Cur<'_>) -> Option<String> {
    let f = c.run(is_path, 512)?;
    c.lit(":")?;
    c.digits(1, 7)?;
    Some(String::from_utf8_lossy(f).to_ascii_lowercase())
}

/// One prefix at the start of `s`: the remaining text and what it said.
fn one(s: &str, o: &mut Origin) -> Option<usize> {
    const GRAMMARS: [fn(&str, &mut Origin) -> Option<usize>; 18] = [
        nccl,
        glog,
        c10_bracket,
        absl,
        pylog,
        pylog_short,
        loguru,
        bracket_stamp,
        vllm_level,
        vllm_proc,
        rank,
        syslog,
        iso,
        srun,
        pdsh,
        compose,
        kubectl,
        quote,
    ];
    GRAMMARS.iter().find_map(|f| {
        let mut tmp = o.clone();
        let n = f(s, &mut tmp)?;
        *o = tmp;
        Some(n)
    })
}

fn nccl(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    c.run(|b| is_word(b) || b == b'-' || b == b'.', 255)?;
    c.lit(":")?;
    let pid = c.digits(1, 10)?;
    c.lit(":")?;
    c.digits(1, 10)?;
    c.lit(" [")?;
    let dev = c.digits(1, 4)?;
    c.lit("]")?;
    c.spaces();
    // `NCCL INFO `, or `file.cc:12 NCCL WARN `.
    let save = c.i;
    let mut tagged = c.lit("NCCL ").is_some();
    if !tagged {
        c.i = save;
        if src_file(&mut c).is_some() && c.lit(" NCCL ").is_some() {
            tagged = true;
        } else {
            c.i = save;
        }
    }
    if tagged {
        c.run(|b| b.is_ascii_uppercase(), 8)?;
        let _ = c.lit(" ");
    }
    o.pid = to_u32(pid);
    o.gpu = to_u32(dev);
    o.add_key(format!("pid{pid}"));
    Some(c.i)
}

fn glog(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    let level = s.as_bytes().first().copied();
    c.byte(|b| matches!(b, b'I' | b'W' | b'E' | b'F'))?;
    c.digits(4, 4)?;
    c.lit(" ")?;
    hhmmss(&mut c)?;
    c.lit(".")?;
    c.digits(1, 9)?;
    if c.spaces() == 0 {
        return None;
    }
    c.digits(1, 10)?;
    c.lit(" ")?;
    let src = src_file(&mut c)?;
    c.lit("]")?;
    let _ = c.lit(" ");
    o.src = Some(src);
    o.level = level;
    Some(c.i)
}

fn c10_bracket(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    c.lit("[")?;
    let level = s.as_bytes().get(1).copied();
    c.byte(|b| matches!(b, b'I' | b'W' | b'E' | b'F'))?;
    c.digits(3, 4)?;
    c.lit(" ")?;
    hhmmss(&mut c)?;
    c.until(b']', 512)?;
    c.lit("]")?;
    let _ = c.lit(" ");
    o.level = level;
    Some(c.i)
}

fn absl(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    date(&mut c)?;
    c.lit(" ")?;
    hhmmss(&mut c)?;
    c.lit(".")?;
    c.digits(1, 9)?;
    c.lit(": ")?;
    let level = s.as_bytes().get(c.i).copied();
    c.byte(|b| matches!(b, b'I' | b'W' | b'E' | b'F'))?;
    c.spaces();
    let src = src_file(&mut c)?;
    c.lit("]")?;
    let _ = c.lit(" ");
    o.src = Some(src);
    o.level = level;
    Some(c.i)
}

fn pylog(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    stamp(&mut c)?;
    // ` - LEVEL - ` or ` - name - LEVEL - ` (name without ` - `).
    for _ in 0..2 {
        c.lit(" - ")?;
        let save = c.i;
        if let Some(l) = level(&mut c)
            && c.lit(" - ").is_some()
        {
            o.level = Some(l);
            return Some(c.i);
        }
        c.i = save;
        c.run(|b| b != b' ', 128)?;
    }
    None
}

/// loguru's default format: `2024-05-01 12:00:00.123 | ERROR    | train:main:42 - ` (the level
/// padded to eight; loguru's own `SUCCESS` and `TRACE` too).
fn loguru(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    stamp(&mut c)?;
    c.lit(" | ")?;
    let level = match level(&mut c) {
        Some(l) => l,
        None if c.lit("SUCCESS").is_some() => b'I',
        None if c.lit("TRACE").is_some() => b'D',
        None => return None,
    };
    c.spaces();
    c.lit("| ")?;
    c.until(b' ', 512)?;
    c.lit(" - ")?;
    o.level = Some(level);
    Some(c.i)
}

fn pylog_short(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    o.level = Some(level(&mut c)?);
    c.lit(":")?;
    c.run(|b| is_word(b) || b == b'.', 128)?;
    c.lit(":")?;
    Some(c.i)
}

/// A logger's date and time, `2024-05-01 12:00:00` with its fraction of a second when there is one.
fn stamp(c: &mut Cur<'_>) -> Option<()> {
    date(c)?;
    c.lit(" ")?;
    hhmmss(c)?;
    fraction(c);
    Some(())
}

/// A logger's fraction of a second after the time (`,123`, `.123456`), when there is one.
fn fraction(c: &mut Cur<'_>) {
    let save = c.i;
    if !(c.byte(|b| b == b',' || b == b'.').is_some() && c.digits(1, 9).is_some()) {
        c.i = save;
    }
}

/// A bracketed stamp and what follows it: DeepSpeed's `[2024-05-01 12:00:00,123] [ERROR]
/// [stage3.py:12:fn] `, kohya's and many scripts' `[2024-09-16 12:53:56] [INFO] `, SGLang's and
/// PyTorch's `[2024-05-01 12:00:00] ` with no level.
fn bracket_stamp(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    c.lit("[")?;
    date(&mut c)?;
    c.byte(|b| b == b' ' || b == b'T')?;
    hhmmss(&mut c)?;
    fraction(&mut c);
    zone(&mut c);
    c.lit("]")?;
    let _ = c.lit(" ");
    let save = c.i;
    match c.lit("[").and_then(|()| level(&mut c)).filter(|_| c.lit("]").is_some()) {
        Some(l) => {
            o.level = Some(l);
            let _ = c.lit(" ");
            // DeepSpeed's source location `[stage3.py:12:fn]` (not a rank's `[rank0]:`).
            let save = c.i;
            if c.lit("[").is_some()
                && src_file(&mut c).is_some()
                && c.until(b']', 256).is_some()
                && c.lit("]").is_some()
            {
                let _ = c.lit(" ");
            } else {
                c.i = save;
            }
        }
        None => c.i = save,
    }
    Some(c.i)
}

fn vllm_level(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    o.level = Some(level(&mut c)?);
    c.lit(" ")?;
    c.digits(2, 2)?;
    c.lit("-")?;
    c.digits(2, 2)?;
    c.lit(" ")?;
    hhmmss(&mut c)?;
    if c.lit(".").is_some() {
        c.digits(1, 9)?;
    }
    c.lit(" ")?;
    if c.lit("[").is_some() {
        c.until(b']', 256)?;
        c.lit("]")?;
    } else {
        src_file(&mut c)?;
        c.lit("]")?;
    }
    let _ = c.lit(" ");
    Some(c.i)
}

fn vllm_proc(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    c.lit("(")?;
    let inner = c.until(b')', 160)?;
    c.lit(")")?;
    let _ = c.lit(" ");
    let inner = std::str::from_utf8(inner).ok()?;
    let at = inner.find("pid=")?;
    let mut p = Cur::new(&inner[at + 4..]);
    let pid = p.digits(1, 10)?;
    // The worker's name is a single identifier (`VllmWorkerProcess`, `EngineCore_0`, …).
    let name = inner.split([' ', ',']).next()?;
    if name.is_empty() || !name.bytes().all(is_word) {
        return None;
    }
    o.pid = to_u32(pid);
    o.add_key(format!("pid{pid}"));
    Some(c.i)
}

fn rank(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    c.lit("[")?;
    let save = c.i;
    let key = if c.lit("rank").is_some() || {
        c.i = save;
        c.lit("default").is_some()
    } {
        let r = c.digits(1, 6)?;
        c.lit("]")?;
        c.lit(":")?;
        format!("rank{r}")
    } else {
        c.i = save;
        let a = c.digits(1, 6)?;
        c.lit(",")?;
        let b = c.digits(1, 6)?;
        c.lit("]<")?;
        c.run(|b| b.is_ascii_lowercase(), 8)?;
        c.lit(">:")?;
        format!("mpi{a},{b}")
    };
    let _ = c.lit(" ");
    o.add_key(key);
    Some(c.i)
}

/// An ISO-8601 date and time with its fraction and zone (`2024-05-01T12:00:00.123Z`,
/// `…+02:00`).
fn iso_stamp(c: &mut Cur<'_>) -> Option<()> {
    date(c)?;
    c.lit("T")?;
    hhmmss(c)?;
    if c.lit(".").is_some() || c.lit(",").is_some() {
        c.digits(1, 9)?;
    }
    zone(c);
    Some(())
}

/// A time zone after a time, when there is one: `Z`, `+02:00`, `-0500`.
fn zone(c: &mut Cur<'_>) {
    if c.lit("Z").is_some() {
        return;
    }
    let save = c.i;
    let offset = c.byte(|b| b == b'+' || b == b'-').is_some() && c.digits(2, 2).is_some() && {
        let _ = c.lit(":");
        c.digits(2, 2).is_some()
    };
    if !offset {
        c.i = save;
    }
}

fn iso(s: &str, _o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    iso_stamp(&mut c)?;
    c.lit(" ")?;
    Some(c.i)
}

const MONTHS: [&str; 12] =
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// A syslog line's prefix, on every line of a job that logs to the journal or through rsyslog:
/// the stamp (`journalctl`'s and rsyslog's traditional `Mar 25 12:15:11`, `-o short-precise`'s
/// fraction, RFC 3339's `2024-03-25T12:15:11.123456+00:00`), the host, the program and its pid
/// (`node7 python3[8289]: `; after an ISO stamp the pid is required). The program and its pid
/// are the stream's key (`journalpython3[8289]`): the journal and rsyslog interleave every
/// service's lines, and a service's stdout keeps the pid of its main process for all of them. The
/// prefixes after it nest inside (`[rank0]: `), so a line of the same process without them (the
/// message before its ranked traceback) stays compatible with them. The pid is not the failing
/// process's (the program that logs may be a wrapper or the shell): it is not the origin's pid.
fn syslog(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    let traditional = MONTHS.iter().any(|m| c.lit(m).is_some());
    if traditional {
        c.lit(" ")?;
        let _ = c.lit(" ");
        c.digits(1, 2)?;
        c.lit(" ")?;
        hhmmss(&mut c)?;
        fraction(&mut c);
    } else {
        iso_stamp(&mut c)?;
    }
    c.lit(" ")?;
    // The host, not a level (`2024-04-26T20:17:25Z ERROR mistralrs_core::engine: …` is a Rust
    // `tracing` line).
    let at = c.i;
    if level(&mut c).is_some() || c.lit("TRACE").is_some() {
        return None;
    }
    c.i = at;
    c.run(|b| b.is_ascii_graphic() && b != b'[' && b != b':', 255)?;
    c.lit(" ")?;
    let program = c.run(|b| is_word(b) || b"-./@".contains(&b), 64)?;
    let save = c.i;
    let pid = c.lit("[").and_then(|()| c.digits(1, 10)).filter(|_| c.lit("]").is_some());
    if pid.is_none() {
        c.i = save;
    }
    // After an ISO stamp only with the pid: `2024-05-01T12:00:00Z CUDA Error: out of memory` is a
    // stamped line of its own.
    if pid.is_none() && !traditional {
        return None;
    }
    c.lit(":")?;
    if c.lit(" ").is_none() && c.i < s.len() {
        return None;
    }
    if let Some(pid) = pid {
        o.add_key(format!("journal{}[{pid}]", String::from_utf8_lossy(program)));
    }
    Some(c.i)
}

fn srun(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    c.spaces();
    let task = c.digits(1, 5)?;
    c.lit(": ")?;
    o.add_key(format!("task{task}"));
    Some(c.i)
}

fn pdsh(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    let host = c.run(|b| is_word(b) || b == b'-' || b == b'.', 255)?;
    c.lit(": ")?;
    let rest = &s[c.i..];
    let mut probe = Origin::default();
    if rank(rest, &mut probe).is_none() && bracket_stamp(rest, &mut probe).is_none() {
        return None;
    }
    o.add_key(format!("host{}", String::from_utf8_lossy(host)));
    Some(c.i)
}

/// Docker Compose's service prefix: the container's name, which ends in its replica number
/// (`vllm-1`, v1's `app_web_1`), padded to the longest name, `| ` — the service is the stream's
/// key. Only the one space after the bar is the prefix's: an indented frame keeps its indent.
fn compose(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    let name = c.run(|b| is_word(b) || b == b'-' || b == b'.', 128)?;
    let replica = name.iter().rposition(|b| !b.is_ascii_digit())?;
    if replica + 1 == name.len() || !matches!(name[replica], b'-' | b'_') || replica == 0 {
        return None;
    }
    if c.spaces() == 0 {
        return None;
    }
    c.lit("|")?;
    if c.i < s.len() {
        c.lit(" ")?;
    }
    o.add_key(format!("svc{}", String::from_utf8_lossy(name)));
    Some(c.i)
}

/// `kubectl logs --prefix`'s `[pod/trainer-0/pytorch] `: the pod and its container are the
/// stream's key (pods read with a label selector interleave their lines); the prefixes after it
/// nest inside (`[rank0]: ` of a launcher in the pod), so the pod's lines without them stay
/// compatible with them.
fn kubectl(s: &str, o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    let start = c.i;
    c.lit("[pod/")?;
    c.run(|b| is_word(b) || b == b'-' || b == b'.', 253)?;
    c.lit("/")?;
    c.run(|b| is_word(b) || b == b'-' || b == b'.', 253)?;
    c.lit("]")?;
    let name = &s[start + 1..c.i - 1];
    if c.i < s.len() {
        c.lit(" ")?;
    }
    o.add_key(name.to_owned());
    Some(c.i)
}

/// `> ` (or a lone `>`): a quoted line. `>>> ` (Python's prompt) is three of them, which is as
/// good: what follows is the text.
fn quote(s: &str, _o: &mut Origin) -> Option<usize> {
    let mut c = Cur::new(s);
    c.lit(">")?;
    if c.lit(" ").is_none() && c.i < s.len() && !s[c.i..].starts_with('>') {
        return None;
    }
    Some(c.i)
}

/// Strips every recognised prefix from `line`: the message text and its origin.
pub fn strip(line: &str) -> (&str, Origin) {
    let mut o = Origin::default();
    // A log pasted with an indent (inside a list, quoted with spaces) keeps its prefixes after it.
    let indented = line.trim_start_matches([' ', '\t']);
    let mut rest = if indented.len() < line.len() && one(indented, &mut Origin::default()).is_some() {
        indented
    } else {
        line
    };
    for _ in 0..MAX_PREFIXES {
        match one(rest, &mut o) {
            Some(n) if n > 0 && n <= rest.len() && rest.is_char_boundary(n) => rest = &rest[n..],
            _ => break,
        }
    }
    (strip_rich_location(rest), o)
}

/// `line` without a right-aligned `file.py:N` after two or more spaces (`rich`'s log handler).
fn strip_rich_location(line: &str) -> &str {
    let t = line.trim_end();
    let Some((head, last)) = t.rsplit_once(' ') else {
        return line;
    };
    let location = last.split_once(".py:").is_some_and(|(file, n)| {
        !file.is_empty()
            && file.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
    });
    if location && head.ends_with(' ') && !head.trim_end().is_empty() { head.trim_end() } else { line }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(line: &str) -> (&str, Origin) {
        strip(line)
    }

    /// The level a logger's prefix names is kept: the parser does not let a debug, info or
    /// warning line start a failure that only the last-resort readings see.
    #[test]
    fn levels() {
        for (line, level) in [
            ("W0501 12:00:00.123456  1234 alloc.cc:12] memory allocation failed", Some(b'W')),
            ("[W906 15:02:06.204334026 CUDACachingAllocator.cpp:3934] memory allocation failed", Some(b'W')),
            ("2024-05-01 12:00:00.123456: E tensorflow/core/x.cc:1] failed", Some(b'E')),
            ("2024-05-01 12:00:00,123 - INFO - loaded", Some(b'I')),
            ("DEBUG:root:mmap failed", Some(b'D')),
            ("ERROR 10-11 12:27:29 engine.py:157] boom", Some(b'E')),
            ("[2024-05-01 12:00:00,123] [WARNING] [stage3.py:12] retrying", Some(b'W')),
            ("plain line", None),
        ] {
            assert_eq!(s(line).1.level, level, "{line}");
        }
    }

    #[test]
    fn nccl_prefix() {
        let (m, o) = s("node1:12345:12400 [3] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'");
        assert_eq!(m, "Cuda failure 'out of memory'");
        assert_eq!((o.pid, o.gpu, o.key.as_str()), (Some(12345), Some(3), "pid12345"));
        let (m, _) = s("node1:12345:12400 [3] NCCL INFO include/alloc.h:49 -> 1");
        assert_eq!(m, "include/alloc.h:49 -> 1");
    }

    #[test]
    fn rich_location_suffix() {
        assert_eq!(
            s("00:07:07.960 ERROR cuda:0 Error: CUDA out of memory. (GPU 0; 4.00 GiB    model_manager.py:47")
                .0,
            "00:07:07.960 ERROR cuda:0 Error: CUDA out of memory. (GPU 0; 4.00 GiB"
        );
        // One space, no line number, or the location alone: kept.
        for kept in ["see train.py:12", "x  train.py", "   train.py:12", "File train.py:12"] {
            assert_eq!(s(kept).0, kept);
        }
    }

    #[test]
    fn loggers() {
        assert_eq!(s("I0501 12:00:00.123456  1234 file.cc:12] hello").0, "hello");
        let (m, o) =
            s("2024-05-01 12:00:00.123456: W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator");
        assert_eq!(m, "Allocator");
        assert_eq!(o.src.as_deref(), Some("tensorflow/core/common_runtime/bfc_allocator.cc"));
        assert_eq!(s("2024-05-01 12:00:00,123 - ERROR - boom").0, "boom");
        assert_eq!(s("2024-05-01 12:00:00,123 - trainer.main - ERROR - boom").0, "boom");
        assert_eq!(s("ERROR:root:boom").0, "boom");
        let (m, o) = s("2024-05-01 12:00:00.123 | ERROR    | train:main:42 - CUDA out of memory.");
        assert_eq!((m, o.level), ("CUDA out of memory.", Some(b'E')));
        assert_eq!(s("2024-05-01 12:00:00.123 | SUCCESS  | app:run:7 - done").0, "done");
        assert_eq!(s("2024-05-01 12:00:00.123 | nothing").0, "2024-05-01 12:00:00.123 | nothing");
        assert_eq!(s("[2024-05-01 12:00:00,123] [ERROR] [stage3.py:12:step] boom").0, "boom");
        let (m, o) = s("[2024-09-16 12:53:56] [INFO] Of the allocated memory 4.00 GiB");
        assert_eq!((m, o.level), ("Of the allocated memory 4.00 GiB", Some(b'I')));
        assert_eq!(
            s("[2024-05-01 12:00:00] Decode batch, #running-req: 1").0,
            "Decode batch, #running-req: 1"
        );
        let (m, o) = s("[2026-02-24T20:21:58Z] (EngineCore_DP0 pid=6940) ValueError: Free memory");
        assert_eq!((m, o.pid), ("ValueError: Free memory", Some(6940)));
        assert_eq!(s("[2024-05-01T12:00:00.123456] [WARNING] hello [x]").0, "hello [x]");
        assert_eq!(s("2026-01-08 00:35:04 - whisperjav - ERROR - Failed").0, "Failed");
        let (m, o) = s("Mar 25 12:15:11 node7 python3[8289]: Of the allocated memory");
        assert_eq!((m, o.key.as_str(), o.pid), ("Of the allocated memory", "journalpython3[8289]", None));
        // Nested: a rank inside the service's stream.
        let (m, o) = s("Mar 25 12:15:11 node7 torchrun[77]: [rank1]: Killed");
        assert_eq!((m, o.key.as_str()), ("Killed", "journaltorchrun[77]|rank1"));
        assert_eq!(s("Mar  5 02:15:11.123456 gpu-01.example.org train.sh: Killed").0, "Killed");
        let (m, o) = s("2024-03-25T12:15:11.123456+00:00 node7 python3[8289]:   File \"x.py\", line 3");
        assert_eq!((m, o.key.as_str()), ("  File \"x.py\", line 3", "journalpython3[8289]"));
        assert_eq!(
            s("2024-04-26T20:17:25.483829Z ERROR mistralrs_core::engine: prompt").0,
            "ERROR mistralrs_core::engine: prompt"
        );
        assert_eq!(s("2024-04-26T20:17:25Z node7 a::b: c").0, "node7 a::b: c");
        assert_eq!(s("2024-05-01T12:00:00Z CUDA Error: out of memory").0, "CUDA Error: out of memory");
        // A stamp that is not one stays.
        for line in ["[2024-05-01] boom", "[2024-05-01 12:00] boom", "[12:00:00] boom"] {
            assert_eq!(s(line).0, line, "{line}");
        }
        assert_eq!(s("[W501 12:00:00.123456789 ProcessGroupNCCL.cpp:1168] Warning: x").0, "Warning: x");
        assert_eq!(s("2024-05-01T12:00:00.123456789Z boom").0, "boom");
        assert_eq!(s("> > RuntimeError: CUDA out of memory.").0, "RuntimeError: CUDA out of memory.");
        assert_eq!(
            s(">   File \"train.py\", line 3, in <module>").0,
            "  File \"train.py\", line 3, in <module>"
        );
        assert_eq!(s(">>> import torch").0, "import torch");
        assert_eq!(s(">").0, "");
        assert_eq!(
            s("    [rank1]:   File \"x.py\", line 3, in f"),
            ("  File \"x.py\", line 3, in f", Origin { key: "rank1".into(), ..Origin::default() })
        );
    }

    #[test]
    fn vllm_and_ranks() {
        let (m, o) =
            s("(VllmWorkerProcess pid=4242) ERROR 05-01 12:00:00 multiproc_worker_utils.py:226] torch.x");
        assert_eq!(m, "torch.x");
        assert_eq!((o.pid, o.key.as_str()), (Some(4242), "pid4242"));
        let (m, o) = s("(VllmWorker rank=1 pid=77) ERROR 05-01 12:00:00.123 [core.py:12] boom");
        assert_eq!((m, o.pid), ("boom", Some(77)));
        let (m, o) = s("[rank3]: torch.OutOfMemoryError: CUDA out of memory.");
        assert_eq!((m, o.key.as_str()), ("torch.OutOfMemoryError: CUDA out of memory.", "rank3"));
        assert_eq!(s("[default0]:boom").1.key, "rank0");
        assert_eq!(s("[1,0]<stderr>:boom"), ("boom", Origin { key: "mpi1,0".into(), ..Origin::default() }));
        assert_eq!(s("  0: boom").0, "boom");
        assert_eq!(s("worker-1: [rank8]: boom").0, "boom");
        assert_eq!(s("worker-1: [rank8]: boom").1.key, "hostworker-1|rank8");
        // An outer prefix's key holds an inner one's; two inner ones differ.
        let (service, rank0, rank1) =
            (s("trainer-1  | boom").1, s("trainer-1  | [rank0]: boom").1, s("trainer-1  | [rank1]: boom").1);
        assert_eq!(rank0.key, "svctrainer-1|rank0");
        assert!(service.holds(&rank0) && service.compatible(&rank0) && rank0.compatible(&service));
        assert!(!rank0.compatible(&rank1) && !rank0.holds(&service));
        assert!(!s("trainer-11  | boom").1.compatible(&s("trainer-1  | boom").1));
    }

    #[test]
    fn compose_service() {
        let (m, o) = s("vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory");
        assert_eq!(
            (m, o.key.as_str(), o.level),
            ("ValueError: No available memory", "svcvllm-1", Some(b'E'))
        );
        // An indented frame keeps its indent; v1's underscore names; an empty line.
        assert_eq!(
            s("trainer-1  |   File \"/app/train.py\", line 88, in <module>").0,
            "  File \"/app/train.py\", line 88, in <module>"
        );
        assert_eq!(s("app_web_1 | Killed").0, "Killed");
        let (m, o) = s("[pod/trainer-0/pytorch] torch.OutOfMemoryError: CUDA out of memory.");
        assert_eq!(
            (m, o.key.as_str()),
            ("torch.OutOfMemoryError: CUDA out of memory.", "pod/trainer-0/pytorch")
        );
        assert_eq!(s("[pod/trainer-0] boom").0, "[pod/trainer-0] boom");
        assert_eq!(s("app_web_1 |").0, "");
        // Not a service: no replica number, no space before the bar, a shell pipeline.
        for line in ["echo hi | grep h", "web | boom", "web-1| boom", "-1 | boom", "1 | boom"] {
            assert_eq!(s(line).0, line, "{line}");
        }
    }

    #[test]
    fn leaves_messages_alone() {
        for m in [
            "RuntimeError: CUDA out of memory.",
            "Traceback (most recent call last):",
            "  File \"train.py\", line 3, in <module>",
            "(most recent call first):",
            "step 120 loss 2.3141 lr 3.0e-04",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",
            "Limit:                     14674281152",
            ">=2.1 required",
            "->  x",
            "",
        ] {
            assert_eq!(s(m).0, m);
        }
    }
}
