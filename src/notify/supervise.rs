//! Keeps the running sinks what `notifications.yaml` says, reading each sink's Secret (and CA)
//! by name: once per change of the key, and again every [`REFRESH`] (a rotated URL), or every
//! [`RETRY`] while one could not be read. That is a constant few GETs per node, no watch.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use tokio::sync::watch;

use super::config::{self, CaSource, KeyRef, SinkSpec};
use super::post::Endpoint;
use super::proxy::Proxies;
use super::sink::{Count, Settings, SinkHandle};
use super::{Notifier, NotifyError};

pub const REFRESH: Duration = Duration::from_secs(600);
pub const RETRY: Duration = Duration::from_secs(30);

/// Where the supervisor reads from.
pub struct Source {
    pub client: kube::Client,
    /// The agent's namespace: the only one Secrets are read from.
    pub namespace: String,
    /// The ConfigMap's name, for messages.
    pub configmap: String,
    pub api_timeout: Duration,
    /// `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY`, for the sinks.
    pub proxies: Proxies,
}

/// Starts the supervisor; the notifier it returns is configured by [`Notifier::configure`].
pub fn start(source: Source, count: Count) -> Notifier {
    let sinks = Arc::new(RwLock::new(Vec::new()));
    let (tx, rx) = watch::channel(None);
    let sup = Supervisor {
        source,
        count,
        sinks: sinks.clone(),
    };
    tokio::spawn(sup.run(rx));
    Notifier::supervised(sinks, tx)
}

struct Supervisor {
    source: Source,
    count: Count,
    sinks: Arc<RwLock<Vec<SinkHandle>>>,
}

impl Supervisor {
    async fn run(self, mut config: watch::Receiver<Option<String>>) {
        loop {
            let text = config.borrow_and_update().clone();
            let all_read = self.apply(text.as_deref()).await;
            let wait = if all_read { REFRESH } else { RETRY };
            tokio::select! {
                changed = config.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Brings the sinks in line with `text`; false when a Secret or CA could not be read.
    async fn apply(&self, text: Option<&str>) -> bool {
        let specs = match text.map(|t| config::parse(&self.source.configmap, t)) {
            None => Vec::new(),
            Some(Ok(specs)) => specs,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "notifications off: the key is not valid");
                Vec::new()
            }
        };
        let mut endpoints = BTreeMap::new();
        let mut all_read = true;
        for spec in &specs {
            match self.endpoint(spec).await {
                Ok(ep) => {
                    endpoints.insert(spec.name.clone(), ep);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "notification sink not (re)configured");
                    all_read = false;
                }
            }
        }
        let Ok(mut sinks) = self.sinks.write() else {
            return all_read;
        };
        let mut old: Vec<SinkHandle> = std::mem::take(&mut *sinks);
        for spec in &specs {
            let settings = Settings::of(spec);
            let ep = endpoints.remove(&spec.name);
            let kept = old
                .iter()
                .position(|h| h.name() == spec.name && *h.settings() == settings)
                .map(|i| old.swap_remove(i));
            let handle = match kept {
                Some(h) => {
                    // An unreadable Secret keeps the URL last read.
                    ep.into_iter().for_each(|ep| h.set_endpoint(ep));
                    h
                }
                None => SinkHandle::spawn(&spec.name, settings, ep, self.count.clone()),
            };
            sinks.push(handle);
        }
        all_read
    }

    async fn endpoint(&self, spec: &SinkSpec) -> Result<Endpoint, NotifyError> {
        let url = self.read(spec, Object::Secret, &spec.url_secret).await?;
        let ca = match &spec.ca_bundle {
            None => None,
            Some(CaSource::Secret(r)) => Some(self.read(spec, Object::Secret, r).await?),
            Some(CaSource::ConfigMap(r)) => Some(self.read(spec, Object::ConfigMap, r).await?),
        };
        let url = String::from_utf8(url).map_err(|_| NotifyError::Endpoint {
            sink: spec.name.clone(),
            detail: format!(
                "Secret {} key {}: not UTF-8",
                spec.url_secret.name, spec.url_secret.key
            ),
        })?;
        Endpoint::new(&spec.name, spec.format, &url, ca.as_deref())
            .map(|e| e.through(&self.source.proxies))
    }

    /// One key of a Secret or ConfigMap in the agent's namespace, by name, within the deadline.
    async fn read(
        &self,
        spec: &SinkSpec,
        object: Object,
        r: &KeyRef,
    ) -> Result<Vec<u8>, NotifyError> {
        let err = |detail: String| NotifyError::Read {
            sink: spec.name.clone(),
            object: object.kind(),
            name: r.name.clone(),
            detail,
        };
        let (client, ns) = (self.source.client.clone(), &self.source.namespace);
        let read = async {
            match object {
                Object::Secret => {
                    let s = Api::<Secret>::namespaced(client, ns).get(&r.name).await?;
                    Ok::<_, kube::Error>(s.data.and_then(|mut d| d.remove(&r.key)).map(|b| b.0))
                }
                Object::ConfigMap => {
                    let c = Api::<ConfigMap>::namespaced(client, ns)
                        .get(&r.name)
                        .await?;
                    let text = c
                        .data
                        .and_then(|mut d| d.remove(&r.key))
                        .map(String::into_bytes);
                    Ok(text.or_else(|| {
                        c.binary_data
                            .and_then(|mut d| d.remove(&r.key))
                            .map(|b| b.0)
                    }))
                }
            }
        };
        match tokio::time::timeout(self.source.api_timeout, read).await {
            Err(_) => Err(err(format!(
                "no answer within {:?}",
                self.source.api_timeout
            ))),
            Ok(Err(e)) => Err(err(e.to_string())),
            Ok(Ok(None)) => Err(err(format!("no key {}", r.key))),
            Ok(Ok(Some(bytes))) => Ok(bytes),
        }
    }
}

#[derive(Clone, Copy)]
enum Object {
    Secret,
    ConfigMap,
}

impl Object {
    fn kind(self) -> &'static str {
        match self {
            Object::Secret => "Secret",
            Object::ConfigMap => "ConfigMap",
        }
    }
}
