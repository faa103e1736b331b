//! A claim's logical volume (issue 25): which operator's cluster, StatefulSet or explicit group
//! it belongs to and in which role, read from the labels each operator sets. Its members share
//! one budget and history ([`crate::decide::logical`]); this file finds them among a namespace's
//! claims and reads what the engine needs of each.

use std::fmt;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde::Serialize;

use super::roles::{
    CNPG_CLUSTER, CRUNCHY_CLUSTER, GROUP, ZALANDO_APPLICATION, ZALANDO_CLUSTER, annotations,
    claim_template, controlling_statefulset, label, postgres_volume, tablespace,
};
use crate::decide::{Action, BlockReason, VolumeRole};

const CRUNCHY_DATA: &str = "postgres-operator.crunchydata.com/data";
const CRUNCHY_INSTANCE_SET: &str = "postgres-operator.crunchydata.com/instance-set";
/// The node the scheduler picked for a claim's volume (WaitForFirstConsumer classes).
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// Who owns the members: an operator's cluster, a StatefulSet's claim template, or a group the
/// user named.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Owner {
    CloudNativePG {
        cluster: String,
    },
    Zalando {
        cluster: String,
    },
    /// PGO v5: one instance set of a PostgresCluster (sets may be sized apart on purpose).
    Crunchy {
        cluster: String,
        instance_set: String,
    },
    StatefulSet {
        name: String,
        template: String,
    },
    Group {
        name: String,
    },
}

/// What the members hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    Data,
    Wal,
    Tablespace(String),
    /// A StatefulSet template or an explicit group: whatever its claims hold.
    Volume,
}

/// A logical volume's identity: namespace, owner and role.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct LogicalVolume {
    pub namespace: String,
    pub owner: Owner,
    pub role: Role,
}

impl LogicalVolume {
    /// A Postgres operator's cluster: its members are replicas of one database.
    pub fn is_postgres_cluster(&self) -> bool {
        matches!(
            self.owner,
            Owner::CloudNativePG { .. } | Owner::Zalando { .. } | Owner::Crunchy { .. }
        )
    }

    /// `logicalVolume: auto`: on for Postgres clusters and for groups the user named; off for
    /// StatefulSets of unknown software, whose members may hold different data.
    pub fn on_by_default(&self) -> bool {
        self.is_postgres_cluster() || matches!(self.owner, Owner::Group { .. })
    }
}

impl fmt::Display for LogicalVolume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.owner {
            Owner::CloudNativePG { cluster } => write!(f, "cnpg/{cluster}")?,
            Owner::Zalando { cluster } => write!(f, "zalando/{cluster}")?,
            Owner::Crunchy {
                cluster,
                instance_set,
            } => write!(f, "crunchy/{cluster}/{instance_set}")?,
            Owner::StatefulSet { name, template } => write!(f, "sts/{name}/{template}")?,
            Owner::Group { name } => write!(f, "group/{name}")?,
        }
        match &self.role {
            Role::Data => f.write_str("/data"),
            Role::Wal => f.write_str("/wal"),
            Role::Tablespace(t) => write!(f, "/tablespace/{t}"),
            Role::Volume => Ok(()),
        }
    }
}

fn postgres_role(pvc: &PersistentVolumeClaim) -> Option<Role> {
    // Read from the claim alone, so a member on another node (seen without its pod) resolves to
    // the same identity as one mounted here.
    let pg = postgres_volume(pvc, None).ok().flatten()?;
    Some(match pg.role {
        VolumeRole::Data => Role::Data,
        VolumeRole::Wal => Role::Wal,
        VolumeRole::Tablespace => Role::Tablespace(tablespace(pvc).unwrap_or_default()),
        VolumeRole::Other => return None,
    })
}

/// The operator cluster `pvc` belongs to, from the claim's own labels.
fn operator_owner(pvc: &PersistentVolumeClaim) -> Option<Owner> {
    let m = &pvc.metadata;
    if let Some(cluster) = label(m, CNPG_CLUSTER) {
        return Some(Owner::CloudNativePG { cluster });
    }
    // PGO's pgBackRest repository volumes (`data: pgbackrest`) each hold their own repository.
    if let Some(cluster) = label(m, CRUNCHY_CLUSTER) {
        let postgres = label(m, CRUNCHY_DATA).as_deref() == Some("postgres");
        let set = label(m, CRUNCHY_INSTANCE_SET)?;
        return postgres.then_some(Owner::Crunchy {
            cluster,
            instance_set: set,
        });
    }
    if label(m, ZALANDO_APPLICATION).as_deref() == Some("spilo") {
        return label(m, ZALANDO_CLUSTER).map(|cluster| Owner::Zalando { cluster });
    }
    None
}

