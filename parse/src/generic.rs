//! Last-resort readings of failure wordings that no program-specific rule knows.
//!
//! Every batch of real messages brings programs whose words the parser has never seen (a
//! launcher's `exited on signal 9`, a platform's `Memory quota exceeded`, a runtime's `failed to
//! allocate … on the GPU`). The rules in `frameworks.rs` and `host.rs` each name one program's
//! words; this module reads what such messages have in common, so that an unknown program's
//! failure still becomes an event (framework `other`) instead of nothing:
//!
//! * [`killed_by_sigkill`]: a process reported dead of SIGKILL (`signal 9`, `SIGKILL`, `signal:
//!   killed`) or with status 137 / -9 (`exit code 137`, `status=137`, `returncode -9`), which is
//!   how the kernel's OOM killer leaves a process;
//! * [`host_limit_exceeded`]: host memory or a memory limit said in so many words to have run
//!   out (`memory limit exceeded`, `killed due to memory`, `out of host memory`);
//! * [`host_allocation_failed`]: a host allocation refused in words that name the host's side
//!   (`Cannot allocate memory`, `malloc of size N failed`, `System.OutOfMemoryException`);
//! * [`device_memory_failed`]: a memory failure's words together with a device's (`failed to
//!   allocate … on the GPU`, `GPU allocation failed`, `not enough device memory`).
//!
//! Each one refuses what only looks like a failure: advice and conditions (`if you run out of
//! memory`, `to avoid`), fallbacks and retries, commands (`kill -9`), and kills that are not the
//! memory's (a time limit, a timeout, a cancellation, SIGTERM first). These readings run only when
//! no specific rule claimed the line (`LogParser` also ignores them on a logger's debug, info or
//! warning line, and folds them into a GPU failure they follow), and they are measured like every other rule: on the corpus
//! of real messages, and on the real logs of jobs that did not fail (`corpus/` `quiet-…` records),
//! where they must stay quiet.

use super::text::{find, has};

/// Words of a kill that is not the memory's, or of a line that is not a report: a command
/// typed or documented (`kill -9`, `pkill`), a supervisor's own kill (a timeout, a time limit, a
/// cancellation, preemption, SIGTERM first), an interrupt, a signal handler being set up, a
/// condition, advice or an explanation (`exit code 137 means …`).
const NOT_MEMORY_KILL: &[&str] = &[
    "kill -9",
    "kill -s",
    "kill -kill",
    "pkill",
    "killall",
    "sending sigkill",
    "send sigkill",
    "sends sigkill",
    // A supervisor reporting on what its own SIGKILL left (vLLM's test server at teardown: `8
    // process(es) still in pgid 707 after SIGKILL`).
    "after sigkill",
    "still alive",
    "still running",
    "timeout",
    "timed out",
    "time limit",
    "deadline",
    "sigterm",
    "preempt",
    "cancel",
    "interrupt",
    "ctrl",
    "grace",
    "if ",
    "whether",
    "e.g.",
    "usage:",
    "--signal",
    "signal handler",
    "handler for",
    "means",
];

/// A process reported dead of SIGKILL, the OOM killer's signal, in any program's words: `signal
/// 9`, `SIGKILL`, `signal: killed`, `killed signal` (not prose's `kill signal`: a changelog's
/// `fix kill signal on Windows`; nvcc's `(kill signal)` follows its `signal 9`), or an exit
/// status of 137 (128 + 9) or -9 after a word naming a status (`exit code 137`, `status=137`,
/// `returncode: -9`). `l` is the line in lower case.
pub fn killed_by_sigkill(l: &str) -> bool {
    let said = has(l, "sigkill")
        || has(l, "signal: killed")
        || has(l, "signal killed")
        || has(l, "killed signal")
        || coded(l, "9", &["signal", "sig"])
        || coded(l, "137", STATUS_WORDS)
        || coded(l, "-9", STATUS_WORDS);
    said && !NOT_MEMORY_KILL.iter().any(|w| has(l, w))
}

/// Words after which a number is a process's exit status.
const STATUS_WORDS: &[&str] = &[
    "code",
    "status",
    "rc",
    "returned",
    "exitcode",
    "exit_code",
    "returncode",
    "exit",
    "exitfailure",
    "failed with",
];

