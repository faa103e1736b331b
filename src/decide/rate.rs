//! The fill rate of a volume and how soon it reaches a line, from recent samples. Pure: the
//! agent (or `simulate`) keeps the samples and passes them in.
//!
//! The estimate is the slope of a least-squares line through the usage since the lowest recent
//! sample, with the first interval and the bursts left out.
//!
//! - A line, not an average of per-interval slopes: a writer that writes in chunks (Postgres WAL
//!   in 16 MiB segments, a copy in 256 KiB buffers) makes each interval see a whole number of
//!   chunks, one more or one less, and trimming the faster intervals (the interquartile mean this
//!   replaced) read 1.33 MiB/s in 256 KiB chunks at 200 ms samples 11-17 % low, and 16 MiB
//!   segments seconds apart as 0. A line through the staircase is within 5 % once the window
//!   holds eight chunks (tested at several rates, chunk sizes and sampling periods).
//! - A sustained fill and a one-off write (a file copied in, a restore, a bulk load) differ in
//!   how the rise is spread: a fill's rise comes chunk after chunk across the window, a one-off's
//!   sits in one interval or a few consecutive ones, much faster than the window's mean pace. A
//!   burst is a run of consecutive intervals each over four times the mean pace of the intervals
//!   kept, that together carry more than a quarter of their rise. The largest is left out (its
//!   time with it) and the rest is looked at again, until none is left: writes into a still
//!   volume leave no rate at all (once one is out, the next carries all that is left), a bulk
//!   load during a steady fill leaves the steady fill, and five chunks or more are kept (the
//!   first goes with the first interval, and none of the rest carries more than a quarter of the
//!   rise). Four or fewer in the window cannot be told from one-off writes and read as no fill.
//!   A fill that speeds up more than fourfold is a burst until the faster part fills about a
//!   quarter of the window (the interquartile mean too ignored it until it held a quarter of the
//!   intervals).
//! - The first interval is left out: the lowest sample is the last before the rise, so the first
//!   interval holds whatever started it (a chunk, a write before a fill's pace) at no known time.
//! - Which error costs what: a rate too high widens the step (`predictive::step`,
//!   `interval::lasting_growth`) and grows a claim early; a one-off read as a fill grows it
//!   again right after a grow lands, since the write is still in the window. A rate too low
//!   leaves a fill to the threshold trigger, later. So a burst is left out whole, and a chunked
//!   writer, the one steady fill a trimmed mean misread, is measured from all its chunks.
//! - Starting at the lowest usage: a delete starts the estimate afresh instead of dragging it
//!   negative for the whole window (and the fill that follows a delete is the one that matters).
//!   Until that fill is more than twice the largest delete in the window, it may be the same
//!   cycle again (temporary files written and removed, WAL recycled at each checkpoint): no
//!   estimate, so a cycling volume is never grown ahead of a fill that is about to be deleted.

use std::ops::Range;

use jiff::SignedDuration;
use serde::Serialize;

/// At most this many samples are looked at (the newest).
pub const MAX_SAMPLES: usize = 120;
/// An estimate needs at least this many intervals since the last delete.
pub const MIN_INTERVALS: usize = 4;
/// An interval this many times faster than the mean pace may be part of a burst...
const BURST_SPEED: f64 = 4.0;
/// ...which it is when its run of such intervals carries more than this share of the rise.
const BURST_SHARE: f64 = 0.25;

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
    fit(since)
}

/// One interval between two samples.
#[derive(Clone, Copy)]
struct Step {
    seconds: f64,
    bytes: f64,
}

/// The slope of the least-squares line through the usage of `since` (its first sample the
/// lowest) with its first interval and its bursts left out, each kept interval joined to the one
/// kept before it; `None` with fewer than [`MIN_INTERVALS`] intervals of finite slope.
fn fit(since: &[Sample]) -> Option<f64> {
    let steps: Vec<Step> = since
        .windows(2)
        .map(|w| Step {
            seconds: w[1].seconds - w[0].seconds,
            bytes: w[1].used_bytes as f64 - w[0].used_bytes as f64,
        })
        .filter(|s| (s.bytes / s.seconds).is_finite())
        .collect();
    if steps.len() < MIN_INTERVALS {
        return None;
    }
    let mut kept = vec![true; steps.len()];
    kept[0] = false;
    // Each pass leaves out at least one interval, and never the slowest: this ends.
    while let Some(run) = burst(&steps, &kept) {
        kept[run].fill(false);
    }
    let slope = least_squares(steps.iter().zip(&kept).filter(|(_, k)| **k).map(|(s, _)| s));
    slope.is_finite().then_some(slope)
}

/// The next burst to leave out of the `kept` steps (see the module's comment): the run of
/// consecutive kept steps, each over [`BURST_SPEED`] times their mean pace, that carries the
/// most, if it carries more than [`BURST_SHARE`] of their rise.
fn burst(steps: &[Step], kept: &[bool]) -> Option<Range<usize>> {
    let (mut rise, mut seconds) = (0.0, 0.0);
    for (s, _) in steps.iter().zip(kept).filter(|(_, k)| **k) {
        rise += s.bytes.max(0.0);
        seconds += s.seconds;
    }
    let pace = rise / seconds;
    if pace.is_nan() || pace <= 0.0 {
        return None;
    }
    let fast = |i: usize| kept[i] && steps[i].bytes > BURST_SPEED * pace * steps[i].seconds;
    let mut largest: Option<(f64, Range<usize>)> = None;
    let mut start = 0;
    while start < steps.len() {
        let end = start + (start..steps.len()).take_while(|&i| fast(i)).count();
        let carried: f64 = steps[start..end].iter().map(|s| s.bytes).sum();
        if end > start && largest.as_ref().is_none_or(|(most, _)| carried > *most) {
            largest = Some((carried, start..end));
        }
        start = end + 1;
    }
    largest
        .filter(|(carried, _)| *carried > BURST_SHARE * rise)
        .map(|(_, run)| run)
}

/// The slope of the least-squares line through the usage after each of `steps`, from 0 bytes
/// at 0 s; not finite with no step.
fn least_squares<'a>(steps: impl Iterator<Item = &'a Step>) -> f64 {
    let (mut t, mut y) = (0.0, 0.0);
    let mut points = vec![(t, y)];
    for s in steps {
        t += s.seconds;
        y += s.bytes;
        points.push((t, y));
    }
    let n = points.len() as f64;
    let mean_t = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut sty, mut stt) = (0.0, 0.0);
    for (t, y) in points {
        sty += (t - mean_t) * (y - mean_y);
        stt += (t - mean_t) * (t - mean_t);
    }
    sty / stt
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
#[path = "rate_tests.rs"]
mod tests;
