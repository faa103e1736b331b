//! Notifications from the agent on the real API server (tests/support/kube): the sink is a real
//! HTTP server on loopback (tests/support/sink.rs), configured in the agent's ConfigMap with its
//! URL in the Secret `headroom-notifications`, which the agent may `get` by that name only
//! (`overlays/notifications/rbac.yaml`, applied over `rbac/`).
//! Messages follow the Events' "on change" rule; a hanging sink delays no grow.

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

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::http::{free_port, metric};
use support::kube::block;
use support::kube::cluster::KubeCluster;
use support::kube::server;
use support::node::{KubeletRoot, MI, fill, wait_for};
use support::sink::{Mode, Sink};
use support::sink_kube::configure;

fn policy(limit: &str) -> Vec<(&'static str, String)> {
    vec![
        ("enabled", "true".into()),
        ("limit", limit.into()),
        ("step", "16Mi".into()),
        ("max-actions-per-day", "5".into()),
    ]
}

#[test]
fn each_grow_and_each_block_is_one_message() {
    if !server::available("each_grow_and_each_block_is_one_message") {
        return;
    }
    let mut c = KubeCluster::new();
    let sink = Sink::http(Mode::Ok);
    let cm = configure(&c, &sink.url(), "json", "");
    let p = policy("80Mi");
    let p: Vec<(&str, &str)> = p.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mount = c.claim("data", &c.fast.clone(), 64, &p);
    let _csi = c.csi(&[("data", mount.clone())], 100);
    let _agent = c.agent("500ms", &["--configmap", &cm]);

    // 56Mi of 64Mi: grown to 80Mi, its limit; then 72Mi of 80Mi: needs growth, at the limit.
    fill(&mount, 56 * MI);
    c.wait_capacity("data", 80 * MI);
    fill(&mount, 72 * MI);
    c.wait_blocked("data", "at_limit");
    wait_for(Duration::from_secs(20), "two messages", || {
        (sink.received().len() >= 2).then_some(())
    });
    // Ten more scans: the claim stays blocked, nothing new to say.
    std::thread::sleep(Duration::from_secs(5));
    let got = sink.received();
    assert_eq!(got.len(), 2, "{got:#?}");
    let (grown, blocked) = (&got[0], &got[1]);
    assert_eq!(grown["kind"], "grown");
    assert_eq!(
        (grown["namespace"].as_str(), grown["claim"].as_str()),
        (Some(c.ns.as_str()), Some("data"))
    );
    assert_eq!(grown["node"], c.node.as_str());
    assert_eq!(
        (grown["fromBytes"].as_u64(), grown["toBytes"].as_u64()),
        (Some(64 * MI), Some(80 * MI))
    );
    assert_eq!(blocked["kind"], "blocked");
    assert_eq!(blocked["reason"], "AtLimit");
    assert_eq!(blocked["blocked"], "at_limit");
    assert_eq!(blocked["limitBytes"].as_u64(), Some(80 * MI));
    c.assert_one_event("data", "AtLimit", "Warning", "");
}

/// The sink takes requests and never answers. Every claim is still grown (the agent PATCHes as
/// without a sink), and what does not fit the sink's queue (1 held, 1 in delivery) is counted
/// dropped.
#[test]
fn a_hanging_sink_delays_no_grow_and_overflow_is_counted() {
    if !server::available("a_hanging_sink_delays_no_grow_and_overflow_is_counted") {
        return;
    }
    let mut c = KubeCluster::new();
    let sink = Sink::http(Mode::Hang);
    let cm = configure(&c, &sink.url(), "slack", "  queue: 1\n  timeout: 60s\n");
    let p = policy("200Mi");
    let p: Vec<(&str, &str)> = p.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let names = ["a", "b", "c", "d"];
    let mounts: Vec<_> = names
        .iter()
        .map(|n| c.claim(n, &c.fast.clone(), 64, &p))
        .collect();
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent("500ms", &["--configmap", &cm, "--listen", &listen]);
    wait_for(Duration::from_secs(20), "the sink's series", || {
        support::http::metric(
            port,
            "headroom_notifications_total",
            &["sink=\"team\"", "outcome=\"dropped\""],
        )
    });
    for (name, mount) in names.iter().zip(&mounts) {
        fill(mount, 56 * MI);
        c.wait_request(name, 80 * MI);
        // The next claim's grow starts after this one's message reached the sink.
        if *name == "a" {
            wait_for(Duration::from_secs(20), "the first request to hang", || {
                (sink.attempts() == 1).then_some(())
            });
        }
    }
    for name in names {
        c.assert_resize_patches(name, 1);
    }
    // a's message hangs in delivery, b's is queued, c's and d's found the queue full.
    wait_for(Duration::from_secs(10), "2 dropped", || {
        let dropped = support::http::metric(
            port,
            "headroom_notifications_total",
            &["sink=\"team\"", "outcome=\"dropped\""],
        )?;
        (dropped == 2.0).then_some(())
    });
    assert_eq!(sink.attempts(), 1);
    assert!(sink.received().is_empty());
}

