//! `headroom validate --context` as a user runs it: the built binary, a kubeconfig, and the real
//! API server (through the fault proxy, which logs its LISTs) holding the claims a ConfigMap's
//! selector sections are meant for.

mod support {
    pub mod cluster;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::process::Command;

use serde_json::json;
use support::cluster::Cluster;
use support::kube::server::{self, ADMIN_TOKEN};

/// Two selector sections: the first matches the claim created below, the second matches no
/// claim on the server.
fn manifest(ns: &str) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: headroom
  namespace: headroom
data:
  selectors.yaml: |
    - namespaces: [{ns}]
      matchLabels:
        cnpg.io/cluster: pg-main
      policy:
        enabled: true
        limit: 100Gi
    - matchLabels:
        cnpg.io/cluster: pg-nowhere
      policy:
        enabled: true
        limit: 100Gi
"
    )
}

#[test]
fn validate_with_a_context_names_the_selector_section_no_claim_reaches() {
    if !server::available("validate_with_a_context_names_the_selector_section_no_claim_reaches") {
        return;
    }
    let c = Cluster::new();
    c.create(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": { "name": "pg-main-1", "namespace": c.ns, "labels": { "cnpg.io/cluster": "pg-main" } },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": "1Gi" } },
        },
    }));
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    c.proxy.kubeconfig(ADMIN_TOKEN, &kc);
    let file = dir.path().join("headroom.yaml");
    std::fs::write(&file, manifest(&c.ns)).expect("write the manifest");
    let validate = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
            .arg("validate")
            .arg(&file)
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .expect("run headroom validate");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "validate failed: {text}{err}");
        text
    };
    let pvc_lists = || {
        c.proxy
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path.contains("persistentvolumeclaims"))
            .map(|r| r.path.clone())
            .collect::<Vec<_>>()
    };

    c.proxy.clear_requests();
    let out = validate(&[
        "--kubeconfig",
        kc.to_str().expect("utf-8"),
        "--context",
        "c",
    ]);
    let warnings: Vec<&str> = out.lines().filter(|l| l.contains(": warning: ")).collect();
    assert_eq!(warnings.len(), 1, "{out}");
    assert!(
        warnings[0].contains("warning: selectors.yaml[1]: selects no claim on the cluster")
            && warnings[0].contains("cnpg.io/cluster=pg-nowhere"),
        "{out}"
    );
    // One LIST, in every namespace.
    assert_eq!(pvc_lists(), ["/api/v1/persistentvolumeclaims"]);

    // Without --context or --kubeconfig, validate stays offline.
    c.proxy.clear_requests();
    let out = validate(&[]);
    assert!(out.trim_end().ends_with(": ok"), "{out}");
    assert_eq!(pvc_lists(), Vec::<String>::new());
}
