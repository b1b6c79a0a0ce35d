//! Authentication and identity over real QUIC with certificates minted here: refused handshakes
//! counted by reason, the agent refusing an untrusted or misnamed collector, the certificate's
//! identity winning over the payload's (checked in ClickHouse), the cluster allow-list, and
//! certificate rotation without restarting either end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use oomlens_collector::ingest::auth::TlsReloadOutcome;
use oomlens_collector::ingest::certs::{CertFiles, DevCa, DevPki, LeafSpec, Role, write_minted};
use oomlens_collector::service::RunningCollector;
use oomlens_schema::tls::{TlsFiles, client_config};
use oomlens_schema::transport::read_frame;
use oomlens_schema::{Batch, ErrorCode, Frame, GpuSample, Hello};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use time::OffsetDateTime;

fn rejects(c: &RunningCollector, reason: &str) -> u64 {
    c.metrics.rejects.get_or_create(&vec![("reason", reason.to_owned())]).get()
}

fn tls_reloads(c: &RunningCollector, result: &str) -> u64 {
    c.metrics.tls_reloads.get_or_create(&vec![("result", result.to_owned())]).get()
}

fn any_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn client_endpoint(cfg: quinn::ClientConfig) -> quinn::Endpoint {
    let mut ep = quinn::Endpoint::client(any_addr()).unwrap();
    ep.set_default_client_config(cfg);
    ep
}

/// A client presenting `cert`/`key` and trusting `ca`, the way the agent builds it.
fn agent_endpoint(ca: &Path, files: &CertFiles) -> quinn::Endpoint {
    let tls = TlsFiles { ca: ca.to_owned(), cert: files.cert.clone(), key: files.key.clone() };
    client_endpoint(client_config(&tls, Duration::from_secs(3)).unwrap())
}

/// A hand-built client: optional client certificate, any ALPN list.
fn custom_endpoint(ca: &Path, cert: Option<&CertFiles>, alpn: &[&[u8]]) -> quinn::Endpoint {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots);
    let mut tls = match cert {
        Some(f) => {
            let chain = CertificateDer::pem_file_iter(&f.cert).unwrap().map(Result::unwrap).collect();
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(&f.key).unwrap()).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    client_endpoint(quinn::ClientConfig::new(Arc::new(crypto)))
}

fn hello(node: &str, cluster: &str) -> Frame {
    Frame::Hello(Hello {
        agent_id: format!("{node}-agent"),
        node: node.into(),
        cluster: cluster.into(),
        boot_id: 42,
        agent_version: "test".into(),
        gpus: Vec::new(),
    })
}

/// An open session: the connection, its stream, and the Welcome's `last_acked_seq`.
struct Session {
    conn: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
}

/// Connects and says Hello. `Ok(session)` when the collector answered Welcome; `Err(text)` with
/// what went wrong otherwise (handshake error, closed stream, or an error reply).
async fn try_session(ep: &quinn::Endpoint, addr: SocketAddr, hello: &Frame) -> Result<Session, String> {
    let attempt = async {
        let conn = ep
            .connect(addr, "localhost")
            .map_err(|e| format!("connect: {e}"))?
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| format!("open: {e}"))?;
        send.write_all(&hello.encode().unwrap()).await.map_err(|e| format!("write: {e}"))?;
        let mut buf = Vec::new();
        match read_frame(&mut recv, &mut buf).await {
            Ok(Some(Frame::Welcome(_))) => Ok(Session { conn, send, recv }),
            Ok(Some(Frame::Error(e))) => Err(format!("error reply {}: {}", e.code, e.message)),
            Ok(other) => Err(format!("unexpected {other:?}")),
            Err(e) => Err(format!("read: {e}")),
        }
    };
    tokio::time::timeout(Duration::from_secs(10), attempt).await.unwrap_or_else(|_| Err("timed out".into()))
}

