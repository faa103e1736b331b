//! One test per rule, on hand-written cases whose answers were worked out by hand.

use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::policy::{MaintenanceWindow, Mode, Policy, Step};
use crate::quantity::GI;

pub(crate) fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

/// A volume of `size` with `used` bytes used and no filesystem overhead.
pub(crate) fn meas(size: u64, used: u64) -> Measurement {
    Measurement {
        capacity_bytes: size,
        used_bytes: used,
        available_bytes: size - used,
        inodes_total: 1_000_000,
        inodes_used: 1_000,
    }
}

pub(crate) fn claim(size: u64) -> ClaimState {
    ClaimState {
        request_bytes: size,
        capacity_bytes: size,
        resize: ResizeState::Idle,
    }
}

pub(crate) fn facts() -> VolumeFacts {
    VolumeFacts {
        expandable: true,
        ..VolumeFacts::default()
    }
}

fn enabled(limit: u64) -> Policy {
    Policy {
        enabled: true,
        ..Policy::with_limit(limit)
    }
}

fn convergent(limit: u64) -> Policy {
    Policy {
        mode: Mode::Convergent,
        maintenance_window: Some(MaintenanceWindow::new("0 3 * * 0", "4h", "UTC").expect("window")),
        ..enabled(limit)
    }
}

struct Case<'a> {
    policy: &'a Policy,
    m: Measurement,
    claim: ClaimState,
    history: Vec<Action>,
    wal: Option<WalHealth>,
    facts: VolumeFacts,
    now: Timestamp,
}

impl<'a> Case<'a> {
    fn new(policy: &'a Policy, size: u64, used: u64) -> Self {
        Self {
            policy,
            m: meas(size, used),
            claim: claim(size),
            history: Vec::new(),
            wal: None,
            facts: facts(),
            // A Sunday, 04:00 UTC: inside the test window.
            now: ts("2026-01-04T04:00:00Z"),
        }
    }
    fn run(&self) -> Decision {
        decide(&Inputs {
            logical: None,
            policy: PolicyInput::Valid(self.policy),
            measurement: self.m,
            claim: &self.claim,
            history: &self.history,
            wal: self.wal.as_ref(),
            facts: self.facts,
            now: self.now,
            fill_rate: None,
        })
    }
}

fn action(at: Timestamp, kind: GrowKind) -> Action {
    Action {
        node: "n1".into(),
        ..Action::new(at, kind, 10 * GI, 12 * GI)
    }
}

fn healthy_wal() -> WalHealth {
    WalHealth {
        archive_configured: Some(true),
        archive_healthy: Some(true),
        pending_files: Some(0),
        oldest_pending_seconds: None,
        inactive_slots: Some(Vec::new()),
        ..WalHealth::default()
    }
}

#[test]
fn threshold_grows_by_percent_step_clamped_and_rounded() {
    let p = enabled(100 * GI);
    // 8.5Gi of 10Gi used = 85% >= 80%: 20% of 10Gi = 2Gi -> 12Gi.
    let d = Case::new(&p, 10 * GI, 85 * GI / 10).run();
    assert_eq!(
        d.verdict,
        Verdict::Grow {
            to: 12 * GI,
            kind: GrowKind::Grow
        }
    );
    // 3Gi volume: 20% = 0.6Gi, clamped up to minStep 1Gi -> 4Gi.
    let d = Case::new(&p, 3 * GI, 29 * GI / 10).run();
    assert_eq!(d.grow_to(), Some((4 * GI, GrowKind::Grow)));
    // Below the threshold: nothing.
    let d = Case::new(&p, 10 * GI, 7 * GI).run();
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
}

