//! The fault proxy (tests/support/kube/proxy.rs) in front of the real API server: it passes
//! requests through untouched and logs them, answers scripted faults instead (N failures of one
//! verb and path, 409 storms on PATCH, every request failing), stalls requests, and ends open
//! watches on demand. KEP-1790 is the real server's (1.34 and newer); the proxy scripts only the
//! older servers' refusal of any lowered request.

mod support {
    pub mod cluster;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;
use support::cluster::{Cluster, available};
use support::kube::block;
use support::kube::server::ADMIN_TOKEN;
use support::node::{MI, request_of};

/// An admin client through the proxy, without kube's own retries of 5xx answers.
fn through(c: &Cluster) -> (Client, tempfile::NamedTempFile) {
    let kc = tempfile::NamedTempFile::new().expect("kubeconfig");
    c.proxy.kubeconfig(ADMIN_TOKEN, kc.path());
    let config = Kubeconfig::read_from(kc.path()).expect("kubeconfig");
    let client = block(async move {
        let cfg = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
            .await
            .expect("config");
        Client::try_from(cfg).expect("client")
    });
    (client, kc)
}

fn claims(c: &Cluster, client: &Client) -> Api<PersistentVolumeClaim> {
    Api::namespaced(client.clone(), &c.ns)
}

fn grow(api: &Api<PersistentVolumeClaim>, name: &str, size: &str) -> Result<u64, kube::Error> {
    let body = json!({"spec": {"resources": {"requests": {"storage": size}}}});
    block(api.patch(name, &PatchParams::default(), &Patch::Merge(&body))).map(|p| request_of(&p))
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other}"),
    }
}

#[test]
fn passes_through_logs_and_answers_scripted_faults() {
    if !available("passes_through_logs_and_answers_scripted_faults", &[]) {
        return;
    }
    let c = Cluster::new();
    c.pvc("data", &c.fast, 64, &[], |_| {});
    let (client, _kc) = through(&c);
    let api = claims(&c, &client);
    let path = format!("/api/v1/namespaces/{}/persistentvolumeclaims/data", c.ns);

    // Pass-through: the server's own answer, logged with the body sent.
    assert_eq!(grow(&api, "data", "80Mi").expect("grown"), 80 * MI);
    let log = c.proxy.requests();
    let patch = log
        .iter()
        .find(|r| r.method == "PATCH")
        .expect("PATCH logged");
    assert_eq!((patch.path.as_str(), patch.status), (path.as_str(), 200));
    assert!(patch.body.as_deref().is_some_and(|b| b.contains("80Mi")));

    // A 409 storm on this claim's PATCH: three refusals, the server never asked; GETs pass.
    c.proxy.fail_next_matching(3, 409, "PATCH", &path);
    for _ in 0..3 {
        assert_eq!(grow(&api, "data", "96Mi").map_err(code), Err(409));
        assert!(block(api.get("data")).is_ok());
    }
    assert_eq!(
        grow(&api, "data", "96Mi").expect("after the storm"),
        96 * MI
    );
    assert_eq!(request_of(&c.get("data")), 96 * MI);

    // Every request failing, then back.
    c.proxy.set_failing(true);
    assert_eq!(block(api.get("data")).map(|_| ()).map_err(code), Err(500));
    c.proxy.set_failing(false);
    assert!(block(api.get("data")).is_ok());

    // A stalled request has arrived but is not answered until the stall ends.
    c.proxy.clear_requests();
    c.proxy.set_slow("GET", &path, Duration::from_secs(2));
    let started = Instant::now();
    let api2 = api.clone();
    let get = std::thread::spawn(move || block(api2.get("data")).map(|_| ()));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(c.proxy.arrivals().len(), 1);
    assert!(c.proxy.requests().is_empty());
    get.join().expect("GET thread").expect("GET");
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(c.proxy.requests()[0].status, 200);
}

