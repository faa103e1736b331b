//! An eviction carried out for a resize the node finishes only at the next mount
//! (`offlineExpansion: evict`): the pod's eviction through the Eviction API, then its record on
//! the resize's history entry.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::{Actor, Applied, PatchError};
use crate::agent::evict::{self, Outcome};
use crate::decide::restart::Restart;
use crate::events::Notice;
use crate::k8s::state::{self, StatusAnnotation};
use crate::resolve::Evaluation;

impl Actor<'_> {
    /// Carries out the engine's eviction (`offlineExpansion: evict`): the pod's eviction, then
    /// the record on the resize's history entry. An eviction this agent already made (its record
    /// not yet written: a 409) is not made again, only recorded.
    pub(super) async fn restart(
        &self,
        pvc: &PersistentVolumeClaim,
        eval: &Evaluation,
        mut status: StatusAnnotation,
        switchover: bool,
        now: Timestamp,
    ) -> Applied {
        let report = &eval.report;
        let key = evict::memo_key(report);
        // The pod that mounts it here; a report without one names nothing to evict.
        let Some(pod) = report.instance.as_deref().filter(|p| !p.is_empty()) else {
            return self.write_status(&key, pvc, eval, &status).await;
        };
        let evicted = match self.evictions.get(&key).evicted {
            Some(at) => at,
            // Shutting down: start nothing new, as for a patch.
            None if self.shutdown.is_stopping() => return Applied::Done,
            None => {
                let outcome =
                    evict::evict(&self.client, &report.namespace, pod, self.timeout).await;
                let restart = evict::remember(self.evictions, &key, &outcome, switchover, now);
                let (warning, reason, note) = evict::note(report, pod, &outcome, &restart);
                tracing::info!(pvc = %key, %note, "restart");
                self.events
                    .publish(
                        pvc,
                        Notice {
                            warning,
                            reason,
                            note,
                        },
                    )
                    .await;
                status.restart = Some(restart);
                if !matches!(outcome, Outcome::Evicted) {
                    return self.write_status(&key, pvc, eval, &status).await;
                }
                now
            }
        };
        status.restart = Some(Restart::Evicted { at: evicted });
        let request = report.claim.request_bytes;
        let Some(history) = evict::recorded(&eval.history, request, evicted) else {
            return Applied::Done;
        };
        let rv = pvc.metadata.resource_version.clone().unwrap_or_default();
        let body = match state::status_patch(Some(&rv), &status, Some(&history)) {
            Ok(body) => body,
            Err(e) => {
                tracing::warn!(pvc = %key, error = %e, "could not encode the eviction's record");
                return Applied::Done;
            }
        };
        match self.patch(&report.pvc, &body).await {
            Ok(_) => Applied::Done,
            Err(PatchError::Conflict) => Applied::Conflict,
            Err(PatchError::Other(e) | PatchError::Quota(e)) => {
                tracing::warn!(pvc = %key, error = %e, "could not record the eviction; the next scan records it");
                Applied::Done
            }
        }
    }
}