#[test]
fn threshold_percent_step_rounds_up_to_whole_gi_and_respects_max_step() {
    let p = Policy {
        max_step: 3 * GI,
        ..enabled(1000 * GI)
    };
    // 20% of 50Gi = 10Gi, clamped to maxStep 3Gi.
    let d = Case::new(&p, 50 * GI, 45 * GI).run();
    assert_eq!(d.grow_to(), Some((53 * GI, GrowKind::Grow)));
    // 20% of 7Gi = 1.4Gi -> 8.4Gi rounds up to 9Gi.
    let p = enabled(100 * GI);
    let d = Case::new(&p, 7 * GI, 69 * GI / 10).run();
    assert_eq!(d.grow_to(), Some((9 * GI, GrowKind::Grow)));
}

#[test]
fn threshold_triggers_on_free_bytes_and_inodes() {
    let p = Policy {
        min_available: crate::policy::MinAvailable::Bytes(5 * GI),
        step: Step::Bytes(10 * GI),
        ..enabled(100 * GI)
    };
    // 50% used but only 4Gi free of 8Gi... 4 < 5.
    let d = Case::new(&p, 8 * GI, 4 * GI).run();
    assert_eq!(d.grow_to(), Some((18 * GI, GrowKind::Grow)));
    let mut c = Case::new(&p, 100 * GI / 2, GI);
    c.m.inodes_used = 950_000;
    assert_eq!(c.run().grow_to(), Some((60 * GI, GrowKind::Grow)));
}

#[test]
fn percent_used_is_df_style() {
    let p = enabled(100 * GI);
    // 10Gi filesystem, 7.9Gi used, 1.5Gi available (0.6Gi reserved for root): 7.9/9.4 = 84%.
    let mut c = Case::new(&p, 10 * GI, 79 * GI / 10);
    c.m.available_bytes = 15 * GI / 10;
    assert!(c.run().grow_to().is_some());
}

#[test]
fn threshold_caps_at_limit_then_reports_at_limit() {
    let p = enabled(11 * GI);
    let d = Case::new(&p, 10 * GI, 9 * GI).run();
    assert_eq!(d.grow_to(), Some((11 * GI, GrowKind::Grow)));
    let d = Case::new(&p, 11 * GI, 10 * GI).run();
    assert_eq!(d.blocked_reason(), Some(BlockReason::AtLimit));
}

#[test]
fn budget_is_rolling_24h_from_history() {
    let p = enabled(100 * GI);
    let mut c = Case::new(&p, 10 * GI, 9 * GI);
    c.history = vec![
        action(c.now - SignedDuration::from_hours(23), GrowKind::Grow),
        action(c.now - SignedDuration::from_hours(2), GrowKind::Grow),
        action(c.now - SignedDuration::from_mins(1), GrowKind::Grow),
    ];
    let d = c.run();
    assert_eq!(d.blocked_reason(), Some(BlockReason::BudgetExhausted));
    assert_eq!(d.budget_left, 0);
    assert_eq!(d.next_slot, Some(c.now + SignedDuration::from_hours(1)));
    // An hour later the oldest action has left the window.
    c.now += SignedDuration::from_hours(1);
    assert!(c.run().grow_to().is_some());
}

#[test]
fn gates_that_apply_whatever_the_numbers() {
    let p = enabled(100 * GI);
    let mut c = Case::new(&p, 10 * GI, GI);
    c.facts.shared = true;
    assert_eq!(
        c.run().blocked_reason(),
        Some(BlockReason::SharedFilesystem)
    );
    c.facts.shared = false;
    c.facts.block_mode = true;
    assert_eq!(c.run().blocked_reason(), Some(BlockReason::BlockMode));
    c.facts.block_mode = false;
    c.facts.expandable = false;
    assert_eq!(c.run().blocked_reason(), Some(BlockReason::NotExpandable));
    c.facts.expandable = true;
    c.claim.resize = ResizeState::Failed {
        cause: FailureCause::Stuck,
        detail: "ControllerResizeError".into(),
    };
    assert_eq!(c.run().blocked_reason(), Some(BlockReason::ResizeFailed));
    // A resize only a restart or a detach can finish has a reason of its own.
    for (cause, reason) in [
        (FailureCause::NeedsRemount, BlockReason::AwaitingRemount),
        (FailureCause::NeedsDetach, BlockReason::AwaitingDetach),
    ] {
        c.claim.resize = ResizeState::Failed {
            cause,
            detail: String::new(),
        };
        assert_eq!(c.run().blocked_reason(), Some(reason), "{cause:?}");
    }
    let off = Policy::with_limit(100 * GI);
    assert_eq!(
        Case::new(&off, 10 * GI, 9 * GI).run().blocked_reason(),
        Some(BlockReason::Disabled)
    );
    let d = decide(&Inputs {
        logical: None,
        policy: PolicyInput::Invalid,
        measurement: meas(GI, GI / 2),
        claim: &claim(GI),
        history: &[],
        wal: None,
        facts: facts(),
        now: ts("2026-01-01T00:00:00Z"),
        fill_rate: None,
    });
    assert_eq!(d.blocked_reason(), Some(BlockReason::InvalidPolicy));
}

