//! The engine's gates: the reasons a volume does not grow, whatever it needs (refusals) or once
//! it needs to (a change in flight, the modification interval, a drain, the window, the cooldown,
//! the budget). Each answers the reason it blocks with, `None` when it lets growth through.

use super::budget::{self, Budget, COOLDOWN};
use super::decision::{BlockReason, Decision};
use super::inputs::{FailureCause, GrowKind, Inputs, OwnerProblem, ResizeState};
use super::logical::{budget_history, joining};
use crate::policy::{Mode, Policy};

/// What makes any growth wrong whatever the numbers, so it is reported even when none is needed.
pub(super) fn refusal(inputs: &Inputs) -> Option<BlockReason> {
    let facts = inputs.facts;
    if facts.shared {
        return Some(BlockReason::SharedFilesystem);
    }
    if facts.block_mode {
        return Some(BlockReason::BlockMode);
    }
    if !facts.expandable {
        return Some(BlockReason::NotExpandable);
    }
    if facts.unmeasured {
        return Some(BlockReason::NotMeasured);
    }
    // An owner lowered under what headroom set is not fought, with or without a need to grow.
    match facts.owner {
        Some(OwnerProblem::Reverted) => return Some(BlockReason::OwnerReverted),
        Some(OwnerProblem::Invalid) => return Some(BlockReason::OwnerInvalid),
        None => {}
    }
    if let ResizeState::Failed { cause, .. } = inputs.claim.resize {
        return Some(match cause {
            FailureCause::NeedsRemount => BlockReason::AwaitingRemount,
            FailureCause::NeedsDetach => BlockReason::AwaitingDetach,
            FailureCause::AwaitingOwner => BlockReason::AwaitingOwner,
            _ => BlockReason::ResizeFailed,
        });
    }
    if facts.capacity_unknown {
        return Some(BlockReason::CapacityUnknown);
    }
    None
}

/// A change of the volume already on its way.
pub(super) fn in_flight(inputs: &Inputs) -> Option<BlockReason> {
    if let ResizeState::InProgress { .. } = inputs.claim.resize {
        return Some(BlockReason::ResizeInProgress);
    }
    // The same cloud modification as a resize: an emergency too waits for it to land.
    if inputs.facts.attributes_changing {
        return Some(BlockReason::VolumeAttributesChanging);
    }
    None
}

/// The rules of when: the storage's modification interval, a node drain, the maintenance window.
pub(super) fn not_now(
    inputs: &Inputs,
    policy: &Policy,
    decision: &Decision,
    (kind, emergency): (GrowKind, bool),
) -> Option<BlockReason> {
    // The storage would refuse it: an emergency too, since a refused resize lands nothing and
    // leaves the claim in a resize error.
    if decision.next_grow.is_some() {
        return Some(BlockReason::ModificationInterval);
    }
    if inputs.facts.node_draining && !emergency {
        return Some(BlockReason::NodeDraining);
    }
    // A group member joining its peers is planned growth too: it waits for a configured window,
    // unless it restores a copy of them, which fills it to their size long before.
    let planned = kind == GrowKind::ScheduledGrow
        || (kind == GrowKind::GroupGrow
            && policy.maintenance_window.is_some()
            && !inputs.facts.restoring);
    let open = policy
        .maintenance_window
        .as_ref()
        .is_some_and(|w| w.is_open(inputs.now));
    (planned && !open).then_some(BlockReason::OutsideWindow)
}

/// The convergent cooldown, then the budget of actions. A member joining the action its peers
/// already paid for spends neither.
pub(super) fn spent(
    inputs: &Inputs,
    policy: &Policy,
    budget: &Budget,
    kind: GrowKind,
) -> Option<BlockReason> {
    if kind == GrowKind::GroupGrow && joining(inputs).is_some() {
        return None;
    }
    if policy.mode == Mode::Convergent && kind != GrowKind::EmergencyGrow && cooling_down(inputs) {
        return Some(BlockReason::Cooldown);
    }
    (!budget.allows(kind)).then_some(BlockReason::BudgetExhausted)
}

/// An action was counted within the cooldown.
fn cooling_down(inputs: &Inputs) -> bool {
    let since = budget::minus(inputs.now, COOLDOWN);
    budget::counted(budget_history(inputs), inputs.now).any(|a| a.at > since)
}
