//! The certificate the listener serves, swapped while it runs: each TLS handshake asks for the
//! current one, so a renewal needs no restart and no new listener. Connections already open
//! keep the certificate they were made with.

use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::CertError;
use super::certs::ServingCert;

/// The certificate handshakes are answered with.
#[derive(Debug)]
pub struct LiveCert {
    current: RwLock<Arc<CertifiedKey>>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `cert`'s chain and key, checked to belong together.
fn certified(cert: &ServingCert) -> Result<Arc<CertifiedKey>, CertError> {
    let bad = |what: &'static str, e: String| CertError::Unusable { what, detail: e };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.cert.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| bad("certificate", e.to_string()))?;
    if chain.is_empty() {
        return Err(bad("certificate", "no certificate in it".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(cert.key.as_bytes())
        .map_err(|e| bad("key", e.to_string()))?;
    CertifiedKey::from_der(chain, key, &provider())
        .map(Arc::new)
        .map_err(|e| bad("certificate and key", e.to_string()))
}

impl LiveCert {
    pub fn new(cert: &ServingCert) -> Result<Self, CertError> {
        Ok(LiveCert {
            current: RwLock::new(certified(cert)?),
        })
    }

    /// Serves `cert` from the next handshake on; an unusable one leaves the current in place.
    pub fn swap(&self, cert: &ServingCert) -> Result<(), CertError> {
        let next = certified(cert)?;
        // A writer cannot panic while holding the lock (it only assigns), so poisoning is moot.
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next;
        Ok(())
    }
}

impl ResolvesServerCert for LiveCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.current.read().unwrap_or_else(|e| e.into_inner()),
        ))
    }
}

/// The server configuration answering with `live`'s certificate (HTTP/1.1 only: the API
/// server's webhook client speaks it, and one review is one short request).
pub fn server_config(live: Arc<LiveCert>) -> Result<Arc<rustls::ServerConfig>, CertError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| CertError::Unusable {
            what: "TLS versions",
            detail: e.to_string(),
        })?
        .with_no_client_auth()
        .with_cert_resolver(live);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
