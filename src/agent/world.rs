//! What the agent knows about the cluster: reflector stores fed by watches, never polling.
//!
//! Pods are watched with a `spec.nodeName` field selector, this Node and the ConfigMap by name,
//! StorageClasses whole (few and small), Namespaces and CSIDrivers whole but trimmed to their
//! name and csi-addons trim schedule (one watch each per node, whatever the claims: the trim
//! schedule's design reads it from both). Claims are watched per namespace, for exactly the
//! namespaces whose pods on this node mount a claim: the number of watches follows the namespaces
//! here, not the claims (a node with 500 claims of one tenant holds one claim watch), and the same
//! store gives a group's peers on other nodes their size. The same namespaces' ResourceQuotas are
//! watched beside their claims (what a grow may still take): per namespace rather than
//! cluster-wide because quota status is rewritten on every admitted pod or claim of a namespace
//! with a quota, and a cluster-wide watch would carry every tenant's churn to every node; the
//! count stays two watches per namespace with a claim mounted here, whatever the claims. Every watch shares one HTTP/2 connection
//! ([`super::client`]).
//!
//! Initial lists are served from the API server's watch cache (`resourceVersion=0`, not a quorum
//! read of etcd), and a watch that ends resumes from its last resourceVersion, kept fresh by
//! bookmarks; only an expired one (410) lists again. A rolling restart of the DaemonSet costs one
//! cached LIST per watch, never one per claim.
//!
//! Each store keeps only the fields the agent reads ([`super::trim`]).

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolumeClaim, Pod, ResourceQuota,
};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

/// Told how each watch fares, by the watcher's name.
pub trait WatchObserver: Send + Sync {
    /// The watch failed and restarts with backoff; its view may be stale from now on.
    fn failed(&self, watcher: &str);
    /// The watch yielded an event (it works), or was stopped (nothing to track).
    fn ok(&self, watcher: &str);
}

pub type Observer = Arc<dyn WatchObserver>;

/// The longest wait between a failing watch's retries, before jitter (up to half again).
pub const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(10);

pub use crate::health::RETRY_QUIET;

/// Doubling delays from half a second to [`RETRY_MAX`], each lengthened by up to half at random,
/// so a fleet of agents does not retry in step after an outage.
struct RetryBackoff {
    next: std::time::Duration,
    seed: u64,
}

const RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(500);

impl RetryBackoff {
    fn new(name: &str) -> Self {
        use std::hash::{BuildHasher, RandomState};
        RetryBackoff {
            next: RETRY_MIN,
            seed: RandomState::new().hash_one(name),
        }
    }
}

impl Iterator for RetryBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<std::time::Duration> {
        // splitmix64: enough randomness for jitter without a dependency.
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let share = (z ^ (z >> 31)) as f64 / u64::MAX as f64 / 2.0;
        let delay = self.next;
        self.next = (delay * 2).min(RETRY_MAX);
        Some(delay + delay.mul_f64(share))
    }
}

impl kube::runtime::utils::Backoff for RetryBackoff {
    fn reset(&mut self) {
        self.next = RETRY_MIN;
    }
}

fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    name: String,
    observer: Observer,
    trim: fn(&mut K),
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    // resourceVersion=0: the list comes from the API server's watch cache. kube drops it when a
    // page size is set, and the cache does not page anyway.
    let mut config = config.any_semantic();
    config.page_size = None;
    let retry = RetryBackoff::new(&name);
    // Trimmed before the store keeps it: the store holds only what the agent reads.
    let events = watcher(api, config).modify(trim).backoff(retry);
    let stream = reflector::reflector(writer, events);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Err(e) => {
                    tracing::warn!(watcher = %name, error = %e, "watch failed; retrying with backoff");
                    observer.failed(&name);
                }
                Ok(_) => observer.ok(&name),
            }
        }
    });
    (reader, task)
}

/// Per key: the store, the task, and the watcher's name.
type Watches<K, T = PersistentVolumeClaim> = HashMap<K, (Store<T>, JoinHandle<()>, String)>;

/// Makes `watches` hold exactly the keys in `wanted`: stops the others, starts the missing ones
/// with `start` and waits up to `wait` for them to list (one that has not is picked up by a
/// later scan).
async fn sync_watches<K: Clone + Eq + Hash + Ord, T: Resource + Clone + 'static>(
    watches: &mut Watches<K, T>,
    wanted: &BTreeSet<K>,
    wait: std::time::Duration,
    observer: &Observer,
    name_of: impl Fn(&K) -> String,
    start: impl Fn(&K, String) -> (Store<T>, JoinHandle<()>),
) where
    T::DynamicType: Eq + Hash + Clone,
{
    watches.retain(|key, (_, task, name)| {
        let keep = wanted.contains(key);
        if !keep {
            task.abort();
            // A stopped watch's last failure must not hold readiness down.
            observer.ok(name);
        }
        keep
    });
    let mut started = Vec::new();
    for key in wanted {
        if !watches.contains_key(key) {
            let name = name_of(key);
            let (store, task) = start(key, name.clone());
            started.push(store.clone());
            watches.insert(key.clone(), (store, task, name));
        }
    }
    let ready = futures::future::join_all(started.iter().map(|s| s.wait_until_ready()));
    let _ = tokio::time::timeout(wait, ready).await;
}

pub struct World {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub classes: Store<StorageClass>,
    pub configmaps: Store<ConfigMap>,
    /// Every Namespace and CSIDriver, trimmed to name and trim schedule.
    pub namespace_objects: Store<Namespace>,
    pub csi_drivers: Store<CSIDriver>,
    client: Client,
    /// Claims by namespace, for the namespaces with a claim mounted here.
    namespaces: Watches<String>,
    /// ResourceQuotas of the same namespaces: what a grow there may still take.
    quotas: Watches<String, ResourceQuota>,
    tasks: Vec<JoinHandle<()>>,
    observer: Observer,
}

