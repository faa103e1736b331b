//! A small cluster for the agent's end-to-end tests: the fake API server seeded with nodes and
//! StorageClasses, kubelet roots of real tmpfs volumes, and helpers to read what the agent wrote.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;

use super::node::{Agent, AgentOpts, ClaimStore, KubeletRoot, MI};
use crate::fake_api::FakeApi;
use crate::fake_api::fixtures::{bound_pvc, node, pod, storage_class};

pub const NODE: &str = "node-a";
pub const NS: &str = "db";

/// A policy most end-to-end claims use: 16Mi steps up to 100Mi, two actions a day.
pub const ENABLED: &[(&str, &str)] = &[
    ("enabled", "true"),
    ("limit", "100Mi"),
    ("step", "16Mi"),
    ("max-actions-per-day", "2"),
];

pub fn annotate(pvc: &mut PersistentVolumeClaim, pairs: &[(&str, &str)]) {
    let a = pvc
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    for (k, v) in pairs {
        a.insert(format!("headroom.dev/{k}"), v.to_string());
    }
}

/// The claim's `headroom.dev/history`, parsed (empty when absent).
pub fn history(pvc: &PersistentVolumeClaim) -> Vec<serde_json::Value> {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("headroom.dev/history"))
        .map(|h| serde_json::from_str(h).expect("history annotation is JSON"))
        .unwrap_or_default()
}

pub fn history_len(pvc: &PersistentVolumeClaim) -> usize {
    history(pvc).len()
}

/// One field of the claim's `headroom.dev/status`, strings unquoted.
pub fn status_field(pvc: &PersistentVolumeClaim, field: &str) -> Option<String> {
    let s = pvc
        .metadata
        .annotations
        .as_ref()?
        .get("headroom.dev/status")?;
    let v: serde_json::Value = serde_json::from_str(s).ok()?;
    v.get(field).map(|x| {
        x.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| x.to_string())
    })
}

pub struct Cluster {
    pub fake: Arc<FakeApi>,
    /// The kubelet root of [`NODE`].
    pub root: KubeletRoot,
    pub kubeconfig: tempfile::NamedTempFile,
}

impl Cluster {
    pub async fn new() -> Cluster {
        let fake = Arc::new(FakeApi::start().await);
        fake.insert(node(NODE));
        fake.insert(storage_class("fast", true));
        fake.insert(storage_class("fixed", false));
        let kubeconfig = tempfile::NamedTempFile::new().expect("kubeconfig");
        fake.write_kubeconfig(kubeconfig.path());
        Cluster {
            fake,
            root: KubeletRoot::new(),
            kubeconfig,
        }
    }

    /// A bound claim of `size_mi` MiB in `class` (changed by `edit`), without a pod.
    pub fn pvc(
        &self,
        name: &str,
        class: &str,
        size_mi: u64,
        annotations: &[(&str, &str)],
        edit: impl FnOnce(&mut PersistentVolumeClaim),
    ) {
        let mut pvc = bound_pvc(NS, name, class, &format!("{size_mi}Mi"));
        annotate(&mut pvc, annotations);
        edit(&mut pvc);
        self.fake.insert(pvc);
    }

    /// A running pod `pod_name` on `node` mounting `claim`; returns its uid.
    pub fn pod(&self, pod_name: &str, node: &str, claim: &str) -> String {
        let p: Pod = self.fake.insert(pod(NS, pod_name, node, Some(claim)));
        p.metadata.uid.expect("uid")
    }

    /// A claim of `size_mi` MiB in `class`, mounted by its own pod on [`NODE`] as a tmpfs.
    pub fn claim(
        &mut self,
        name: &str,
        class: &str,
        size_mi: u64,
        annotations: &[(&str, &str)],
    ) -> PathBuf {
        self.pvc(name, class, size_mi, annotations, |_| {});
        let uid = self.pod(&format!("pod-{name}"), NODE, name);
        self.root
            .tmpfs_volume(&uid, &format!("pv-{name}"), size_mi * MI)
    }

    /// Makes pod `pod` a CloudNativePG instance of `cluster` reachable at 127.0.0.1: the owner a
    /// Postgres credential is bound to (see `pgconn`), and the address the agent connects to.
    pub fn cnpg_instance(&self, pod: &str, cluster: &str) {
        self.fake.update_with::<Pod>(NS, pod, |p| {
            p.status.get_or_insert_with(Default::default).pod_ip = Some("127.0.0.1".into());
            p.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "postgresql.cnpg.io/v1".into(),
                    kind: "Cluster".into(),
                    name: cluster.into(),
                    uid: format!("{cluster}-uid"),
                    controller: Some(true),
                    ..Default::default()
                },
            ]);
        });
    }

    pub fn agent(&self, interval: &str) -> Agent {
        self.agent_on(NODE, self.root.path(), interval, &[])
    }

    pub fn agent_on(&self, node: &str, root: &Path, interval: &str, extra: &[&str]) -> Agent {
        Agent::spawn(&AgentOpts {
            kubeconfig: self.kubeconfig.path(),
            node,
            root,
            interval,
            extra,
        })
    }

    pub fn get(&self, name: &str) -> PersistentVolumeClaim {
        self.fake
            .get::<PersistentVolumeClaim>(NS, name)
            .expect("pvc")
    }

    fn claim_patches(&self, name: &str, status: u16) -> Vec<String> {
        let path = format!("/api/v1/namespaces/{NS}/persistentvolumeclaims/{name}");
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.method == "PATCH" && r.path == path && r.status == status)
            .filter_map(|r| r.body)
            .filter(|b| b.contains("\"storage\""))
            .collect()
    }

    /// Bodies of the successful PATCHes that carried a new storage request.
    pub fn resize_patch_bodies(&self, name: &str) -> Vec<String> {
        self.claim_patches(name, 200)
    }

    pub fn resize_patches(&self, name: &str) -> usize {
        self.claim_patches(name, 200).len()
    }

    /// Resize PATCHes refused with 409 (a stale resourceVersion precondition).
    pub fn resize_conflicts(&self, name: &str) -> usize {
        self.claim_patches(name, 409).len()
    }

    /// Events about claim `name`, as (reason, type, note).
    pub fn events_for(&self, name: &str) -> Vec<(String, String, String)> {
        self.fake
            .list::<Event>()
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| {
                (
                    e.reason.unwrap_or_default(),
                    e.type_.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }
}

impl ClaimStore for FakeApi {
    fn claim(&self, ns: &str, name: &str) -> Option<PersistentVolumeClaim> {
        self.get::<PersistentVolumeClaim>(ns, name)
    }

    fn set_capacity(&self, ns: &str, name: &str, bytes: u64) {
        self.update_with::<PersistentVolumeClaim>(ns, name, |p| {
            let status = p.status.get_or_insert_with(Default::default);
            status.capacity.get_or_insert_with(Default::default).insert(
                "storage".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(bytes.to_string()),
            );
        });
    }
}
