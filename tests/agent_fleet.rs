//! Fleet-safe operation end to end on the real API server behind the fault proxy (real tmpfs
//! volumes, `headroom agent` as a child process): SIGTERM during a patch (the proxy holds the
//! PATCH), failed resizes (`allocatedResourceStatuses`, newer than the server's 1.20, from the
//! proxy's 1.34 mock). Drains and group sizing run on
//! the real server (kube_fleet.rs, kube_agent.rs), topolvm annotations too (kube_migration.rs);
//! the kubelet as a second source in `agent_kubelet.rs`; scheduled trims in `agent_reclaim.rs`.

mod support {
    pub mod cluster;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use support::cluster::{Cluster, available, history, status_field};
use support::node::{MI, fill, request_of, wait_for};

/// Threshold 80 %, 16Mi steps, room for several actions. The emergency line is the 95 % used
/// alone: the default 1Gi of critical free space would make every over-threshold volume of these
/// sizes an emergency.
const POLICY: &[(&str, &str)] = &[
    ("enabled", "true"),
    ("limit", "200Mi"),
    ("step", "16Mi"),
    ("max-actions-per-day", "5"),
    ("emergency-grow-critical-minimum-free", "1Mi"),
];

fn blocked_reason(c: &Cluster, name: &str) -> Option<String> {
    status_field(&c.get(name), "blockedReason")
}

/// Waits until the claim's status says `reason` about a measurement over `used_over` percent.
fn wait_blocked(c: &Cluster, name: &str, reason: &str, used_over: f64) {
    wait_for(
        Duration::from_secs(15),
        &format!("{name}: {reason}"),
        || {
            let p = c.get(name);
            let used: f64 = status_field(&p, "usedPercent")?.parse().ok()?;
            (used > used_over && status_field(&p, "blockedReason").as_deref() == Some(reason))
                .then_some(())
        },
    );
}

fn kinds(pvc: &PersistentVolumeClaim) -> Vec<String> {
    history(pvc)
        .iter()
        .map(|a| a["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// (type, note) of the Events about `name` with `reason`.
fn events(c: &Cluster, name: &str, reason: &str) -> Vec<(String, String)> {
    c.events_for(name)
        .into_iter()
        .filter(|(r, _, _)| r == reason)
        .map(|(_, t, n)| (t, n))
        .collect()
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn sigterm(child: &Child) {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("SIGTERM");
}

/// Starts an agent on a 64Mi claim, slows the API down by `delay` and fills the claim past the
/// threshold; returns once the resize PATCH has reached the server and is not answered yet.
fn agent_with_patch_in_flight(delay: Duration) -> (Cluster, support::node::Agent) {
    let mut c = Cluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    let flags = ["--api-timeout", "10s", "--shutdown-grace", "8s"];
    let agent = c.agent_on(&c.node, c.root.path(), "300ms", &flags);
    wait_for(Duration::from_secs(15), "first status", || {
        status_field(&c.get("data"), "state")
    });
    c.proxy.set_delay(delay);
    fill(&mount, 56 * MI);
    let path = format!("/api/v1/namespaces/{}/persistentvolumeclaims/data", c.ns);
    wait_for(
        Duration::from_secs(10),
        "the resize PATCH to arrive",
        || {
            c.proxy
                .arrivals()
                .iter()
                .any(|r| {
                    r.method == "PATCH"
                        && r.path == path
                        && r.body.as_deref().is_some_and(|b| b.contains("\"storage\""))
                })
                .then_some(())
        },
    );
    assert_eq!(c.resize_patches("data"), 0, "the PATCH is still in flight");
    (c, agent)
}

#[test]
fn sigterm_during_a_patch_lets_it_finish_and_exits_zero() {
    if !available("sigterm_during_a_patch_lets_it_finish_and_exits_zero", &[]) {
        return;
    }
    let (c, mut agent) = agent_with_patch_in_flight(Duration::from_secs(2));
    sigterm(&agent.child);
    let status = wait_exit(&mut agent.child, Duration::from_secs(12))
        .expect("the agent did not exit within its shutdown grace");
    assert!(status.success(), "exit status {status:?}");
    let pvc = c.get("data");
    assert_eq!(request_of(&pvc), 80 * MI, "the patch in flight completed");
    assert_eq!(kinds(&pvc), ["Grow"]);
    c.wait_resize_patches("data", 1);
    assert_eq!(c.resize_patches("data"), 1);
}

#[test]
fn second_sigterm_exits_at_once() {
    if !available("second_sigterm_exits_at_once", &[]) {
        return;
    }
    // The PATCH would take 6 s; the grace allows 8 s.
    let (c, mut agent) = agent_with_patch_in_flight(Duration::from_secs(6));
    sigterm(&agent.child);
    assert!(
        wait_exit(&mut agent.child, Duration::from_millis(500)).is_none(),
        "the first signal must wait for the patch in flight"
    );
    sigterm(&agent.child);
    let status = wait_exit(&mut agent.child, Duration::from_secs(2))
        .expect("the second signal did not end the agent at once");
    assert!(!status.success(), "exit status {status:?}");
    assert_eq!(c.resize_patches("data"), 0, "it did not wait for the patch");
}

/// A claim of 64Mi whose last resize (to `request_mi`) failed as `status` says, filled to 87.5 %.
fn failed_claim(c: &mut Cluster, name: &str, request_mi: u64, status: serde_json::Value) {
    c.pvc(name, &c.fast, 64, POLICY, |p| {
        let requests = p.spec.as_mut().and_then(|s| s.resources.as_mut());
        let requests = requests
            .and_then(|r| r.requests.as_mut())
            .expect("requests");
        requests.insert("storage".into(), Quantity(format!("{request_mi}Mi")));
        let mut st = serde_json::to_value(p.status.take()).expect("status");
        for (k, v) in status.as_object().expect("object") {
            st[k] = v.clone();
        }
        p.status = serde_json::from_value(st).expect("status");
    });
    let uid = c.pod(&format!("pod-{name}"), &c.node, name);
    let pv = c.pv_name(name);
    let mount = c.root.tmpfs_volume(&uid, &pv, 64 * MI);
    fill(&mount, 56 * MI);
}

#[test]
fn failed_resizes_get_nothing_stacked_on_top_and_one_event() {
    if !available(
        "failed_resizes_get_nothing_stacked_on_top_and_one_event",
        &[],
    ) {
        return;
    }
    let mut c = Cluster::new();
    // A resize the quota refused: request 96Mi, capacity still 64Mi.
    let infeasible =
        json!({ "allocatedResourceStatuses": { "storage": "ControllerResizeInfeasible" } });
    failed_claim(&mut c, "quota", 96, infeasible);
    let error = json!({ "conditions": [{
        "type": "ControllerResizeError", "status": "True",
        "message": "resize volume: backend refused"
    }]});
    failed_claim(&mut c, "stuck", 80, error);
    let _agent = c.agent("300ms");
    for name in ["quota", "stuck"] {
        wait_blocked(&c, name, "resize_failed", 85.0);
    }
    // Several more scans of volumes over the threshold.
    std::thread::sleep(Duration::from_secs(2));
    for (name, request, reason) in [
        ("quota", 96, "ExpansionInfeasible"),
        ("stuck", 80, "ExpansionStuck"),
    ] {
        assert_eq!(c.resize_patches(name), 0, "{name}: growth stacked on top");
        assert_eq!(request_of(&c.get(name)), request * MI, "{name}'s request");
        assert_eq!(blocked_reason(&c, name).as_deref(), Some("resize_failed"));
        let said = events(&c, name, reason);
        assert_eq!(said.len(), 1, "{name}: one {reason}, got {said:?}");
        assert_eq!(said[0].0, "Warning");
    }
    assert!(
        events(&c, "quota", "ExpansionInfeasible")[0]
            .1
            .contains("ControllerResizeInfeasible")
    );
    assert!(
        events(&c, "stuck", "ExpansionStuck")[0]
            .1
            .contains("backend refused")
    );
}

// The kubelet's numbers as a second source: tests/agent_kubelet.rs (a real TLS kubelet).
