//! A fleet on one real kube-apiserver: N simulated nodes (Node objects, pods bound to them with
//! `spec.nodeName`, claims and bound PVs), each with its own `headroom agent` process, its own
//! `NODE_NAME` and kubelet root of real tmpfs volumes (a few nodes have some, most none: idle
//! agents are what a fleet mostly is), and claims mounted on no agent's node in bulk. The API
//! server is the fleet's own, so its `/metrics` speaks of these agents alone.
//! `tests/kube_fleet_scale.rs` asserts counts at a small N; `benches/fleet.rs` measures at a
//! large one.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::http;
use super::kube::block;
use super::kube::cluster::KubeCluster;
use super::kube::server::Server;
use super::node::{Agent, AgentOpts, KubeletRoot, MI, wait_for};

/// Requests the harness keeps in flight while it creates or changes claims in bulk.
const CONCURRENCY: usize = 16;

pub struct FleetNode {
    pub name: String,
    pub root: KubeletRoot,
    pub agent: Option<Agent>,
    /// The agent's `--listen` port.
    pub port: u16,
}

pub struct Fleet {
    pub c: KubeCluster,
    pub nodes: Vec<FleetNode>,
}

/// A claim's manifest and its bound PV's, as [`KubeCluster::pvc`] writes them.
fn claim_objects(c: &KubeCluster, name: &str, labels: &Value, size_mi: u64) -> (Value, Value) {
    let size = format!("{size_mi}Mi");
    let pv = c.pv_name(name);
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": c.ns, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": c.fast, "volumeName": pv,
            "resources": {"requests": {"storage": size}},
        },
    });
    let volume = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv},
        "spec": {
            "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": c.fast, "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {"namespace": c.ns, "name": name},
            "csi": {"driver": "test.csi.headroom.dev", "volumeHandle": format!("h-{pv}")},
        },
    });
    (claim, volume)
}

