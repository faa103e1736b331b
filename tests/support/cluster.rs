//! The agent's end-to-end cluster: a slice of the real API server ([`KubeCluster`]: its own
//! namespace, node, StorageClasses `fast`/`fixed` and kubelet root of real tmpfs volumes, on the
//! server shared by the test binary) with the agent, as its service account, talking through a
//! fault proxy ([`FaultProxy`]): pass-through until a test scripts a fault, and a log of every
//! request the agent made. The test plays the PV binder, the scheduler and the
//! kubelet + CSI driver, as in `kube_agent.rs`.
#![allow(dead_code)]

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::kube::block;
use super::kube::cluster::KubeCluster;
use super::kube::proxy::{FaultProxy, RequestRecord};
use super::kube::server::{self, AGENT_TOKEN};
use super::node::{Agent, AgentOpts, MI};

/// A policy most end-to-end claims use: 16Mi steps up to 100Mi, two actions a day.
pub const ENABLED: &[(&str, &str)] = &[
    ("enabled", "true"),
    ("limit", "100Mi"),
    ("step", "16Mi"),
    ("max-actions-per-day", "2"),
];

/// True when the test may run: the real API server's parts and root (see
/// [`server::available`]), and `tools` (see [`super::root::require_root`]).
pub fn available(test: &str, tools: &[(&str, &str)]) -> bool {
    server::available(test) && super::root::require_root(test, tools)
}

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

/// A claim bound to `pv`, with `status.capacity` equal to its request.
pub fn bound_pvc(
    namespace: &str,
    name: &str,
    pv: &str,
    class: &str,
    size: &str,
) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "volumeName": pv,
            "resources": { "requests": { "storage": size } },
        },
        "status": { "phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": { "storage": size } },
    }))
    .expect("valid PersistentVolumeClaim")
}

pub struct Cluster {
    pub kube: KubeCluster,
    pub proxy: FaultProxy,
    /// The agent's kubeconfig: the proxy, with the agent's service account token.
    pub kubeconfig: tempfile::NamedTempFile,
    /// The agent's ConfigMap in namespace `headroom` (`--configmap`), one per test.
    pub configmap: String,
}

impl Deref for Cluster {
    type Target = KubeCluster;

    fn deref(&self) -> &KubeCluster {
        &self.kube
    }
}

impl DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut KubeCluster {
        &mut self.kube
    }
}

impl Cluster {
    /// A slice of the test binary's shared server, and a proxy of its own.
    pub fn new() -> Cluster {
        Self::on(server::Server::shared())
    }

    /// A slice of `server` (one of the test's own: [`server::Server::start`]).
    pub fn on(server: std::sync::Arc<server::Server>) -> Cluster {
        let kube = KubeCluster::on(server);
        let proxy = FaultProxy::start(&kube.server);
        let kubeconfig = tempfile::NamedTempFile::new().expect("kubeconfig");
        proxy.kubeconfig(AGENT_TOKEN, kubeconfig.path());
        Cluster {
            configmap: format!("headroom-{}", kube.id),
            kube,
            proxy,
            kubeconfig,
        }
    }

    /// A bound claim of `size_mi` MiB in `class` with `headroom.dev/<key>` annotations, changed
    /// by `edit` (status included: it is written through the status subresource, as the PV
    /// controller and the resizer do, `allocatedResourceStatuses` too), without a pod.
    pub fn pvc(
        &self,
        name: &str,
        class: &str,
        size_mi: u64,
        annotations: &[(&str, &str)],
        edit: impl FnOnce(&mut PersistentVolumeClaim),
    ) {
        self.pvc_in(&self.ns, name, class, size_mi, annotations, edit);
    }

