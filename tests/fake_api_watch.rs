//! Watch behaviour of the fake API server, through a real kube client and kube-runtime's
//! watcher and reflector: selectors, resume, 410 Gone, dropped streams, bookmarks.

#[path = "support/fake_api/mod.rs"]
mod fake_api;

use std::time::Duration;

use fake_api::FakeApi;
use fake_api::fixtures::{bound_pvc, pod};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

const PATIENCE: Duration = Duration::from_secs(10);

async fn next<S, K>(stream: &mut S) -> WatchEvent<K>
where
    S: Stream<Item = kube::Result<WatchEvent<K>>> + Unpin,
{
    tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("a watch event in time")
        .expect("the watch stream is still open")
        .expect("a well-formed watch event")
}

/// Polls until `cond` holds; the bound only guards against a hang.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn describe<K: Resource>(e: &WatchEvent<K>) -> String {
    match e {
        WatchEvent::Added(o) => format!("ADDED {}", o.meta().name.clone().unwrap_or_default()),
        WatchEvent::Modified(o) => {
            format!("MODIFIED {}", o.meta().name.clone().unwrap_or_default())
        }
        WatchEvent::Deleted(o) => format!("DELETED {}", o.meta().name.clone().unwrap_or_default()),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
        WatchEvent::Error(s) => format!("ERROR {}", s.code),
    }
}

/// A reflector over `api`, driven in the background; the task ends when the test does.
async fn reflect<K>(api: Api<K>, config: watcher::Config) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    let task = tokio::spawn(stream.for_each(|_| async {}));
    tokio::time::timeout(PATIENCE, reader.wait_until_ready())
        .await
        .expect("reflector synced in time")
        .expect("writer alive");
    (reader, task)
}

#[tokio::test]
async fn field_selector_filters_list_and_watch() {
    let fake = FakeApi::start().await;
    fake.insert(pod("db", "a1", "node-a", None));
    fake.insert(pod("db", "b1", "node-b", None));
    fake.insert(pod("db", "mover", "node-b", None));
    let pods: Api<Pod> = Api::all(fake.client());

    let mine = pods
        .list(&ListParams::default().fields("spec.nodeName=node-a"))
        .await
        .unwrap();
    assert_eq!(
        mine.items.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
        ["a1"]
    );
    let others = pods
        .list(&ListParams::default().fields("spec.nodeName!=node-a"))
        .await
        .unwrap();
    assert_eq!(others.items.len(), 2);
    let both = ListParams::default().fields("spec.nodeName==node-b,metadata.name=mover");
    assert_eq!(pods.list(&both).await.unwrap().items.len(), 1);

    let rv = mine.metadata.resource_version.unwrap();
    let params = WatchParams::default().fields("spec.nodeName=node-a");
    let mut events = pods.watch(&params, &rv).await.unwrap().boxed();
    fake.insert(pod("db", "b2", "node-b", None));
    fake.update_with::<Pod>("db", "b1", |p| {
        p.labels_mut().insert("x".into(), "y".into());
    });
    fake.insert(pod("db", "a2", "node-a", None));
    fake.update_with::<Pod>("db", "mover", |p| {
        p.spec.as_mut().unwrap().node_name = Some("node-a".into())
    });
    fake.update_with::<Pod>("db", "mover", |p| {
        p.spec.as_mut().unwrap().node_name = Some("node-c".into())
    });
    fake.remove::<Pod>("db", "b1");
    fake.insert(pod("db", "end", "node-a", None));

    let mut seen = Vec::new();
    loop {
        let e = next(&mut events).await;
        if matches!(e, WatchEvent::Bookmark(_)) {
            continue;
        }
        seen.push(describe(&e));
        if seen.last().is_some_and(|s| s == "ADDED end") {
            break;
        }
    }
    // Pods elsewhere are never seen; moving onto / off the node reads as ADDED / DELETED.
    assert_eq!(
        seen,
        ["ADDED a2", "ADDED mover", "DELETED mover", "ADDED end"]
    );
}

