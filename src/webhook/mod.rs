//! The claim admission webhook (issue 25, item 3): a mutating webhook on PersistentVolumeClaim
//! CREATE, served by every agent, that raises a new claim joining a group (a StatefulSet's
//! claim template, a CloudNativePG cluster and role, `headroom.dev/group`, pvc-autoresizer's
//! `initial-resize-group-by`) to the group's size, so a new member is born at size instead of
//! created small and grown after it mounts, and a claim restored from a VolumeSnapshot or cloned
//! from a claim (issue 40, item 3) to at least its source's size, which the provisioner
//! requires. It never refuses a claim: the configuration's
//! `failurePolicy: Ignore` covers a webhook that is down, and every answer here allows.
//!
//! [`review`] and [`size`] are pure; [`lookup`] reads the members, [`source`] the data source,
//! [`certs`] keeps the serving certificate and the configuration's `caBundle`, [`rotate`]
//! decides renewals, [`live`] swaps the served certificate without a restart, [`serve`] is the
//! HTTPS listener.

pub mod certs;
pub mod handle;
pub mod live;
pub mod lookup;
pub mod metrics;
pub mod review;
pub mod rotate;
pub mod serve;
pub mod size;
pub mod source;

#[cfg(test)]
mod serve_tests;
#[cfg(test)]
mod source_tests;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::probe::bounded::BusyPaths;

pub use handle::{Reviewer, Sources};

use certs::ServingCert;

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
    #[error("reading the webhook's certificate files: {0}")]
    FilesUnread(crate::probe::bounded::BoundedError),
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
    /// How long a certificate this agent makes is valid; it is renewed at two thirds.
    pub validity: Duration,
}

/// The longest pause between attempts after a failure.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Bound on reading the certificate files (a Secret volume, in memory; a stuck one is a node
/// fault, and the webhook keeps serving what it has).
const FILES_DEADLINE: Duration = Duration::from_secs(10);

fn read_file(path: &PathBuf) -> Result<String, CertError> {
    std::fs::read_to_string(path).map_err(|source| CertError::File {
        path: path.display().to_string(),
        source,
    })
}

fn read_files(
    cert: &PathBuf,
    key: &PathBuf,
    ca: Option<&PathBuf>,
) -> Result<ServingCert, CertError> {
    Ok(ServingCert {
        cert: read_file(cert)?,
        key: read_file(key)?,
        ca: ca.map(read_file).transpose()?.unwrap_or_default(),
        next: None,
    })
}

/// The certificate to serve now: the Secret's (created when missing, renewed when due, its
/// `ca.crt` kept in `caBundle`) or the files'. `settled` is false when `caBundle` could not be
/// kept, so the caller tries again soon.
struct Obtained {
    cert: ServingCert,
    settled: bool,
}

async fn obtain(
    cfg: &WebhookConfig,
    client: &kube::Client,
    files: &BusyPaths,
) -> Result<Obtained, WebhookError> {
    match &cfg.tls {
        Tls::Secret { name, names } => {
            let stored =
                certs::ensure_secret(client, &cfg.namespace, name, names, cfg.validity).await?;
            let published = publish(cfg, client, &stored.cert.ca, true).await;
            let trusted = published.unwrap_or(false);
            let cert = renew(cfg, client, name, names, stored, trusted).await?;
            Ok(Obtained {
                cert,
                settled: published.is_some(),
            })
        }
        // The files' CA is published only once their pair is served (see `keep_current`).
        // Off the async workers, bounded, and not again while a read of them is stuck.
        Tls::Files { cert, key, ca } => {
            let (c, k, a) = (cert.clone(), key.clone(), ca.clone());
            let read = files
                .run(cert, FILES_DEADLINE, move || read_files(&c, &k, a.as_ref()))
                .await
                .map_err(CertError::FilesUnread)?;
            Ok(Obtained {
                cert: read?,
                settled: true,
            })
        }
    }
}

/// Keeps the configuration's `caBundle` at `ca`: `Some(true)` when it already was (the API
/// server trusted `ca` before this call) or the bundle is not ours to keep, `None` (logged) when
/// it could not be read or written.
async fn publish(
    cfg: &WebhookConfig,
    client: &kube::Client,
    ca: &str,
    only_newer: bool,
) -> Option<bool> {
    let Some(name) = &cfg.configuration else {
        return Some(true);
    };
    if ca.is_empty() {
        return Some(true);
    }
    match certs::ensure_ca_bundle(client, name, ca, only_newer).await {
        Ok(wrote) => {
            if wrote {
                tracing::info!(configuration = %name, "webhook: caBundle set");
            }
            Some(!wrote)
        }
        Err(e) => {
            tracing::warn!(error = %e, "webhook: setting caBundle");
            None
        }
    }
}

