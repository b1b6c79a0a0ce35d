//! The `oomlens-agent` binary's configuration surface and generated files: the sample
//! `deploy/systemd/agent.toml` parses and lists every key, `print-config` / `run --print-config`
//! layer file, `OOMLENS_<SECTION>__<KEY>` variables and flags and refuse bad input, the systemd unit
//! keeps its hardening, the shell completions and man pages generate, and
//! `parse` into a closed pipe stops quietly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use oomlens_devkit::clitest::{command, failed, ok, repo_root, toml_keys};

fn bin() -> Command {
    command(env!("CARGO_BIN_EXE_oomlens-agent"))
}

fn repo() -> PathBuf {
    repo_root(env!("CARGO_MANIFEST_DIR"))
}

/// Dotted keys of a TOML document (`uplink.collectors`); `simulator.mix` counts as one key.
fn keys(doc: &toml::Table) -> Vec<String> {
    toml_keys(doc, &["simulator.mix"])
}

#[test]
fn sample_config_parses_and_lists_every_key() {
    let sample = repo().join("deploy/systemd/agent.toml");
    let printed = ok(bin().args(["run", "--print-config", "--config"]).arg(&sample).output().unwrap());
    let effective: toml::Table = toml::from_str(&printed).unwrap();
    assert_eq!(effective["spool"]["dir"].as_str(), Some("/var/lib/oomlens/spool"));
    assert_eq!(effective["uplink"]["collectors"].as_array().map(Vec::len), Some(2));
    assert_eq!(effective["hook"]["mode"].as_integer(), Some(0o660));
    // Every key of the defaults is in the sample, set or (for keys without a default) commented.
    let defaults: toml::Table = toml::from_str(&ok(bin().arg("print-config").output().unwrap())).unwrap();
    let text = std::fs::read_to_string(&sample).unwrap();
    let file: toml::Table = toml::from_str(&text).unwrap();
    let in_file = keys(&file);
    let mut all = keys(&defaults);
    all.extend(["agent.node", "agent.agent_id", "simulator.log_dir"].map(str::to_owned));
    let missing: Vec<_> = all
        .iter()
        .filter(|k| {
            let field = k.rsplit('.').next().unwrap();
            !in_file.contains(k) && !text.contains(&format!("#{field} = "))
        })
        .collect();
    assert!(missing.is_empty(), "keys missing from deploy/systemd/agent.toml: {missing:?}");
}

#[test]
fn layers_file_environment_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.toml");
    std::fs::write(&path, "[uplink]\nbatch_max_rows = 10\n[agent]\ncluster = 'file'\n").unwrap();
    let out = ok(bin()
        .args(["print-config", "--config"])
        .arg(&path)
        .env("OOMLENS_UPLINK__BATCH_MAX_ROWS", "1234")
        .env("OOMLENS_AGENT__CLUSTER", "env")
        .env("OOMLENS_RECORDER__WINDOW_S", "60")
        .env("OOMLENS_CLUSTER", "flag-env")
        .output()
        .unwrap());
    let cfg: toml::Table = toml::from_str(&out).unwrap();
    assert_eq!(cfg["uplink"]["batch_max_rows"].as_integer(), Some(1234));
    assert_eq!(cfg["recorder"]["window_s"].as_integer(), Some(60));
    assert_eq!(cfg["agent"]["cluster"].as_str(), Some("flag-env"), "flags (and their variables) win");
    let out = ok(bin()
        .args(["run", "--print-config", "--cluster", "flag", "--config"])
        .arg(&path)
        .env("OOMLENS_AGENT__CLUSTER", "env")
        .output()
        .unwrap());
    assert!(out.contains("cluster = \"flag\""), "{out}");

    let err = failed(bin().arg("print-config").env("OOMLENS_UPLINK__COLECTORS", "a:1").output().unwrap());
    assert!(err.contains("OOMLENS_UPLINK__COLECTORS") && err.contains("colectors"), "{err}");
    let err = failed(bin().arg("print-config").env("OOMLENS_SOURCE__INTERVAL_MS", "soon").output().unwrap());
    assert!(err.contains("not an integer"), "{err}");
    std::fs::write(&path, "[uplink]\nbatch_max_rows = 10\nbogus = 1\n").unwrap();
    let err = failed(bin().args(["print-config", "--config"]).arg(&path).output().unwrap());
    assert!(err.contains("bogus") && err.contains("line 3"), "{err}");
    std::fs::write(&path, "[recorder]\nhot_threshold_pct = 150.0\n").unwrap();
    let err = failed(bin().args(["print-config", "--config"]).arg(&path).output().unwrap());
    assert!(err.contains("hot_threshold_pct"), "{err}");
    std::fs::write(&path, "[spool]\ndir = '/var/lib/oomlens/spool'\nmax_bytes = 10\n").unwrap();
    let err = failed(bin().args(["print-config", "--config"]).arg(&path).output().unwrap());
    assert!(err.contains("spool.max_bytes"), "{err}");
}

