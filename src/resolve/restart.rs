//! What the engine is told for a restart that finishes a resize (`offlineExpansion: evict`):
//! the pod's role by its operator's labels, and its peers' restarts from their claims.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::decide::restart::{self, PeerRestart, Refusal, RestartFacts};
use crate::decide::{ActionResult, BlockReason};
use crate::k8s::logical::Peers;
use crate::k8s::roles::{self, Operator};

/// The pod's role and its peers' restarts, for the order of restarts (replicas first, one at a
/// time), and the last refusal, for its backoff.
pub fn facts(
    pod: &Pod,
    logical: Option<&Peers>,
    refused: Option<Refusal>,
    now: Timestamp,
) -> RestartFacts {
    let primary = roles::primary_of(pod);
    let peers: Vec<PeerRestart> = logical
        .iter()
        .flat_map(|l| l.peers.iter())
        .map(|p| {
            let entry = p
                .history
                .as_ref()
                .ok()
                .and_then(|h| restart::resize_entry(h, p.request));
            // Its own agent's status lags a scan behind: a resize of its not yet seen landed
            // counts too, or a primary deciding in the same scan as its replica goes first.
            let unlanded = entry
                .is_some_and(|a| a.landed.is_none() && a.result == Some(ActionResult::Requested));
            PeerRestart {
                awaiting: p.blocked == Some(BlockReason::AwaitingRemount) || unlanded,
                evicted: entry.and_then(|a| a.evicted),
            }
        })
        .collect();
    RestartFacts {
        primary: primary.is_some(),
        cnpg: primary == Some(Operator::CloudNativePG),
        peer_first: restart::peer_first(primary.is_some(), &peers, now),
        refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{Action, GrowKind};
    use crate::k8s::logical::{LogicalVolume, Owner, Peer, Role};
    use crate::quantity::GI;

    fn pod(labels: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pg-1", "namespace": "db", "labels": labels},
        }))
        .expect("pod")
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("ts")
    }

    #[test]
    fn each_operators_primary_label_and_nothing_else() {
        let now = ts("2026-03-01T03:30:00Z");
        for (labels, primary, cnpg) in [
            (
                serde_json::json!({"cnpg.io/instanceRole": "primary"}),
                true,
                true,
            ),
            (serde_json::json!({"role": "primary"}), true, true),
            (
                serde_json::json!({"cnpg.io/instanceRole": "replica"}),
                false,
                false,
            ),
            (serde_json::json!({"spilo-role": "master"}), true, false),
            (serde_json::json!({"spilo-role": "replica"}), false, false),
            (
                serde_json::json!({"postgres-operator.crunchydata.com/role": "master"}),
                true,
                false,
            ),
            (
                serde_json::json!({"postgres-operator.crunchydata.com/role": "replica"}),
                false,
                false,
            ),
            (serde_json::json!({"spilo-role": "master\n"}), false, false),
            (serde_json::json!({}), false, false),
        ] {
            let f = facts(&pod(labels.clone()), None, None, now);
            assert_eq!((f.primary, f.cnpg), (primary, cnpg), "{labels}");
        }
    }

    /// A primary waits for a replica still to be restarted; a replica does not wait for the
    /// primary; anyone waits for a peer evicted minutes ago that has not come back grown.
    #[test]
    fn peers_go_first_in_order() {
        let now = ts("2026-03-01T03:30:00Z");
        let waiting = |evicted: Option<&str>| {
            let mut a = Action::new(ts("2026-03-01T03:00:00Z"), GrowKind::Grow, 10 * GI, 12 * GI);
            a.evicted = evicted.map(ts);
            Peer {
                name: "pg-2".into(),
                request: 12 * GI,
                history: Ok(vec![a]),
                blocked: Some(BlockReason::AwaitingRemount),
                node: None,
            }
        };
        let peers = |p: Peer| Peers {
            id: LogicalVolume {
                namespace: "db".into(),
                owner: Owner::CloudNativePG {
                    cluster: "pg".into(),
                },
                role: Role::Data,
            },
            peers: vec![p],
        };
        let primary = pod(serde_json::json!({"cnpg.io/instanceRole": "primary"}));
        let replica = pod(serde_json::json!({"cnpg.io/instanceRole": "replica"}));
        let not_evicted = peers(waiting(None));
        assert!(facts(&primary, Some(&not_evicted), None, now).peer_first);
        assert!(!facts(&replica, Some(&not_evicted), None, now).peer_first);
        let restarting = peers(waiting(Some("2026-03-01T03:25:00Z")));
        assert!(facts(&replica, Some(&restarting), None, now).peer_first);
        assert!(facts(&primary, Some(&restarting), None, now).peer_first);
        // Evicted long ago and still waiting: it needs a person, not the others' patience.
        let stale = peers(waiting(Some("2026-03-01T03:00:00Z")));
        assert!(!facts(&primary, Some(&stale), None, now).peer_first);
        // A peer whose resize landed waits for nothing.
        let mut done = waiting(None);
        done.blocked = None;
        if let Ok(h) = done.history.as_mut() {
            h[0].landed = Some(ts("2026-03-01T03:20:00Z"));
        }
        assert!(!facts(&primary, Some(&peers(done)), None, now).peer_first);
        // One whose own agent has not said yet, its resize not seen landed: it goes first.
        let mut unsaid = waiting(None);
        unsaid.blocked = Some(BlockReason::ResizeInProgress);
        if let Ok(h) = unsaid.history.as_mut() {
            h[0].result = Some(ActionResult::Requested);
        }
        assert!(facts(&primary, Some(&peers(unsaid)), None, now).peer_first);
    }
}
