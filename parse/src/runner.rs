//! Test runners' own lines: the part of a line that names a test, which is not a failure's text.
//!
//! CI logs list tests by name, and tests of memory handling are named for what they test:
//! `tests/test_worker.py::test_stop_uses_sigterm_before_sigkill PASSED`,
//! `test_out_of_memory (__main__.TestCuda) ... ok`, `[ RUN      ] AllocatorTest.OutOfMemory`,
//! `--- PASS: TestOOMKill (0.01s)`. Read as text, such a name says `sigkill` or `out of memory`
//! as plainly as a failure does. [`reason`] recognises the result and progress lines of the common
//! runners (pytest, unittest, GoogleTest, cargo test, go test, Jest / Mocha, CTest, Maven
//! Surefire) and gives back only what in them is the program's own text: pytest's short summary
//! `FAILED tests/test_x.py::test_y - MemoryError` keeps its reason (`MemoryError`); every other
//! runner line keeps nothing. A traceback or output a failing test printed is not a runner line
//! and is read as usual.

use super::text::has;

/// Result words of pytest (verbose lines and the short summary).
const PYTEST_RESULTS: &[&str] = &["PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"];

/// Results of unittest's and cargo test's `name ... result` lines (cargo: `ok`, `FAILED`,
/// `ignored`; unittest: `ok`, `FAIL`, `ERROR`, `skipped 'why'`, `expected failure`, `unexpected
/// success`).
const DOTTED_RESULTS: &[&str] =
    &["ok", "FAIL", "FAILED", "ERROR", "ignored", "skipped", "expected failure", "unexpected success"];

/// GoogleTest's bracketed tags (`[ RUN      ]`, `[       OK ]`, `[  FAILED  ]`, …).
const GTEST_TAGS: &[&str] = &["RUN", "OK", "FAILED", "SKIPPED", "PASSED", "DISABLED"];

/// go test's lines about one test.
const GO_TEST: &[&str] =
    &["=== RUN ", "=== PAUSE ", "=== CONT ", "=== NAME ", "--- PASS: ", "--- FAIL: ", "--- SKIP: "];

/// Marks Jest, Mocha and similar runners put before a test's name.
const MARKS: &[char] = &['✓', '✔', '✕', '√'];

/// When `body` (a line without its logger's prefix) is a test runner's line about a test, the
/// part of it that is the program's own text: pytest's failure reason after ` - ` (`FAILED
/// a.py::test_b - MemoryError` gives `MemoryError`), else the empty string. `None` when it is no
/// such line.
pub fn reason(body: &str) -> Option<&str> {
    let t = body.trim();
    let first = *t.as_bytes().first()?;
    // Every line is asked: each grammar is tried only when its cheapest mark is there.
    if has(t, ".py::")
        && let Some(why) = pytest(t)
    {
        return Some(why);
    }
    let named = match first {
        b'[' => gtest(t) || surefire(t),
        b'=' | b'-' => GO_TEST.iter().any(|p| t.starts_with(p)),
        b'0'..=b'9' => has(t, " Test ") && ctest(t),
        b'F' | b'E' => unittest_header(t),
        b'R' | b'T' => surefire(t),
        _ => !first.is_ascii() && marked(t),
    };
    (named || (has(t, " ...") && named_dotted(t))).then_some("")
}

/// A pytest node id: a test file's path, `::`, the test (`tests/test_x.py::TestY::test_z[p]`).
fn node_id(word: &str) -> bool {
    word.find(".py::").is_some_and(|i| i > 0 && word.len() > i + 5)
}

/// pytest's verbose line (`a.py::test_b PASSED [ 12%]`, with xdist `[gw0] [ 12%] PASSED
/// a.py::test_b`), its node line printed before a test's output (`a.py::test_b `), and its short
/// summary (`FAILED a.py::test_b - reason`), which keeps the reason.
fn pytest(t: &str) -> Option<&str> {
    let mut words = t.split_whitespace().peekable();
    // xdist's worker and progress tags.
    while words.next_if(|w| w.starts_with('[') || w.ends_with("%]")).is_some() {}
    let first = words.next()?;
    if node_id(first) {
        return Some("");
    }
    if PYTEST_RESULTS.contains(&first) && words.next().is_some_and(node_id) {
        return Some(t.split_once(" - ").map_or("", |(_, why)| why.trim()));
    }
    None
}

/// unittest's (`test_x (module.Class) ... ok`) and cargo test's (`test a::b ... ok`) result lines.
fn named_dotted(t: &str) -> bool {
    let Some((name, result)) = t.rsplit_once(" ... ") else {
        // unittest prints `name ... ` first and the result after a test's own output.
        return t.ends_with(" ...") && unittest_name(t.trim_end_matches(" ...")).is_some();
    };
    let result = result.trim();
    let known = DOTTED_RESULTS.iter().any(|r| result == *r || result.starts_with(&format!("{r} ")));
    let cargo = name.strip_prefix("test ").is_some_and(|n| {
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"_:-".contains(&b))
    });
    known && (cargo || unittest_name(name).is_some())
}

/// A unittest test's name: `test…` and its class in parentheses (`test_x (pkg.mod.Class)`,
/// Python 3.11's `test_x (pkg.mod.Class.test_x)`).
fn unittest_name(t: &str) -> Option<()> {
    let (name, class) = t.split_once(" (")?;
    let class = class.strip_suffix(')')?;
    let word =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    (name.starts_with("test") && word(name) && word(class)).then_some(())
}

