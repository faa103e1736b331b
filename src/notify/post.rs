//! One POST to a sink: HTTP/1.1 over TCP, or TLS checked against the system's roots or the
//! sink's own CA, directly or through the forward proxy ([`super::proxy`]: a CONNECT tunnel for
//! TLS), everything (DNS, connect, tunnel, handshake, answer) within one deadline. Redirects are
//! not followed. Errors name the sink, never its URL or the proxy's.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;

use super::NotifyError;
use super::config::Format;
use super::proxy::{Proxies, Proxy};

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
    proxy: Option<Proxy>,
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
            proxy: None,
        })
    }

    /// The endpoint reached through the proxy `proxies` name for it, if any.
    pub fn through(self, proxies: &Proxies) -> Endpoint {
        let proxy = proxies
            .for_target(self.tls.is_some(), &self.host, self.port)
            .cloned();
        Endpoint { proxy, ..self }
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
        let (host, port, what) = match &self.proxy {
            Some(p) => (p.host.as_str(), p.port, "proxy"),
            None => (self.host.as_str(), self.port, "connect"),
        };
        let tcp = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| self.err(format!("{what}: {}", e.kind())))?;
        match (&self.tls, &self.proxy) {
            (None, _) => self.exchange(tcp, body).await,
            (Some(config), None) => self.tls_exchange(config, tcp, body).await,
            (Some(config), Some(proxy)) => {
                let tunnel = self.tunnel(tcp, proxy).await?;
                self.tls_exchange(config, tunnel, body).await
            }
        }
    }

    async fn tls_exchange<S>(
        &self,
        config: &Arc<rustls::ClientConfig>,
        io: S,
        body: Vec<u8>,
    ) -> Result<u16, NotifyError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let name = ServerName::try_from(self.host.clone())
            .map_err(|_| self.err("the URL's host is not a TLS server name".into()))?;
        let tls = TlsConnector::from(config.clone())
            .connect(name, io)
            .await
            .map_err(|e| self.err(format!("TLS: {e}")))?;
        self.exchange(tls, body).await
    }

    /// `CONNECT host:port` through the proxy: the stream it answers 2xx on is the sink's.
    async fn tunnel(
        &self,
        tcp: tokio::net::TcpStream,
        proxy: &Proxy,
    ) -> Result<TokioIo<hyper::upgrade::Upgraded>, NotifyError> {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| self.err(format!("proxy: {e}")))?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        let target = crate::net::authority(&self.host, self.port);
        let mut request = http::Request::connect(target.as_str())
            .header(http::header::HOST, target.as_str())
            .header(http::header::USER_AGENT, "headroom");
        if let Some(auth) = &proxy.authorization {
            request = request.header(http::header::PROXY_AUTHORIZATION, auth.as_str());
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|_| self.err("could not build the proxy request".into()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| self.err(format!("proxy: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.err(format!(
                "the proxy answered CONNECT with {}",
                status.as_u16()
            )));
        }
        let upgraded = hyper::upgrade::on(response)
            .await
            .map_err(|e| self.err(format!("proxy: {e}")))?;
        Ok(TokioIo::new(upgraded))
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
        // Plain HTTP through a proxy names the whole URL (absolute form), with the proxy's
        // credential; a tunnel's proxy has had its say.
        let via = self.proxy.as_ref().filter(|_| self.tls.is_none());
        let path = match via {
            Some(_) => format!(
                "http://{}{path}",
                crate::net::authority(&self.host, self.port)
            ),
            None => path,
        };
        let host = self
            .uri
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let result = async {
            let mut request = http::Request::post(path)
                .header(http::header::HOST, host)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::USER_AGENT, "headroom");
            if let Some(auth) = via.and_then(|p| p.authorization.as_ref()) {
                request = request.header(http::header::PROXY_AUTHORIZATION, auth.as_str());
            }
            let request = request
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
