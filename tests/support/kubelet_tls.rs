//! A kubelet's stats endpoint over real TLS: `GET /stats/summary` answers the summary it is given
//! when the bearer token is right, 401 otherwise, and records every request. Its certificate,
//! made with the openssl CLI, is signed by a CA the test hands to the agent.
#![allow(dead_code)]

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// One request: its path and whether it carried the right token.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub authorized: bool,
}

pub struct FakeKubelet {
    pub port: u16,
    pub ca: PathBuf,
    pub token: PathBuf,
    seen: Arc<Mutex<Vec<Seen>>>,
    summary: Arc<Mutex<serde_json::Value>>,
    _dir: tempfile::TempDir,
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run the openssl CLI");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a serving certificate it signed, as a kubelet's (named after the node, not the IP).
pub fn make_certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let p = |n: &str| dir.join(n).to_str().expect("utf-8").to_string();
    std::fs::write(
        dir.join("ext"),
        "basicConstraints=CA:FALSE\nsubjectAltName=DNS:node-a\n",
    )
    .expect("ext");
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=kubelet-ca",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.crt"),
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=node-a",
        "-keyout",
        &p("tls.key"),
        "-out",
        &p("tls.csr"),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &p("tls.csr"),
        "-CA",
        &p("ca.crt"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &p("ext"),
        "-out",
        &p("tls.crt"),
    ]);
    (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"))
}

impl FakeKubelet {
    pub async fn start(summary: serde_json::Value) -> FakeKubelet {
        let dir = tempfile::tempdir().expect("dir");
        let (ca, crt, key) = make_certificates(dir.path());
        let token = dir.path().join("token");
        std::fs::write(&token, "the-agents-token\n").expect("token");
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&crt)
            .expect("crt")
            .map(|c| c.expect("cert"))
            .collect();
        let key = PrivateKeyDer::from_pem_file(&key).expect("key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let summary = Arc::new(Mutex::new(summary));
        let (seen2, summary2) = (seen.clone(), summary.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, seen, summary) = (acceptor.clone(), seen2.clone(), summary2.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (seen, summary) = (seen.clone(), summary.clone());
                        async move {
                            let authorized = req
                                .headers()
                                .get(http::header::AUTHORIZATION)
                                .and_then(|v| v.to_str().ok())
                                == Some("Bearer the-agents-token");
                            let path = req.uri().path().to_string();
                            seen.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
                                path: path.clone(),
                                authorized,
                            });
                            let (status, body) = match (authorized, path.as_str()) {
                                (false, _) => (401, "Unauthorized".to_string()),
                                (true, "/stats/summary") => (
                                    200,
                                    summary
                                        .lock()
                                        .unwrap_or_else(|e| e.into_inner())
                                        .to_string(),
                                ),
                                (true, _) => (404, "not found".to_string()),
                            };
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::from(body)))
                                    .expect("response"),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        FakeKubelet {
            port,
            ca,
            token,
            seen,
            summary,
            _dir: dir,
        }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The agent's flags to reach this kubelet as its node's.
    pub fn agent_flags(&self) -> Vec<String> {
        vec![
            "--host-ip".into(),
            "127.0.0.1".into(),
            "--kubelet-port".into(),
            self.port.to_string(),
            "--kubelet-ca".into(),
            self.ca.display().to_string(),
            "--kubelet-token-file".into(),
            self.token.display().to_string(),
        ]
    }
}