/// unittest's header of a failed test's report (`FAIL: test_x (module.Class)`), whose traceback
/// follows and is read as usual.
fn unittest_header(t: &str) -> bool {
    ["FAIL: ", "ERROR: "].iter().any(|h| t.strip_prefix(h).is_some_and(|n| unittest_name(n).is_some()))
}

/// GoogleTest's tagged lines: a ten-character bracket holding one tag (`[ RUN      ]`).
fn gtest(t: &str) -> bool {
    t.strip_prefix('[')
        .and_then(|r| r.get(..11))
        .and_then(|r| r.strip_suffix(']'))
        .is_some_and(|tag| GTEST_TAGS.contains(&tag.trim()))
}

/// A Jest or Mocha result: a check or cross mark, then the test's title.
fn marked(t: &str) -> bool {
    let mut chars = t.chars();
    chars.next().is_some_and(|c| MARKS.contains(&c)) && chars.next() == Some(' ')
}

/// CTest's result line: `12/40 Test #12: name ....   Passed    0.01 sec`.
fn ctest(t: &str) -> bool {
    let Some((count, rest)) = t.split_once(' ') else {
        return false;
    };
    let fraction = count.split_once('/').is_some_and(|(a, b)| {
        !a.is_empty() && !b.is_empty() && a.bytes().chain(b.bytes()).all(|b| b.is_ascii_digit())
    });
    fraction && rest.trim_start().starts_with("Test ") && rest.contains('#')
}

/// Maven Surefire's lines about a test class (`Running org.x.OutOfMemoryTest`, `Tests run: 3,
/// Failures: 0, … - in org.x.OutOfMemoryTest`).
fn surefire(t: &str) -> bool {
    let t = t.strip_prefix("[INFO] ").or_else(|| t.strip_prefix("[ERROR] ")).unwrap_or(t);
    if t.starts_with("Tests run: ") {
        return true;
    }
    t.strip_prefix("Running ").is_some_and(|class| {
        class.contains('.')
            && !class.contains(' ')
            && (class.ends_with("Test") || class.ends_with("Tests") || class.ends_with("IT"))
    })
}

#[cfg(test)]
mod tests {
    use super::reason;

    #[test]
    fn runner_lines_keep_only_a_reason() {
        let cases: &[(&str, Option<&str>)] = &[
            ("tests/test_process.py::test_kill_with_sigkill PASSED                     [ 12%]", Some("")),
            ("tests/test_oom.py::TestOom::test_out_of_memory[cuda-2] FAILED", Some("")),
            ("[gw1] [ 40%] PASSED tests/test_cuda.py::test_cuda_out_of_memory ", Some("")),
            ("tests/test_cuda.py::test_cuda_out_of_memory ", Some("")),
            ("FAILED tests/test_memory.py::test_alloc - MemoryError", Some("MemoryError")),
            (
                "FAILED tests/t.py::test_x - torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                Some("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
            ),
            ("ERROR tests/test_gpu.py::test_setup", Some("")),
            ("test_cuda_out_of_memory (__main__.TestCuda) ... ok", Some("")),
            ("test_out_of_memory_retry (__main__.TestCuda.test_out_of_memory_retry) ... ok", Some("")),
            ("test_oom_killer_exit_code_137 (tests.test_k.T) ... skipped 'requires cgroup v2'", Some("")),
            ("test_caching_allocator_oom (__main__.TestCuda) ...", Some("")),
            ("FAIL: test_oom_is_reported (tests.test_report.ReportTest)", Some("")),
            ("test oom::tests::reports_sigkill ... ok", Some("")),
            ("[ RUN      ] AllocatorTest.OutOfMemory", Some("")),
            ("[       OK ] AllocatorTest.OutOfMemory (0 ms)", Some("")),
            ("[  FAILED  ] AllocatorTest.OutOfMemory (3 ms)", Some("")),
            ("--- PASS: TestOOMKillReported (0.01s)", Some("")),
            ("=== RUN   TestExitCode137", Some("")),
            ("✓ reports an out of memory error (5 ms)", Some("")),
            ("  12/40 Test #12: cuda_out_of_memory_test ..........   Passed    0.01 sec", Some("")),
            ("Running org.example.OutOfMemoryTest", Some("")),
            (
                "[INFO] Tests run: 2, Failures: 0, Errors: 0, Skipped: 0 - in org.example.OutOfMemoryTest",
                Some(""),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(reason(line), *want, "{line}");
        }
    }

    #[test]
    fn failures_are_not_runner_lines() {
        for line in [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
            "c10::OutOfMemoryError: CUDA out of memory.",
            "terminate called after throwing an instance of 'std::bad_alloc'",
            "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. ",
            "ERROR: Out of memory",
            "[ERROR] Out of memory",
            "[OK] model loaded",
            "Killed",
            "test.py: line 12: 4242 Killed                  python train.py",
            "  File \"tests/test_x.py\", line 3, in test_y",
            "E       MemoryError",
            "Running python train.py ...",
            "srun: error: node1: task 0: Out Of Memory",
            "1/2 of the GPU memory is used",
            "× Cannot allocate memory",
        ] {
            assert_eq!(reason(line), None, "{line}");
        }
    }
}
