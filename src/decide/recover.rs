//! Recovery from an infeasible resize (KEP-1790, GA in Kubernetes 1.34): a request the storage
//! system refused may be lowered again while it stays above `status.capacity`. headroom retries
//! once, at the largest step its history shows the storage system accepted.

use super::inputs::{Action, ClaimState, FailureCause, GrowKind, ResizeState};

/// KEP-1790: the size to lower the claim's request to when the storage refused it as infeasible
/// (see [`retry_size`]); `None` for any other state.
pub fn lower_to(claim: &ClaimState, history: &[Action]) -> Option<u64> {
    match &claim.resize {
        ResizeState::Failed {
            cause: FailureCause::Infeasible,
            ..
        } => retry_size(claim, history),
        _ => None,
    }
}

/// The size to retry an infeasible request at, or `None` when there is nothing to retry (no
/// request above capacity, or this request was already a retry). Without a step known to have
/// worked, the request returns to the capacity the volume has: that cancels the refused resize and
/// lets the normal rules decide again.
pub fn retry_size(claim: &ClaimState, history: &[Action]) -> Option<u64> {
    let (request, capacity) = (claim.request_bytes, claim.capacity_bytes);
    if capacity == 0 || request <= capacity {
        return None;
    }
    if history
        .iter()
        .any(|a| a.kind == GrowKind::Retry && a.to == request)
    {
        return None; // once
    }
    let feasible_step = history
        .iter()
        .filter(|a| a.kind != GrowKind::Retry && a.to <= capacity && a.to > a.from)
        .map(|a| a.to - a.from)
        .max();
    let size = feasible_step.map_or(capacity, |s| capacity.saturating_add(s));
    Some(if size < request { size } else { capacity })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::ResizeState;
    use crate::quantity::GI;

    fn claim(request: u64, capacity: u64) -> ClaimState {
        ClaimState {
            request_bytes: request,
            capacity_bytes: capacity,
            resize: ResizeState::Failed {
                cause: crate::decide::FailureCause::Infeasible,
                detail: "ControllerResizeInfeasible".into(),
            },
        }
    }

    fn act(kind: GrowKind, from: u64, to: u64) -> Action {
        Action::new("2026-01-01T00:00:00Z".parse().expect("ts"), kind, from, to)
    }

    #[test]
    fn retries_at_the_largest_step_that_worked() {
        let h = [
            act(GrowKind::Grow, 10 * GI, 12 * GI),
            act(GrowKind::Grow, 12 * GI, 15 * GI),
            act(GrowKind::Grow, 15 * GI, 65 * GI),
        ];
        // 65Gi was refused at capacity 15Gi; +3Gi worked before.
        assert_eq!(retry_size(&claim(65 * GI, 15 * GI), &h), Some(18 * GI));
    }

    #[test]
    fn cancels_when_no_smaller_step_is_known() {
        assert_eq!(retry_size(&claim(20 * GI, 10 * GI), &[]), Some(10 * GI));
        let h = [act(GrowKind::Grow, 10 * GI, 20 * GI)];
        assert_eq!(retry_size(&claim(20 * GI, 10 * GI), &h), Some(10 * GI));
    }

    #[test]
    fn only_once_and_only_above_capacity() {
        let h = [act(GrowKind::Retry, 65 * GI, 18 * GI)];
        assert_eq!(retry_size(&claim(18 * GI, 15 * GI), &h), None);
        assert_eq!(retry_size(&claim(15 * GI, 15 * GI), &[]), None);
    }

    /// The engine says the retry, whatever else it says; the actor only carries it out.
    #[test]
    fn the_engine_returns_the_retry_with_its_verdict() {
        use crate::decide::{BlockReason, Inputs, PolicyInput, VolumeFacts, decide};
        let mut p = crate::policy::Policy::with_limit(100 * GI);
        p.enabled = true;
        let h = [act(GrowKind::Grow, 12 * GI, 15 * GI)];
        let run = |claim: &ClaimState, p: &crate::policy::Policy, facts: VolumeFacts| {
            decide(&Inputs {
                logical: None,
                policy: PolicyInput::Valid(p),
                measurement: Default::default(),
                claim,
                history: &h,
                wal: None,
                facts,
                now: "2026-01-02T00:00:00Z".parse().expect("ts"),
                fill_rate: None,
            })
        };
        let facts = VolumeFacts {
            expandable: true,
            ..Default::default()
        };
        let d = run(&claim(65 * GI, 15 * GI), &p, facts);
        assert_eq!(d.blocked_reason(), Some(BlockReason::ResizeFailed));
        assert_eq!(d.lower_to, Some(18 * GI));
        // Even on a volume it could not measure or grow: lowering cancels, it grows nothing.
        let shared = VolumeFacts {
            shared: true,
            unmeasured: true,
            ..facts
        };
        assert_eq!(
            run(&claim(65 * GI, 15 * GI), &p, shared).lower_to,
            Some(18 * GI)
        );
        // A resize that failed otherwise has nothing to lower.
        let mut stuck = claim(65 * GI, 15 * GI);
        stuck.resize = ResizeState::Failed {
            cause: FailureCause::Stuck,
            detail: String::new(),
        };
        assert_eq!(run(&stuck, &p, facts).lower_to, None);
        // A claim that did not opt in is never written: no retry either.
        p.enabled = false;
        assert_eq!(run(&claim(65 * GI, 15 * GI), &p, facts).lower_to, None);
    }
}
