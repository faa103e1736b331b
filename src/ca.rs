//! Certificate checking against a configured CA, without the name: the agent reaches pods and
//! its own node by IP, which serving certificates often do not carry (libpq calls this
//! `verify-ca`). Used for Postgres (`sslmode: verify-ca`) and the kubelet. Notification sinks are
//! reached by name, which is checked ([`named`]).

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// A CA bundle (PEM) that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("CA file {path}: {detail}")]
    Unusable { path: String, detail: String },
}

/// The roots in `pem` (`path` names the bundle in errors).
fn roots(path: &str, pem: &[u8]) -> Result<RootCertStore, CaError> {
    let bad = |detail: String| CaError::Unusable {
        path: path.to_string(),
        detail,
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| bad(e.to_string()))?;
        roots.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no certificate in it".into()));
    }
    Ok(roots)
}

/// A client configuration that accepts a chain to a CA in `pem` for any name (`path` names the
/// bundle in errors).
pub fn chain_only(path: &str, pem: &[u8]) -> Result<ClientConfig, CaError> {
    let bad = |detail: String| CaError::Unusable {
        path: path.to_string(),
        detail,
    };
    let roots = roots(path, pem)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| bad(e.to_string()))?;
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyName(webpki)))
        .with_no_client_auth())
}

/// A client configuration that checks the chain and the name, against the CAs in `pem`, or the
/// system's roots when `pem` is `None` (a public endpoint reached by its name).
pub fn named(path: &str, pem: Option<&[u8]>) -> Result<ClientConfig, CaError> {
    let bad = |detail: String| CaError::Unusable {
        path: path.to_string(),
        detail,
    };
    let roots = match pem {
        Some(pem) => roots(path, pem)?,
        None => {
            let mut roots = RootCertStore::empty();
            // Unreadable system certificates are skipped; none at all is an error below.
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if roots.is_empty() {
                return Err(bad("no system CA certificates found".into()));
            }
            roots
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A chain to the configured CA, for any name.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