#[test]
fn resize_in_flight_blocks_growth_and_reports_resizing() {
    let p = enabled(100 * GI);
    let mut c = Case::new(&p, 10 * GI, 9 * GI);
    c.claim.request_bytes = 12 * GI;
    c.claim.resize = ResizeState::InProgress { since: None };
    assert_eq!(
        c.run().blocked_reason(),
        Some(BlockReason::ResizeInProgress)
    );
    c.m = meas(10 * GI, GI);
    assert_eq!(
        c.run().verdict,
        Verdict::NoAction {
            state: State::Resizing
        }
    );
}

#[test]
fn wal_gates_on_wal_volume() {
    let p = enabled(100 * GI);
    let mut c = Case::new(&p, 10 * GI, 9 * GI);
    c.facts.role = VolumeRole::Wal;
    c.wal = Some(healthy_wal());
    assert!(c.run().grow_to().is_some());
    c.wal = Some(WalHealth {
        archive_healthy: Some(false),
        ..healthy_wal()
    });
    assert_eq!(
        c.run().blocked_reason(),
        Some(BlockReason::WalArchiveUnhealthy)
    );
    c.wal = Some(WalHealth {
        pending_files: Some(101),
        archive_healthy: Some(false),
        ..healthy_wal()
    });
    assert_eq!(c.run().blocked_reason(), Some(BlockReason::WalPendingFiles));
    let slot = SlotRetention {
        name: "stuck".into(),
        retained_bytes: 11 * GI,
        activity: SlotActivity::Inactive,
        restart_lsn: None,
    };
    c.wal = Some(WalHealth {
        inactive_slots: Some(vec![slot.clone()]),
        ..healthy_wal()
    });
    // maxSlotRetentionBytes is unset by default: off, as in the RFC.
    assert!(c.run().grow_to().is_some());
    let mut limited = p.clone();
    limited.wal_safety.max_slot_retention_bytes = Some(10 * GI);
    let mut c2 = Case::new(&limited, 10 * GI, 9 * GI);
    c2.facts.role = VolumeRole::Wal;
    c2.wal = c.wal.clone();
    let d = c2.run();
    assert_eq!(d.blocked_reason(), Some(BlockReason::WalSlotRetention));
    assert!(
        d.notes
            .iter()
            .any(|n| n.to_string().contains("stuck") && n.to_string().contains("11.0Gi")),
        "{:?}",
        d.notes
    );
    // 0 is off too.
    limited.wal_safety.max_slot_retention_bytes = Some(0);
    let mut c3 = Case::new(&limited, 10 * GI, 9 * GI);
    c3.facts.role = VolumeRole::Wal;
    c3.wal = c.wal.clone();
    assert!(c3.run().grow_to().is_some());
    // Not configured: does not block, says so.
    c.wal = Some(WalHealth {
        archive_configured: Some(false),
        archive_healthy: Some(false),
        ..healthy_wal()
    });
    let d = c.run();
    assert!(d.grow_to().is_some());
    assert!(
        d.notes
            .iter()
            .any(|n| n.to_string().contains("not configured"))
    );
    // requireArchiveHealthy: false lets an unhealthy archive through.
    let lax = Policy {
        wal_safety: crate::policy::WalSafety {
            require_archive_healthy: false,
            ..p.wal_safety.clone()
        },
        ..p.clone()
    };
    let mut c2 = Case::new(&lax, 10 * GI, 9 * GI);
    c2.facts.role = VolumeRole::Wal;
    c2.wal = Some(WalHealth {
        archive_healthy: Some(false),
        ..healthy_wal()
    });
    assert!(c2.run().grow_to().is_some());
}

