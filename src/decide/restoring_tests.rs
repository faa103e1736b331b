//! An instance restoring a base backup (issue 40, item 4): its fill rate is the copy's, so it is
//! not extrapolated; it is sized to its group's size (its source's), and outside a group grows
//! by its ordinary step.

use jiff::SignedDuration;

use super::tests::{claim, facts, meas, ts};
use super::*;
use crate::policy::{MaintenanceWindow, Policy};
use crate::quantity::{GI, MI};

/// Predictive on, EBS's six hours between grows: every way a fill rate widens a step.
fn policy() -> Policy {
    let mut p = Policy::with_limit(1000 * GI);
    p.enabled = true;
    p.predictive.enabled = true;
    p.modification_interval = Some(SignedDuration::from_hours(6));
    p
}

/// A copy filling at 200 MB/s.
const COPY: FillRate = FillRate {
    bytes_per_second: 200e6,
    resize_lead: None,
};

fn run(p: &Policy, size: u64, used: u64, f: VolumeFacts) -> Decision {
    run_at(p, size, used, f, Some(COPY))
}

fn run_at(p: &Policy, size: u64, used: u64, f: VolumeFacts, rate: Option<FillRate>) -> Decision {
    decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(p),
        measurement: meas(size, used),
        claim: &claim(size),
        history: &[],
        wal: None,
        facts: f,
        // A Tuesday noon: outside a Sunday window.
        now: ts("2026-01-06T12:00:00Z"),
        fill_rate: rate,
    })
}

fn restoring(group_size: Option<u64>) -> VolumeFacts {
    VolumeFacts {
        restoring: true,
        group_size,
        ..facts()
    }
}

#[test]
fn a_restore_outside_a_group_grows_by_its_step_not_its_copy_rate() {
    let p = policy();
    // 70 % of 20Gi at 200 MB/s: the line is 11 s away, inside the lead. Predicted, unless the
    // fill is a copy's.
    let d = run(&p, 20 * GI, 14 * GI, facts());
    assert!(d.predicted && d.grow_to().is_some(), "{d:?}");
    let d = run(&p, 20 * GI, 14 * GI, restoring(None));
    assert!(!d.predicted, "{d:?}");
    assert_eq!(d.grow_to(), None, "{d:?}");
    // Past the line: the rate widens the step to last six hours (to the limit); a restore takes
    // its step alone.
    let widened = run(&p, 20 * GI, 17 * GI, facts())
        .grow_to()
        .expect("grow")
        .0;
    let step = p.grown_by(20 * GI, p.threshold_step(20 * GI));
    assert!(widened > step, "{widened} vs {step}");
    let d = run(&p, 20 * GI, 17 * GI, restoring(None));
    assert_eq!(d.grow_to(), Some((step, GrowKind::Grow)), "{d:?}");
    assert_eq!(d.restoring(), Some(&Note::Restoring { source: None }));
    assert!(
        d.restoring()
            .expect("note")
            .to_string()
            .contains("grown by its step"),
        "{d:?}"
    );
    // Not restoring: no such note.
    assert_eq!(run(&p, 20 * GI, 17 * GI, facts()).restoring(), None);
}

#[test]
fn a_restore_in_a_group_is_sized_to_its_source_at_once() {
    let mut p = policy();
    p.maintenance_window = Some(MaintenanceWindow::new("0 3 * * 0", "4h", "UTC").expect("window"));
    // A new replica of 10Gi, its peers at 40Gi, filling slowly: a member joining them waits
    // for the window...
    let member = VolumeFacts {
        group_size: Some(40 * GI),
        ..facts()
    };
    let d = run_at(&p, 10 * GI, GI, member, None);
    assert_eq!(
        d.blocked_reason(),
        Some(BlockReason::OutsideWindow),
        "{d:?}"
    );
    // ...but a copy of them fills it to their size long before: joined at once.
    let d = run(&p, 10 * GI, GI, restoring(Some(40 * GI)));
    assert_eq!(d.grow_to(), Some((40 * GI, GrowKind::GroupGrow)), "{d:?}");
    assert_eq!(
        d.restoring(),
        Some(&Note::Restoring {
            source: Some(40 * GI)
        })
    );
    assert!(
        d.restoring()
            .expect("note")
            .to_string()
            .contains("sized to its source (40Gi)"),
        "{d:?}"
    );
    // Past its line at the copy's rate: its source's size, not a step past it.
    let d = run(&p, 10 * GI, 9 * GI, restoring(Some(40 * GI)));
    assert_eq!(d.grow_to(), Some((40 * GI, GrowKind::GroupGrow)), "{d:?}");
    // The group's size within the limit.
    p.limit = 30 * GI;
    let d = run(&p, 10 * GI, 9 * GI, restoring(Some(40 * GI)));
    assert_eq!(d.grow_to(), Some((30 * GI, GrowKind::GroupGrow)), "{d:?}");
    // At its source's size already: past its line, its ordinary step.
    p.limit = 1000 * GI;
    let d = run(&p, 40 * GI, 36 * GI, restoring(Some(40 * GI)));
    let step = p.grown_by(40 * GI, p.threshold_step(40 * GI));
    assert_eq!(d.grow_to(), Some((step, GrowKind::Grow)), "{d:?}");
    assert_eq!(d.restoring(), Some(&Note::Restoring { source: None }));
    // A drain still holds it, as any planned growth; an emergency is let through.
    let draining = VolumeFacts {
        node_draining: true,
        ..restoring(Some(40 * GI))
    };
    let d = run(&p, 10 * GI, 5 * GI, draining);
    assert_eq!(d.blocked_reason(), Some(BlockReason::NodeDraining), "{d:?}");
    let d = run(&p, 10 * GI, 10 * GI - 512 * MI, draining);
    assert_eq!(d.grow_to(), Some((40 * GI, GrowKind::GroupGrow)), "{d:?}");
}
