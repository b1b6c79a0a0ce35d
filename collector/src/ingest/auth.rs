//! Authentication at the collector, around the QUIC server: why a TLS handshake was refused (the
//! `rejects{reason}` label), the cluster allow-list, and certificate reload without restart.
//!
//! * [`handshake_reject_reason`] maps the TLS alert of a failed handshake to a stable label:
//!   `unknown_ca` (also a CA of the same name with another key), `cert_expired`, `cert_not_yet_valid`, `no_certificate`, `alpn`,
//!   `bad_certificate`, `peer_refused_tls` (the agent refused *our* certificate) or `tls`.
//! * [`check_cluster`] applies `collector.allowed_clusters` to the certificate's cluster (OU).
//!   A certificate without an OU is refused whenever an allow-list is set: the cluster is then
//!   only the agent's own claim.
//! * [`TlsReloader`] re-reads the CA bundle, certificate and key (on a timer and on request, e.g.
//!   SIGHUP) and, when their content changed and builds a valid config, swaps it into the endpoint
//!   with `quinn::Endpoint::set_server_config`: new connections get the new material, connections
//!   already open keep theirs. A broken file is logged and counted once, and the previous config
//!   stays in force.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use oomlens_schema::tls::{Reload, TlsError, TlsFiles, TlsMaterial, TlsWatch, server_config_from};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::ingest::certs::CertIdentity;
use crate::metrics::CollectorMetrics;

// TLS alert descriptions (RFC 8446 §6), as carried in QUIC CRYPTO_ERROR codes (0x100 + alert).
const ALERT_BAD_CERTIFICATE: u8 = 42;
const ALERT_UNSUPPORTED_CERTIFICATE: u8 = 43;
const ALERT_CERTIFICATE_REVOKED: u8 = 44;
const ALERT_CERTIFICATE_EXPIRED: u8 = 45;
const ALERT_CERTIFICATE_UNKNOWN: u8 = 46;
const ALERT_UNKNOWN_CA: u8 = 48;
const ALERT_DECRYPT_ERROR: u8 = 51;
const ALERT_CERTIFICATE_REQUIRED: u8 = 116;
const ALERT_NO_APPLICATION_PROTOCOL: u8 = 120;

/// The TLS alert of a QUIC `CRYPTO_ERROR` code (0x100 + alert, RFC 9001 §4.8), if it is one.
fn crypto_alert(code: quinn::TransportErrorCode) -> Option<u8> {
    u64::from(code).checked_sub(0x100).and_then(|alert| u8::try_from(alert).ok())
}

fn alert_reason(alert: u8, text: &str) -> &'static str {
    match alert {
        ALERT_UNKNOWN_CA => "unknown_ca",
        // rustls sends `certificate_expired` for both ends of the validity window; its message
        // tells them apart ("certificate not valid yet" / "NotValidYet").
        ALERT_CERTIFICATE_EXPIRED => {
            let text = text.to_ascii_lowercase();
            if text.contains("not valid yet") || text.contains("notvalidyet") {
                "cert_not_yet_valid"
            } else {
                "cert_expired"
            }
        }
        // Signed by a key our CAs do not hold — typically another CA with the same name.
        ALERT_DECRYPT_ERROR if text.contains("BadSignature") => "unknown_ca",
        ALERT_CERTIFICATE_REQUIRED => "no_certificate",
        ALERT_NO_APPLICATION_PROTOCOL => "alpn",
        ALERT_CERTIFICATE_REVOKED => "cert_revoked",
        ALERT_BAD_CERTIFICATE
        | ALERT_UNSUPPORTED_CERTIFICATE
        | ALERT_CERTIFICATE_UNKNOWN
        | ALERT_DECRYPT_ERROR => "bad_certificate",
        _ => "tls",
    }
}

/// The label of a handshake our TLS stack failed with `code` (and rustls's message `text`).
fn transport_reason(code: quinn::TransportErrorCode, text: &str) -> &'static str {
    match crypto_alert(code) {
        Some(alert) => alert_reason(alert, text),
        None => "tls",
    }
}

/// The `rejects{reason}` label of a handshake that failed.
pub fn handshake_reject_reason(e: &quinn::ConnectionError) -> &'static str {
    match e {
        // Our TLS stack refused the agent (its certificate, its ALPN).
        quinn::ConnectionError::TransportError(t) => transport_reason(t.code, &t.reason),
        // The agent refused us (it does not trust our certificate or name).
        quinn::ConnectionError::ConnectionClosed(c) if crypto_alert(c.error_code).is_some() => {
            "peer_refused_tls"
        }
        quinn::ConnectionError::TimedOut => "handshake_timeout",
        _ => "tls",
    }
}

