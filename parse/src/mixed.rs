//! One stream holding job-log lines and kernel log lines: a pasted log, or a job log that also
//! carries the kernel's lines (a job that prints `dmesg` when it fails, a scheduler epilogue).
//! Each kernel line — in any of the forms [`kernel_message`] strips — goes to the kernel parser
//! and becomes a kernel event (framework `kernel`); every other line goes to the [`LogParser`].
//! `oomlens-agent parse` / `oomlens explain` and the agent's job-log follower read through it, so
//! a paste and a followed file give the same events.

use crate::kernel::{KmsgParser, kernel_message};
use crate::{LogParser, ParsedOom, structured, text};

/// The job-log parser and the kernel-line parser side by side.
#[derive(Debug, Default)]
pub struct MixedParser {
    log: LogParser,
    /// No PCI map here: Xid events keep `gpu_index` unknown.
    kernel: KmsgParser,
    /// The line of the last kernel `invoked oom-killer` report (for [`KmsgParser::finish`]).
    invoked_at: Option<(u64, String)>,
}

impl MixedParser {
    /// A parser at line 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds physical line `number`; returns the events it completes. A kernel line becomes its
    /// kernel event and is not shown to the job-log parser. A line holding a JSON record is read
    /// as the lines its values carry (`structured.rs`), each routed on its own.
    pub fn feed_numbered_line(&mut self, number: u64, line: &str) -> Vec<ParsedOom> {
        match structured::expand(line) {
            Some(lines) => lines.iter().flat_map(|l| self.feed_one(number, l)).collect(),
            None => self.feed_one(number, line),
        }
    }

    fn feed_one(&mut self, number: u64, line: &str) -> Vec<ParsedOom> {
        // Cleaned as the job-log parser cleans its lines (`dmesg --color`'s escapes, a browser's
        // no-break spaces).
        let cleaned = text::clean(line);
        let bounded = cleaned.as_ref();
        let message = kernel_message(bounded);
        if let Some(e) = self.kernel.parse_message(message) {
            self.invoked_at = None;
            return vec![ParsedOom::from_kernel(&e, number, bounded)];
        }
        if message.contains(" invoked oom-killer:") {
            self.invoked_at = Some((number, bounded.to_owned()));
        }
        self.log.feed_cleaned(number, bounded)
    }

    /// The events still open at the end of the input: a kernel report cut before its `Killed
    /// process` line, then the job log's.
    pub fn finish(&mut self) -> Vec<ParsedOom> {
        let mut out = Vec::new();
        if let (Some(e), Some((number, line))) = (self.kernel.finish(), self.invoked_at.take()) {
            out.push(ParsedOom::from_kernel(&e, number, &line));
        }
        out.extend(self.log.finish());
        out
    }

    /// The first line of the oldest job-log event still open (see
    /// [`LogParser::earliest_open_line`]).
    pub fn earliest_open_line(&self) -> Option<u64> {
        self.log.earliest_open_line()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lines_in_a_job_log_are_kernel_events() {
        let mut p = MixedParser::new();
        let mut events = Vec::new();
        for (i, line) in [
            "[2025-06-02 20:51:24,182] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 410126",
            "[856341.770960] Out of memory: Killed process 410126 (python) total-vm:79905000kB, anon-rss:22957108kB, file-rss:72036kB, shmem-rss:15143164kB, UID:1000 pgtables:78032kB oom_score_adj:0",
            "step 12 loss 0.3",
        ]
        .iter()
        .enumerate()
        {
            events.extend(p.feed_numbered_line(i as u64 + 1, line));
        }
        events.extend(p.finish());
        let kinds: Vec<(&str, u64)> = events.iter().map(|e| (e.framework, e.line)).collect();
        assert!(kinds.contains(&("kernel", 2)), "{kinds:?}");
        assert!(kinds.contains(&("launcher", 1)), "{kinds:?}");
        // A kernel report cut before its `Killed process` line is an event at the end.
        let mut p = MixedParser::new();
        assert!(
            p.feed_numbered_line(
                1,
                "python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0"
            )
            .is_empty()
        );
        let end = p.finish();
        assert_eq!(end.len(), 1);
        assert_eq!((end[0].framework, end[0].line), ("kernel", 1));
    }
}
