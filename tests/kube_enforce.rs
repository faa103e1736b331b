//! `enforcement: recommend | approve` against a real kube-apiserver 1.20 + etcd
//! (tests/support/kube), the agent as its own service account: a `recommend` claim is never
//! patched while its `act` twin grows, and recommends what the twin grew; an approval given with
//! `headroom approve` is carried out once and recorded with its field manager (from the
//! server's managedFields); a stale or invalid approval is refused with its reason and never
//! carried out later; a claim that did not opt in is never written, approval or not. Each new
//! recommendation is one notification to a real HTTP sink.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
    pub mod sink;
    pub mod sink_kube;
}

use std::time::Duration;

use serde_json::json;
use support::kube::cluster::{KubeCluster, POLICY, annotation};
use support::kube::server;
use support::node::{MI, fill, request_of, wait_for};
use support::sink::{Mode, Sink};

/// [`POLICY`] with `enforcement` set.
fn policy(enforcement: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut p = POLICY.to_vec();
    p.push(("enforcement", enforcement));
    p
}

/// The claim's recommendation in its status annotation, once there is one.
fn recommendation(c: &KubeCluster, name: &str) -> Option<serde_json::Value> {
    let text = c.status_field(name, "recommendation")?;
    serde_json::from_str(&text).ok()
}

fn wait_recommendation(c: &KubeCluster, name: &str) -> serde_json::Value {
    wait_for(
        Duration::from_secs(20),
        &format!("{name}'s recommendation"),
        || recommendation(c, name),
    )
}

fn approval(c: &KubeCluster, name: &str) -> Option<serde_json::Value> {
    serde_json::from_str(&c.status_field(name, "approval")?).ok()
}

/// `headroom approve -n NS NAME` as the cluster's admin: exit status and output.
fn headroom_approve(c: &KubeCluster, name: &str) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["approve", "-n", &c.ns, name, "--kubeconfig"])
        .arg(c.admin_kubeconfig.path())
        .env_remove("KUBECONFIG")
        .output()
        .expect("run headroom approve");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn history(c: &KubeCluster, name: &str) -> Vec<serde_json::Value> {
    annotation(&c.get(name), "headroom.dev/history")
        .map(|h| serde_json::from_str(&h).expect("history is JSON"))
        .unwrap_or_default()
}

fn count_events(c: &KubeCluster, name: &str, reason: &str) -> usize {
    c.events_for(name)
        .iter()
        .filter(|(r, _, _)| r == reason)
        .count()
}

/// The agent publishes an Event after the write it tells of: wait for it to be there.
fn wait_event(c: &KubeCluster, name: &str, reason: &str) {
    wait_for(
        Duration::from_secs(10),
        &format!("{name}'s {reason} Event"),
        || (count_events(c, name, reason) > 0).then_some(()),
    );
}

#[test]
fn recommend_never_patches_and_recommends_what_its_act_twin_grew() {
    if !server::available("recommend_never_patches_and_recommends_what_its_act_twin_grew") {
        return;
    }
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let act = c.claim("act", &fast, 64, POLICY);
    let rec = c.claim("rec", &fast, 64, &policy("recommend"));
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent("500ms", &["--listen", &listen]);
    for name in ["act", "rec"] {
        wait_for(Duration::from_secs(20), "the first status", || {
            c.status_field(name, "state")
        });
    }
    // 56Mi of 64Mi is 87.5 % >= 80 %: the twin grows by 16Mi; the other is only recommended.
    fill(&act, 56 * MI);
    fill(&rec, 56 * MI);
    c.wait_request("act", 80 * MI);
    let r = wait_recommendation(&c, "rec");
    assert_eq!(r["toBytes"], json!(request_of(&c.get("act"))), "{r}");
    assert_eq!(r["fromBytes"], json!(64 * MI), "{r}");
    let id = r["id"].as_str().expect("id").to_string();
    assert!(r["staleAt"].as_str() > r["madeAt"].as_str(), "{r}");
    assert_eq!(
        c.status_field("rec", "state").as_deref(),
        Some("Recommended")
    );

    // Many scans over the same need: one recommendation, one Event, no write of a size.
    std::thread::sleep(Duration::from_secs(4));
    c.assert_resize_patches("rec", 0);
    c.assert_resize_patches("act", 1);
    assert_eq!(request_of(&c.get("rec")), 64 * MI);
    assert_eq!(
        recommendation(&c, "rec").expect("still there")["id"],
        json!(id)
    );
    assert_eq!(
        c.history_len("rec"),
        0,
        "a recommendation writes no history"
    );
    c.assert_one_event("rec", "GrowRecommended", "Normal", &id);
    assert_eq!(count_events(&c, "rec", "Resized"), 0);
    // Every write of the recommend claim was its status, never its spec.
    for w in c.claim_writes("rec") {
        let body = w.request_object.clone().unwrap_or_default();
        assert!(body.pointer("/spec").is_none(), "wrote the spec: {body}");
    }
    let gauge = support::http::claim_metric(port, "headroom_volume_recommended_bytes", "rec");
    assert_eq!(gauge, Some((80 * MI) as f64));
    assert_eq!(
        support::http::claim_metric(port, "headroom_volume_recommended_bytes", "act"),
        None
    );
    let table = c.headroom_status(&["-n", &c.ns]);
    assert!(
        table.contains(&format!("Recommended 80Mi ({id})")),
        "{table}"
    );
}

