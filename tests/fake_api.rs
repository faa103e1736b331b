//! Tests of the fake API server itself (requests, rules, faults), through a real kube client.
//! Watch behaviour is in `fake_api_watch.rs`.

#[path = "support/fake_api/mod.rs"]
mod fake_api;

use std::time::Duration;

use fake_api::fixtures::{bound_pvc, pending_pvc, storage_class};
use fake_api::{FakeApi, Features};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use serde_json::json;

fn api_error(r: Result<impl std::fmt::Debug, kube::Error>) -> Box<kube::core::Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({ "metadata": { "name": name }, "data": { "k": "v" } })).unwrap()
}

fn configmap_in(namespace: &str, name: &str) -> ConfigMap {
    let mut cm = configmap(name);
    cm.metadata.namespace = Some(namespace.into());
    cm
}

#[tokio::test]
async fn crud_round_trip() {
    let fake = FakeApi::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");

    let created = cms
        .create(&PostParams::default(), &configmap("a"))
        .await
        .unwrap();
    assert!(!created.uid().unwrap().is_empty());
    assert!(created.creation_timestamp().is_some());
    assert_eq!(created.meta().generation, Some(1));
    assert_eq!(created.namespace().as_deref(), Some("ns"));
    let rv1: u64 = created.resource_version().unwrap().parse().unwrap();

    let dup = api_error(cms.create(&PostParams::default(), &configmap("a")).await);
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(dup.message, r#"configmaps "a" already exists"#);

    let got = cms.get("a").await.unwrap();
    assert_eq!(got.data.as_ref().unwrap()["k"], "v");

    let mut replaced = got.clone();
    replaced.data = Some([("k".to_string(), "w".to_string())].into());
    let replaced = cms
        .replace("a", &PostParams::default(), &replaced)
        .await
        .unwrap();
    let rv2: u64 = replaced.resource_version().unwrap().parse().unwrap();
    assert!(rv2 > rv1, "every write bumps the resourceVersion");
    assert_eq!(replaced.uid(), created.uid());

    let patched = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { "x": "y" } })),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.as_ref().unwrap()["x"], "y");
    assert_eq!(patched.data.as_ref().unwrap()["k"], "w");

    // A patch that changes nothing is a no-op: no new resourceVersion.
    let same = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { "x": "y" } })),
        )
        .await
        .unwrap();
    assert_eq!(same.resource_version(), patched.resource_version());

    cms.create(&PostParams::default(), &configmap("b"))
        .await
        .unwrap();
    let list = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        list.items.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(
        list.metadata.resource_version.as_deref(),
        Some(fake.resource_version().to_string().as_str())
    );

    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let missing = api_error(cms.get("a").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, r#"configmaps "a" not found"#);
    assert!(fake.get::<ConfigMap>("ns", "a").is_none());
}

#[tokio::test]
async fn list_pages_with_limit_and_continue() {
    let fake = FakeApi::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    for i in 0..5 {
        fake.insert(configmap_in("ns", &format!("cm{i}")));
    }
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().expect("a continue token");
    let rest = cms
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    let names: Vec<String> = first
        .items
        .iter()
        .chain(&rest.items)
        .map(|c| c.name_any())
        .collect();
    assert_eq!(names, ["cm0", "cm1", "cm2", "cm3", "cm4"]);
    assert_eq!(rest.metadata.continue_, None);

    // Once history past the token is compacted away, the token has expired.
    fake.insert(configmap_in("ns", "late"));
    fake.compact();
    let gone = api_error(
        cms.list(&ListParams::default().limit(2).continue_token(&token))
            .await,
    );
    assert_eq!((gone.code, gone.reason.as_str()), (410, "Expired"));
}

