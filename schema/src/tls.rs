//! Mutual-TLS set-up for QUIC (feature `quic`): PEM loading and the rustls/quinn configs of both
//! ends. TLS 1.3 only, the `ring` provider, ALPN [`crate::ALPN`]. The collector requires a client
//! certificate signed by its CA; the agent verifies the collector against the same CA.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Paths of one end's PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificate(s) trusted for the peer.
    pub ca: PathBuf,
    /// This end's certificate chain.
    pub cert: PathBuf,
    /// This end's private key.
    pub key: PathBuf,
}

/// TLS set-up failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("cannot read {what} from {path}: {reason}")]
    Pem {
        /// CA, certificate or key.
        what: &'static str,
        /// File.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// rustls refused the material.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client-certificate verifier could not be built.
    #[error("client certificate verifier: {0}")]
    Verifier(String),
    /// quinn refused the rustls config.
    #[error("QUIC crypto configuration: {0}")]
    Quic(String),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads every certificate of a PEM file (at least one).
pub fn load_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |reason: String| TlsError::Pem { what, path: path.to_owned(), reason };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no CERTIFICATE block found".to_owned()));
    }
    Ok(certs)
}

/// Loads a private key (PKCS#8, PKCS#1 or SEC1) from a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Pem {
        what: "private key",
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

fn root_store(ca: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certs(ca, "CA certificate")? {
        roots.add(cert)?;
    }
    Ok(roots)
}

/// QUIC transport settings shared by both ends: keep-alive below the idle timeout.
pub fn transport_config(idle_timeout: Duration) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    let keep_alive = (idle_timeout / 3).max(Duration::from_millis(100));
    t.keep_alive_interval(Some(keep_alive));
    if let Ok(idle) = quinn::IdleTimeout::try_from(idle_timeout) {
        t.max_idle_timeout(Some(idle));
    }
    Arc::new(t)
}

/// The collector's QUIC server config: requires a client certificate signed by `files.ca`.
pub fn server_config(files: &TlsFiles, idle_timeout: Duration) -> Result<quinn::ServerConfig, TlsError> {
    let provider = provider();
    let roots = Arc::new(root_store(&files.ca)?);
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(load_certs(&files.cert, "certificate")?, load_key(&files.key)?)?;
    tls.alpn_protocols = vec![crate::ALPN.to_vec()];
    tls.max_early_data_size = 0;
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    cfg.transport_config(transport_config(idle_timeout));
    Ok(cfg)
}

/// The agent's QUIC client config: presents `files.cert`, trusts collectors signed by `files.ca`.
pub fn client_config(files: &TlsFiles, idle_timeout: Duration) -> Result<quinn::ClientConfig, TlsError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(root_store(&files.ca)?)
        .with_client_auth_cert(load_certs(&files.cert, "certificate")?, load_key(&files.key)?)?;
    tls.alpn_protocols = vec![crate::ALPN.to_vec()];
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    cfg.transport_config(transport_config(idle_timeout));
    Ok(cfg)
}
