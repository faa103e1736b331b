//! The claim's side of `enforcement`: its approval annotation and what the agent last wrote in
//! its status, read for [`crate::decide::recommend::gate`].

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::decide::recommend::{Claimed, Enforced, gate};
use crate::decide::{Action, Decision, Measurement};
use crate::k8s::state;
use crate::policy::Policy;

/// A person's approval of one recommendation, by its id.
pub const APPROVE: &str = "headroom.dev/approve";

/// The field manager that last set [`APPROVE`], from the claim's managedFields (client-chosen
/// text: cut to a name's length).
pub fn approver(pvc: &PersistentVolumeClaim) -> Option<String> {
    let key = format!("f:{APPROVE}");
    pvc.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.pointer("/f:metadata/f:annotations"))
                .and_then(|a| a.get(&key))
                .is_some()
        })
        .max_by_key(|m| m.time.as_ref().map(|t| t.0))
        .and_then(|m| m.manager.as_ref())
        .map(|m| m.chars().take(crate::decide::APPROVER_CHARS).collect())
}

/// The gate's answer for this claim; `None` under `act` or without a valid policy.
pub fn enforced(
    pvc: &PersistentVolumeClaim,
    policy: Option<&Policy>,
    decision: &Decision,
    measurement: Option<&Measurement>,
    (request_bytes, history): (u64, &[Action]),
    now: Timestamp,
) -> Option<Enforced> {
    let policy = policy.filter(|p| p.enabled)?;
    // A status that cannot be read holds no recommendation: one is made afresh.
    let status = state::read_status(pvc).ok().flatten();
    let approve = pvc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APPROVE))
        .map(|s| s.trim())
        .filter(|s| !s.is_empty());
    let claim = Claimed {
        uid: pvc.metadata.uid.as_deref().unwrap_or_default(),
        request_bytes,
        approve,
        recommendation: status.as_ref().and_then(|s| s.recommendation.as_ref()),
        approval: status.as_ref().and_then(|s| s.approval.as_ref()),
        history,
    };
    gate(policy, decision, measurement, &claim, now)
}
