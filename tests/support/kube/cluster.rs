//! One test's slice of the real API server: its own namespace, node, StorageClasses and kubelet
//! root, the project's `rbac/` applied once per server, and the agent run as its service account.
//! The test plays the parts no process here runs: the PV binder (claims are bound through the
//! status subresource), the scheduler (pods carry `spec.nodeName`) and the kubelet + CSI driver
//! ([`crate::support::node::CsiDriver`] remounts the tmpfs bigger and sets `status.capacity`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::audit;
use super::block;
use super::server::{ADMIN_TOKEN, AGENT_TOKEN, AGENT_USER, Server};
use std::time::Duration;

use crate::support::node::{
    Agent, AgentOpts, ClaimStore, KubeletRoot, MI, capacity_of, request_of, wait_for,
};

/// A client for `kubeconfig`, made on the tests' runtime.
pub fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    block(async move {
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
        Client::try_from(cfg).expect("client")
    })
}

/// Creates `obj`, or leaves the one already there (RBAC is shared by every test of a server).
async fn ensure<K>(api: Api<K>, obj: &K)
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create {obj:?}: {e}"),
    }
}

/// Applies the project's `rbac/` manifests (the files its kustomization lists) and the agent's
/// namespace, exactly as shipped.
pub fn apply_rbac(admin: &Client) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("daemonset/namespace.yaml")];
    let kustomization =
        std::fs::read_to_string(root.join("rbac/kustomization.yaml")).expect("rbac kustomization");
    docs.extend(
        kustomization
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- "))
            .map(|f| root.join("rbac").join(f.trim())),
    );
    let docs: Vec<serde_json::Value> = docs
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("manifest");
            serde_saphyr::from_str(&text).expect("manifest YAML")
        })
        .collect();
    apply_docs(admin, docs);
}

/// Applies the documents of one of the project's manifests (`rel` from the repository root), as
/// shipped; objects already there are left (shared by every test of a server).
pub fn apply_manifest(admin: &Client, rel: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    let text = std::fs::read_to_string(&path).expect("manifest");
    apply_docs(
        admin,
        serde_saphyr::from_multiple(&text).expect("manifest YAML"),
    );
}

fn apply_docs(admin: &Client, docs: Vec<serde_json::Value>) {
    let admin = admin.clone();
    block(async move {
        for v in docs {
            let ns = v["metadata"]["namespace"].as_str().unwrap_or("default");
            let c = admin.clone();
            macro_rules! apply {
                ($t:ty, $api:expr) => {
                    ensure::<$t>($api, &serde_json::from_value(v.clone()).expect("manifest")).await
                };
            }
            match v["kind"].as_str() {
                Some("Namespace") => apply!(Namespace, Api::all(c)),
                Some("ServiceAccount") => apply!(ServiceAccount, Api::namespaced(c, ns)),
                Some("ClusterRole") => apply!(ClusterRole, Api::all(c)),
                Some("ClusterRoleBinding") => apply!(ClusterRoleBinding, Api::all(c)),
                Some("Role") => apply!(Role, Api::namespaced(c, ns)),
                Some("RoleBinding") => apply!(RoleBinding, Api::namespaced(c, ns)),
                other => panic!("{v}: unexpected kind {other:?}"),
            }
        }
    });
}

/// A short id unique within the server's life, for names that must not collide between tests.
fn unique_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}x{}",
        std::process::id() % 10_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Admin access to the server, cheap to clone into a [`crate::support::node::CsiDriver`] thread.
#[derive(Clone)]
pub struct AdminClient(pub Client);

impl ClaimStore for AdminClient {
    fn claim(&self, ns: &str, name: &str) -> Option<PersistentVolumeClaim> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.0.clone(), ns);
        block(async move { api.get_opt(name).await.ok().flatten() })
    }

    fn set_capacity(&self, ns: &str, name: &str, bytes: u64) {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.0.clone(), ns);
        let body = json!({ "status": { "capacity": { "storage": bytes.to_string() } } });
        block(async move {
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .expect("set status.capacity")
        });
    }
}

