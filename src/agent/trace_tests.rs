//! The agent's decision path over simulated scans: each scan builds the claim object, the probe's
//! volume and the kubelet's numbers, calls [`evaluate`] as the scan does, and applies a grow as
//! the actor does (its merge patch, merged into the claim). A simulated storage system grows the
//! filesystem and sets `status.capacity` each after its own lag (or never sets it); statfs fails
//! at times and the kubelet's numbers are refreshed rarely. No trace grows one fill twice.

use std::path::PathBuf;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::MeasuredBy;
use super::act::grow_body;
use crate::decide::{BlockReason, Measurement};
use crate::k8s::state::StatusAnnotation;
use crate::policy::merge::CentralPolicy;
use crate::probe::{Volume, VolumeClass, VolumeMode};
use crate::resolve::{KubeletVolume, Subject, evaluate};

const GI: u64 = 1 << 30;

/// RFC 7386 JSON merge patch, as the API server applies the actor's patches.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Scan {
    used_add: u64,
    statfs_ok: bool,
    kubelet_refresh: bool,
    /// Seconds since the previous scan.
    gap: i64,
}

fn scans() -> impl Strategy<Value = Vec<Scan>> {
    proptest::collection::vec(
        (
            0u64..GI,
            prop::bool::weighted(0.7),
            prop::bool::weighted(0.25),
            1i64..30,
        )
            .prop_map(|(used_add, statfs_ok, kubelet_refresh, gap)| Scan {
                used_add,
                statfs_ok,
                kubelet_refresh,
                gap,
            }),
        1..80,
    )
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "app-0", "namespace": "db", "uid": "u1" },
        "spec": { "containers": [],
                  "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": "data-app-0" } }] },
    }))
    .expect("pod")
}

fn class() -> StorageClass {
    serde_json::from_value(json!({
        "metadata": { "name": "fast" }, "provisioner": "ebs.csi.aws.com", "allowVolumeExpansion": true,
    }))
    .expect("class")
}

