//! Offline expansion on the real node (`tests/real_node_offline.rs`): headroom installed with
//! `overlays/offline-expansion/`'s eviction grant, claims on the test driver's offline class,
//! StatefulSets that recreate their pod after an eviction, and what the test reads back (pods,
//! the agent's Events, the `restart` in the claim's status).

use std::time::{Duration, Instant};

use serde_json::Value;

use super::observe::claim_json;
use super::scenario::{MI, Vol, VolSpec, claim, install_with, policy, statfs};
use super::{Node, PAUSE_IMAGE, wait_for_cmd};

/// How long a resize may wait for the node before the agent calls it `awaiting_remount`
/// (`--resize-timeout`, 10m by default; shortened so that a scenario takes a minute).
pub const RESIZE_TIMEOUT: &str = "30s";

/// The shipped manifests plus `overlays/offline-expansion/rbac.yaml` as it ships, and the agent's
/// `HEADROOM_RESIZE_TIMEOUT` set to [`RESIZE_TIMEOUT`]. The overlay's one file is listed here
/// rather than its directory: the test's overlay names `../daemonset` under `bases` (as the
/// shipped daemonset/ names rbac/), which a second `resources` list would replace.
pub fn install_offline(node: &Node) {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let rbac = std::fs::read_to_string(repo.join("overlays/offline-expansion/rbac.yaml"))
        .expect("overlays/offline-expansion/rbac.yaml");
    let patch = format!(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: headroom\n  namespace: headroom\nspec:\n  template:\n    spec:\n      containers:\n        - name: agent\n          env:\n            - name: HEADROOM_RESIZE_TIMEOUT\n              value: \"{RESIZE_TIMEOUT}\"\n"
    );
    install_with(
        node,
        "resources:\n  - offline-rbac.yaml\npatchesStrategicMerge:\n  - resize-timeout.yaml\n",
        &[("offline-rbac.yaml", rbac), ("resize-timeout.yaml", patch)],
    );
}

/// [`policy`] restarting pods in a window that is always open (every minute, for two), with
/// `extra` lines after it.
pub fn evicting(extra: &str) -> String {
    policy(&format!(
        "    headroom.dev/offline-expansion: evict\n    headroom.dev/maintenance-window-schedule: \"* * * * *\"\n    headroom.dev/maintenance-window-duration: 2m\n{extra}"
    ))
}

/// A 300Mi claim `name` on the offline class carrying `meta`.
pub fn offline_claim(node: &Node, ns: &str, name: &str, meta: &str) {
    claim(
        node,
        ns,
        name,
        &VolSpec {
            size_mi: 300,
            claim_meta: meta,
            file: None,
            offline: true,
        },
    );
}

/// A StatefulSet `sts` of one pause pod labelled `app: <sts>` and `labels` (`, key: value` pairs
/// appended to that flow map), mounting claim `claim` at /data: what recreates the pod after an eviction, as a
/// StatefulSet or an operator does. The claim is `<template>-<sts>-0` of a `volumeClaimTemplates`
/// entry when `template` is given (the StatefulSet adopts the existing claim), else a plain
/// volume.
pub fn statefulset(node: &Node, ns: &str, sts: &str, claim: &str, template: bool, labels: &str) {
    let (volumes, templates) = if template {
        let t = claim
            .strip_suffix(&format!("-{sts}-0"))
            .expect("a template's claim name");
        (
            String::new(),
            format!(
                "  volumeClaimTemplates:\n    - metadata: {{name: {t}}}\n      spec: {{accessModes: [ReadWriteOnce], storageClassName: {class}, resources: {{requests: {{storage: {size}}}}}}}\n",
                class = super::scenario::OFFLINE_CLASS,
                size = 300 * MI
            ),
        )
    } else {
        (
            format!(
                "      volumes:\n        - {{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}\n"
            ),
            String::new(),
        )
    };
    let mount = if template {
        claim.strip_suffix(&format!("-{sts}-0")).unwrap_or(claim)
    } else {
        "data"
    };
    node.apply(&format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {sts}
  namespace: {ns}
spec:
  replicas: 1
  serviceName: {sts}
  selector:
    matchLabels: {{app: {sts}}}
  template:
    metadata:
      labels: {{app: {sts}{labels}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: c
          image: {PAUSE_IMAGE}
          imagePullPolicy: Never
          volumeMounts:
            - {{name: {mount}, mountPath: /data}}
{volumes}{templates}"#
    ));
}

/// The pod of StatefulSet `sts`: (uid, Ready, being deleted), or `None` while it has none.
pub fn sts_pod(node: &Node, ns: &str, sts: &str) -> Option<(String, bool, bool)> {
    let p = node.kubectl(&["-n", ns, "get", "pod", &format!("{sts}-0"), "-o", "json"]);
    let p: Value = serde_json::from_str(&p.ok()?).ok()?;
    let ready = p["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    Some((
        p["metadata"]["uid"].as_str()?.to_owned(),
        ready,
        !p["metadata"]["deletionTimestamp"].is_null(),
    ))
}

