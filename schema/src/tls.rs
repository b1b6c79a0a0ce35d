//! Mutual-TLS set-up for QUIC (feature `quic`): PEM loading and the rustls/quinn configs of both
//! ends. TLS 1.3 only, the `ring` provider, ALPN [`crate::ALPN`]. The collector requires a client
//! certificate signed by its CA; the agent verifies the collector against the same CA.
//!
//! Reload: [`TlsMaterial`] is the bytes of one end's three files read together, and [`TlsWatch`]
//! re-reads them and rebuilds a config only when the bytes changed, remembering a failure so a
//! broken file is reported once, not on every poll. Both ends use it: the collector on a timer and
//! on request (SIGHUP), the agent before each connection attempt.

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
        /// The PEM file that could not be read or parsed.
        path: PathBuf,
        /// The read or parse error, or what the file lacks.
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

fn pem_err(what: &'static str, path: &Path, reason: impl ToString) -> TlsError {
    TlsError::Pem { what, path: path.to_owned(), reason: reason.to_string() }
}

fn certs_from_pem(
    pem: &[u8],
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(what, path, e))?;
    if certs.is_empty() {
        return Err(pem_err(what, path, "no CERTIFICATE block found"));
    }
    Ok(certs)
}

fn key_from_pem(pem: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| pem_err("private key", path, e))
}

/// Loads every certificate of a PEM file (at least one).
pub fn load_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = std::fs::read(path).map_err(|e| pem_err(what, path, e))?;
    certs_from_pem(&pem, path, what)
}

/// Loads a private key (PKCS#8, PKCS#1 or SEC1) from a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = std::fs::read(path).map_err(|e| pem_err("private key", path, e))?;
    key_from_pem(&pem, path)
}

/// The bytes of one end's CA bundle, certificate and key, read together: a config is built from
/// exactly what was compared, so a file replaced in between cannot slip in unnoticed.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key bytes.
        f.debug_struct("TlsMaterial")
            .field("ca_bytes", &self.ca.len())
            .field("cert_bytes", &self.cert.len())
            .finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// Reads the three files (no parsing).
    pub fn read(files: &TlsFiles) -> Result<Self, TlsError> {
        let read = |path: &Path, what| std::fs::read(path).map_err(|e| pem_err(what, path, e));
        Ok(TlsMaterial {
            ca: read(&files.ca, "CA certificate")?,
            cert: read(&files.cert, "certificate")?,
            key: read(&files.key, "private key")?,
        })
    }
}

fn root_store(material: &TlsMaterial, files: &TlsFiles) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs_from_pem(&material.ca, &files.ca, "CA certificate")? {
        roots.add(cert)?;
    }
    Ok(roots)
}

/// How much unread stream data one QUIC connection may buffer (the stream and the connection
/// window alike): 256 KiB, 26 MB/s per agent at 10 ms round trip, 2.6 MB/s at 100 ms — far above
/// what an agent sends. With one stream per connection it is what a connection can make its peer
/// hold beyond the frames it accounts for.
pub const RECEIVE_WINDOW_BYTES: u32 = 256 * 1024;

/// QUIC transport settings shared by both ends: keep-alive below the idle timeout; the peer may
/// open one bidirectional stream (a session uses exactly one) and no unidirectional ones, and all
/// its unread data is bounded by [`RECEIVE_WINDOW_BYTES`] (quinn's defaults allow 100 streams of
/// 1.25 MB each and an unbounded connection window: 125 MB a connection).
pub fn transport_config(idle_timeout: Duration) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(1u32.into());
    t.max_concurrent_uni_streams(0u32.into());
    t.stream_receive_window(RECEIVE_WINDOW_BYTES.into());
    t.receive_window(RECEIVE_WINDOW_BYTES.into());
    let keep_alive = (idle_timeout / 3).max(Duration::from_millis(100));
    t.keep_alive_interval(Some(keep_alive));
    if let Ok(idle) = quinn::IdleTimeout::try_from(idle_timeout) {
        t.max_idle_timeout(Some(idle));
    }
    Arc::new(t)
}

/// The collector's QUIC server config: requires a client certificate signed by `files.ca`.
pub fn server_config(files: &TlsFiles, idle_timeout: Duration) -> Result<quinn::ServerConfig, TlsError> {
    server_config_from(&TlsMaterial::read(files)?, files, idle_timeout)
}

/// [`server_config`] from material already read (`files` only names the files in errors).
pub fn server_config_from(
    material: &TlsMaterial,
    files: &TlsFiles,
    idle_timeout: Duration,
) -> Result<quinn::ServerConfig, TlsError> {
    let provider = provider();
    let roots = Arc::new(root_store(material, files)?);
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            certs_from_pem(&material.cert, &files.cert, "certificate")?,
            key_from_pem(&material.key, &files.key)?,
        )?;
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
    client_config_from(&TlsMaterial::read(files)?, files, idle_timeout)
}

