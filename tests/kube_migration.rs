//! A pvc-autoresizer user switches in one step (issue 16), on a real kube-apiserver: headroom
//! installed exactly as README says (`kubectl apply -k daemonset/` with the release's kubectl, the shipped
//! ConfigMap in effect), claims and StorageClasses annotated only for topolvm/pvc-autoresizer, and
//! every claim ends at the size pvc-autoresizer's documented rules give: grow by `increase` when
//! free space is under `threshold` (defaults 10 %), up to `storage_limit`, new sizes rounded up to
//! whole Gi (its runner: `ceil((capacity + increase) / 1Gi)`, capped at the limit); nothing
//! without a limit, on a class that does not enable it, or with an invalid value; a new claim of
//! an `initial-resize-group-by` group as large as its largest peer.
//!
//! The claims are 1Gi or more, where headroom also rounds to whole Gi; their filesystems are
//! small tmpfs mounts (statfs is what both tools compare with the threshold), so filling one
//! costs megabytes, not gigabytes.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::kube::cluster::KubeCluster;
use support::kube::server::{self, Server};
use support::node::{MI, fill, request_of, wait_for};

const GI: u64 = 1024 * MI;

/// The kubectl of the release the API server is (scripts/kube-release.sh builds it beside the
/// server), or None to skip.
fn kubectl(test: &str) -> Option<PathBuf> {
    let found = server::release()
        .ok()
        .map(|r| r.dir.join("kubectl"))
        .filter(|p| p.is_file());
    if found.is_none() {
        let why =
            "the release's kubectl is missing (run scripts/kube-release.sh, or ./scripts/test.sh)";
        assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
        eprintln!("skipping {test}: {why}");
    }
    found
}

/// Every file of the shipped manifests, to show the test changed none of them.
fn manifests() -> BTreeMap<PathBuf, Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = BTreeMap::new();
    for dir in ["daemonset", "rbac"] {
        for e in std::fs::read_dir(root.join(dir)).expect("manifest dir") {
            let p = e.expect("entry").path();
            if p.is_file() {
                out.insert(p.clone(), std::fs::read(&p).expect("read manifest"));
            }
        }
    }
    out
}

/// One claim: its class, size, annotations and labels, how full its filesystem is, and the size
/// pvc-autoresizer's rules end it at.
struct Case {
    name: &'static str,
    class: &'static str,
    size: u64,
    annotations: &'static [(&'static str, &'static str)],
    labels: &'static [(&'static str, &'static str)],
    /// MiB written into a 64Mi tmpfs; None: no pod mounts it.
    fill_mi: Option<u64>,
    want: u64,
}

const TV: &str = "resize.topolvm.io/";

