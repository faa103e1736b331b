//! The predictive trigger: hand-worked cases, then properties over generated sample traces.

use jiff::SignedDuration;
use proptest::prelude::*;

use super::rate::{self, FillRate, Sample};
use super::tests::{claim, facts, meas, ts};
use super::*;
use crate::policy::Policy;
use crate::quantity::{GI, MI};

const MB: f64 = 1e6;

fn predictive(limit: u64) -> Policy {
    let mut p = Policy::with_limit(limit);
    p.enabled = true;
    p.predictive.enabled = true;
    p
}

fn rate(bytes_per_second: f64) -> Option<FillRate> {
    Some(FillRate {
        bytes_per_second,
        resize_lead: None,
    })
}

fn run(
    p: &Policy,
    m: Measurement,
    c: &ClaimState,
    history: &[Action],
    r: Option<FillRate>,
) -> Decision {
    decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(p),
        measurement: m,
        claim: c,
        history,
        wal: None,
        facts: facts(),
        now: ts("2026-03-01T12:00:00Z"),
        fill_rate: r,
    })
}

#[test]
fn grows_before_the_threshold_when_the_fill_outruns_the_resize() {
    let p = predictive(100 * GI);
    // 20Gi at 70%: 2Gi to the 80% line, 43 s at 50 MB/s, inside 2m + 30s.
    let d = run(
        &p,
        meas(20 * GI, 14 * GI),
        &claim(20 * GI),
        &[],
        rate(50.0 * MB),
    );
    let (to, kind) = d.grow_to().expect("a predictive grow");
    assert_eq!(kind, GrowKind::Grow);
    assert!(d.predicted);
    // The step covers the fill during the lead time: 50 MB/s * 150 s = 7.5 GB, more than 20% of
    // 20Gi; 20Gi + 7.5 GB is 26.98Gi, rounded up to whole Gi.
    assert_eq!(to, 27 * GI);
    assert_eq!(
        d.seconds_to_full.map(f64::round),
        Some((6.0 * GI as f64 / (50.0 * MB)).round())
    );

    // The same volume without the option, or filling slowly, waits for the threshold.
    let mut off = p.clone();
    off.predictive.enabled = false;
    let d = run(
        &off,
        meas(20 * GI, 14 * GI),
        &claim(20 * GI),
        &[],
        rate(50.0 * MB),
    );
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
    assert!(
        d.seconds_to_full.is_some(),
        "reported even when not acting on it"
    );
    let d = run(&p, meas(20 * GI, 14 * GI), &claim(20 * GI), &[], rate(MB));
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
    assert!(!d.predicted);
}

#[test]
fn a_learned_lead_time_replaces_the_default() {
    let mut p = predictive(100 * GI);
    p.predictive.margin = SignedDuration::ZERO;
    let quick = Some(FillRate {
        bytes_per_second: 50.0 * MB,
        resize_lead: Some(SignedDuration::from_secs(10)),
    });
    // 43 s to the line is more than this claim's 10 s resizes take.
    let d = run(&p, meas(20 * GI, 14 * GI), &claim(20 * GI), &[], quick);
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
}

#[test]
fn min_available_is_predicted_too() {
    let mut p = predictive(100 * GI);
    p.usage_threshold = Some(99);
    p.min_available = crate::policy::MinAvailable::Bytes(5 * GI);
    // 6Gi free, 1Gi above minAvailable: 21 s at 50 MB/s.
    let d = run(
        &p,
        meas(20 * GI, 14 * GI),
        &claim(20 * GI),
        &[],
        rate(50.0 * MB),
    );
    assert!(d.predicted && d.grow_to().is_some());
}

