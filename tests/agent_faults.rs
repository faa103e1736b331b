//! The agent under an API server that fails, stalls and drops watches: the real kube-apiserver
//! behind the fault proxy (tests/support/kube/proxy.rs), which answers 500s, holds requests and
//! ends watches on cue. Two agents on one RWX claim and SIGKILL at random moments run on the
//! real server directly (kube_fleet.rs).

mod support {
    pub mod cluster;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use support::cluster::{Cluster, ENABLED, available, history_len, status_field};
use support::node::{MI, capacity_of, fill, request_of, wait_for};

fn alive(agent: &mut support::node::Agent, when: &str) {
    let exited = agent.child.try_wait().expect("try_wait");
    assert!(exited.is_none(), "the agent exited {when}: {exited:?}");
}

#[test]
fn api_failures_slowness_and_dropped_watches_then_one_resize() {
    if !available(
        "api_failures_slowness_and_dropped_watches_then_one_resize",
        &[],
    ) {
        return;
    }
    let mut c = Cluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, ENABLED);
    let _csi = c.csi(&[("data", mount.clone())], 300);
    let mut agent = c.agent_on(&c.node, c.root.path(), "500ms", &["--api-timeout", "1s"]);
    wait_for(Duration::from_secs(15), "first status", || {
        status_field(&c.get("data"), "state")
    });

    // Outage: every request answers 500 and the open watches end. The volume fills meanwhile.
    c.proxy.set_failing(true);
    c.proxy.drop_watches();
    fill(&mount, 56 * MI);
    std::thread::sleep(Duration::from_secs(3));
    alive(&mut agent, "during the outage");
    assert_eq!(c.resize_patches("data"), 0);

    // Slow: answers take 2 s, past the agent's 1 s bound on each request; watches cut again.
    // A patch the agent gave up on may still land: only the precondition stops a second one.
    c.proxy.set_failing(false);
    c.proxy.set_delay(Duration::from_secs(2));
    c.proxy.drop_watches();
    std::thread::sleep(Duration::from_secs(4));
    alive(&mut agent, "while the API was slow");

    c.proxy.set_delay(Duration::ZERO);
    wait_for(Duration::from_secs(40), "the resize after recovery", || {
        (capacity_of(&c.get("data")) == 80 * MI).then_some(())
    });
    // The server has the PATCH before the proxy logs it: the one counted below, waited for.
    c.wait_resize_patches("data", 1);
    std::thread::sleep(Duration::from_secs(2));
    alive(&mut agent, "after recovery");
    let pvc = c.get("data");
    assert_eq!(request_of(&pvc), 80 * MI);
    assert_eq!(c.resize_patches("data"), 1);
    assert_eq!(history_len(&pvc), 1);
}

/// A `ConfigKeyInvalid` Event whose create fails (a 500) is created at a later scan: the agent
/// keeps a text as said only once its Event exists. One agent, so no other node's create hides
/// the failure.
#[test]
fn a_config_key_event_whose_create_failed_is_created_at_a_later_scan() {
    if !available(
        "a_config_key_event_whose_create_failed_is_created_at_a_later_scan",
        &[],
    ) {
        return;
    }
    let c = Cluster::new();
    c.configmap(serde_json::json!({ "notifications.yaml": "sinks: 7\n" }));
    c.proxy
        .fail_next_matching(1, 500, "POST", "/namespaces/headroom/events");
    let _agent = c.agent("300ms");
    let said = || {
        c.events_in("headroom", &c.configmap)
            .into_iter()
            .filter(|(reason, _, _)| reason == "ConfigKeyInvalid")
            .count()
    };
    wait_for(Duration::from_secs(20), "the Event, created again", || {
        (said() == 1).then_some(())
    });
    // The Event exists on the server a moment before the proxy logs its create: wait for that.
    let event_post = |r: &support::kube::proxy::RequestRecord| {
        r.method == "POST" && r.path.contains("/namespaces/headroom/events")
    };
    let posts: Vec<u16> = c
        .proxy
        .wait_requests(Duration::from_secs(10), "the Event's create", |log| {
            log.iter().any(|r| event_post(r) && r.status == 201)
        })
        .into_iter()
        .filter(event_post)
        .map(|r| r.status)
        .collect();
    assert_eq!(posts.first(), Some(&500), "{posts:?}");
    assert!(posts.contains(&201), "{posts:?}");
    // Said: no more creates.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(said(), 1);
}
