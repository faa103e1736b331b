//! One POST to a sink: HTTP/1.1 over TCP, or TLS checked against the system's roots or the
//! sink's own CA, everything (DNS, connect, handshake, answer) within one deadline. Redirects
//! are not followed. Errors name the sink, never its URL.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;

use super::NotifyError;
use super::config::Format;

/// A sink's answer body is read only this far (it is never used).
const MAX_ANSWER: usize = 64 << 10;

/// Where a sink's messages go, from its Secret.
pub struct Endpoint {
    pub sink: String,
    pub format: Format,
    uri: http::Uri,
    host: String,
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Endpoint {
    /// `url` from the sink's Secret, `ca` its private CA bundle if any.
    pub fn new(
        sink: &str,
        format: Format,
        url: &str,
        ca: Option<&[u8]>,
    ) -> Result<Endpoint, NotifyError> {
        let bad = |detail: &str| NotifyError::Endpoint {
            sink: sink.to_string(),
            detail: detail.to_string(),
        };
        let uri: http::Uri = url
            .trim()
            .parse()
            .map_err(|_| bad("the URL in its Secret is not a URL"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad("the URL in its Secret must be http:// or https://")),
        };
        let host = uri
            .host()
            .ok_or_else(|| bad("the URL in its Secret has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            let config = crate::ca::named(&format!("sink {sink} CA bundle"), ca)
                .map_err(|e| bad(&e.to_string()))?;
            Some(Arc::new(config))
        } else {
            None
        };
        Ok(Endpoint {
            sink: sink.to_string(),
            format,
            uri,
            host,
            port,
            tls,
        })
    }

    fn err(&self, detail: String) -> NotifyError {
        NotifyError::Post {
            sink: self.sink.clone(),
            detail,
        }
    }

    /// POSTs `body`; the answer's status, or why there was none, within `timeout`.
    pub async fn post(&self, body: Vec<u8>, timeout: Duration) -> Result<u16, NotifyError> {
        match tokio::time::timeout(timeout, self.connect_and_post(body)).await {
            Ok(r) => r,
            Err(_) => Err(NotifyError::Timeout {
                sink: self.sink.clone(),
                millis: timeout.as_millis(),
            }),
        }
    }

    async fn connect_and_post(&self, body: Vec<u8>) -> Result<u16, NotifyError> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| self.err(format!("connect: {}", e.kind())))?;
        let Some(config) = &self.tls else {
            return self.exchange(tcp, body).await;
        };
        let name = ServerName::try_from(self.host.clone())
            .map_err(|_| self.err("the URL's host is not a TLS server name".into()))?;
        let tls = TlsConnector::from(config.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| self.err(format!("TLS: {e}")))?;
        self.exchange(tls, body).await
    }

    async fn exchange<S>(&self, io: S, body: Vec<u8>) -> Result<u16, NotifyError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| self.err(e.to_string()))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let path = self
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let authority = self
            .uri
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let result = async {
            let request = http::Request::post(path)
                .header(http::header::HOST, authority)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::USER_AGENT, "headroom")
                .body(Full::new(Bytes::from(body)))
                .map_err(|_| self.err("could not build the request".into()))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| self.err(e.to_string()))?;
            let status = response.status().as_u16();
            // Read (bounded) so the connection ends cleanly; the content is not used.
            let _ = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await;
            Ok(status)
        }
        .await;
        driver.abort();
        result
    }
}
