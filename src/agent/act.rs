//! Carrying out one decision on one claim: a single conditional patch, or a status update.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::Value;

use super::evict::Memos;
use super::shutdown::Shutdown;
use crate::decide::restart::Restart;
use crate::decide::{Action, ActionResult, Approval, BlockReason, GrowKind, Verdict};
use crate::events::{Events, Notice, notice_for};
use crate::k8s::owner::{Declared, Seen, Target};
use crate::k8s::state::{self, StatusAnnotation};
use crate::metrics::Metrics;
use crate::metrics::labels::ResizeResult;
use crate::notify::{Message, Notifier};
use crate::quantity;
use crate::report::VolumeReport;
use crate::resolve::Evaluation;

mod owner;
mod restart;
mod retry;

/// The merge patch of a grow decided by `eval`: the new request, the history with this action
/// (and the filesystem's size when it was decided, which ends the resize once a later
/// measurement exceeds it), the status.
#[cfg(test)]
pub fn grow_body(
    eval: &Evaluation,
    resource_version: &str,
    (to, kind): (u64, GrowKind),
    node: &str,
    status: &StatusAnnotation,
    now: Timestamp,
) -> Result<Value, crate::k8s::KubeError> {
    approved_grow_body(
        eval,
        resource_version,
        (to, kind),
        node,
        status,
        (now, None),
    )
}

/// [`grow_body`] with the approval it carries out recorded on its history entry.
pub(super) fn approved_grow_body(
    eval: &Evaluation,
    resource_version: &str,
    (to, kind): (u64, GrowKind),
    node: &str,
    status: &StatusAnnotation,
    (now, approval): (Timestamp, Option<Approval>),
) -> Result<Value, crate::k8s::KubeError> {
    let from = eval.report.claim.current_bytes();
    let action = Action {
        approval,
        ..recorded(eval, (now, kind), (from, to), node)
    };
    let history = state::append(&eval.history, action, now);
    state::grow_patch(resource_version, to, &history, status)
}

/// The history entry of a resize of `eval`'s volume, sent by `node` at `at`: the sizes, and what
/// the RFC's resize history keeps beside them (the result, requested until a measurement shows
/// it; the instance; the volume type), the filesystem's size when it was decided, and what it was
/// decided on (predicted or not, the used percent, the fill rate) so it can be judged afterwards.
fn recorded(
    eval: &Evaluation,
    (at, kind): (Timestamp, GrowKind),
    (from, to): (u64, u64),
    node: &str,
) -> Action {
    let report = &eval.report;
    Action {
        node: node.to_string(),
        fs_before: report.measurement.map(|m| m.capacity_bytes),
        result: Some(ActionResult::Requested),
        instance: report.instance.clone(),
        volume_type: Some(report.role),
        tablespace: report.tablespace.clone(),
        action: eval.action.clone(),
        predicted: report.decision.predicted,
        used_percent: report
            .measurement
            .and_then(|m| crate::decide::Percent::of(m.used_percent())),
        bytes_per_second: report
            .fill_rate
            .map(|r| r.bytes_per_second)
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(|r| r.min(u64::MAX as f64).round() as u64),
        ..Action::new(at, kind, from, to)
    }
}

/// Does `eval`'s policy grow through the claim's owner? See
/// [`crate::policy::Policy::grows_through_owner`].
pub fn through_owner(eval: &Evaluation) -> bool {
    eval.policy
        .as_ref()
        .is_some_and(crate::policy::Policy::grows_through_owner)
}

/// The owner a grow is written to, as read for this decision: its size field's name, the object
/// and what it declares.
pub(super) type Through<'a> = (&'a str, &'a Target, &'a Declared);

/// Where `eval`'s grow is written: the owner when the claim grows through it and it was read
/// with a size; `None`, the claim's request (a claim with no such owner is grown as a claim).
fn through<'a>(eval: &Evaluation, owner: Option<&'a Seen>) -> Option<Through<'a>> {
    owner.filter(|_| through_owner(eval)).and_then(|o| {
        o.declared
            .as_ref()
            .ok()
            .map(|(t, d)| (o.field.as_str(), t, d))
    })
}

/// What a grow's `Resized` Event adds when it carries out an approval: which one.
fn approved(approval: Option<&Approval>) -> String {
    approval
        .map(|a| format!(" (approved recommendation {})", a.id))
        .unwrap_or_default()
}

