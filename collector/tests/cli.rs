//! The `oomlens-collector` binary's configuration surface and generated files: the
//! sample `deploy/systemd/collector.toml` parses and lists every key, `print-config` /
//! `serve --print-config` layer file, `OOMLENS_<SECTION>__<KEY>` variables and flags, hide the
//! password and refuse bad input, the systemd unit keeps its hardening, and the shell completions
//! and man pages generate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use oomlens_devkit::clitest::{command, failed, ok, repo_root, toml_keys};

fn bin(_name: &str) -> Command {
    command(env!("CARGO_BIN_EXE_oomlens-collector"))
}

fn repo() -> PathBuf {
    repo_root(env!("CARGO_MANIFEST_DIR"))
}

fn keys(doc: &toml::Table) -> Vec<String> {
    toml_keys(doc, &[])
}

#[test]
fn sample_config_parses_and_lists_every_key() {
    let sample = repo().join("deploy/systemd/collector.toml");
    let printed = ok(bin("oomlens-collector")
        .args(["serve", "--print-config", "--config"])
        .arg(&sample)
        .output()
        .unwrap());
    let effective: toml::Table = toml::from_str(&printed).unwrap();
    assert_eq!(effective["clickhouse"]["url"].as_str(), Some("http://clickhouse.example:8123"));
    assert_eq!(effective["telemetry"]["listen"].as_str(), Some("0.0.0.0:9102"));
    let defaults: toml::Table =
        toml::from_str(&ok(bin("oomlens-collector").arg("print-config").output().unwrap())).unwrap();
    let file: toml::Table = toml::from_str(&std::fs::read_to_string(&sample).unwrap()).unwrap();
    let in_file = keys(&file);
    let mut all = keys(&defaults);
    all.push("telemetry.listen".to_owned());
    let missing: Vec<_> = all.iter().filter(|k| !in_file.contains(k)).collect();
    assert!(missing.is_empty(), "keys missing from deploy/systemd/collector.toml: {missing:?}");
}