/// True when `value` stands in `l` as a number of its own (no digit or letter glued to either
/// side) right after one of `keys` and a separator: a space, `=`, `(`, `[`, or `: ` — not a bare
/// `:`, which is a structured dump's field (`ExitCode:137,` in `docker inspect`, read with the
/// `OOMKilled:false` beside it), not a report.
fn coded(l: &str, value: &str, keys: &[&str]) -> bool {
    let b = l.as_bytes();
    has(l, value)
        && l.match_indices(value).any(|(i, _)| {
            let end = i + value.len();
            // (`1370`, `137.5`, `137a` are other numbers.)
            let glued = b.get(end).is_some_and(|c| {
                c.is_ascii_alphanumeric() || (*c == b'.' && b.get(end + 1).is_some_and(u8::is_ascii_digit))
            });
            if glued {
                return false;
            }
            let before = &l[..i];
            let word = before.trim_end_matches([' ', ':', '=', '(', '[', '\'', '"']);
            let sep = &before[word.len()..];
            if sep.is_empty() || sep == ":" || sep.len() > 3 {
                return false;
            }
            keys.iter().any(|k| {
                word.strip_suffix(k)
                    .is_some_and(|rest| !rest.as_bytes().last().is_some_and(u8::is_ascii_alphabetic))
            })
        })
}

/// A memory limit's names; [`limit_exceeded`] reads one with `exceed` around it.
const LIMITS: &[&str] =
    &["memory limit", "memory quota", "memory budget", "memory resource limit", "memory allocation"];

/// Where a memory limit is said to be exceeded: `memory limit exceeded`, `Memory quota vastly
/// exceeded`, `Memory limit of 512 MiB exceeded with 516 MiB used`, `exceeded its memory quota`,
/// `killed by YARN for exceeding memory limits`, `exceeds the job's memory limit` (`exceed…` at
/// most 24 bytes before the limit's name, or `exceeded` at most 24 after it and not negated).
fn limit_exceeded(l: &str) -> Option<usize> {
    LIMITS.iter().find_map(|name| {
        if !has(l, name) {
            return None;
        }
        l.match_indices(name).find_map(|(i, _)| {
            let from = floor_boundary(l, i.saturating_sub(24));
            let end = floor_boundary(l, (i + name.len() + 24).min(l.len()));
            let after = &l[i + name.len()..end];
            let said_after = find(after, "exceeded").is_some_and(|k| {
                let before = after[..k].trim_end();
                !before.ends_with("not") && !before.ends_with("never")
            });
            find(&l[from..i], "exceed").map(|k| from + k).or(said_after.then_some(i))
        })
    })
}

/// The largest char boundary of `s` at or before `i`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Where a process or job is said to be stopped for its memory: a stop (`killed`, `terminated`,
/// `held`, `evicted`, …) and `due to` its memory use on one line (HTCondor's `put on hold by
/// SYSTEM_PERIODIC_HOLD due to memory usage`, `Container killed due to memory usage`).
fn stopped_for_memory(l: &str) -> Option<usize> {
    const DUE: &[&str] = &[
        "due to memory usage",
        "due to memory pressure",
        "due to high memory",
        "due to excessive memory",
        "due to exceeding memory",
        "due to memory limit",
        "due to insufficient memory",
        "due to out of memory",
        "due to oom",
    ];
    const STOPS: &[&str] =
        &["kill", "terminat", "hold", "held", "evict", "stopp", "abort", "restart", "preempt"];
    let at = DUE.iter().filter_map(|w| find(l, w)).min()?;
    STOPS.iter().any(|w| has(&l[..at], w)).then_some(at)
}

/// Host memory said to have run out, or a process said to be killed for memory, in words no
/// specific rule names.
const HOST_RAN_OUT: &[&str] = &[
    "memory limit reached",
    "reached its memory limit",
    "killed due to memory",
    "killed due to high memory",
    "killed due to excessive memory",
    "killed because of memory",
    "killed for exceeding memory",
    "killed for using too much memory",
    "terminated due to memory",
    "terminated due to high memory",
    "terminated due to excessive memory",
    "killed (out of memory)",
    "killed: out of memory",
    "killed (oom)",
    "oom killed",
    "oom-killed",
    "oom_killed",
    "killed by oom",
    "killed by the oom",
    "ran out of ram",
    "out of system memory",
    "ran out of system memory",
    "out of host memory",
    "host memory exhausted",
    "system memory exhausted",
    "insufficient system memory",
    "not enough system memory",
    "not enough ram",
    "heap out of memory",
    "system running out of memory",
    "system ran out of memory",
    "system is out of memory",
    "system is running out of memory",
    "machine ran out of memory",
    "machine is out of memory",
    "node ran out of memory",
    "node is out of memory",
    "system out of memory",
];

