//! Certificate checking against a configured CA, without the name: the agent reaches pods and
//! its own node by IP, which serving certificates often do not carry (libpq calls this
//! `verify-ca`). Used for Postgres (`sslmode: verify-ca`) and the kubelet. Notification sinks are
//! reached by name, which is checked ([`named`]). Postgres' encrypt-only modes check no
//! certificate at all ([`encrypt_only`]), through the same verifier as `verify-ca`.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
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
    name_free(provider, Some(webpki)).map_err(|e| bad(e.to_string()))
}

/// A client configuration that accepts any certificate, checking only that the handshake is
/// signed by it (libpq's `sslmode=prefer|require`: encrypted, not authenticated).
pub fn encrypt_only() -> Result<ClientConfig, rustls::Error> {
    name_free(Arc::new(rustls::crypto::ring::default_provider()), None)
}

fn name_free(
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
) -> Result<ClientConfig, rustls::Error> {
    Ok(ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NameFree { provider, chain }))
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

/// A chain to the configured CA for any name, or (no CA) any certificate. The handshake's
/// signatures are checked either way with the provider's algorithms, which are also what the
/// chain's own verifier checks them with (it is built from the same provider).
#[derive(Debug)]
struct NameFree {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for NameFree {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
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
        rustls::crypto::verify_tls12_signature(message, cert, dss, self.algorithms())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, self.algorithms())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms().supported_schemes()
    }
}

impl NameFree {
    fn algorithms(&self) -> &WebPkiSupportedAlgorithms {
        &self.provider.signature_verification_algorithms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use rustls::pki_types::PrivateKeyDer;
    use rustls::{ClientConnection, ServerConfig, ServerConnection};

    /// A CA called `name` (PEM) and a server that shows a certificate it signed for
    /// `pg.example` only.
    fn private_ca(name: &str) -> (String, ServerConfig) {
        let ca_key = KeyPair::generate().expect("key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.distinguished_name.push(DnType::CommonName, name);
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_pem = ca.self_signed(&ca_key).expect("CA").pem();
        let key = KeyPair::generate().expect("key");
        let leaf = CertificateParams::new(vec!["pg.example".to_string()])
            .expect("params")
            .signed_by(&key, &Issuer::new(ca, ca_key))
            .expect("leaf");
        let key = PrivateKeyDer::try_from(key.serialize_der()).expect("key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key)
            .expect("server config");
        (ca_pem, server)
    }

    /// A whole handshake in memory, the client reaching the server as `name`.
    fn handshake(
        client: ClientConfig,
        server: ServerConfig,
        name: &str,
    ) -> Result<(), rustls::Error> {
        let name = ServerName::try_from(name.to_string()).expect("name");
        let mut c = ClientConnection::new(Arc::new(client), name)?;
        let mut s = ServerConnection::new(Arc::new(server))?;
        for _ in 0..10 {
            let mut wire = Vec::new();
            c.write_tls(&mut wire).expect("client writes");
            s.read_tls(&mut wire.as_slice()).expect("server reads");
            s.process_new_packets()?;
            wire.clear();
            s.write_tls(&mut wire).expect("server writes");
            c.read_tls(&mut wire.as_slice()).expect("client reads");
            c.process_new_packets()?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not finish");
    }

    #[test]
    fn verify_ca_takes_a_chain_to_its_ca_under_any_name_and_no_other() {
        let (ca, server) = private_ca("pg CA");
        let client = chain_only("ca.pem", ca.as_bytes()).expect("config");
        handshake(client, server.clone(), "10.1.2.3").expect("a chain to the CA, another name");
        let (other, _) = private_ca("another CA");
        let client = chain_only("other.pem", other.as_bytes()).expect("config");
        let e = handshake(client, server, "pg.example").expect_err("another CA");
        assert!(
            matches!(
                e,
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
            ),
            "{e}"
        );
    }

    #[test]
    fn encrypt_only_takes_any_certificate_and_named_checks_the_name() {
        let (ca, server) = private_ca("pg CA");
        let client = encrypt_only().expect("config");
        handshake(client, server.clone(), "10.1.2.3").expect("any certificate");
        let client = named("ca.pem", Some(ca.as_bytes())).expect("config");
        handshake(client.clone(), server.clone(), "pg.example").expect("its name");
        let e = handshake(client, server, "10.1.2.3").expect_err("not its name");
        assert!(matches!(e, rustls::Error::InvalidCertificate(_)), "{e}");
    }

    #[test]
    fn a_bundle_without_a_certificate_is_unusable() {
        let e = chain_only("empty.pem", b"").expect_err("no certificate");
        assert_eq!(e.to_string(), "CA file empty.pem: no certificate in it");
    }
}
