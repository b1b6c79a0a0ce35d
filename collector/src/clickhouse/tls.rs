//! HTTPS to ClickHouse: the HTTP client under the `clickhouse` crate, with the rustls
//! configuration of [`crate::https`] (ring provider, as every TLS end of oomlens).
//!
//! * `http://` URLs get a plain connector (TCP keep-alive, the crate's pool idle timeout).
//! * `https://` URLs are verified against `clickhouse.tls_ca` (PEM bundle) when set, else the
//!   system trust store (`/etc/ssl/certs`, as for ClickHouse Cloud); `clickhouse.tls_cert` +
//!   `clickhouse.tls_key` present a client certificate (servers with
//!   `<verificationMode>strict</verificationMode>`). The server name checked is the URL's host.
//!
//! Files are read when the client is built (collector start, each `oomlens` command); a missing
//! or unreadable file is a configuration error naming the key and the path.

use std::time::Duration;

use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;

use super::config::ChConfig;
use crate::https::{ClientTlsFiles, tcp_connector};

/// TLS material that cannot be used (errors name `clickhouse.tls_ca`, … and the path).
pub type ChTlsError = crate::https::HttpsTlsError;

/// Idle connections are closed before ClickHouse's own 3 s keep-alive timeout.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(2);
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// The HTTP client for `cfg`'s URL (plain or HTTPS, see the module docs), ready for
/// [`clickhouse::Client::with_http_client`].
pub fn http_client(cfg: &ChConfig) -> Result<clickhouse::Client, ChTlsError> {
    if !cfg.url.starts_with("https://") {
        let client = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(tcp_connector(TCP_KEEPALIVE));
        return Ok(clickhouse::Client::with_http_client(client));
    }
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(rustls_config(cfg)?)
        .https_only()
        .enable_http1()
        .wrap_connector(tcp_connector(TCP_KEEPALIVE));
    let client = HyperClient::builder(TokioExecutor::new()).pool_idle_timeout(POOL_IDLE_TIMEOUT).build(https);
    Ok(clickhouse::Client::with_http_client(client))
}

/// The rustls client configuration of an `https://` URL.
pub fn rustls_config(cfg: &ChConfig) -> Result<rustls::ClientConfig, ChTlsError> {
    crate::https::client_config(&ClientTlsFiles {
        section: "clickhouse",
        ca: cfg.tls_ca.as_deref(),
        cert: cfg.tls_cert.as_deref(),
        key: cfg.tls_key.as_deref(),
    })
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