#[test]
fn an_approval_is_carried_out_once_and_recorded_with_its_field_manager() {
    if !server::available("an_approval_is_carried_out_once_and_recorded_with_its_field_manager") {
        return;
    }
    let mut c = KubeCluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, &policy("approve"));
    let _agent = c.agent("500ms", &[]);
    fill(&mount, 56 * MI);
    let r = wait_recommendation(&c, "data");
    let id = r["id"].as_str().expect("id").to_string();
    std::thread::sleep(Duration::from_secs(2));
    c.assert_resize_patches("data", 0);

    let (ok, out) = headroom_approve(&c, "data");
    assert!(ok, "{out}");
    assert!(out.contains(&id) && out.contains("64Mi -> 80Mi"), "{out}");
    assert_eq!(
        annotation(&c.get("data"), "headroom.dev/approve").as_deref(),
        Some(id.as_str())
    );
    c.wait_request("data", 80 * MI);
    c.assert_resize_patches("data", 1);
    let h = history(&c, "data");
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0]["to"], json!(80 * MI));
    assert_eq!(h[0]["approval"]["id"], json!(id));
    assert_eq!(h[0]["approval"]["by"], json!("headroom-approve"));
    let a = approval(&c, "data").expect("the approval's note");
    assert_eq!(
        (a["id"].clone(), a["executed"].clone()),
        (json!(id), json!(true))
    );
    wait_event(&c, "data", "Resized");
    c.assert_one_event(
        "data",
        "Resized",
        "Normal",
        &format!("approved recommendation {id}"),
    );

    // The storage completes it; a new fill needs a new grow: a new recommendation, while the
    // old approval, still on the claim, is never carried out again.
    let _csi = c.csi(&[("data", mount.clone())], 100);
    c.wait_capacity("data", 80 * MI);
    fill(&mount, 72 * MI);
    let next = wait_for(Duration::from_secs(20), "a new recommendation", || {
        recommendation(&c, "data").filter(|r| r["id"] != json!(id))
    });
    assert_eq!(next["fromBytes"], json!(80 * MI));
    std::thread::sleep(Duration::from_secs(3));
    c.assert_resize_patches("data", 1);
    assert_eq!(request_of(&c.get("data")), 80 * MI);
    assert_eq!(count_events(&c, "data", "ApprovalRefused"), 0);
}

