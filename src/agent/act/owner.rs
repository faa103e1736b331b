//! A grow carried out through the claim's owning cluster (`resizeThrough: owner`): the owner's
//! one conditional patch, then the claim's history and status, never its request.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::{Actor, Applied, PatchError, Through, approved, recorded};
use crate::agent::owner::Written;
use crate::decide::{Action, Approval, GrowKind};
use crate::k8s::state::{self, StatusAnnotation};
use crate::metrics::labels::ResizeResult;
use crate::quantity;
use crate::resolve::Evaluation;

/// How often the history entry of a grow through the owner is tried on a claim that changes.
const RECORD_ATTEMPTS: usize = 3;

impl Actor<'_> {
    /// Carries out the engine's grow through the claim's owner: the owner's one conditional
    /// PATCH (none when it already declares as much: another member's agent wrote it for the
    /// same growth), then this claim's history and status, never its request. `approval`, the
    /// approved recommendation it carries out, is recorded on the claim's history entry, as on a
    /// grow of the claim.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn grow_owner(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
        eval: &Evaluation,
        (to, kind): (u64, GrowKind),
        status: &StatusAnnotation,
        (field, target, declared): Through<'_>,
        (now, approval): (Timestamp, Option<Approval>),
    ) -> Applied {
        let report = &eval.report;
        let from = report.claim.current_bytes();
        if self.dry_run {
            tracing::info!(pvc = %key, owner = %field, from = %quantity::format(from), to = %quantity::format(to), "dry run: would grow through the owner");
            return Applied::Done;
        }
        if self.shutdown.is_stopping() {
            return Applied::Done;
        }
        if declared.bytes < to {
            let patch = crate::k8s::owner::patch(target, declared, to);
            let written =
                crate::agent::owner::write(&self.client, target, &patch, self.timeout).await;
            let label = match &written {
                Written::Done => ResizeResult::Success,
                Written::Conflict => ResizeResult::Conflict,
                Written::Failed(_) => ResizeResult::Error,
            };
            self.metrics.resize_of(report, kind, label);
            match written {
                Written::Done => {}
                Written::Conflict => return Applied::Conflict,
                Written::Failed(e) => {
                    tracing::warn!(pvc = %key, owner = %field, error = %e, "owner patch failed; the next scan decides again");
                    return Applied::Done;
                }
            }
            let note = format!(
                "{} {} -> {} through {field}{}",
                kind.as_str(),
                quantity::format(from),
                quantity::format(to),
                approved(approval.as_ref())
            );
            tracing::info!(pvc = %key, %note, "resized through the owner");
            self.announce_resized(pvc, eval, (kind, from, to), note, now)
                .await;
        }
        let action = Action {
            through_owner: true,
            approval,
            ..recorded(eval, (now, kind), (from, to), self.node)
        };
        self.events.update(key, pvc, None).await;
        self.record_owner_grow(key, pvc, eval, action, status, now)
            .await;
        Applied::Done
    }

    /// Records a grow through the owner on the claim: its history entry and status. The owner
    /// already declares the size, so the claim changing meanwhile (its operator applying it at
    /// once) is no reason to decide again, which would find no grow to record: the entry is
    /// added to the claim as read again, a few times.
    async fn record_owner_grow(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
        eval: &Evaluation,
        action: Action,
        status: &StatusAnnotation,
        now: Timestamp,
    ) {
        let mut history = state::append(&eval.history, action.clone(), now);
        let mut rv = pvc.metadata.resource_version.clone().unwrap_or_default();
        for _ in 0..RECORD_ATTEMPTS {
            let body = match state::status_patch(Some(&rv), status, Some(&history)) {
                Ok(body) => body,
                Err(e) => {
                    tracing::warn!(pvc = %key, error = %e, "could not encode the history");
                    return;
                }
            };
            match self.patch(&eval.report.pvc, &body).await {
                Ok(_) => return,
                Err(PatchError::Conflict) => {}
                Err(PatchError::Other(e) | PatchError::Quota(e)) => {
                    tracing::warn!(pvc = %key, error = %e, "could not record the grow through the owner");
                    return;
                }
            }
            let fresh = tokio::time::timeout(self.timeout, self.api.get(&eval.report.pvc)).await;
            let Ok(Ok(fresh)) = fresh else {
                break;
            };
            let Ok(read) = state::read_history(&fresh) else {
                break;
            };
            history = state::append(&read, action.clone(), now);
            rv = fresh.metadata.resource_version.clone().unwrap_or_default();
        }
        tracing::warn!(pvc = %key, "could not record the grow through the owner: the claim kept changing");
    }
}