/// The logical volume `pvc` belongs to (`pod`: the pod mounting it, when known). An explicit
/// `headroom.dev/group` wins, then an operator's labels, then the StatefulSet and claim template.
pub fn logical_volume(pvc: &PersistentVolumeClaim, pod: Option<&Pod>) -> Option<LogicalVolume> {
    let m = &pvc.metadata;
    let namespace = m.namespace.clone().unwrap_or_default();
    if let Some(g) = annotations(m).get(GROUP).map(|g| g.trim()) {
        return (!g.is_empty()).then(|| LogicalVolume {
            namespace,
            owner: Owner::Group { name: g.into() },
            role: Role::Volume,
        });
    }
    if let Some(owner) = operator_owner(pvc) {
        let role = postgres_role(pvc)?;
        return Some(LogicalVolume {
            namespace,
            owner,
            role,
        });
    }
    let sts = pod
        .and_then(|p| controlling_statefulset(&p.metadata))
        .or_else(|| controlling_statefulset(m))?;
    let template = claim_template(m.name.as_deref()?, &sts)?.to_string();
    Some(LogicalVolume {
        namespace,
        owner: Owner::StatefulSet {
            name: sts,
            template,
        },
        role: Role::Volume,
    })
}

/// Is `pvc` a member of `lv`? Members on other nodes are seen without their pods: a
/// StatefulSet's also match by the claim name `<template>-<sts>-<ordinal>`.
pub fn is_member(pvc: &PersistentVolumeClaim, lv: &LogicalVolume) -> bool {
    if pvc.metadata.namespace.as_deref().unwrap_or("") != lv.namespace {
        return false;
    }
    if logical_volume(pvc, None).as_ref() == Some(lv) {
        return true;
    }
    match &lv.owner {
        Owner::StatefulSet { name, template } => {
            annotations(&pvc.metadata).get(GROUP).is_none()
                && operator_owner(pvc).is_none()
                && pvc
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| claim_template(n, name))
                    == Some(template.as_str())
        }
        _ => false,
    }
}

/// One other member of a claim's logical volume, as its claim shows it.
#[derive(Debug, Clone)]
pub struct Peer {
    pub name: String,
    pub request: u64,
    /// Its history; an error naming the claim when the annotation is corrupt.
    pub history: Result<Vec<Action>, String>,
    /// Why its own agent last found it blocked (its status annotation), if it did.
    pub blocked: Option<BlockReason>,
    /// The node its volume is on, when the claim says (`volume.kubernetes.io/selected-node`).
    pub node: Option<String>,
}

/// A claim's logical volume and its other members.
#[derive(Debug, Clone)]
pub struct Peers {
    pub id: LogicalVolume,
    pub peers: Vec<Peer>,
}

/// The member as the engine and the status need it.
pub fn peer(pvc: &PersistentVolumeClaim) -> Peer {
    let blocked = super::state::read_status(pvc)
        .ok()
        .flatten()
        .and_then(|s| s.blocked_reason)
        .and_then(|r| BlockReason::parse(&r));
    Peer {
        name: pvc.metadata.name.clone().unwrap_or_default(),
        request: super::claim::storage_request(pvc)
            .ok()
            .flatten()
            .unwrap_or(0),
        history: super::state::read_history(pvc).map_err(|e| e.to_string()),
        blocked,
        node: annotations(&pvc.metadata).get(SELECTED_NODE).cloned(),
    }
}

/// `pvc`'s logical volume and its other members among `claims` (the namespace's, as a watch or a
/// list has them); `None` when it belongs to none.
pub fn peers<'a>(
    pvc: &PersistentVolumeClaim,
    pod: Option<&Pod>,
    claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
) -> Option<Peers> {
    let id = logical_volume(pvc, pod)?;
    let name = pvc.metadata.name.as_deref();
    let peers = claims
        .into_iter()
        .filter(|c| c.metadata.name.as_deref() != name && is_member(c, &id))
        .map(peer)
        .collect();
    Some(Peers { id, peers })
}

#[cfg(test)]
#[path = "logical_tests.rs"]
mod tests;
