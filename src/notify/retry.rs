//! When to try a message again: pure, with the time elapsed passed in.

use std::time::Duration;

/// How a sink answered one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 2xx.
    Delivered,
    /// Worth trying again: no connection, no answer in time, 408, 429, 5xx.
    Transient,
    /// The sink refuses this request and would refuse it again (other 4xx, a redirect).
    Refused,
}

impl Answer {
    pub fn of_status(status: u16) -> Answer {
        match status {
            200..=299 => Answer::Delivered,
            408 | 429 | 500..=599 => Answer::Transient,
            _ => Answer::Refused,
        }
    }
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Sent,
    /// Given up: refused, or not delivered within `retry_for` of being queued.
    Failed,
    /// Try again after this long.
    Wait(Duration),
}

/// Exponential backoff: `base`, doubled per attempt, at most `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The wait after the `attempt`-th failed attempt (1 for the first).
    pub fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(30);
        self.base.saturating_mul(1 << doublings).min(self.max)
    }

    /// After `attempt` attempts, the last answered `answer`, `elapsed` since the message was
    /// queued: send no more, or wait. A wait that would end past `retry_for` is not started.
    pub fn next(
        &self,
        answer: Answer,
        attempt: u32,
        elapsed: Duration,
        retry_for: Duration,
    ) -> Step {
        match answer {
            Answer::Delivered => Step::Sent,
            Answer::Refused => Step::Failed,
            Answer::Transient => {
                let wait = self.delay(attempt);
                if elapsed.saturating_add(wait) > retry_for {
                    Step::Failed
                } else {
                    Step::Wait(wait)
                }
            }
        }
    }
}