#[test]
fn layers_file_environment_and_flags_and_hides_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("collector.toml");
    std::fs::write(&path, "[clickhouse]\nurl = 'http://file:8123'\ninsert_max_rows = 10\n").unwrap();
    let out = ok(bin("oomlens-collector")
        .args(["print-config", "--config"])
        .arg(&path)
        .env("OOMLENS_CLICKHOUSE__INSERT_MAX_ROWS", "5000")
        .env("OOMLENS_CLICKHOUSE__PASSWORD", "s3cret")
        .env("OOMLENS_CLICKHOUSE__URL", "http://env:8123")
        .env("OOMLENS_CLICKHOUSE_URL", "http://flag-env:8123")
        .env("OOMLENS_COLLECTOR__MAX_MEMORY_BYTES", "1073741824")
        .output()
        .unwrap());
    let cfg: toml::Table = toml::from_str(&out).unwrap();
    assert_eq!(cfg["clickhouse"]["insert_max_rows"].as_integer(), Some(5000));
    assert_eq!(cfg["clickhouse"]["url"].as_str(), Some("http://flag-env:8123"), "flags win");
    assert_eq!(cfg["clickhouse"]["password"].as_str(), Some("<redacted>"));
    assert!(!out.contains("s3cret"));
    // Half of what the base leaves goes to connections (384 KiB each), the rest to frames in
    // flight at 6 heap bytes per wire byte.
    let available = (1u64 << 30) - (96 << 20);
    let connections = available / 2 / (384 << 10);
    assert_eq!(cfg["collector"]["max_connections"].as_integer(), Some(connections as i64));
    let derived = (available - connections * (384 << 10)) / 6;
    assert_eq!(cfg["collector"]["max_bytes_in_flight"].as_integer(), Some(derived as i64));
    let out = ok(bin("oomlens-collector")
        .args(["serve", "--print-config", "--listen", "127.0.0.1:5000", "--allowed-cluster", "a,b"])
        .env("OOMLENS_COLLECTOR__LISTEN", "0.0.0.0:1")
        .output()
        .unwrap());
    assert!(out.contains("listen = \"127.0.0.1:5000\"") && out.contains("allowed_clusters = ["), "{out}");

    let err = failed(
        bin("oomlens-collector")
            .arg("print-config")
            .env("OOMLENS_CLICKHOUSE__URLL", "http://x")
            .output()
            .unwrap(),
    );
    assert!(err.contains("OOMLENS_CLICKHOUSE__URLL") && err.contains("urll"), "{err}");
    std::fs::write(&path, "[collector]\nlisten_addr = '0.0.0.0:1'\n").unwrap();
    let err =
        failed(bin("oomlens-collector").args(["print-config", "--config"]).arg(&path).output().unwrap());
    assert!(err.contains("listen_addr") && err.contains("line 2"), "{err}");
    std::fs::write(&path, "[clickhouse]\ndatabase = 'a;DROP'\n").unwrap();
    let err =
        failed(bin("oomlens-collector").args(["print-config", "--config"]).arg(&path).output().unwrap());
    assert!(err.contains("clickhouse.database"), "{err}");
    let err = failed(
        bin("oomlens-collector")
            .args(["serve", "--print-config", "--allowed-cluster", ","])
            .output()
            .unwrap(),
    );
    assert!(err.contains("allowed_clusters") || err.contains("--allowed-cluster"), "{err}");
    let out = ok(bin("oomlens-collector")
        .args(["serve", "--print-config", "--alertmanager-url", "http://am-0:9093,http://am-1:9093"])
        .env("OOMLENS_ALERTS__ALERTMANAGER_URLS", "http://env:9093")
        .output()
        .unwrap());
    let cfg: toml::Table = toml::from_str(&out).unwrap();
    let urls: Vec<&str> =
        cfg["alerts"]["alertmanager_urls"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(urls, ["http://am-0:9093", "http://am-1:9093"], "the flag wins");
    let err = failed(
        bin("oomlens-collector").args(["print-config", "--alertmanager-url", "am:9093"]).output().unwrap(),
    );
    assert!(err.contains("alerts.alertmanager_urls[0]") && err.contains("http://"), "{err}");
}

#[test]
fn systemd_unit_is_hardened() {
    let unit = std::fs::read_to_string(repo().join("deploy/systemd/oomlens-collector.service")).unwrap();
    let lines: Vec<&str> = unit.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    for want in [
        "User=oomlens",
        "ExecStart=/usr/bin/oomlens-collector serve --config /etc/oomlens/collector.toml",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "EnvironmentFile=-/etc/default/oomlens-collector",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "AmbientCapabilities=",
        "DevicePolicy=closed",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
        "SystemCallFilter=@system-service",
    ] {
        assert!(lines.contains(&want), "oomlens-collector.service lacks `{want}`");
    }
    assert!(!lines.iter().any(|l| l.starts_with("ReadWritePaths=")), "the collector writes nothing");
}

#[test]
fn completions_and_man_pages_generate() {
    oomlens_devkit::clitest::assert_completions_and_man(
        env!("CARGO_BIN_EXE_oomlens-collector"),
        "oomlens-collector",
        "print-config",
    );
}

#[test]
fn every_metric_is_documented_in_operations_md() {
    let mut registry = prometheus_client::registry::Registry::default();
    let stats = std::sync::Arc::new(oomlens_collector::clickhouse::sink::SinkStats::default());
    let _metrics = oomlens_collector::metrics::CollectorMetrics::register(&mut registry, Some(stats));
    let alerts = oomlens_collector::metrics::AlertMetrics::register(&mut registry);
    alerts.init_target("alertmanager");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let names = oomlens_devkit::clitest::assert_metrics_documented(
        &repo(),
        &text,
        "collector/src/metrics.rs",
        "oomlens_collector",
    );
    assert!(names.len() > 20, "{names:?}");
}
