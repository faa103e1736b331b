//! The claim admission webhook's test harness on the real API server (tests/kube_webhook*.rs):
//! `overlays/webhook/`'s RBAC and configuration, as shipped but reached by URL on loopback and
//! limited to one test's namespace, the agents' flags, and claims created through it.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use super::block;
use super::cluster::KubeCluster;
use super::server::AGENT_USER;
use crate::support::node::{Agent, request_of, wait_for};
use crate::support::ports::free_port;

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");
pub const CONFIGURATION: &str = "headroom";
pub const SECRET: &str = "headroom-webhook-tls";

pub fn overlay_docs(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("overlays/webhook").join(file))
        .expect("overlay file");
    serde_saphyr::from_multiple(&text).expect("overlay YAML")
}

pub async fn ensure<K>(api: Api<K>, v: &Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v.clone()).expect("manifest");
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create {v}: {e}"),
    }
}

/// The overlay's RBAC, as shipped (once per server: the objects are left for the next test).
pub fn apply_overlay_rbac(c: &KubeCluster) {
    let admin = c.admin.0.clone();
    block(async move {
        for v in overlay_docs("rbac.yaml") {
            let ns = v["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let a = admin.clone();
            match v["kind"].as_str() {
                Some("ClusterRole") => ensure::<ClusterRole>(Api::all(a), &v).await,
                Some("ClusterRoleBinding") => ensure::<ClusterRoleBinding>(Api::all(a), &v).await,
                Some("Role") => ensure::<Role>(Api::namespaced(a, &ns), &v).await,
                Some("RoleBinding") => ensure::<RoleBinding>(Api::namespaced(a, &ns), &v).await,
                other => panic!("rbac.yaml: unexpected kind {other:?}"),
            }
        }
    });
}

/// The overlay's MutatingWebhookConfiguration, re-created to reach `port` on loopback, limited
/// to this test's namespace (no other test's claims pass through it), with `ca` as its bundle.
pub fn configure(c: &KubeCluster, port: u16, ca: Option<&str>) {
    configure_all(c, &[port], ca, "Ignore");
}

/// The overlay's configuration with one webhook per port in `ports` (each CREATE is reviewed
/// by every one of them), with `failure_policy`.
pub fn configure_all(c: &KubeCluster, ports: &[u16], ca: Option<&str>, failure_policy: &str) {
    let mut v = overlay_docs("webhook.yaml")
        .into_iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .expect("the overlay's configuration");
    let template = v["webhooks"][0].clone();
    let hooks: Vec<Value> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let mut hook = template.clone();
            if i > 0 {
                hook["name"] = json!(format!("claims-{i}.headroom.dev"));
            }
            hook["failurePolicy"] = json!(failure_policy);
            hook["clientConfig"] = json!({ "url": format!("https://127.0.0.1:{port}/mutate") });
            if let Some(ca) = ca {
                use base64::Engine;
                hook["clientConfig"]["caBundle"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(ca));
            }
            hook["namespaceSelector"]["matchLabels"] = json!({ "headroom-test": c.ns });
            hook
        })
        .collect();
    v["webhooks"] = json!(hooks);
    let api: Api<MutatingWebhookConfiguration> = Api::all(c.admin.0.clone());
    block(async move {
        let _ = api.delete(CONFIGURATION, &DeleteParams::default()).await;
        wait_gone(&api).await;
        let obj: MutatingWebhookConfiguration = serde_json::from_value(v).expect("configuration");
        api.create(&PostParams::default(), &obj)
            .await
            .expect("create the configuration");
    });
}

pub async fn wait_gone(api: &Api<MutatingWebhookConfiguration>) {
    for _ in 0..100 {
        if api.get_opt(CONFIGURATION).await.ok().flatten().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the old configuration is still there");
}

pub fn ca_bundle(c: &KubeCluster) -> Option<String> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(c.admin.0.clone());
    let cfg = block(async move { api.get(CONFIGURATION).await.expect("configuration") });
    let bundle = cfg.webhooks?.first()?.client_config.ca_bundle.clone()?;
    Some(String::from_utf8(bundle.0).expect("PEM"))
}

/// The Secret's `key`, if the Secret exists.
pub fn secret(c: &KubeCluster, key: &str) -> Option<String> {
    let api: Api<Secret> = Api::namespaced(c.admin.0.clone(), "headroom");
    let s = block(async move { api.get_opt(SECRET).await.expect("get secret") })?;
    let b = s.data?.get(key)?.clone();
    Some(String::from_utf8(b.0).expect("PEM"))
}