/// Checks the certificate's cluster against `collector.allowed_clusters` (empty: all allowed).
/// The error is the message sent to the agent.
pub fn check_cluster(allowed: &[String], cert: &CertIdentity) -> Result<(), String> {
    if allowed.is_empty() {
        return Ok(());
    }
    match &cert.cluster {
        Some(cluster) if allowed.iter().any(|a| a == cluster) => Ok(()),
        Some(cluster) => Err(format!(
            "cluster {cluster:?} of certificate {:?} is not allowed on this collector",
            cert.node
        )),
        None => Err(format!(
            "certificate {:?} names no cluster (subject OU) and this collector only accepts listed clusters",
            cert.node
        )),
    }
}

/// What a reload found.
#[derive(Debug)]
pub enum TlsReloadOutcome {
    /// The files hold what is already in use.
    Unchanged,
    /// New material is in use for new connections.
    Reloaded,
    /// The files could not be used; the previous config stays.
    Failed(TlsError),
}

/// Swaps the endpoint's server config when the TLS files change. Cheap to clone.
#[derive(Debug, Clone)]
pub struct TlsReloader {
    inner: Arc<ReloaderInner>,
}

#[derive(Debug)]
struct ReloaderInner {
    watch: Mutex<TlsWatch>,
    endpoint: quinn::Endpoint,
    idle_timeout: Duration,
    metrics: Arc<CollectorMetrics>,
}

impl TlsReloader {
    /// Watches `files` for `endpoint`; `current` is the material its config was built from.
    pub fn new(
        endpoint: quinn::Endpoint,
        files: TlsFiles,
        current: TlsMaterial,
        idle_timeout: Duration,
        metrics: Arc<CollectorMetrics>,
    ) -> TlsReloader {
        TlsReloader {
            inner: Arc::new(ReloaderInner {
                watch: Mutex::new(TlsWatch::new(files, Some(current))),
                endpoint,
                idle_timeout,
                metrics,
            }),
        }
    }

    /// Re-reads the files; when they changed (or `force`), builds and installs a new config.
    pub fn reload(&self, force: bool) -> TlsReloadOutcome {
        let inner = &self.inner;
        let mut watch = inner.watch.lock().unwrap_or_else(PoisonError::into_inner);
        let idle = inner.idle_timeout;
        match watch.check(force, |m, f| server_config_from(m, f, idle)) {
            Reload::Unchanged => TlsReloadOutcome::Unchanged,
            Reload::Reloaded(cfg) => {
                inner.endpoint.set_server_config(Some(cfg));
                inner.metrics.tls_reload("ok");
                info!(cert = %watch.files().cert.display(), ca = %watch.files().ca.display(), "TLS material reloaded; new connections use it");
                TlsReloadOutcome::Reloaded
            }
            Reload::Failed { error, repeated } => {
                if !repeated {
                    inner.metrics.tls_reload("error");
                    warn!(error = %error, "TLS reload failed; keeping the previous certificate and CA");
                }
                TlsReloadOutcome::Failed(error)
            }
        }
    }

    /// Checks the files every `interval` until the task is aborted.
    pub fn spawn_poll(&self, interval: Duration) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let r = this.clone();
                // File reads and certificate parsing: keep them off the async workers.
                if let Err(e) = tokio::task::spawn_blocking(move || r.reload(false)).await {
                    warn!(error = %e, "TLS reload check panicked");
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(cluster: Option<&str>) -> CertIdentity {
        CertIdentity { node: "n1".into(), cluster: cluster.map(str::to_owned) }
    }

    #[test]
    fn allow_list() {
        assert!(check_cluster(&[], &id(None)).is_ok());
        assert!(check_cluster(&[], &id(Some("x"))).is_ok());
        let allowed = vec!["prod-a".to_owned(), "prod-b".to_owned()];
        assert!(check_cluster(&allowed, &id(Some("prod-b"))).is_ok());
        let e = check_cluster(&allowed, &id(Some("lab"))).unwrap_err();
        assert!(e.contains("\"lab\"") && e.contains("not allowed"), "{e}");
        assert!(check_cluster(&allowed, &id(None)).unwrap_err().contains("no cluster"));
    }

    #[test]
    fn alerts_map_to_reasons() {
        let cases = [
            (48, "invalid peer certificate: UnknownIssuer", "unknown_ca"),
            (45, "certificate expired: verification time 1 (UNIX), but …", "cert_expired"),
            (45, "certificate not valid yet: verification time 1 (UNIX), but …", "cert_not_yet_valid"),
            (116, "peer sent no certificates", "no_certificate"),
            (120, "peer doesn't support any known protocol", "alpn"),
            (42, "bad", "bad_certificate"),
            (51, "invalid peer certificate: BadSignature", "unknown_ca"),
            (51, "invalid peer certificate: UnsupportedSignatureAlgorithm", "bad_certificate"),
            (80, "internal", "tls"),
        ];
        assert_eq!(transport_reason(quinn::TransportErrorCode::PROTOCOL_VIOLATION, "x"), "tls");
        for (alert, text, want) in cases {
            assert_eq!(
                transport_reason(quinn::TransportErrorCode::crypto(alert), text),
                want,
                "{alert} {text}"
            );
        }
        assert_eq!(handshake_reject_reason(&quinn::ConnectionError::TimedOut), "handshake_timeout");
    }
}
