//! Kernel log lines: NVIDIA Xid errors and Linux OOM-killer kills.
//!
//! * [`parse_record`] splits one `/dev/kmsg` record (`priority,seq,ts_us,flags;message`); the
//!   continuation lines of a record (` KEY=value`) are ignored.
//! * [`KmsgParser`] turns messages into events: `NVRM: Xid (PCI:…): N, pid=…, name=…` → `xid`
//!   (GPU index through the [`PciMap`]); `Out of memory: Killed process N (comm) total-vm:…,
//!   anon-rss:…kB, file-rss:…kB, shmem-rss:…kB` (also the `Memory cgroup out of memory:` variant
//!   and the old two-line `Kill process … / Killed process …` form) → `host_oom_kill` with
//!   `host_rss_bytes` = anon + file + shmem RSS; the preceding `oom-kill:constraint=…,task_memcg=…`
//!   line adds the victim's cgroup as a label; `Out of memory and no killable processes...` (the
//!   killer found no victim; the kernel panics next) → `host_oom_kill` without a pid.
//! * [`kernel_message`] finds the kernel message in a line of kernel log *output* (dmesg,
//!   `dmesg -T`, `journalctl -k`, syslog, `/dev/kmsg` records), so saved kernel logs go through the
//!   same [`KmsgParser`] as the agent's live `/dev/kmsg` reader.

use oomlens_schema::{EventSource, Label, OomEvent, OomKind};

use crate::pci::PciMap;

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
    /// The last `<comm> invoked oom-killer:` line not yet followed by its `Killed process` line.
    invoked: Option<String>,
}

impl KmsgParser {
    /// A parser mapping Xid PCI addresses through `pci`.
    pub fn new(pci: PciMap) -> Self {
        KmsgParser { pci, last_constraint: None, cgroup_pending: None, invoked: None }
    }

    /// End of a saved log: an OOM-killer report cut before its `Killed process` line (a partial
    /// paste) is still a host OOM kill — of an unknown process, invoked by the named one.
    pub fn finish(&mut self) -> Option<OomEvent> {
        let text = self.invoked.take()?;
        Some(self.unnamed_kill(&text))
    }

    /// A host OOM whose victim no line names (`text`: the report's line), invoked by the process
    /// of the last `invoked oom-killer` line, if any.
    fn unnamed_kill(&mut self, text: &str) -> OomEvent {
        let invoked = self.invoked.take();
        let comm =
            invoked.as_deref().unwrap_or(text).split(" invoked oom-killer").next().unwrap_or_default().trim();
        let mut labels = vec![Label { key: "oom.scope".into(), value: "host".into() }];
        if invoked.is_some() || text.contains(" invoked oom-killer") {
            labels.push(Label { key: "oom.invoked_by".into(), value: clip(comm) });
        }
        OomEvent {
            kind: OomKind::HostOomKill,
            source: EventSource::Kmsg,
            framework: "kernel".into(),
            labels,
            raw_message: clip_raw(text),
            ..OomEvent::default()
        }
    }

    /// Parses one message (the text after `;`).
    pub fn parse_message(&mut self, message: &str) -> Option<OomEvent> {
        if let Some(pos) = message.find("NVRM: Xid (") {
            return self.xid(&message[pos..]);
        }
        if message.contains(" invoked oom-killer:") {
            self.invoked = Some(message.to_owned());
            return None;
        }
        if let Some(rest) = message.strip_prefix("oom-kill:") {
            let pid = kv(rest, "pid").and_then(|p| p.parse().ok());
            let memcg = kv(rest, "task_memcg").map(str::to_owned);
            self.last_constraint = pid.zip(memcg);
            return None;
        }
        // The OOM killer found nothing it may kill (`Out of memory and no killable processes...`;
        // the kernel panics next, `System is deadlocked on memory`): host memory ran out all the
        // same.
        if crate::text::has(message, "Out of memory and no killable processes") {
            return Some(self.unnamed_kill(message));
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
        self.invoked = None;
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
    oomlens_schema::text::clip(s, max).to_owned()
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

    /// The OOM killer with nothing to kill (a small VM's init): host memory ran out, no victim.
    #[test]
    fn out_of_memory_with_no_killable_process() {
        let ev = parse(&[
            "swapper/0 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
            "32638 pages RAM",
            "Out of memory and no killable processes...",
            "Kernel panic - not syncing: System is deadlocked on memory",
        ]);
        assert_eq!(ev.len(), 1, "{ev:#?}");
        assert_eq!((ev[0].kind, ev[0].pid), (OomKind::HostOomKill, None));
        assert_eq!(label(&ev[0], "oom.invoked_by"), Some("swapper/0"));
        assert_eq!(label(&ev[0], "oom.scope"), Some("host"));
        assert!(ev[0].raw_message.starts_with("Out of memory and no killable processes"));
    }
}
