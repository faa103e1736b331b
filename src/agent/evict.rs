//! Offline expansion's one write that is not to a claim: the eviction of the pod that mounts it
//! (`pods/eviction` create, never a delete), so its PodDisruptionBudget decides. The engine says
//! when ([`crate::decide::restart`]); this carries it out, records it on the resize's history
//! entry (never twice for one resize), and remembers refusals for their backoff.
//!
//! kube 5's `Api::evict` sends no `apiVersion` in the body, so the server reads it as the
//! eviction subresource's own version: `policy/v1beta1` on 1.20, `policy/v1` from 1.22 on.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::EvictParams;
use kube::{Api, Client};

use crate::decide::restart::{Refusal, Restart};
use crate::decide::{Action, ActionResult};
use crate::quantity;
use crate::report::VolumeReport;

/// What this agent did about one resize's pod, by claim and request (`ns/name@bytes`): a new
/// resize starts clean. The durable record is on the claim; this covers the moment between the
/// eviction and that record's write.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Memo {
    pub(super) evicted: Option<Timestamp>,
    pub(super) refused: Option<Refusal>,
}

#[derive(Default)]
pub(super) struct Memos(Mutex<HashMap<String, Memo>>);

impl Memos {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Memo>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn get(&self, key: &str) -> Memo {
        self.lock().get(key).copied().unwrap_or_default()
    }

    fn update(&self, key: &str, f: impl FnOnce(&mut Memo)) {
        f(self.lock().entry(key.to_string()).or_default());
    }

    /// Forgets claims no longer on this node (`keep` is given the claim's `ns/name`).
    pub(super) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock()
            .retain(|k, _| keep(k.rsplit_once('@').map_or(k.as_str(), |(c, _)| c)));
    }
}

/// The memo key of a resize to `request` bytes of claim `claim` (`ns/name`).
pub(super) fn claim_key(claim: &str, request: u64) -> String {
    format!("{claim}@{request}")
}

/// The memo key of the resize in flight on `report`'s claim.
pub(super) fn memo_key(report: &VolumeReport) -> String {
    let claim = format!("{}/{}", report.namespace, report.pvc);
    claim_key(&claim, report.claim.request_bytes)
}

/// How an eviction went.
#[derive(Debug)]
pub(super) enum Outcome {
    Evicted,
    /// 429: the PodDisruptionBudget allows no disruption now.
    Refused(String),
    /// Anything else (no RBAC for `pods/eviction`, the pod gone, no answer in time).
    Failed(String),
}

pub(super) async fn evict(client: &Client, ns: &str, pod: &str, timeout: Duration) -> Outcome {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    match tokio::time::timeout(timeout, api.evict(pod, &EvictParams::default())).await {
        Ok(Ok(_)) => Outcome::Evicted,
        Ok(Err(kube::Error::Api(s))) if s.code == 429 => Outcome::Refused(s.message.clone()),
        Ok(Err(e)) => Outcome::Failed(e.to_string()),
        Err(_) => Outcome::Failed(format!("no answer within {timeout:?}")),
    }
}

/// Records the outcome in the memo; the restart the status then shows.
pub(super) fn remember(
    memos: &Memos,
    key: &str,
    outcome: &Outcome,
    switchover: bool,
    now: Timestamp,
) -> Restart {
    match outcome {
        Outcome::Evicted => {
            memos.update(key, |m| m.evicted = Some(now));
            Restart::Evicted { at: now }
        }
        Outcome::Refused(_) | Outcome::Failed(_) => {
            let mut refusal = Refusal { count: 1, at: now };
            memos.update(key, |m| {
                refusal.count = m.refused.map_or(1, |r| r.count.saturating_add(1));
                m.refused = Some(refusal);
            });
            Restart::Refused {
                count: refusal.count,
                retry_at: refusal.retry_at(),
                switchover,
            }
        }
    }
}

/// The history with the resize's entry marked evicted at `at`; `None` when it has no entry for
/// the request in flight (the engine then never says evict).
pub(super) fn recorded(history: &[Action], request: u64, at: Timestamp) -> Option<Vec<Action>> {
    let entry = crate::decide::restart::resize_entry(history, request)?.clone();
    Some(
        history
            .iter()
            .map(|a| {
                if *a == entry {
                    Action {
                        evicted: Some(at),
                        result: a.result.or(Some(ActionResult::Requested)),
                        ..a.clone()
                    }
                } else {
                    a.clone()
                }
            })
            .collect(),
    )
}

