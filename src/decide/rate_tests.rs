//! The fill-rate estimate: worked cases (steady, chunked, bursts, deletes, cycles, one-off
//! writes) and its agreement with the reference choice of samples on any input.

use super::*;

fn trace(points: &[(f64, u64)]) -> Vec<Sample> {
    points
        .iter()
        .map(|&(seconds, used_bytes)| Sample {
            seconds,
            used_bytes,
        })
        .collect()
}

fn linear(n: usize, rate: u64) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample {
            seconds: i as f64,
            used_bytes: 1_000 + rate * i as u64,
        })
        .collect()
}

#[test]
fn steady_fill_is_measured_exactly() {
    assert_eq!(estimate(&linear(10, 500)), Some(500.0));
}

#[test]
fn too_few_samples_say_nothing() {
    assert_eq!(estimate(&linear(MIN_INTERVALS, 500)), None);
    assert_eq!(estimate(&[]), None);
}

#[test]
fn one_burst_is_trimmed() {
    let s = trace(&[
        (0.0, 0),
        (1.0, 10),
        (2.0, 20),
        (3.0, 1_000_000),
        (4.0, 1_000_010),
        (5.0, 1_000_020),
        (6.0, 1_000_030),
    ]);
    assert_eq!(estimate(&s), Some(10.0));
}

#[test]
fn a_delete_starts_afresh() {
    // Filling at 1000/s, a delete of 19_900, then filling at 10/s: only the slow fill
    // counts, once it has written more than the delete took away or the delete has left
    // the window of samples.
    let mut s = linear(20, 1_000);
    let t0 = 20.0;
    for i in 0..200 {
        s.push(Sample {
            seconds: t0 + i as f64,
            used_bytes: 100 + 10 * i,
        });
    }
    assert_eq!(estimate(&s[..30]), None, "refilling what was deleted");
    assert_eq!(
        estimate(&s[..139]),
        None,
        "the delete is still in the window"
    );
    assert_eq!(estimate(&s), Some(10.0));
    // Right after the delete there is not enough to say.
    assert_eq!(estimate(&s[..22]), None);
}

#[test]
fn a_cycle_is_not_a_fill() {
    // 20 s of 100/s, then deleted, again and again (temporary files, WAL recycled at each
    // checkpoint): every tooth looks like a fast fill from its own low.
    let s: Vec<Sample> = (0..120)
        .map(|i| Sample {
            seconds: i as f64,
            used_bytes: 10_000 + 100 * (i % 25).min(20),
        })
        .collect();
    for n in 30..=120 {
        assert_eq!(estimate(&s[..n]), None, "after {n} samples");
    }
    // The first tooth, before any delete, is a fill as far as anyone can tell.
    assert_eq!(estimate(&s[..10]), Some(100.0));
    // A fill that goes past twice the teeth is one.
    let mut s = s;
    for i in 0..60 {
        s.push(Sample {
            seconds: 120.0 + i as f64,
            used_bytes: 10_000 + 100 * i,
        });
    }
    assert_eq!(estimate(&s), Some(100.0));
}

const MI: f64 = 1_048_576.0;

/// Sampling `period` apart with a fixed, uneven jitter of up to a fifth of it: the sampler's
/// passes are not regular.
fn sampled(n: usize, period: f64, start: f64, used: impl Fn(f64) -> u64) -> Vec<Sample> {
    (0..n)
        .map(|i| {
            let jitter = ((i * 7919) % 13) as f64 / 13.0 - 0.5;
            let seconds = start + period * (i as f64 + 0.4 * jitter);
            Sample {
                seconds,
                used_bytes: used(seconds),
            }
        })
        .collect()
}

/// A writer of `per_second` bytes in chunks of `chunk` bytes: used bytes rise one whole
/// chunk at a time.
fn chunked(per_second: f64, chunk: f64) -> impl Fn(f64) -> u64 {
    move |seconds| (1u64 << 30) + ((seconds * per_second / chunk).floor() * chunk) as u64
}