#[test]
fn a_prediction_passes_every_guard() {
    let p = predictive(20 * GI);
    let m = meas(20 * GI, 14 * GI);
    // At the limit.
    let d = run(&p, m, &claim(20 * GI), &[], rate(50.0 * MB));
    assert_eq!(d.blocked_reason(), Some(BlockReason::AtLimit));
    // Budget spent.
    let p = predictive(100 * GI);
    let spent: Vec<Action> = (1..=3)
        .map(|h| {
            Action::new(
                ts("2026-03-01T12:00:00Z") - SignedDuration::from_hours(h),
                GrowKind::Grow,
                GI,
                2 * GI,
            )
        })
        .collect();
    let d = run(&p, m, &claim(20 * GI), &spent, rate(50.0 * MB));
    assert_eq!(d.blocked_reason(), Some(BlockReason::BudgetExhausted));
    // A resize in flight.
    let mut c = claim(20 * GI);
    c.resize = ResizeState::InProgress { since: None };
    let d = run(&p, m, &c, &[], rate(50.0 * MB));
    assert_eq!(d.blocked_reason(), Some(BlockReason::ResizeInProgress));
    // Convergent mode does not predict.
    let mut conv = p.clone();
    conv.mode = crate::policy::Mode::Convergent;
    let d = run(&conv, m, &claim(20 * GI), &[], rate(50.0 * MB));
    assert!(!d.predicted);
}

#[test]
fn a_huge_rate_is_capped_by_max_step_and_limit() {
    let mut p = predictive(30 * GI);
    let d = run(&p, meas(20 * GI, 14 * GI), &claim(20 * GI), &[], rate(1e15));
    assert_eq!(d.grow_to(), Some((30 * GI, GrowKind::Grow)));
    p.limit = 10_000 * GI;
    p.max_step = 8 * GI;
    let d = run(&p, meas(20 * GI, 14 * GI), &claim(20 * GI), &[], rate(1e15));
    assert_eq!(d.grow_to(), Some((28 * GI, GrowKind::Grow)));
}

/// Samples `dt` seconds apart whose usage moves by each of `deltas` in turn.
fn samples(start: u64, dt: f64, deltas: &[i64]) -> Vec<Sample> {
    let mut used = start;
    let mut out = vec![Sample {
        seconds: 0.0,
        used_bytes: used,
    }];
    for (i, d) in deltas.iter().enumerate() {
        used = used.saturating_add_signed(*d);
        out.push(Sample {
            seconds: dt * (i + 1) as f64,
            used_bytes: used,
        });
    }
    out
}

fn below_threshold(p: &Policy, size: u64, used: u64) -> bool {
    (used as f64) * 100.0 < f64::from(p.usage_threshold.unwrap_or(100)) * size as f64
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// No grow from the prediction on a flat or shrinking trace, whatever its spacing.
    #[test]
    fn flat_or_shrinking_never_predicts(
        threshold in 50u8..=99,
        size_gi in 1u64..1000,
        // Below the lowest threshold generated; the trace only goes down from there.
        start_pm in 0u64..500,
        dt in 0.1f64..60.0,
        drops in proptest::collection::vec(prop_oneof![Just(0i64), -(GI as i64)..0], 0..100),
    ) {
        let mut p = predictive(10_000 * GI);
        p.usage_threshold = Some(threshold);
        let size = size_gi * GI;
        let s = samples(size / 1000 * start_pm, dt, &drops);
        let r = rate::estimate(&s);
        prop_assert!(r.is_none_or(|r| r <= 0.0), "rate {r:?} from a non-growing trace");
        let used = s[s.len() - 1].used_bytes;
        prop_assert!(below_threshold(&p, size, used));
        let d = run(&p, meas(size, used), &claim(size), &[], r.and_then(rate));
        prop_assert!(d.grow_to().is_none() && !d.predicted);
    }

    /// One burst, flat before and after: no prefix of the trace predicts a fill, so the burst
    /// triggers nothing once, let alone again and again.
    #[test]
    fn a_burst_then_flat_never_predicts(
        before in 0usize..30,
        after in 0usize..60,
        burst in 1i64..(100 * GI as i64),
        dt in 0.1f64..60.0,
    ) {
        let mut deltas = vec![0i64; before];
        deltas.push(burst);
        deltas.extend(std::iter::repeat_n(0, after));
        let s = samples(GI, dt, &deltas);
        let p = predictive(10_000 * GI);
        let size = 1000 * GI;
        for n in 1..=s.len() {
            let r = rate::estimate(&s[..n]);
            prop_assert!(r.is_none_or(|r| r == 0.0), "prefix {n}: rate {r:?}");
            let used = s[n - 1].used_bytes;
            let d = run(&p, meas(size, used), &claim(size), &[], r.and_then(rate));
            prop_assert!(!d.predicted);
        }
    }

    /// A steady fill with jitter is measured within the jitter.
    #[test]
    fn a_steady_fill_is_measured(
        per_second in 1u64..(500 * MI),
        jitter_pm in 0u64..200,
        n in 6usize..100,
    ) {
        // Alternate the jitter so it does not add up.
        let deltas: Vec<i64> = (0..n)
            .map(|i| {
                let j = (per_second / 1000 * jitter_pm) as i64;
                per_second as i64 + if i % 2 == 0 { j } else { -j }
            })
            .collect();
        let r = rate::estimate(&samples(GI, 1.0, &deltas)).expect("enough samples");
        let err = (r - per_second as f64).abs() / per_second as f64;
        prop_assert!(err <= jitter_pm as f64 / 1000.0 + 1e-9, "rate {r} for {per_second}");
    }
}

