//! What `/ready` and `/live` answer, from what the agent reports as it runs: watch failures, API
//! requests waiting for an answer, scans that succeeded or failed. Time is passed in.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// A failing watch retries at least this often; one silent this long after its last error, while
/// the API server answers, has reconnected (kube's watcher resumes a watch without an event).
/// The watch layer keeps to it; readiness counts on it.
pub const RETRY_QUIET: Duration = Duration::from_secs(20);

/// A scan older than this many intervals makes the agent unready.
pub const STALE_INTERVALS: u32 = 3;

/// A watch failing (or an API request unanswered) for longer than this many intervals makes the
/// agent unready; shorter failures are the watcher's backoff doing its job.
pub const WATCH_GRACE_INTERVALS: u32 = 2;

/// The scan loop not finishing an iteration for this many intervals makes the agent not live:
/// every call in a scan has a deadline, so a loop this late is wedged and a restart helps.
pub const LIVE_INTERVALS: u32 = 6;

/// Why the agent is not ready, or that it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    NotSynced,
    /// A watch has been failing since `since`, longer than the grace.
    WatchLost {
        watcher: String,
        since: Timestamp,
    },
    /// A request (a watch's, typically) has waited for the API server since `since`, longer
    /// than the grace: the server accepts connections but does not answer.
    ApiUnanswered {
        since: Timestamp,
    },
    NoScanYet,
    Stale {
        last_scan: Timestamp,
    },
}

/// Whether the scan loop is turning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Live,
    /// No iteration finished since `since` (the last one, or the loop's start).
    Wedged {
        since: Timestamp,
    },
}

#[derive(Default)]
struct State {
    synced: bool,
    last_scan: Option<Timestamp>,
    /// The scan loop's start, then the end of its latest iteration (successful or not).
    last_iteration: Option<Timestamp>,
    /// Watches that failed and have not yielded an event since: (first, latest) failure.
    watch_failing: BTreeMap<String, (Timestamp, Timestamp)>,
    /// The last time the API server answered a request with success.
    api_ok: Option<Timestamp>,
    /// Requests waiting for their response head, by token, with when they were sent.
    unanswered: BTreeMap<u64, Timestamp>,
    next_token: u64,
}

pub struct Health {
    interval: Duration,
    state: Mutex<State>,
}

/// kube's watcher resumes a watch after an error without yielding an event, so a watch whose
/// retries stopped failing is only seen by its silence: no error for longer than its retries
/// are apart, and the API server has answered since.
fn recovered_silently(last_error: Timestamp, api_ok: Option<Timestamp>, now: Timestamp) -> bool {
    let quiet = SignedDuration::try_from(RETRY_QUIET).unwrap_or(SignedDuration::MAX);
    api_ok.is_some_and(|ok| ok > last_error) && now.duration_since(last_error) > quiet
}

impl Health {
    /// `interval`: the scan interval, the unit of every grace.
    pub fn new(interval: Duration) -> Self {
        Health {
            interval,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn intervals(&self, n: u32) -> SignedDuration {
        SignedDuration::try_from(self.interval.saturating_mul(n)).unwrap_or(SignedDuration::MAX)
    }

    pub fn set_synced(&self, synced: bool) {
        self.state().synced = synced;
    }

    pub fn last_scan(&self) -> Option<Timestamp> {
        self.state().last_scan
    }

    pub fn scan_succeeded(&self, at: Timestamp) {
        let mut s = self.state();
        s.last_scan = Some(at);
        s.last_iteration = Some(at);
    }

    pub fn scan_failed(&self, at: Timestamp) {
        self.state().last_iteration = Some(at);
    }

    pub fn loop_started(&self, now: Timestamp) {
        self.state().last_iteration.get_or_insert(now);
    }

    /// The first failure since the watch last worked starts its clock.
    pub fn watch_failed(&self, watcher: &str, now: Timestamp) {
        let mut s = self.state();
        let api_ok = s.api_ok;
        let entry = s
            .watch_failing
            .entry(watcher.to_string())
            .or_insert((now, now));
        if recovered_silently(entry.1, api_ok, now) {
            *entry = (now, now);
        }
        entry.1 = now;
    }

    pub fn watch_ok(&self, watcher: &str) {
        let mut s = self.state();
        if !s.watch_failing.is_empty() {
            s.watch_failing.remove(watcher);
        }
    }

    pub fn request_sent(&self, now: Timestamp) -> u64 {
        let mut s = self.state();
        s.next_token = s.next_token.wrapping_add(1);
        let token = s.next_token;
        s.unanswered.insert(token, now);
        token
    }

    /// `status`: the answer's (0 for none), or `None` when the caller gave up waiting.
    pub fn request_ended(&self, token: u64, status: Option<u16>, now: Timestamp) {
        let mut s = self.state();
        s.unanswered.remove(&token);
        if status.is_some_and(|code| (200..300).contains(&code)) {
            s.api_ok = Some(now);
        }
    }

    pub fn readiness(&self, now: Timestamp) -> Readiness {
        let s = self.state();
        if !s.synced {
            return Readiness::NotSynced;
        }
        let grace = self.intervals(WATCH_GRACE_INTERVALS);
        if let Some((watcher, (since, _))) = s
            .watch_failing
            .iter()
            .filter(|(_, (_, last))| !recovered_silently(*last, s.api_ok, now))
            .filter(|(_, (since, _))| now.duration_since(*since) > grace)
            .min_by_key(|(_, (since, _))| *since)
        {
            return Readiness::WatchLost {
                watcher: watcher.clone(),
                since: *since,
            };
        }
        if let Some(since) = s.unanswered.values().min()
            && now.duration_since(*since) > grace
        {
            return Readiness::ApiUnanswered { since: *since };
        }
        let Some(last) = s.last_scan else {
            return Readiness::NoScanYet;
        };
        if now.duration_since(last) > self.intervals(STALE_INTERVALS) {
            Readiness::Stale { last_scan: last }
        } else {
            Readiness::Ready
        }
    }

    pub fn liveness(&self, now: Timestamp) -> Liveness {
        match self.state().last_iteration {
            Some(since) if now.duration_since(since) > self.intervals(LIVE_INTERVALS) => {
                Liveness::Wedged { since }
            }
            _ => Liveness::Live,
        }
    }
}