/// Words that make a memory line the device's (a GPU's memory, not the host's).
const DEVICE_WORDS: &[&str] = &[
    "gpu",
    "cuda",
    "cudnn",
    "resource_exhausted",
    "vram",
    "device memory",
    "hbm",
    "video memory",
    "vulkan",
    "opencl",
    "metal",
    // Huawei Ascend's driver allocating the NPU's memory (`halMemAlloc failed:size=32(Byte)`, its
    // `… drvRetCode=6` cut away by a terminal's wrap): not the C library's `malloc failed`.
    "halmemalloc",
];

/// Words of a line that only speaks of a failure: advice, a condition, a question, a warning.
const ONLY_SPEAKS: &[&str] = &[
    "if ",
    "whether",
    "to avoid",
    "avoid ",
    "prevent",
    "consider",
    "may ",
    "might ",
    "could be",
    "could cause",
    "could lead",
    "warning",
    "e.g.",
];

/// Host memory or a memory limit said to have run out (`Memory quota exceeded`, `killed due to
/// memory pressure`, `out of host memory`, `JavaScript heap out of memory`), with no device word
/// on the line and no advice or condition before the words. `l` is the line in lower case.
pub fn host_limit_exceeded(l: &str) -> bool {
    let at = HOST_RAN_OUT.iter().filter_map(|w| find(l, w)).min();
    let Some(at) = [at, limit_exceeded(l), stopped_for_memory(l)].into_iter().flatten().min() else {
        return false;
    };
    // Advice or a condition before the report makes it one (`If the memory limit is exceeded, …`);
    // after it, it is the report's own advice (`… exceeded with 516 MiB used. Consider
    // increasing the memory limit`).
    !DEVICE_WORDS.iter().any(|w| has(l, w)) && !ONLY_SPEAKS.iter().any(|w| has(&l[..at], w))
}

/// A host allocation's failure in words that name the host's side: the C library's `ENOMEM`
/// (`Cannot allocate memory`), `malloc`, the heap's own allocators (tcmalloc's `(new failed)`,
/// Erlang's `eheap_alloc`), Windows' `ERROR_NOT_ENOUGH_MEMORY` and virtual-memory quota, .NET's
/// `OutOfMemoryException`, R's `cannot allocate vector`, PostgreSQL's `Failed on request of size`.
/// (A bare `out of memory` or `allocation failed` names no side: on a GPU node it is as often the
/// device's, so it is not read here.)
const HOST_ALLOC: &[&str] = &[
    "cannot allocate memory",
    "malloc of size",
    "malloc failed",
    "malloc() failed",
    "outofmemoryexception",
    "not enough memory resources",
    "not enough virtual memory",
    "out of virtual memory",
    "virtual memory exhausted",
    "failed on request of size",
    "run out of ram",
    "cannot allocate vector of size",
    "bytes of memory (of type",
    "tcmalloc: allocation failed",
    "(new failed)",
    "outofmemoryerror()",
    "not enough memory to complete",
    // Kraken 2's database build: `Failed attempt to allocate 761044749164 bytes;`.
    "failed attempt to allocate",
];

/// Words of a line that goes on after the refusal: it falls back, retries, skips or does without.
const GOES_ON: &[&str] = &[
    "fall back",
    "falling back",
    "fallback",
    "retry",
    "retrying",
    "instead",
    "skipping",
    "will use",
    "disabled",
];

/// A logger's debug, info or warning level written in a line whose prefix the parser does not
/// know (syslog's `postgres[1658715]: … DEBUG:  mmap(…) failed`, `level=info`): not a failure.
const QUIET_LEVELS: &[&str] = &[
    "debug:",
    "info:",
    "notice:",
    "warning:",
    "warn:",
    "[debug]",
    "[info]",
    "[warn",
    "level=debug",
    "level=info",
    "level=warn",
];

/// True when a quiet level is written before `at` in `l`.
fn quiet_before(l: &str, at: usize) -> bool {
    QUIET_LEVELS.iter().any(|w| has(&l[..at], w))
}

