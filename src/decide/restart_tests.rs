use jiff::SignedDuration;

use super::*;
use crate::decide::tests::{claim, facts, meas, ts};
use crate::decide::{BlockReason, ClaimState, GrowKind, Inputs, PolicyInput, VolumeFacts, decide};
use crate::policy::MaintenanceWindow;
use crate::quantity::GI;

const NOW: &str = "2026-03-01T03:30:00Z";

/// Grown 10Gi -> 12Gi at 03:00; the node holds the filesystem resize until a remount.
fn waiting() -> (ClaimState, Vec<Action>) {
    let mut c = claim(12 * GI);
    c.capacity_bytes = 12 * GI;
    c.resize = ResizeState::Failed {
        cause: FailureCause::NeedsRemount,
        detail: String::new(),
    };
    let h = vec![Action::new(
        ts("2026-03-01T03:00:00Z"),
        GrowKind::Grow,
        10 * GI,
        12 * GI,
    )];
    (c, h)
}

fn evicting() -> Policy {
    let mut p = Policy::with_limit(100 * GI);
    p.enabled = true;
    p.offline_expansion = OfflineExpansion::Evict;
    // Daily 03:00-05:00 UTC.
    p.maintenance_window = MaintenanceWindow::new("0 3 * * *", "2h", "UTC").ok();
    p
}

fn run(
    p: &Policy,
    c: &ClaimState,
    h: &[Action],
    f: VolumeFacts,
    now: &str,
    used: u64,
) -> Option<Restart> {
    decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(p),
        measurement: meas(10 * GI, used),
        claim: c,
        history: h,
        wal: None,
        facts: f,
        now: ts(now),
        fill_rate: None,
    })
    .restart
}

#[test]
fn evicts_in_the_window_once_per_resize() {
    let (c, mut h) = waiting();
    let p = evicting();
    assert_eq!(
        run(&p, &c, &h, facts(), NOW, 5 * GI),
        Some(Restart::Evict { switchover: false })
    );
    // The verdict says why nothing grows meanwhile.
    let d = decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(&p),
        measurement: meas(10 * GI, 5 * GI),
        claim: &c,
        history: &h,
        wal: None,
        facts: facts(),
        now: ts(NOW),
        fill_rate: None,
    });
    assert_eq!(d.blocked_reason(), Some(BlockReason::AwaitingRemount));
    // Recorded on the resize's entry: never a second time for it.
    h[0].evicted = Some(ts("2026-03-01T03:10:00Z"));
    assert_eq!(
        run(&p, &c, &h, facts(), NOW, 5 * GI),
        Some(Restart::Evicted {
            at: ts("2026-03-01T03:10:00Z")
        })
    );
}

#[test]
fn off_by_default_and_only_for_a_resize_waiting_for_a_remount() {
    let (c, h) = waiting();
    let mut p = evicting();
    p.offline_expansion = OfflineExpansion::Off;
    assert_eq!(run(&p, &c, &h, facts(), NOW, 5 * GI), Some(Restart::Off));
    let p = evicting();
    for resize in [
        ResizeState::Idle,
        ResizeState::InProgress { since: None },
        ResizeState::Failed {
            cause: FailureCause::NeedsDetach,
            detail: String::new(),
        },
        ResizeState::Failed {
            cause: FailureCause::Stuck,
            detail: String::new(),
        },
    ] {
        let c = ClaimState {
            resize,
            ..c.clone()
        };
        assert_eq!(run(&p, &c, &h, facts(), NOW, 5 * GI), None);
    }
    // A claim that did not opt in is never touched, whatever its policy would say.
    let mut off = evicting();
    off.enabled = false;
    assert_eq!(run(&off, &c, &h, facts(), NOW, 5 * GI), None);
}

#[test]
fn a_resize_headroom_did_not_make_is_not_ours_to_finish() {
    let (c, _) = waiting();
    let p = evicting();
    assert_eq!(
        run(&p, &c, &[], facts(), NOW, 5 * GI),
        Some(Restart::NotOurs)
    );
    // An older entry of ours, for another size, is not this resize's.
    let old = [Action::new(
        ts("2026-02-01T03:00:00Z"),
        GrowKind::Grow,
        8 * GI,
        10 * GI,
    )];
    assert_eq!(
        run(&p, &c, &old, facts(), NOW, 5 * GI),
        Some(Restart::NotOurs)
    );
}

#[test]
fn outside_the_window_only_past_the_emergency_line() {
    let (c, h) = waiting();
    let p = evicting();
    let later = "2026-03-01T06:00:00Z";
    assert_eq!(
        run(&p, &c, &h, facts(), later, 5 * GI),
        Some(Restart::OutsideWindow {
            next: Some(ts("2026-03-02T03:00:00Z"))
        })
    );
    // 96 % used is past the default 95 % line: at once.
    assert_eq!(
        run(&p, &c, &h, facts(), later, 96 * GI / 10),
        Some(Restart::Evict { switchover: false })
    );
    let mut no_emergency = evicting();
    no_emergency.emergency_grow.enabled = false;
    assert!(matches!(
        run(&no_emergency, &c, &h, facts(), later, 96 * GI / 10),
        Some(Restart::OutsideWindow { .. })
    ));
    // No window written: the emergency line alone.
    let mut no_window = evicting();
    no_window.maintenance_window = None;
    assert_eq!(
        run(&no_window, &c, &h, facts(), NOW, 5 * GI),
        Some(Restart::OutsideWindow { next: None })
    );
    assert_eq!(
        run(&no_window, &c, &h, facts(), NOW, 96 * GI / 10),
        Some(Restart::Evict { switchover: false })
    );
}

#[test]
fn never_on_a_draining_node_and_peers_in_order() {
    let (c, h) = waiting();
    let p = evicting();
    let draining = VolumeFacts {
        node_draining: true,
        ..facts()
    };
    // Not even in an emergency: the drain evicts the pod itself.
    assert_eq!(
        run(&p, &c, &h, draining, NOW, 96 * GI / 10),
        Some(Restart::NodeDraining)
    );
    let mut later = facts();
    later.restart.peer_first = true;
    assert_eq!(
        run(&p, &c, &h, later, NOW, 5 * GI),
        Some(Restart::PeerFirst)
    );
}

#[test]
fn a_refusal_backs_off_and_names_the_switchover_for_a_cloudnativepg_primary() {
    let (c, h) = waiting();
    let p = evicting();
    let at = ts("2026-03-01T03:20:00Z");
    let mut f = facts();
    f.restart.refused = Some(Refusal { count: 1, at });
    // One minute after the first refusal, two after the second, at most an hour.
    assert_eq!(
        run(&p, &c, &h, f, "2026-03-01T03:20:30Z", 5 * GI),
        Some(Restart::Refused {
            count: 1,
            retry_at: at + SignedDuration::from_mins(1),
            switchover: false
        })
    );
    assert_eq!(
        run(&p, &c, &h, f, "2026-03-01T03:21:00Z", 5 * GI),
        Some(Restart::Evict { switchover: false })
    );
    f.restart.refused = Some(Refusal { count: 3, at });
    assert!(matches!(
        run(&p, &c, &h, f, "2026-03-01T03:23:59Z", 5 * GI),
        Some(Restart::Refused { .. })
    ));
    assert_eq!(
        Refusal { count: 40, at }.retry_at(),
        at + SignedDuration::from_hours(1)
    );
    f.restart.primary = true;
    f.restart.cnpg = true;
    assert!(matches!(
        run(&p, &c, &h, f, "2026-03-01T03:21:00Z", 5 * GI),
        Some(Restart::Refused {
            switchover: true,
            ..
        })
    ));
}
