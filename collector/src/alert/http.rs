//! The alert senders' HTTP client: `POST` of a JSON body over hyper (HTTP/1.1, pooled
//! connections), `http://` and `https://` alike — TLS with the `[alerts]` CA / client certificate
//! ([`crate::https`]). Each request has one deadline for connecting, sending and reading the
//! answer; the answer is classified for the retry loop ([`Delivery`]): 2xx delivered; connection
//! errors, timeouts, 5xx, 408 and 429 worth retrying (with the `Retry-After` of a 429/503); any
//! other status rejected for good. At most [`MAX_ANSWER_BYTES`] of an answer are read.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::https::{ClientTlsFiles, HttpsTlsError, client_config, tcp_connector};

/// Most bytes of an answer read (the rest is discarded with the connection).
pub const MAX_ANSWER_BYTES: usize = 64 << 10;
/// Idle pooled connections are closed after this long.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(20);
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// What became of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// 2xx.
    Delivered(StatusCode),
    /// Worth another try: connection error, timeout, 5xx, 408, 429.
    Retry {
        /// What happened (status or error), for the log.
        reason: String,
        /// The server's `Retry-After` (seconds form), when it sent one.
        retry_after: Option<Duration>,
    },
    /// Refused for good (another 4xx, …): retrying would be refused again.
    Rejected {
        /// The status.
        status: StatusCode,
        /// The start of the answer, for the log.
        answer: String,
    },
}

/// An HTTP(S) client for alert targets.
#[derive(Debug, Clone)]
pub struct AlertHttp {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl AlertHttp {
    /// A client with `timeout` per request. With `tls`, `https://` URLs are verified against its
    /// CA (or the system trust store) and present its client certificate; without, only
    /// `http://` URLs work.
    pub fn new(tls: Option<ClientTlsFiles<'_>>, timeout: Duration) -> Result<AlertHttp, HttpsTlsError> {
        let config = match tls {
            Some(files) => client_config(&files)?,
            // Never used: http:// only. An empty trust store refuses every server.
            None => rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| HttpsTlsError::Rustls("alerts", e))?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
        };
        let mut tcp = tcp_connector(TCP_KEEPALIVE);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(https);
        Ok(AlertHttp { client, timeout })
    }

    /// `POST`s `body` (JSON) to `uri` with `headers`, within the timeout.
    pub async fn post_json(&self, uri: &Uri, headers: &HeaderMap, body: Bytes) -> Delivery {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri.clone();
        let h = request.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(
            header::USER_AGENT,
            HeaderValue::from_static(concat!("oomlens-collector/", env!("CARGO_PKG_VERSION"))),
        );
        for (name, value) in headers {
            h.insert(name, value.clone());
        }
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| error_chain(&e))?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            // Read the answer (bounded) so the connection can be reused.
            let answer = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok::<_, String>((status, retry_after, answer))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => {
                Delivery::Retry { reason: format!("no answer within {:?}", self.timeout), retry_after: None }
            }
            Ok(Err(e)) => Delivery::Retry { reason: e, retry_after: None },
            Ok(Ok((status, retry_after, answer))) => classify(status, retry_after, &answer),
        }
    }
}

/// The [`Delivery`] of an answer.
pub fn classify(status: StatusCode, retry_after: Option<Duration>, answer: &[u8]) -> Delivery {
    if status.is_success() {
        Delivery::Delivered(status)
    } else if status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
    {
        Delivery::Retry { reason: format!("HTTP {status}"), retry_after }
    } else {
        let answer = String::from_utf8_lossy(&answer[..answer.len().min(512)]).trim().to_owned();
        Delivery::Rejected { status, answer }
    }
}

/// An error with its sources: `client error (Connect): tcp connect error: Connection refused`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_classified_for_the_retry_loop() {
        assert_eq!(classify(StatusCode::OK, None, b""), Delivery::Delivered(StatusCode::OK));
        assert!(matches!(classify(StatusCode::SERVICE_UNAVAILABLE, None, b""), Delivery::Retry { .. }));
        let after = Some(Duration::from_secs(3));
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, after, b""),
            Delivery::Retry { reason: "HTTP 429 Too Many Requests".into(), retry_after: after }
        );
        assert!(matches!(classify(StatusCode::REQUEST_TIMEOUT, None, b""), Delivery::Retry { .. }));
        assert_eq!(
            classify(StatusCode::BAD_REQUEST, None, b"bad label\n"),
            Delivery::Rejected { status: StatusCode::BAD_REQUEST, answer: "bad label".into() }
        );
        assert!(matches!(classify(StatusCode::NOT_FOUND, None, b""), Delivery::Rejected { .. }));
    }

    #[tokio::test]
    async fn a_refused_connection_is_retried() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let http = AlertHttp::new(None, Duration::from_secs(2)).unwrap();
        let uri: Uri = format!("http://127.0.0.1:{port}/x").parse().unwrap();
        match http.post_json(&uri, &HeaderMap::new(), Bytes::from_static(b"{}")).await {
            Delivery::Retry { reason, .. } => assert!(reason.to_lowercase().contains("connect"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
}
