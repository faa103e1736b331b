//! Carrying out `enforcement: recommend | approve` (the gate's answer in the report): a held grow
//! is written as the claim's recommendation and announced once; an approved one is made, with
//! the approval on its history entry; a refused approval is said once.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::act::{Actor, Applied, Through};
use crate::decide::Approval;
use crate::decide::recommend::{Enforced, Recommendation};
use crate::events::Notice;
use crate::k8s::state::{self, StatusAnnotation};
use crate::notify::Message;
use crate::quantity::format as q;
use crate::report::VolumeReport;
use crate::resolve::Evaluation;
use crate::resolve::enforce::approver;

impl Actor<'_> {
    /// `through`: the owner a grow is written to (`resizeThrough: owner`), as for `act`.
    pub(super) async fn enforce(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
        eval: &Evaluation,
        (e, through): (&Enforced, Option<Through<'_>>),
        status: &StatusAnnotation,
        now: Timestamp,
    ) -> Applied {
        let report = &eval.report;
        if let Some(rec) = &e.execute {
            let approval = Approval {
                id: rec.id.clone(),
                at: now,
                by: self.approved_by(&report.pvc).await,
            };
            let grow = (rec.to_bytes, rec.kind);
            return self
                .grow_through(key, pvc, eval, grow, status, through, (now, Some(approval)))
                .await;
        }
        let before = state::read_status(pvc).ok().flatten();
        let applied = match report.decision.grow_to() {
            // Past the emergency line with emergencyGrow.enabled: grown without approval.
            Some(grow) if !e.hold => {
                self.grow_through(key, pvc, eval, grow, status, through, (now, None))
                    .await
            }
            _ => {
                self.announce_block(key, pvc, report, now).await;
                self.write_status(key, pvc, eval, status).await
            }
        };
        if matches!(applied, Applied::Done) && !self.dry_run {
            self.announce(key, pvc, (report, before.as_ref()), e, now)
                .await;
        }
        applied
    }

    /// A new recommendation's Event, and a refused approval's, each once: what the status held
    /// before this scan's write says whether it is new.
    async fn announce(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
        (report, before): (&VolumeReport, Option<&StatusAnnotation>),
        e: &Enforced,
        now: Timestamp,
    ) {
        let shown = before
            .and_then(|b| b.recommendation.as_ref())
            .map(|r| &r.id);
        if let Some(rec) = e.recommendation.as_ref().filter(|r| Some(&r.id) != shown) {
            let notice = Notice {
                warning: false,
                reason: "GrowRecommended",
                note: recommended(rec),
            };
            if self
                .events
                .update(&format!("{key}#recommend"), pvc, Some(notice))
                .await
            {
                self.notifier.send(Message::recommended(report, rec, now));
            }
        }
        let said = before.and_then(|b| b.approval.as_ref());
        if let Some(a) = e.approval.as_ref().filter(|a| Some(*a) != said)
            && let Some(why) = &a.refused
        {
            let notice = Notice {
                warning: true,
                reason: "ApprovalRefused",
                note: format!("approval {} refused: {why}; nothing was changed", a.id),
            };
            self.events.publish(pvc, notice).await;
        }
    }

    /// The field manager that set the approval, from the claim's managedFields (the watch
    /// store drops them, so the claim is read once, for this approval only).
    async fn approved_by(&self, name: &str) -> Option<String> {
        let got = tokio::time::timeout(self.timeout, self.api.get(name)).await;
        match got {
            Ok(Ok(pvc)) => approver(&pvc),
            Ok(Err(e)) => {
                tracing::warn!(pvc = %name, error = %e, "could not read who approved; recording the approval without it");
                None
            }
            Err(_) => None,
        }
    }
}

/// The Event's note: what would be done, why, and how to approve it.
fn recommended(rec: &Recommendation) -> String {
    let used = rec
        .used_percent
        .map(|p| format!(" at {p}% used"))
        .unwrap_or_default();
    let full = rec
        .full_at
        .map(|t| format!(", full at {t} at the current fill rate"))
        .unwrap_or_default();
    format!(
        "recommended {}{} {} -> {}{used}{full}; recommendation {} (stale at {}); approve with headroom approve or kubectl annotate pvc NAME headroom.dev/approve={} where enforcement is approve",
        rec.kind.as_str(),
        if rec.predicted { " (predicted)" } else { "" },
        q(rec.from_bytes),
        q(rec.to_bytes),
        rec.id,
        rec.stale_at,
        rec.id
    )
}