impl Session {
    /// Sends one batch of `n` GPU samples and waits for its Ack.
    async fn send_batch(&mut self, seq: u64, n: usize) {
        let samples = (0..n)
            .map(|i| GpuSample {
                ts_ms: START_MS + seq as i64 * 1000 + i as i64,
                gpu_index: i as u32,
                memory_used_bytes: Some(1 << 30),
                ..GpuSample::default()
            })
            .collect();
        let batch = Frame::Batch(Batch { seq, gpu_samples: samples, ..Batch::default() });
        self.send.write_all(&batch.encode().unwrap()).await.unwrap();
        let mut buf = Vec::new();
        let ack = tokio::time::timeout(Duration::from_secs(10), read_frame(&mut self.recv, &mut buf))
            .await
            .expect("ack in time")
            .unwrap();
        match ack {
            Some(Frame::Ack(a)) => assert_eq!(a.seq, seq),
            other => panic!("expected Ack {seq}, got {other:?}"),
        }
    }

    async fn close(mut self) {
        let _ = self.send.finish();
        let _ = tokio::time::timeout(Duration::from_secs(3), self.conn.closed()).await;
    }
}

/// Mints a leaf signed by `ca` into `dir/name.{pem,key}`.
fn mint(ca: &DevCa, dir: &Path, name: &str, spec: LeafSpec) -> CertFiles {
    write_minted(dir, name, &ca.mint(&spec).unwrap()).unwrap()
}

fn agent_spec(node: &str, cluster: Option<&str>) -> LeafSpec {
    let mut spec = LeafSpec::new(node, Role::Agent, 2);
    spec.cluster = cluster.map(str::to_owned);
    spec
}