fn request_of(pvc: &Value) -> u64 {
    pvc["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .and_then(|q| crate::quantity::parse(q).ok())
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn one_fill_one_grow_through_evaluate(
        trace in scans(),
        fs_lag in 0i64..120,
        capacity_lag in 0i64..120,
        capacity_absent in any::<bool>(),
        start_used in 6 * GI..9 * GI,
    ) {
        let mut now: Timestamp = "2026-03-01T12:00:00Z".parse().expect("ts");
        let mut pvc = json!({
            "metadata": {
                "name": "data-app-0", "namespace": "db", "resourceVersion": "1",
                "annotations": {
                    "headroom.dev/enabled": "true",
                    "headroom.dev/limit": "1000Gi",
                    "headroom.dev/max-actions-per-day": "10",
                },
            },
            "spec": { "storageClassName": "fast", "volumeName": "pv-1",
                      "resources": { "requests": { "storage": "10Gi" } } },
            "status": { "phase": "Bound" },
        });
        if !capacity_absent {
            pvc["status"]["capacity"] = json!({ "storage": "10Gi" });
        }
        let (pod, class, central) = (pod(), class(), CentralPolicy::default());
        let mut fs_size = 10 * GI;
        let mut used = start_used;
        let mut kubelet: Option<KubeletVolume> = None;
        let mut asked: Option<Timestamp> = None;
        let mut last_write: Option<Timestamp> = None;
        let mut grows = 0;
        for (i, scan) in trace.iter().enumerate() {
            now += SignedDuration::from_secs(scan.gap);
            let request = request_of(&pvc);
            if let Some(at) = asked {
                let since = now.duration_since(at).as_secs();
                if since >= fs_lag { fs_size = request; }
                if !capacity_absent && since >= capacity_lag {
                    pvc["status"]["capacity"] = json!({ "storage": crate::quantity::format(request) });
                }
            }
            used = (used + scan.used_add).min(fs_size);
            let m = Measurement { capacity_bytes: fs_size, used_bytes: used, available_bytes: fs_size - used, ..Default::default() };
            if scan.kubelet_refresh {
                kubelet = Some(KubeletVolume { measurement: m, at: Some(now) });
            }
            let claim: PersistentVolumeClaim = serde_json::from_value(pvc.clone()).expect("pvc");
            let mut vol = Volume::new(PathBuf::from("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-1/mount"), VolumeMode::Filesystem);
            vol.pv = Some("pv-1".into());
            vol.class = VolumeClass::OwnedBlock;
            vol.measurement = scan.statfs_ok.then_some(m);
            let claims = [&claim];
            let s = Subject {
                logical: None,
                watching_since: jiff::Timestamp::UNIX_EPOCH,
                eviction_refused: None,
                owner: None,
                node_object: None,
                pool: &crate::resolve::pool::PoolRead::NotRead,
                volume: &vol,
                pod: &pod,
                pvc: &claim,
                pod_claims: &claims,
                storage_class: Some(&class),
                namespace: None,
                central: &central,
                node: "n",
                node_draining: false,
                resize_timeout: SignedDuration::from_mins(10),
                group_size: None,
                kubelet,
                fill_rate: None,
                quotas: &[],
                quota_refused: false,
            };
            let eval = evaluate(&s, None, now);
            let r = &eval.report;
            if capacity_absent {
                prop_assert!(r.decision.grow_to().is_none(), "grew a claim of unknown size");
                if r.measurement.is_some() {
                    prop_assert_eq!(r.decision.blocked_reason(), Some(BlockReason::CapacityUnknown));
                }
            }
            if i == 0 && !capacity_absent && scan.statfs_ok && used >= 8 * GI {
                prop_assert!(r.decision.grow_to().is_some(), "a full volume is grown: {:?}", r.decision);
            }
            let Some((to, kind)) = r.decision.grow_to() else { continue };
            let measured = r.measurement.expect("a grow needs a measurement");
            // The filesystem measured had finished the previous grow...
            prop_assert_eq!(measured.capacity_bytes, request, "scan {}: grew from a filesystem not yet grown", i);
            // ...and was measured after the previous write.
            if let (Some(w), MeasuredBy::Kubelet) = (last_write, r.measured_by) {
                let at = kubelet.and_then(|k| k.at).expect("dated");
                prop_assert!(at > w, "scan {}: grew from kubelet numbers older than the last write", i);
            }
            let status = StatusAnnotation::from_report(r, now);
            let body = grow_body(&eval, "1", (to, kind), "n", &status, now).expect("patch");
            merge(&mut pvc, &body);
            prop_assert_eq!(request_of(&pvc), to);
            asked = Some(now);
            last_write = Some(now);
            grows += 1;
        }
        prop_assert!(grows <= trace.len());
    }
}

#[test]
fn a_fill_the_resizer_is_slow_to_serve_is_grown_once() {
    // The storage system sets status.capacity at once but the filesystem has not grown yet
    // (the node expands it later): before, the next scans saw request == capacity and grew again.
    let mut grows = 0;
    let mut pvc = json!({
        "metadata": { "name": "data-app-0", "namespace": "db", "resourceVersion": "1",
            "annotations": { "headroom.dev/enabled": "true", "headroom.dev/limit": "1000Gi" } },
        "spec": { "storageClassName": "fast", "volumeName": "pv-1",
                  "resources": { "requests": { "storage": "10Gi" } } },
        "status": { "phase": "Bound", "capacity": { "storage": "10Gi" } },
    });
    let (pod, class, central) = (pod(), class(), CentralPolicy::default());
    let mut now: Timestamp = "2026-03-01T12:00:00Z".parse().expect("ts");
    let m = Measurement {
        capacity_bytes: 10 * GI,
        used_bytes: 9 * GI,
        available_bytes: GI,
        ..Default::default()
    };
    for _ in 0..6 {
        now += SignedDuration::from_secs(2);
        let claim: PersistentVolumeClaim = serde_json::from_value(pvc.clone()).expect("pvc");
        let mut vol = Volume::new(PathBuf::from("/v"), VolumeMode::Filesystem);
        vol.pv = Some("pv-1".into());
        vol.class = VolumeClass::OwnedBlock;
        // The filesystem never grows in this window; status.capacity follows the request at once.
        vol.measurement = Some(m);
        let claims = [&claim];
        let s = Subject {
            logical: None,
            watching_since: jiff::Timestamp::UNIX_EPOCH,
            eviction_refused: None,
            owner: None,
            node_object: None,
            pool: &crate::resolve::pool::PoolRead::NotRead,
            volume: &vol,
            pod: &pod,
            pvc: &claim,
            pod_claims: &claims,
            storage_class: Some(&class),
            namespace: None,
            central: &central,
            node: "n",
            node_draining: false,
            resize_timeout: SignedDuration::from_mins(10),
            group_size: None,
            kubelet: None,
            fill_rate: None,
            quotas: &[],
            quota_refused: false,
        };
        let eval = evaluate(&s, None, now);
        if let Some((to, kind)) = eval.report.decision.grow_to() {
            let status = StatusAnnotation::from_report(&eval.report, now);
            let body = grow_body(&eval, "1", (to, kind), "n", &status, now).expect("patch");
            merge(&mut pvc, &body);
            pvc["status"]["capacity"] = pvc["spec"]["resources"]["requests"].clone();
            grows += 1;
        } else {
            assert_eq!(
                eval.report.decision.blocked_reason(),
                Some(BlockReason::ResizeInProgress),
                "{:?}",
                eval.report.decision
            );
        }
    }
    assert_eq!(grows, 1);
}

/// One scan of `pvc` whose filesystem measures `capacity` (9Gi used).
fn scan_once(pvc: &Value, capacity: u64, now: Timestamp) -> crate::resolve::Evaluation {
    let (pod, class, central) = (pod(), class(), CentralPolicy::default());
    let claim: PersistentVolumeClaim = serde_json::from_value(pvc.clone()).expect("pvc");
    let mut vol = Volume::new(PathBuf::from("/v"), VolumeMode::Filesystem);
    vol.pv = Some("pv-1".into());
    vol.class = VolumeClass::OwnedBlock;
    vol.measurement = Some(Measurement {
        capacity_bytes: capacity,
        used_bytes: 9 * GI,
        available_bytes: capacity - 9 * GI,
        ..Default::default()
    });
    let claims = [&claim];
    let s = Subject {
        logical: None,
        watching_since: jiff::Timestamp::UNIX_EPOCH,
        eviction_refused: None,
        owner: None,
        node_object: None,
        pool: &crate::resolve::pool::PoolRead::NotRead,
        volume: &vol,
        pod: &pod,
        pvc: &claim,
        pod_claims: &claims,
        storage_class: Some(&class),
        namespace: None,
        central: &central,
        node: "n",
        node_draining: false,
        resize_timeout: SignedDuration::from_mins(10),
        group_size: None,
        kubelet: None,
        fill_rate: None,
        quotas: &[],
        quota_refused: false,
    };
    evaluate(&s, None, now)
}

#[test]
fn history_entries_record_result_instance_and_volume_type() {
    use crate::decide::{ActionResult, VolumeRole};
    // Issue 24: each entry says what became of it, which instance and which volume type.
    let mut pvc = json!({
        "metadata": { "name": "data-app-0", "namespace": "db", "resourceVersion": "1",
            "annotations": { "headroom.dev/enabled": "true", "headroom.dev/limit": "1000Gi" } },
        "spec": { "storageClassName": "fast", "volumeName": "pv-1",
                  "resources": { "requests": { "storage": "10Gi" } } },
        "status": { "phase": "Bound", "capacity": { "storage": "10Gi" } },
    });
    let start: Timestamp = "2026-03-01T12:00:00Z".parse().expect("ts");
    let eval = scan_once(&pvc, 10 * GI, start);
    let grow = eval
        .report
        .decision
        .grow_to()
        .expect("9Gi of 10Gi is grown");
    let status = StatusAnnotation::from_report(&eval.report, start);
    merge(
        &mut pvc,
        &grow_body(&eval, "1", grow, "n", &status, start).expect("patch"),
    );
    pvc["status"]["capacity"] = pvc["spec"]["resources"]["requests"].clone();
    let before = pvc.clone();
    let h = &scan_once(&pvc, 10 * GI, start + SignedDuration::from_secs(5)).history;
    assert_eq!(h[0].result, Some(ActionResult::Requested));
    assert_eq!(h[0].instance.as_deref(), Some("app-0"));
    assert_eq!(h[0].volume_type, Some(VolumeRole::Other));
    // What it was decided on: a line crossed (not predicted), at 90 %, with no rate yet.
    assert!(!h[0].predicted);
    assert_eq!(h[0].used_percent.map(|p| p.get()), Some(90.0));
    assert_eq!(h[0].bytes_per_second, None);

    // The filesystem shows the new size: Succeeded, and the history is written back.
    let landed = scan_once(&pvc, grow.0, start + SignedDuration::from_secs(30));
    assert!(landed.history_changed);
    assert_eq!(landed.history[0].result, Some(ActionResult::Succeeded));

    // It never does, past the resize timeout: Failed, written back once.
    let late = start + SignedDuration::from_mins(11);
    let failed = scan_once(&before, 10 * GI, late);
    assert_eq!(
        failed.report.decision.blocked_reason(),
        Some(BlockReason::ResizeFailed)
    );
    assert!(failed.history_changed);
    assert_eq!(failed.history[0].result, Some(ActionResult::Failed));
}
