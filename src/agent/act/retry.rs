//! A resize the storage refused as infeasible, retried lower (KEP-1790: the request lowered to
//! what it can take, once per refused request).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::{Actor, Applied, PatchError, recorded};
use crate::decide::GrowKind;
use crate::events::Notice;
use crate::k8s::state::{self, StatusAnnotation};
use crate::metrics::labels::ResizeResult;
use crate::quantity;
use crate::resolve::Evaluation;

impl Actor<'_> {
    /// KEP-1790: carries out the engine's `lower_to`, once per refused request.
    pub(super) async fn retry_infeasible(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
        eval: &Evaluation,
        status: &StatusAnnotation,
        now: Timestamp,
    ) -> Option<Applied> {
        let claim = &eval.report.claim;
        let size = eval.report.decision.lower_to.filter(|_| !self.dry_run)?;
        let attempt = format!("{key}@{}", claim.request_bytes);
        if !self
            .retried
            .lock()
            .map(|mut r| r.insert(attempt))
            .unwrap_or(false)
        {
            return None;
        }
        let rv = pvc.metadata.resource_version.clone().unwrap_or_default();
        let sizes = (claim.request_bytes, size);
        let action = recorded(eval, (now, GrowKind::Retry), sizes, self.node);
        let history = state::append(&eval.history, action, now);
        let body = state::grow_patch(&rv, size, &history, status).ok()?;
        let (from, to) = (
            quantity::format(claim.request_bytes),
            quantity::format(size),
        );
        let report = &eval.report;
        match self.patch(&report.pvc, &body).await {
            Ok(_) => {
                self.metrics
                    .resize_of(report, GrowKind::Retry, ResizeResult::Success);
                let note = format!(
                    "request {from} was infeasible; lowered to {to}, the largest step known to work"
                );
                self.events
                    .publish(
                        pvc,
                        Notice {
                            warning: true,
                            reason: "ExpansionRetried",
                            note,
                        },
                    )
                    .await;
                Some(Applied::Done)
            }
            Err(PatchError::Conflict) => Some(Applied::Conflict),
            Err(PatchError::Other(e) | PatchError::Quota(e)) => {
                self.metrics
                    .resize_of(report, GrowKind::Retry, ResizeResult::Error);
                tracing::warn!(pvc = %key, error = %e, "could not lower the infeasible request (needs Kubernetes 1.34 or RecoverVolumeExpansionFailure)");
                None
            }
        }
    }
}
