//! One review, start to answer: read it, find the claim's group and members and, for a claim
//! that opted in, what its data source requires; decide its size; answer. Every answer allows
//! the CREATE; a review that cannot be read or decided in time is answered with no patch and a
//! warning (the agents' `GroupGrow` still raises a group's member later).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{ObjectRef, Store};

use super::WebhookError;
use super::lookup;
use super::metrics::{Outcome, WebhookMetrics};
use super::review::{self, Reviewed};
use super::size::{self, Caveat, Keep, Layers, SourceSize, Verdict};
use super::source;
use crate::policy::merge::{CentralPolicy, parse_configmap};

/// The agent's watch stores a review reads: StorageClasses and Namespaces (their policy
/// annotations) and the central ConfigMap.
#[derive(Clone)]
pub struct Sources {
    pub classes: Store<StorageClass>,
    pub namespaces: Store<Namespace>,
    pub configmaps: Store<ConfigMap>,
    /// `<namespace>/<name>` of the ConfigMap, for messages.
    pub configmap: String,
}

impl Sources {
    fn central(&self) -> CentralPolicy {
        let data = self
            .configmaps
            .state()
            .into_iter()
            .next()
            .and_then(|c| c.data.clone())
            .unwrap_or_default();
        if data.is_empty() {
            CentralPolicy::default()
        } else {
            parse_configmap(&data, &self.configmap)
        }
    }

    fn class(&self, pvc: &PersistentVolumeClaim) -> Option<Arc<StorageClass>> {
        let name = pvc.spec.as_ref()?.storage_class_name.as_deref()?;
        self.classes.get(&ObjectRef::new(name))
    }

    fn namespace(&self, pvc: &PersistentVolumeClaim) -> Option<Arc<Namespace>> {
        let name = pvc.metadata.namespace.as_deref()?;
        self.namespaces.get(&ObjectRef::new(name))
    }
}

pub struct Reviewer {
    pub client: kube::Client,
    pub sources: Sources,
    /// Bound on one review, reads included.
    pub deadline: Duration,
    pub metrics: WebhookMetrics,
}

fn claim_name(pvc: &PersistentVolumeClaim) -> String {
    crate::k8s::pvc_name(pvc)
}

impl Reviewer {
    /// The answer to the AdmissionReview `body`, decided within `within` (what is left of
    /// [`Self::deadline`] once the body has arrived), and what it was.
    pub async fn review(&self, body: &[u8], within: Duration) -> (Outcome, Vec<u8>) {
        let c = match review::parse(body) {
            Ok(Reviewed::Create(c)) => c,
            Ok(Reviewed::Other { uid }) => {
                return (Outcome::NotACreate, review::allow(&uid, None, None));
            }
            Err(e) => {
                tracing::warn!(error = %e, "webhook: an AdmissionReview that cannot be read; allowed unchanged");
                let uid = review::uid_of(body).unwrap_or_default();
                let answer = review::allow(&uid, None, Some(&e.to_string()));
                return (Outcome::Unreadable, answer);
            }
        };
        let claim = claim_name(&c.pvc);
        match tokio::time::timeout(within, self.verdict(&c.pvc)).await {
            Err(_) => {
                let why = format!(
                    "{claim}: no size decided within {:?}; created at the size requested",
                    self.deadline
                );
                tracing::warn!(%claim, deadline = ?self.deadline, "webhook: review timed out; allowed unchanged");
                (Outcome::TimedOut, review::allow(&c.uid, None, Some(&why)))
            }
            Ok(Err(e)) => {
                tracing::warn!(%claim, error = %e, "webhook: allowed unchanged");
                let why = format!("{claim}: {e}");
                (
                    Outcome::LookupFailed,
                    review::allow(&c.uid, None, Some(&why)),
                )
            }
            Ok(Ok(verdict)) => answer(&c.uid, &claim, verdict),
        }
    }

    async fn verdict(&self, pvc: &PersistentVolumeClaim) -> Result<Verdict, WebhookError> {
        let found = lookup::find(&self.client, pvc).await?;
        let class = self.sources.class(pvc);
        let namespace = self.sources.namespace(pvc);
        let central = self.sources.central();
        let layers = Layers {
            class: class.as_deref(),
            namespace: namespace.as_deref(),
            central: &central,
        };
        // A claim that did not opt in costs no read of its source.
        let source = if size::opted_in(pvc, layers) {
            source::size(&self.client, pvc).await
        } else {
            SourceSize::None
        };
        Ok(size::verdict(
            pvc,
            found.group.as_deref(),
            &found.members,
            &source,
            layers,
        ))
    }
}

/// The answer to a review of `claim` decided as `verdict`, and what it was.
pub fn answer(uid: &str, claim: &str, verdict: Verdict) -> (Outcome, Vec<u8>) {
    use crate::quantity::format as q;
    match verdict {
        Verdict::Raise {
            from,
            to,
            because,
            caveat,
        } => {
            tracing::info!(%claim, from = %q(from), to = %q(to), "webhook: new claim raised to {because}");
            let mut note = format!(
                "{claim}: spec.resources.requests.storage raised from {} to {} ({because})",
                q(from),
                q(to)
            );
            if let Some(c) = &caveat {
                tracing::warn!(%claim, "webhook: {}", c.message());
                note = format!("{note}; {}", c.message());
            }
            let outcome = match caveat {
                Some(Caveat::SourceUnknown(_)) => Outcome::SourceUnknown,
                _ => Outcome::Raised,
            };
            let patch = review::raise_patch(to);
            (outcome, review::allow(uid, Some(&patch), Some(&note)))
        }
        Verdict::Keep(keep) => {
            tracing::debug!(%claim, ?keep, "webhook: claim created at the size requested");
            let outcome = match keep {
                Keep::InvalidPolicy(_) => Outcome::InvalidPolicy,
                Keep::Caveat(Caveat::SourceUnknown(_)) => Outcome::SourceUnknown,
                _ => Outcome::AsRequested,
            };
            let warning = keep.warning().map(|w| match keep {
                Keep::Caveat(_) => {
                    tracing::warn!(%claim, "webhook: {w}; created at the size requested");
                    format!("{w}; created at the size requested")
                }
                _ => w.to_string(),
            });
            (outcome, review::allow(uid, None, warning.as_deref()))
        }
    }
}
