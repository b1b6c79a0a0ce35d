//! The collector's HTTPS clients, set up one way: the rustls configuration (ring provider, as every
//! TLS end of oomlens) and the TCP connector under hyper, shared by the ClickHouse client
//! ([`crate::clickhouse::tls`]) and the alert senders ([`crate::alert::http`]).
//!
//! The server is verified against a CA bundle (PEM) when one is configured, else against the
//! system trust store (`/etc/ssl/certs`); a client certificate + key is presented when both are
//! configured. The server name checked is the URL's host. Files are read when a client is built;
//! a missing or unusable file is an error naming the configuration key and the path.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;

/// The TLS files of one HTTPS client, and the configuration section that names them (errors say
/// `<section>.tls_ca`, …).
#[derive(Debug, Clone, Copy)]
pub struct ClientTlsFiles<'a> {
    /// `clickhouse`, `alerts`.
    pub section: &'static str,
    /// CA certificate(s), PEM, that signed the server's certificate (`None`: the system trust store).
    pub ca: Option<&'a Path>,
    /// Client certificate chain, PEM (used only together with `key`).
    pub cert: Option<&'a Path>,
    /// The client certificate's private key, PEM.
    pub key: Option<&'a Path>,
}

/// TLS material that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HttpsTlsError {
    /// A PEM file cannot be read or holds nothing usable.
    #[error("{key} ({path}): {source}")]
    File {
        /// The configuration key naming the file (`clickhouse.tls_ca`).
        key: String,
        /// The file.
        path: String,
        /// Why it cannot be used.
        source: oomlens_schema::tls::TlsError,
    },
    /// The system trust store has no usable certificate (and no CA file is set).
    #[error(
        "no usable CA certificate in the system trust store for an https:// URL ({why}); \
         set {section}.tls_ca to the CA that signed the server's certificate"
    )]
    NoRoots {
        /// The configuration section.
        section: &'static str,
        /// What the trust store lookup said.
        why: String,
    },
    /// rustls refused the material (a key that does not match the certificate, …).
    #[error("{0} TLS set-up: {1}")]
    Rustls(&'static str, rustls::Error),
}

/// A TCP connector for hyper that also accepts `https://` URIs (the TLS layer wraps it).
pub fn tcp_connector(keepalive: Duration) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_keepalive(Some(keepalive));
    http.enforce_http(false);
    http
}

/// The rustls client configuration for `files` (see the module docs).
pub fn client_config(files: &ClientTlsFiles<'_>) -> Result<rustls::ClientConfig, HttpsTlsError> {
    let section = files.section;
    let rustls_err = |e| HttpsTlsError::Rustls(section, e);
    let file_err = |key: &str, path: &Path| {
        let key = format!("{section}.{key}");
        let path = path.display().to_string();
        move |source| HttpsTlsError::File { key, path, source }
    };
    let mut roots = rustls::RootCertStore::empty();
    match files.ca {
        Some(ca) => {
            for cert in
                oomlens_schema::tls::load_certs(ca, "CA certificate").map_err(file_err("tls_ca", ca))?
            {
                roots.add(cert).map_err(rustls_err)?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found.errors.first().map_or_else(|| "none found".to_owned(), ToString::to_string);
                return Err(HttpsTlsError::NoRoots { section, why });
            }
        }
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(rustls_err)?
            .with_root_certificates(roots);
    // ALPN (http/1.1) is set by the HTTPS connector itself.
    let config = match (files.cert, files.key) {
        (Some(cert), Some(key)) => {
            let chain = oomlens_schema::tls::load_certs(cert, "client certificate")
                .map_err(file_err("tls_cert", cert))?;
            let key = oomlens_schema::tls::load_key(key).map_err(file_err("tls_key", key))?;
            builder.with_client_auth_cert(chain, key).map_err(rustls_err)?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_section_the_key_and_the_path() {
        let files = ClientTlsFiles {
            section: "alerts",
            ca: Some(Path::new("/nonexistent/ca.pem")),
            cert: None,
            key: None,
        };
        let err = client_config(&files).unwrap_err().to_string();
        assert!(err.contains("alerts.tls_ca") && err.contains("/nonexistent/ca.pem"), "{err}");
    }
}