impl World {
    pub fn start(
        client: Client,
        node: &str,
        namespace: &str,
        configmap: &str,
        observer: Observer,
    ) -> Self {
        let by_name =
            |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
        let (pods, t1) = spawn_reflector(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().fields(&format!("spec.nodeName={node}")),
            "pods".into(),
            observer.clone(),
            super::slim::pod,
        );
        let (nodes, t2) = spawn_reflector(
            Api::<Node>::all(client.clone()),
            by_name(node),
            "node".into(),
            observer.clone(),
            super::slim::node,
        );
        let (classes, t3) = spawn_reflector(
            Api::<StorageClass>::all(client.clone()),
            watcher::Config::default(),
            "storageclasses".into(),
            observer.clone(),
            super::slim::storage_class,
        );
        let (configmaps, t4) = spawn_reflector(
            Api::<ConfigMap>::namespaced(client.clone(), namespace),
            by_name(configmap),
            "configmap".into(),
            observer.clone(),
            super::slim::configmap,
        );
        let (namespace_objects, t5) = spawn_reflector(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default(),
            "namespaces".into(),
            observer.clone(),
            super::slim::namespace,
        );
        let (csi_drivers, t6) = spawn_reflector(
            Api::<CSIDriver>::all(client.clone()),
            watcher::Config::default(),
            "csidrivers".into(),
            observer.clone(),
            super::slim::csi_driver,
        );
        World {
            pods,
            nodes,
            classes,
            configmaps,
            namespace_objects,
            csi_drivers,
            client,
            namespaces: HashMap::new(),
            quotas: HashMap::new(),
            tasks: vec![t1, t2, t3, t4, t5, t6],
            observer,
        }
    }

    /// Waits until every cluster-level watch has listed once.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.classes.wait_until_ready().await?;
        self.namespace_objects.wait_until_ready().await?;
        self.csi_drivers.wait_until_ready().await?;
        self.configmaps.wait_until_ready().await
    }

    /// Keeps one claim watch per namespace in `wanted`: starts new ones (and waits, up to
    /// `wait`, for them to list, so a scan sees a claim as soon as its pod is here), stops those
    /// no pod here mounts a claim of any more.
    pub async fn sync_namespaces(&mut self, wanted: &BTreeSet<String>, wait: std::time::Duration) {
        let (client, observer) = (self.client.clone(), self.observer.clone());
        sync_watches(
            &mut self.namespaces,
            wanted,
            wait,
            &observer,
            |ns| format!("pvcs in {ns}"),
            |ns, watcher| {
                spawn_reflector(
                    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
                    watcher::Config::default(),
                    watcher,
                    observer.clone(),
                    super::slim::claim,
                )
            },
        )
        .await;
        sync_watches(
            &mut self.quotas,
            wanted,
            wait,
            &observer,
            |ns| format!("resourcequotas in {ns}"),
            |ns, watcher| {
                spawn_reflector(
                    Api::<ResourceQuota>::namespaced(client.clone(), ns),
                    watcher::Config::default(),
                    watcher,
                    observer.clone(),
                    super::slim::quota,
                )
            },
        )
        .await;
    }

    /// The ResourceQuotas of namespace `ns` as its watch last saw them, by name.
    pub fn quotas(&self, ns: &str) -> Vec<Arc<ResourceQuota>> {
        let mut all = self
            .quotas
            .get(ns)
            .map(|(store, _, _)| store.state())
            .unwrap_or_default();
        all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        all
    }

    /// Every claim of namespace `ns` as its watch last saw them (none until it has listed).
    pub fn claims_in(&self, ns: &str) -> Vec<Arc<PersistentVolumeClaim>> {
        self.namespaces
            .get(ns)
            .map(|(store, _, _)| store.state())
            .unwrap_or_default()
    }

    /// The claim as last seen by its namespace's watch; `None` until that watch has listed.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let (store, _, _) = self.namespaces.get(namespace)?;
        store.get(&reflector::ObjectRef::new(name).within(namespace))
    }

    pub fn node(&self) -> Option<Arc<Node>> {
        self.nodes.state().into_iter().next()
    }

    pub fn configmap(&self) -> Option<Arc<ConfigMap>> {
        self.configmaps.state().into_iter().next()
    }

    pub fn storage_class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&reflector::ObjectRef::new(name))
    }

    pub fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        self.namespace_objects.get(&reflector::ObjectRef::new(name))
    }

    pub fn csi_driver(&self, name: &str) -> Option<Arc<CSIDriver>> {
        self.csi_drivers.get(&reflector::ObjectRef::new(name))
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        for (_, task, _) in self.namespaces.values() {
            task.abort();
        }
        for (_, task, _) in self.quotas.values() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;

    #[test]
    fn retries_double_to_the_cap_with_bounded_jitter_and_stay_inside_the_quiet_window() {
        let mut b = RetryBackoff::new("pods");
        let mut base = RETRY_MIN;
        for _ in 0..12 {
            let d = b.next().expect("endless");
            assert!(
                d >= base && d <= base.mul_f64(1.5),
                "{d:?} for base {base:?}"
            );
            // The readiness rule counts on a failing watch retrying within RETRY_QUIET.
            assert!(d < RETRY_QUIET, "{d:?}");
            base = (base * 2).min(RETRY_MAX);
        }
        assert_eq!(base, RETRY_MAX);
        b.reset();
        assert!(b.next().expect("endless") <= RETRY_MIN.mul_f64(1.5));
    }
}
