//! A notification sink configured for the agent on the real API server: overlays/notifications'
//! RBAC applied, the sink's URL in the Secret `headroom-notifications`, and a ConfigMap of the
//! test's own holding `notifications.yaml` (the agent is pointed at it with `--configmap`).
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::kube::block;
use super::kube::cluster::KubeCluster;

pub const SECRET: &str = "headroom-notifications";

/// overlays/notifications' Role and RoleBinding, as shipped (once per server; 409 is fine).
pub fn grant(c: &KubeCluster) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/overlays/notifications/rbac.yaml"
    ))
    .expect("overlay");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let client = c.admin.0.clone();
    block(async move {
        for d in docs {
            let pp = PostParams::default();
            let made = match d["kind"].as_str() {
                Some("Role") => Api::<Role>::namespaced(client.clone(), "headroom")
                    .create(&pp, &serde_json::from_value(d).expect("Role"))
                    .await
                    .map(drop),
                Some("RoleBinding") => Api::<RoleBinding>::namespaced(client.clone(), "headroom")
                    .create(&pp, &serde_json::from_value(d).expect("RoleBinding"))
                    .await
                    .map(drop),
                other => panic!("unexpected {other:?}"),
            };
            match made {
                Ok(()) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => panic!("grant: {e}"),
            }
        }
    });
}

/// Puts `url` under `key` of the shared Secret (created on first use).
pub fn set_url(c: &KubeCluster, key: &str, url: &str) {
    let api: Api<Secret> = Api::namespaced(c.admin.0.clone(), "headroom");
    let (key, url) = (key.to_string(), url.to_string());
    block(async move {
        if api.get_opt(SECRET).await.expect("get").is_none() {
            let s: Secret = serde_json::from_value(json!({
                "metadata": {"name": SECRET, "namespace": "headroom"},
            }))
            .expect("secret");
            // Another test may have made it meanwhile.
            let _ = api.create(&PostParams::default(), &s).await;
        }
        let body = json!({"stringData": {key: url}});
        api.patch(SECRET, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .expect("set the URL");
    });
}

/// The agent's ConfigMap for this test, with one sink `team`; its name.
pub fn configmap(c: &KubeCluster, sink: &str) -> String {
    let name = format!("notify-{}", c.id);
    c.create(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "headroom"},
        "data": {"notifications.yaml": sink},
    }));
    name
}

/// One sink `team` posting to `url` in `format` (`extra`: more of its fields, as YAML lines
/// indented two spaces), granted and configured; the ConfigMap's name for `--configmap`.
pub fn configure(c: &KubeCluster, url: &str, format: &str, extra: &str) -> String {
    let key = format!("t{}", c.id);
    grant(c);
    set_url(c, &key, url);
    configmap(
        c,
        &format!(
            "sinks:\n- name: team\n  format: {format}\n  urlSecret: {{name: {SECRET}, key: {key}}}\n{extra}"
        ),
    )
}