#[test]
fn wal_unknown_fails_open_with_a_note() {
    let p = enabled(100 * GI);
    let mut c = Case::new(&p, 10 * GI, 9 * GI);
    c.facts.role = VolumeRole::Wal;
    let d = c.run();
    assert!(d.grow_to().is_some());
    assert!(d.notes.iter().any(|n| n.to_string().contains("fail open")));
}

#[test]
fn single_volume_data_needs_acknowledgement() {
    let p = enabled(100 * GI);
    let mut c = Case::new(&p, 10 * GI, 9 * GI);
    c.facts.role = VolumeRole::Data;
    c.facts.wal_on_data = true;
    c.wal = Some(healthy_wal());
    assert_eq!(
        c.run().blocked_reason(),
        Some(BlockReason::WalRiskNotAcknowledged)
    );
    let mut acked = p.clone();
    acked.wal_safety.acknowledge_wal_risk = true;
    c.policy = &acked;
    assert!(c.run().grow_to().is_some());
    // A data volume whose WAL lives elsewhere is not gated by WAL at all.
    let q = enabled(100 * GI);
    let mut c = Case::new(&q, 10 * GI, 9 * GI);
    c.facts.role = VolumeRole::Data;
    c.wal = Some(WalHealth {
        archive_healthy: Some(false),
        ..healthy_wal()
    });
    assert!(c.run().grow_to().is_some());
}

#[test]
fn convergent_grows_to_target_inside_window_only() {
    let p = convergent(100 * GI);
    // 9Gi used of 10Gi (90%, under the 95% critical line): target 9/0.8 = 11.25 -> 12Gi.
    let mut c = Case::new(&p, 10 * GI, 9 * GI);
    let d = c.run();
    assert_eq!(
        d.verdict,
        Verdict::Grow {
            to: 12 * GI,
            kind: GrowKind::ScheduledGrow
        }
    );
    assert_eq!(d.target_bytes, Some(12 * GI));
    // Inside the window, nextWindow names that window's start: the same value all window long.
    let start = ts("2026-01-04T03:00:00Z");
    assert!(
        c.now >= start && c.now < ts("2026-01-04T07:00:00Z"),
        "{}",
        c.now
    );
    assert_eq!(d.next_window, Some(start));
    c.now = ts("2026-01-04T06:59:00Z");
    assert_eq!(c.run().next_window, Some(start));
    c.now = ts("2026-01-05T04:00:00Z"); // Monday
    let d = c.run();
    assert_eq!(d.blocked_reason(), Some(BlockReason::OutsideWindow));
    assert_eq!(d.next_window, Some(ts("2026-01-11T03:00:00Z")));
}

