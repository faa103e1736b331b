//! The agent under an API server that fails, stalls and drops watches: faults a real
//! kube-apiserver cannot be made to produce, so they run on the fake (tests/README.md). Two
//! agents on one RWX claim and SIGKILL at random moments run on the real server (kube_fleet.rs).

#[path = "support/fake_api/mod.rs"]
mod fake_api;
mod support {
    pub mod fake_cluster;
    pub mod node;
    pub mod root;
}

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use support::fake_cluster::{Cluster, NODE, NS, history_len, status_field};
use support::node::{CsiDriver, MI, capacity_of, fill, request_of, wait_for};

use support::root::needs_root;

use support::fake_cluster::ENABLED;

fn csi(c: &Cluster, mounts: &[(&str, PathBuf)], delay_ms: u64) -> CsiDriver {
    let mut volumes: BTreeMap<(String, String), Vec<PathBuf>> = BTreeMap::new();
    for (name, m) in mounts {
        volumes
            .entry((NS.into(), name.to_string()))
            .or_default()
            .push(m.clone());
    }
    CsiDriver::start(c.fake.clone(), volumes, Duration::from_millis(delay_ms))
}

fn alive(agent: &mut support::node::Agent, when: &str) {
    let exited = agent.child.try_wait().expect("try_wait");
    assert!(exited.is_none(), "the agent exited {when}: {exited:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn api_failures_slowness_and_dropped_watches_then_one_resize() {
    if !needs_root("api_failures_slowness_and_dropped_watches_then_one_resize") {
        return;
    }
    let mut c = Cluster::new().await;
    let mount = c.claim("data", "fast", 64, ENABLED);
    let _csi = csi(&c, &[("data", mount.clone())], 300);
    let mut agent = c.agent_on(NODE, c.root.path(), "500ms", &["--api-timeout", "1s"]);
    wait_for(Duration::from_secs(15), "first status", || {
        status_field(&c.get("data"), "state")
    });

    // Outage: every request answers 500 and the open watches end. The volume fills meanwhile.
    c.fake.set_failing(true);
    c.fake.drop_watches();
    fill(&mount, 56 * MI);
    std::thread::sleep(Duration::from_secs(3));
    alive(&mut agent, "during the outage");
    assert_eq!(c.resize_patches("data"), 0);

    // Slow: answers take 2 s, past the agent's 1 s bound on each request; watches cut again.
    // A patch the agent gave up on may still land: only the precondition stops a second one.
    c.fake.set_failing(false);
    c.fake.set_delay(Duration::from_secs(2));
    c.fake.drop_watches();
    std::thread::sleep(Duration::from_secs(4));
    alive(&mut agent, "while the API was slow");

    c.fake.set_delay(Duration::ZERO);
    wait_for(Duration::from_secs(40), "the resize after recovery", || {
        (capacity_of(&c.get("data")) == 80 * MI).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    alive(&mut agent, "after recovery");
    let pvc = c.get("data");
    assert_eq!(request_of(&pvc), 80 * MI);
    assert_eq!(c.resize_patches("data"), 1);
    assert_eq!(history_len(&pvc), 1);
}
