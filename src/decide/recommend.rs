//! `enforcement: recommend | approve`: a grow the engine decided, held for a person. The engine
//! decides as under `act`; [`gate`] then says whether that grow is made, held as a
//! [`Recommendation`], or made to the size a person approved. Pure: the caller reads the claim's
//! annotations and history and passes the time.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{Action, Decision, GrowKind, Measurement};
use crate::policy::{Enforcement, Policy};

/// How long a recommendation stands before it is made again (with a new id): the usage and fill
/// rate it was made on move, so an approval of an older one is refused as stale.
pub const STALE_AFTER: SignedDuration = SignedDuration::from_hours(1);

/// A grow decided but not made, as the status annotation shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recommendation {
    /// What a person approves (`headroom.dev/approve=<id>`): a hash of the claim's uid, the
    /// request it was made on, its size and when it was made, so no later recommendation has it.
    pub id: String,
    pub kind: GrowKind,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub predicted: bool,
    /// The claim's request it was made on: a claim changed since makes it stale.
    pub from_bytes: u64,
    pub to_bytes: u64,
    /// The deadline that motivates it: when the volume is full at its fill rate, if it fills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_percent: Option<u64>,
    pub made_at: Timestamp,
    pub stale_at: Timestamp,
}

/// What became of the last approval given (`headroom.dev/approve`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalNote {
    pub id: String,
    pub executed: bool,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    pub at: Timestamp,
}

/// What the claim says beside its policy: the approval annotation, and what the agent last wrote.
#[derive(Debug, Clone, Copy)]
pub struct Claimed<'a> {
    pub uid: &'a str,
    pub request_bytes: u64,
    /// `headroom.dev/approve`, trimmed; `None` when absent or empty.
    pub approve: Option<&'a str>,
    /// The status annotation's recommendation and approval.
    pub recommendation: Option<&'a Recommendation>,
    pub approval: Option<&'a ApprovalNote>,
    pub history: &'a [Action],
}

/// The gate's answer for a claim not in `act`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Enforced {
    /// The grow waiting for a person (`None`: nothing to grow, or growing now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<Recommendation>,
    /// The last approval given and what became of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalNote>,
    /// The engine's grow is not made this scan.
    pub hold: bool,
    /// An approved recommendation to carry out now: grow to its `to_bytes`, not the engine's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execute: Option<Recommendation>,
}

/// Whether the engine's grow is made. `None` under `act`: the decision stands as it is.
pub fn gate(
    policy: &Policy,
    decision: &Decision,
    measurement: Option<&Measurement>,
    claim: &Claimed,
    now: Timestamp,
) -> Option<Enforced> {
    if policy.enforcement == Enforcement::Act {
        return None;
    }
    let approve = policy.enforcement == Enforcement::Approve;
    let standing = claim
        .recommendation
        .filter(|r| still_valid(r, policy, claim, now).is_ok());
    let mut out = Enforced {
        approval: claim.approval.cloned(),
        ..Enforced::default()
    };
    // A refused approval withdraws the recommendation it named: the next one has a new id.
    let mut withdrawn = None;
    if approve && let Some(id) = claim.approve.map(short).filter(|id| is_new(id, claim)) {
        match approved(&id, claim, policy, decision, now) {
            Ok(rec) => {
                out.approval = Some(note(id, None, now));
                out.execute = Some(rec);
                return Some(out);
            }
            Err(why) => out.approval = Some(note(id.clone(), Some(why), now)),
        }
        withdrawn = Some(id);
    }
    let Some((to, kind)) = decision.grow_to() else {
        return Some(out);
    };
    if approve && policy.emergency_grow.enabled && past_emergency_line(policy, measurement) {
        return Some(out);
    }
    // A member raised to the size its logical volume was already grown to follows that grow:
    // one approval covers every member.
    if approve && kind == GrowKind::GroupGrow && decision.joins.is_some() {
        return Some(out);
    }
    out.hold = true;
    out.recommendation = Some(
        match standing.filter(|r| Some(&r.id) != withdrawn.as_ref()) {
            Some(r) => r.clone(),
            None => made(decision, measurement, claim, (to, kind), now),
        },
    );
    Some(out)
}