#[tokio::test]
async fn stale_resource_version_patch_is_a_conflict() {
    let fake = FakeApi::start().await;
    let stale = fake.insert(bound_pvc("db", "data", "fast", "10Gi"));
    fake.update_with::<PersistentVolumeClaim>("db", "data", |p| {
        p.metadata.annotations = Some([("touched".into(), "yes".into())].into());
    });
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client(), "db");
    let patch = json!({
        "metadata": { "resourceVersion": stale.resource_version(), "annotations": { "a": "b" } },
    });
    let err = api_error(
        pvcs.patch("data", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        err.message,
        r#"Operation cannot be fulfilled on persistentvolumeclaims "data": the object has been modified; please apply your changes to the latest version and try again"#
    );
    // With the current resourceVersion the same patch goes through.
    let fresh = fake.get::<PersistentVolumeClaim>("db", "data").unwrap();
    let patch = json!({ "metadata": { "resourceVersion": fresh.resource_version(), "annotations": { "a": "b" } } });
    let ok = pvcs
        .patch("data", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(ok.annotations()["a"], "b");
}

async fn grow(
    pvcs: &Api<PersistentVolumeClaim>,
    name: &str,
    size: &str,
) -> kube::Result<PersistentVolumeClaim> {
    let patch = json!({ "spec": { "resources": { "requests": { "storage": size } } } });
    pvcs.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

#[tokio::test]
async fn pvc_updates_follow_the_real_rules() {
    let fake = FakeApi::start().await;
    fake.insert(storage_class("fast", true));
    fake.insert(storage_class("fixed", false));
    fake.insert(bound_pvc("db", "data", "fast", "10Gi"));
    fake.insert(bound_pvc("db", "stuck", "fixed", "10Gi"));
    fake.insert(bound_pvc("db", "orphan", "no-such-class", "10Gi"));
    fake.insert(pending_pvc("db", "new", "fast", "10Gi"));
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client(), "db");

    let grown = grow(&pvcs, "data", "12Gi").await.unwrap();
    assert_eq!(
        grown.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
        "12Gi"
    );

    let shrink = api_error(grow(&pvcs, "data", "11Gi").await);
    assert_eq!((shrink.code, shrink.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        shrink.message,
        r#"PersistentVolumeClaim "data" is invalid: spec.resources.requests.storage: Forbidden: field can not be less than previous value"#
    );
    // Same size in another unit is not a change at all.
    grow(&pvcs, "data", "12884901888").await.unwrap();

    let unbound = api_error(grow(&pvcs, "new", "20Gi").await);
    assert_eq!((unbound.code, unbound.reason.as_str()), (422, "Invalid"));
    assert!(
        unbound.message.starts_with(
            r#"PersistentVolumeClaim "new" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests"#
        ),
        "{}",
        unbound.message
    );

    for name in ["stuck", "orphan"] {
        let refused = api_error(grow(&pvcs, name, "20Gi").await);
        assert_eq!((refused.code, refused.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            refused.message,
            format!(
                r#"persistentvolumeclaims "{name}" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"#
            )
        );
    }
    // Bound claims may still change labels and annotations; other spec fields stay immutable.
    let patch = json!({ "metadata": { "labels": { "x": "y" } }, "spec": { "accessModes": ["ReadWriteMany"] } });
    let immutable = api_error(
        pvcs.patch("data", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
    );
    assert_eq!(immutable.code, 422);
    let patch = json!({ "metadata": { "labels": { "x": "y" } } });
    pvcs.patch("data", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    // Refused writes changed nothing.
    let stored = fake.get::<PersistentVolumeClaim>("db", "stuck").unwrap();
    assert_eq!(
        stored.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
        "10Gi"
    );
}

#[tokio::test]
async fn recovery_from_expansion_failure_allows_lowering_above_capacity() {
    let fake = FakeApi::start().await;
    fake.set_features(Features {
        recover_from_expansion_failure: true,
    });
    fake.insert(storage_class("fast", true));
    fake.insert(bound_pvc("db", "data", "fast", "10Gi"));
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client(), "db");
    grow(&pvcs, "data", "100Gi").await.unwrap();
    grow(&pvcs, "data", "50Gi").await.unwrap();
    let err = api_error(grow(&pvcs, "data", "10Gi").await);
    assert!(
        err.message.ends_with(
            "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"
        ),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn status_subresource_is_separate() {
    let fake = FakeApi::start().await;
    fake.insert(storage_class("fast", true));
    fake.insert(bound_pvc("db", "data", "fast", "10Gi"));
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client(), "db");

    // The main resource ignores status.
    let patch = json!({ "status": { "capacity": { "storage": "99Gi" } }, "metadata": { "labels": { "a": "b" } } });
    let main = pvcs
        .patch("data", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        main.status.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0,
        "10Gi"
    );
    assert_eq!(main.labels()["a"], "b");

    // The status endpoint ignores spec and metadata.
    let patch = json!({
        "status": { "capacity": { "storage": "20Gi" } },
        "spec": { "resources": { "requests": { "storage": "30Gi" } } },
        "metadata": { "labels": { "a": "changed" } },
    });
    let st = pvcs
        .patch_status("data", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        st.status.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0,
        "20Gi"
    );
    assert_eq!(
        st.spec
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"]
            .0,
        "10Gi"
    );
    assert_eq!(st.labels()["a"], "b");
    assert_eq!(
        pvcs.get_status("data").await.unwrap().resource_version(),
        st.resource_version()
    );

    // Creating through the API starts with an empty (Pending) status, whatever the body says.
    let created = pvcs
        .create(
            &PostParams::default(),
            &bound_pvc("db", "other", "fast", "1Gi"),
        )
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
}

#[tokio::test]
async fn injected_faults_reach_the_client() {
    let fake = FakeApi::start().await;
    fake.insert(bound_pvc("db", "data", "fast", "10Gi"));
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client(), "db");

    fake.fail_next(1, 500);
    let err = api_error(pvcs.get("data").await);
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    pvcs.get("data").await.unwrap();

    fake.fail_next_matching(1, 500, "PATCH", "/persistentvolumeclaims/data");
    pvcs.get("data").await.unwrap();
    assert_eq!(api_error(grow(&pvcs, "data", "10Gi").await).code, 500);

    fake.set_failing(true);
    assert_eq!(api_error(pvcs.list(&ListParams::default()).await).code, 500);
    fake.set_failing(false);
    pvcs.list(&ListParams::default()).await.unwrap();

    // A slow answer: the caller's own timeout fires first.
    fake.set_delay(Duration::from_secs(5));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), pvcs.get("data"))
            .await
            .is_err()
    );
    fake.set_delay(Duration::ZERO);
    pvcs.get("data").await.unwrap();

    let patches: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .collect();
    assert_eq!(patches.len(), 1);
    assert_eq!(
        patches[0].path,
        "/api/v1/namespaces/db/persistentvolumeclaims/data"
    );
    assert_eq!(patches[0].status, 500);
    assert_eq!(
        patches[0].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
}

#[tokio::test]
async fn node_stats_summary_proxy() {
    let fake = FakeApi::start().await;
    let client = fake.client();
    let summary = json!({ "node": { "nodeName": "n1" }, "pods": [] });
    fake.set_stats_summary("n1", summary.clone());
    let req = |node: &str| {
        hyper::Request::get(format!("/api/v1/nodes/{node}/proxy/stats/summary"))
            .body(Vec::new())
            .unwrap()
    };
    let got: serde_json::Value = client.request(req("n1")).await.unwrap();
    assert_eq!(got, summary);
    let err = api_error(client.request::<serde_json::Value>(req("n2")).await);
    assert_eq!(err.code, 404);
}

#[tokio::test]
async fn recorder_events_are_created_then_patched() {
    let fake = FakeApi::start().await;
    let pvc = fake.insert(bound_pvc("db", "data", "fast", "10Gi"));
    let reporter = Reporter {
        controller: "headroom".into(),
        instance: Some("node-a".into()),
    };
    let recorder = Recorder::new(fake.client(), reporter);
    let event = Event {
        type_: EventType::Normal,
        reason: "Resized".into(),
        note: Some("10Gi -> 12Gi".into()),
        action: "Resize".into(),
        secondary: None,
    };
    let reference = pvc.object_ref(&());
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();

    let events: Vec<EventV1> = fake.list();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason.as_deref(), Some("Resized"));
    assert_eq!(
        events[0].regarding.as_ref().unwrap().name.as_deref(),
        Some("data")
    );
    assert_eq!(events[0].series.as_ref().map(|s| s.count), Some(2));
    let methods: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| {
            r.path
                .starts_with("/apis/events.k8s.io/v1/namespaces/db/events")
        })
        .map(|r| format!("{} {}", r.method, r.status))
        .collect();
    assert_eq!(methods, ["POST 201", "PATCH 200"]);
}

