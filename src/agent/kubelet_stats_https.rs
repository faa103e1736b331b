//! This node's kubelet, asked directly: `GET https://<status.hostIP>:10250/stats/summary` with the
//! service account's token as bearer. The kubelet authorizes that as `nodes/stats get` (a
//! SubjectAccessReview), which reaches nothing but statistics; the API server's node proxy would
//! need `nodes/proxy`, which reaches every kubelet API on every node (exec included).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use crate::ca::CaError;

/// A summary for a full node (110 pods, their volumes and containers) is well under a megabyte.
pub const MAX_BODY: usize = 16 << 20;

/// Where the kubelet is and how to prove who we are to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletEndpoint {
    pub host: String,
    pub port: u16,
    /// CA bundle the kubelet's serving certificate must chain to (the name is not checked: the
    /// certificate of a kubelet that made its own often names only the host name).
    pub ca_file: PathBuf,
    /// Re-read at every request: projected service-account tokens rotate.
    pub token_file: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("{0}")]
    Ca(#[from] CaError),
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("kubelet {addr}: {detail}")]
    Connect { addr: String, detail: String },
    #[error("kubelet {addr}: HTTP {status}")]
    Status { addr: String, status: u16 },
    #[error("kubelet {addr}: no answer within {secs}s")]
    Timeout { addr: String, secs: u64 },
}

impl KubeletEndpoint {
    fn authority(&self) -> String {
        crate::net::authority(&self.host, self.port)
    }
}

async fn read(path: &PathBuf) -> Result<Vec<u8>, KubeletError> {
    tokio::fs::read(path)
        .await
        .map_err(|source| KubeletError::Read {
            path: path.display().to_string(),
            source,
        })
}

/// The summary's body, within `timeout` for everything (files, connect, TLS, response).
pub async fn fetch_summary(
    ep: &KubeletEndpoint,
    timeout: Duration,
) -> Result<Vec<u8>, KubeletError> {
    match tokio::time::timeout(timeout, fetch(ep)).await {
        Ok(r) => r,
        Err(_) => Err(KubeletError::Timeout {
            addr: ep.authority(),
            secs: timeout.as_secs(),
        }),
    }
}

async fn fetch(ep: &KubeletEndpoint) -> Result<Vec<u8>, KubeletError> {
    let addr = ep.authority();
    let err = |detail: String| KubeletError::Connect {
        addr: addr.clone(),
        detail,
    };
    let ca = read(&ep.ca_file).await?;
    let token = read(&ep.token_file).await?;
    let token = String::from_utf8_lossy(&token).trim().to_string();
    let config = crate::ca::chain_only(&ep.ca_file.display().to_string(), &ca)?;
    let name = ServerName::try_from(ep.host.clone()).map_err(|e| err(e.to_string()))?;
    let tcp = tokio::net::TcpStream::connect((ep.host.as_str(), ep.port))
        .await
        .map_err(|e| err(e.to_string()))?;
    let tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| err(format!("TLS: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| err(e.to_string()))?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let result = async {
        let request = http::Request::get("/stats/summary")
            .header(http::header::HOST, &addr)
            .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Empty::<Bytes>::new())
            .map_err(|e| err(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| err(e.to_string()))?;
        if !response.status().is_success() {
            return Err(KubeletError::Status {
                addr: addr.clone(),
                status: response.status().as_u16(),
            });
        }
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| err(format!("reading the summary: {e}")))?;
        Ok(body.to_bytes().to_vec())
    }
    .await;
    driver.abort();
    result
}