fn load_ca(pki: &DevPki) -> DevCa {
    let dir = pki.ca.parent().unwrap();
    DevCa::load(
        &std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
        &std::fs::read_to_string(dir.join("ca.key")).unwrap(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_are_counted_by_reason_and_the_payload_cannot_choose_the_node() {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &["honest-node"]);
    let ca = load_ca(&pki);
    let (collector, _stop) = start_collector(collector_config(&pki, &ch.url(), any_addr())).await;
    let addr = collector.addr;
    let honest = &pki.agents[0].1;

    // (client, expected reject reason)
    let stranger_ca = DevCa::new("stranger CA", 2).unwrap();
    let stranger = mint(&stranger_ca, dir.path(), "stranger", agent_spec("stranger", Some(CLUSTER)));
    let lookalike_ca = DevCa::new("oomlens dev CA", 2).unwrap();
    let lookalike = mint(&lookalike_ca, dir.path(), "lookalike", agent_spec("honest-node", Some(CLUSTER)));
    let now = OffsetDateTime::now_utc();
    let mut expired = agent_spec("expired-node", Some(CLUSTER));
    (expired.not_before, expired.not_after) = (now - time::Duration::days(10), now - time::Duration::days(1));
    let expired = mint(&ca, dir.path(), "expired", expired);
    let mut early = agent_spec("early-node", Some(CLUSTER));
    (early.not_before, early.not_after) = (now + time::Duration::days(1), now + time::Duration::days(10));
    let early = mint(&ca, dir.path(), "early", early);
    let cases: Vec<(&str, quinn::Endpoint)> = vec![
        ("unknown_ca", agent_endpoint(&pki.ca, &stranger)),
        // Another CA with the very same name (a forged look-alike): its signature does not verify.
        ("unknown_ca", agent_endpoint(&pki.ca, &lookalike)),
        ("cert_expired", agent_endpoint(&pki.ca, &expired)),
        ("cert_not_yet_valid", agent_endpoint(&pki.ca, &early)),
        ("no_certificate", custom_endpoint(&pki.ca, None, &[oomlens_schema::ALPN])),
        ("alpn", custom_endpoint(&pki.ca, Some(honest), &[b"h3"])),
        ("alpn", custom_endpoint(&pki.ca, Some(honest), &[])),
    ];
    let mut expected = std::collections::BTreeMap::<&str, u64>::new();
    for (reason, ep) in &cases {
        let r = try_session(ep, addr, &hello("honest-node", CLUSTER)).await;
        assert!(r.is_err(), "{reason}: the collector must refuse");
        *expected.entry(*reason).or_default() += 1;
        let want = expected[reason];
        assert!(
            wait_until(Duration::from_secs(5), || rejects(&collector, reason) == want).await,
            "{reason}: counted {} (want {want}); refusal seen by the client: {:?}",
            rejects(&collector, reason),
            r.err()
        );
    }
    assert_eq!(collector.metrics.sessions.get(), 0, "no refused client got a session");

    // The agent side refuses a collector it cannot verify: signed by another CA, or not named
    // as the agent expects. Both fail in the handshake on the agent, before any data.
    let distrustful = agent_endpoint(&stranger_ca_file(&stranger_ca, dir.path()), honest);
    let e = distrustful.connect(addr, "localhost").unwrap().await.unwrap_err();
    assert!(e.to_string().contains("UnknownIssuer") || e.to_string().contains("unknown"), "{e}");
    let trusting = agent_endpoint(&pki.ca, honest);
    let e = trusting.connect(addr, "collector.example.org").unwrap().await.unwrap_err();
    assert!(e.to_string().contains("not valid for name"), "{e}");
    assert!(
        wait_until(Duration::from_secs(5), || rejects(&collector, "peer_refused_tls") >= 2).await,
        "the collector saw the agents refuse it: {}",
        rejects(&collector, "peer_refused_tls")
    );

    // Identity: the Hello claims another node and cluster; the rows carry the certificate's.
    let mut s = try_session(&trusting, addr, &hello("victim-node", "victim-cluster")).await.unwrap();
    s.send_batch(1, 4).await;
    s.send_batch(2, 4).await;
    s.close().await;
    assert_eq!(collector.metrics.identity_mismatches.get(), 1);
    collector.shutdown().await;
    let db = client(&ch.url());
    let n = |sql: String| {
        let db = db.clone();
        async move { count(&db, &sql).await }
    };
    assert_eq!(
        n(format!(
            "SELECT count() FROM oomlens.gpu_samples WHERE node = 'honest-node' AND cluster = '{CLUSTER}'"
        ))
        .await,
        8
    );
    assert_eq!(
        n("SELECT count() FROM oomlens.gpu_samples WHERE node = 'victim-node' OR cluster = 'victim-cluster'"
            .into())
        .await,
        0
    );
    assert_eq!(
        n(format!(
            "SELECT max(last_seq) FROM oomlens.agents WHERE node = 'honest-node' AND cluster = '{CLUSTER}'"
        ))
        .await,
        2
    );
    assert_eq!(n("SELECT count() FROM oomlens.agents WHERE node = 'victim-node'".into()).await, 0);
}

fn stranger_ca_file(ca: &DevCa, dir: &Path) -> PathBuf {
    let path = dir.join("stranger-ca.pem");
    std::fs::write(&path, ca.cert_pem()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_allow_list_refuses_other_clusters_with_an_error_reply() {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &[]);
    let ca = load_ca(&pki);
    let mut cfg = collector_config(&pki, &ch.url(), any_addr());
    cfg.collector.allowed_clusters = vec!["prod-a".into(), "prod-b".into()];
    let (collector, _stop) = start_collector(cfg).await;
    let addr = collector.addr;

    let prod = mint(&ca, dir.path(), "prod", agent_spec("prod-node", Some("prod-b")));
    let lab = mint(&ca, dir.path(), "lab", agent_spec("lab-node", Some("lab")));
    let bare = mint(&ca, dir.path(), "bare", agent_spec("bare-node", None));

    let mut s =
        try_session(&agent_endpoint(&pki.ca, &prod), addr, &hello("prod-node", "prod-b")).await.unwrap();
    s.send_batch(1, 2).await;
    s.close().await;

    // Claiming an allowed cluster in the Hello does not help: the certificate's OU decides.
    let err =
        try_session(&agent_endpoint(&pki.ca, &lab), addr, &hello("lab-node", "prod-a")).await.err().unwrap();
    assert!(err.starts_with(&format!("error reply {}", ErrorCode::Unauthorized as u16)), "{err}");
    assert!(err.contains("\"lab\"") && err.contains("not allowed"), "{err}");
    // A certificate naming no cluster is refused while an allow-list is set.
    let err = try_session(&agent_endpoint(&pki.ca, &bare), addr, &hello("bare-node", "prod-a"))
        .await
        .err()
        .unwrap();
    assert!(err.contains("no cluster"), "{err}");
    assert!(wait_until(Duration::from_secs(5), || rejects(&collector, "cluster_not_allowed") == 2).await);
    assert_eq!(collector.metrics.sessions.get(), 1);
    collector.shutdown().await;
    let db = client(&ch.url());
    assert_eq!(count(&db, "SELECT count() FROM oomlens.gpu_samples WHERE node = 'prod-node'").await, 2);
    assert_eq!(count(&db, "SELECT count() FROM oomlens.gpu_samples WHERE node != 'prod-node'").await, 0);
    assert_eq!(count(&db, "SELECT count() FROM oomlens.agents WHERE node != 'prod-node'").await, 0);
}

/// Writes `contents` to `path` atomically (write a sibling, rename over).
fn replace(path: &Path, contents: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The DER of the certificate a collector presents to a new connection.
async fn served_cert(ep: &quinn::Endpoint, addr: SocketAddr) -> Vec<u8> {
    let conn = ep.connect(addr, "localhost").unwrap().await.unwrap();
    let chain = conn.peer_identity().unwrap().downcast::<Vec<CertificateDer<'static>>>().unwrap();
    conn.close(0u32.into(), b"");
    chain[0].to_vec()
}

fn pem_der(path: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(path).unwrap().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn collector_certificate_and_ca_bundle_rotate_without_restart() {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &["old-node"]);
    let ca1 = load_ca(&pki);
    let ca2 = DevCa::new("oomlens CA 2", 2).unwrap();
    // The collector reads live copies, which the test rotates.
    let live = dir.path().join("live");
    std::fs::create_dir_all(&live).unwrap();
    let live_ca = live.join("ca.pem");
    std::fs::copy(&pki.ca, &live_ca).unwrap();
    let live_cert = write_minted(&live, "collector", &ca1.mint(&collector_spec()).unwrap()).unwrap();
    let mut cfg = collector_config(&pki, &ch.url(), any_addr());
    cfg.collector.ca = live_ca.clone();
    cfg.collector.cert = live_cert.cert.clone();
    cfg.collector.key = live_cert.key.clone();
    cfg.collector.tls_reload_interval_ms = 100;
    let (collector, _stop) = start_collector(cfg).await;
    let addr = collector.addr;
    let old_agent = agent_endpoint(&pki.ca, &pki.agents[0].1);
    let new_files = mint(&ca2, dir.path(), "new-node", agent_spec("new-node", Some(CLUSTER)));
    let new_agent = agent_endpoint(&pki.ca, &new_files);
    let first_cert = pem_der(&live_cert.cert);
    assert_eq!(served_cert(&old_agent, addr).await, first_cert);

    // Before the rotation: the agent of the new CA is refused, the old one streams.
    assert!(try_session(&new_agent, addr, &hello("new-node", CLUSTER)).await.is_err());
    let mut kept = try_session(&old_agent, addr, &hello("old-node", CLUSTER)).await.unwrap();
    kept.send_batch(1, 3).await;

    // Rotate: a new collector certificate (and key) and a CA bundle trusting CA 1 and CA 2.
    let rotated = ca1.mint(&collector_spec()).unwrap();
    let bundle = format!("{}{}", ca1.cert_pem(), ca2.cert_pem());
    replace(&live_ca, bundle.as_bytes());
    replace(&live_cert.key, rotated.key_pem.as_bytes());
    replace(&live_cert.cert, rotated.cert_pem.as_bytes());
    let rotated_der = CertificateDer::from_pem_slice(rotated.cert_pem.as_bytes()).unwrap().to_vec();
    // The timer picks it up: new connections get the new certificate, and the new CA's agent gets in.
    let mut served = Vec::new();
    for _ in 0..50 {
        served = served_cert(&old_agent, addr).await;
        if served == rotated_der {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(served, rotated_der, "new connections are served the rotated certificate");
    assert!(tls_reloads(&collector, "ok") >= 1);
    let mut fresh = try_session(&new_agent, addr, &hello("new-node", CLUSTER)).await.unwrap();
    fresh.send_batch(1, 2).await;
    // The connection opened before the rotation is still the same connection, and still stores.
    kept.send_batch(2, 3).await;

    // Drop CA 1 from the bundle and reload on request (what SIGHUP does): agents of CA 1 can no
    // longer connect, while the session opened under CA 1 continues.
    replace(&live_ca, ca2.cert_pem().as_bytes());
    assert!(matches!(collector.reload_tls(), TlsReloadOutcome::Reloaded));
    let err = try_session(&old_agent, addr, &hello("old-node", CLUSTER)).await.err().unwrap();
    assert!(wait_until(Duration::from_secs(5), || rejects(&collector, "unknown_ca") >= 2).await, "{err}");
    kept.send_batch(3, 3).await;

    // A broken certificate file: logged and counted, the previous material stays in force.
    let errors_before = tls_reloads(&collector, "error");
    replace(&live_cert.cert, b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n");
    assert!(matches!(collector.reload_tls(), TlsReloadOutcome::Failed(_)));
    tokio::time::sleep(Duration::from_millis(300)).await; // a few timer checks: counted once
    assert_eq!(tls_reloads(&collector, "error"), errors_before + 1);
    assert_eq!(served_cert(&new_agent, addr).await, rotated_der, "previous certificate still served");
    fresh.send_batch(2, 2).await;
    // (One session per agent run at a time: the next one starts once this one has ended.)
    fresh.close().await;
    let again = try_session(&new_agent, addr, &hello("new-node", CLUSTER)).await.unwrap();
    again.close().await;
    kept.close().await;
    collector.shutdown().await;

    let db = client(&ch.url());
    assert_eq!(count(&db, "SELECT count() FROM oomlens.gpu_samples WHERE node = 'old-node'").await, 9);
    assert_eq!(count(&db, "SELECT count() FROM oomlens.gpu_samples WHERE node = 'new-node'").await, 4);
}

fn collector_spec() -> LeafSpec {
    let mut spec = LeafSpec::new("oomlens-collector", Role::Collector, 2);
    spec.subject_alt_names = vec!["localhost".into()];
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agent_uses_a_rotated_client_certificate_on_its_next_connection() {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &["rotating-node"]);
    let ca = load_ca(&pki);
    let (collector, _stop) = start_collector(collector_config(&pki, &ch.url(), any_addr())).await;

    // The agent starts with an expired certificate: refused, it keeps its batches and retries.
    let agent_dir = dir.path().join("agent");
    let now = OffsetDateTime::now_utc();
    let mut expired = agent_spec("rotating-node", Some(CLUSTER));
    (expired.not_before, expired.not_after) = (now - time::Duration::days(10), now - time::Duration::days(1));
    let files = mint(&ca, &agent_dir, "agent", expired);
    let mut cfg = agent_config(&pki, "rotating-node", collector.addr, 21, 60, 30.0);
    cfg.uplink.cert = files.cert.clone();
    cfg.uplink.key = files.key.clone();
    let agent = spawn_agent(cfg);
    assert!(
        wait_until(Duration::from_secs(10), || rejects(&collector, "cert_expired") >= 2).await,
        "the expired certificate is refused (and retried)"
    );
    assert_eq!(collector.metrics.sessions.get(), 0);

    // Renewed in place (as cert-manager does); no restart of the agent.
    let renewed = ca.mint(&agent_spec("rotating-node", Some(CLUSTER))).unwrap();
    replace(&files.key, renewed.key_pem.as_bytes());
    replace(&files.cert, renewed.cert_pem.as_bytes());
    let totals = tokio::time::timeout(Duration::from_secs(60), agent).await.unwrap().unwrap();
    assert_eq!(totals.pending_batches, 0, "everything delivered after the renewal");
    assert!(collector.metrics.sessions.get() >= 1);
    collector.shutdown().await;
    let db = client(&ch.url());
    assert_eq!(
        count(&db, "SELECT count() FROM oomlens.gpu_samples WHERE node = 'rotating-node'").await,
        totals.gpu_samples
    );
    assert_eq!(totals.gpu_samples, 4 * 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_certificate_cannot_pose_as_a_collector() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &["node-x", "node-y"]);
    // A "collector" presenting node-x's certificate (client-auth EKU) for the right name.
    let ca = load_ca(&pki);
    let mut spec = agent_spec("localhost", Some(CLUSTER));
    spec.subject_alt_names = vec!["localhost".into()];
    let impostor = mint(&ca, dir.path(), "impostor", spec);
    let server = bare_server(&pki.ca, &impostor);
    let addr = server.local_addr().unwrap();
    let agent = agent_endpoint(&pki.ca, &pki.agents[1].1);
    let e = agent.connect(addr, "localhost").unwrap().await.unwrap_err();
    assert!(e.to_string().contains("extended key usage for server authentication"), "{e}");
    server.close(0u32.into(), b"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sighup_makes_the_collector_binary_serve_a_renewed_certificate() {
    let ch = start_clickhouse();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &["hup-node"]);
    let ca = load_ca(&pki);
    let live = dir.path().join("live");
    let cert = write_minted(&live, "collector", &ca.mint(&collector_spec()).unwrap()).unwrap();
    let listen = reserve_addr();
    let config = dir.path().join("collector.toml");
    std::fs::write(
        &config,
        format!(
            "[collector]\nlisten = \"{listen}\"\ncollector_id = \"hup\"\nca = {:?}\ncert = {:?}\nkey = {:?}\n\
             tls_reload_interval_ms = 0\n[clickhouse]\nurl = \"{}\"\n\
             [clickhouse.retention]\nsamples_days = 0\nevents_days = 0\n",
            pki.ca,
            cert.cert,
            cert.key,
            ch.url()
        ),
    )
    .unwrap();
    let log = dir.path().join("collector.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oomlens-collector"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("OOMLENS_LOG", "info")
        .env_remove("OOMLENS_COLLECTOR_CONFIG")
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let probe = agent_endpoint(&pki.ca, &pki.agents[0].1);
    let served_now = |probe: quinn::Endpoint| async move {
        let connecting = probe.connect(listen, "localhost").unwrap();
        match tokio::time::timeout(Duration::from_secs(2), connecting).await {
            Ok(Ok(conn)) => {
                let chain = conn.peer_identity().unwrap().downcast::<Vec<CertificateDer<'static>>>().unwrap();
                conn.close(0u32.into(), b"");
                Some(chain[0].to_vec())
            }
            _ => None,
        }
    };
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut first = None;
    for _ in 0..60 {
        first = served_now(probe.clone()).await;
        if first.is_some() {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "collector exited:\n{}", log_text());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(first, Some(pem_der(&cert.cert)), "collector up:\n{}", log_text());

    // Renewed on disk: without the timer, nothing changes until SIGHUP.
    let renewed = ca.mint(&collector_spec()).unwrap();
    replace(&cert.key, renewed.key_pem.as_bytes());
    replace(&cert.cert, renewed.cert_pem.as_bytes());
    let renewed_der = CertificateDer::from_pem_slice(renewed.cert_pem.as_bytes()).unwrap().to_vec();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(served_now(probe.clone()).await, first, "no reload without SIGHUP (timer off)");
    let pid = child.id().to_string();
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill").args([sig, pid.as_str()]).status().unwrap();
        assert!(status.success(), "kill {sig} {pid}");
    };
    signal("-HUP");
    let mut served = None;
    for _ in 0..40 {
        served = served_now(probe.clone()).await;
        if served.as_deref() == Some(&renewed_der[..]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(served, Some(renewed_der), "renewed certificate served after SIGHUP:\n{}", log_text());
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP did not stop the collector");
    signal("-TERM");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "collector did not stop:\n{}", log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}:\n{}", log_text());
    assert!(log_text().contains("TLS material reloaded"), "{}", log_text());
}

/// A bare QUIC server presenting `cert` (completes handshakes, nothing more).
fn bare_server(ca: &Path, cert: &CertFiles) -> quinn::Endpoint {
    let tls = TlsFiles { ca: ca.to_owned(), cert: cert.cert.clone(), key: cert.key.clone() };
    let server = quinn::Endpoint::server(
        oomlens_schema::tls::server_config(&tls, Duration::from_secs(3)).unwrap(),
        any_addr(),
    )
    .unwrap();
    let accepting = server.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            let _ = incoming.await;
        }
    });
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_uplink_refuses_an_untrusted_or_misnamed_collector_and_keeps_its_data() {
    use oomlens_agent::metrics::AgentMetrics;
    use oomlens_agent::spool::MemorySpool;
    use oomlens_agent::uplink::{Uplink, UplinkConfig};

    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), &["careful-node"]);
    let ca = load_ca(&pki);
    // Collector 1: right name, unknown CA. Collector 2: our CA, another name.
    let stranger_ca = DevCa::new("stranger CA", 2).unwrap();
    let untrusted = bare_server(&pki.ca, &mint(&stranger_ca, dir.path(), "untrusted", collector_spec()));
    let mut misnamed_spec = collector_spec();
    misnamed_spec.subject_alt_names = vec!["collector.example.org".into()];
    let misnamed = bare_server(&pki.ca, &mint(&ca, dir.path(), "misnamed", misnamed_spec));

    let metrics = AgentMetrics::register(&mut prometheus_client::registry::Registry::default());
    let files = &pki.agents[0].1;
    let (uplink, handle) = Uplink::new(
        UplinkConfig {
            collectors: vec![
                untrusted.local_addr().unwrap().to_string(),
                misnamed.local_addr().unwrap().to_string(),
            ],
            server_name: "localhost".into(),
            tls: TlsFiles { ca: pki.ca.clone(), cert: files.cert.clone(), key: files.key.clone() },
            connect_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(3),
            max_in_flight: 4,
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_millis(50),
        },
        Hello {
            agent_id: "careful-node".into(),
            node: "careful-node".into(),
            boot_id: 1,
            ..Hello::default()
        },
        Box::new(MemorySpool::new(1 << 20)),
        metrics.clone(),
    )
    .unwrap();
    handle.push(Batch { seq: 1, gpu_samples: vec![GpuSample::default()], ..Batch::default() }).unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(uplink.run(stop_rx));
    let tls_failures = || metrics.connect_failures.get_or_create(&vec![("reason", "tls".to_owned())]).get();
    // Both endpoints tried in turn, both refused in the handshake.
    assert!(
        wait_until(Duration::from_secs(10), || tls_failures() >= 4).await,
        "tls failures: {}",
        tls_failures()
    );
    assert_eq!(metrics.connects.get(), 0, "never connected");
    assert_eq!(handle.totals().pending_batches, 1, "the batch is still held");
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task).await.unwrap().unwrap().unwrap();
    untrusted.close(0u32.into(), b"");
    misnamed.close(0u32.into(), b"");
}