#[test]
fn a_chunked_writer_is_measured_within_five_percent() {
    let mut checked = 0;
    for per_second in [0.2 * MI, 1.33 * MI, 5.0 * MI, 40.0 * MI] {
        for chunk in [256.0 * 1024.0, 16.0 * MI] {
            for period in [0.2, 1.0, 2.0, 10.0, 30.0] {
                // A window that holds fewer than eight chunks is not held to 5 %.
                let window = period * (MAX_SAMPLES - 1) as f64;
                if per_second * window < 8.0 * chunk {
                    continue;
                }
                // Wherever the window starts in the writer's cycle.
                for phase in 0..8 {
                    let start = 3.7 + 0.37 * chunk / per_second * f64::from(phase);
                    let s = sampled(MAX_SAMPLES, period, start, chunked(per_second, chunk));
                    let got = estimate(&s).unwrap_or(0.0);
                    let err = (got - per_second).abs() / per_second;
                    assert!(
                        err <= 0.05,
                        "{:.3} MiB/s in {} KiB chunks every {period} s from {start:.1} s: \
                         estimated {:.3} MiB/s",
                        per_second / MI,
                        chunk / 1024.0,
                        got / MI
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 200, "only {checked} cases");
}

#[test]
fn a_few_chunks_cannot_be_told_from_one_off_writes() {
    // Three 16 MiB segments in the window: a fill or three writes, read as no fill.
    let period = 1.0;
    let per_second = 3.0 * 16.0 * MI / (period * (MAX_SAMPLES - 1) as f64);
    let s = sampled(MAX_SAMPLES, period, 3.7, chunked(per_second, 16.0 * MI));
    assert_eq!(estimate(&s), Some(0.0));
}

#[test]
fn writes_into_a_still_volume_are_not_a_fill() {
    // Files written at once, some samples apart (the e2e tests' fills, a restore's files): in
    // no window, from the first write on, is that a fill. One that was would widen the next
    // step and grow the claim again as soon as that one landed.
    for period in [0.25, 0.5, 1.0, 2.0] {
        for gap in [6.0, 20.0] {
            for first in [MI, 56.0 * MI, 300.0 * MI] {
                let writes = [
                    (10.0, first),
                    (gap * period, 16.0 * MI),
                    (gap * period, 4.0 * MI),
                ];
                let used = |t: f64| {
                    let (mut at, mut used) = (0.0, 100_000_000.0);
                    for (after, bytes) in writes {
                        at += after;
                        used += if t > at { bytes } else { 0.0 };
                    }
                    used as u64
                };
                let s = sampled(400, period, 0.0, used);
                for n in 1..=s.len() {
                    let r = estimate(&s[n.saturating_sub(MAX_SAMPLES)..n]);
                    assert!(
                        r.is_none_or(|r| r == 0.0),
                        "{} MiB, then 16 MiB and 4 MiB {gap} samples apart, sampled every \
                         {period} s: {r:?} after {n} samples",
                        first / MI
                    );
                }
            }
        }
    }
}

#[test]
fn a_write_before_a_fill_is_not_its_pace() {
    // 8 MiB at once, then 1 MiB every 250 ms (the predictive e2e test's filler), sampled
    // every second until the fill is seen, then every 250 ms (the fast loop).
    let used = |t: f64| {
        if t < 0.0 {
            0
        } else {
            ((8.0 + (t / 0.25).floor()) * MI) as u64
        }
    };
    let mut s = sampled(4, 1.0, -3.9, used);
    s.extend(sampled(40, 0.25, 0.1, used));
    // The first windows are three intervals, each seeing a tick more or less: within 10 %.
    // Taken as the fill's start, the 8 MiB would read 6.4 MiB/s there.
    for n in 8..=s.len() {
        let r = estimate(&s[..n]).expect("enough samples");
        assert!((r - 4.0 * MI).abs() <= 0.1 * 4.0 * MI, "{} MiB/s", r / MI);
    }
}

#[test]
fn a_burst_in_a_steady_fill_is_cut_out() {
    // 100/s for a minute, a bulk load of 50_000 over three samples, then 100/s again: the
    // load is not a rate, and the time it took is not left out of the fill.
    let mut s = linear(60, 100);
    for add in [10_000, 30_000, 10_000] {
        let last = s[s.len() - 1];
        s.push(Sample {
            seconds: last.seconds + 1.0,
            used_bytes: last.used_bytes + add,
        });
    }
    let after = s[s.len() - 1];
    for i in 1..=40 {
        s.push(Sample {
            seconds: after.seconds + i as f64,
            used_bytes: after.used_bytes + 100 * i,
        });
    }
    let r = estimate(&s).expect("enough samples");
    assert!((r - 100.0).abs() < 1.0, "{r}");
}

#[test]
fn hostile_times_are_skipped() {
    let mut s = linear(8, 100);
    s.insert(
        3,
        Sample {
            seconds: f64::NAN,
            used_bytes: 0,
        },
    );
    s.insert(
        5,
        Sample {
            seconds: 1.0,
            used_bytes: u64::MAX,
        },
    );
    assert_eq!(estimate(&s), Some(100.0));
}

#[test]
fn lead_time_is_the_longest_recent() {
    let s = SignedDuration::from_secs;
    assert_eq!(learned_lead_time(&[]), None);
    assert_eq!(
        learned_lead_time(&[s(300), s(40), s(50), s(45)]),
        Some(s(50))
    );
    assert_eq!(learned_lead_time(&[s(-5), s(0), s(90_000)]), None);
}

#[test]
fn seconds_for_refuses_non_numbers() {
    let r = |b| FillRate {
        bytes_per_second: b,
        resize_lead: None,
    };
    assert_eq!(r(100.0).seconds_for(1_000), Some(10.0));
    assert_eq!(r(0.0).seconds_for(1_000), None);
    assert_eq!(r(f64::NAN).seconds_for(1_000), None);
    assert_eq!(r(-3.0).seconds_for(1_000), None);
}

/// The estimate's choice of samples as it was before it looked for the lowest sample
/// without copying: the reference the faster one must agree with on any input.
fn reference(samples: &[Sample]) -> Option<f64> {
    let recent = &samples[samples.len().saturating_sub(MAX_SAMPLES)..];
    let mut clean: Vec<Sample> = Vec::new();
    for s in recent {
        if s.seconds.is_finite() && clean.last().is_none_or(|p| s.seconds > p.seconds) {
            clean.push(*s);
        }
    }
    let low = clean
        .iter()
        .enumerate()
        .min_by(|(ia, a), (ib, b)| a.used_bytes.cmp(&b.used_bytes).then(ib.cmp(ia)))
        .map(|(i, _)| i)?;
    let since = &clean[low..];
    if since.len() <= MIN_INTERVALS {
        return None;
    }
    let rise = since[since.len() - 1].used_bytes - since[0].used_bytes;
    let deleted = largest_drop(&clean);
    if deleted > 0 && rise <= deleted.saturating_mul(2) {
        return None;
    }
    // The line is the same function: what this reference checks is the choice of samples.
    fit(since)
}

proptest::proptest! {
    #[test]
    fn the_estimate_agrees_with_its_reference(
        raw in proptest::collection::vec(
            (
                proptest::prop_oneof![
                    8 => 0.0f64..500.0,
                    1 => proptest::sample::select(vec![f64::NAN, f64::INFINITY, 0.0, 7.0]),
                ],
                proptest::prop_oneof![3 => 0u64..4, 1 => 0u64..u64::MAX],
            ),
            0..160,
        ),
        sorted in proptest::bool::ANY,
    ) {
        let mut samples: Vec<Sample> = raw
            .into_iter()
            .map(|(seconds, used_bytes)| Sample { seconds, used_bytes })
            .collect();
        if sorted {
            samples.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
        }
        let (got, want) = (estimate(&samples), reference(&samples));
        proptest::prop_assert!(
            got == want || got.zip(want).is_some_and(|(g, w)| g.is_nan() && w.is_nan()),
            "{got:?} != {want:?}"
        );
    }
}
