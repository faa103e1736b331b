//! A claim's logical volume resolved for the engine: whether its policy shares budget and
//! history with the volume (`logicalVolume`), the distinct actions of every member, the size and
//! the action that set it, and which members cannot follow. Pure: the shell passes the members'
//! claims as read from its watch.

use jiff::Timestamp;

use crate::decide::logical::{self, ActionId, Logical, LogicalView, Member, NotFollowing};
use crate::decide::{Action, BlockReason};
use crate::k8s::logical::Peers;
use crate::policy::validate::Finding;
use crate::policy::{LogicalVolume, Policy};

/// The claim's share of its logical volume, when its policy turns sharing on.
#[derive(Debug, Clone, PartialEq)]
pub struct Shared {
    pub name: String,
    pub members: u32,
    pub logical: Logical,
    /// The id a new action of this claim records: its uid and the time of the decision.
    pub new_action: ActionId,
    /// Members below the volume's size that their own agents found blocked.
    pub not_following: Vec<NotFollowing>,
}

/// Does `policy` share budget and history with the volume `peers` describes?
pub fn is_on(policy: &Policy, peers: &Peers) -> bool {
    match policy.logical_volume {
        LogicalVolume::On => true,
        LogicalVolume::Off => false,
        LogicalVolume::Auto => peers.id.on_by_default(),
    }
}

/// The claim's share (`None` when its policy keeps it on its own). A member whose history
/// cannot be read is an error naming it: the volume's budget is unknown, so nothing is grown.
pub fn shared(
    peers: &Peers,
    own: (&[Action], u64),
    policy: &Policy,
    (uid, now): (&str, Timestamp),
    errors: &mut Vec<Finding>,
) -> Option<Shared> {
    if !is_on(policy, peers) {
        return None;
    }
    let mut members = Vec::with_capacity(peers.peers.len());
    for p in &peers.peers {
        match &p.history {
            Ok(history) => members.push(Member {
                request: p.request,
                history,
            }),
            Err(e) => errors.push(Finding {
                field: format!("logicalVolume {}", peers.id),
                message: format!("member {e}"),
            }),
        }
    }
    let (history, request) = own;
    let logical = logical::combine(Member { request, history }, &members);
    let not_following = peers
        .peers
        .iter()
        .filter(|p| p.request < logical.size)
        .filter_map(|p| {
            p.blocked.map(|reason| NotFollowing {
                claim: p.name.clone(),
                reason,
            })
        })
        .collect();
    Some(Shared {
        name: peers.id.to_string(),
        members: (peers.peers.len() + 1).min(u32::MAX as usize) as u32,
        logical,
        new_action: ActionId::new(uid, now),
        not_following,
    })
}

impl Shared {
    /// The volume as the status shows it; `own` is this claim's name, listed when it is below the
    /// volume's size and `blocked`.
    pub fn view(
        &self,
        own: (&str, u64),
        blocked: Option<BlockReason>,
        now: Timestamp,
    ) -> LogicalView {
        let mut not_following = self.not_following.clone();
        if let Some(reason) = blocked.filter(|_| own.1 < self.logical.size) {
            not_following.push(NotFollowing {
                claim: own.0.to_string(),
                reason,
            });
        }
        not_following.sort_by(|a, b| a.claim.cmp(&b.claim));
        LogicalView {
            name: self.name.clone(),
            members: self.members,
            size_bytes: self.logical.size,
            actions_last_24h: self.logical.used(now),
            action: self.logical.source.clone(),
            not_following,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::logical::{LogicalVolume as Id, Owner, Peer, Role};

    fn peers(owner: Owner, history: Result<Vec<Action>, String>) -> Peers {
        Peers {
            id: Id {
                namespace: "db".into(),
                owner,
                role: Role::Data,
            },
            peers: vec![
                Peer {
                    name: "m-1".into(),
                    request: 80,
                    history,
                    blocked: None,
                    node: None,
                },
                Peer {
                    name: "m-2".into(),
                    request: 64,
                    history: Ok(Vec::new()),
                    blocked: Some(BlockReason::NotExpandable),
                    node: None,
                },
            ],
        }
    }

    fn with(setting: LogicalVolume) -> Policy {
        Policy {
            enabled: true,
            logical_volume: setting,
            ..Policy::with_limit(1000)
        }
    }

    #[test]
    fn the_setting_switches_sharing_either_way() {
        let now: Timestamp = "2026-01-04T04:00:00Z".parse().unwrap();
        let cnpg = peers(
            Owner::CloudNativePG {
                cluster: "pg".into(),
            },
            Ok(Vec::new()),
        );
        let sts = peers(
            Owner::StatefulSet {
                name: "kafka".into(),
                template: "data".into(),
            },
            Ok(Vec::new()),
        );
        let mut errors = Vec::new();
        let mut share = |p: &Peers, s| shared(p, (&[], 64), &with(s), ("uid", now), &mut errors);
        assert!(share(&cnpg, LogicalVolume::Auto).is_some());
        assert!(share(&sts, LogicalVolume::Auto).is_none());
        assert!(share(&sts, LogicalVolume::On).is_some());
        // Off: the claim keeps its own budget, as a claim in no logical volume does.
        assert!(share(&cnpg, LogicalVolume::Off).is_none());
        let s = share(&cnpg, LogicalVolume::Auto).expect("shared");
        assert!(errors.is_empty());
        assert_eq!((s.members, s.logical.size), (3, 80));
        // The peer below the size says why it cannot follow; so does this claim when blocked.
        let view = s.view(("m-0", 64), Some(BlockReason::ResizeInProgress), now);
        let lagging: Vec<(&str, BlockReason)> = view
            .not_following
            .iter()
            .map(|n| (n.claim.as_str(), n.reason))
            .collect();
        assert_eq!(
            lagging,
            [
                ("m-0", BlockReason::ResizeInProgress),
                ("m-2", BlockReason::NotExpandable)
            ]
        );
    }

    #[test]
    fn a_member_whose_history_cannot_be_read_is_an_error_naming_it() {
        let now: Timestamp = "2026-01-04T04:00:00Z".parse().unwrap();
        let bad = peers(
            Owner::Zalando {
                cluster: "acid".into(),
            },
            Err("PVC db/m-1: annotation headroom.dev/history is not valid".into()),
        );
        let mut errors = Vec::new();
        let own = (&[][..], 64);
        shared(
            &bad,
            own,
            &with(LogicalVolume::Auto),
            ("u", now),
            &mut errors,
        );
        assert_eq!(errors.len(), 1);
        assert!(errors[0].message.contains("db/m-1"), "{:?}", errors[0]);
        assert!(errors[0].field.contains("zalando/acid/data"));
    }
}
