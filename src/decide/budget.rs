//! The rolling 24 h action budget, derived from the claim's history alone.

use jiff::{SignedDuration, Timestamp};

use super::inputs::{Action, GrowKind};
use crate::policy::{Mode, Policy};

pub const WINDOW: SignedDuration = SignedDuration::from_hours(24);
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

#[derive(Debug, Clone, Copy)]
pub struct Budget {
    max: u32,
    used: u32,
    oldest_in_window: Option<Timestamp>,
}

impl Budget {
    /// Counts actions in (now - 24h, now + [`CLOCK_SKEW`]]: an entry stamped a little in the
    /// future by a node with a fast clock still counts, so skew can only make headroom more
    /// conservative; one dated further out is ignored.
    pub fn new(history: &[Action], now: Timestamp, policy: &Policy) -> Self {
        let since = minus(now, WINDOW);
        let in_window = counted(history, now).filter(move |a| a.at > since);
        let used = in_window.clone().count().min(u32::MAX as usize) as u32;
        Self {
            max: policy.max_actions_per_day,
            used,
            oldest_in_window: in_window.map(|a| a.at).min(),
        }
    }

    pub fn used(&self) -> u32 {
        self.used
    }

    pub fn left(&self) -> u32 {
        self.max.saturating_sub(self.used)
    }

    /// When the oldest counted action leaves the window.
    pub fn next_slot(&self) -> Option<Timestamp> {
        self.oldest_in_window.map(|t| plus(t, WINDOW))
    }

    /// Planned actions in convergent mode leave the emergency reserve untouched; emergencies (and
    /// threshold mode, which has no reserve) may use every slot.
    pub fn allows(&self, kind: GrowKind, policy: &Policy) -> bool {
        let reserve = match (policy.mode, kind) {
            (Mode::Convergent, k)
                if k != GrowKind::EmergencyGrow && policy.emergency_grow.enabled =>
            {
                policy.emergency_grow.reserved_actions_for_emergency
            }
            _ => 0,
        };
        self.used.saturating_add(reserve) < self.max
    }
}