#[tokio::test]
async fn unsupported_selectors_are_refused() {
    let fake = FakeApi::start().await;
    let pods: Api<Pod> = Api::all(fake.client());
    let pvcs: Api<PersistentVolumeClaim> = Api::all(fake.client());
    for result in [
        pods.list(&ListParams::default().fields("spec.foo=bar"))
            .await
            .map(drop),
        pvcs.list(&ListParams::default().fields("spec.nodeName=n"))
            .await
            .map(drop),
        pods.watch(&WatchParams::default().fields("spec.foo=bar"), "0")
            .await
            .map(drop),
        pods.list(&ListParams::default().labels("app in (a"))
            .await
            .map(drop),
    ] {
        match result {
            Err(kube::Error::Api(s)) => assert_eq!(
                (s.code, s.reason.as_str()),
                (400, "BadRequest"),
                "{}",
                s.message
            ),
            other => panic!("expected 400, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn label_selectors() {
    let fake = FakeApi::start().await;
    for (name, tier) in [("x", Some("db")), ("y", None), ("z", Some("web"))] {
        let mut p = pod("db", name, "node-a", None);
        if let Some(t) = tier {
            p.labels_mut().insert("tier".into(), t.into());
        }
        fake.insert(p);
    }
    let pods: Api<Pod> = Api::namespaced(fake.client(), "db");
    let names = |sel: &'static str| {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default().labels(sel)).await.unwrap();
            list.items
                .iter()
                .map(|p| p.name_any())
                .collect::<Vec<_>>()
                .join(",")
        }
    };
    assert_eq!(names("app in (x, z)").await, "x,z");
    assert_eq!(names("app notin (x)").await, "y,z");
    assert_eq!(names("tier").await, "x,z");
    assert_eq!(names("!tier").await, "y");
    assert_eq!(names("tier!=db").await, "y,z");
    assert_eq!(names("tier=db,app==x").await, "x");
}

#[tokio::test]
async fn watch_replays_from_a_resource_version_and_answers_410_once_compacted() {
    let fake = FakeApi::start().await;
    fake.insert(pod("db", "p", "node-a", None));
    let from = fake.resource_version().to_string();
    fake.update_with::<Pod>("db", "p", |p| {
        p.labels_mut().insert("v".into(), "2".into());
    });
    fake.remove::<Pod>("db", "p");
    let pods: Api<Pod> = Api::namespaced(fake.client(), "db");
    let mut events = pods
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    assert_eq!(describe(&next(&mut events).await), "MODIFIED p");
    assert_eq!(describe(&next(&mut events).await), "DELETED p");

    fake.insert(pod("db", "q", "node-a", None));
    fake.compact();
    let mut expired = pods
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    match next(&mut expired).await {
        WatchEvent::Error(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert!(
                s.message.starts_with("too old resource version"),
                "{}",
                s.message
            );
        }
        other => panic!("expected 410, got {}", describe(&other)),
    }
    assert!(
        expired.next().await.is_none(),
        "the stream ends after the ERROR event"
    );
}

#[tokio::test]
async fn bookmarks_and_timeout() {
    let fake = FakeApi::start().await;
    fake.insert(pod("db", "p", "node-a", None));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "db");
    let rv = fake.resource_version().to_string();
    let mut events = pods
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    fake.send_bookmarks();
    assert_eq!(describe(&next(&mut events).await), format!("BOOKMARK {rv}"));
    // timeoutSeconds=1: the server ends the stream.
    let ended =
        tokio::time::timeout(PATIENCE, async { while events.next().await.is_some() {} }).await;
    assert!(ended.is_ok(), "the watch ends at its timeout");
}

