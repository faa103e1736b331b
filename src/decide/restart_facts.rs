//! What the shells know of the pod that mounts a claim, for a restart that finishes its resize
//! (see [`super::restart`]): its role, its peers, its past refusals.

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

/// A refused eviction is tried again after this, doubling with each refusal...
pub const REFUSED_BACKOFF: SignedDuration = SignedDuration::from_mins(1);
/// ...up to this: a PodDisruptionBudget that never allows one costs one request an hour.
pub const REFUSED_BACKOFF_MAX: SignedDuration = SignedDuration::from_hours(1);

/// What the shells know of the pod that mounts the claim, for the order and the refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RestartFacts {
    /// The pod is its Postgres cluster's primary (its operator's role label says so).
    pub primary: bool,
    /// ...of a CloudNativePG cluster, whose own PodDisruptionBudget refuses it by design.
    pub cnpg: bool,
    /// Another member of the claim's group or logical volume goes first: a primary waits for
    /// every replica whose resize waits for its restart; anyone waits for a peer evicted less
    /// than [`super::restart::PEER_SETTLE`] ago that has not come back grown.
    pub peer_first: bool,
    /// The Eviction API refused this pod's eviction for this resize (429: its
    /// PodDisruptionBudget): how often, and when last.
    pub refused: Option<Refusal>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub count: u32,
    pub at: Timestamp,
}

impl Refusal {
    /// When the next attempt may be made: [`REFUSED_BACKOFF`] doubled per earlier refusal, at
    /// most [`REFUSED_BACKOFF_MAX`].
    pub fn retry_at(&self) -> Timestamp {
        let doublings = self.count.saturating_sub(1).min(16);
        let wait = REFUSED_BACKOFF
            .checked_mul(1 << doublings)
            .map_or(REFUSED_BACKOFF_MAX, |w| w.min(REFUSED_BACKOFF_MAX));
        self.at.checked_add(wait).unwrap_or(self.at)
    }
}
