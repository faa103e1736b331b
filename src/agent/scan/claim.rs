//! A PersistentVolume mounted here, mapped to its claim, its pod and what its work needs.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;

use super::Common;
use crate::agent::kubelet_stats::ByClaim;
use crate::agent::work::{VolumeCtx, quota_version};
use crate::agent::world::World;
use crate::k8s::roles;
use crate::probe::Volume;

/// A volume, its claim, the claim's class and Namespace and CSI driver: what a trim needs.
pub(super) type ReclaimTarget = (
    Volume,
    Arc<PersistentVolumeClaim>,
    Option<Arc<StorageClass>>,
    Option<Arc<k8s_openapi::api::core::v1::Namespace>>,
    Option<(
        Option<Arc<k8s_openapi::api::storage::v1::CSIDriver>>,
        String,
    )>,
);

/// The probed volumes by PersistentVolume (a volume mounted by several pods appears once).
pub(super) fn by_pv(volumes: &[Volume]) -> BTreeMap<&str, Vec<&Volume>> {
    let mut by_pv: BTreeMap<&str, Vec<&Volume>> = BTreeMap::new();
    for v in volumes {
        if let Some(pv) = v.pv.as_deref() {
            by_pv.entry(pv).or_default().push(v);
        }
    }
    by_pv
}

/// One PersistentVolume's claim on this node, with the pod that mounts it.
pub(super) struct Claim<'v> {
    pub(super) key: String,
    pub(super) vol: &'v Volume,
    pub(super) pod: Arc<Pod>,
    pub(super) pvc: Arc<PersistentVolumeClaim>,
    pub(super) claims: Vec<Arc<PersistentVolumeClaim>>,
    pub(super) class: Option<Arc<StorageClass>>,
}

impl<'v> Claim<'v> {
    /// `None` when no live pod here mounts it, or it is not a claim (or its watch has not
    /// listed yet).
    pub(super) fn of(
        world: &World,
        pods: &HashMap<String, Arc<Pod>>,
        pv: &str,
        vols: &[&'v Volume],
    ) -> Option<Claim<'v>> {
        let (vol, pod) = vols
            .iter()
            .find_map(|v| Some((*v, pods.get(v.pod_uid.as_deref()?)?.clone())))?;
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let claims: Vec<Arc<PersistentVolumeClaim>> = roles::pod_claim_names(&pod)
            .iter()
            .filter_map(|c| world.claim(&ns, c))
            .collect();
        let pvc = claims
            .iter()
            .find(|c| c.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(pv))
            .cloned()?;
        let class = pvc
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            .and_then(|n| world.storage_class(n));
        Some(Claim {
            key: format!("{ns}/{}", pvc.metadata.name.as_deref().unwrap_or_default()),
            vol,
            pod,
            pvc,
            claims,
            class,
        })
    }

    fn namespace(&self) -> String {
        self.pod.metadata.namespace.clone().unwrap_or_default()
    }

    pub(super) fn reclaim_target(&self, world: &World) -> ReclaimTarget {
        let driver = self
            .class
            .as_ref()
            .map(|c| c.provisioner.clone())
            .map(|d| (world.csi_driver(&d), d));
        (
            self.vol.clone(),
            self.pvc.clone(),
            self.class.clone(),
            world.namespace(&self.namespace()),
            driver,
        )
    }

    pub(super) fn ctx(
        &self,
        world: &World,
        volumes: &[Volume],
        kubelet: &ByClaim,
        rates: &HashMap<PathBuf, f64>,
        common: &Common,
    ) -> VolumeCtx {
        let ns = self.namespace();
        let quotas = world.quotas(&ns);
        // One copy of the namespace's claims for both readings of the group.
        let peers = world.claims_in(&ns);
        let peers = || peers.iter().map(|c| c.as_ref());
        VolumeCtx {
            quota_version: quota_version(&quotas),
            quotas,
            vol: self.vol.clone(),
            group_size: roles::group_key(&self.pvc, Some(&self.pod))
                .and_then(|k| roles::group_size(peers(), &k)),
            logical: crate::k8s::logical::peers(&self.pvc, Some(&self.pod), peers()),
            kubelet: self
                .pvc
                .metadata
                .name
                .as_ref()
                .and_then(|n| kubelet.get(&(ns.clone(), n.clone())).copied()),
            fill_rate: rates.get(&self.vol.path).copied(),
            data_mount: crate::agent::wal::data_mount(&self.pod, &self.claims, volumes),
            pod: self.pod.clone(),
            claims: self.claims.clone(),
            class: self.class.clone(),
            namespace: world.namespace(&ns),
            central: common.central.clone(),
            creds: common.creds.clone(),
            draining: common.draining,
            node: common.node.clone(),
        }
    }
}
