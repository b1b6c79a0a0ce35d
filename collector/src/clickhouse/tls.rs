//! HTTPS to ClickHouse: the HTTP client under the `clickhouse` crate, with a rustls
//! configuration built here (ring provider, as every TLS end of oomlens).
//!
//! * `http://` URLs get a plain connector (TCP keep-alive, the crate's pool idle timeout).
//! * `https://` URLs are verified against `clickhouse.tls_ca` (PEM bundle) when set, else the
//!   system trust store (`/etc/ssl/certs`, as for ClickHouse Cloud); `clickhouse.tls_cert` +
//!   `clickhouse.tls_key` present a client certificate (servers with
//!   `<verificationMode>strict</verificationMode>`). The server name checked is the URL's host.
//!
//! Files are read when the client is built (collector start, each `oomlens` command); a missing
//! or unreadable file is a configuration error naming the key and the path.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::config::ChConfig;

/// Idle connections are closed before ClickHouse's own 3 s keep-alive timeout.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(2);
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// TLS material that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ChTlsError {
    /// A PEM file cannot be read or holds nothing usable.
    #[error("clickhouse.{key} ({path}): {source}")]
    File {
        /// The configuration key naming the file.
        key: &'static str,
        /// The file.
        path: String,
        /// Why it cannot be used.
        source: oomlens_schema::tls::TlsError,
    },
    /// The system trust store has no usable certificate (and no `tls_ca` is set).
    #[error(
        "no usable CA certificate in the system trust store for an https:// ClickHouse URL ({0}); \
         set clickhouse.tls_ca to the CA that signed the server's certificate"
    )]
    NoRoots(String),
    /// rustls refused the material (a key that does not match the certificate, …).
    #[error("clickhouse TLS set-up: {0}")]
    Rustls(#[from] rustls::Error),
}

fn connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_keepalive(Some(TCP_KEEPALIVE));
    http.enforce_http(false);
    http
}

/// The HTTP client for `cfg`'s URL (plain or HTTPS, see the module docs), ready for
/// [`clickhouse::Client::with_http_client`].
pub fn http_client(cfg: &ChConfig) -> Result<clickhouse::Client, ChTlsError> {
    if !cfg.url.starts_with("https://") {
        let client = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(connector());
        return Ok(clickhouse::Client::with_http_client(client));
    }
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(rustls_config(cfg)?)
        .https_only()
        .enable_http1()
        .wrap_connector(connector());
    let client = HyperClient::builder(TokioExecutor::new()).pool_idle_timeout(POOL_IDLE_TIMEOUT).build(https);
    Ok(clickhouse::Client::with_http_client(client))
}

fn file_err(key: &'static str, path: &Path) -> impl FnOnce(oomlens_schema::tls::TlsError) -> ChTlsError {
    let path = path.display().to_string();
    move |source| ChTlsError::File { key, path, source }
}

/// The rustls client configuration of an `https://` URL.
pub fn rustls_config(cfg: &ChConfig) -> Result<rustls::ClientConfig, ChTlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match &cfg.tls_ca {
        Some(ca) => {
            for cert in
                oomlens_schema::tls::load_certs(ca, "CA certificate").map_err(file_err("tls_ca", ca))?
            {
                roots.add(cert)?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found.errors.first().map_or_else(|| "none found".to_owned(), ToString::to_string);
                return Err(ChTlsError::NoRoots(why));
            }
        }
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
    // ALPN (http/1.1) is set by the HTTPS connector itself.
    let config = match (&cfg.tls_cert, &cfg.tls_key) {
        (Some(cert), Some(key)) => {
            let chain = oomlens_schema::tls::load_certs(cert, "client certificate")
                .map_err(file_err("tls_cert", cert))?;
            let key = oomlens_schema::tls::load_key(key).map_err(file_err("tls_key", key))?;
            builder.with_client_auth_cert(chain, key)?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_name_the_key_and_the_path() {
        let cfg = ChConfig {
            url: "https://ch.example:8443".into(),
            tls_ca: Some("/nonexistent/ca.pem".into()),
            ..ChConfig::default()
        };
        let err = rustls_config(&cfg).unwrap_err().to_string();
        assert!(err.contains("clickhouse.tls_ca") && err.contains("/nonexistent/ca.pem"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("ca.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let cfg = ChConfig { tls_ca: Some(garbage), ..cfg };
        let err = rustls_config(&cfg).unwrap_err().to_string();
        assert!(err.contains("no CERTIFICATE block"), "{err}");
    }

    #[test]
    fn plain_http_needs_no_tls_material() {
        assert!(http_client(&ChConfig::default()).is_ok());
    }
}