#[tokio::test]
async fn kubeconfig_reaches_the_fake() {
    let fake = FakeApi::start().await;
    fake.insert(storage_class("fast", true));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&path);
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let classes: Api<k8s_openapi::api::storage::v1::StorageClass> = Api::all(client);
    assert_eq!(
        classes.get("fast").await.unwrap().allow_volume_expansion,
        Some(true)
    );
}

/// The server runs on its own thread: a test blocking its own runtime does not stall it.
#[tokio::test]
async fn serves_while_the_test_thread_blocks() {
    let fake = FakeApi::start().await;
    let url = format!("{}/version", fake.url());
    let answer = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches("/version")
            .to_string();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /version HTTP/1.1\r\nHost: fake\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .join()
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"major\":\"1\""));
}

#[tokio::test]
async fn deletion_waits_for_kubelet_and_finalizers() {
    let fake = FakeApi::start().await;
    fake.insert(fake_api::fixtures::pod("db", "p", "node-a", None));
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(fake.client(), "db");
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    let marked = pods.get("p").await.unwrap();
    assert!(
        marked.metadata.deletion_timestamp.is_some(),
        "a scheduled pod is deleted gracefully"
    );
    pods.delete("p", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(pods.get_opt("p").await.unwrap().is_none());

    let mut claim = bound_pvc("db", "data", "fast", "1Gi");
    claim.metadata.finalizers = Some(vec!["kubernetes.io/pvc-protection".into()]);
    fake.insert(claim);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client(), "db");
    pvcs.delete("data", &DeleteParams::default()).await.unwrap();
    assert!(
        pvcs.get("data")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let release = json!({ "metadata": { "finalizers": null } });
    pvcs.patch("data", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    assert!(
        pvcs.get_opt("data").await.unwrap().is_none(),
        "gone with its last finalizer"
    );
}

#[tokio::test]
async fn patch_content_types() {
    let fake = FakeApi::start().await;
    fake.insert(storage_class("fast", true));
    fake.insert(bound_pvc("db", "data", "fast", "1Gi"));
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client(), "db");
    let pp = PatchParams::default();

    let ops: json_patch::Patch = serde_json::from_value(json!([
        { "op": "replace", "path": "/spec/resources/requests/storage", "value": "2Gi" },
    ]))
    .unwrap();
    let p = pvcs
        .patch("data", &pp, &Patch::<()>::Json(ops))
        .await
        .unwrap();
    assert_eq!(
        p.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
        "2Gi"
    );

    let smp = json!({ "metadata": { "annotations": { "a": "b" } } });
    let p = pvcs
        .patch("data", &pp, &Patch::Strategic(&smp))
        .await
        .unwrap();
    assert_eq!(p.annotations()["a"], "b");
    let directive = json!({ "metadata": { "$patch": "replace" } });
    assert_eq!(
        api_error(pvcs.patch("data", &pp, &Patch::Strategic(&directive)).await).code,
        400
    );

    let apply = PatchParams::apply("headroom");
    let err = api_error(pvcs.patch("data", &apply, &Patch::Apply(&smp)).await);
    assert_eq!(
        (err.code, err.reason.as_str()),
        (415, "UnsupportedMediaType")
    );
}
