//! The durable state headroom keeps on the claim itself (history and status annotations), so an
//! agent restart, a node drain or the workload moving to another node loses nothing.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{KubeError, pvc_name};
use crate::decide::budget::{self, WINDOW};
use crate::decide::{Action, Verdict};
use crate::report::VolumeReport;

pub const HISTORY: &str = "headroom.dev/history";
pub const STATUS: &str = "headroom.dev/status";

/// Entries older than the budget window kept for operators (what happened before today).
pub const OLDER_KEPT: usize = 5;
/// Hard cap on history entries: annotations share a 256 KiB limit per object.
pub const MAX_ENTRIES: usize = 32;

fn annotation<'a>(pvc: &'a PersistentVolumeClaim, key: &str) -> Option<&'a str> {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        // `kubectl annotate pvc x headroom.dev/history=` is how people clear it by hand.
        .filter(|s| !s.trim().is_empty())
}

/// The claim's past actions; none when the annotation is absent. Corrupt JSON is an error: the
/// agent then refuses to act on the claim instead of forgetting its budget.
pub fn read_history(pvc: &PersistentVolumeClaim) -> Result<Vec<Action>, KubeError> {
    let Some(text) = annotation(pvc, HISTORY) else {
        return Ok(Vec::new());
    };
    let mut history: Vec<Action> =
        serde_json::from_str(text).map_err(|source| KubeError::Annotation {
            object: pvc_name(pvc),
            annotation: HISTORY,
            source,
        })?;
    history.sort_by_key(|a| a.at);
    Ok(history)
}

/// `history` plus `action`, sorted by time and bounded: every entry inside the 24 h budget window
/// (a little future, within the clock-skew allowance, counts as inside, as in the budget) and the
/// [`OLDER_KEPT`] most recent older ones, at most [`MAX_ENTRIES`] in all (the newest win). Entries
/// dated further in the future are dropped: the budget ignores them, so keeping them would only
/// keep the warning about them alive.
pub fn append(history: &[Action], action: Action, now: Timestamp) -> Vec<Action> {
    let since = budget::minus(now, WINDOW);
    let mut all: Vec<Action> = budget::counted(history, now)
        .cloned()
        .chain([action])
        .collect();
    all.sort_by_key(|a| a.at);
    let first_in_window = all.partition_point(|a| a.at <= since);
    let keep_from = first_in_window.saturating_sub(OLDER_KEPT);
    let keep_from = keep_from.max(all.len().saturating_sub(MAX_ENTRIES));
    all.split_off(keep_from)
}

/// What the status annotation says about the claim, for `headroom status` and for people reading
/// `kubectl get pvc -o yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusAnnotation {
    pub node: String,
    pub updated_at: Timestamp,
    /// The claim's current size (the larger of request and capacity).
    pub effective_size_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// Balanced, NeedsGrow, NeedsShrink, Resizing, Blocked or Growing.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<String>,
    pub last_decision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_percent: Option<f64>,
    pub budget_left: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_slot: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<Timestamp>,
    /// A trigger not applied as written (an invalid or unreachable `minAvailable`) and what
    /// stands in for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackNote>,
}

/// `{"reason":"min_available_unreachable","message":"..."}` in the status annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FallbackNote {
    pub reason: String,
    pub message: String,
}

impl From<crate::policy::Fallback> for FallbackNote {
    fn from(f: crate::policy::Fallback) -> Self {
        FallbackNote {
            reason: f.as_str().to_string(),
            message: f.message(),
        }
    }
}

/// Moves of used percent below this do not count as a change worth an API write.
const USED_PERCENT_EPSILON: f64 = 1.0;

/// A convergent target that moves by less than this fraction of itself is not a change worth
/// an API write (it follows usage byte by byte; the engine acts only on 5 % moves anyway).
const TARGET_TOLERANCE: f64 = 0.01;

fn target_moved(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            let (lo, hi) = (a.min(b) as f64, a.max(b) as f64);
            hi - lo > hi * TARGET_TOLERANCE
        }
        (a, b) => a.is_some() != b.is_some(),
    }
}