pub enum Applied {
    /// Done for this scan (acted, reported, or failed and logged: the next scan tries again).
    Done,
    /// The claim changed under us (409): re-read it and decide again.
    Conflict,
    /// The API server refused the grow as over the namespace's quota (a writer the quota view
    /// had not seen yet): decide again with no quota room, and keep it so until quotas change.
    QuotaRefused,
}

pub struct Actor<'a> {
    pub api: Api<PersistentVolumeClaim>,
    pub events: &'a Events,
    /// Told what the Events tell of grows, blocks and failed resizes, never waited for.
    pub notifier: &'a Notifier,
    pub metrics: &'a Metrics,
    pub shutdown: &'a Shutdown,
    pub node: &'a str,
    pub dry_run: bool,
    pub timeout: Duration,
    /// Infeasible requests this agent already tried to lower (`claim@request`), so a cluster
    /// that refuses lowering is asked once, not every scan.
    pub retried: &'a Mutex<HashSet<String>>,
    /// For the one write that is not to a claim: a pod's eviction (`offlineExpansion: evict`).
    pub client: kube::Client,
    /// What this agent did about each resize's pod (evicted, refused).
    pub evictions: &'a Memos,
}

pub(super) enum PatchError {
    Conflict,
    /// 403 from the `ResourceQuota` admission plugin.
    Quota(String),
    Other(String),
}

/// A write the API server refused: over the namespace's quota, or anything else.
fn refusal(e: kube::Error) -> PatchError {
    let quota = match &e {
        kube::Error::Api(s) => crate::k8s::quota::refused_by(s.code, &s.reason, &s.message),
        _ => None,
    };
    match quota {
        Some(q) => PatchError::Quota(format!("ResourceQuota {q}: {e}")),
        None => PatchError::Other(e.to_string()),
    }
}

