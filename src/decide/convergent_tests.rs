//! Convergent mode as the CloudNativePG convergent-storage RFC defines it (issue 24): scheduled
//! growth capped per action, the RFC's two budgets, the Emergency state, and README's
//! anti-oscillation constants checked against the code.

use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::policy::{MaintenanceWindow, Mode, Policy};
use crate::quantity::{GI, TI};

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

/// The RFC's minimal policy as validate reads it: request + limit, everything else default.
fn minimal(request: u64, limit: u64) -> Policy {
    Policy {
        enabled: true,
        mode: Mode::Convergent,
        request: Some(request),
        maintenance_window: MaintenanceWindow::rfc_default(),
        ..Policy::with_limit(limit)
    }
}

fn decide_at(p: &Policy, size: u64, used: u64, history: &[Action], now: Timestamp) -> Decision {
    decide_with(p, (size, used), history, now, VolumeFacts::default())
}

/// A claim of `size` with `used` bytes, at its request, expandable, with `facts` otherwise.
pub(super) fn decide_with(
    p: &Policy,
    (size, used): (u64, u64),
    history: &[Action],
    now: Timestamp,
    facts: VolumeFacts,
) -> Decision {
    let claim = ClaimState {
        request_bytes: size,
        capacity_bytes: size,
        resize: ResizeState::Idle,
    };
    decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(p),
        measurement: Measurement {
            capacity_bytes: size,
            used_bytes: used,
            available_bytes: size - used,
            ..Default::default()
        },
        claim: &claim,
        history,
        wal: None,
        facts: VolumeFacts {
            expandable: true,
            ..facts
        },
        now,
        fill_rate: None,
    })
}

fn grew(at: Timestamp, kind: GrowKind) -> Action {
    Action {
        node: "n1".into(),
        ..Action::new(at, kind, 10 * GI, 12 * GI)
    }
}

#[test]
fn a_scheduled_grow_adds_one_step_not_the_whole_way_to_the_target() {
    let p = minimal(10 * GI, 100 * TI);
    let in_window = ts("2026-03-02T03:30:00Z");
    // 10Gi, 9Gi used: target 9/0.8 = 11.25 -> 12Gi, within one 2Gi step: straight there.
    let d = decide_at(&p, 10 * GI, 9 * GI, &[], in_window);
    assert_eq!(d.grow_to(), Some((12 * GI, GrowKind::ScheduledGrow)));
    // 100Gi with 95Gi used... is an emergency; 94Gi used wants 117.5 -> 118Gi: 10Gi a step.
    let d = decide_at(&p, 100 * GI, 94 * GI, &[], in_window);
    assert_eq!(d.grow_to(), Some((110 * GI, GrowKind::ScheduledGrow)));
    assert_eq!(d.target_bytes, Some(118 * GI));
    // The petabyte problem: a 10Ti volume whose target is far above grows 500Gi, not 10 %.
    let d = decide_at(&p, 10 * TI, 9 * TI, &[], in_window);
    assert_eq!(
        d.grow_to(),
        Some((10 * TI + 500 * GI, GrowKind::ScheduledGrow))
    );
    // The next window (the cooldown past) takes the next step.
    let history = [grew(in_window, GrowKind::ScheduledGrow)];
    let later = in_window + SignedDuration::from_hours(1);
    let d = decide_at(&p, 110 * GI, 94 * GI, &history, later);
    assert_eq!(d.grow_to(), Some((118 * GI, GrowKind::ScheduledGrow)));
}

#[test]
fn the_minimal_policy_grows_only_in_the_daily_window() {
    let p = minimal(10 * GI, 100 * GI);
    let d = decide_at(&p, 10 * GI, 9 * GI, &[], ts("2026-03-02T12:00:00Z"));
    assert_eq!(d.blocked_reason(), Some(BlockReason::OutsideWindow));
    assert_eq!(d.next_window, Some(ts("2026-03-03T03:00:00Z")));
    for open in ["2026-03-03T03:00:00Z", "2026-03-03T04:59:00Z"] {
        let d = decide_at(&p, 10 * GI, 9 * GI, &[], ts(open));
        assert_eq!(
            d.grow_to().map(|g| g.1),
            Some(GrowKind::ScheduledGrow),
            "{open}"
        );
    }
    let d = decide_at(&p, 10 * GI, 9 * GI, &[], ts("2026-03-03T05:00:00Z"));
    assert_eq!(d.blocked_reason(), Some(BlockReason::OutsideWindow));
}

