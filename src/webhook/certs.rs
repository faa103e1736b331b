//! The serving certificate without cert-manager. The first agent that finds the Secret missing
//! makes a CA and a serving certificate signed by it and creates the Secret; creation is the
//! lock (an agent that loses the race with 409 reads the winner's), so every agent serves the
//! same certificate. Each agent then sets the webhook configuration's `caBundle` when it differs.
//! Each renewal ([`super::rotate`]) makes a new CA as well, so a CA's key is never stored:
//! nothing signs with it after its one certificate.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::{CertError, WebhookError};

pub const CA_KEY: &str = "ca.crt";
pub const CERT_KEY: &str = "tls.crt";
pub const KEY_KEY: &str = "tls.key";
/// The next serving certificate and key, staged until `caBundle` trusts their CA.
pub const NEXT_CERT_KEY: &str = "next.crt";
pub const NEXT_KEY_KEY: &str = "next.key";

/// A serving certificate and its key (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct Pair {
    pub cert: String,
    pub key: String,
}

/// A serving certificate, its key and the CAs to trust (PEM), with the next pair when one is
/// staged.
#[derive(Clone, PartialEq, Eq)]
pub struct ServingCert {
    /// Every CA to trust: the one that signed `cert`, the next one's, and earlier ones until
    /// their certificates expire.
    pub ca: String,
    pub cert: String,
    pub key: String,
    pub next: Option<Pair>,
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

/// How far a new certificate's start is set back: a tenth of its validity, at most 5 minutes,
/// so a verifier whose clock is a little behind the issuer's accepts it.
fn backdate(validity: Duration) -> Duration {
    (validity / 10).min(Duration::from_secs(300))
}

/// A new CA (ECDSA P-256) and a serving certificate for `names` signed by it, both valid for
/// `validity` from `now`. The CA's key is dropped here: it signs this one certificate only.
pub fn generate(
    names: &[String],
    now: jiff::Timestamp,
    validity: Duration,
) -> Result<ServingCert, CertError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use rcgen::{ExtendedKeyUsagePurpose as Eku, KeyUsagePurpose as Ku};
    let gen_err = |e: rcgen::Error| CertError::Generate(e.to_string());
    let ca_key = KeyPair::generate().map_err(gen_err)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "headroom webhook CA");
    ca.key_usages = vec![Ku::KeyCertSign, Ku::CrlSign, Ku::DigitalSignature];
    // rcgen's time type is not a dependency of ours: its epoch plus seconds.
    let at = |secs: u64| rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(secs);
    let now = u64::try_from(now.as_second()).unwrap_or(0);
    ca.not_before = at(now.saturating_sub(backdate(validity).as_secs()));
    ca.not_after = at(now.saturating_add(validity.as_secs()));
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
        next: None,
    })
}

/// When a certificate may be used, in seconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

impl Validity {
    pub fn lifetime(&self) -> i64 {
        self.not_after - self.not_before
    }
}

/// Each `-----BEGIN CERTIFICATE-----` block of a PEM bundle, as written.
pub fn pem_blocks(pem: &str) -> Vec<&str> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let Some(len) = rest[start..].find(END) else {
            break;
        };
        out.push(&rest[start..start + len + END.len()]);
        rest = &rest[start + len + END.len()..];
    }
    out
}

/// The validity of the first certificate in `pem`.
pub fn validity(pem: &str) -> Result<Validity, CertError> {
    let bad = |e: String| CertError::Unusable {
        what: "certificate",
        detail: e,
    };
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| bad(e.to_string()))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| bad(e.to_string()))?;
    Ok(Validity {
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
    })
}

/// The certificates of `bundle` that are still valid at `now` (or cannot be read: those are
/// not ours to drop).
pub fn unexpired(bundle: &str, now: i64) -> Vec<&str> {
    pem_blocks(bundle)
        .into_iter()
        .filter(|b| validity(b).map_or(true, |v| v.not_after > now))
        .collect()
}

/// Whether the bundle `theirs` holds a CA newer than any of `ours`: `ours` was read before
/// another agent's renewal.
pub fn behind(ours: &[u8], theirs: &[u8]) -> bool {
    newest(theirs) > newest(ours)
}

