//! One review, start to answer: read it, find the claim's group and members, decide its size,
//! answer. Every answer allows the CREATE; a review that cannot be read or decided in time is
//! answered with no patch and a warning (the agents' `GroupGrow` still raises the claim later).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{ObjectRef, Store};

use super::WebhookError;
use super::lookup;
use super::metrics::{Outcome, WebhookMetrics};
use super::review::{self, Reviewed};
use super::size::{self, Keep, Verdict};
use crate::policy::merge::{CentralPolicy, parse_configmap};

/// The agent's watch stores a review reads: StorageClasses (their policy annotations) and the
/// central ConfigMap.
#[derive(Clone)]
pub struct Sources {
    pub classes: Store<StorageClass>,
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
            Ok(Ok(Verdict::Raise { from, to, group })) => {
                use crate::quantity::format as q;
                tracing::info!(%claim, %group, from = %q(from), to = %q(to), "webhook: new claim raised to its group's size");
                let note = format!(
                    "{claim}: spec.resources.requests.storage raised from {} to {} (the size of its group {group})",
                    q(from),
                    q(to)
                );
                let patch = review::raise_patch(to);
                (
                    Outcome::Raised,
                    review::allow(&c.uid, Some(&patch), Some(&note)),
                )
            }
            Ok(Ok(Verdict::Keep(keep))) => {
                tracing::debug!(%claim, ?keep, "webhook: claim created at the size requested");
                let outcome = match keep {
                    Keep::InvalidPolicy(_) => Outcome::InvalidPolicy,
                    _ => Outcome::AsRequested,
                };
                (outcome, review::allow(&c.uid, None, keep.warning()))
            }
        }
    }

    async fn verdict(&self, pvc: &PersistentVolumeClaim) -> Result<Verdict, WebhookError> {
        let found = lookup::find(&self.client, pvc).await?;
        let class = self.sources.class(pvc);
        Ok(size::verdict(
            pvc,
            found.group.as_deref(),
            &found.members,
            class.as_deref(),
            &self.sources.central(),
        ))
    }
}
