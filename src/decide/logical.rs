//! Logical volumes: the claims of one database cluster and role (or one StatefulSet template, or
//! one `headroom.dev/group`) share one budget and one history. Each member keeps its own history
//! on its own claim; an entry names the logical action it belongs to, and the budget counts
//! distinct actions across every member's history. A replaced or new member thus inherits what
//! its peers spent, with no central store.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::decision::BlockReason;
use super::inputs::{Action, GrowKind};

/// Names the logical action a history entry belongs to: the acting claim's uid (its first
/// characters) and the action's time, so two agents never mint the same id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ActionId(String);

/// Characters of the claim's uid kept in an id: enough to tell the members of one volume apart.
const UID_CHARS: usize = 8;

impl ActionId {
    pub fn new(claim_uid: &str, at: Timestamp) -> Self {
        let uid: String = claim_uid.chars().take(UID_CHARS).collect();
        ActionId(format!("{uid}-{}", at.as_second()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ActionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One member of a logical volume as the engine needs it: its request and parsed history.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub request: u64,
    pub history: &'a [Action],
}

/// What the engine is told about the claim's logical volume.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Logical {
    /// One entry per distinct logical action across every member's history (the action's
    /// first entry, whose time is the action's). The budget and cooldown count these.
    pub actions: Vec<Action>,
    /// The largest request among the members, this claim included.
    pub size: u64,
    /// The action that set `size`: the newest grow to it in the history of a member at it.
    /// `None` when no member's history shows one (a request edited by hand, an entry written
    /// before logical volumes): a raise to it is then an action of its own.
    pub source: Option<ActionId>,
    /// This claim's own history already has an entry of `source`: it followed that action once
    /// and does not follow it again.
    pub joined: bool,
}

impl Logical {
    /// The action a group raise of this claim belongs to, when it joins one already counted.
    pub fn joins(&self) -> Option<&ActionId> {
        self.source.as_ref().filter(|_| !self.joined)
    }

    /// Distinct actions at `now` within the 24 h window.
    pub fn used(&self, now: Timestamp) -> u32 {
        let since = super::budget::minus(now, super::budget::WINDOW);
        let n = super::budget::counted(&self.actions, now)
            .filter(|a| a.at > since)
            .count();
        n.min(u32::MAX as usize) as u32
    }
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

#[cfg(test)]
#[path = "logical_tests.rs"]
mod tests;