/// The `ConfigKeyInvalid` Events about ConfigMap `name` in the agents' namespace, as notes.
fn config_events(c: &KubeCluster, name: &str) -> Vec<String> {
    c.events_in("headroom", name)
        .into_iter()
        .filter(|(reason, _, _)| reason == "ConfigKeyInvalid")
        .map(|(_, _, note)| note)
        .collect()
}

fn set_sinks(c: &KubeCluster, cm: &str, text: &str) {
    let api: Api<ConfigMap> = Api::namespaced(c.admin.0.clone(), "headroom");
    let body = json!({"data": {"notifications.yaml": text}});
    let cm = cm.to_string();
    block(async move {
        api.patch(&cm, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .expect("patch the ConfigMap")
    });
}

/// `headroom_config_key_invalid{key="notifications.yaml"}` on each agent.
fn invalid(admins: &[u16]) -> Vec<Option<f64>> {
    let labels = ["key=\"notifications.yaml\""];
    admins
        .iter()
        .map(|a| metric(*a, "headroom_config_key_invalid", &labels))
        .collect()
}

/// A `notifications.yaml` that cannot be read sends nothing, and says so where an operator
/// looks: the gauge on every agent while it lasts, and one Warning Event on the ConfigMap per
/// text however many agents read it (two nodes here); a fixed key clears the gauge, and a new
/// bad text is said again.
#[test]
fn a_notifications_key_that_cannot_be_read_is_said_once_per_text_and_counted() {
    if !server::available(
        "a_notifications_key_that_cannot_be_read_is_said_once_per_text_and_counted",
    ) {
        return;
    }
    let c = KubeCluster::new();
    let sink = Sink::http(Mode::Ok);
    let cm = configure(&c, &sink.url(), "json", "");
    set_sinks(&c, &cm, "sinks:\n- name: team\n  format: morse\n");
    let node_b = format!("{}-b", c.node);
    c.add_node(&node_b);
    let root_b = KubeletRoot::new();
    let admins = [free_port(), free_port()];
    let listen = |p: u16| format!("127.0.0.1:{p}");
    let (la, lb) = (listen(admins[0]), listen(admins[1]));
    let _a = c.agent("200ms", &["--configmap", &cm, "--listen", &la]);
    let _b = c.agent_on(
        &node_b,
        root_b.path(),
        "200ms",
        &["--configmap", &cm, "--listen", &lb],
    );

    wait_for(
        Duration::from_secs(20),
        "both agents to count the key",
        || (invalid(&admins) == [Some(1.0), Some(1.0)]).then_some(()),
    );
    wait_for(Duration::from_secs(10), "the Event", || {
        (!config_events(&c, &cm).is_empty()).then_some(())
    });
    // Twenty more scans of each agent: still one Event, naming the key and the field.
    std::thread::sleep(Duration::from_secs(4));
    let notes = config_events(&c, &cm);
    assert_eq!(notes.len(), 1, "{notes:#?}");
    assert!(
        notes[0].starts_with("notifications.yaml is ignored until it is fixed"),
        "{}",
        notes[0]
    );
    assert!(notes[0].contains("format"), "{}", notes[0]);

    // Fixed: nothing to say; broken again another way: said again, once.
    let fixed = format!(
        "sinks:\n- name: team\n  format: json\n  urlSecret: {{name: {}, key: t{}}}\n",
        support::sink_kube::SECRET,
        c.id
    );
    set_sinks(&c, &cm, &fixed);
    wait_for(Duration::from_secs(20), "the gauge to clear", || {
        (invalid(&admins) == [Some(0.0), Some(0.0)]).then_some(())
    });
    set_sinks(&c, &cm, "sinks: 7\n");
    wait_for(Duration::from_secs(20), "the second Event", || {
        (config_events(&c, &cm).len() == 2).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(config_events(&c, &cm).len(), 2);
    assert!(sink.received().is_empty());
}
