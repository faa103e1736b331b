//! From a claim's objects and what was measured to the engine's inputs, and back to a report:
//! the claim's policy (its layers merged and validated), its Postgres role, its history, the
//! resize it has in flight, and which lines the fast loop wakes for. Pure: the agent, `simulate`
//! and the tests all resolve a volume the same way, with time as an argument.

pub mod contained;
pub mod enforce;
pub mod evaluate;
pub mod inflight;
pub mod logical;
pub mod owner;
pub mod pending;
pub mod pool;
#[cfg(test)]
mod pool_tests;
pub mod restart;
pub mod selector;
pub mod trigger;

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::decide::Measurement;
use crate::policy::merge::{CentralPolicy, ClaimObjects, Merged, effective_for};

pub use evaluate::{Evaluation, Prepared, Subject, evaluate, prepare};

/// The kubelet's numbers older than this are not used at all.
pub const MAX_AGE: SignedDuration = SignedDuration::from_mins(5);

/// One claim's numbers as the kubelet last measured them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KubeletVolume {
    pub measurement: Measurement,
    pub at: Option<Timestamp>,
}

impl KubeletVolume {
    /// Usable as a fallback at `now`: dated, and not older than [`MAX_AGE`].
    pub fn fresh(&self, now: Timestamp) -> bool {
        self.at
            .is_some_and(|at| crate::decide::budget::minus(now, MAX_AGE) <= at)
    }
}

/// The claim's policy layers merged: its annotations, its Namespace's (when known), its
/// StorageClass's (`class_name`, with its object when known), its own
/// `spec.resources.limits.storage` (topolvm users set the ceiling there) and the central one.
/// The agent, the webhook and `headroom status` all merge this way.
pub fn claim_policy(
    pvc: &PersistentVolumeClaim,
    class_name: Option<&str>,
    class: Option<&StorageClass>,
    namespace: Option<&Namespace>,
    central: &CentralPolicy,
) -> Merged {
    let empty = BTreeMap::new();
    let label = format!(
        "{}/{}",
        pvc.metadata.namespace.as_deref().unwrap_or(""),
        pvc.metadata.name.as_deref().unwrap_or("")
    );
    let class_annotations = class
        .and_then(|c| c.metadata.annotations.as_ref())
        .unwrap_or(&empty);
    let spec_limit = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("storage"))
        .map(|q| q.0.as_str());
    let ns_name = pvc.metadata.namespace.as_deref().unwrap_or_default();
    let namespace = namespace.map(|n| (ns_name, n.metadata.annotations.as_ref().unwrap_or(&empty)));
    effective_for(
        &ClaimObjects {
            pvc: &label,
            pvc_annotations: pvc.metadata.annotations.as_ref().unwrap_or(&empty),
            pvc_namespace: ns_name,
            pvc_labels: pvc.metadata.labels.as_ref().unwrap_or(&empty),
            namespace,
            storage_class: class_name.map(|n| (n, class_annotations)),
            spec_limit,
        },
        central,
    )
}
