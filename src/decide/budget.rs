//! The rolling 24 h action budget, derived from the claim's history alone.

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::inputs::{Action, GrowKind};
use crate::policy::{Mode, Policy};

pub const WINDOW: SignedDuration = SignedDuration::from_hours(24);
/// Minimum time between two non-emergency actions in convergent mode.
pub const COOLDOWN: SignedDuration = SignedDuration::from_hours(1);
/// How far in the future a history entry may be dated and still count: another node's clock may
/// run a little fast. Entries beyond it are not an action anyone took; they are ignored (and
/// reported) instead of blocking the claim for as long as the date says.
pub const CLOCK_SKEW: SignedDuration = SignedDuration::from_mins(5);

/// `t - d`, or the earliest timestamp when that is before the time type's range.
pub fn minus(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_sub(d).unwrap_or(Timestamp::MIN)
}

/// `t + d`, or the latest timestamp when that is past the time type's range.
pub fn plus(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

/// Dated beyond the clock-skew allowance: not counted, reported as invalid history.
pub fn is_future(action: &Action, now: Timestamp) -> bool {
    action.at > plus(now, CLOCK_SKEW)
}

/// The entries that count at `now`: those not dated beyond the clock-skew allowance.
pub fn counted(history: &[Action], now: Timestamp) -> impl Iterator<Item = &Action> + Clone {
    history.iter().filter(move |a| !is_future(a, now))
}

/// The daily limit an action of `kind` counts against. Threshold mode has one budget,
/// `maxActionsPerDay`, for every action. Convergent mode has the CloudNativePG RFC's: an
/// emergency may use all of `emergencyGrow.maxActionsPerDay`; planned growth stops at
/// `maxActionsPerDay` and leaves `reservedActionsForEmergency` of the emergency budget untouched.
/// Both count every action in the window, so together they never exceed the emergency budget
/// (what a cloud's daily modification limit allows).
pub fn limit(policy: &Policy, kind: GrowKind) -> u32 {
    let e = &policy.emergency_grow;
    match (policy.mode, kind) {
        (Mode::Threshold, _) => policy.max_actions_per_day,
        (Mode::Convergent, GrowKind::EmergencyGrow) => e.max_actions_per_day,
        (Mode::Convergent, _) => {
            let reserve = if e.enabled {
                e.reserved_actions_for_emergency
            } else {
                0
            };
            policy
                .max_actions_per_day
                .min(e.max_actions_per_day.saturating_sub(reserve))
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// What planned growth may use, and what an emergency may.
    planned_max: u32,
    emergency_max: u32,
    used: u32,
    oldest_in_window: Option<Timestamp>,
}

/// The budget as the status shows it (the RFC's `BudgetStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct BudgetView {
    pub actions_last_24h: u32,
    /// Slots planned growth leaves to emergencies (0 in threshold mode).
    pub reserved_for_emergency: u32,
    pub available_for_planned: u32,
    pub available_for_emergency: u32,
    /// When the oldest counted action leaves the window (a slot frees up), if any is used.
    pub resets_at: Option<Timestamp>,
}

impl Budget {
    /// Counts actions in (now - 24h, now + [`CLOCK_SKEW`]]: an entry stamped a little in the
    /// future by a node with a fast clock still counts, so skew can only make headroom more
    /// conservative; one dated further out is ignored.
    pub fn new(history: &[Action], now: Timestamp, policy: &Policy) -> Self {
        let since = minus(now, WINDOW);
        let in_window = counted(history, now).filter(move |a| a.at > since);
        let used = in_window.clone().count().min(u32::MAX as usize) as u32;
        let planned_max = limit(policy, GrowKind::ScheduledGrow);
        Self {
            planned_max,
            // An emergency may always use what planned growth may.
            emergency_max: limit(policy, GrowKind::EmergencyGrow).max(planned_max),
            used,
            oldest_in_window: in_window.map(|a| a.at).min(),
        }
    }

    pub fn used(&self) -> u32 {
        self.used
    }

    /// Actions left to any kind (an emergency's).
    pub fn left(&self) -> u32 {
        self.emergency_max.saturating_sub(self.used)
    }

    /// When the oldest counted action leaves the window.
    pub fn next_slot(&self) -> Option<Timestamp> {
        self.oldest_in_window.map(|t| plus(t, WINDOW))
    }

    pub fn allows(&self, kind: GrowKind) -> bool {
        let max = if kind == GrowKind::EmergencyGrow {
            self.emergency_max
        } else {
            self.planned_max
        };
        self.used < max
    }

    pub fn view(&self) -> BudgetView {
        BudgetView {
            actions_last_24h: self.used,
            reserved_for_emergency: self.emergency_max.saturating_sub(self.planned_max),
            available_for_planned: self.planned_max.saturating_sub(self.used),
            available_for_emergency: self.left(),
            resets_at: self.next_slot(),
        }
    }
}
