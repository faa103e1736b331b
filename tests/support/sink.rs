//! A notification sink on loopback: a real hyper server (HTTP, or TLS with a private CA made
//! with rcgen) that records every body it receives and answers as the test sets: at once, late,
//! with an error status, or never. It runs on its own runtime, so synchronous tests use it too.
#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio_rustls::TlsAcceptor;

/// How the sink answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ok,
    /// 200 after this long.
    Slow(Duration),
    /// This status, every time.
    Status(u16),
    /// Reads the request and never answers.
    Hang,
}

#[derive(Default)]
struct State {
    mode: Option<Mode>,
    /// Requests answered 500 before the mode applies.
    fail_first: usize,
    attempts: usize,
    received: Vec<serde_json::Value>,
}

pub struct Sink {
    pub port: u16,
    /// The private CA's certificate (PEM) when serving TLS.
    pub ca_pem: Option<String>,
    state: Arc<Mutex<State>>,
    _runtime: tokio::runtime::Runtime,
}

fn lock(s: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// A CA and a certificate it signed for `localhost` and 127.0.0.1: (CA PEM, server config).
fn private_ca() -> (String, rustls::ServerConfig) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("params")
        .signed_by(&key, &Issuer::new(ca, ca_key))
        .expect("leaf");
    let key_der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key_der)
    .expect("server config");
    (ca_cert.pem(), config)
}

impl Sink {
    pub fn http(mode: Mode) -> Sink {
        Self::start(mode, false)
    }

    pub fn https(mode: Mode) -> Sink {
        Self::start(mode, true)
    }

    fn start(mode: Mode, tls: bool) -> Sink {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let state = Arc::new(Mutex::new(State {
            mode: Some(mode),
            ..State::default()
        }));
        let (ca_pem, acceptor) = if tls {
            let (pem, config) = private_ca();
            (Some(pem), Some(TlsAcceptor::from(Arc::new(config))))
        } else {
            (None, None)
        };
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let st = state.clone();
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (st, acceptor) = (st.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req| answer(st.clone(), req));
                    let http = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(a) => {
                            if let Ok(tls) = a.accept(tcp).await {
                                let _ = http.serve_connection(TokioIo::new(tls), service).await;
                            }
                        }
                        None => {
                            let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                        }
                    }
                });
            }
        });
        Sink {
            port,
            ca_pem,
            state,
            _runtime: runtime,
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://localhost:{}/hook/s3cr3t-path", self.port)
    }

    pub fn set_mode(&self, mode: Mode) {
        lock(&self.state).mode = Some(mode);
    }

    /// The next `n` requests are answered 500.
    pub fn fail_first(&self, n: usize) {
        lock(&self.state).fail_first = n;
    }

    /// Bodies accepted (answered 2xx), in order.
    pub fn received(&self) -> Vec<serde_json::Value> {
        lock(&self.state).received.clone()
    }

    /// Requests seen, answered or not.
    pub fn attempts(&self) -> usize {
        lock(&self.state).attempts
    }
}

async fn answer(
    st: Arc<Mutex<State>>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mode = {
        let mut s = lock(&st);
        s.attempts += 1;
        if s.fail_first > 0 {
            s.fail_first -= 1;
            None
        } else {
            s.mode
        }
    };
    let status = match mode {
        None => 500,
        Some(Mode::Ok) => 200,
        Some(Mode::Slow(d)) => {
            tokio::time::sleep(d).await;
            200
        }
        Some(Mode::Status(s)) => s,
        Some(Mode::Hang) => {
            std::future::pending::<()>().await;
            500
        }
    };
    if (200..300).contains(&status) {
        let v = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        lock(&st).received.push(v);
    }
    Ok(Response::builder()
        .status(status)
        .body(Full::new(Bytes::from_static(b"ok")))
        .expect("response"))
}