#[test]
fn dropped_watches_end_cleanly() {
    if !available("dropped_watches_end_cleanly", &[]) {
        return;
    }
    let c = Cluster::new();
    let (client, _kc) = through(&c);
    let api = claims(&c, &client);
    block(async {
        let mut events = api
            .watch(&WatchParams::default().timeout(290), "0")
            .await
            .expect("watch")
            .boxed();
        // The stream is open once the proxy has the server's answer.
        while c.proxy.open_watches() == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        c.proxy.drop_watches();
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(e) = events.try_next().await.expect("no error, a clean end") {
                assert!(matches!(e, WatchEvent::Bookmark(_)), "{e:?}");
            }
        })
        .await;
        assert!(end.is_ok(), "the watch did not end");
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.proxy.open_watches() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.proxy.open_watches(), 0);
}

#[test]
fn kep_1790_on_the_real_server_and_the_scripted_refusal_before_it() {
    if !available(
        "kep_1790_on_the_real_server_and_the_scripted_refusal_before_it",
        &[],
    ) {
        return;
    }
    let infeasible = |p: &mut PersistentVolumeClaim| {
        let spec = p.spec.as_mut().expect("spec");
        let requests = spec.resources.as_mut().and_then(|r| r.requests.as_mut());
        let requests = requests.expect("requests");
        requests.insert(
            "storage".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("128Mi".into()),
        );
        p.status
            .as_mut()
            .expect("status")
            .allocated_resource_statuses =
            Some([("storage".into(), "ControllerResizeInfeasible".into())].into());
    };
    let allocated = |p: &PersistentVolumeClaim| {
        p.status
            .as_ref()
            .and_then(|s| s.allocated_resource_statuses.clone())
            .and_then(|a| a.get("storage").cloned())
    };
    let refused = |r: Result<u64, kube::Error>, says: &str| {
        let e = r.expect_err("refused");
        let kube::Error::Api(s) = e else {
            panic!("{e}")
        };
        assert_eq!(s.code, 422);
        assert!(s.message.contains(says), "{}", s.message);
    };

    // The real server: the statuses stored and shown to GET, LIST and WATCH through the proxy;
    // a request lowered while above capacity, not to it.
    let c = Cluster::new();
    c.pvc("data", &c.fast, 64, &[], infeasible);
    let (client, _kc) = through(&c);
    let api = claims(&c, &client);
    let seen = block(api.get("data")).expect("get");
    assert_eq!(request_of(&seen), 128 * MI);
    assert_eq!(
        allocated(&seen).as_deref(),
        Some("ControllerResizeInfeasible")
    );
    let listed = block(api.list(&Default::default())).expect("list");
    assert_eq!(
        allocated(&listed.items[0]).as_deref(),
        Some("ControllerResizeInfeasible")
    );
    let watched = block(async {
        let mut w = api
            .watch(&WatchParams::default().timeout(10), "0")
            .await
            .expect("watch")
            .boxed();
        loop {
            match w.try_next().await.expect("event") {
                Some(WatchEvent::Added(p)) => break p,
                Some(_) => {}
                None => panic!("no ADDED event"),
            }
        }
    });
    assert_eq!(request_of(&watched), 128 * MI);
    refused(grow(&api, "data", "64Mi"), "status.capacity");
    assert_eq!(grow(&api, "data", "80Mi").expect("lowered"), 80 * MI);
    assert_eq!(request_of(&c.get("data")), 80 * MI);

    // A server before KEP-1790, scripted: no lowering at all, growth passed through, and the
    // grown request is the new floor.
    let c = Cluster::new();
    c.pvc("data", &c.fast, 64, &[], infeasible);
    c.proxy
        .before_1790()
        .refuse_lowering(&c.ns, "data", 128 * MI);
    let (client, _kc) = through(&c);
    let api = claims(&c, &client);
    refused(
        grow(&api, "data", "80Mi"),
        "field can not be less than previous value",
    );
    assert_eq!(grow(&api, "data", "160Mi").expect("grown"), 160 * MI);
    refused(
        grow(&api, "data", "144Mi"),
        "field can not be less than previous value",
    );
    assert_eq!(request_of(&c.get("data")), 160 * MI);
}