#[test]
fn pvc_autoresizer_claims_end_where_pvc_autoresizer_would_put_them() {
    let test = "pvc_autoresizer_claims_end_where_pvc_autoresizer_would_put_them";
    if !server::available(test) {
        return;
    }
    let Some(kubectl) = kubectl(test) else {
        return;
    };
    let before = manifests();
    // A server of its own: the shipped ConfigMap headroom/headroom must not reach other tests.
    let server = Arc::new(Server::start());
    let mut c = KubeCluster::on(server);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(c.admin_kubeconfig.path())
        .args(["apply", "-k"])
        .arg(root.join("daemonset"))
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl apply -k daemonset/: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let applied = String::from_utf8_lossy(&out.stdout);
    for object in [
        "configmap/headroom",
        "daemonset.apps/headroom",
        "clusterrole.rbac.authorization.k8s.io/headroom",
    ] {
        assert!(applied.contains(object), "{object} not applied: {applied}");
    }

    let (enabled, plain) = (format!("topolvm-{}", c.id), format!("plain-{}", c.id));
    for (name, annotations) in [
        (&enabled, json!({ "resize.topolvm.io/enabled": "true" })),
        (&plain, json!({})),
    ] {
        c.create(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, "annotations": annotations},
            "provisioner": "topolvm.io", "allowVolumeExpansion": true,
        }));
    }
    let group = &[("app", "mysql-a")][..];
    let by_app = (format!("{TV}initial-resize-group-by"), "app");
    let cases = [
        // Defaults: 10 % threshold and increase. 6 % free: 1Gi + 102.4Mi, rounded up to 2Gi.
        Case {
            name: "defaults",
            class: "on",
            size: GI,
            annotations: &[("storage_limit", "5Gi")],
            labels: &[],
            fill_mi: Some(60),
            want: 2 * GI,
        },
        // 16 % free is above pvc-autoresizer's 10 %, though over the ConfigMap's usageThreshold
        // 80 and under its minAvailable 5Gi: the class's own annotation outranks them.
        Case {
            name: "above-threshold",
            class: "on",
            size: GI,
            annotations: &[("storage_limit", "5Gi")],
            labels: &[],
            fill_mi: Some(54),
            want: GI,
        },
        // Its own threshold and increase: 16 % free is under 20 %; 2Gi + 2Gi.
        // Free inodes under inodes-threshold, bytes plenty: 100 inodes, 61 used, 39 % free
        // under 50 %. 1Gi + 10 % -> 2Gi, the limit; the inodes stay short, so it stops there.
        Case {
            name: "inodes",
            class: "on",
            size: GI,
            annotations: &[("storage_limit", "2Gi"), ("inodes-threshold", "50%")],
            labels: &[],
            fill_mi: Some(1),
            want: 2 * GI,
        },
        Case {
            name: "custom",
            class: "on",
            size: 2 * GI,
            annotations: &[
                ("storage_limit", "10Gi"),
                ("threshold", "20%"),
                ("increase", "2Gi"),
                ("inodes-threshold", "5%"),
            ],
            labels: &[],
            fill_mi: Some(54),
            want: 4 * GI,
        },
        // 50 % of 2Gi would be 3Gi; the limit caps it (and then nothing more happens).
        Case {
            name: "capped",
            class: "on",
            size: 2 * GI,
            annotations: &[("storage_limit", "2500Mi"), ("increase", "50%")],
            labels: &[],
            fill_mi: Some(60),
            want: 2500 * MI,
        },
        // No limit: pvc-autoresizer leaves it alone.
        Case {
            name: "no-limit",
            class: "on",
            size: GI,
            annotations: &[],
            labels: &[],
            fill_mi: Some(60),
            want: GI,
        },
        // A zero limit is ignored, as pvc-autoresizer documents: no limit.
        Case {
            name: "zero-limit",
            class: "on",
            size: GI,
            annotations: &[("storage_limit", "0")],
            labels: &[],
            fill_mi: Some(60),
            want: GI,
        },
        // The class does not enable pvc-autoresizer: its annotations mean nothing.
        Case {
            name: "not-enabled",
            class: "plain",
            size: GI,
            annotations: &[("storage_limit", "5Gi"), ("threshold", "50%")],
            labels: &[],
            fill_mi: Some(60),
            want: GI,
        },
        // Invalid values: pvc-autoresizer skips the claim; so does headroom, saying why.
        Case {
            name: "bad-threshold",
            class: "on",
            size: GI,
            annotations: &[("storage_limit", "5Gi"), ("threshold", "ten%")],
            labels: &[],
            fill_mi: Some(60),
            want: GI,
        },
        Case {
            name: "bad-increase",
            class: "on",
            size: GI,
            annotations: &[("storage_limit", "5Gi"), ("increase", "0Gi")],
            labels: &[],
            fill_mi: Some(60),
            want: GI,
        },
        Case {
            name: "bad-limit",
            class: "on",
            size: GI,
            annotations: &[("storage_limit", "5GB")],
            labels: &[],
            fill_mi: Some(60),
            want: GI,
        },
        // Not pvc-autoresizer-only: a headroom.dev/enabled=false written over it (see below).
        Case {
            name: "switched-off",
            class: "on",
            size: GI,
            annotations: &[("storage_limit", "5Gi")],
            labels: &[],
            fill_mi: Some(60),
            want: GI,
        },
        // initial-resize-group-by: the new replica joins its group's largest (3Gi), not the other
        // group's 8Gi; the peers need no pod here.
        Case {
            name: "mysql-a-0",
            class: "on",
            size: 3 * GI,
            annotations: &[("storage_limit", "10Gi")],
            labels: group,
            fill_mi: None,
            want: 3 * GI,
        },
        Case {
            name: "mysql-b-0",
            class: "on",
            size: 8 * GI,
            annotations: &[("storage_limit", "10Gi")],
            labels: &[("app", "mysql-b")],
            fill_mi: None,
            want: 8 * GI,
        },
        Case {
            name: "mysql-a-1",
            class: "on",
            size: GI,
            annotations: &[("storage_limit", "10Gi")],
            labels: group,
            fill_mi: Some(1),
            want: 3 * GI,
        },
    ];
    let mut mounts = Vec::new();
    for case in &cases {
        let class = if case.class == "on" { &enabled } else { &plain };
        let grouped = case.name.starts_with("mysql-");
        c.pvc(case.name, class, case.size / MI, &[], |p| {
            for (k, v) in case.annotations {
                p["metadata"]["annotations"][format!("{TV}{k}")] = json!(v);
            }
            if grouped {
                p["metadata"]["annotations"][&by_app.0] = json!(by_app.1);
            }
            if case.name == "switched-off" {
                p["metadata"]["annotations"]["headroom.dev/enabled"] = json!("false");
            }
            let labels: serde_json::Map<String, serde_json::Value> = case
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            p["metadata"]["labels"] = json!(labels);
        });
        if let Some(mi) = case.fill_mi {
            let uid = c.pod(&format!("pod-{}", case.name), &c.node.clone(), case.name);
            let pv = c.pv_name(case.name);
            let mount = c.root.tmpfs_volume(&uid, &pv, 64 * MI);
            fill(&mount, mi * MI);
            if case.name == "inodes" {
                few_inodes(&mount, 100, 60);
            }
            mounts.push((case.name, mount));
        }
    }
    let _csi = c.csi(
        &mounts
            .iter()
            .map(|(n, m)| (*n, m.clone()))
            .collect::<Vec<_>>(),
        100,
    );
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    // The agent's defaults: ConfigMap headroom/headroom, the one kubectl applied.
    let _agent = c.agent("300ms", &["--listen", &listen]);

    for case in cases.iter().filter(|k| k.want != k.size) {
        c.wait_capacity(case.name, case.want);
    }
    for name in ["bad-threshold", "bad-increase", "bad-limit", "switched-off"] {
        c.wait_blocked(name, "invalid_policy");
    }
    // Several more scans on the grown volumes (now mostly free) and the refused ones.
    std::thread::sleep(Duration::from_secs(2));
    for case in &cases {
        assert_eq!(
            request_of(&c.get(case.name)),
            case.want,
            "{}'s request",
            case.name
        );
        let grew = usize::from(case.want != case.size);
        assert_eq!(c.resize_patches(case.name), grew, "{}: resizes", case.name);
    }
    // At its limit with the inodes still short: said, and nothing more.
    c.wait_blocked("inodes", "at_limit");
    // Claims pvc-autoresizer would not touch and headroom does not manage are not written at all.
    for name in ["no-limit", "zero-limit", "not-enabled"] {
        assert!(
            c.claim_writes(name).is_empty(),
            "{name} was written: {:?}",
            c.claim_writes(name)
        );
    }
    c.assert_one_event(
        "bad-threshold",
        "InvalidPolicy",
        "Warning",
        "resize.topolvm.io/threshold",
    );
    c.assert_one_event(
        "bad-increase",
        "InvalidPolicy",
        "Warning",
        "resize.topolvm.io/increase",
    );
    c.assert_one_event(
        "bad-limit",
        "InvalidPolicy",
        "Warning",
        "resize.topolvm.io/storage_limit",
    );
    c.assert_one_event("mysql-a-1", "Resized", "Normal", "1Gi -> 3Gi");
    for name in ["bad-threshold", "switched-off"] {
        assert_eq!(blocked_metric(port, name, "invalid_policy"), 1.0, "{name}");
    }
    // headroom switched off over what pvc-autoresizer enables: said, never silent.
    c.assert_one_event(
        "switched-off",
        "InvalidPolicy",
        "Warning",
        "turns headroom off",
    );

    // What a user checks before uninstalling pvc-autoresizer: the effective policy and origins.
    let policy = status_policy(&c, "defaults");
    let row = &policy[0];
    let key = |k: &str| {
        row["keys"]
            .as_array()
            .and_then(|keys| keys.iter().find(|r| r["key"] == k))
            .cloned()
            .unwrap_or_else(|| panic!("{k} in {row}"))
    };
    assert_eq!(key("enabled")["source"], "topolvm_storage_class_annotation");
    assert_eq!(key("limit")["value"], "5Gi");
    assert_eq!(key("limit")["source"], "topolvm_pvc_annotation");
    // Issue 24: pvc-autoresizer's default threshold is a 10 % free-space floor, crossed strictly
    // below, with no percent-used trigger beside it (was usageThreshold 90).
    assert_eq!(key("minAvailable")["value"], "10%");
    assert_eq!(key("minAvailable")["source"], "topolvm_default");
    assert_eq!(key("usageThreshold")["value"], "0");
    assert_eq!(key("usageThreshold")["source"], "topolvm_default");
    assert_eq!(key("maxActionsPerDay")["source"], "config_map_default");
    assert_eq!(
        key("maxActionsPerDay")["origin"],
        "ConfigMap headroom/headroom key policy.yaml"
    );
    let table = status_table(&c, "defaults");
    assert!(
        table.contains(&format!("managed: enabled for pvc-autoresizer by StorageClass {enabled} annotation resize.topolvm.io/enabled")),
        "{table}"
    );

    assert!(
        before == manifests(),
        "the test changed the shipped manifests"
    );
}

