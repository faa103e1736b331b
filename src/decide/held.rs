//! When a hold on a needed grow ends by time alone: the storage's rule lets the next grow
//! through, the maintenance window opens, the cooldown or the daily budget frees a slot, a
//! refused eviction may be tried again, or the window for an eviction opens. The fast
//! measurement loop wakes the claim then (`agent::measure`), so a claim already past its line
//! is grown when its hold ends, not at the next scan. Holds that end with no time (a drain, WAL
//! health, a quota, a resize in flight) end on a change the watches or the loop's lines see.

use jiff::Timestamp;

use super::budget::{self, Budget, COOLDOWN};
use super::decision::{BlockReason, Decision, Verdict};
use super::inputs::Inputs;
use super::logical::budget_history;
use super::restart::Restart;

/// When what holds `d` ends, if it is a time after `inputs.now`. `budget`: the one `d` was
/// decided with.
pub fn held_until(inputs: &Inputs, budget: &Budget, d: &Decision) -> Option<Timestamp> {
    let Verdict::Blocked { reason } = d.verdict else {
        return None;
    };
    let ends = match reason {
        BlockReason::ModificationInterval => d.next_grow,
        BlockReason::OutsideWindow => d.next_window,
        BlockReason::BudgetExhausted => budget.next_slot(),
        BlockReason::Cooldown => budget::counted(budget_history(inputs), inputs.now)
            .map(|a| a.at)
            .max()
            .map(|last| budget::plus(last, COOLDOWN)),
        BlockReason::AwaitingRemount => match d.restart {
            Some(Restart::Refused { retry_at, .. }) => Some(retry_at),
            Some(Restart::OutsideWindow { next }) => next,
            _ => None,
        },
        _ => None,
    };
    ends.filter(|t| *t > inputs.now)
}
