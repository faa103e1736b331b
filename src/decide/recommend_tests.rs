use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::decide::{BlockReason, State, Verdict};
use crate::policy::{Enforcement, Policy};
use crate::quantity::GI;

fn t0() -> Timestamp {
    "2026-03-01T12:00:00Z".parse().expect("ts")
}

fn policy(enforcement: Enforcement) -> Policy {
    Policy {
        enabled: true,
        enforcement,
        ..Policy::with_limit(100 * GI)
    }
}

fn grow(to_gi: u64) -> Decision {
    Decision::bare(Verdict::Grow {
        to: to_gi * GI,
        kind: GrowKind::Grow,
    })
}

/// 10Gi at `used` percent.
fn at(used: u64) -> Measurement {
    Measurement {
        capacity_bytes: 10 * GI,
        used_bytes: used * GI / 10,
        available_bytes: (100 - used) * GI / 10,
        ..Measurement::default()
    }
}

fn claim<'a>(rec: Option<&'a Recommendation>, approve: Option<&'a str>) -> Claimed<'a> {
    Claimed {
        uid: "uid-1",
        request_bytes: 10 * GI,
        approve,
        recommendation: rec,
        approval: None,
        history: &[],
    }
}

/// The recommendation a `recommend` claim gets for a grow to 12Gi at `now`.
fn recommended(now: Timestamp) -> Recommendation {
    let e = gate(
        &policy(Enforcement::Recommend),
        &grow(12),
        Some(&at(85)),
        &claim(None, None),
        now,
    )
    .expect("gated");
    e.recommendation.expect("a recommendation")
}

#[test]
fn act_is_not_gated() {
    let p = policy(Enforcement::Act);
    assert_eq!(
        gate(&p, &grow(12), None, &claim(None, Some("x")), t0()),
        None
    );
}

#[test]
fn recommend_holds_the_grow_and_keeps_its_recommendation_until_stale() {
    let rec = recommended(t0());
    assert_eq!((rec.from_bytes, rec.to_bytes), (10 * GI, 12 * GI));
    assert_eq!(rec.stale_at, t0() + STALE_AFTER);
    assert_eq!(rec.used_percent, Some(85));
    assert_eq!(rec.id.len(), 12);
    let p = policy(Enforcement::Recommend);
    // A later scan deciding a slightly different size keeps the recommendation and its id.
    let later = t0() + SignedDuration::from_mins(5);
    let e = gate(&p, &grow(13), None, &claim(Some(&rec), None), later).expect("gated");
    assert!(e.hold);
    assert_eq!(e.recommendation.as_ref(), Some(&rec));
    // Stale: made again, with another id.
    let e = gate(&p, &grow(12), None, &claim(Some(&rec), None), rec.stale_at).expect("gated");
    let again = e.recommendation.expect("a recommendation");
    assert_ne!(again.id, rec.id);
    assert_eq!(again.made_at, rec.stale_at);
    // Nothing to grow: nothing held, nothing recommended.
    let balanced = Decision::bare(Verdict::NoAction {
        state: State::Balanced,
    });
    let e = gate(&p, &balanced, None, &claim(Some(&rec), None), later).expect("gated");
    assert_eq!((e.hold, e.recommendation), (false, None));
}

#[test]
fn recommend_never_executes_an_approval() {
    let rec = recommended(t0());
    let p = policy(Enforcement::Recommend);
    let e = gate(&p, &grow(12), None, &claim(Some(&rec), Some(&rec.id)), t0()).expect("gated");
    assert!(e.hold);
    assert_eq!((e.execute, e.approval), (None, None));
}

#[test]
fn a_valid_approval_executes_exactly_its_recommendation() {
    let rec = recommended(t0());
    let p = policy(Enforcement::Approve);
    let now = t0() + SignedDuration::from_mins(1);
    // The engine would now grow further: the approved size is what is made.
    let e = gate(&p, &grow(14), None, &claim(Some(&rec), Some(&rec.id)), now).expect("gated");
    assert_eq!(e.execute.as_ref(), Some(&rec));
    assert!(!e.hold);
    let note = e.approval.expect("noted");
    assert_eq!(
        (note.id.as_str(), note.executed, note.at),
        (rec.id.as_str(), true, now)
    );
}

#[test]
fn an_approval_executed_before_is_not_executed_again() {
    let rec = recommended(t0());
    let p = policy(Enforcement::Approve);
    let mut done = Action::new(t0(), GrowKind::Grow, 10 * GI, 12 * GI);
    done.approval = Some(crate::decide::Approval {
        id: rec.id.clone(),
        at: t0(),
        by: None,
    });
    let history = [done];
    let c = Claimed {
        history: &history,
        ..claim(Some(&rec), Some(&rec.id))
    };
    let e = gate(&p, &grow(12), None, &c, t0()).expect("gated");
    assert_eq!(e.execute, None);
    assert!(e.hold, "the grow waits for a new approval");
}

