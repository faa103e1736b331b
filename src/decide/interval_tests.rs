//! One grow per modification interval: the gate, worked cases of the lasting step, and
//! properties of the step over generated volumes (it lasts the interval, and not much more).

use jiff::SignedDuration;
use proptest::prelude::*;

use super::rate::FillRate;
use super::tests::{claim, facts, meas, ts};
use super::*;
use crate::policy::{Mode, Policy, Step};
use crate::quantity::GI;

const MB: f64 = 1e6;
const SIX_HOURS: SignedDuration = SignedDuration::from_hours(6);

fn ebs(limit: u64) -> Policy {
    let mut p = Policy::with_limit(limit);
    p.enabled = true;
    p.modification_interval = Some(SIX_HOURS);
    p
}

fn grow(at: &str, kind: GrowKind) -> Action {
    Action::new(ts(at), kind, 100 * GI, 120 * GI)
}

fn run(p: &Policy, m: Measurement, size: u64, history: &[Action], now: &str) -> Decision {
    run_at_rate(p, m, size, history, now, None)
}

fn run_at_rate(
    p: &Policy,
    m: Measurement,
    size: u64,
    history: &[Action],
    now: &str,
    bytes_per_second: Option<f64>,
) -> Decision {
    decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(p),
        measurement: m,
        claim: &claim(size),
        history,
        wal: None,
        facts: facts(),
        now: ts(now),
        fill_rate: bytes_per_second.map(|r| FillRate {
            bytes_per_second: r,
            resize_lead: None,
        }),
    })
}

#[test]
fn no_resize_inside_the_interval_not_even_an_emergency() {
    let p = ebs(1000 * GI);
    let history = [grow("2026-03-01T10:00:00Z", GrowKind::Grow)];
    // 98 % used two hours after the last grow: past every line, and the storage would refuse.
    let d = run(
        &p,
        meas(120 * GI, 118 * GI),
        120 * GI,
        &history,
        "2026-03-01T12:00:00Z",
    );
    assert_eq!(d.blocked_reason(), Some(BlockReason::ModificationInterval));
    assert_eq!(d.next_grow, Some(ts("2026-03-01T16:00:00Z")));
    // A second before the interval ends, still; at its end, the grow goes out.
    let d = run(
        &p,
        meas(120 * GI, 118 * GI),
        120 * GI,
        &history,
        "2026-03-01T15:59:59Z",
    );
    assert_eq!(d.blocked_reason(), Some(BlockReason::ModificationInterval));
    let d = run(
        &p,
        meas(120 * GI, 118 * GI),
        120 * GI,
        &history,
        "2026-03-01T16:00:00Z",
    );
    assert!(d.grow_to().is_some(), "{d:?}");
    assert_eq!(d.next_grow, None);

    // Convergent mode's emergency is held the same way.
    let mut c = ebs(1000 * GI);
    c.mode = Mode::Convergent;
    let history = [grow("2026-03-01T10:00:00Z", GrowKind::EmergencyGrow)];
    let d = run(
        &c,
        meas(120 * GI, 119 * GI),
        120 * GI,
        &history,
        "2026-03-01T12:00:00Z",
    );
    assert!(d.emergency);
    assert_eq!(d.blocked_reason(), Some(BlockReason::ModificationInterval));
}

#[test]
fn what_starts_the_interval() {
    let p = ebs(1000 * GI);
    let full = meas(100 * GI, 90 * GI);
    // A retry lowered an infeasible request: the storage made no modification.
    let retry = [grow("2026-03-01T11:00:00Z", GrowKind::Retry)];
    let d = run(&p, full, 100 * GI, &retry, "2026-03-01T12:00:00Z");
    assert!(d.grow_to().is_some(), "{d:?}");
    // Nothing is held without an interval, or with a grow older than it.
    let recent = [grow("2026-03-01T11:00:00Z", GrowKind::Grow)];
    let off = Policy {
        modification_interval: None,
        ..p.clone()
    };
    assert!(
        run(&off, full, 100 * GI, &recent, "2026-03-01T12:00:00Z")
            .grow_to()
            .is_some()
    );
    let old = [grow("2026-03-01T05:59:00Z", GrowKind::Grow)];
    assert!(
        run(&p, full, 100 * GI, &old, "2026-03-01T12:00:00Z")
            .grow_to()
            .is_some()
    );
    // An entry dated beyond the clock-skew allowance is no grow anyone made.
    let future = [grow("2026-03-01T13:00:00Z", GrowKind::Grow)];
    assert!(
        run(&p, full, 100 * GI, &future, "2026-03-01T12:00:00Z")
            .grow_to()
            .is_some()
    );
    // Below every line nothing is needed, and the reason is not shown as a block.
    let d = run(
        &p,
        meas(100 * GI, 10 * GI),
        100 * GI,
        &recent,
        "2026-03-01T12:00:00Z",
    );
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
    assert_eq!(d.next_grow, Some(ts("2026-03-01T17:00:00Z")));
}

