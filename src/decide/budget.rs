//! The rolling 24 h action budget, derived from the claim's history alone.

use jiff::{SignedDuration, Timestamp};

use super::inputs::{Action, GrowKind};
use crate::policy::{Mode, Policy};

pub const WINDOW: SignedDuration = SignedDuration::from_hours(24);

#[derive(Debug, Clone, Copy)]
pub struct Budget {
    max: u32,
    used: u32,
    oldest_in_window: Option<Timestamp>,
}

impl Budget {
    /// Counts actions in (now - 24h, ∞): an entry stamped in the future by a node with a fast
    /// clock still counts, so skew can only make headroom more conservative.
    pub fn new(history: &[Action], now: Timestamp, policy: &Policy) -> Self {
        let since = now - WINDOW;
        let in_window = history.iter().filter(|a| a.at > since);
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
        self.oldest_in_window.map(|t| t + WINDOW)
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