impl Fleet {
    /// `n` nodes on `server` (the first is the cluster's own node), no agent started yet.
    pub fn new(server: Arc<Server>, n: usize) -> Fleet {
        let c = KubeCluster::on(server);
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let name = if i == 0 {
                c.node.clone()
            } else {
                let name = format!("{}-{i}", c.node);
                c.add_node(&name);
                name
            };
            nodes.push(FleetNode {
                name,
                root: KubeletRoot::new(),
                agent: None,
                port: http::free_port(),
            });
        }
        Fleet { c, nodes }
    }

    /// A claim mounted on node `node` by its own pod, as a tmpfs of its size; `edit` changes
    /// the claim's manifest before it is created.
    pub fn mounted_claim(
        &mut self,
        node: usize,
        name: &str,
        size_mi: u64,
        policy: &[(&str, &str)],
        edit: impl FnOnce(&mut Value),
    ) -> PathBuf {
        let fast = self.c.fast.clone();
        self.c.pvc(name, &fast, size_mi, policy, edit);
        let uid = self
            .c
            .pod(&format!("pod-{name}"), &self.nodes[node].name.clone(), name);
        let pv = self.c.pv_name(name);
        self.nodes[node].root.tmpfs_volume(&uid, &pv, size_mi * MI)
    }

    /// `names.len()` bound claims mounted on no agent's node (no pod: what a node pays for them
    /// is the question), in the cluster's namespace, `labels` on each.
    pub fn foreign_claims(&self, names: &[String], labels: &Value) {
        let client = self.c.admin.0.clone();
        let objects: Vec<(String, Value, Value)> = names
            .iter()
            .map(|n| {
                let (claim, pv) = claim_objects(&self.c, n, labels, 16);
                (n.clone(), claim, pv)
            })
            .collect();
        let ns = self.c.ns.clone();
        block(async move {
            let pvs: Api<PersistentVolume> = Api::all(client.clone());
            let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, &ns);
            futures::stream::iter(objects)
                .for_each_concurrent(CONCURRENCY, |(name, claim, pv)| {
                    let (pvs, claims) = (pvs.clone(), claims.clone());
                    async move {
                        let pv: PersistentVolume = serde_json::from_value(pv).expect("pv");
                        pvs.create(&PostParams::default(), &pv)
                            .await
                            .expect("create pv");
                        let claim: PersistentVolumeClaim =
                            serde_json::from_value(claim).expect("claim");
                        claims
                            .create(&PostParams::default(), &claim)
                            .await
                            .expect("create claim");
                        let bound = json!({"status": {"phase": "Bound",
                            "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "16Mi"}}});
                        claims
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&bound))
                            .await
                            .expect("bind claim");
                    }
                })
                .await;
        });
    }

    /// Sets annotation `key` to `value` on each claim of `names`, as another agent's status or a
    /// resizer's would change.
    pub fn annotate(&self, names: &[String], key: &str, value: &str) {
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.c.admin.0.clone(), &self.c.ns);
        let body = json!({"metadata": {"annotations": {key: value}}});
        let names = names.to_vec();
        block(async move {
            futures::stream::iter(names)
                .for_each_concurrent(CONCURRENCY, |name| {
                    let (claims, body) = (claims.clone(), body.clone());
                    async move {
                        claims
                            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
                            .await
                            .expect("annotate claim");
                    }
                })
                .await;
        });
    }

    /// Starts node `i`'s agent (killing the one it had) with `--interval interval` and `extra`.
    pub fn start(&mut self, i: usize, interval: &str, extra: &[&str]) {
        let listen = format!("127.0.0.1:{}", self.nodes[i].port);
        let mut args: Vec<&str> = vec!["--listen", &listen];
        args.extend_from_slice(extra);
        let node = &mut self.nodes[i];
        if let Some(mut old) = node.agent.take() {
            old.kill();
        }
        node.agent = Some(Agent::spawn(&AgentOpts {
            kubeconfig: self.c.agent_kubeconfig.path(),
            node: &node.name,
            root: node.root.path(),
            interval,
            extra: &args,
        }));
    }

    pub fn start_all(&mut self, interval: &str, extra: &[&str]) {
        for i in 0..self.nodes.len() {
            self.start(i, interval, extra);
        }
    }

    /// Is node `i`'s agent ready (`/ready` 200)?
    pub fn ready(&self, i: usize) -> bool {
        http::get(self.nodes[i].port, "/ready").is_some_and(|(code, _)| code == 200)
    }

    pub fn wait_all_ready(&self, timeout: Duration) {
        wait_for(timeout, "every agent ready", || {
            (0..self.nodes.len()).all(|i| self.ready(i)).then_some(())
        });
    }

    /// The sum of node `i`'s agent's series of `name` whose line has every one of `labels`.
    pub fn metric(&self, i: usize, name: &str, labels: &[&str]) -> f64 {
        http::get(self.nodes[i].port, "/metrics")
            .map(|(_, text)| sum(&text, name, labels))
            .unwrap_or(0.0)
    }

    /// Claim objects node `i`'s agent has received on its watches.
    pub fn claim_events(&self, i: usize) -> f64 {
        self.metric(
            i,
            "headroom_watch_events_total",
            &["resource=\"persistentvolumeclaims\""],
        )
    }

    /// Node `i`'s agent's process, when running.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].agent.as_ref().map(|a| a.child.id())
    }

    /// The API server's own `/metrics`, read as its admin.
    pub fn server_metrics(&self) -> String {
        let client = self.c.admin.0.clone();
        block(async move {
            let req = http_req("/metrics");
            client.request_text(req).await.expect("API server /metrics")
        })
    }
}

fn http_req(path: &str) -> ::http::Request<Vec<u8>> {
    ::http::Request::get(path)
        .body(Vec::new())
        .expect("request")
}

/// The sum of the series of `name` in Prometheus text `text` whose line has every one of
/// `labels` (none: every series of it).
/// Watches open on the API server (`apiserver_longrunning_requests{verb="WATCH"}`: the
/// `apiserver_registered_watchers` gauge of older servers is gone since 1.25), of claims when
/// `claims_only`.
pub fn open_watches(text: &str, claims_only: bool) -> f64 {
    let claims: &[&str] = if claims_only {
        &["verb=\"WATCH\"", "resource=\"persistentvolumeclaims\""]
    } else {
        &["verb=\"WATCH\""]
    };
    sum(text, "apiserver_longrunning_requests", claims)
}

/// Claim events the API server sent to watchers (`apiserver_watch_events_total`, by resource).
pub fn claim_watch_events(text: &str) -> f64 {
    sum(
        text,
        "apiserver_watch_events_total",
        &["resource=\"persistentvolumeclaims\""],
    )
}

pub fn sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Resident memory of process `pid`, in bytes (`VmRSS`).
pub fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// CPU time process `pid` has used (user + system), in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after its closing parenthesis do not.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    // utime and stime are fields 14 and 15 of the line; the state (field 3) comes first here.
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((ticks(11)? + ticks(12)?) / per_second)
}