/// What a person wrote, only as far as an id can be long: it is echoed in the status.
fn short(text: &str) -> String {
    text.chars().take(ID_CHARS).collect()
}

/// An approval not handled yet: neither executed (its id in the history) nor refused before.
fn is_new(id: &str, claim: &Claimed) -> bool {
    let executed = claim
        .history
        .iter()
        .any(|a| a.approval.as_ref().is_some_and(|p| p.id == id));
    !executed && claim.approval.is_none_or(|n| n.id != id)
}

/// The recommendation `id` names, if it may be carried out now: the claim's current one, still
/// valid, and the engine still deciding a grow (so limit, budget, window and modification
/// interval allow one now).
fn approved(
    id: &str,
    claim: &Claimed,
    policy: &Policy,
    decision: &Decision,
    now: Timestamp,
) -> Result<Recommendation, String> {
    let rec = match claim.recommendation {
        Some(r) if r.id == id => r,
        Some(r) => {
            return Err(format!(
                "not the claim's current recommendation (that is {})",
                r.id
            ));
        }
        None => return Err("the claim has no recommendation waiting".to_string()),
    };
    still_valid(rec, policy, claim, now)?;
    match decision.verdict {
        super::Verdict::Grow { .. } => Ok(rec.clone()),
        super::Verdict::Blocked { reason } => Err(format!("growth is blocked now: {reason}")),
        super::Verdict::NoAction { state } => Err(format!(
            "no grow is needed any more (state {})",
            state.as_str()
        )),
    }
}

fn still_valid(
    rec: &Recommendation,
    policy: &Policy,
    claim: &Claimed,
    now: Timestamp,
) -> Result<(), String> {
    use crate::quantity::format as q;
    if now >= rec.stale_at {
        return Err(format!("stale since {}", rec.stale_at));
    }
    if rec.from_bytes != claim.request_bytes {
        return Err(format!(
            "the claim changed since: its request is {}, the recommendation was made at {}",
            q(claim.request_bytes),
            q(rec.from_bytes)
        ));
    }
    if rec.to_bytes > policy.limit {
        return Err(format!(
            "{} is above the limit of {}",
            q(rec.to_bytes),
            q(policy.limit)
        ));
    }
    Ok(())
}

fn made(
    decision: &Decision,
    measurement: Option<&Measurement>,
    claim: &Claimed,
    (to, kind): (u64, GrowKind),
    now: Timestamp,
) -> Recommendation {
    let full_at = decision
        .seconds_to_full
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e9)
        .and_then(|s| now.checked_add(SignedDuration::from_secs(s as i64)).ok());
    Recommendation {
        id: id_of(claim.uid, claim.request_bytes, to, now),
        kind,
        predicted: decision.predicted,
        from_bytes: claim.request_bytes,
        to_bytes: to,
        full_at,
        used_percent: measurement.map(|m| m.used_percent().clamp(0.0, 100.0).round() as u64),
        made_at: now,
        stale_at: now.checked_add(STALE_AFTER).unwrap_or(now),
    }
}

fn note(id: String, refused: Option<String>, now: Timestamp) -> ApprovalNote {
    ApprovalNote {
        id,
        executed: refused.is_none(),
        refused,
        at: now,
    }
}

fn past_emergency_line(policy: &Policy, measurement: Option<&Measurement>) -> bool {
    let e = &policy.emergency_grow;
    measurement.is_some_and(|m| {
        m.crosses(
            f64::from(e.critical_threshold),
            e.critical_minimum_free,
            f64::INFINITY,
        )
    })
}

const ID_CHARS: usize = 12;

/// FNV-1a over what makes the recommendation, as 12 hex digits: short enough to type, stable
/// across agent versions (it is stored, and compared as text).
fn id_of(uid: &str, from: u64, to: u64, at: Timestamp) -> String {
    let text = format!("{uid}/{from}/{to}/{}", at.as_millisecond());
    format!("{:012x}", fnv1a(&text) >> 16)
}

/// FNV-1a (64 bit) of `text`: the same on every agent and every version, unlike std's hasher,
/// for names and ids that several agents must agree on.
pub fn fnv1a(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
#[path = "recommend_tests.rs"]
mod tests;