/// The Secret after the renewal step due now (see [`rotate`]), written with the resourceVersion
/// it was read at: of agents renewing together one writes, the others serve its certificate.
async fn renew(
    cfg: &WebhookConfig,
    client: &kube::Client,
    name: &str,
    names: &[String],
    stored: certs::Stored,
    trusted: bool,
) -> Result<ServingCert, WebhookError> {
    let step = rotate::plan(
        &stored.cert,
        names,
        jiff::Timestamp::now(),
        cfg.validity,
        trusted,
    )?;
    let rotate::Step::Write(next, why) = step else {
        return Ok(stored.cert);
    };
    let written = certs::update_secret(client, &cfg.namespace, name, &next, stored.version).await?;
    if written.cert == next {
        tracing::info!(secret = %format!("{}/{name}", cfg.namespace), "webhook certificate: {why}");
    }
    Ok(written.cert)
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

/// What [`keep_current`] carries from one check to the next.
struct Keeper {
    cfg: WebhookConfig,
    client: kube::Client,
    live: Arc<live::LiveCert>,
    metrics: metrics::WebhookMetrics,
    served: ServingCert,
    /// The certificate files' reads in flight (see [`obtain`]).
    files: BusyPaths,
}

impl Keeper {
    /// Serves `now` when it differs from what is served and loads; the files' CA is then kept
    /// in `caBundle`. Whether everything was done.
    async fn serve(&mut self, now: ServingCert) -> bool {
        if now.cert != self.served.cert || now.key != self.served.key {
            match self.live.swap(&now) {
                Ok(()) => {
                    tracing::info!("webhook: serving a new certificate");
                    self.metrics.expires(certs::validity(&now.cert).ok());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "webhook: new certificate not loaded, serving the current one");
                    return true;
                }
            }
        }
        self.served = now;
        match &self.cfg.tls {
            Tls::Files { .. } => publish(&self.cfg, &self.client, &self.served.ca, false)
                .await
                .is_some(),
            Tls::Secret { .. } => true,
        }
    }
}

/// Checks the certificate every [`rotate::check_every`] (sooner after a failure) until `stop`:
/// a renewed Secret or changed files are served from the next handshake on; files that do not
/// load leave the current certificate served.
async fn keep_current(mut k: Keeper, settled: bool, stop: tokio::sync::watch::Receiver<bool>) {
    let every = rotate::check_every(k.cfg.validity);
    let mut pause = Duration::from_secs(1);
    let published = k.serve(k.served.clone()).await;
    let mut settled = settled && published;
    loop {
        let wait = if settled { every } else { pause.min(every) };
        pause = if settled {
            Duration::from_secs(1)
        } else {
            (pause * 2).min(RETRY_MAX)
        };
        let mut stopped = stop.clone();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
        settled = match obtain(&k.cfg, &k.client, &k.files).await {
            Ok(now) => k.serve(now.cert).await && now.settled,
            Err(e) => {
                tracing::warn!(error = %e, "webhook: serving certificate");
                false
            }
        };
    }
}

/// Gets the certificate (retrying until the API server answers), keeps it current with
/// `caBundle`, and serves reviews on `listener` until `shutdown`.
pub async fn run(
    cfg: WebhookConfig,
    listener: TcpListener,
    client: kube::Client,
    sources: Sources,
    metrics: metrics::WebhookMetrics,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WebhookError> {
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let files = BusyPaths::new();
    tokio::pin!(shutdown);
    let got = tokio::select! {
        c = retry("serving certificate", &stop, || obtain(&cfg, &client, &files)) => c,
        () = &mut shutdown => None,
    };
    let Some(first) = got else {
        return Ok(());
    };
    let live = Arc::new(live::LiveCert::new(&first.cert)?);
    metrics.expires(certs::validity(&first.cert.cert).ok());
    let tls = live::server_config(Arc::clone(&live))?;
    let keeper = Keeper {
        cfg: cfg.clone(),
        client: client.clone(),
        live,
        metrics: metrics.clone(),
        served: first.cert,
        files,
    };
    let keeper = tokio::spawn(keep_current(keeper, first.settled, stop.clone()));
    let reviewer = Arc::new(Reviewer {
        client,
        sources,
        deadline: cfg.deadline,
        metrics,
    });
    tracing::info!(listen = %cfg.listen, "webhook: serving");
    serve::serve(listener, tls, reviewer, shutdown).await;
    let _ = stop_tx.send(true);
    let _ = keeper.await;
    Ok(())
}
