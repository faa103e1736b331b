//! Offline expansion (`offlineExpansion: evict`): whether to restart, through the Eviction API,
//! the pod of a claim whose node grows the filesystem only at the next mount, and if not, why.
//! Pure: the shells say what they know of the pod, its peers and past refusals.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::inputs::{Action, FailureCause, Inputs, ResizeState};
pub use super::restart_facts::{REFUSED_BACKOFF, REFUSED_BACKOFF_MAX, Refusal, RestartFacts};
use crate::policy::{OfflineExpansion, Policy};

/// A peer evicted less than this ago whose resize has not landed is still restarting: the next
/// member of its group waits for it (one at a time).
pub const PEER_SETTLE: SignedDuration = SignedDuration::from_mins(10);

/// The answer for a claim whose resize waits for a remount. The names are stable: they are the
/// status annotation's `restart` and a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "restart", rename_all = "snake_case")]
pub enum Restart {
    /// Evict the pod now. `switchover`: it is a CloudNativePG primary, whose PodDisruptionBudget
    /// refuses it by design (a refusal then names the switchover to run).
    Evict { switchover: bool },
    /// `offlineExpansion: off`: a person restarts it.
    Off,
    /// The resize in flight is not one headroom made (no history entry for the request): there
    /// is nowhere to record an eviction, so none is made.
    NotOurs,
    /// Evicted once for this resize already (`evicted` on its history entry): never twice.
    Evicted { at: Timestamp },
    /// The node is cordoned or draining: its drain moves the pod.
    NodeDraining,
    /// The PodDisruptionBudget refused the last attempt; the next is not before `retry_at`.
    Refused {
        count: u32,
        #[serde(rename = "retryAt")]
        retry_at: Timestamp,
        /// A CloudNativePG primary: its PDB refuses by design; a switchover is what frees it.
        switchover: bool,
    },
    /// Another member of the group goes first (replicas before the primary, one at a time).
    PeerFirst,
    /// Waiting for the maintenance window (none written: only past the emergency line).
    OutsideWindow {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next: Option<Timestamp>,
    },
}

impl Restart {
    pub const NAMES: [&'static str; 8] = [
        "evict",
        "off",
        "not_ours",
        "evicted",
        "node_draining",
        "refused",
        "peer_first",
        "outside_window",
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Restart::Evict { .. } => "evict",
            Restart::Off => "off",
            Restart::NotOurs => "not_ours",
            Restart::Evicted { .. } => "evicted",
            Restart::NodeDraining => "node_draining",
            Restart::Refused { .. } => "refused",
            Restart::PeerFirst => "peer_first",
            Restart::OutsideWindow { .. } => "outside_window",
        }
    }
}

/// A member of the claim's group or logical volume, as its claim shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerRestart {
    /// Its own agent found its resize waiting for a remount (`awaiting_remount`).
    pub awaiting: bool,
    /// When its pod was evicted for its resize in flight, if it was.
    pub evicted: Option<Timestamp>,
}

/// Whether a peer goes first: anyone waits for a peer evicted less than [`PEER_SETTLE`] ago that
/// has not come back grown (one at a time); a primary also waits for every replica still to be
/// restarted (replicas first).
pub fn peer_first(primary: bool, peers: &[PeerRestart], now: Timestamp) -> bool {
    peers
        .iter()
        .filter(|p| p.awaiting)
        .any(|p| match p.evicted {
            Some(at) => now.duration_since(at) < PEER_SETTLE,
            None => primary,
        })
}

/// The history entry of the resize in flight: the newest, when it asked for the claim's request.
pub fn resize_entry(history: &[Action], request: u64) -> Option<&Action> {
    history
        .iter()
        .max_by_key(|a| a.at)
        .filter(|a| a.to == request && a.to > a.from)
}

/// `None` unless the claim's resize waits for a remount; else whether to evict its pod now.
/// Gates in order: the policy, our own record, the node, a refusal's backoff, the window (or
/// the emergency line), the group's order.
pub fn restart(inputs: &Inputs, policy: &Policy, emergency: bool) -> Option<Restart> {
    let ResizeState::Failed {
        cause: FailureCause::NeedsRemount,
        ..
    } = inputs.claim.resize
    else {
        return None;
    };
    let facts = inputs.facts.restart;
    Some(if policy.offline_expansion == OfflineExpansion::Off {
        Restart::Off
    } else if let Some(entry) = resize_entry(inputs.history, inputs.claim.request_bytes) {
        match entry.evicted {
            Some(at) => Restart::Evicted { at },
            None => when(inputs, policy, emergency, &facts),
        }
    } else {
        Restart::NotOurs
    })
}

fn when(inputs: &Inputs, policy: &Policy, emergency: bool, facts: &RestartFacts) -> Restart {
    let now = inputs.now;
    if inputs.facts.node_draining {
        return Restart::NodeDraining;
    }
    if let Some(r) = facts.refused.filter(|r| r.retry_at() > now) {
        return Restart::Refused {
            count: r.count,
            retry_at: r.retry_at(),
            switchover: facts.primary && facts.cnpg,
        };
    }
    let window = policy.maintenance_window.as_ref();
    let open = window.is_some_and(|w| w.is_open(now));
    let emergency = emergency && policy.emergency_grow.enabled;
    if !(open || emergency) {
        return Restart::OutsideWindow {
            next: window.and_then(|w| w.next_open(now)),
        };
    }
    if facts.peer_first {
        return Restart::PeerFirst;
    }
    Restart::Evict {
        switchover: facts.primary && facts.cnpg,
    }
}

#[cfg(test)]
#[path = "restart_tests.rs"]
mod tests;