#[test]
fn systemd_unit_is_hardened() {
    let unit = std::fs::read_to_string(repo().join("deploy/systemd/oomlens-agent.service")).unwrap();
    let lines: Vec<&str> = unit.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    for want in [
        "User=oomlens",
        "ExecStart=/usr/bin/oomlens-agent run --config /etc/oomlens/agent.toml",
        "EnvironmentFile=-/etc/default/oomlens-agent",
        "StateDirectory=oomlens",
        "RuntimeDirectory=oomlens",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=CAP_SYSLOG",
        "AmbientCapabilities=CAP_SYSLOG",
        "DevicePolicy=closed",
        "DeviceAllow=char-nvidia-frontend rw",
        "DeviceAllow=/dev/kmsg r",
        "ReadWritePaths=/var/lib/oomlens /run/oomlens",
        "ProtectKernelLogs=no",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
        "SystemCallFilter=@system-service",
    ] {
        assert!(lines.contains(&want), "oomlens-agent.service lacks `{want}`");
    }
    for forbidden in ["PrivateDevices=yes", "ProtectKernelLogs=yes", "DynamicUser=yes"] {
        assert!(!lines.contains(&forbidden), "`{forbidden}` would break NVML, /dev/kmsg or the spool owner");
    }
}

#[test]
fn completions_and_man_pages_generate() {
    let dir = oomlens_devkit::clitest::assert_completions_and_man(
        env!("CARGO_BIN_EXE_oomlens-agent"),
        "oomlens-agent",
        "print-config",
    );
    let run = std::fs::read_to_string(dir.path().join("oomlens-agent-run.1")).unwrap();
    assert!(run.contains("\\-\\-collector") && run.contains("\\-\\-print\\-config"), "{run}");
}

#[test]
fn every_metric_is_documented_in_operations_md() {
    let mut registry = prometheus_client::registry::Registry::default();
    let _metrics = oomlens_agent::metrics::AgentMetrics::register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let names = oomlens_devkit::clitest::assert_metrics_documented(
        &repo(),
        &text,
        "agent/src/metrics.rs",
        "oomlens_agent",
    );
    assert!(names.len() > 30, "{names:?}");
}

/// `oomlens-agent parse … | head -1`: the reader closing the pipe ends the command quietly and
/// successfully, without an error or a backtrace.
#[test]
fn parse_into_a_closed_pipe_stops_quietly() {
    use std::io::{BufRead as _, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kern.log");
    let line = "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, Ch 00000008\n";
    std::fs::write(&log, line.repeat(50_000)).unwrap();
    let mut child = bin()
        .args(["parse", log.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    // The reader (and the pipe) is gone now.
    let out = child.wait_with_output().unwrap();
    assert!(first.contains("Xid 31"), "{first}");
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Off a terminal, log lines carry no ANSI colour; `--log-format json` writes one JSON object per
/// line; and a user error is `error: …` with its causes — exit status 1, never a backtrace, even
/// with `RUST_BACKTRACE` set.
#[test]
fn logs_are_plain_or_json_and_user_errors_have_no_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.toml");
    // The former key name: loading it logs a warning.
    std::fs::write(&path, "[uplink]\nspool_max_bytes = 100000000\n").unwrap();
    let warning = "uplink.spool_max_bytes is the former name of spool.max_bytes";

    let out =
        bin().args(["print-config", "--config"]).arg(&path).env("OOMLENS_LOG", "warn").output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(warning) && stderr.contains("WARN"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "ANSI escape codes off a terminal: {stderr:?}");

    let out = bin()
        .args(["--log-format", "json", "print-config", "--config"])
        .arg(&path)
        .env("OOMLENS_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> =
        stderr.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert_eq!(lines[0]["level"], "WARN");
    assert!(lines[0]["fields"]["message"].as_str().unwrap().contains(warning), "{stderr}");
    assert!(lines[0]["timestamp"].is_string(), "{stderr}");
    // The variable does the same as the flag.
    let out = bin()
        .args(["print-config", "--config"])
        .arg(&path)
        .env("OOMLENS_LOG", "warn")
        .env("OOMLENS_LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert!(String::from_utf8(out.stderr).unwrap().starts_with('{'));
    let stderr = failed(bin().args(["--log-format", "yaml", "print-config"]).output().unwrap());
    assert!(stderr.contains("text or json"), "{stderr}");

    for backtrace in ["1", "full"] {
        let out = bin()
            .args(["print-config", "--config"])
            .arg(dir.path().join("missing.toml"))
            .env("RUST_BACKTRACE", backtrace)
            .env("RUST_LIB_BACKTRACE", backtrace)
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(stderr.contains("missing.toml"), "{stderr}");
        assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
        assert!(stderr.lines().count() <= 4, "{stderr}");
    }
}
