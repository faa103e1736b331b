//! The agent end to end: a fake API server, real tmpfs volumes under a kubelet-like root, a test
//! "CSI driver" that carries out resizes, and `headroom agent` as a child process.

#[path = "support/fake_api/mod.rs"]
mod fake_api;
mod support {
    pub mod node;
    pub mod root;
}

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fake_api::FakeApi;
use fake_api::fixtures::{bound_pvc, node, pod, storage_class};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use support::node::{
    Agent, AgentOpts, CsiDriver, KubeletRoot, MI, capacity_of, fill, request_of, wait_for,
};

const NODE: &str = "node-a";

fn needs_root(test: &str) -> bool {
    support::root::require_root(test, &[])
}

fn annotate(pvc: &mut PersistentVolumeClaim, pairs: &[(&str, &str)]) {
    let a = pvc
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    for (k, v) in pairs {
        a.insert(format!("headroom.dev/{k}"), v.to_string());
    }
}

fn history_len(pvc: &PersistentVolumeClaim) -> usize {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("headroom.dev/history"))
        .and_then(|h| serde_json::from_str::<Vec<serde_json::Value>>(h).ok())
        .map_or(0, |v| v.len())
}

fn status_field(pvc: &PersistentVolumeClaim, field: &str) -> Option<String> {
    let s = pvc
        .metadata
        .annotations
        .as_ref()?
        .get("headroom.dev/status")?;
    let v: serde_json::Value = serde_json::from_str(s).ok()?;
    v.get(field).map(|x| {
        x.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| x.to_string())
    })
}

struct Cluster {
    fake: Arc<FakeApi>,
    root: KubeletRoot,
    kubeconfig: tempfile::NamedTempFile,
}

impl Cluster {
    async fn new() -> Cluster {
        let fake = Arc::new(FakeApi::start().await);
        fake.insert(node(NODE));
        fake.insert(storage_class("fast", true));
        fake.insert(storage_class("fixed", false));
        let kubeconfig = tempfile::NamedTempFile::new().expect("kubeconfig");
        fake.write_kubeconfig(kubeconfig.path());
        Cluster {
            fake,
            root: KubeletRoot::new(),
            kubeconfig,
        }
    }

    /// A claim of `size` MiB in class `class`, mounted by its own pod on this node as a tmpfs.
    fn claim(
        &mut self,
        name: &str,
        class: &str,
        size_mi: u64,
        annotations: &[(&str, &str)],
    ) -> std::path::PathBuf {
        let mut pvc = bound_pvc("db", name, class, &format!("{size_mi}Mi"));
        annotate(&mut pvc, annotations);
        self.fake.insert(pvc);
        let p: Pod = self
            .fake
            .insert(pod("db", &format!("pod-{name}"), NODE, Some(name)));
        let uid = p.metadata.uid.expect("uid");
        self.root
            .tmpfs_volume(&uid, &format!("pv-{name}"), size_mi * MI)
    }

    fn agent(&self, interval: &str) -> Agent {
        Agent::spawn(&AgentOpts {
            kubeconfig: self.kubeconfig.path(),
            node: NODE,
            root: self.root.path(),
            interval,
            extra: &[],
        })
    }

    fn pvc(&self, name: &str) -> PersistentVolumeClaim {
        self.fake
            .get::<PersistentVolumeClaim>("db", name)
            .expect("pvc")
    }

    fn resize_patches(&self, name: &str) -> usize {
        let path = format!("/api/v1/namespaces/db/persistentvolumeclaims/{name}");
        self.fake
            .requests()
            .iter()
            .filter(|r| {
                r.method == "PATCH"
                    && r.path == path
                    && r.status == 200
                    && r.body.as_deref().is_some_and(|b| b.contains("\"storage\""))
            })
            .count()
    }
}

const ENABLED: &[(&str, &str)] = &[
    ("enabled", "true"),
    ("limit", "100Mi"),
    ("step", "16Mi"),
    ("max-actions-per-day", "2"),
];

#[tokio::test(flavor = "multi_thread")]
async fn fills_grow_until_budget_then_limit() {
    if !needs_root("fills_grow_until_budget_then_limit") {
        return;
    }
    let mut c = Cluster::new().await;
    let mount = c.claim("data", "fast", 64, ENABLED);
    let _csi = CsiDriver::start(
        c.fake.clone(),
        BTreeMap::from([(("db".into(), "data".into()), vec![mount.clone()])]),
        Duration::from_millis(300),
    );
    let _agent = c.agent("1s");
    // Balanced first: the agent writes a status, no resize.
    wait_for(Duration::from_secs(15), "first status", || {
        status_field(&c.pvc("data"), "state")
    });
    assert_eq!(request_of(&c.pvc("data")), 64 * MI);

    // 56Mi of 64Mi is 87.5% >= 80%: +16Mi -> 80Mi, within two intervals.
    fill(&mount, 56 * MI);
    let pvc = wait_for(Duration::from_secs(3), "the first resize patch", || {
        let p = c.pvc("data");
        (request_of(&p) > 64 * MI).then_some(p)
    });
    assert_eq!(request_of(&pvc), 80 * MI);
    assert_eq!(history_len(&pvc), 1);
    wait_for(Duration::from_secs(5), "the filesystem to grow", || {
        (nix::sys::statvfs::statvfs(&mount).ok()?.blocks() * 4096 >= 80 * MI).then_some(())
    });

    // 72Mi of 80Mi is 90%: the second and last action of the budget -> 96Mi.
    fill(&mount, 72 * MI);
    wait_for(Duration::from_secs(5), "the second resize", || {
        (capacity_of(&c.pvc("data")) == 96 * MI).then_some(())
    });
    // 90Mi of 96Mi: growth needed, budget spent.
    fill(&mount, 90 * MI);
    wait_for(Duration::from_secs(5), "budget_exhausted", || {
        (status_field(&c.pvc("data"), "blockedReason").as_deref() == Some("budget_exhausted"))
            .then_some(())
    });
    // A bigger budget (a live policy change) allows one more action, capped at the 100Mi limit.
    c.fake
        .update_with::<PersistentVolumeClaim>("db", "data", |p| {
            annotate(p, &[("max-actions-per-day", "5")])
        });
    wait_for(Duration::from_secs(5), "growth to the limit", || {
        (capacity_of(&c.pvc("data")) == 100 * MI).then_some(())
    });
    fill(&mount, 95 * MI);
    wait_for(Duration::from_secs(5), "at_limit", || {
        (status_field(&c.pvc("data"), "blockedReason").as_deref() == Some("at_limit")).then_some(())
    });
    let pvc = c.pvc("data");
    assert_eq!(history_len(&pvc), 3);
    assert_eq!(c.resize_patches("data"), 3);
    let events: Vec<k8s_openapi::api::events::v1::Event> = c.fake.list();
    let reasons: Vec<&str> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
    for r in ["Resized", "BudgetExhausted", "AtLimit"] {
        assert!(reasons.contains(&r), "missing Event {r} in {reasons:?}");
    }
}
