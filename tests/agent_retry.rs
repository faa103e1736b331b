//! KEP-1790 recovery end to end: an infeasible request is lowered once, to the largest step the
//! claim's history shows worked; a cluster that refuses lowering is asked once, not every scan.
//! The real API server (1.34 or newer: `allocatedResourceStatuses` written by the test as the
//! resizer writes it, and the lowering judged by the server's own KEP-1790 rule) behind the fault
//! proxy; a server without KEP-1790 (1.31 and older) is the proxy's one scripted refusal
//! (tests/support/kube/before_1790.rs), since no tested release can be made to give it.

mod support {
    pub mod cluster;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use support::cluster::{Cluster, available, history, status_field};
use support::node::{MI, request_of, wait_for};

const GI_HISTORY: &str = r#"[{"at":"2026-01-01T00:00:00Z","kind":"Grow","from":50331648,"to":67108864,"node":"n"},{"at":"2026-01-01T01:00:00Z","kind":"Grow","from":67108864,"to":134217728,"node":"n"}]"#;

/// A 64Mi claim whose last resize, to 128Mi, the storage system refused.
fn infeasible_claim(recover: bool) -> Cluster {
    let mut c = Cluster::new();
    if !recover {
        c.proxy
            .before_1790()
            .refuse_lowering(&c.ns, "data", 128 * MI);
    }
    c.pvc(
        "data",
        &c.fast,
        64,
        &[
            ("enabled", "true"),
            ("limit", "1Gi"),
            ("history", GI_HISTORY),
        ],
        |p| {
            let spec = p.spec.as_mut().expect("spec");
            let requests = spec
                .resources
                .as_mut()
                .and_then(|r| r.requests.as_mut())
                .expect("requests");
            requests.insert("storage".into(), Quantity("128Mi".into()));
            let status = p.status.as_mut().expect("status");
            status.allocated_resource_statuses = Some(
                [(
                    "storage".to_string(),
                    "ControllerResizeInfeasible".to_string(),
                )]
                .into(),
            );
        },
    );
    let uid = c.pod("pod-data", &c.node, "data");
    let pv = c.pv_name("data");
    c.root.tmpfs_volume(&uid, &pv, 64 * MI);
    c
}

fn lowering_patches(c: &Cluster) -> usize {
    c.resize_patch_bodies("data").len()
        + c.proxy
            .requests()
            .iter()
            .filter(|r| r.method == "PATCH" && r.status == 422)
            .count()
}

#[test]
fn infeasible_request_is_lowered_once_to_a_step_that_worked() {
    if !available("infeasible_request_is_lowered_once", &[]) {
        return;
    }
    let c = infeasible_claim(true);
    let _agent = c.agent("300ms");
    // 64Mi -> 128Mi was refused; 48Mi -> 64Mi (+16Mi) worked: retry at 80Mi.
    wait_for(Duration::from_secs(10), "the retry", || {
        (request_of(&c.get("data")) == 80 * MI).then_some(())
    });
    let h = history(&c.get("data"));
    let last = h.last().expect("history entry");
    assert_eq!(
        (
            last["kind"].as_str(),
            last["from"].as_u64(),
            last["to"].as_u64()
        ),
        (Some("Retry"), Some(128 * MI), Some(80 * MI))
    );
    // Still reported infeasible (the mock storage does nothing): no second retry, no growth.
    // The server has the retry's PATCH before the proxy logs it: waited for, then no second.
    c.wait_resize_patches("data", 1);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.resize_patches("data"), 1);
    assert_eq!(
        status_field(&c.get("data"), "blockedReason").as_deref(),
        Some("resize_failed")
    );
    let events = c.events_for("data");
    assert!(
        events.iter().any(|(r, _, _)| r == "ExpansionRetried"),
        "{events:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|(r, _, _)| r == "ExpansionInfeasible")
            .count(),
        1,
        "{events:?}"
    );
}

#[test]
fn a_cluster_that_refuses_lowering_is_asked_once() {
    if !available("a_cluster_that_refuses_lowering_is_asked_once", &[]) {
        return;
    }
    let c = infeasible_claim(false);
    let _agent = c.agent("300ms");
    wait_for(Duration::from_secs(10), "the refused retry", || {
        (lowering_patches(&c) > 0).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(lowering_patches(&c), 1, "asked more than once");
    assert_eq!(request_of(&c.get("data")), 128 * MI);
    assert_eq!(
        status_field(&c.get("data"), "blockedReason").as_deref(),
        Some("resize_failed")
    );
}