/// The uid of the Ready pod of `sts` that is not `old`, once there is one.
pub fn ready_pod(node: &Node, ns: &str, sts: &str, old: Option<&str>, within: Duration) -> String {
    wait_for_cmd(within, &format!("{ns}/{sts}-0 Ready"), || {
        let (uid, ready, deleting) = sts_pod(node, ns, sts)?;
        (ready && !deleting && Some(uid.as_str()) != old).then_some(uid)
    })
}

/// The claim `name` as mounted by the pod `uid`.
pub fn vol(ns: &str, name: &str, uid: &str) -> Vol {
    super::scenario::vol_of(ns, name, uid)
}

/// The agent's Events about claim `name` with `reason` (events.k8s.io/v1).
pub fn events(node: &Node, ns: &str, name: &str, reason: &str) -> Vec<String> {
    node.get_json(&["-n", ns, "events.v1.events.k8s.io"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["regarding"]["name"] == name && e["reason"] == reason)
        .map(|e| e["note"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The `restart` object of the claim's status (`{"restart": "refused", "count": 1, ...}`).
pub fn restart(c: &Value) -> Option<Value> {
    let s: Value =
        serde_json::from_str(c["metadata"]["annotations"]["headroom.dev/status"].as_str()?).ok()?;
    s.get("restart").cloned()
}

/// Waits until the claim's status says `reason` is what holds it.
pub fn wait_blocked(node: &Node, v: &Vol, reason: &str, within: Duration) -> Instant {
    wait_for_cmd(within, &format!("{}/{} {reason}", v.ns, v.claim), || {
        (super::observe::status_field(&claim_json(node, v), "blockedReason").as_deref()
            == Some(reason))
        .then(Instant::now)
    })
}

/// [`wait_blocked`], or until the agent's Event `event` about the claim exists: a status that
/// lasts one scan (held, evicted in the same scan, landed at the next) can pass between two
/// polls of a loaded node; the Event stays.
pub fn wait_blocked_or(
    node: &Node,
    v: &Vol,
    reason: &str,
    event: &str,
    within: Duration,
) -> Instant {
    wait_for_cmd(
        within,
        &format!("{}/{} {reason} or {event}", v.ns, v.claim),
        || {
            let status = super::observe::status_field(&claim_json(node, v), "blockedReason");
            let held = status.as_deref() == Some(reason);
            (held || !events(node, &v.ns, &v.claim, event).is_empty()).then(Instant::now)
        },
    )
}

/// Waits for the agent's PATCH of the claim's request past 300Mi.
pub fn wait_patched(node: &Node, v: &Vol, within: Duration) -> Instant {
    wait_for_cmd(within, &format!("the agent's PATCH of {}", v.claim), || {
        (super::observe::request(&claim_json(node, v)) > 300 * MI).then(Instant::now)
    })
}

/// Waits until the filesystem at `v`'s mount is larger than `size0` bytes.
pub fn wait_larger(v: &Vol, size0: u64, within: Duration) -> Instant {
    wait_for_cmd(within, &format!("{}'s filesystem larger", v.claim), || {
        let m = v.mount();
        (m.exists() && statfs(&m).0 > size0).then(Instant::now)
    })
}

/// Waits for the pod of `sts` other than `uid` to be gone or going: the eviction's effect.
pub fn wait_evicted(node: &Node, ns: &str, sts: &str, uid: &str, within: Duration) -> Instant {
    wait_for_cmd(within, &format!("{ns}/{sts}-0 evicted"), || {
        match sts_pod(node, ns, sts) {
            Some((now, _, deleting)) => (now != uid || deleting).then(Instant::now),
            None => Some(Instant::now()),
        }
    })
}

/// Seconds between two instants, for the printed figures.
pub fn secs(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}