/// Words of a device's or a graphics API's allocation (the C library's `Cannot allocate memory`
/// from an encoder's or a texture's set-up is the device's refusal passed on).
const GRAPHICS_WORDS: &[&str] = &["device", "nvenc", "nvdec", "d3d", "directx", "opengl", "webgl", "texture"];

/// Words before a failure's words that make the line code or a handler naming the failure
/// (`def handle_outofmemoryexception`, `catch (OutOfMemoryException)`), not a report of one.
const NAMES_IT: &[&str] = &["avoid", "handle", "catch"];

/// A host allocation refused in words that name the host's side (`HOST_ALLOC`) and no rule
/// names (`Out of memory: malloc of size 262144 failed`, `System.OutOfMemoryException`,
/// `eheap_alloc: Cannot allocate 2280657000 bytes of memory (of type "heap")`, `[WinError 8] Not
/// enough memory resources are available`), with no device word, no advice or condition before
/// the words, and no fallback or retry. `l` is the line in lower case. (A line read this way
/// while or right after a GPU failure is that failure's echo: `LogParser` folds it in.)
pub fn host_allocation_failed(l: &str) -> bool {
    let Some(at) = HOST_ALLOC.iter().filter_map(|w| find(l, w)).min() else {
        return false;
    };
    let before = &l[..at];
    !DEVICE_WORDS.iter().chain(GRAPHICS_WORDS).any(|w| has(l, w))
        && !quiet_before(l, at)
        && !ONLY_SPEAKS.iter().chain(NAMES_IT).any(|w| has(before, w))
        && !before.split(|c: char| !c.is_alphanumeric()).any(|w| w == "no" || w == "without")
        && !GOES_ON.iter().any(|w| has(l, w))
}

/// A memory failure's words, in compact form (lower case, no spaces).
const FAILED: &[&str] = &[
    "outofmemory",
    "outofdevicememory",
    "notenoughmemory",
    "notenoughdevicememory",
    "insufficientmemory",
    "insufficientdevicememory",
    "memoryexhausted",
    "memoryisexhausted",
    "failedtoallocate",
    "failedtoalloc",
    "allocatefailed",
    "allocator_failure",
    "out_of_device_memory",
    "unabletoallocate",
    "cannotallocate",
    "can'tallocate",
    "couldnotallocate",
    "couldn'tallocate",
    "allocationfailed",
    "allocationfailure",
    "allocation_failure",
    "failedtocudamalloc",
    "notenoughgpumem",
    "notenoughgpuram",
    "outofvideomemory",
    "out_of_memory",
    "allocationerror",
    "ranoutofmemory",
    "memoryoverflow",
    "memoryisoverflow",
];

/// A device's words, in compact form.
const DEVICE: &[&str] = &[
    "gpu",
    "cuda",
    "vram",
    "devicememory",
    "ondevice",
    "hbm",
    "videomemory",
    "graphicsmemory",
    "vulkan",
    "opencl",
    "rocm",
    "xpu",
    "metal",
    "gl_",
    "device_memory",
    "nvjpeg",
    "cumem",
];

/// Words that make an allocation the host's (pinned or CPU buffers), or a line a fallback,
/// a retry or advice, in compact form.
const NOT_DEVICE_FAILURE: &[&str] = &[
    "host",
    "pinned",
    "cpu",
    "fallingback",
    "fallback",
    "fallsback",
    "retry",
    "retrying",
    "willuse",
    "insteadof",
    "warning",
    "skipping",
    "ifyou",
    "toavoid",
    "avoid",
    "prevent",
    "consider",
    "whether",
    // The kernel's OOM killer naming its victim, whatever the process is called (`Out of memory:
    // Kill process 2700 (DeviceMemory) score 1 or sacrifice child`): host memory.
    "outofmemory:killprocess",
    "outofmemory:killedprocess",
    // Slurm's report of a task its cgroup killed names the node, which may be called `gpu001`.
    "srun:error:",
];

/// A memory failure's words together with a device's on one line (`failed to allocate 2.1 GiB on
/// device`, `GPU allocation failed`, `not enough device memory`), unless the allocation is the
/// host's or the line falls back, retries or advises. `c` is the compact line.
pub fn device_memory_failed(c: &str) -> bool {
    FAILED.iter().any(|w| has(c, w))
        && (DEVICE.iter().any(|w| has(c, w)) || SHORT_DEVICE.iter().any(|(w, inside)| names(c, w, inside)))
        && !NOT_DEVICE_FAILURE.iter().any(|w| has(c, w))
}