#[test]
fn stale_or_invalid_approvals_are_refused_with_the_reason_and_withdraw_the_recommendation() {
    let rec = recommended(t0());
    let p = policy(Enforcement::Approve);
    let refused = |p: &Policy, d: &Decision, c: &Claimed, now: Timestamp| {
        let e = gate(p, d, None, c, now).expect("gated");
        assert_eq!(e.execute, None);
        let note = e.approval.clone().expect("noted");
        assert!(!note.executed);
        (note.refused.expect("a reason"), e)
    };
    let (why, e) = refused(
        &p,
        &grow(12),
        &claim(Some(&rec), Some(&rec.id)),
        rec.stale_at,
    );
    assert!(why.starts_with("stale since"), "{why}");
    assert_ne!(e.recommendation.map(|r| r.id), Some(rec.id.clone()));

    let changed = Claimed {
        request_bytes: 11 * GI,
        ..claim(Some(&rec), Some(&rec.id))
    };
    let (why, _) = refused(&p, &grow(13), &changed, t0());
    assert!(why.contains("the claim changed since"), "{why}");

    let lowered = Policy {
        limit: 11 * GI,
        ..p.clone()
    };
    let (why, _) = refused(&lowered, &grow(11), &claim(Some(&rec), Some(&rec.id)), t0());
    assert!(why.contains("above the limit of 11Gi"), "{why}");

    let blocked = Decision::bare(Verdict::Blocked {
        reason: BlockReason::BudgetExhausted,
    });
    let (why, e) = refused(&p, &blocked, &claim(Some(&rec), Some(&rec.id)), t0());
    assert!(why.contains("budget_exhausted"), "{why}");
    assert_eq!(e.recommendation, None);

    let (why, e) = refused(&p, &grow(12), &claim(Some(&rec), Some("nonsense")), t0());
    assert!(
        why.contains("not the claim's current recommendation"),
        "{why}"
    );
    // Another id refused: the current recommendation stands.
    assert_eq!(e.recommendation.as_ref(), Some(&rec));
}

#[test]
fn a_refused_approval_is_handled_once() {
    let rec = recommended(t0());
    let p = policy(Enforcement::Approve);
    let note = ApprovalNote {
        id: "nonsense".into(),
        executed: false,
        refused: Some("not the claim's current recommendation".into()),
        at: t0(),
    };
    let c = Claimed {
        approval: Some(&note),
        ..claim(Some(&rec), Some("nonsense"))
    };
    let later = t0() + SignedDuration::from_mins(1);
    let e = gate(&p, &grow(12), None, &c, later).expect("gated");
    assert_eq!(e.approval.as_ref(), Some(&note), "not judged again");
    // A long text is judged by its first 12 characters, as its note keeps it.
    let long = "x".repeat(4096);
    let e = gate(&p, &grow(12), None, &claim(Some(&rec), Some(&long)), t0()).expect("gated");
    assert_eq!(e.approval.expect("noted").id, "x".repeat(12));
}

#[test]
fn a_member_following_its_logical_volumes_grow_needs_no_approval_of_its_own() {
    let follow = |joins: Option<&str>| Decision {
        joins: joins.map(|j| crate::decide::ActionId::new(j, t0())),
        ..Decision::bare(Verdict::Grow {
            to: 12 * GI,
            kind: GrowKind::GroupGrow,
        })
    };
    let p = policy(Enforcement::Approve);
    let e = gate(&p, &follow(Some("peer")), None, &claim(None, None), t0()).expect("gated");
    assert!(!e.hold);
    // A raise that is no grow already made (a new member at a size set by hand) waits.
    let e = gate(&p, &follow(None), None, &claim(None, None), t0()).expect("gated");
    assert!(e.hold);
    // recommend makes nothing, following or not.
    let r = policy(Enforcement::Recommend);
    let e = gate(&r, &follow(Some("peer")), None, &claim(None, None), t0()).expect("gated");
    assert!(e.hold);
}

#[test]
fn approve_grows_past_the_emergency_line_only_when_the_policy_lets_it() {
    let p = policy(Enforcement::Approve);
    // 99 % used is past the default 95 % line.
    let e = gate(&p, &grow(12), Some(&at(99)), &claim(None, None), t0()).expect("gated");
    assert!(!e.hold);
    assert_eq!(e.recommendation, None);
    let mut off = p.clone();
    off.emergency_grow.enabled = false;
    let e = gate(&off, &grow(12), Some(&at(99)), &claim(None, None), t0()).expect("gated");
    assert!(e.hold);
    // recommend never grows, emergency or not.
    let r = policy(Enforcement::Recommend);
    let e = gate(&r, &grow(12), Some(&at(99)), &claim(None, None), t0()).expect("gated");
    assert!(e.hold);
}