pub fn delete_secret(c: &KubeCluster) {
    let api: Api<Secret> = Api::namespaced(c.admin.0.clone(), "headroom");
    block(async move {
        let _ = api.delete(SECRET, &DeleteParams::default()).await;
    });
}

pub fn webhook_args(port: u16) -> Vec<String> {
    vec![
        "--webhook-listen".into(),
        format!("127.0.0.1:{port}"),
        "--webhook-extra-names".into(),
        "127.0.0.1".into(),
    ]
}

/// The agent serves once it has its certificate; the caBundle is set by then or soon after.
pub fn wait_serving(c: &KubeCluster, port: u16) {
    wait_for(Duration::from_secs(30), "the webhook to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    wait_for(Duration::from_secs(30), "the caBundle", || {
        (ca_bundle(c).is_some() && ca_bundle(c) == secret(c, "ca.crt")).then_some(())
    });
}

/// A test namespace the configuration reaches.
pub fn label_namespace(c: &KubeCluster) {
    let body = json!({"metadata": {"labels": {"headroom-test": c.ns}}});
    c.patch_cluster::<k8s_openapi::api::core::v1::Namespace>(&c.ns.clone(), body);
}

pub fn headroom_annotations(policy: &[(&str, &str)]) -> Value {
    let mut a = json!({});
    for (k, v) in policy {
        a[format!("headroom.dev/{k}")] = json!(v);
    }
    a
}

/// Creates an unbound claim (as the StatefulSet controller or an operator does); returns its
/// request as the API server stored it.
pub fn create_claim(
    c: &KubeCluster,
    name: &str,
    size_mi: u64,
    annotations: Value,
    labels: Value,
) -> u64 {
    create_claim_with(c, name, size_mi, annotations, labels, json!({}))
}

/// [`create_claim`] with more fields in its spec (`dataSource`, `dataSourceRef`); returns its
/// request as stored.
pub fn create_claim_with(
    c: &KubeCluster,
    name: &str,
    size_mi: u64,
    annotations: Value,
    labels: Value,
    spec: Value,
) -> u64 {
    let mut claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": c.ns, "annotations": annotations, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": c.fast,
            "resources": {"requests": {"storage": format!("{size_mi}Mi")}},
        },
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        claim["spec"][k] = v.clone();
    }
    let pvc = serde_json::from_value(c.create(claim)).expect("claim");
    request_of(&pvc)
}

/// The request a claim would be stored at, asked with a dry-run CREATE: admission (the webhook,
/// whose `sideEffects` is None) runs and nothing is stored. A test that has just changed the
/// webhook configuration waits on this: the API server picks a new configuration up from its
/// watch a moment after the write, and with `failurePolicy: Ignore` a claim created before then
/// is stored as asked.
pub fn dry_run_request(c: &KubeCluster, size_mi: u64, annotations: Value, labels: Value) -> u64 {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "dry-run-probe", "namespace": c.ns, "annotations": annotations, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": c.fast,
            "resources": {"requests": {"storage": format!("{size_mi}Mi")}},
        },
    }))
    .expect("claim");
    let api: Api<PersistentVolumeClaim> = Api::namespaced(c.admin.0.clone(), &c.ns);
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let stored = block(async move { api.create(&params, &claim).await.expect("dry-run create") });
    request_of(&stored)
}

/// The agent's requests of `resource` with `verb` anywhere, from the audit log (the Secret lives
/// in the agent's namespace, the configuration in none).
pub fn agent_calls(c: &KubeCluster, resource: &str, verb: &str) -> Vec<super::audit::Entry> {
    super::audit::read(&c.server.audit_log())
        .into_iter()
        .filter(|e| e.user.username == AGENT_USER && e.resource() == resource && e.verb == verb)
        .collect()
}

/// A test's slice of the server with the overlay's RBAC applied, its namespace one the
/// configuration reaches.
pub fn webhook_cluster() -> KubeCluster {
    let c = KubeCluster::new();
    apply_overlay_rbac(&c);
    label_namespace(&c);
    c
}

/// One agent serving the webhook on a free port that the configuration (failurePolicy Ignore)
/// points the server at, its admin endpoint on another: the agent, once it serves, and the
/// admin port.
pub fn serving_agent(c: &KubeCluster) -> (Agent, u16) {
    let port = free_port();
    configure(c, port, None);
    let admin = free_port();
    let mut args = webhook_args(port);
    args.extend(["--listen".into(), format!("127.0.0.1:{admin}")]);
    let agent = c.agent("1s", &args.iter().map(String::as_str).collect::<Vec<_>>());
    wait_serving(c, port);
    (agent, admin)
}