pub struct KubeCluster {
    pub server: Arc<Server>,
    pub id: String,
    /// This test's namespace, node and StorageClass names.
    pub ns: String,
    pub node: String,
    pub fast: String,
    pub fixed: String,
    pub root: KubeletRoot,
    pub admin: AdminClient,
    pub admin_kubeconfig: tempfile::NamedTempFile,
    pub agent_kubeconfig: tempfile::NamedTempFile,
}

impl KubeCluster {
    /// `headroom status ARGS` as the cluster's admin (never the environment's kubeconfig); its
    /// standard output, once it has succeeded.
    pub fn headroom_status(&self, args: &[&str]) -> String {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
            .arg("status")
            .args(args)
            .arg("--kubeconfig")
            .arg(self.admin_kubeconfig.path())
            .env_remove("KUBECONFIG")
            .output()
            .expect("run headroom status");
        assert!(
            out.status.success(),
            "headroom status {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// A slice of the server shared by this test process.
    pub fn new() -> KubeCluster {
        Self::on(Server::shared())
    }

    pub fn on(server: Arc<Server>) -> KubeCluster {
        let id = unique_id();
        let admin_kubeconfig = tempfile::NamedTempFile::new().expect("kubeconfig");
        server.kubeconfig(ADMIN_TOKEN, admin_kubeconfig.path());
        let agent_kubeconfig = tempfile::NamedTempFile::new().expect("kubeconfig");
        server.kubeconfig(AGENT_TOKEN, agent_kubeconfig.path());
        let admin = AdminClient(client_for(admin_kubeconfig.path()));
        apply_rbac(&admin.0);
        let c = KubeCluster {
            ns: format!("t{id}"),
            node: format!("node-{id}"),
            fast: format!("fast-{id}"),
            fixed: format!("fixed-{id}"),
            id,
            server,
            root: KubeletRoot::new(),
            admin,
            admin_kubeconfig,
            agent_kubeconfig,
        };
        c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.ns}}));
        c.add_node(&c.node.clone());
        for (name, expand) in [(c.fast.clone(), true), (c.fixed.clone(), false)] {
            c.create(json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": name}, "provisioner": "test.csi.headroom.dev",
                "allowVolumeExpansion": expand,
            }));
        }
        c
    }

    pub fn add_node(&self, name: &str) {
        self.create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}));
    }

    /// Creates an object from its manifest, by kind.
    pub fn create(&self, v: serde_json::Value) -> serde_json::Value {
        let c = self.admin.0.clone();
        let ns = v["metadata"]["namespace"].as_str().map(str::to_string);
        block(async move {
            macro_rules! create {
                ($t:ty, $api:expr) => {{
                    let obj: $t = serde_json::from_value(v.clone()).expect("manifest");
                    let made = $api
                        .create(&PostParams::default(), &obj)
                        .await
                        .unwrap_or_else(|e| panic!("create {v}: {e}"));
                    serde_json::to_value(made).expect("json")
                }};
            }
            let nsd = |c: Client| ns.clone().map(|n| (c, n)).expect("namespaced object");
            match v["kind"].as_str() {
                Some("Namespace") => create!(Namespace, Api::<Namespace>::all(c)),
                Some("Node") => create!(Node, Api::<Node>::all(c)),
                Some("StorageClass") => create!(StorageClass, Api::<StorageClass>::all(c)),
                Some("PersistentVolume") => {
                    create!(PersistentVolume, Api::<PersistentVolume>::all(c))
                }
                Some("PersistentVolumeClaim") => {
                    let (c, n) = nsd(c);
                    create!(
                        PersistentVolumeClaim,
                        Api::<PersistentVolumeClaim>::namespaced(c, &n)
                    )
                }
                Some("Pod") => {
                    let (c, n) = nsd(c);
                    create!(Pod, Api::<Pod>::namespaced(c, &n))
                }
                Some("CSIDriver") => create!(
                    k8s_openapi::api::storage::v1::CSIDriver,
                    Api::<k8s_openapi::api::storage::v1::CSIDriver>::all(c)
                ),
                Some("ConfigMap") => {
                    let (c, n) = nsd(c);
                    create!(
                        k8s_openapi::api::core::v1::ConfigMap,
                        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(c, &n)
                    )
                }
                other => panic!("create: unexpected kind {other:?}"),
            }
        })
    }

    pub fn pv_name(&self, claim: &str) -> String {
        format!("pv-{}-{claim}", self.id)
    }

    /// A claim of `size_mi` MiB in `class`, bound (PV, `spec.volumeName`, then phase, capacity
    /// and access modes through the status subresource, as the PV controller does), with
    /// `headroom.dev/<key>` annotations; `edit` changes the manifest before it is created.
    pub fn pvc(
        &self,
        name: &str,
        class: &str,
        size_mi: u64,
        annotations: &[(&str, &str)],
        edit: impl FnOnce(&mut serde_json::Value),
    ) {
        let size = format!("{size_mi}Mi");
        let pv = self.pv_name(name);
        let mut claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": self.ns, "annotations": {}},
            "spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": class, "volumeName": pv,
                "resources": {"requests": {"storage": size}},
            },
        });
        for (k, v) in annotations {
            claim["metadata"]["annotations"][format!("headroom.dev/{k}")] = json!(v);
        }
        edit(&mut claim);
        let modes = claim["spec"]["accessModes"].clone();
        self.create(json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": size}, "accessModes": modes,
                "storageClassName": class, "persistentVolumeReclaimPolicy": "Delete",
                "claimRef": {"namespace": self.ns, "name": name},
                "csi": {"driver": "test.csi.headroom.dev", "volumeHandle": format!("h-{pv}")},
            },
        }));
        self.create(claim);
        let bound = json!({"status": {"phase": "Bound", "accessModes": modes, "capacity": {"storage": size}}});
        self.patch_status::<PersistentVolumeClaim>(name, &bound);
    }

    /// A running pod `pod_name` on `node` mounting `claim` (phase and IP set through the status
    /// subresource, as the kubelet does); returns its uid.
    pub fn pod(&self, pod_name: &str, node: &str, claim: &str) -> String {
        let made = self.create(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": self.ns},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "db", "image": "postgres:17", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            },
        }));
        self.patch_status::<Pod>(
            pod_name,
            &json!({"status": {"phase": "Running", "podIP": "127.0.0.1"}}),
        );
        made["metadata"]["uid"].as_str().expect("uid").to_string()
    }

    /// A claim mounted by its own pod on this test's node as a tmpfs of its size.
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
        self.root.tmpfs_volume(&uid, &pv, size_mi * MI)
    }

    /// A merge patch of the status subresource of this namespace's object `name`, as the
    /// controller that owns it would write it.
    pub fn patch_status<K>(&self, name: &str, body: &serde_json::Value)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.admin.0.clone(), &self.ns);
        block(async move {
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .unwrap_or_else(|e| panic!("patch status of {name}: {e}"))
        });
    }

    /// A merge patch of this namespace's claim `name`, as a user would `kubectl patch` it.
    pub fn patch_claim(&self, name: &str, body: serde_json::Value) {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.admin.0.clone(), &self.ns);
        block(async move {
            api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .unwrap_or_else(|e| panic!("patch {name}: {e}"))
        });
    }

    /// A merge patch of a cluster-scoped object (a Node, a StorageClass).
    pub fn patch_cluster<K>(&self, name: &str, body: serde_json::Value)
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(self.admin.0.clone());
        block(async move {
            api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .unwrap_or_else(|e| panic!("patch {name}: {e}"))
        });
    }

    pub fn patch_node(&self, name: &str, body: serde_json::Value) {
        self.patch_cluster::<Node>(name, body)
    }

    pub fn get(&self, name: &str) -> PersistentVolumeClaim {
        self.admin.claim(&self.ns, name).expect("claim")
    }

    pub fn csi(
        &self,
        mounts: &[(&str, PathBuf)],
        delay_ms: u64,
    ) -> crate::support::node::CsiDriver {
        let mut volumes = std::collections::BTreeMap::<(String, String), Vec<PathBuf>>::new();
        for (name, m) in mounts {
            volumes
                .entry((self.ns.clone(), name.to_string()))
                .or_default()
                .push(m.clone());
        }
        crate::support::node::CsiDriver::start(
            Arc::new(self.admin.clone()),
            volumes,
            std::time::Duration::from_millis(delay_ms),
        )
    }

    /// `headroom agent` on this test's node, as the agent's service account.
    pub fn agent(&self, interval: &str, extra: &[&str]) -> Agent {
        self.agent_on(&self.node, self.root.path(), interval, extra)
    }

    pub fn agent_on(&self, node: &str, root: &Path, interval: &str, extra: &[&str]) -> Agent {
        Agent::spawn(&AgentOpts {
            kubeconfig: self.agent_kubeconfig.path(),
            node,
            root,
            interval,
            extra,
        })
    }

    /// Events about claim `name` in this namespace, as (reason, type, note).
    pub fn events_for(&self, name: &str) -> Vec<(String, String, String)> {
        self.events_in(&self.ns, name)
    }

    /// Events about object `name` in namespace `ns` (a claim, the agent's ConfigMap), as
    /// (reason, type, note).
    pub fn events_in(&self, ns: &str, name: &str) -> Vec<(String, String, String)> {
        let api: Api<Event> = Api::namespaced(self.admin.0.clone(), ns);
        let list = block(async move { api.list(&Default::default()).await.expect("events") });
        list.items
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

    /// Whether the agent's service account may `verb` `resource` of API `group` in this test's
    /// namespace, as the server's authorizer says (a SubjectAccessReview).
    pub fn agent_may(&self, group: &str, resource: &str, verb: &str) -> bool {
        use k8s_openapi::api::authorization::v1::SubjectAccessReview;
        let review: SubjectAccessReview = serde_json::from_value(json!({
            "spec": {
                "user": AGENT_USER,
                "groups": ["system:serviceaccounts", "system:serviceaccounts:headroom", "system:authenticated"],
                "resourceAttributes": {
                    "group": group, "resource": resource, "verb": verb, "namespace": self.ns,
                },
            },
        }))
        .expect("review");
        let api: Api<SubjectAccessReview> = Api::all(self.admin.0.clone());
        let answer = block(async move {
            api.create(&PostParams::default(), &review)
                .await
                .expect("SubjectAccessReview")
        });
        answer.status.is_some_and(|s| s.allowed)
    }

    /// The agent's requests about objects in this test's namespace, from the audit log.
    pub fn agent_requests(&self) -> Vec<audit::Entry> {
        audit::read(&self.server.audit_log())
            .into_iter()
            .filter(|e| e.user.username == AGENT_USER && e.namespace() == Some(self.ns.as_str()))
            .collect()
    }

    /// The agent's writes to claim `name` (any verb that changes it), with their codes.
    pub fn claim_writes(&self, name: &str) -> Vec<audit::Entry> {
        self.agent_requests()
            .into_iter()
            .filter(|e| e.resource() == "persistentvolumeclaims" && e.name() == Some(name))
            .filter(|e| e.is_write())
            .collect()
    }

    /// Successful writes to `name` that carried a new storage request.
    pub fn resize_patches(&self, name: &str) -> usize {
        self.claim_writes(name)
            .iter()
            .filter(|e| e.code() == 200)
            .filter(|e| {
                e.request_object
                    .as_ref()
                    .is_some_and(|b| b.pointer("/spec/resources/requests/storage").is_some())
            })
            .count()
    }
}