/// [`client_config`] from material already read (`files` only names the files in errors).
pub fn client_config_from(
    material: &TlsMaterial,
    files: &TlsFiles,
    idle_timeout: Duration,
) -> Result<quinn::ClientConfig, TlsError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(root_store(material, files)?)
        .with_client_auth_cert(
            certs_from_pem(&material.cert, &files.cert, "certificate")?,
            key_from_pem(&material.key, &files.key)?,
        )?;
    tls.alpn_protocols = vec![crate::ALPN.to_vec()];
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    cfg.transport_config(transport_config(idle_timeout));
    Ok(cfg)
}

/// What one [`TlsWatch::check`] found.
#[derive(Debug)]
pub enum Reload<T> {
    /// The files hold the bytes last seen: nothing to do.
    Unchanged,
    /// The files changed and the new config was built.
    Reloaded(T),
    /// The files could not be read or the new config not built; keep the current one.
    Failed {
        /// Why the files could not be read or the new config not built.
        error: TlsError,
        /// The same failure as at the previous check (already reported).
        repeated: bool,
    },
}

/// Watches one end's TLS files for changes (by content, not mtime: Kubernetes secret volumes swap
/// a symlink, and a file rewritten within the same second keeps its mtime).
#[derive(Debug)]
pub struct TlsWatch {
    files: TlsFiles,
    seen: Option<TlsMaterial>,
    last_error: Option<String>,
}

impl TlsWatch {
    /// Starts watching; `current` is the material the running config was built from.
    pub fn new(files: TlsFiles, current: Option<TlsMaterial>) -> Self {
        TlsWatch { files, seen: current, last_error: None }
    }

    /// The watched files.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Re-reads the files; when they changed (or `force`), builds a config with `build`.
    pub fn check<T>(
        &mut self,
        force: bool,
        build: impl FnOnce(&TlsMaterial, &TlsFiles) -> Result<T, TlsError>,
    ) -> Reload<T> {
        let material = match TlsMaterial::read(&self.files) {
            Ok(m) => m,
            Err(error) => return self.failed(error),
        };
        if !force && self.seen.as_ref() == Some(&material) {
            return Reload::Unchanged;
        }
        let built = build(&material, &self.files);
        self.seen = Some(material);
        match built {
            Ok(cfg) => {
                self.last_error = None;
                Reload::Reloaded(cfg)
            }
            Err(error) => self.failed(error),
        }
    }

    fn failed<T>(&mut self, error: TlsError) -> Reload<T> {
        let text = error.to_string();
        let repeated = self.last_error.as_deref() == Some(text.as_str());
        self.last_error = Some(text);
        Reload::Failed { error, repeated }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap().self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn write(files: &TlsFiles, (cert, key): &(String, String)) {
        std::fs::write(&files.ca, cert).unwrap();
        std::fs::write(&files.cert, cert).unwrap();
        std::fs::write(&files.key, key).unwrap();
    }

    #[test]
    fn watch_rebuilds_only_on_change_and_reports_a_broken_file_once() {
        let dir = std::env::temp_dir().join(format!("oomlens-tls-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = TlsFiles { ca: dir.join("ca.pem"), cert: dir.join("cert.pem"), key: dir.join("key.pem") };
        write(&files, &self_signed("one"));
        let idle = Duration::from_secs(3);
        let build = |m: &TlsMaterial, f: &TlsFiles| server_config_from(m, f, idle);

        let mut watch = TlsWatch::new(files.clone(), None);
        assert!(matches!(watch.check(false, build), Reload::Reloaded(_)));
        assert!(matches!(watch.check(false, build), Reload::Unchanged));
        assert!(matches!(watch.check(true, build), Reload::Reloaded(_)), "forced");

        // A broken certificate: reported, then repeated while unchanged.
        std::fs::write(&files.cert, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
        assert!(matches!(watch.check(false, build), Reload::Failed { repeated: false, .. }));
        assert!(matches!(watch.check(true, build), Reload::Failed { repeated: true, .. }));
        // A key that does not belong to the certificate is refused too.
        let (other_cert, _) = self_signed("two");
        std::fs::write(&files.cert, other_cert).unwrap();
        match watch.check(false, build) {
            Reload::Failed { repeated: false, error } => {
                assert!(error.to_string().to_lowercase().contains("key"), "{error}")
            }
            other => panic!("mismatched key accepted: {other:?}"),
        }
        // A missing file.
        std::fs::remove_file(&files.key).unwrap();
        assert!(matches!(watch.check(false, build), Reload::Failed { repeated: false, .. }));
        // Fixed: rebuilt.
        write(&files, &self_signed("three"));
        assert!(matches!(watch.check(false, build), Reload::Reloaded(_)));
        assert!(matches!(watch.check(false, build), Reload::Unchanged));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
