//! Logical volumes: the claims of one database cluster and role (or one StatefulSet template, or
//! one `headroom.dev/group`) share one budget and one history. Each member keeps its own history
//! on its own claim; an entry names the logical action it belongs to, and the budget counts
//! distinct actions across every member's history. A replaced or new member thus inherits what
//! its peers spent, with no central store.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::decision::BlockReason;
use super::inputs::{Action, GrowKind, Inputs};
pub use super::inputs::{ActionId, Logical};
use crate::policy::Policy;

/// One member of a logical volume as the engine needs it: its request and parsed history.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub request: u64,
    pub history: &'a [Action],
}

impl Logical {
    /// Distinct actions at `now` within the 24 h window.
    pub fn used(&self, now: Timestamp) -> u32 {
        let since = super::budget::minus(now, super::budget::WINDOW);
        let n = super::budget::counted(&self.actions, now)
            .filter(|a| a.at > since)
            .count();
        n.min(u32::MAX as usize) as u32
    }
}

/// Members of one volume fill together (they hold the same data): two agents may each grow their
/// own member before either sees the other's write. Grows this close together from the same size
/// or to the same size are that one resize, decided by both (each from its own member's fill
/// rate, so not always to one size): counted once, as every member following one action is.
pub const CONCURRENT: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// `actions` (sorted by time) with concurrent grows (see [`CONCURRENT`]) counted once. Entries
/// without an id and lowered retries stay actions of their own.
fn merge_concurrent(actions: Vec<Action>) -> Vec<Action> {
    let mut out: Vec<Action> = Vec::with_capacity(actions.len());
    for a in actions {
        let same = |b: &Action| {
            b.action.is_some()
                && b.kind != GrowKind::Retry
                && (b.to == a.to || b.from == a.from)
                && a.at.duration_since(b.at) <= CONCURRENT
        };
        let mergeable = a.action.is_some() && a.kind != GrowKind::Retry;
        if !(mergeable && out.iter().rev().any(same)) {
            out.push(a);
        }
    }
    out
}

/// An entry without an action id (written before logical volumes, or by a claim in none) is an
/// action of its own: keyed by its member and position, it never merges with another.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Id(ActionId),
    Own(usize, usize),
}

/// The logical volume of `own` (member 0) with `peers`: distinct actions, size and the action
/// that set it.
pub fn combine(own: Member, peers: &[Member]) -> Logical {
    let members: Vec<&Member> = std::iter::once(&own).chain(peers).collect();
    let mut first: BTreeMap<Key, &Action> = BTreeMap::new();
    for (m, member) in members.iter().enumerate() {
        for (i, a) in member.history.iter().enumerate() {
            let key = a.action.clone().map_or(Key::Own(m, i), Key::Id);
            first
                .entry(key)
                .and_modify(|e| {
                    if a.at < e.at {
                        *e = a;
                    }
                })
                .or_insert(a);
        }
    }
    let mut actions: Vec<Action> = first.into_values().cloned().collect();
    actions.sort_by_key(|a| a.at);
    let actions = merge_concurrent(actions);
    let size = members.iter().map(|m| m.request).max().unwrap_or(0);
    let source = members
        .iter()
        .filter(|m| m.request == size)
        .flat_map(|m| m.history.iter())
        .filter(|a| a.to == size && a.kind != GrowKind::Retry)
        .max_by_key(|a| a.at)
        .and_then(|a| a.action.clone());
    let joined = source
        .as_ref()
        .is_some_and(|id| own.history.iter().any(|a| a.action.as_ref() == Some(id)));
    Logical {
        actions,
        size,
        source,
        joined,
    }
}

/// A member below the volume's size that cannot follow it, and why (from its own status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotFollowing {
    pub claim: String,
    pub reason: BlockReason,
}

/// The logical volume as the status, `/volumes` and `headroom status` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogicalView {
    /// The volume's identity, for people (`cnpg/pg/data`).
    pub name: String,
    pub members: u32,
    /// The largest request among the members.
    pub size_bytes: u64,
    /// Distinct logical actions in the rolling 24 h, across every member.
    pub actions_last_24h: u32,
    /// The action that set the size, when a member's history shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_following: Vec<NotFollowing>,
}

/// The actions the budget and cooldown count: the logical volume's distinct actions when the
/// claim shares them, else its own history.
pub(super) fn budget_history<'a>(inputs: &Inputs<'a>) -> &'a [Action] {
    inputs
        .logical
        .map_or(inputs.history, |l| l.actions.as_slice())
}

/// The counted logical action a group raise of this claim would join: such a raise is part of
/// that action (its slot is spent), so neither cooldown nor budget holds it.
pub(super) fn joining<'a>(inputs: &Inputs<'a>) -> Option<&'a ActionId> {
    inputs.logical.and_then(|l| l.joins())
}

/// The size a member may still be raised to when its own growth is held by the budget: its
/// peers' (within its limit), when that joins a counted action and no gate of a group raise
/// (window, drain) holds it.
pub(super) fn follow(inputs: &Inputs, policy: &Policy) -> Option<u64> {
    joining(inputs)?;
    let window_closed = policy
        .maintenance_window
        .as_ref()
        .is_some_and(|w| !w.is_open(inputs.now));
    if window_closed || inputs.facts.node_draining {
        return None;
    }
    let size = inputs.facts.group_size?.min(policy.limit);
    (size > inputs.claim.current_bytes()).then_some(size)
}

#[cfg(test)]
#[path = "logical_tests.rs"]
mod tests;