/// 16Mi steps up to 200Mi, room for several actions; the emergency line is 95 % used alone (the
/// default 1Gi of critical free space would make every claim of these sizes an emergency).
pub const POLICY: &[(&str, &str)] = &[
    ("enabled", "true"),
    ("limit", "200Mi"),
    ("step", "16Mi"),
    ("max-actions-per-day", "5"),
    ("emergency-grow-critical-minimum-free", "1Mi"),
];

/// [`POLICY`] for a CloudNativePG cluster's data volumes sharing one budget: one action a day, so
/// the first one spends it. CloudNativePG keeps WAL on the data volume unless told otherwise;
/// growing such a volume needs the WAL risk acknowledged.
pub const CNPG_GROUP_POLICY: &[(&str, &str)] = &[
    ("enabled", "true"),
    ("limit", "200Mi"),
    ("step", "16Mi"),
    ("max-actions-per-day", "1"),
    ("emergency-grow-critical-minimum-free", "1Mi"),
    ("wal-safety-acknowledge-wal-risk", "true"),
];

pub fn annotation(pvc: &PersistentVolumeClaim, key: &str) -> Option<String> {
    pvc.metadata.annotations.as_ref()?.get(key).cloned()
}

impl KubeCluster {
    /// One field of claim `name`'s `headroom.dev/status`, strings unquoted.
    pub fn status_field(&self, name: &str, field: &str) -> Option<String> {
        let text = annotation(&self.get(name), "headroom.dev/status")?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        v.get(field).map(|x| {
            x.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| x.to_string())
        })
    }

    pub fn history_len(&self, name: &str) -> usize {
        annotation(&self.get(name), "headroom.dev/history")
            .map(|h| {
                serde_json::from_str::<Vec<serde_json::Value>>(&h)
                    .expect("history is JSON")
                    .len()
            })
            .unwrap_or(0)
    }

    pub fn wait_request(&self, name: &str, bytes: u64) {
        wait_for(
            Duration::from_secs(20),
            &format!("{name}'s request to reach {bytes}"),
            || (request_of(&self.get(name)) >= bytes).then_some(()),
        );
    }

    pub fn wait_capacity(&self, name: &str, bytes: u64) {
        wait_for(
            Duration::from_secs(20),
            &format!("{name}'s resize to {bytes} to complete"),
            || (capacity_of(&self.get(name)) == bytes).then_some(()),
        );
    }

    pub fn wait_blocked(&self, name: &str, reason: &str) {
        wait_for(
            Duration::from_secs(20),
            &format!("{name} blocked by {reason}"),
            || (self.status_field(name, "blockedReason").as_deref() == Some(reason)).then_some(()),
        );
    }

    /// Asserts that exactly `n` resize PATCHes of `name` succeeded. The server writes a
    /// request's audit record after its answer: a test that saw the claim change may read the log
    /// a moment before the record lands, so it waits up to 5 s for `n` before comparing.
    pub fn assert_resize_patches(&self, name: &str, n: usize) {
        let start = std::time::Instant::now();
        while self.resize_patches(name) < n && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            self.resize_patches(name),
            n,
            "successful resize PATCHes of {name}"
        );
    }

    /// Exactly one Event about `name` with this reason and type whose note has `note_has`.
    pub fn assert_one_event(&self, name: &str, reason: &str, type_: &str, note_has: &str) {
        let events = self.events_for(name);
        let matching = events
            .iter()
            .filter(|(r, t, n)| r == reason && t == type_ && n.contains(note_has))
            .count();
        assert_eq!(
            matching, 1,
            "{name}: want one {type_} {reason} naming {note_has:?}, got {events:?}"
        );
    }
}
