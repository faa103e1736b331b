//! The claim admission webhook (issue 25, item 3): a mutating webhook on PersistentVolumeClaim
//! CREATE, served by every agent, that raises a new claim joining a group (a StatefulSet's
//! claim template, a CloudNativePG cluster and role, `headroom.dev/group`, pvc-autoresizer's
//! `initial-resize-group-by`) to the group's size, so a new member is born at size instead of
//! created small and grown after it mounts. It never refuses a claim: the configuration's
//! `failurePolicy: Ignore` covers a webhook that is down, and every answer here allows.
//!
//! [`review`] and [`size`] are pure; [`lookup`] reads the members, [`certs`] keeps the serving
//! certificate and the configuration's `caBundle`, [`serve`] is the HTTPS listener.

pub mod certs;
pub mod handle;
pub mod lookup;
pub mod metrics;
pub mod review;
pub mod serve;
pub mod size;

#[cfg(test)]
mod serve_tests;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

pub use handle::{Reviewer, Sources};

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("not an AdmissionReview this webhook can read: {0}")]
    Malformed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating the webhook's certificate: {0}")]
    Generate(String),
    #[error("Secret {secret}: key {key} is missing or not text")]
    SecretField { secret: String, key: &'static str },
    #[error("webhook serving {what}: {detail}")]
    Unusable { what: &'static str, detail: String },
    #[error("{path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("listing {what} in namespace {namespace}: {source}")]
    Read {
        what: &'static str,
        namespace: String,
        source: kube::Error,
    },
    #[error("Secret {secret}: {source}")]
    Secret { secret: String, source: kube::Error },
    #[error("MutatingWebhookConfiguration {name}: {source}")]
    Configuration { name: String, source: kube::Error },
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("webhook metrics: {0}")]
    Metrics(prometheus::Error),
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum Tls {
    /// A Secret in the agent's namespace, created for `names` by the first agent that finds it
    /// missing.
    Secret { name: String, names: Vec<String> },
    /// Files the user supplies (PEM); `ca`, when given, is what `caBundle` is set to.
    Files {
        cert: PathBuf,
        key: PathBuf,
        ca: Option<PathBuf>,
    },
}

#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub listen: String,
    /// The agent's namespace (the Secret's).
    pub namespace: String,
    pub tls: Tls,
    /// The MutatingWebhookConfiguration whose `caBundle` the agents keep; `None`: left alone.
    pub configuration: Option<String>,
    /// Bound on one review, reads included.
    pub deadline: Duration,
}

/// How often a `caBundle` already right is checked again (someone may re-create the
/// configuration without it).
const RECHECK: Duration = Duration::from_secs(300);
const RETRY_MAX: Duration = Duration::from_secs(30);

fn read_file(path: &PathBuf) -> Result<String, CertError> {
    std::fs::read_to_string(path).map_err(|source| CertError::File {
        path: path.display().to_string(),
        source,
    })
}

async fn obtain(
    cfg: &WebhookConfig,
    client: &kube::Client,
) -> Result<certs::ServingCert, WebhookError> {
    match &cfg.tls {
        Tls::Secret { name, names } => {
            certs::ensure_secret(client, &cfg.namespace, name, names).await
        }
        Tls::Files { cert, key, ca } => Ok(certs::ServingCert {
            cert: read_file(cert)?,
            key: read_file(key)?,
            ca: ca.as_ref().map(read_file).transpose()?.unwrap_or_default(),
        }),
    }
}

/// Retries `attempt` with a doubling pause (up to [`RETRY_MAX`]) until it succeeds; `None` when
/// `stop` says to give up first.
async fn retry<T, F, Fut>(
    what: &str,
    stop: &tokio::sync::watch::Receiver<bool>,
    mut attempt: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, WebhookError>>,
{
    let mut pause = Duration::from_secs(1);
    loop {
        match attempt().await {
            Ok(v) => return Some(v),
            Err(e) => tracing::warn!(error = %e, retry_in = ?pause, "webhook: {what}"),
        }
        let mut stop = stop.clone();
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = stop.wait_for(|s| *s) => return None,
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// Keeps the configuration's `caBundle` at `ca` until `stop`.
async fn keep_ca_bundle(
    client: kube::Client,
    name: String,
    ca: String,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let done = retry("setting caBundle", &stop, || async {
            let wrote = certs::ensure_ca_bundle(&client, &name, &ca).await?;
            if wrote {
                tracing::info!(configuration = %name, "webhook: caBundle set");
            }
            Ok(())
        })
        .await;
        if done.is_none() {
            return;
        }
        let mut stop = stop.clone();
        tokio::select! {
            () = tokio::time::sleep(RECHECK) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Gets the certificate (retrying until the API server answers), keeps `caBundle`, and serves
/// reviews on `listener` until `shutdown`.
pub async fn run(
    cfg: WebhookConfig,
    listener: TcpListener,
    client: kube::Client,
    sources: Sources,
    metrics: metrics::WebhookMetrics,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WebhookError> {
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    let got = tokio::select! {
        c = retry("serving certificate", &stop, || obtain(&cfg, &client)) => c,
        () = &mut shutdown => None,
    };
    let Some(cert) = got else {
        return Ok(());
    };
    let tls = certs::server_config(&cert)?;
    let keeper = match (&cfg.configuration, cert.ca.is_empty()) {
        (Some(name), false) => Some(tokio::spawn(keep_ca_bundle(
            client.clone(),
            name.clone(),
            cert.ca.clone(),
            stop.clone(),
        ))),
        _ => None,
    };
    let reviewer = Arc::new(Reviewer {
        client,
        sources,
        deadline: cfg.deadline,
        metrics,
    });
    tracing::info!(listen = %cfg.listen, "webhook: serving");
    serve::serve(listener, tls, reviewer, shutdown).await;
    let _ = stop_tx.send(true);
    if let Some(k) = keeper {
        let _ = k.await;
    }
    Ok(())
}