/// The latest start among the certificates of `bundle`; `None` when none can be read.
fn newest(bundle: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bundle).ok()?;
    pem_blocks(text)
        .into_iter()
        .filter_map(|b| validity(b).ok())
        .map(|v| v.not_before)
        .max()
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
    let next = match (field(NEXT_CERT_KEY), field(NEXT_KEY_KEY)) {
        (Ok(cert), Ok(key)) => Some(Pair { cert, key }),
        _ => None,
    };
    Ok(ServingCert {
        ca: field(CA_KEY)?,
        cert: field(CERT_KEY)?,
        key: field(KEY_KEY)?,
        next,
    })
}

/// The Secret holding `cert`; `resource_version`, when given, makes writing it conditional.
fn secret_of(
    cert: &ServingCert,
    namespace: &str,
    name: &str,
    resource_version: Option<String>,
) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    let mut data = BTreeMap::from([
        (CA_KEY.to_string(), bytes(&cert.ca)),
        (CERT_KEY.to_string(), bytes(&cert.cert)),
        (KEY_KEY.to_string(), bytes(&cert.key)),
    ]);
    if let Some(next) = &cert.next {
        data.insert(NEXT_CERT_KEY.to_string(), bytes(&next.cert));
        data.insert(NEXT_KEY_KEY.to_string(), bytes(&next.key));
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            resource_version,
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/name".to_string(),
                "headroom".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// The Secret's certificate and the resourceVersion it was read or written at.
#[derive(Debug, Clone)]
pub struct Stored {
    pub cert: ServingCert,
    pub version: Option<String>,
}

fn stored(secret: &Secret, name: &str) -> Result<Stored, CertError> {
    Ok(Stored {
        cert: from_secret(secret, name)?,
        version: secret.metadata.resource_version.clone(),
    })
}

/// The Secret `namespace/name`'s certificate, created (for `names`, valid for `validity`) when
/// it is missing.
pub async fn ensure_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    names: &[String],
    validity: Duration,
) -> Result<Stored, WebhookError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let api_err = |source| WebhookError::Secret {
        secret: format!("{namespace}/{name}"),
        source,
    };
    if let Some(found) = api.get_opt(name).await.map_err(api_err)? {
        return Ok(stored(&found, name)?);
    }
    let made = generate(names, jiff::Timestamp::now(), validity)?;
    let secret = secret_of(&made, namespace, name, None);
    let created = api.create(&PostParams::default(), &secret).await;
    if created.is_ok() {
        tracing::info!(secret = %format!("{namespace}/{name}"), "created the webhook's serving certificate");
    }
    ours_or_winners(&api, namespace, name, created).await
}

/// The Secret as this agent wrote it, or, when another agent wrote first (409: creation and the
/// resourceVersion are the lock), as the winner left it: its certificate is served, not ours.
async fn ours_or_winners(
    api: &Api<Secret>,
    namespace: &str,
    name: &str,
    written: Result<Secret, kube::Error>,
) -> Result<Stored, WebhookError> {
    let api_err = |source| WebhookError::Secret {
        secret: format!("{namespace}/{name}"),
        source,
    };
    match written {
        Ok(ours) => Ok(stored(&ours, name)?),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let found = api.get(name).await.map_err(api_err)?;
            Ok(stored(&found, name)?)
        }
        Err(e) => Err(api_err(e)),
    }
}

/// Writes `cert` over the Secret read at `version`. Renewal's lock: when another agent wrote
/// first (409), its Secret is read back and returned instead of ours.
pub async fn update_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    cert: &ServingCert,
    version: Option<String>,
) -> Result<Stored, WebhookError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secret_of(cert, namespace, name, version);
    let written = api.replace(name, &PostParams::default(), &secret).await;
    ours_or_winners(&api, namespace, name, written).await
}

/// Sets `caBundle` on every webhook of the configuration `name` whose bundle is not `ca`;
/// returns whether it wrote. The patch carries the resourceVersion it read, so a concurrent edit
/// fails it with 409 (and the next round reads again) instead of being overwritten.
///
/// With `only_newer`, a bundle holding a newer CA than `ca` is left as it is: `ca` was read
/// before another agent's renewal, and writing it would drop the CA the new certificate needs.
pub async fn ensure_ca_bundle(
    client: &kube::Client,
    name: &str,
    ca: &str,
    only_newer: bool,
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
        .filter(|w| {
            let theirs = w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice());
            !(only_newer && theirs.is_some_and(|t| behind(want, t)))
        })
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