/// Remounts the tmpfs at `mount` with `total` inodes (the CSI driver's later remounts keep it)
/// and creates `files` empty files.
fn few_inodes(mount: &Path, total: u64, files: u64) {
    use nix::mount::{MsFlags, mount as remount};
    let opts = format!("size={},nr_inodes={total}", 64 * MI);
    remount(
        Some("tmpfs"),
        mount,
        Some("tmpfs"),
        MsFlags::MS_REMOUNT,
        Some(opts.as_str()),
    )
    .expect("remount with few inodes");
    for i in 0..files {
        std::fs::write(mount.join(format!("f{i}")), b"").expect("create a file");
    }
}

/// `headroom_volume_resize_blocked{reason=...}` of `claim`.
fn blocked_metric(port: u16, claim: &str, reason: &str) -> f64 {
    wait_for(Duration::from_secs(10), "the blocked metric", || {
        let (_, text) = support::http::get(port, "/metrics")?;
        let line = text.lines().find(|l| {
            l.starts_with("headroom_volume_resize_blocked{")
                && l.contains(&format!("persistentvolumeclaim=\"{claim}\""))
                && l.contains(&format!("reason=\"{reason}\""))
        })?;
        line.rsplit(' ').next()?.parse().ok()
    })
}

fn headroom_status(c: &KubeCluster, claim: &str, format: &str) -> String {
    c.headroom_status(&["--policy", "-n", &c.ns, claim, "--format", format])
}

fn status_policy(c: &KubeCluster, claim: &str) -> Vec<serde_json::Value> {
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&headroom_status(c, claim, "json")).expect("status JSON");
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows
}

fn status_table(c: &KubeCluster, claim: &str) -> String {
    headroom_status(c, claim, "table")
}
