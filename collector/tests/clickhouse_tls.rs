//! ClickHouse over HTTPS against a real 18.16 server with its `https_port` and certificates made
//! by the `openssl` command: the collector stores a simulated agent's rows through TLS; a wrong
//! CA and the system trust store (which does not know this CA) are refused with an error that
//! says so; a server that verifies clients refuses a client without a certificate and accepts one
//! with a certificate its CA signed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use oomlens_collector::clickhouse::{Ch, ChConfig};
use oomlens_devkit::devch::{DevClickHouse, HttpsFiles};

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA (`<name>.pem`, `<name>.key`).
fn ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

/// A certificate `<name>.pem` / `<name>.key` for `cn` signed by CA `by`, with `ext` extensions.
fn signed(dir: &Path, name: &str, cn: &str, by: &str, ext: &str) {
    std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{by}.pem"),
            "-CAkey",
            &format!("{by}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn make() -> Option<Pki> {
        if Command::new("openssl").arg("version").output().is_err() {
            eprintln!("SKIPPED: the `openssl` command is not installed (apt-get install openssl)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        ca(d, "ca");
        ca(d, "other-ca");
        signed(d, "server", "localhost", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
        signed(d, "client", "oomlens-collector", "ca", "extendedKeyUsage=clientAuth\n");
        Some(Pki { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn server(&self, verify_clients: bool) -> HttpsFiles {
        HttpsFiles {
            cert: self.path("server.pem"),
            key: self.path("server.key"),
            client_ca: verify_clients.then(|| self.path("ca.pem")),
        }
    }
}

fn https_config(server: &DevClickHouse, ca: Option<PathBuf>) -> ChConfig {
    ChConfig {
        tls_ca: ca,
        request_timeout_ms: 10_000,
        retention: oomlens_schema::ddl::Retention { samples_days: 0, events_days: 0 },
        insert_max_delay_ms: 50,
        ..ChConfig::new(server.https_url().unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_collector_stores_through_https_and_a_wrong_ca_is_refused() {
    let Some(pki) = Pki::make() else { return };
    let server = DevClickHouse::start_https(pki.server(false)).unwrap();

    // The right CA: migrate, then a whole collector with an agent writing through TLS.
    let cfg = https_config(&server, Some(pki.path("ca.pem")));
    let ch = Ch::connect(&cfg).await.unwrap();
    assert_eq!(ch.version().major, server_major(&server).await);
    let agents_dir = tempfile::tempdir().unwrap();
    let node = "tls-node";
    let agent_pki = common::pki(agents_dir.path(), &[node]);
    let mut ccfg = collector_config(&agent_pki, &server.url(), SocketAddr::from(([127, 0, 0, 1], 0)));
    ccfg.clickhouse = cfg.clone();
    let (collector, _stop) = start_collector(ccfg).await;
    let sent = tokio::time::timeout(
        Duration::from_secs(120),
        spawn_agent(agent_config(&agent_pki, node, collector.addr, 3, 120, 200.0)),
    )
    .await
    .unwrap()
    .unwrap();
    collector.shutdown().await;
    assert_eq!(sent.pending_batches, 0, "everything acknowledged");
    let stored = count(ch.client(), "SELECT count() FROM oomlens.gpu_samples WHERE node = 'tls-node'").await;
    assert!(
        stored > 0
            && stored
                == count(
                    &client(&server.url()),
                    "SELECT count() FROM oomlens.gpu_samples WHERE node = 'tls-node'"
                )
                .await
    );

    // Another CA: refused, and the error says why.
    let err =
        Ch::connect(&https_config(&server, Some(pki.path("other-ca.pem")))).await.unwrap_err().to_string();
    assert!(err.contains("certificate") && err.contains(&server.https_url().unwrap()), "{err}");
    // The system trust store does not know this CA either.
    let err = Ch::connect(&https_config(&server, None)).await.unwrap_err().to_string();
    assert!(err.contains("certificate") || err.contains("trust store"), "{err}");
    // TLS files with a plain http:// URL are a configuration mistake.
    let plain = ChConfig { tls_ca: Some(pki.path("ca.pem")), ..ChConfig::new(server.url()) };
    let err = Ch::connect(&plain).await.unwrap_err().to_string();
    assert!(err.contains("need https://"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_verifies_clients_needs_the_client_certificate() {
    let Some(pki) = Pki::make() else { return };
    let server = DevClickHouse::start_https(pki.server(true)).unwrap();
    let without = https_config(&server, Some(pki.path("ca.pem")));
    assert!(Ch::connect(&without).await.is_err(), "no client certificate: refused by the server");
    let with =
        ChConfig { tls_cert: Some(pki.path("client.pem")), tls_key: Some(pki.path("client.key")), ..without };
    let ch = Ch::connect(&with).await.unwrap();
    assert_eq!(count(ch.client(), "SELECT count() FROM system.one").await, 1);
    // A key without its certificate is refused before any connection.
    let half = ChConfig { tls_cert: None, ..with };
    let err = Ch::connect(&half).await.unwrap_err().to_string();
    assert!(err.contains("tls_cert and clickhouse.tls_key go together"), "{err}");
}

async fn server_major(server: &DevClickHouse) -> u32 {
    let text: String = client(&server.url()).query("SELECT version()").fetch_one().await.unwrap();
    text.split('.').next().unwrap().parse().unwrap()
}