#[test]
fn convergent_respects_floor_min_change_and_reports_shrink() {
    let p = Policy {
        request: Some(20 * GI),
        ..convergent(100 * GI)
    };
    // Issue 24 (scheduled growth is capped per action): toward the 20Gi floor by one step,
    // 10 % of 10Gi raised to the 2Gi minimum, instead of straight to 20Gi.
    let d = Case::new(&p, 10 * GI, GI).run();
    assert_eq!(d.grow_to(), Some((12 * GI, GrowKind::ScheduledGrow)));
    assert_eq!(d.target_bytes, Some(20 * GI));
    let p = convergent(1000 * GI);
    // 8.2Gi used of 10Gi wants 10.25Gi: 2.5% more is under the 5% minimum change.
    let d = Case::new(&p, 10 * GI, 82 * GI / 10).run();
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
    // 8.5Gi used wants 10.625Gi (6.25% more): grows, rounded up to 11Gi.
    let d = Case::new(&p, 10 * GI, 85 * GI / 10).run();
    assert_eq!(d.grow_to(), Some((11 * GI, GrowKind::ScheduledGrow)));
    // 100Gi with 80.5Gi used: target 100.6 -> 101Gi, under 5% more: balanced.
    let d = Case::new(&p, 100 * GI, 805 * GI / 10).run();
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
    // 30% used: 70% free > 20 + 20: NeedsShrink (report only).
    let d = Case::new(&p, 10 * GI, 3 * GI).run();
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::NeedsShrink
        }
    );
    // At the limit and wanting more: at_limit.
    let p = convergent(10 * GI);
    assert_eq!(
        Case::new(&p, 10 * GI, 9 * GI).run().blocked_reason(),
        Some(BlockReason::AtLimit)
    );
}

#[test]
fn convergent_cooldown_blocks_planned_not_emergency() {
    let p = convergent(100 * GI);
    let mut c = Case::new(&p, 10 * GI, 9 * GI);
    c.history = vec![action(
        c.now - SignedDuration::from_mins(30),
        GrowKind::ScheduledGrow,
    )];
    assert_eq!(c.run().blocked_reason(), Some(BlockReason::Cooldown));
    c.m = meas(10 * GI, 97 * GI / 10);
    assert_eq!(
        c.run().grow_to().map(|g| g.1),
        Some(GrowKind::EmergencyGrow)
    );
}

#[test]
fn emergency_grows_outside_window_by_enough() {
    let p = convergent(100 * GI);
    let mut c = Case::new(&p, 10 * GI, 97 * GI / 10);
    c.now = ts("2026-01-06T12:00:00Z");
    // Needs > 9.7/0.95 = 10.21Gi and >= 10.7Gi (1Gi free); at least +2Gi -> 12Gi.
    assert_eq!(
        c.run().verdict,
        Verdict::Grow {
            to: 12 * GI,
            kind: GrowKind::EmergencyGrow
        }
    );
    // 200Gi at 96%: 10% = 20Gi is the larger minimum -> 220Gi.
    let c = Case {
        now: ts("2026-01-06T12:00:00Z"),
        ..Case::new(&p, 200 * GI, 192 * GI)
    };
    let p2 = convergent(1000 * GI);
    let c2 = Case { policy: &p2, ..c };
    assert_eq!(
        c2.run().grow_to(),
        Some((220 * GI, GrowKind::EmergencyGrow))
    );
}

#[test]
fn emergency_stops_at_limit_unless_allowed_to_exceed() {
    let mut p = convergent(10 * GI);
    let c = Case::new(&p, 10 * GI, 98 * GI / 10);
    assert_eq!(c.run().blocked_reason(), Some(BlockReason::AtLimit));
    p.emergency_grow.exceed_limit_on_emergency = true;
    let c = Case::new(&p, 10 * GI, 98 * GI / 10);
    assert_eq!(c.run().grow_to(), Some((12 * GI, GrowKind::EmergencyGrow)));
}

