//! The fill rate of a volume and how soon it reaches a line, from recent samples. Pure: the
//! agent (or `simulate`) keeps the samples and passes them in.
//!
//! The estimate is the interquartile mean of the per-interval slopes since the lowest recent
//! usage. Slopes rather than a least-squares line: one burst is one interval, and trimming the top
//! quarter drops it, so a bulk load that then stops does not keep predicting a fill. Starting at
//! the lowest usage: a delete starts the estimate afresh instead of dragging it negative for the
//! whole window (and the fill that follows a delete is the one that matters). Until that fill
//! is more than twice the largest delete in the window, it may be the same cycle again (temporary
//! files written and removed, WAL recycled at each checkpoint): no estimate, so a cycling
//! volume is never grown ahead of a fill that is about to be deleted.

use jiff::SignedDuration;
use serde::Serialize;

/// At most this many samples are looked at (the newest).
pub const MAX_SAMPLES: usize = 120;
/// An estimate needs at least this many intervals since the last delete.
pub const MIN_INTERVALS: usize = 4;

/// One measurement of used bytes at a time (seconds on any fixed origin).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub seconds: f64,
    pub used_bytes: u64,
}

/// A volume's fill rate, and how long its resizes take when that has been seen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FillRate {
    /// Bytes per second; 0 or less means not filling.
    pub bytes_per_second: f64,
    /// How long this claim's resizes took, from the PATCH to the filesystem showing the new size
    /// (see [`learned_lead_time`]); `None` until one has been seen, then the policy's
    /// `trigger.resizeLeadTime` applies.
    pub resize_lead: Option<SignedDuration>,
}

impl FillRate {
    /// Seconds until `bytes` more are used at this rate; `None` when not filling (or the rate is
    /// not a number, which the engine must survive since Inputs are plain data).
    pub fn seconds_for(&self, bytes: u64) -> Option<f64> {
        let r = self.bytes_per_second;
        if !r.is_finite() || r <= 0.0 {
            return None;
        }
        Some(bytes as f64 / r)
    }
}

/// The fill rate from samples in time order (out-of-order or duplicate times are skipped);
/// `None` with too few usable samples since the last delete.
pub fn estimate(samples: &[Sample]) -> Option<f64> {
    let recent = &samples[samples.len().saturating_sub(MAX_SAMPLES)..];
    // The last occurrence of the lowest usage: everything before a delete is forgotten. Found
    // before anything is copied: a volume that does not grow (most of them, every pass) ends
    // here.
    let mut low = None;
    let mut n = 0;
    for s in usable(recent) {
        if low.is_none_or(|(_, used)| s.used_bytes <= used) {
            low = Some((n, s.used_bytes));
        }
        n += 1;
    }
    let (low, _) = low?;
    if n - low <= MIN_INTERVALS {
        return None;
    }
    let clean: Vec<Sample> = usable(recent).collect();
    let since = &clean[low..];
    // A rise up to twice what was deleted within the window may be the same cycle again
    // (temporary files, WAL recycled at each checkpoint) on top of a slow growth: not yet a fill
    // to predict from. Twice, because the lowest sample can be a cycle or more before the last.
    let rise = since[since.len() - 1].used_bytes - since[0].used_bytes;
    let deleted = largest_drop(&clean);
    if deleted > 0 && rise <= deleted.saturating_mul(2) {
        return None;
    }
    let mut slopes: Vec<f64> = since
        .windows(2)
        .map(|w| (w[1].used_bytes as f64 - w[0].used_bytes as f64) / (w[1].seconds - w[0].seconds))
        .filter(|s| s.is_finite())
        .collect();
    if slopes.len() < MIN_INTERVALS {
        return None;
    }
    slopes.sort_by(f64::total_cmp);
    let cut = slopes.len() / 4;
    let kept = &slopes[cut..slopes.len() - cut];
    Some(kept.iter().sum::<f64>() / kept.len() as f64)
}

/// The samples with a finite time, each later than the one kept before it.
fn usable(samples: &[Sample]) -> impl Iterator<Item = Sample> + '_ {
    let mut last = f64::NEG_INFINITY;
    samples.iter().copied().filter(move |s| {
        let keep = s.seconds.is_finite() && s.seconds > last;
        if keep {
            last = s.seconds;
        }
        keep
    })
}

/// The largest fall in usage from an earlier sample to a later one (0 when it never falls).
fn largest_drop(samples: &[Sample]) -> u64 {
    let mut peak = 0;
    let mut drop = 0;
    for s in samples {
        peak = peak.max(s.used_bytes);
        drop = drop.max(peak - s.used_bytes);
    }
    drop
}

/// The resize lead time from how long this claim's past resizes took (newest last): the longest
/// of the last three, so one quick resize does not make the next prediction late. Negative or
/// absurd (over a day) observations are ignored.
pub fn learned_lead_time(observed: &[SignedDuration]) -> Option<SignedDuration> {
    observed
        .iter()
        .rev()
        .filter(|d| **d > SignedDuration::ZERO && **d <= SignedDuration::from_hours(24))
        .take(3)
        .max()
        .copied()
}

#[cfg(test)]
mod tests {
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

    /// The estimate as it was before it looked for the lowest sample without copying: the
    /// reference the faster one must agree with on any input.
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
        let mut slopes: Vec<f64> = since
            .windows(2)
            .map(|w| {
                (w[1].used_bytes as f64 - w[0].used_bytes as f64) / (w[1].seconds - w[0].seconds)
            })
            .filter(|s| s.is_finite())
            .collect();
        if slopes.len() < MIN_INTERVALS {
            return None;
        }
        slopes.sort_by(f64::total_cmp);
        let cut = slopes.len() / 4;
        let kept = &slopes[cut..slopes.len() - cut];
        Some(kept.iter().sum::<f64>() / kept.len() as f64)
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
}
