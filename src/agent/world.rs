//! What the agent knows about the cluster: reflector stores fed by watches, never polling.
//!
//! Pods are watched with a `spec.nodeName` field selector, this Node and the ConfigMap by name,
//! StorageClasses whole (few and small). Claims are watched per namespace, for exactly the
//! namespaces whose pods on this node mount a claim: the number of watches follows the namespaces
//! here, not the claims (a node with 500 claims of one tenant holds one claim watch), and the same
//! store gives a group's peers on other nodes their size. Every watch shares one HTTP/2 connection
//! ([`super::client`]).
//!
//! Initial lists are served from the API server's watch cache (`resourceVersion=0`, not a quorum
//! read of etcd), and a watch that ends resumes from its last resourceVersion, kept fresh by
//! bookmarks; only an expired one (410) lists again. A rolling restart of the DaemonSet costs one
//! cached LIST per watch, never one per claim.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

/// Called with the watcher's name each time a watch fails and restarts.
pub type OnRestart = Arc<dyn Fn(&str) + Send + Sync>;

fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    name: String,
    on_restart: OnRestart,
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
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                tracing::warn!(watcher = %name, error = %e, "watch failed; retrying with backoff");
                on_restart(&name);
            }
        }
    });
    (reader, task)
}

type Watches<K> = HashMap<K, (Store<PersistentVolumeClaim>, JoinHandle<()>)>;

/// Makes `watches` hold exactly the keys in `wanted`: stops the others, starts the missing ones
/// with `start` and waits up to `wait` for them to list (one that has not is picked up by a
/// later scan).
async fn sync_watches<K: Clone + Eq + Hash + Ord>(
    watches: &mut Watches<K>,
    wanted: &BTreeSet<K>,
    wait: std::time::Duration,
    start: impl Fn(&K) -> (Store<PersistentVolumeClaim>, JoinHandle<()>),
) {
    watches.retain(|key, (_, task)| {
        let keep = wanted.contains(key);
        if !keep {
            task.abort();
        }
        keep
    });
    let mut started = Vec::new();
    for key in wanted {
        if !watches.contains_key(key) {
            let (store, task) = start(key);
            started.push(store.clone());
            watches.insert(key.clone(), (store, task));
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
    client: Client,
    /// Claims by namespace, for the namespaces with a claim mounted here.
    namespaces: Watches<String>,
    tasks: Vec<JoinHandle<()>>,
    on_restart: OnRestart,
}

impl World {
    pub fn start(
        client: Client,
        node: &str,
        namespace: &str,
        configmap: &str,
        on_restart: OnRestart,
    ) -> Self {
        let by_name =
            |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
        let (pods, t1) = spawn_reflector(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().fields(&format!("spec.nodeName={node}")),
            "pods".into(),
            on_restart.clone(),
        );
        let (nodes, t2) = spawn_reflector(
            Api::<Node>::all(client.clone()),
            by_name(node),
            "node".into(),
            on_restart.clone(),
        );
        let (classes, t3) = spawn_reflector(
            Api::<StorageClass>::all(client.clone()),
            watcher::Config::default(),
            "storageclasses".into(),
            on_restart.clone(),
        );
        let (configmaps, t4) = spawn_reflector(
            Api::<ConfigMap>::namespaced(client.clone(), namespace),
            by_name(configmap),
            "configmap".into(),
            on_restart.clone(),
        );
        World {
            pods,
            nodes,
            classes,
            configmaps,
            client,
            namespaces: HashMap::new(),
            tasks: vec![t1, t2, t3, t4],
            on_restart,
        }
    }

    /// Waits until every cluster-level watch has listed once.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.classes.wait_until_ready().await?;
        self.configmaps.wait_until_ready().await
    }

    /// Keeps one claim watch per namespace in `wanted`: starts new ones (and waits, up to
    /// `wait`, for them to list, so a scan sees a claim as soon as its pod is here), stops those
    /// no pod here mounts a claim of any more.
    pub async fn sync_namespaces(&mut self, wanted: &BTreeSet<String>, wait: std::time::Duration) {
        let (client, on_restart) = (self.client.clone(), self.on_restart.clone());
        sync_watches(&mut self.namespaces, wanted, wait, |ns| {
            spawn_reflector(
                Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
                watcher::Config::default(),
                format!("pvcs in {ns}"),
                on_restart.clone(),
            )
        })
        .await;
    }

    /// The largest request in the group `key` of namespace `ns`, from that namespace's watch.
    pub fn group_size(&self, ns: &str, key: &str) -> Option<u64> {
        let (store, _) = self.namespaces.get(ns)?;
        crate::k8s::roles::group_size(store.state().iter().map(|p| p.as_ref()), key)
    }

    /// The claim as last seen by its namespace's watch; `None` until that watch has listed.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let (store, _) = self.namespaces.get(namespace)?;
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
}

impl Drop for World {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        for (_, task) in self.namespaces.values() {
            task.abort();
        }
    }
}