#[test]
fn planned_actions_leave_the_emergency_reserve() {
    let p = convergent(100 * GI);
    let mut c = Case::new(&p, 10 * GI, 9 * GI);
    c.history = vec![
        action(
            c.now - SignedDuration::from_hours(5),
            GrowKind::ScheduledGrow,
        ),
        action(
            c.now - SignedDuration::from_hours(3),
            GrowKind::ScheduledGrow,
        ),
    ];
    // Issue 24 (the RFC's budgets): emergencyGrow.maxActionsPerDay 4 with 1 reserved leaves
    // planned growth 3 a day, where one budget of 3 left it 2; the third still grows.
    assert_eq!(
        c.run().grow_to().map(|g| g.1),
        Some(GrowKind::ScheduledGrow)
    );
    c.history.push(action(
        c.now - SignedDuration::from_hours(2),
        GrowKind::ScheduledGrow,
    ));
    // 3 of 4 used, 1 reserved: planned growth is out of budget...
    let d = c.run();
    assert_eq!(d.blocked_reason(), Some(BlockReason::BudgetExhausted));
    assert_eq!(
        (
            d.budget.actions_last_24h,
            d.budget.available_for_planned,
            d.budget.available_for_emergency,
            d.budget.reserved_for_emergency
        ),
        (3, 0, 1, 1)
    );
    assert_eq!(
        d.budget.resets_at,
        Some(c.now + SignedDuration::from_hours(19))
    );
    // ...an emergency may take the reserved slot.
    c.m = meas(10 * GI, 97 * GI / 10);
    assert_eq!(
        c.run().grow_to().map(|g| g.1),
        Some(GrowKind::EmergencyGrow)
    );
    // With it spent, the emergency budget is exhausted too.
    c.history.push(action(
        c.now - SignedDuration::from_mins(90),
        GrowKind::EmergencyGrow,
    ));
    let d = c.run();
    assert_eq!(d.blocked_reason(), Some(BlockReason::BudgetExhausted));
    assert!(d.emergency);
}

#[test]
fn draining_pauses_planned_growth_but_not_emergencies() {
    let p = enabled(100 * GI);
    let mut c = Case::new(&p, 10 * GI, 85 * GI / 10);
    c.facts.node_draining = true;
    assert_eq!(c.run().blocked_reason(), Some(BlockReason::NodeDraining));
    c.m = meas(10 * GI, 97 * GI / 10);
    assert!(c.run().grow_to().is_some());
    let q = convergent(100 * GI);
    let mut c = Case::new(&q, 10 * GI, 9 * GI);
    c.facts.node_draining = true;
    assert_eq!(c.run().blocked_reason(), Some(BlockReason::NodeDraining));
}

#[test]
fn convergent_without_window_only_reports_need() {
    let p = Policy {
        maintenance_window: None,
        ..convergent(100 * GI)
    };
    let d = Case::new(&p, 10 * GI, 9 * GI).run();
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::NeedsGrow
        }
    );
}

#[test]
fn filesystem_overhead_is_counted_in_convergent_targets() {
    let p = convergent(1000 * GI);
    // A 100Gi claim whose filesystem offers 95Gi (overhead); 80Gi used = 84% used.
    let mut c = Case::new(&p, 100 * GI, 80 * GI);
    c.m.available_bytes = 15 * GI;
    // Target keeps 20% of the usable space free: 80 / (0.95 * 0.8) = 105.3 -> 106Gi.
    assert_eq!(c.run().grow_to(), Some((106 * GI, GrowKind::ScheduledGrow)));
}

#[test]
fn small_volumes_round_to_mebibytes() {
    let p = Policy {
        min_step: 0,
        ..enabled(GI)
    };
    let mib = 1 << 20;
    let d = Case::new(&p, 100 * mib, 90 * mib).run();
    assert_eq!(d.grow_to(), Some((120 * mib, GrowKind::Grow)));
}

