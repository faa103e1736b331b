//! The serving certificate without cert-manager. The first agent that finds the Secret missing
//! makes a CA and a serving certificate signed by it and creates the Secret; creation is the
//! lock (an agent that loses the race with 409 reads the winner's), so every agent serves the
//! same certificate. Each agent then sets the webhook configuration's `caBundle` when it differs.
//! The CA's key is never stored: nothing signs with it again (to rotate, delete the Secret and
//! restart the agents).

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::{CertError, WebhookError};

pub const CA_KEY: &str = "ca.crt";
pub const CERT_KEY: &str = "tls.crt";
pub const KEY_KEY: &str = "tls.key";

/// A serving certificate, its key and the CA that signed it, in PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct ServingCert {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert").finish_non_exhaustive()
    }
}

/// The names the certificate is for: the Service's DNS names and any extra ones (a webhook
/// reached by URL), IP addresses included.
pub fn names(service: &str, namespace: &str, extra: &[String]) -> Vec<String> {
    let mut out = vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ];
    out.extend(
        extra
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
    );
    out
}

/// A new CA (ECDSA P-256) and a serving certificate for `names` signed by it, valid from the
/// start of this year for ten years.
pub fn generate(names: &[String], year: i32) -> Result<ServingCert, CertError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use rcgen::{ExtendedKeyUsagePurpose as Eku, KeyUsagePurpose as Ku, date_time_ymd};
    let gen_err = |e: rcgen::Error| CertError::Generate(e.to_string());
    let ca_key = KeyPair::generate().map_err(gen_err)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "headroom webhook CA");
    ca.key_usages = vec![Ku::KeyCertSign, Ku::CrlSign, Ku::DigitalSignature];
    ca.not_before = date_time_ymd(year, 1, 1);
    ca.not_after = date_time_ymd(year + 10, 1, 1);
    let ca_cert = ca.self_signed(&ca_key).map_err(gen_err)?;

    let key = KeyPair::generate().map_err(gen_err)?;
    let mut leaf = CertificateParams::new(names.to_vec()).map_err(gen_err)?;
    let cn = names.first().cloned().unwrap_or_else(|| "headroom".into());
    leaf.distinguished_name.push(DnType::CommonName, cn);
    leaf.key_usages = vec![Ku::DigitalSignature];
    leaf.extended_key_usages = vec![Eku::ServerAuth];
    leaf.not_before = ca.not_before;
    leaf.not_after = ca.not_after;
    let cert = leaf
        .signed_by(&key, &Issuer::new(ca, ca_key))
        .map_err(gen_err)?;
    Ok(ServingCert {
        ca: ca_cert.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn from_secret(secret: &Secret, name: &str) -> Result<ServingCert, CertError> {
    let data = secret.data.clone().unwrap_or_default();
    let field = |k: &'static str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .ok_or(CertError::SecretField {
                secret: name.to_string(),
                key: k,
            })
    };
    Ok(ServingCert {
        ca: field(CA_KEY)?,
        cert: field(CERT_KEY)?,
        key: field(KEY_KEY)?,
    })
}

fn secret_of(cert: &ServingCert, namespace: &str, name: &str) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/name".to_string(),
                "headroom".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (CA_KEY.to_string(), bytes(&cert.ca)),
            (CERT_KEY.to_string(), bytes(&cert.cert)),
            (KEY_KEY.to_string(), bytes(&cert.key)),
        ])),
        ..Secret::default()
    }
}

/// The Secret `namespace/name`'s certificate, created (for `names`) when it is missing.
pub async fn ensure_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    names: &[String],
) -> Result<ServingCert, WebhookError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let api_err = |source| WebhookError::Secret {
        secret: format!("{namespace}/{name}"),
        source,
    };
    if let Some(found) = api.get_opt(name).await.map_err(api_err)? {
        return Ok(from_secret(&found, name)?);
    }
    let made = generate(names, jiff::Zoned::now().year().into())?;
    match api
        .create(&PostParams::default(), &secret_of(&made, namespace, name))
        .await
    {
        Ok(_) => {
            tracing::info!(secret = %format!("{namespace}/{name}"), "created the webhook's serving certificate");
            Ok(made)
        }
        // Another agent created it first: serve its certificate, not ours.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let found = api.get(name).await.map_err(api_err)?;
            Ok(from_secret(&found, name)?)
        }
        Err(e) => Err(api_err(e)),
    }
}

/// Sets `caBundle` on every webhook of the configuration `name` whose bundle is not `ca`;
/// returns whether it wrote. The patch carries the resourceVersion it read, so a concurrent edit
/// fails it with 409 (and the next round reads again) instead of being overwritten.
pub async fn ensure_ca_bundle(
    client: &kube::Client,
    name: &str,
    ca: &str,
) -> Result<bool, WebhookError> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let api_err = |source| WebhookError::Configuration {
        name: name.to_string(),
        source,
    };
    let config = api.get(name).await.map_err(api_err)?;
    let want = ca.as_bytes();
    let encoded = base64::engine::general_purpose::STANDARD.encode(want);
    // Webhooks are merged by name (strategic merge): only the bundles that differ are sent.
    let stale: Vec<serde_json::Value> = config
        .webhooks
        .iter()
        .flatten()
        .filter(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(want))
        .map(|w| serde_json::json!({"name": w.name, "clientConfig": {"caBundle": encoded}}))
        .collect();
    if stale.is_empty() {
        return Ok(false);
    }
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": config.metadata.resource_version},
        "webhooks": stale,
    });
    api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(api_err)?;
    Ok(true)
}

/// The server configuration for `cert` (HTTP/1.1 only: the API server's webhook client speaks
/// it, and one review is one short request).
pub fn server_config(cert: &ServingCert) -> Result<Arc<rustls::ServerConfig>, CertError> {
    let bad = |what: &'static str, e: String| CertError::Unusable { what, detail: e };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.cert.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| bad("certificate", e.to_string()))?;
    if chain.is_empty() {
        return Err(bad("certificate", "no certificate in it".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(cert.key.as_bytes())
        .map_err(|e| bad("key", e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("TLS versions", e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| bad("certificate and key", e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