#[test]
fn the_step_lasts_until_the_next_grow_is_possible() {
    let p = ebs(1000 * GI);
    // 100Gi at 80 %, filling at 1 MB/s: 6 h + 2m30s of fill is 21.75 GB. The 80 % line of a
    // claim of S bytes is 0.8 S, so S >= (80Gi + 21.75 GB) / 0.8 = 134.56 GB = 125.3Gi -> 126Gi,
    // more than the 20 % step (120Gi).
    let d = run_at_rate(
        &p,
        meas(100 * GI, 80 * GI),
        100 * GI,
        &[],
        "2026-03-01T12:00:00Z",
        Some(MB),
    );
    assert_eq!(d.grow_to(), Some((126 * GI, GrowKind::Grow)));
    // Without an interval the same fill gets the 20 % step.
    let off = Policy {
        modification_interval: None,
        ..p.clone()
    };
    let d = run_at_rate(
        &off,
        meas(100 * GI, 80 * GI),
        100 * GI,
        &[],
        "2026-03-01T12:00:00Z",
        Some(MB),
    );
    assert_eq!(d.grow_to(), Some((120 * GI, GrowKind::Grow)));
    // maxStep bounds it (and the limit caps it).
    let capped = Policy {
        max_step: 10 * GI,
        step: Step::Percent(5),
        ..p.clone()
    };
    let d = run_at_rate(
        &capped,
        meas(100 * GI, 80 * GI),
        100 * GI,
        &[],
        "2026-03-01T12:00:00Z",
        Some(MB),
    );
    assert_eq!(d.grow_to(), Some((110 * GI, GrowKind::Grow)));
    let low = ebs(104 * GI);
    let d = run_at_rate(
        &low,
        meas(100 * GI, 80 * GI),
        100 * GI,
        &[],
        "2026-03-01T12:00:00Z",
        Some(MB),
    );
    assert_eq!(d.grow_to(), Some((104 * GI, GrowKind::Grow)));
}

/// Seconds until a claim of `size` claim bytes, filesystem `ratio` of it usable, reaches its
/// 80 % line from `used` at `rate`.
fn seconds_to_line(size: f64, ratio: f64, used: f64, threshold: f64, rate: f64) -> f64 {
    (size * ratio * threshold - used) / rate
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Grown by the lasting growth, a volume filling at the rate reaches its line no sooner than
    /// the interval and the lead time from now; grown by 1 % less of it, sooner: the step is
    /// what the interval needs, not more.
    #[test]
    fn the_lasting_growth_lasts_and_no_more(
        size_gi in 1u64..4096,
        used_pm in 0u64..1000,
        threshold in 50u8..=99,
        rate in 1e3f64..2e9,
        interval_m in 1i64..(7 * 24 * 60),
        lead_s in 1i64..3600,
        reserved_pm in 0u64..60,
    ) {
        let size = size_gi * GI;
        let mut p = ebs(u64::MAX);
        p.usage_threshold = Some(threshold);
        p.modification_interval = Some(SignedDuration::from_mins(interval_m));
        p.predictive.resize_lead_time = SignedDuration::from_secs(lead_s);
        let used = size / 1000 * used_pm;
        let reserved = (size / 1000 * reserved_pm).min(size - used);
        let m = Measurement { available_bytes: size - used - reserved, ..meas(size, used) };
        let c = claim(size);
        let fill = FillRate { bytes_per_second: rate, resize_lead: None };
        let inputs = Inputs {
            logical: None,
            policy: PolicyInput::Valid(&p),
            measurement: m,
            claim: &c,
            history: &[],
            wal: None,
            facts: facts(),
            now: ts("2026-03-01T12:00:00Z"),
            fill_rate: Some(fill),
        };
        let ratio = super::engine::usable_ratio(&inputs);
        let grow = interval::lasting_growth(&inputs, &p, &fill, ratio) as f64;
        let horizon = (SignedDuration::from_mins(interval_m) + predictive::lead(&p, &fill)).as_secs_f64();
        let t = f64::from(threshold) / 100.0;
        let lasts = seconds_to_line(size as f64 + grow, ratio, used as f64, t, rate);
        prop_assert!(lasts >= horizon * (1.0 - 1e-9) - 1e-6, "grown {grow}: lasts {lasts} s < {horizon} s");
        if grow > 1e4 {
            let less = seconds_to_line(size as f64 + grow * 0.99, ratio, used as f64, t, rate);
            prop_assert!(less < horizon, "1 % less would last {less} s >= {horizon} s");
        }
    }
}

