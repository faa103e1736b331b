//! The agent under stress, end to end: two agents racing on one RWX claim, SIGKILL at random
//! moments, and an API server that fails, stalls and drops watches. Each is checked against the
//! fake API server's request log and the claim's own durable history.

#[path = "support/fake_api/mod.rs"]
mod fake_api;
mod support {
    pub mod cluster;
    pub mod node;
    pub mod root;
}

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use support::cluster::{Cluster, NODE, NS, history, history_len, status_field};
use support::node::{CsiDriver, KubeletRoot, MI, capacity_of, fill, request_of, wait_for};

use support::root::needs_root;

use support::cluster::ENABLED;

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
async fn two_agents_on_one_rwx_claim_resize_it_once() {
    if !needs_root("two_agents_on_one_rwx_claim_resize_it_once") {
        return;
    }
    const ROUNDS: usize = 3;
    let mut collisions = 0;
    for round in 0..ROUNDS {
        let mut c = Cluster::new().await;
        c.fake.insert(fake_api::fixtures::node("node-b"));
        c.pvc("shared", "fast", 64, ENABLED, |p| {
            let rwx = Some(vec!["ReadWriteMany".to_string()]);
            p.spec.as_mut().expect("spec").access_modes = rwx.clone();
            p.status.as_mut().expect("status").access_modes = rwx;
        });
        // One filesystem, mounted by a pod on each node.
        let disk = c.root.scratch_tmpfs(64 * MI);
        let uid_a = c.pod("pod-a", NODE, "shared");
        let uid_b = c.pod("pod-b", "node-b", "shared");
        let mut root_b = KubeletRoot::new();
        c.root.bind_volume(&uid_a, "pv-shared", &disk);
        root_b.bind_volume(&uid_b, "pv-shared", &disk);
        // Already over the threshold when both start: 56Mi of 64Mi.
        fill(&disk, 56 * MI);
        let _csi = csi(&c, &[("shared", disk.clone())], 300);
        // Every answer takes 100 ms: both agents decide from the same resourceVersion before
        // either hears of the other's patch.
        c.fake.set_delay(Duration::from_millis(100));
        let _a = c.agent_on(NODE, c.root.path(), "500ms", &[]);
        let _b = c.agent_on("node-b", root_b.path(), "500ms", &[]);

        wait_for(Duration::from_secs(20), "the resize to finish", || {
            (capacity_of(&c.get("shared")) == 80 * MI).then_some(())
        });
        // Several more scans by both, on a volume now at 70%.
        std::thread::sleep(Duration::from_secs(2));
        let pvc = c.get("shared");
        assert_eq!(
            c.resize_patches("shared"),
            1,
            "round {round}: resize patches"
        );
        assert_eq!(history_len(&pvc), 1, "round {round}: history");
        assert_eq!(request_of(&pvc), 80 * MI, "round {round}: request");
        let conflicts = c.resize_conflicts("shared");
        eprintln!("round {round}: {conflicts} resize patch(es) refused with 409");
        collisions += conflicts;
    }
    eprintln!("{collisions} collision(s) in {ROUNDS} rounds");
}

use support::node::SplitMix;

type Versions = Arc<Mutex<HashMap<String, (u64, u64)>>>;

/// Every version of every claim in the namespace, by resourceVersion: (request, capacity).
async fn record_versions(c: &Cluster, expect: usize) -> Versions {
    let versions: Versions = Arc::default();
    let seen = versions.clone();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(c.fake.client(), NS);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
        while let Some(Ok(p)) = stream.next().await {
            let rv = p.metadata.resource_version.clone().unwrap_or_default();
            let sizes = (request_of(&p), capacity_of(&p));
            seen.lock().expect("versions").insert(rv, sizes);
        }
    });
    let ready = versions.clone();
    wait_for(Duration::from_secs(10), "the version recorder", move || {
        (ready.lock().expect("versions").len() >= expect).then_some(())
    });
    versions
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_at_random_moments_never_double_resizes_or_loses_history() {
    if !needs_root("sigkill_at_random_moments_never_double_resizes_or_loses_history") {
        return;
    }
    const RUNS: u64 = 50;
    const VOLUMES: usize = 5;
    const STEP: u64 = 2 * MI;
    // Ten actions a day is the most a policy may allow; five claims give the runs room to act.
    let policy = [
        ("enabled", "true"),
        ("limit", "1Gi"),
        ("step", "2Mi"),
        ("max-actions-per-day", "10"),
    ];
    let mut c = Cluster::new().await;
    let names: Vec<String> = (0..VOLUMES).map(|i| format!("vol-{i}")).collect();
    let mounts: Vec<PathBuf> = names
        .iter()
        .map(|n| c.claim(n, "fast", 8, &policy))
        .collect();
    let versions = record_versions(&c, VOLUMES).await;
    let pairs: Vec<(&str, PathBuf)> = names
        .iter()
        .map(String::as_str)
        .zip(mounts.iter().cloned())
        .collect();
    let _csi = csi(&c, &pairs, 150);

    for run in 0..RUNS {
        // Round robin: refill one claim (to 85%, over the 80% threshold) once its last resize is
        // done; the others may still be resizing from an earlier run.
        let i = run as usize % VOLUMES;
        let pvc = c.get(&names[i]);
        let fs = nix::sys::statvfs::statvfs(&mounts[i]).expect("statvfs");
        let fs_bytes = fs.blocks() * fs.fragment_size();
        if request_of(&pvc) == capacity_of(&pvc) && fs_bytes == capacity_of(&pvc) {
            fill(&mounts[i], fs_bytes / 100 * 85);
        }
        let life = SplitMix(run).next() % 1501;
        let mut agent = c.agent("200ms");
        std::thread::sleep(Duration::from_millis(life));
        agent.kill();
    }
    // A request the last agent sent before it died may still be on its way through the server.
    std::thread::sleep(Duration::from_millis(300));

    let versions = versions.lock().expect("versions").clone();
    let mut total = 0;
    for name in &names {
        let pvc = c.get(name);
        let h = history(&pvc);
        let sizes: Vec<(u64, u64)> = h
            .iter()
            .map(|a| {
                (
                    a["from"].as_u64().expect("from"),
                    a["to"].as_u64().expect("to"),
                )
            })
            .collect();
        let mut expect_from = 8 * MI;
        for (from, to) in &sizes {
            assert_eq!(
                *from, expect_from,
                "{name}: history breaks its chain: {sizes:?}"
            );
            assert_eq!(*to, from + STEP, "{name}: not one step: {sizes:?}");
            expect_from = *to;
        }
        assert_eq!(request_of(&pvc), expect_from, "{name}: request vs history");
        let bodies = c.resize_patch_bodies(name);
        assert_eq!(
            bodies.len(),
            sizes.len(),
            "{name}: resize patches vs history entries"
        );
        for body in &bodies {
            let v: serde_json::Value = serde_json::from_str(body).expect("patch body");
            let rv = v["metadata"]["resourceVersion"]
                .as_str()
                .expect("resize patch without a resourceVersion precondition");
            let (req, cap) = versions[rv];
            assert_eq!(
                req, cap,
                "{name}: resized while a resize was in flight: {body}"
            );
        }
        total += sizes.len();
    }
    eprintln!("{total} resizes over {RUNS} killed runs");
    assert!(
        total >= VOLUMES * 2,
        "only {total} resizes in {RUNS} runs: the agent hardly acted"
    );
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
