//! From a claim's objects and what was measured to the engine's inputs, and back to a report:
//! the claim's policy (its layers merged and validated), its Postgres role, its history, the
//! resize it has in flight, and which lines the fast loop wakes for. Pure: the agent, `simulate`
//! and the tests all resolve a volume the same way, with time as an argument.

pub mod evaluate;
pub mod inflight;
pub mod logical;
pub mod trigger;

use jiff::{SignedDuration, Timestamp};

use crate::decide::Measurement;

pub use evaluate::{Evaluation, Prepared, Subject, evaluate, prepare};

/// The kubelet's numbers older than this are not used at all.
pub const MAX_AGE: SignedDuration = SignedDuration::from_mins(5);

/// One claim's numbers as the kubelet last measured them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KubeletVolume {
    pub measurement: Measurement,
    pub at: Option<Timestamp>,
}

impl KubeletVolume {
    /// Usable as a fallback at `now`: dated, and not older than [`MAX_AGE`].
    pub fn fresh(&self, now: Timestamp) -> bool {
        self.at
            .is_some_and(|at| crate::decide::budget::minus(now, MAX_AGE) <= at)
    }
}