/// AWS EBS since January 2026: four modifications per rolling 24 h, each after the last landed.
fn ebs_2026(limit: u64) -> Policy {
    let mut p = Policy::with_limit(limit);
    p.enabled = true;
    // Room in headroom's own daily budget, so the storage's is what limits.
    p.max_actions_per_day = 10;
    p.modification_budget = Some(crate::policy::drivers::Budget {
        count: 4,
        window: SignedDuration::from_hours(24),
        after_landed: true,
    });
    p
}

fn grows_at(times: &[&str]) -> Vec<Action> {
    times.iter().map(|t| grow(t, GrowKind::Grow)).collect()
}

#[test]
fn four_grows_a_day_then_none_until_the_oldest_leaves_the_window() {
    let p = ebs_2026(1000 * GI);
    let mut h = grows_at(&[
        "2026-03-01T01:00:00Z",
        "2026-03-01T02:00:00Z",
        "2026-03-01T03:00:00Z",
    ]);
    // Three in the window: an emergency five minutes after the third is grown at once.
    let full = meas(120 * GI, 118 * GI);
    let d = run(&p, full, 120 * GI, &h, "2026-03-01T03:05:00Z");
    assert!(d.grow_to().is_some(), "{d:?}");
    assert_eq!(d.next_grow, None);
    // Four: none, not even an emergency, until the first leaves the window 24 h after it.
    h.extend(grows_at(&["2026-03-01T04:00:00Z"]));
    let d = run(&p, full, 120 * GI, &h, "2026-03-01T12:00:00Z");
    assert_eq!(d.blocked_reason(), Some(BlockReason::ModificationInterval));
    assert_eq!(d.next_grow, Some(ts("2026-03-02T01:00:00Z")));
    let d = run(&p, full, 120 * GI, &h, "2026-03-02T00:59:59Z");
    assert_eq!(d.blocked_reason(), Some(BlockReason::ModificationInterval));
    let d = run(&p, full, 120 * GI, &h, "2026-03-02T01:00:00Z");
    assert!(d.grow_to().is_some(), "{d:?}");
    // A retry (a lowered request) is no modification the storage counts.
    let mut retried = h.clone();
    retried[0].kind = GrowKind::Retry;
    let d = run(&p, full, 120 * GI, &retried, "2026-03-01T12:00:00Z");
    assert!(d.grow_to().is_some(), "{d:?}");
}

#[test]
fn the_grow_that_spends_the_budget_lasts_until_a_place_frees() {
    let p = ebs_2026(10_000 * GI);
    let h = grows_at(&[
        "2026-03-01T01:00:00Z",
        "2026-03-01T02:00:00Z",
        "2026-03-01T03:00:00Z",
    ]);
    // Past the line at 1 MB/s: the fourth grow of the window must last until 01:00 tomorrow
    // (21 h), and the grow made then must land (the lead time).
    let at = |h: &[Action]| {
        run_at_rate(
            &p,
            meas(100 * GI, 81 * GI),
            100 * GI,
            h,
            "2026-03-01T04:00:00Z",
            Some(MB),
        )
    };
    let (to, _) = at(&h).grow_to().expect("grown");
    let lasts = (to as f64 * 0.8 - 81.0 * GI as f64) / MB;
    assert!(lasts >= 21.0 * 3600.0, "{to} lasts {lasts} s");
    // With places left, the next grow is possible once this one has landed: the ordinary step.
    let (to, _) = at(&h[..1]).grow_to().expect("grown");
    assert_eq!(to, 120 * GI);
}