#[test]
fn new_group_member_joins_its_peers_at_once() {
    let p = enabled(100 * GI);
    let mut c = Case::new(&p, 10 * GI, GI);
    c.facts.group_size = Some(40 * GI);
    assert_eq!(
        c.run().verdict,
        Verdict::Grow {
            to: 40 * GI,
            kind: GrowKind::GroupGrow
        }
    );
    // Capped at the limit, never past it.
    let small = enabled(30 * GI);
    let mut c2 = Case::new(&small, 10 * GI, GI);
    c2.facts.group_size = Some(40 * GI);
    assert_eq!(c2.run().grow_to(), Some((30 * GI, GrowKind::GroupGrow)));
    // At the group's size: nothing to do; a member's own larger need wins.
    c.claim = claim(40 * GI);
    c.m = meas(40 * GI, GI);
    assert_eq!(
        c.run().verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
    c.claim = claim(39 * GI);
    c.m = meas(39 * GI, 38 * GI);
    assert_eq!(c.run().grow_to(), Some((47 * GI, GrowKind::Grow)));
    // Counted against the budget like any planned action, and paused by a drain.
    let mut c3 = Case::new(&p, 10 * GI, GI);
    c3.facts.group_size = Some(40 * GI);
    c3.facts.node_draining = true;
    assert_eq!(c3.run().blocked_reason(), Some(BlockReason::NodeDraining));
    c3.facts.node_draining = false;
    c3.history = (1..=3)
        .map(|h| action(c3.now - SignedDuration::from_hours(h), GrowKind::Grow))
        .collect();
    assert_eq!(
        c3.run().blocked_reason(),
        Some(BlockReason::BudgetExhausted)
    );
}

/// Issue 24: a floor larger than the whole claim would grow it empty, action after action (the
/// shipped ConfigMap's old `minAvailable: 5Gi` on a 1Gi claim went 1 -> 2 -> 3 -> 4Gi at 0 %
/// used). It is not applied at that size, and the decision says so.
#[test]
fn a_floor_the_claim_cannot_meet_does_not_grow_it_empty_and_is_said() {
    let p = Policy {
        min_available: crate::policy::MinAvailable::Bytes(5 * GI),
        ..enabled(100 * GI)
    };
    let d = Case::new(&p, GI, 0).run();
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
    assert_eq!(
        d.fallback,
        Some(crate::policy::Fallback::MinAvailableUnreachable {
            min_available: 5 * GI,
            usable: GI,
            usage_threshold: 80
        })
    );
    // The percent line still grows it when it fills.
    let d = Case::new(&p, GI, GI * 81 / 100).run();
    assert_eq!(d.grow_to(), Some((2 * GI, GrowKind::Grow)));
    // A claim larger than the floor: the floor applies again, nothing to say.
    let d = Case::new(&p, 6 * GI, 2 * GI).run();
    assert_eq!((d.grow_to().is_some(), d.fallback), (true, None));
}

/// Issue 36: a size floor written on the claim grows an empty 1Gi claim by its step, one action
/// at a time, until the floor is met (as pvc-autoresizer does), spending its daily budget and
/// stopping at its limit.
#[test]
fn a_claims_own_floor_grows_it_step_by_step_within_budget_and_limit() {
    let p = Policy {
        min_available: crate::policy::MinAvailable::Bytes(5 * GI),
        floor_on_claim: true,
        ..enabled(100 * GI)
    };
    let start = ts("2026-01-04T04:00:00Z");
    let (mut size, mut history, mut sizes) = (GI, Vec::new(), Vec::new());
    // An hour between checks: the budget (3 a day) holds the 4th grow until a day has passed.
    for hour in 0..48 {
        let now = start + SignedDuration::from_hours(hour);
        // Nearly empty: a filesystem's own metadata.
        let mut c = Case::new(&p, size, GI / 100);
        (c.history, c.now) = (history.clone(), now);
        let d = c.run();
        assert_eq!(d.fallback, None, "{d:?}");
        if let Some((to, kind)) = d.grow_to() {
            assert_eq!(kind, GrowKind::Grow);
            history.push(Action::new(now, kind, size, to));
            sizes.push((hour, to / GI));
            size = to;
        }
    }
    // 1Gi at a time (20 % raised to minStep), 3 in the first 24 h, met at 6Gi (a 5Gi volume
    // holding anything has under 5Gi free): what `validate --size 1Gi` counts.
    assert_eq!(sizes, [(0, 2), (1, 3), (2, 4), (24, 5), (25, 6)]);
    // The limit stops it.
    let capped = Policy {
        limit: 3 * GI,
        ..p.clone()
    };
    let d = Case::new(&capped, 3 * GI, 0).run();
    assert_eq!(d.grow_to(), None);
    assert_eq!(
        d.verdict,
        Verdict::Blocked {
            reason: BlockReason::AtLimit
        }
    );
}
