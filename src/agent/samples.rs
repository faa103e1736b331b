//! Each volume's recent usage samples, from the scans and the fast measurement loop, for the
//! fill-rate estimate (`decide::rate`). In memory only: after a restart the estimate needs a few
//! seconds of fresh samples, and until then the predictive trigger simply does not fire.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::decide::rate::{self, Sample};

/// Samples closer together than this add noise, not information: a scan and a fast-loop pass
/// may measure the same volume within milliseconds.
const MIN_SPACING: Duration = Duration::from_millis(200);

/// Looked up once per volume per measurement; see [`crate::probe::bounded`] for the hasher.
type Series = HashMap<PathBuf, VecDeque<Sample>, foldhash::fast::RandomState>;

pub struct Samples {
    origin: Instant,
    series: Mutex<Series>,
}

impl Default for Samples {
    fn default() -> Self {
        Samples {
            origin: Instant::now(),
            series: Mutex::default(),
        }
    }
}

impl Samples {
    fn lock(&self) -> MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `used_bytes` measured at `at`; returns the estimated fill rate (bytes per second)
    /// with it, if there are enough samples.
    pub fn record(&self, path: &Path, used_bytes: u64, at: Instant) -> Option<f64> {
        let seconds = at.saturating_duration_since(self.origin).as_secs_f64();
        let mut series = self.lock();
        // One lookup and no key allocation for a volume already known (every pass).
        let s = match series.get_mut(path) {
            Some(s) => s,
            None => series.entry(path.to_path_buf()).or_default(),
        };
        let spaced = s
            .back()
            .is_none_or(|last| seconds - last.seconds >= MIN_SPACING.as_secs_f64());
        if spaced {
            if s.len() == rate::MAX_SAMPLES {
                s.pop_front();
            }
            s.push_back(Sample {
                seconds,
                used_bytes,
            });
        }
        rate::estimate(s.make_contiguous())
    }

    /// Forgets volumes no longer mounted here.
    pub fn retain(&self, keep: impl Fn(&Path) -> bool) {
        self.lock().retain(|p, _| keep(p));
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_fill_gives_its_rate_and_close_samples_are_one() {
        let s = Samples::default();
        let p = Path::new("/v");
        let t0 = s.origin;
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let (mut last, mut close) = (None, None);
        for i in 0..(rate::MIN_INTERVALS as u64 + 1) {
            last = s.record(p, 1_000 + 500 * i, at(1_000 * i));
            // A second measurement 10 ms later is not a sample of its own.
            close = s.record(p, 9_999_999, at(1_000 * i + 10));
        }
        assert_eq!(last, Some(500.0));
        assert_eq!(close, Some(500.0));
        let other = Path::new("/other");
        assert_eq!(s.record(other, 1, at(0)), None);
        s.retain(|q| q != p && q != other);
        assert!(s.is_empty());
    }

    #[test]
    fn the_series_is_bounded() {
        let s = Samples::default();
        let p = Path::new("/v");
        let mut last = None;
        for i in 0..(3 * rate::MAX_SAMPLES as u64) {
            last = s.record(p, i, s.origin + Duration::from_secs(i));
        }
        assert_eq!(s.lock()[p].len(), rate::MAX_SAMPLES);
        assert_eq!(last, Some(1.0));
    }
}