#[tokio::test]
async fn reflector_syncs_and_follows_updates() {
    let fake = FakeApi::start().await;
    fake.insert(pod("db", "a1", "node-a", None));
    fake.insert(pod("db", "b1", "node-b", None));
    let pods: Api<Pod> = Api::all(fake.client());
    let (store, _task) = reflect(
        pods,
        watcher::Config::default().fields("spec.nodeName=node-a"),
    )
    .await;
    assert_eq!(
        store
            .state()
            .iter()
            .map(|p| p.name_any())
            .collect::<Vec<_>>(),
        ["a1"]
    );

    fake.update_with::<Pod>("db", "a1", |p| {
        p.labels_mut().insert("seen".into(), "yes".into());
    });
    fake.insert(pod("db", "b2", "node-b", None));
    eventually("the label in the reflector", || {
        store
            .state()
            .first()
            .is_some_and(|p| p.labels().get("seen").is_some_and(|v| v == "yes"))
    })
    .await;
    assert_eq!(
        store.state().len(),
        1,
        "pods on other nodes never reach the store"
    );
}

#[tokio::test]
async fn streaming_list_watcher_syncs() {
    let fake = FakeApi::start().await;
    fake.insert(bound_pvc("db", "data", "fast", "10Gi"));
    let pvcs: Api<PersistentVolumeClaim> = Api::all(fake.client());
    let (store, _task) = reflect(pvcs, watcher::Config::default().streaming_lists()).await;
    assert_eq!(store.state().len(), 1);
    assert!(
        fake.requests().iter().all(|r| r.is_watch()),
        "streaming lists never LIST"
    );
    fake.insert(bound_pvc("db", "wal", "fast", "1Gi"));
    eventually("the second claim", || store.state().len() == 2).await;
}

fn count(fake: &FakeApi, watch: bool) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/pods" && r.is_watch() == watch)
        .count()
}

#[tokio::test]
async fn watcher_resumes_after_dropped_watches() {
    let fake = FakeApi::start().await;
    fake.insert(pod("db", "a1", "node-a", None));
    let pods: Api<Pod> = Api::all(fake.client());
    let (store, _task) = reflect(pods, watcher::Config::default()).await;
    eventually("the watch to open", || fake.open_watches() == 1).await;

    fake.drop_watches();
    fake.update_with::<Pod>("db", "a1", |p| {
        p.labels_mut().insert("v".into(), "2".into());
    });
    eventually("the update after reconnecting", || {
        store
            .state()
            .first()
            .is_some_and(|p| p.labels().contains_key("v"))
    })
    .await;
    assert_eq!(
        count(&fake, false),
        1,
        "resumed from its resourceVersion, no relist"
    );
    assert_eq!(count(&fake, true), 2);
    let resumed = fake
        .requests()
        .into_iter()
        .filter(|r| r.is_watch())
        .nth(1)
        .unwrap();
    assert_ne!(resumed.param("resourceVersion").as_deref(), Some("0"));
}

#[tokio::test]
async fn watcher_relists_after_410() {
    let fake = FakeApi::start().await;
    fake.insert(pod("db", "a1", "node-a", None));
    let pods: Api<Pod> = Api::all(fake.client());
    let (store, _task) = reflect(pods, watcher::Config::default()).await;
    eventually("the watch to open", || fake.open_watches() == 1).await;

    // The watcher's resourceVersion falls out of history while it is disconnected.
    fake.drop_watches();
    fake.set_failing(true);
    eventually("a failed reconnect", || {
        fake.requests().iter().any(|r| r.status == 500)
    })
    .await;
    fake.update_with::<Pod>("db", "a1", |p| {
        p.labels_mut().insert("v".into(), "2".into());
    });
    fake.insert(pod("db", "a2", "node-a", None));
    fake.compact();
    fake.set_failing(false);

    eventually("the relisted state", || {
        store.state().len() == 2 && store.state().iter().any(|p| p.labels().contains_key("v"))
    })
    .await;
    assert_eq!(
        count(&fake, false),
        2,
        "one LIST to start, one after the 410"
    );
}
