//! The HTTPS listener over real TLS on loopback, with hostile clients and an API server that
//! refuses or never answers: every review is answered and allowed; a silent one by the deadline.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use super::certs;
use super::handle::{Reviewer, Sources};
use super::metrics::{Outcome, WebhookMetrics};

struct Running {
    port: u16,
    ca: String,
    registry: prometheus::Registry,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A reviewer whose API server is at `api`, with empty watch stores, and the registry its
/// metrics count in.
pub(super) fn reviewer(api: &str, deadline: Duration) -> (Reviewer, prometheus::Registry) {
    let client =
        kube::Client::try_from(kube::Config::new(api.parse().expect("url"))).expect("client");
    let (classes, _w1) = kube::runtime::reflector::store();
    let (namespaces, _w3) = kube::runtime::reflector::store();
    let (configmaps, _w2) = kube::runtime::reflector::store();
    let registry = prometheus::Registry::new();
    let reviewer = Reviewer {
        client,
        sources: Sources {
            classes,
            namespaces,
            configmaps,
            configmap: "headroom/headroom".into(),
        },
        deadline,
        metrics: WebhookMetrics::new(&registry).expect("metrics"),
    };
    (reviewer, registry)
}

/// The webhook on a loopback port, its API server at `api` (nothing real answers there).
async fn start(api: &str, deadline: Duration) -> Running {
    let cert = certs::generate(
        &["127.0.0.1".into()],
        jiff::Timestamp::now(),
        Duration::from_secs(3600),
    )
    .expect("cert");
    let live = Arc::new(super::live::LiveCert::new(&cert).expect("live"));
    let tls = super::live::server_config(live).expect("tls");
    let (reviewer, registry) = reviewer(api, deadline);
    let reviewer = Arc::new(reviewer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(super::serve::serve(listener, tls, reviewer, async move {
        let _ = stopped.await;
    }));
    Running {
        port,
        ca: cert.ca,
        registry,
        stop: Some(stop),
    }
}

/// One request over TLS verified against the webhook's CA: (status, body).
async fn request(r: &Running, method: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(r.ca.as_bytes()).expect("ca"))
        .expect("root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", r.port))
        .await
        .expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("the certificate verifies for 127.0.0.1");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri("/mutate")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let resp = send.send_request(req).await.expect("response");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, body.to_vec())
}

/// Requests answered with `outcome`, from the webhook's metrics.
fn answered(r: &Running, outcome: Outcome) -> u64 {
    r.registry
        .gather()
        .iter()
        .filter(|f| f.name() == "headroom_webhook_requests_total")
        .flat_map(|f| f.get_metric())
        .filter(|m| {
            m.get_label()
                .iter()
                .any(|l| l.name() == "outcome" && l.value() == outcome.as_str())
        })
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

pub(super) fn review(object: Value) -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-7", "operation": "CREATE", "namespace": "db",
            "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "object": object,
        },
    })
    .to_string()
    .into_bytes()
}

fn allowed(body: &[u8]) -> Value {
    let v: Value = serde_json::from_slice(body).expect("JSON");
    assert_eq!(v["response"]["allowed"], true, "{v}");
    v["response"].clone()
}

fn cnpg_claim() -> Value {
    json!({
        "metadata": {"name": "pg-3", "labels": {"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"},
                     "annotations": {"headroom.dev/enabled": "true", "headroom.dev/limit": "1Gi"}},
        "spec": {"resources": {"requests": {"storage": "64Mi"}}},
    })
}