/// What the Event says of an outcome.
pub(super) fn note(
    report: &VolumeReport,
    pod: &str,
    outcome: &Outcome,
    restart: &Restart,
) -> (bool, &'static str, String) {
    let to = quantity::format(report.claim.request_bytes);
    match (outcome, restart) {
        (Outcome::Evicted, _) => (
            false,
            "PodEvicted",
            format!(
                "evicted pod {pod} to finish the resize to {to}: its CSI driver grows the filesystem when the volume is mounted again (offlineExpansion: evict)"
            ),
        ),
        (
            Outcome::Refused(why),
            Restart::Refused {
                retry_at,
                switchover,
                ..
            },
        ) => {
            let next = if *switchover {
                format!(
                    "it is its CloudNativePG cluster's primary, whose PodDisruptionBudget refuses it by design: run the switchover (kubectl cnpg promote <cluster> <replica>), and the former primary is restarted next; no failover is forced. Next try at {retry_at}"
                )
            } else {
                format!("next try at {retry_at}")
            };
            (
                true,
                "EvictionRefused",
                format!(
                    "eviction of pod {pod} (to finish the resize to {to}) refused by its PodDisruptionBudget: {why}; {next}"
                ),
            )
        }
        (Outcome::Failed(why), Restart::Refused { retry_at, .. }) => (
            true,
            "EvictionFailed",
            format!(
                "could not evict pod {pod} (to finish the resize to {to}): {why}; the agent needs pods/eviction create (overlays/offline-expansion); next try at {retry_at}"
            ),
        ),
        (Outcome::Refused(why) | Outcome::Failed(why), _) => (
            true,
            "EvictionFailed",
            format!("could not evict pod {pod}: {why}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::GrowKind;
    use crate::quantity::GI;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("ts")
    }

    /// Each refusal counts up and pushes the next try further; an eviction is remembered for
    /// its resize only, and a claim gone from the node is forgotten.
    #[test]
    fn refusals_count_up_and_memos_follow_their_resize() {
        let memos = Memos::default();
        let (key, now) = ("db/pg-1@12884901888", ts("2026-03-01T03:00:00Z"));
        let refused = || Outcome::Refused("Cannot evict pod".into());
        let first = remember(&memos, key, &refused(), false, now);
        let later = now + jiff::SignedDuration::from_mins(1);
        let second = remember(&memos, key, &refused(), true, later);
        assert_eq!(
            (first, second),
            (
                Restart::Refused {
                    count: 1,
                    retry_at: now + jiff::SignedDuration::from_mins(1),
                    switchover: false
                },
                Restart::Refused {
                    count: 2,
                    retry_at: later + jiff::SignedDuration::from_mins(2),
                    switchover: true
                }
            )
        );
        assert_eq!(memos.get(key).refused.map(|r| r.count), Some(2));
        assert_eq!(memos.get("db/pg-1@16106127360").refused, None);
        remember(&memos, key, &Outcome::Evicted, false, later);
        assert_eq!(memos.get(key).evicted, Some(later));
        memos.retain(|claim| claim == "db/pg-2");
        assert_eq!(memos.get(key).evicted, None);
    }

    /// Only the resize in flight's entry is marked, and only when there is one.
    #[test]
    fn the_record_marks_the_resize_in_flight() {
        let old = Action::new(ts("2026-02-01T03:00:00Z"), GrowKind::Grow, 8 * GI, 10 * GI);
        let new = Action::new(ts("2026-03-01T03:00:00Z"), GrowKind::Grow, 10 * GI, 12 * GI);
        let at = ts("2026-03-01T03:30:00Z");
        let h = recorded(&[old.clone(), new.clone()], 12 * GI, at).expect("recorded");
        assert_eq!(h[0], old);
        assert_eq!(h[1].evicted, Some(at));
        assert_eq!(h[1].result, Some(ActionResult::Requested));
        assert_eq!(recorded(&[old], 12 * GI, at), None);
    }
}
