//! Helpers for the tests that run the workspace's binaries (`oomlens-agent`, `oomlens-collector`,
//! `oomlens`) and check their configuration surface and metrics against the repository's docs.
//! Test-only code: the helpers panic on failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A command for the binary at `path` with no `OOMLENS_*` variable from the developer's shell and
/// errors-only logging.
pub fn command(path: &str) -> Command {
    let mut cmd = Command::new(path);
    for (k, _) in std::env::vars() {
        if k.starts_with("OOMLENS_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("OOMLENS_LOG", "error");
    cmd
}

/// The repository root: the nearest directory above `manifest_dir` (a crate's
/// `CARGO_MANIFEST_DIR`) that holds `Cargo.lock`.
pub fn repo_root(manifest_dir: &str) -> PathBuf {
    let mut dir = Path::new(manifest_dir).to_owned();
    while !dir.join("Cargo.lock").exists() {
        assert!(dir.pop(), "no Cargo.lock above {manifest_dir}");
    }
    dir
}

/// Standard output of a command that must succeed.
pub fn ok(out: Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Standard error of a command that must fail.
pub fn failed(out: Output) -> String {
    assert!(!out.status.success(), "unexpectedly succeeded: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8(out.stderr).unwrap()
}

/// Dotted keys of a TOML document (`uplink.collectors`); the tables named in `leaves` count as one
/// key each (maps of free-form keys, e.g. `simulator.mix`).
pub fn toml_keys(doc: &toml::Table, leaves: &[&str]) -> Vec<String> {
    fn walk(prefix: &str, t: &toml::Table, leaves: &[&str], out: &mut Vec<String>) {
        for (k, v) in t {
            let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            match v {
                toml::Value::Table(_) if leaves.contains(&key.as_str()) => out.push(key),
                toml::Value::Table(t) => walk(&key, t, leaves, out),
                _ => out.push(key),
            }
        }
    }
    let mut out = Vec::new();
    walk("", doc, leaves, &mut out);
    out
}

/// Checks the metrics of one registry against the repository: `encoded` is the registry's text
/// exposition, `source` the file whose `register("<name>", …)` calls name the families (those
/// without a child yet are not encoded), `prefix` the registry's prefix. Every family must be
/// described in `docs/operations.md`, and every metric of this prefix the alert rules use must
/// exist (counters end in `_total`, histograms in `_bucket`). Returns the family names.
pub fn assert_metrics_documented(repo: &Path, encoded: &str, source: &str, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = encoded
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    let text = std::fs::read_to_string(repo.join(source)).unwrap();
    names.extend(
        text.split("register(")
            .skip(1)
            .filter_map(|rest| rest.trim_start().strip_prefix('"'))
            .filter_map(|rest| rest.split('"').next())
            .map(|name| format!("{prefix}_{name}")),
    );
    names.sort();
    names.dedup();
    let docs = std::fs::read_to_string(repo.join("docs/operations.md")).unwrap();
    let missing: Vec<_> = names.iter().filter(|n| !docs.contains(&format!("`{n}"))).collect();
    assert!(missing.is_empty(), "{prefix} metrics not described in docs/operations.md: {missing:?}");
    let alerts = std::fs::read_to_string(repo.join("deploy/prometheus/alerts.yaml")).unwrap();
    let used: Vec<&str> = alerts
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(&format!("{prefix}_")))
        .collect();
    assert!(!used.is_empty(), "no alert rule uses a {prefix} metric");
    for w in used {
        let base = w.strip_suffix("_total").or_else(|| w.strip_suffix("_bucket")).unwrap_or(w);
        assert!(names.iter().any(|n| n == base), "alerts.yaml uses unknown metric {w}");
    }
    names
}

/// Checks the generated files of the binary at `path`, called `name`: shell completions for every
/// shell mention it and its subcommand `sub`; `man` prints its page; `man --out-dir` writes one page
/// per command (`<name>-<sub>.1` among them). Returns the directory of the written pages.
pub fn assert_completions_and_man(path: &str, name: &str, sub: &str) -> tempfile::TempDir {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = ok(command(path).args(["completions", shell]).output().unwrap());
        assert!(out.contains(name) && out.contains(sub), "{name} {shell}: {out}");
    }
    let page = ok(command(path).arg("man").output().unwrap());
    assert!(page.contains(&format!(".TH {name} 1")), "{page}");
    let dir = tempfile::tempdir().unwrap();
    ok(command(path).args(["man", "--out-dir"]).arg(dir.path()).output().unwrap());
    for page in [format!("{name}.1"), format!("{name}-{sub}.1")] {
        let text = std::fs::read_to_string(dir.path().join(&page)).unwrap();
        assert!(text.contains(".SH"), "{page}");
    }
    dir
}