#[tokio::test]
async fn hostile_clients_get_answers_never_a_denial() {
    // Nothing listens on port 1: any read the webhook tried would fail at once.
    let r = start("http://127.0.0.1:1", Duration::from_secs(2)).await;
    let (status, body) = request(&r, "POST", b"{not json".to_vec()).await;
    assert_eq!(status, 200);
    let resp = allowed(&body);
    assert!(
        resp["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("AdmissionReview"))
    );
    assert_eq!(request(&r, "GET", Vec::new()).await.0, 405);
    assert_eq!(request(&r, "POST", vec![b' '; 5 << 20]).await.0, 413);
    // No group and no ordinal: answered without any read.
    let lone = json!({"metadata": {"name": "scratch"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}});
    let resp = allowed(&request(&r, "POST", review(lone)).await.1);
    assert_eq!(resp["uid"], "u-7");
    assert!(resp.get("patch").is_none() && resp.get("warnings").is_none());
    // A group whose members cannot be read: allowed unchanged, and told why.
    let resp = allowed(&request(&r, "POST", review(cnpg_claim())).await.1);
    assert!(resp.get("patch").is_none());
    let warning = resp["warnings"][0].as_str().unwrap_or("");
    assert!(
        warning.contains("db/pg-3") && warning.contains("persistentvolumeclaims"),
        "{warning}"
    );
    // Each counted once, by what became of it.
    for (outcome, n) in [
        (Outcome::Unreadable, 1),
        (Outcome::Refused, 2),
        (Outcome::AsRequested, 1),
        (Outcome::LookupFailed, 1),
        (Outcome::Raised, 0),
        (Outcome::TimedOut, 0),
    ] {
        assert_eq!(answered(&r, outcome), n, "{outcome:?}");
    }
}

#[tokio::test]
async fn an_api_server_that_never_answers_costs_one_deadline() {
    // Accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let api = format!(
        "http://127.0.0.1:{}",
        silent.local_addr().expect("addr").port()
    );
    let r = start(&api, Duration::from_millis(300)).await;
    let resp = allowed(&request(&r, "POST", review(cnpg_claim())).await.1);
    assert!(resp.get("patch").is_none());
    assert!(
        resp["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("no size decided within")),
        "{resp}"
    );
    assert_eq!(answered(&r, Outcome::TimedOut), 1);
    drop(silent);
}

/// The certificate `port` serves, accepted without verification (the test compares it).
async fn served_der(port: u16) -> Vec<u8> {
    #[derive(Debug)]
    struct AnyCert(Arc<rustls::crypto::CryptoProvider>);
    impl rustls::client::danger::ServerCertVerifier for AnyCert {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                m,
                c,
                d,
                &self.0.signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                m,
                c,
                d,
                &self.0.signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("handshake");
    tls.get_ref().1.peer_certificates().expect("a certificate")[0].to_vec()
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("pem")
        .to_vec()
}

/// Polls `port` until it serves `want`, for at most 5 s.
async fn wait_served(port: u16, want: &[u8]) -> bool {
    for _ in 0..50 {
        if served_der(port).await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn files_are_read_again_and_a_pair_that_loads_is_served_without_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let make = || {
        certs::generate(
            &["127.0.0.1".into()],
            jiff::Timestamp::now(),
            Duration::from_secs(3600),
        )
        .expect("cert")
    };
    let (a, b) = (make(), make());
    std::fs::write(&cert_file, &a.cert).expect("write");
    std::fs::write(&key_file, &a.key).expect("write");
    let cfg = super::WebhookConfig {
        listen: "127.0.0.1:0".into(),
        namespace: "headroom".into(),
        tls: super::Tls::Files {
            cert: cert_file.clone(),
            key: key_file.clone(),
            ca: None,
        },
        configuration: None,
        deadline: Duration::from_secs(1),
        // Files are checked every validity/30: 300 ms.
        validity: Duration::from_secs(9),
    };
    let client = kube::Client::try_from(kube::Config::new(
        "http://127.0.0.1:1".parse().expect("url"),
    ))
    .expect("client");
    let (classes, _w1) = kube::runtime::reflector::store();
    let (namespaces, _w3) = kube::runtime::reflector::store();
    let (configmaps, _w2) = kube::runtime::reflector::store();
    let sources = Sources {
        classes,
        namespaces,
        configmaps,
        configmap: "headroom/headroom".into(),
    };
    let registry = prometheus::Registry::new();
    let metrics = WebhookMetrics::new(&registry).expect("metrics");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(super::run(cfg, listener, client, sources, metrics, async {
        let _ = stopped.await;
    }));
    assert!(wait_served(port, &der_of(&a.cert)).await, "the first pair");
    let expiry = || {
        registry
            .gather()
            .iter()
            .find(|f| f.name() == "headroom_webhook_certificate_expiry_timestamp_seconds")
            .map(|f| f.get_metric()[0].get_gauge().get_value())
    };
    let not_after =
        |c: &certs::ServingCert| certs::validity(&c.cert).expect("validity").not_after as f64;
    assert_eq!(expiry(), Some(not_after(&a)));

    // Renewed on disk (as the kubelet updates a mounted Secret): served from the next handshake.
    std::fs::write(&key_file, &b.key).expect("write");
    std::fs::write(&cert_file, &b.cert).expect("write");
    assert!(
        wait_served(port, &der_of(&b.cert)).await,
        "the renewed pair"
    );
    assert_eq!(expiry(), Some(not_after(&b)));

    // A certificate whose key is not there: the last pair that loaded is still served.
    std::fs::write(&cert_file, make().cert).expect("write");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(served_der(port).await, der_of(&b.cert));
    assert_eq!(expiry(), Some(not_after(&b)));
    let _ = stop.send(());
    running.await.expect("join").expect("run");
}