#[test]
fn stale_approvals_are_refused_with_the_reason_and_never_carried_out_later() {
    if !server::available("stale_approvals_are_refused_with_the_reason_and_never_carried_out_later")
    {
        return;
    }
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let lowered = c.claim("lowered", &fast, 64, &policy("approve"));
    let changed = c.claim("changed", &fast, 64, &policy("approve"));
    let _agent = c.agent("500ms", &[]);
    fill(&lowered, 56 * MI);
    fill(&changed, 56 * MI);
    let old_l = wait_recommendation(&c, "lowered")["id"].clone();
    let old_c = wait_recommendation(&c, "changed")["id"].clone();

    // Approved in the same write that lowers the limit below the recommended 80Mi.
    c.patch_claim(
        "lowered",
        json!({"metadata": {"annotations": {
            "headroom.dev/limit": "72Mi", "headroom.dev/approve": old_l,
        }}}),
    );
    // Approved in the same write that changes the claim's request by hand.
    c.patch_claim(
        "changed",
        json!({"metadata": {"annotations": {"headroom.dev/approve": old_c}},
               "spec": {"resources": {"requests": {"storage": "70Mi"}}}}),
    );
    for (name, why) in [
        ("lowered", "80Mi is above the limit of 72Mi"),
        ("changed", "the claim changed since"),
    ] {
        let a = wait_for(Duration::from_secs(20), "the refusal", || {
            approval(&c, name)
        });
        assert_eq!(a["executed"], json!(false), "{a}");
        assert!(a["refused"].as_str().expect("reason").contains(why), "{a}");
        wait_event(&c, name, "ApprovalRefused");
        c.assert_one_event(name, "ApprovalRefused", "Warning", why);
    }
    // The limit raised again: the refused approval, still on the claim, is not carried out.
    c.patch_claim(
        "lowered",
        json!({"metadata": {"annotations": {"headroom.dev/limit": "200Mi"}}}),
    );
    std::thread::sleep(Duration::from_secs(3));
    for name in ["lowered", "changed"] {
        c.assert_resize_patches(name, 0);
        assert_eq!(c.history_len(name), 0);
        assert_eq!(count_events(&c, name, "ApprovalRefused"), 1);
    }
    // A new recommendation waits, with a new id (the changed claim's request is in flight: it
    // waits for that first).
    let now = recommendation(&c, "lowered").expect("a recommendation");
    assert_ne!(now["id"], old_l);
    assert_eq!(recommendation(&c, "changed"), None);
    assert_eq!(request_of(&c.get("lowered")), 64 * MI);
    assert_eq!(request_of(&c.get("changed")), 70 * MI);
}

#[test]
fn an_approval_on_a_claim_that_did_not_opt_in_is_ignored() {
    if !server::available("an_approval_on_a_claim_that_did_not_opt_in_is_ignored") {
        return;
    }
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let quiet = [
        ("limit", "200Mi"),
        ("enforcement", "approve"),
        ("approve", "0123456789ab"),
    ];
    let quiet_mount = c.claim("quiet", &fast, 64, &quiet);
    let loud = c.claim("loud", &fast, 64, &policy("approve"));
    fill(&quiet_mount, 62 * MI);
    fill(&loud, 56 * MI);
    let _agent = c.agent("300ms", &[]);
    // The opted-in neighbour proves scans ran and decided.
    wait_recommendation(&c, "loud");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        c.claim_writes("quiet").len(),
        0,
        "{:?}",
        c.claim_writes("quiet")
    );
    assert!(annotation(&c.get("quiet"), "headroom.dev/status").is_none());
    assert_eq!(c.events_for("quiet"), vec![]);
    let (ok, out) = headroom_approve(&c, "quiet");
    assert!(!ok, "approved a claim with no recommendation: {out}");
    assert!(out.contains("has no recommendation waiting"), "{out}");
}

#[test]
fn each_recommendation_is_one_notification() {
    if !server::available("each_recommendation_is_one_notification") {
        return;
    }
    let mut c = KubeCluster::new();
    let sink = Sink::http(Mode::Ok);
    let cm = support::sink_kube::configure(&c, &sink.url(), "json", "");
    let mount = c.claim("data", &c.fast.clone(), 64, &policy("recommend"));
    let _agent = c.agent("500ms", &["--configmap", &cm]);
    fill(&mount, 56 * MI);
    let id = wait_recommendation(&c, "data")["id"].clone();
    wait_for(Duration::from_secs(20), "the message", || {
        (!sink.received().is_empty()).then_some(())
    });
    // Ten more scans over the same recommendation: nothing new to say.
    std::thread::sleep(Duration::from_secs(5));
    let got = sink.received();
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["kind"], "recommended");
    assert_eq!(got[0]["reason"], "GrowRecommended");
    assert_eq!(got[0]["recommendation"], id);
    assert_eq!(
        (got[0]["fromBytes"].as_u64(), got[0]["toBytes"].as_u64()),
        (Some(64 * MI), Some(80 * MI))
    );
    c.assert_resize_patches("data", 0);
}