impl StatusAnnotation {
    pub fn from_report(report: &VolumeReport, now: Timestamp) -> Self {
        let d = &report.decision;
        let size = crate::quantity::format;
        let (state, last_decision) = match d.verdict {
            Verdict::Grow { to, kind } => (
                "Growing".to_string(),
                format!(
                    "{}{} {} -> {}",
                    kind.as_str(),
                    if d.predicted { " (predicted)" } else { "" },
                    size(report.claim.current_bytes()),
                    size(to)
                ),
            ),
            Verdict::Blocked { reason } => ("Blocked".to_string(), format!("blocked: {reason}")),
            Verdict::NoAction { state } => (
                state.as_str().to_string(),
                format!("no action: {}", state.as_str()),
            ),
        };
        StatusAnnotation {
            node: report.node.clone(),
            updated_at: now,
            effective_size_bytes: report.claim.current_bytes(),
            target_size_bytes: d.target_bytes,
            limit_bytes: report.limit_bytes,
            state,
            blocked_reason: d.blocked_reason().map(|r| r.as_str().to_string()),
            last_decision,
            // One decimal is what a table shows; more digits would only churn the annotation.
            used_percent: report
                .measurement
                .map(|m| (m.used_percent() * 10.0).round() / 10.0),
            budget_left: d.budget_left,
            next_slot: d.next_slot,
            next_window: d.next_window,
            fallback: d.fallback.map(FallbackNote::from),
        }
    }

    /// A change worth writing: anything but `updatedAt`, the writing `node` (agents on every
    /// node of an RWX claim would otherwise take turns rewriting it), used-percent moves under
    /// one point and target moves under one percent. Steady state writes nothing.
    pub fn differs(&self, other: &StatusAnnotation) -> bool {
        let used_moved = match (self.used_percent, other.used_percent) {
            (Some(a), Some(b)) => (a - b).abs() >= USED_PERCENT_EPSILON,
            (a, b) => a.is_some() != b.is_some(),
        };
        let target = target_moved(self.target_size_bytes, other.target_size_bytes);
        let mut a = self.clone();
        a.updated_at = other.updated_at;
        a.used_percent = other.used_percent;
        a.node = other.node.clone();
        a.target_size_bytes = other.target_size_bytes;
        used_moved || target || a != *other
    }
}

/// The status annotation; `None` when absent, an error naming the claim when corrupt.
pub fn read_status(pvc: &PersistentVolumeClaim) -> Result<Option<StatusAnnotation>, KubeError> {
    annotation(pvc, STATUS)
        .map(|text| {
            serde_json::from_str(text).map_err(|source| KubeError::Annotation {
                object: pvc_name(pvc),
                annotation: STATUS,
                source,
            })
        })
        .transpose()
}

/// The single merge patch of a Grow: new storage request and both annotations, with the
/// resourceVersion the decision was made on as precondition (a 409 means decide again).
pub fn grow_patch(
    resource_version: &str,
    to_bytes: u64,
    history: &[Action],
    status: &StatusAnnotation,
) -> Result<Value, KubeError> {
    Ok(json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": {
                HISTORY: serde_json::to_string(history)?,
                STATUS: serde_json::to_string(status)?,
            },
        },
        "spec": { "resources": { "requests": { "storage": crate::quantity::format(to_bytes) } } },
    }))
}

/// A status merge patch, with the history when it changed without a grow (a resize's landing
/// time); with a resourceVersion it is conditional like [`grow_patch`].
pub fn status_patch(
    resource_version: Option<&str>,
    status: &StatusAnnotation,
    history: Option<&[Action]>,
) -> Result<Value, KubeError> {
    let mut metadata = json!({ "annotations": { STATUS: serde_json::to_string(status)? } });
    if let Some(h) = history {
        metadata["annotations"][HISTORY] = json!(serde_json::to_string(h)?);
    }
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    Ok(json!({ "metadata": metadata }))
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