#[test]
fn the_limit_deadline_follows_the_claims_or_its_logical_volumes_growth() {
    let p = predictive(100 * GI);
    let day = |d: i64| ts("2026-03-01T12:00:00Z") - SignedDuration::from_hours(24 * d);
    // 20Gi grown in the last week (two grows of 10Gi), 40Gi to the 100Gi limit: two weeks.
    let own = [
        Action::new(day(6), GrowKind::Grow, 40 * GI, 50 * GI),
        Action::new(day(1), GrowKind::Grow, 50 * GI, 60 * GI),
    ];
    let d = run(&p, meas(60 * GI, 30 * GI), &claim(60 * GI), &own, None);
    assert_eq!(d.seconds_to_limit.map(f64::round), Some(14.0 * 86_400.0));
    // No grow in the week: unknown, whatever the fill.
    let d = run(&p, meas(60 * GI, 30 * GI), &claim(60 * GI), &[], rate(MB));
    assert_eq!(d.seconds_to_limit, None);
    assert!(d.seconds_to_full.is_some());
    // In a logical volume: its actions and size, not this member's (which grew nothing yet).
    let logical = Logical {
        actions: own.to_vec(),
        size: 80 * GI,
        source: None,
        joined: false,
    };
    let c = claim(60 * GI);
    let d = decide(&Inputs {
        logical: Some(&logical),
        policy: PolicyInput::Valid(&p),
        measurement: meas(60 * GI, 30 * GI),
        claim: &c,
        history: &[],
        wal: None,
        facts: facts(),
        now: ts("2026-03-01T12:00:00Z"),
        fill_rate: None,
    });
    assert_eq!(d.seconds_to_limit.map(f64::round), Some(7.0 * 86_400.0));
    // Refused policies still say how soon the volume fills.
    let d = decide(&Inputs {
        policy: PolicyInput::Invalid,
        fill_rate: rate(MB),
        ..Inputs {
            logical: None,
            policy: PolicyInput::Valid(&p),
            measurement: meas(60 * GI, 30 * GI),
            claim: &c,
            history: &[],
            wal: None,
            facts: facts(),
            now: ts("2026-03-01T12:00:00Z"),
            fill_rate: None,
        }
    });
    assert_eq!(
        d.seconds_to_full.map(f64::round),
        Some((30.0 * GI as f64 / MB).round())
    );
}
