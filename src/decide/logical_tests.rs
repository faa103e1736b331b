//! Logical volumes in the engine: distinct actions counted once across members, old entries,
//! a replacement member inheriting the spent budget, a raise that joins the action that set the
//! size, and members whose policies disagree.

use jiff::Timestamp;

use super::*;
use crate::decide::tests::{claim, facts, meas, ts};
use crate::decide::{
    Action, BlockReason, Decision, GrowKind, Inputs, PolicyInput, Verdict, VolumeFacts, decide,
};
use crate::policy::Policy;
use crate::quantity::MI;

const NOW: &str = "2026-01-04T04:00:00Z";

fn policy(max_actions: u32, limit: u64) -> Policy {
    Policy {
        enabled: true,
        max_actions_per_day: max_actions,
        step: crate::policy::Step::Bytes(16 * MI),
        min_step: MI,
        ..Policy::with_limit(limit)
    }
}

fn entry(at: &str, to: u64, id: Option<&str>) -> Action {
    Action {
        node: "n1".into(),
        action: id.map(|i| ActionId(i.into())),
        ..Action::new(ts(at), GrowKind::Grow, 64 * MI, to)
    }
}

fn id(s: &str) -> ActionId {
    ActionId(s.into())
}

/// A member of `size` with `used` bytes used, deciding with the logical volume `l` (or alone).
fn run(p: &Policy, size: u64, used: u64, own: &[Action], l: Option<&Logical>) -> Decision {
    let c = claim(size);
    let f = VolumeFacts {
        group_size: l.map(|l| l.size),
        ..facts()
    };
    decide(&Inputs {
        policy: PolicyInput::Valid(p),
        measurement: meas(size, used),
        claim: &c,
        history: own,
        wal: None,
        facts: f,
        now: ts(NOW),
        fill_rate: None,
        logical: l,
    })
}

#[test]
fn the_members_entries_of_one_action_count_once() {
    // The primary's grow and both replicas' raises: one action. The replica's own earlier grow:
    // another.
    let primary = [entry("2026-01-04T01:00:00Z", 80 * MI, Some("a"))];
    let r1 = [
        entry("2026-01-03T20:00:00Z", 64 * MI, Some("b")),
        entry("2026-01-04T01:00:05Z", 80 * MI, Some("a")),
    ];
    let r2 = [entry("2026-01-04T01:00:09Z", 80 * MI, Some("a"))];
    let peers = [
        Member {
            request: 80 * MI,
            history: &r1,
        },
        Member {
            request: 80 * MI,
            history: &r2,
        },
    ];
    let l = combine(
        Member {
            request: 80 * MI,
            history: &primary,
        },
        &peers,
    );
    assert_eq!(l.actions.len(), 2, "{:?}", l.actions);
    assert_eq!(l.used(ts(NOW)), 2);
    // The action's time is its first entry's: the primary's.
    let a = l
        .actions
        .iter()
        .find(|a| a.action == Some(id("a")))
        .unwrap();
    assert_eq!(a.at, ts("2026-01-04T01:00:00Z"));
    assert_eq!(l.size, 80 * MI);
    assert_eq!(l.source, Some(id("a")));
    assert!(l.joined, "the primary's own entry is of the source action");
    // Outside the 24 h window an action no longer counts.
    assert_eq!(l.used(ts("2026-01-05T00:30:00Z")), 1);
}