/// A device's short names, in compact form, and what before one makes it part of another word:
/// Ascend's `npu` (not inside `input`: `Out of memory while reading input`, a notebook's
/// `<ipython-input-10-…>`), Metal's `mtl` (not inside `html`: a link to a page).
const SHORT_DEVICE: &[(&str, &str)] = &[("npu", "i"), ("mtl", "h")];

/// True when compact text `c` has `word` other than right after `inside`.
fn names(c: &str, word: &str, inside: &str) -> bool {
    c.match_indices(word).any(|(i, _)| !c[..i].ends_with(inside))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any text, any bytes around a limit's name (multi-byte characters right before it):
        /// no panic; a status after a word that names one reads the same wherever it stands.
        #[test]
        fn any_text(pre in "\\PC{0,40}", post in "\\PC{0,40}") {
            let l = format!("{pre}memory limit{post}").to_lowercase();
            let _ = (host_limit_exceeded(&l), killed_by_sigkill(&l), device_memory_failed(&l));
            let line = format!("{} exit code 137", pre.to_lowercase().replace(|c: char| c.is_alphanumeric(), " "));
            prop_assert!(killed_by_sigkill(&line) || NOT_MEMORY_KILL.iter().any(|w| line.contains(w)), "{}", line);
        }
    }

    #[test]
    fn a_device_inside_another_word_is_none() {
        assert!(device_memory_failed("npuoutofmemory.triedtoallocate2.00gib"));
        assert!(device_memory_failed("runtimeerror:[ascend]npu:0outofmemory"));
        assert!(!device_memory_failed("outofmemorywhilereadinginput"));
        assert!(!device_memory_failed(
            "outofmemoryerrortraceback(mostrecentcalllast)<ipython-input-10-14d8a96daa0b>"
        ));
        assert!(device_memory_failed("failedtoallocatemtlbuffer"));
        assert!(!device_memory_failed("outofmemory,seehttps://example.org/memory.html"));
    }

    #[test]
    fn sigkill_in_other_words() {
        for l in [
            "mpirun noticed that process rank 7 with pid 0 on node h exited on signal 9 (killed).",
            "=   killed by signal: 9 (killed)",
            "nvcc error   : 'cudafe++' died due to signal 9 (kill signal)",
            "process 'forkpoolworker-31' pid:90 exited with 'signal 9 (sigkill)'",
            "process 0 exit with status code 137.",
            "failed: [code=137] obj/foo.o",
            "the job finished with exit code 137",
            "subprocess returned -9",
            "worker exited, returncode=-9",
            "process exited with code: exitfailure (-9) (this may indicate out of memory)",
            "runtimeerror: neuronx-cc failed with -9",
            "error: task failed (status 137)",
            "--- sigchld {si_signo=sigchld, si_code=cld_killed, si_status=sigkill} ---",
        ] {
            assert!(killed_by_sigkill(l), "{l}");
        }
        for l in [
            "exitcode:137,",
            "run `kill -9 <pid>` to stop it",
            "worker timeout (pid:12), sending sigkill",
            "slurmstepd: error: *** job 12 cancelled at 2024-01-01 due to time limit *** sigkill",
            "exit code 1370",
            "exit code 137.5",
            "epoch 137 loss 0.2",
            "signal 91 received",
            "if the process gets sigkill, raise the limit",
            "processed 9 samples, status ok",
            "installing signal handlers for sigint, sigkill",
            "exit code 137 means the container was killed",
            "[remoteopenaiserver] 8 process(es) still in pgid 707 after sigkill: [1485, 1486]",
            "* fix kill signal on windows",
            "  - send kill signal to child processes on shutdown",
        ] {
            assert!(!killed_by_sigkill(l), "{l}");
        }
    }

    #[test]
    fn host_limit_in_other_words() {
        for l in [
            "heroku[worker.1]: error r15 (memory quota vastly exceeded)",
            "07-14 12:31:55.677 29475 29542 d unity   : could not allocate memory: system out of memory!",
            "job exceeded a memory resource limit (vmem, pvmem, etc.). job was aborted",
            "message from debugger: terminated due to memory issue",
            "task was killed due to memory pressure",
            "error: out of host memory",
            "job 124452549 has exceeded memory allocation",
            "the step exceeds the job's memory limit",
            "app[web.1]: process exceeded its memory quota, stopping",
            "memory limit of 512 mib exceeded with 516 mib used. consider increasing the memory limit",
            "lost executor 9: container killed by yarn for exceeding memory limits. consider boosting x",
            "1050981.0 dbrown 11/7 23:48 job in status 2 put on hold by system_periodic_hold due to memory usage 3000000.",
            "fatal error: reached heap limit allocation failed - javascript heap out of memory",
            "memoryerror: engine process terminated. this is most likely due to system running out of memory.",
        ] {
            assert!(host_limit_exceeded(l), "{l}");
        }
        for l in [
            "gpu memory limit exceeded",
            "if the memory limit exceeded, the pod is restarted",
            "warning: memory budget exceeded, spilling to disk",
            "to avoid being killed due to memory, lower the batch",
            "this could cause the job to be killed due to memory",
            "memory limit: 16gi (not exceeded)",
            "if the memory limit of the pod is exceeded, it restarts",
            "memory usage is high due to memory usage of the cache",
            "memory allocation: 16 gib",
            "überschritten: ein sehr langer präfix memory limit",
        ] {
            assert!(!host_limit_exceeded(l), "{l}");
        }
    }

    #[test]
    fn host_allocation_in_other_words() {
        for l in [
            "arrow/result.cc:28: valueordie called on an error: out of memory: malloc of size 262144 failed",
            "system.outofmemoryexception: exception of type 'system.outofmemoryexception' was thrown.",
            "eheap_alloc: cannot allocate 2280657000 bytes of memory (of type \"heap\").",
            "oserror: [winerror 8] not enough memory resources are available to process this command",
            "detail:  failed on request of size 16 in memory context \"toptransactioncontext\".",
            "error: cannot allocate vector of size 38.6 gb",
            "tcmalloc_policy.h:100] unable to allocate (new failed) 12884901888 @ 0x6441fc8",
            "oserror: [errno 12] cannot allocate memory",
            "error: outofmemoryerror()",
            "pkg: there is not enough memory to complete the requested operation.  at least",
            "failed attempt to allocate 761044749164 bytes;",
        ] {
            assert!(host_allocation_failed(l), "{l}");
        }
        for l in [
            "out of memory",
            "error: out of memory",
            "out of memory errors: 0",
            "failed to allocate 7.63",
            "warning: malloc failed, retrying with a smaller buffer",
            "if you see cannot allocate memory, raise vm.max_map_count",
            "ffmpeg: hwupload: cannot allocate memory for the nvenc surface",
            "def handle_outofmemoryexception(exc):",
            "postgres[1658715]: 2021-06-09 debug:  mmap(150994944) with map_hugetlb failed, huge pages disabled: cannot allocate memory",
        ] {
            assert!(!host_allocation_failed(l), "{l}");
        }
    }

    #[test]
    fn device_failure_in_other_words() {
        for c in [
            "error:failedtoallocate2.10gibondevice0",
            "fatal:gpuallocationfailed(size=536870912)",
            "notenoughdevicememorytorunthisgraph",
            "e:vramexhausted:memoryexhausted",
            "outofvideomemorytryingtoallocateatexture!makesureyourvideocardhastheminimumrequiredmemory",
            "[.webgl-000000000e0267c0]gl_out_of_memory:errorallocatingtexture2d.",
            "notenoughgpuramfree(3686mbfree,needatleast4122mb)",
            "[tdrv:dmem_alloc]failedtoallocdevicememory:4194304",
            "chiperror:hiperrortbd(ze_result_error_out_of_device_memory)inchipbackendlevel0.cc:1374",
            "nvjpegerror\"5\":nvjpeg_status_allocator_failure",
            "[hami-coreerror(pid:7allocator.c:115)]:cumemoryallocatefailedres=2",
        ] {
            assert!(device_memory_failed(c), "{c}");
        }
        for c in [
            "failedtoallocatepinnedhostmemory,fallingbacktopageable",
            "gpuoutofmemory,retryingwithsmallerbatch",
            "toavoidrunningoutofgpumemory,setmax_split_size_mb",
            "failedtoallocate64mbofcpumemory",
            "cudaavailable:true",
        ] {
            assert!(!device_memory_failed(c), "{c}");
        }
    }
}