#[test]
fn past_the_critical_line_is_the_emergency_state_whatever_the_verdict() {
    let mut p = minimal(10 * GI, 10 * GI);
    let noon = ts("2026-03-02T12:00:00Z");
    // At the limit and critical: blocked, and in an emergency.
    let d = decide_at(&p, 10 * GI, 98 * GI / 10, &[], noon);
    assert_eq!(d.blocked_reason(), Some(BlockReason::AtLimit));
    assert!(d.emergency);
    // emergencyGrow disabled: still an emergency, though only the window may grow it.
    p.limit = 100 * GI;
    p.emergency_grow.enabled = false;
    let d = decide_at(&p, 10 * GI, 98 * GI / 10, &[], noon);
    assert_eq!(d.blocked_reason(), Some(BlockReason::OutsideWindow));
    assert!(d.emergency);
    // Under the line: no emergency; threshold mode never reports one.
    assert!(!decide_at(&p, 10 * GI, 9 * GI, &[], noon).emergency);
    let t = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    assert!(!decide_at(&t, 10 * GI, 98 * GI / 10, &[], noon).emergency);
}

#[test]
fn threshold_mode_keeps_one_budget_with_no_reserve() {
    let p = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    let now = ts("2026-03-02T12:00:00Z");
    let history: Vec<Action> = (1..=2)
        .map(|h| grew(now - SignedDuration::from_hours(h), GrowKind::Grow))
        .collect();
    let d = decide_at(&p, 10 * GI, 9 * GI, &history, now);
    assert_eq!(d.grow_to().map(|g| g.1), Some(GrowKind::Grow));
    assert_eq!(
        (
            d.budget.available_for_planned,
            d.budget.available_for_emergency,
            d.budget.reserved_for_emergency
        ),
        (1, 1, 0)
    );
}

/// docs/policy.md's convergent-mode section states the constants the engine uses.
#[test]
fn readme_states_the_anti_oscillation_constants() {
    let readme = include_str!("../../docs/policy.md");
    let start = readme.find("## Convergent mode").expect("section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    // Lines wrap anywhere: compare with runs of whitespace as one space.
    let section = section.split_whitespace().collect::<Vec<_>>().join(" ");
    let gi = |b: u64| format!("{}Gi", b / GI);
    for needle in [
        format!("cooldown of {}h", COOLDOWN.as_hours()),
        format!("`targetBuffer` + {}", SHRINK_MARGIN_POINTS),
        format!("less than {} %", MIN_CHANGE_PERCENT),
        format!(
            "{} % of the size, at least {}, at most {}",
            EMERGENCY_MIN_PERCENT,
            gi(EMERGENCY_MIN_BYTES),
            gi(EMERGENCY_MAX_BYTES)
        ),
        "`0 3 * * *`".to_string(),
    ] {
        assert!(
            section.contains(&needle),
            "docs/policy.md's convergent section lacks {needle:?}"
        );
    }
}

#[test]
fn the_effective_size_is_what_a_new_claim_should_get() {
    let p = minimal(20 * GI, 100 * GI);
    let noon = ts("2026-03-02T12:00:00Z");
    // A claim below its floor (outside the window): new claims start at request.
    let d = decide_at(&p, 10 * GI, GI, &[], noon);
    assert_eq!(d.effective_bytes, Some(20 * GI));
    // Growing now: the size it is being grown to.
    let d = decide_at(&p, 30 * GI, 29 * GI, &[], noon);
    let (to, kind) = d.grow_to().expect("an emergency grow");
    assert_eq!(
        (kind, d.effective_bytes),
        (GrowKind::EmergencyGrow, Some(to))
    );
    // A group whose largest member is 40Gi: a new replica matches it (within the limit).
    let claim = ClaimState {
        request_bytes: 30 * GI,
        capacity_bytes: 30 * GI,
        resize: ResizeState::Idle,
    };
    let d = decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(&p),
        measurement: Measurement {
            capacity_bytes: 30 * GI,
            used_bytes: 10 * GI,
            available_bytes: 20 * GI,
            ..Default::default()
        },
        claim: &claim,
        history: &[],
        wal: None,
        facts: VolumeFacts {
            expandable: true,
            group_size: Some(400 * GI),
            ..VolumeFacts::default()
        },
        now: noon,
        fill_rate: None,
    });
    assert_eq!(d.effective_bytes, Some(100 * GI));
    assert_eq!(d.blocked_reason(), Some(BlockReason::OutsideWindow));
}

/// headroom never shrinks (NeedsShrink is a report); docs/policy.md says how to get space back, with the
/// auto-resize RFC's three ways.
#[test]
fn readme_says_how_to_get_space_back() {
    let readme = include_str!("../../docs/policy.md");
    let start = readme
        .find("## Getting space back: headroom never shrinks")
        .expect("section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let section = section.split_whitespace().collect::<Vec<_>>().join(" ");
    for needle in [
        "cannot shrink a PersistentVolumeClaim",
        "Restore a backup into a smaller cluster",
        "`pg_dump` / `pg_restore`",
        "Logical replication",
        "`NeedsShrink`",
    ] {
        assert!(
            section.contains(needle),
            "README's section lacks {needle:?}"
        );
    }
}