impl Actor<'_> {
    pub(super) async fn patch(
        &self,
        name: &str,
        body: &Value,
    ) -> Result<PersistentVolumeClaim, PatchError> {
        // Shutting down: start nothing new (a patch already sent is awaited by the caller).
        if self.shutdown.is_stopping() {
            return Err(PatchError::Other(
                "shutting down; not starting a new write".into(),
            ));
        }
        let params = PatchParams::default();
        let patch = Patch::Merge(body);
        match tokio::time::timeout(self.timeout, self.api.patch(name, &params, &patch)).await {
            Ok(Ok(pvc)) => Ok(pvc),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => Err(PatchError::Conflict),
            Ok(Err(e)) => Err(refusal(e)),
            Err(_) => Err(PatchError::Other(format!(
                "no answer within {:?}",
                self.timeout
            ))),
        }
    }

    /// `owner`: the owning cluster as read for this decision (`resizeThrough: owner`).
    pub async fn apply(
        &self,
        pvc: &PersistentVolumeClaim,
        eval: &Evaluation,
        owner: Option<&Seen>,
        now: Timestamp,
    ) -> Applied {
        let report = &eval.report;
        let key = format!("{}/{}", report.namespace, report.pvc);
        if !Self::opted_in(report) {
            self.events.update(&key, pvc, None).await;
            self.events.update(&format!("{key}#wal"), pvc, None).await;
            self.events
                .update(&format!("{key}#fallback"), pvc, None)
                .await;
            return Applied::Done;
        }
        let status = StatusAnnotation::from_report(report, now);

        self.wal_notice(&key, pvc, eval).await;
        self.history_notice(&key, pvc, eval).await;
        let fallback = crate::events::fallback_notice(report);
        self.events
            .update(&format!("{key}#fallback"), pvc, fallback)
            .await;
        if let Some(applied) = self.retry_infeasible(&key, pvc, eval, &status, now).await {
            return applied;
        }
        if let Some(Restart::Evict { switchover }) = report.decision.restart
            && !self.dry_run
        {
            self.events.update(&key, pvc, notice_for(report)).await;
            return self.restart(pvc, eval, status, switchover, now).await;
        }
        let through = through(eval, owner);
        if let Some(e) = &report.enforced {
            return self
                .enforce(&key, pvc, eval, (e, through), &status, now)
                .await;
        }
        let Some(grow) = report.decision.grow_to() else {
            self.announce_block(&key, pvc, report, now).await;
            return self.write_status(&key, pvc, eval, &status).await;
        };
        self.grow_through(&key, pvc, eval, grow, &status, through, (now, None))
            .await
    }

    /// Makes a grow where the claim's policy writes it: the owner's size field (`through`), else
    /// the claim's request; `approval`, the approved recommendation it carries out, is recorded
    /// on its history entry either way.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn grow_through(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
        eval: &Evaluation,
        grow: (u64, GrowKind),
        status: &StatusAnnotation,
        through: Option<Through<'_>>,
        (now, approval): (Timestamp, Option<Approval>),
    ) -> Applied {
        match through {
            Some(owner) => {
                self.grow_owner(key, pvc, eval, grow, status, owner, (now, approval))
                    .await
            }
            None => {
                self.grow_approved(key, pvc, eval, grow, status, (now, approval))
                    .await
            }
        }
    }

    /// A grow made: its `Resized` Event (and, on a volume holding WAL whose policy asks, the WAL
    /// alert's) and its notification.
    async fn announce_resized(
        &self,
        pvc: &PersistentVolumeClaim,
        eval: &Evaluation,
        (kind, from, to): (GrowKind, u64, u64),
        note: String,
        now: Timestamp,
    ) {
        let report = &eval.report;
        // WAL health is gathered for exactly the volumes that hold WAL (a WAL volume, a data
        // volume with WAL on it), whether or not its read succeeded this scan.
        let holds_wal = report.role == crate::decide::VolumeRole::Wal || report.wal.is_some();
        if holds_wal
            && eval
                .policy
                .as_ref()
                .is_some_and(|p| p.wal_safety.alert_on_resize)
        {
            self.events
                .publish(pvc, crate::events::wal_resized(report, &note))
                .await;
        }
        let resized = Notice {
            warning: false,
            reason: "Resized",
            note,
        };
        self.events.publish(pvc, resized).await;
        self.notifier
            .send(Message::grown(report, (kind, from, to), now));
    }

    /// A block's Event and notification, once per change of what there is to say.
    pub(super) async fn announce_block(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
        report: &VolumeReport,
        now: Timestamp,
    ) {
        let notice = notice_for(report);
        let reason = notice.as_ref().map(|n| n.reason);
        if self.events.update(key, pvc, notice).await
            && let Some(msg) = reason.and_then(|r| Message::blocked(report, r, now))
        {
            self.notifier.send(msg);
        }
    }

    /// Opt-in is a hard boundary: a claim whose owner never enabled headroom gets no patch and
    /// no Event, whatever state it is in (a KEP-1790 infeasible resize included); after an
    /// internal error opt-in is unknown.
    fn opted_in(report: &VolumeReport) -> bool {
        !matches!(
            report.decision.verdict,
            Verdict::Blocked {
                reason: BlockReason::Disabled | BlockReason::InternalError
            }
        )
    }

    /// No grow: writes the status when it changed, and the history when a resize was seen
    /// landed or failed. A 409 (the claim changed since it was read: the resizer or the CSI
    /// driver setting its capacity, often in the very moment the landing is seen) is re-read and
    /// decided again: the landing's time must be written when it was seen, not a scan interval
    /// later, or the lead time learned from it is that much too long.
    pub(super) async fn write_status(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
        eval: &Evaluation,
        status: &StatusAnnotation,
    ) -> Applied {
        let rv = pvc.metadata.resource_version.clone().unwrap_or_default();
        let unchanged = state::read_status(pvc)
            .ok()
            .flatten()
            .is_some_and(|old| !status.differs(&old));
        // A resize seen landed: its time goes into the history (once per resize), which is
        // what the predictive trigger learns this claim's lead time from; a failed one is
        // marked so.
        let history = eval.history_changed.then_some(eval.history.as_slice());
        // Not between the kubelet's growing the filesystem and its status write: the claim is
        // looked at again in a moment (the fast loop) and written then.
        let kubelet_writing = crate::resolve::inflight::awaits_capacity(eval);
        if self.dry_run || (unchanged && history.is_none()) || kubelet_writing {
            return Applied::Done;
        }
        let body = match state::status_patch(Some(&rv), status, history) {
            Ok(body) => body,
            Err(e) => {
                tracing::warn!(pvc = %key, error = %e, "could not encode status");
                return Applied::Done;
            }
        };
        match self.patch(&eval.report.pvc, &body).await {
            Ok(_) => Applied::Done,
            Err(PatchError::Conflict) => Applied::Conflict,
            Err(PatchError::Other(e) | PatchError::Quota(e)) => {
                tracing::warn!(pvc = %key, error = %e, "could not write status");
                Applied::Done
            }
        }
    }

    /// Carries out a grow on the claim's request: the PATCH, its metric, its Events; `approval`,
    /// the approved recommendation it carries out, if any.
    async fn grow_approved(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
        eval: &Evaluation,
        (to, kind): (u64, GrowKind),
        status: &StatusAnnotation,
        (now, approval): (Timestamp, Option<Approval>),
    ) -> Applied {
        let report = &eval.report;
        let name = report.pvc.as_str();
        let rv = pvc.metadata.resource_version.clone().unwrap_or_default();
        let from = report.claim.current_bytes();
        if self.dry_run {
            tracing::info!(pvc = %key, kind = kind.as_str(), from = %quantity::format(from), to = %quantity::format(to), "dry run: would grow");
            return Applied::Done;
        }
        let approved = approved(approval.as_ref());
        let body =
            match approved_grow_body(eval, &rv, (to, kind), self.node, status, (now, approval)) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(pvc = %key, error = %e, "could not encode the resize patch");
                    return Applied::Done;
                }
            };
        let result = self.patch(name, &body).await;
        let label = match &result {
            Ok(_) => ResizeResult::Success,
            Err(PatchError::Conflict) => ResizeResult::Conflict,
            Err(PatchError::Other(_) | PatchError::Quota(_)) => ResizeResult::Error,
        };
        self.metrics.resize_of(report, kind, label);
        match result {
            Ok(_) => {
                let used = report
                    .measurement
                    .map(|m| format!(" at {:.1}% used", m.used_percent()))
                    .unwrap_or_default();
                // A step cut to fit the namespace's quota or the storage pool says so: the next
                // one may be blocked.
                let cut = report.decision.notes.iter().find_map(|n| match n {
                    crate::decide::Note::QuotaReduced { wanted, .. } => Some(format!(
                        " (cut from {} to fit the namespace's ResourceQuota)",
                        quantity::format(*wanted)
                    )),
                    crate::decide::Note::PoolReduced { wanted, .. } => Some(format!(
                        " (cut from {} to fit the storage pool)",
                        quantity::format(*wanted)
                    )),
                    _ => None,
                });
                let note = format!(
                    "{} {} -> {}{used}{}{approved}",
                    kind.as_str(),
                    quantity::format(from),
                    quantity::format(to),
                    cut.unwrap_or_default(),
                );
                tracing::info!(pvc = %key, %note, "resized");
                self.announce_resized(pvc, eval, (kind, from, to), note, now)
                    .await;
                self.events.update(key, pvc, None).await;
                Applied::Done
            }
            Err(PatchError::Conflict) => Applied::Conflict,
            Err(PatchError::Quota(e)) => {
                tracing::warn!(pvc = %key, error = %e, "the namespace's quota refused the resize; no retry until its quotas change");
                Applied::QuotaRefused
            }
            Err(PatchError::Other(e)) => {
                tracing::warn!(pvc = %key, error = %e, "resize patch failed; the next scan decides again");
                Applied::Done
            }
        }
    }

    /// History entries the budget ignored (dated too far in the future) are worth one Warning.
    async fn history_notice(&self, key: &str, pvc: &PersistentVolumeClaim, eval: &Evaluation) {
        let notice = eval.report.future_history.map(|h| {
            let f = h.finding(
                crate::k8s::state::HISTORY,
                crate::decide::budget::CLOCK_SKEW,
            );
            Notice {
                warning: true,
                reason: "InvalidHistory",
                note: format!("{}: {}", f.field, f.message),
            }
        });
        self.events
            .update(&format!("{key}#history"), pvc, notice)
            .await;
    }

    async fn wal_notice(&self, key: &str, pvc: &PersistentVolumeClaim, eval: &Evaluation) {
        let report = &eval.report;
        let unknown = report.decision.notes.iter().find(|n| n.is_wal_unknown());
        let notice = match (report.role.as_str(), unknown) {
            ("data" | "wal", Some(note)) => Some(Notice {
                warning: true,
                reason: "WALHealthUnavailable",
                note: note.to_string(),
            }),
            _ => None,
        };
        self.events.update(&format!("{key}#wal"), pvc, notice).await;
    }
}