    /// [`Self::pvc`] in namespace `ns`.
    pub fn pvc_in(
        &self,
        ns: &str,
        name: &str,
        class: &str,
        size_mi: u64,
        annotations: &[(&str, &str)],
        edit: impl FnOnce(&mut PersistentVolumeClaim),
    ) {
        let pv = self.pv_name(name);
        let mut pvc = bound_pvc(ns, name, &pv, class, &format!("{size_mi}Mi"));
        annotate(&mut pvc, annotations);
        edit(&mut pvc);
        let mut claim = serde_json::to_value(&pvc).expect("claim JSON");
        let status = claim["status"].take();
        let request = claim["spec"]["resources"]["requests"]["storage"]
            .as_str()
            .map(str::to_string);
        let capacity = status["capacity"]["storage"].as_str().map(str::to_string);
        let pv_size = capacity.or(request).expect("a size for the volume");
        self.create(json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": pv_size}, "accessModes": claim["spec"]["accessModes"],
                "storageClassName": class, "persistentVolumeReclaimPolicy": "Delete",
                "claimRef": {"namespace": ns, "name": name},
                "csi": {"driver": "test.csi.headroom.dev", "volumeHandle": format!("h-{pv}")},
            },
        }));
        claim["apiVersion"] = json!("v1");
        claim["kind"] = json!("PersistentVolumeClaim");
        self.create(claim);
        if !status.is_null() {
            self.patch_status_in::<PersistentVolumeClaim>(ns, name, json!({ "status": status }));
        }
    }

    /// A running pod `pod_name` in namespace `ns` on `node` mounting `claim` as volume "data",
    /// changed by `edit` (status included: written through the status subresource, as the
    /// kubelet does); returns its uid.
    pub fn pod_in(
        &self,
        ns: &str,
        pod_name: &str,
        node: &str,
        claim: &str,
        edit: impl FnOnce(&mut Pod),
    ) -> String {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": pod_name, "namespace": ns},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "db", "image": "postgres:17", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            },
            "status": {"phase": "Running", "podIP": "127.0.0.1"},
        }))
        .expect("valid Pod");
        edit(&mut pod);
        let mut v = serde_json::to_value(&pod).expect("pod JSON");
        let status = v["status"].take();
        v["apiVersion"] = json!("v1");
        v["kind"] = json!("Pod");
        let made = self.create(v);
        self.patch_status_in::<Pod>(ns, pod_name, json!({ "status": status }));
        made["metadata"]["uid"].as_str().expect("uid").to_string()
    }

    /// A merge patch of the status subresource of `ns/name`, as its controller would write it.
    pub fn patch_status_in<K>(&self, ns: &str, name: &str, body: serde_json::Value)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.admin.0.clone(), ns);
        block(async move {
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .unwrap_or_else(|e| panic!("patch status of {ns}/{name}: {e}"))
        });
    }

    /// A claim of `size_mi` MiB in `class`, mounted by its own pod on this test's node as a
    /// tmpfs of its size.
    pub fn claim(
        &mut self,
        name: &str,
        class: &str,
        size_mi: u64,
        annotations: &[(&str, &str)],
    ) -> PathBuf {
        self.pvc(name, class, size_mi, annotations, |_| {});
        let uid = self.pod(&format!("pod-{name}"), &self.node.clone(), name);
        let pv = self.pv_name(name);
        self.kube.root.tmpfs_volume(&uid, &pv, size_mi * MI)
    }

    /// A merge patch of this namespace's pod `name` (metadata and spec).
    pub fn patch_pod(&self, name: &str, body: serde_json::Value) {
        let api: Api<Pod> = Api::namespaced(self.admin.0.clone(), &self.ns);
        block(async move {
            api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .unwrap_or_else(|e| panic!("patch pod {name}: {e}"))
        });
    }

    /// Makes pod `pod` a CloudNativePG instance of `cluster` (it is at 127.0.0.1 already): the
    /// owner a Postgres credential is bound to (see `pgconn`).
    pub fn cnpg_instance(&self, pod: &str, cluster: &str) {
        self.patch_pod(
            pod,
            json!({"metadata": {"ownerReferences": [{
                "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": cluster,
                "uid": format!("{cluster}-uid"), "controller": true,
            }]}}),
        );
    }

    /// The agent's ConfigMap (`headroom/<self.configmap>`) with `data`.
    pub fn configmap(&self, data: serde_json::Value) {
        self.create(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": self.configmap, "namespace": "headroom"},
            "data": data,
        }));
    }

    /// `headroom agent` on this test's node, through the proxy.
    pub fn agent(&self, interval: &str) -> Agent {
        self.agent_on(&self.node, self.root.path(), interval, &[])
    }

    pub fn agent_on(&self, node: &str, root: &Path, interval: &str, extra: &[&str]) -> Agent {
        let mut args = vec!["--configmap", self.configmap.as_str()];
        args.extend_from_slice(extra);
        Agent::spawn(&AgentOpts {
            kubeconfig: self.kubeconfig.path(),
            node,
            root,
            interval,
            extra: &args,
        })
    }

    /// Claim `name` as the server has it.
    pub fn get(&self, name: &str) -> PersistentVolumeClaim {
        self.kube.get(name)
    }

    fn claim_patches(&self, name: &str, status: u16) -> Vec<String> {
        self.claim_patches_in(&self.proxy.requests(), name, status)
    }

    /// Of the proxy's `log`, the bodies of PATCHes of claim `name` answered `status` that
    /// carried a storage request.
    fn claim_patches_in(&self, log: &[RequestRecord], name: &str, status: u16) -> Vec<String> {
        let path = format!(
            "/api/v1/namespaces/{}/persistentvolumeclaims/{name}",
            self.ns
        );
        log.iter()
            .filter(|r| r.method == "PATCH" && r.path == path && r.status == status)
            .filter_map(|r| r.body.clone())
            .filter(|b| b.contains("\"storage\""))
            .collect()
    }

    /// Bodies of the agent's successful PATCHes that carried a new storage request.
    pub fn resize_patch_bodies(&self, name: &str) -> Vec<String> {
        self.claim_patches(name, 200)
    }

    pub fn resize_patches(&self, name: &str) -> usize {
        self.claim_patches(name, 200).len()
    }

    /// Waits until the proxy's log holds at least `n` successful resize PATCHes of `name`, for a
    /// test that saw the resize on the server and is about to count them (see
    /// [`FaultProxy::wait_requests`]: the server has a request's effect before the proxy logs it).
    pub fn wait_resize_patches(&self, name: &str, n: usize) {
        self.proxy.wait_requests(
            Duration::from_secs(10),
            &format!("{n} successful resize PATCHes of {name}"),
            |log| self.claim_patches_in(log, name, 200).len() >= n,
        );
    }

    /// Resize PATCHes refused with 409 (a stale resourceVersion precondition).
    pub fn resize_conflicts(&self, name: &str) -> usize {
        self.claim_patches(name, 409).len()
    }
}