#[test]
fn old_entries_without_an_id_parse_and_each_count_as_its_own_action() {
    let old = r#"[{"at":"2026-01-04T01:00:00Z","kind":"Grow","from":1,"to":2},
                  {"at":"2026-01-04T01:00:00Z","kind":"GroupGrow","from":1,"to":2}]"#;
    let old: Vec<Action> = serde_json::from_str(old).expect("old entries parse");
    assert!(old.iter().all(|a| a.action.is_none()));
    // The same time on two members, no id: two actions, never merged.
    let peer = [old[1].clone()];
    let l = combine(
        Member {
            request: 2,
            history: &old[..1],
        },
        &[Member {
            request: 2,
            history: &peer,
        }],
    );
    assert_eq!(l.used(ts(NOW)), 2);
    // No id to join: a raise to this size would be an action of its own.
    assert_eq!(l.source, None);
    // A new entry round-trips its id; one without writes no `action` key (old readers agree).
    let text = serde_json::to_string(&entry(NOW, 2, Some("u-1"))).unwrap();
    assert!(text.contains(r#""action":"u-1""#), "{text}");
    assert!(!serde_json::to_string(&old[0]).unwrap().contains("action"));
}

#[test]
fn a_replacement_member_inherits_the_spent_budget() {
    let p = policy(1, 200 * MI);
    let peer = [entry("2026-01-04T01:00:00Z", 80 * MI, Some("a"))];
    let l = combine(
        Member {
            request: 80 * MI,
            history: &[],
        },
        &[Member {
            request: 80 * MI,
            history: &peer,
        }],
    );
    // At its peers' size, filling: on its own it would grow, in the logical volume the day's
    // one action is spent.
    let alone = run(&p, 80 * MI, 70 * MI, &[], None);
    assert!(alone.grow_to().is_some(), "{alone:?}");
    let shared = run(&p, 80 * MI, 70 * MI, &[], Some(&l));
    assert_eq!(
        shared.blocked_reason(),
        Some(BlockReason::BudgetExhausted),
        "{shared:?}"
    );
    assert_eq!(shared.budget.actions_last_24h, 1);
}

#[test]
fn a_raise_joins_the_action_that_set_the_size_once_and_spends_no_slot() {
    let p = policy(1, 200 * MI);
    let peer = [entry("2026-01-04T01:00:00Z", 80 * MI, Some("a"))];
    let peers = [Member {
        request: 80 * MI,
        history: &peer,
    }];
    let l = combine(
        Member {
            request: 64 * MI,
            history: &[],
        },
        &peers,
    );
    // The budget is spent, by the very action the raise belongs to.
    let d = run(&p, 64 * MI, MI, &[], Some(&l));
    assert_eq!(
        d.verdict,
        Verdict::Grow {
            to: 80 * MI,
            kind: GrowKind::GroupGrow
        }
    );
    assert_eq!(d.joins, Some(id("a")));
    // After the raise the member's entry names `a`: still one action.
    let own = [entry("2026-01-04T04:00:00Z", 80 * MI, Some("a"))];
    let after = combine(
        Member {
            request: 80 * MI,
            history: &own,
        },
        &peers,
    );
    assert_eq!(after.used(ts(NOW)), 1);
    // A member that already followed `a` and is below the size again does not follow it twice:
    // a raise is then an action of its own, and the budget holds it.
    let again = combine(
        Member {
            request: 64 * MI,
            history: &own,
        },
        &peers,
    );
    assert!(again.joined);
    let d = run(&p, 64 * MI, MI, &own, Some(&again));
    assert_eq!(d.blocked_reason(), Some(BlockReason::BudgetExhausted));
    assert_eq!(d.joins, None);
}

#[test]
fn a_size_no_history_explains_is_reached_by_an_action_of_its_own() {
    // A peer resized by hand (no entry at its size); another action spent the budget.
    let p = policy(1, 200 * MI);
    let peer = [entry("2026-01-04T01:00:00Z", 70 * MI, Some("b"))];
    let l = combine(
        Member {
            request: 64 * MI,
            history: &[],
        },
        &[Member {
            request: 96 * MI,
            history: &peer,
        }],
    );
    assert_eq!(l.source, None);
    let d = run(&p, 64 * MI, MI, &[], Some(&l));
    assert_eq!(d.blocked_reason(), Some(BlockReason::BudgetExhausted));
    // With a slot left it is raised, as a new action.
    let d = run(&policy(2, 200 * MI), 64 * MI, MI, &[], Some(&l));
    assert_eq!(d.grow_to(), Some((96 * MI, GrowKind::GroupGrow)));
    assert_eq!(d.joins, None);
}

#[test]
fn members_apply_their_own_policies_to_the_shared_history() {
    let peer = [entry("2026-01-04T01:00:00Z", 80 * MI, Some("a"))];
    let peers = [Member {
        request: 80 * MI,
        history: &peer,
    }];
    let filled = combine(
        Member {
            request: 80 * MI,
            history: &[],
        },
        &peers,
    );
    // One shared action: a member allowing two a day grows, one allowing one does not.
    let two = run(&policy(2, 200 * MI), 80 * MI, 70 * MI, &[], Some(&filled));
    assert!(two.grow_to().is_some(), "{two:?}");
    let one = run(&policy(1, 200 * MI), 80 * MI, 70 * MI, &[], Some(&filled));
    assert_eq!(one.blocked_reason(), Some(BlockReason::BudgetExhausted));
    // A raise stops at the member's own limit: the strictest limit wins for raises.
    let small = combine(
        Member {
            request: 64 * MI,
            history: &[],
        },
        &peers,
    );
    let capped = run(&policy(1, 72 * MI), 64 * MI, MI, &[], Some(&small));
    assert_eq!(capped.grow_to(), Some((72 * MI, GrowKind::GroupGrow)));
}

#[test]
fn ids_name_the_claim_and_the_time() {
    let t: Timestamp = ts(NOW);
    let a = ActionId::new("0f3c9a52-1111-2222-3333-444455556666", t);
    assert_eq!(a.as_str(), format!("0f3c9a52-{}", t.as_second()));
    // A hostile uid is cut, never trusted to be short or ASCII.
    let b = ActionId::new("ééééééééééééééé", t);
    assert!(b.as_str().starts_with("éééééééé-"));
}

#[test]
fn a_member_whose_own_need_the_spent_budget_cannot_pay_still_follows_its_peers() {
    let peer = [entry("2026-01-04T01:00:00Z", 96 * MI, Some("b"))];
    let l = combine(
        Member {
            request: 80 * MI,
            history: &[],
        },
        &[Member {
            request: 96 * MI,
            history: &peer,
        }],
    );
    // Filling, its own step would reach exactly the peers' size: it follows `b`, no new slot.
    let d = run(&policy(1, 200 * MI), 80 * MI, 70 * MI, &[], Some(&l));
    assert_eq!(d.grow_to(), Some((96 * MI, GrowKind::GroupGrow)));
    assert_eq!(d.joins, Some(id("b")));
    // A larger step of its own needs a slot the volume has not got: it is raised to its peers'
    // size as part of `b`, never past them.
    let big = Policy {
        step: crate::policy::Step::Bytes(32 * MI),
        ..policy(1, 200 * MI)
    };
    let d = run(&big, 80 * MI, 70 * MI, &[], Some(&l));
    assert_eq!(d.grow_to(), Some((96 * MI, GrowKind::GroupGrow)));
    assert_eq!(d.joins, Some(id("b")));
    // With a slot left, its own larger need is its own action.
    let d = run(
        &Policy {
            max_actions_per_day: 2,
            ..big
        },
        80 * MI,
        70 * MI,
        &[],
        Some(&l),
    );
    assert_eq!(d.grow_to(), Some((112 * MI, GrowKind::Grow)));
    assert_eq!(d.joins, None);
}

#[test]
fn two_members_grown_to_one_size_at_the_same_moment_are_one_action() {
    // Both filled together and acted before seeing each other's write.
    let a = [entry("2026-01-04T01:00:00Z", 80 * MI, Some("a"))];
    let b = [entry("2026-01-04T01:00:02Z", 80 * MI, Some("b"))];
    let member = |h| Member {
        request: 80 * MI,
        history: h,
    };
    assert_eq!(combine(member(&a), &[member(&b)]).used(ts(NOW)), 1);
    // From the same size to another (each agent sized the step from its own member's fill rate):
    // still the one decision, made twice.
    let other = [entry("2026-01-04T01:00:02Z", 96 * MI, Some("b"))];
    assert_eq!(combine(member(&a), &[member(&other)]).used(ts(NOW)), 1);
    // From another size to another, or minutes apart, they are two.
    let onward = [Action {
        from: 80 * MI,
        ..entry("2026-01-04T01:00:30Z", 96 * MI, Some("b"))
    }];
    assert_eq!(combine(member(&a), &[member(&onward)]).used(ts(NOW)), 2);
    let later = [entry("2026-01-04T01:05:00Z", 80 * MI, Some("b"))];
    assert_eq!(combine(member(&a), &[member(&later)]).used(ts(NOW)), 2);
    // Entries without an id never merge.
    let old = [entry("2026-01-04T01:00:01Z", 80 * MI, None)];
    assert_eq!(combine(member(&a), &[member(&old)]).used(ts(NOW)), 2);
}
