//! When a hold ends: each hold that ends by time alone says when, and the decision at that
//! moment no longer holds the claim for it; a drain says no time.

use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::policy::{MaintenanceWindow, Mode, Policy};
use crate::quantity::GI;

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn threshold() -> Policy {
    Policy {
        enabled: true,
        ..Policy::with_limit(1000 * GI)
    }
}

fn decide_at(p: &Policy, used_percent: u64, history: &[Action], now: &str) -> Decision {
    decide_with(p, used_percent, history, now, VolumeFacts::default())
}

fn decide_with(
    p: &Policy,
    used_percent: u64,
    history: &[Action],
    now: &str,
    facts: VolumeFacts,
) -> Decision {
    let size = 100 * GI;
    let used = size / 100 * used_percent;
    super::convergent_tests::decide_with(p, (size, used), history, ts(now), facts)
}

fn grew(at: &str, kind: GrowKind) -> Action {
    Action::new(ts(at), kind, 80 * GI, 100 * GI)
}

fn grow_at(at: &str) -> Action {
    grew(at, GrowKind::Grow)
}

/// Held at `now` for `reason` until `until`; a second before, still; at `until`, grown.
fn held_then_grown(
    p: &Policy,
    used: u64,
    history: &[Action],
    now: &str,
    reason: BlockReason,
    until: &str,
) {
    let d = decide_at(p, used, history, now);
    assert_eq!(d.blocked_reason(), Some(reason), "{d:?}");
    assert_eq!(d.held_until, Some(ts(until)), "{d:?}");
    let before = (ts(until) - SignedDuration::from_secs(1)).to_string();
    let d = decide_at(p, used, history, &before);
    assert_eq!(d.blocked_reason(), Some(reason), "a second before: {d:?}");
    let d = decide_at(p, used, history, until);
    assert!(d.grow_to().is_some(), "at its end: {d:?}");
}

#[test]
fn the_modification_interval_ends_when_the_next_grow_is_possible() {
    let p = Policy {
        modification_interval: Some(SignedDuration::from_hours(6)),
        ..threshold()
    };
    let history = [grow_at("2026-03-01T10:00:00Z")];
    held_then_grown(
        &p,
        98,
        &history,
        "2026-03-01T12:00:00Z",
        BlockReason::ModificationInterval,
        "2026-03-01T16:00:00Z",
    );
}

#[test]
fn the_daily_budget_ends_when_its_oldest_action_leaves_the_window() {
    let p = Policy {
        max_actions_per_day: 1,
        ..threshold()
    };
    let history = [grow_at("2026-03-01T10:00:00Z")];
    held_then_grown(
        &p,
        90,
        &history,
        "2026-03-01T12:00:00Z",
        BlockReason::BudgetExhausted,
        "2026-03-02T10:00:00Z",
    );
}

#[test]
fn a_scheduled_grow_is_held_until_the_window_opens_then_the_cooldown_ends() {
    let p = Policy {
        mode: Mode::Convergent,
        maintenance_window: MaintenanceWindow::new("0 3 * * *", "2h", "UTC").ok(),
        ..threshold()
    };
    held_then_grown(
        &p,
        90,
        &[],
        "2026-03-01T12:00:00Z",
        BlockReason::OutsideWindow,
        "2026-03-02T03:00:00Z",
    );
    let history = [grew("2026-03-02T03:10:00Z", GrowKind::ScheduledGrow)];
    held_then_grown(
        &p,
        90,
        &history,
        "2026-03-02T03:30:00Z",
        BlockReason::Cooldown,
        "2026-03-02T04:10:00Z",
    );
}

#[test]
fn a_drain_ends_at_no_time() {
    let facts = VolumeFacts {
        node_draining: true,
        ..VolumeFacts::default()
    };
    let d = decide_with(&threshold(), 90, &[], "2026-03-01T12:00:00Z", facts);
    assert_eq!(d.blocked_reason(), Some(BlockReason::NodeDraining));
    assert_eq!(d.held_until, None);
    // Nothing held: nothing to wake for.
    let d = decide_at(&threshold(), 10, &[], "2026-03-01T12:00:00Z");
    assert_eq!(d.held_until, None);
}
