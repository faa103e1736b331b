//! Tenants cannot turn the agent against anyone: a claim that did not opt in gets no write, no
//! Event, no WAL read and no SQL connection (a KEP-1790 infeasible claim included), and the
//! Postgres credential goes only to a pod in its namespace owned by its cluster, never to one
//! that merely carries the labels or lives in another namespace; even that pod, asking for the
//! password in the clear, receives nothing. The real API server, the agent's requests counted in
//! the fault proxy's log.

mod support {
    pub mod cluster;
    pub mod fake_pg;
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use support::cluster::{Cluster, available, status_field};
use support::fake_pg::{Ask, FakePg};
use support::http::{free_port, get};
use support::kube::block;
use support::node::{MI, wait_for};

/// An opted-in Postgres data claim's annotations.
const PG_ENABLED: &[(&str, &str)] = &[
    ("enabled", "true"),
    ("limit", "1Gi"),
    ("postgres-role", "data"),
    ("wal-safety-acknowledge-wal-risk", "true"),
];
/// The same role, never opted in.
const PG_OFF: &[(&str, &str)] = &[("postgres-role", "data")];

/// Each pod gets its own loopback address, so the fake server can tell who was reached.
const OWNED: &str = "127.0.0.2";
const LABELLED: &str = "127.0.0.3";
const ELSEWHERE: &str = "127.0.0.4";
const OPTED_OUT: &str = "127.0.0.5";

fn cnpg_owner(cluster: &str) -> OwnerReference {
    OwnerReference {
        api_version: "postgresql.cnpg.io/v1".into(),
        kind: "Cluster".into(),
        name: cluster.into(),
        uid: format!("uid-{cluster}"),
        controller: Some(true),
        ..Default::default()
    }
}

/// A data directory with WAL waiting to be archived, as the agent would find on a volume.
fn pgdata(mount: &Path) {
    let status = mount.join("pgdata/pg_wal/archive_status");
    std::fs::create_dir_all(&status).expect("pg_wal");
    std::fs::write(mount.join("pgdata/PG_VERSION"), "17\n").expect("PG_VERSION");
    std::fs::write(status.join("000000010000000000000001.ready"), "").expect("ready");
}

/// A claim and its pod in `ns`, the pod at `ip` with `labels` and `owner`; returns the mount.
fn postgres_claim(
    c: &mut Cluster,
    ns: &str,
    name: &str,
    annotations: &[(&str, &str)],
    ip: &str,
    owner: Option<OwnerReference>,
) -> std::path::PathBuf {
    c.pvc_in(ns, name, &c.fast, 64, annotations, |_| {});
    let uid = c.pod_in(ns, &format!("pod-{name}"), &c.node, name, |p| {
        let labels = p.metadata.labels.get_or_insert_with(Default::default);
        labels.insert("cnpg.io/cluster".into(), "main".into());
        labels.insert("cnpg.io/instanceRole".into(), "primary".into());
        p.metadata.owner_references = owner.map(|o| vec![o]);
        p.status.get_or_insert_with(Default::default).pod_ip = Some(ip.into());
    });
    let pv = c.pv_name(name);
    let mount = c.root.tmpfs_volume(&uid, &pv, 64 * MI);
    pgdata(&mount);
    mount
}

/// Requests other than reads that concern claim `name` (patches, Events naming it, anything),
/// answered or not: from the proxy's arrivals, where a request is before the server sees it.
fn writes_about(c: &Cluster, name: &str) -> Vec<String> {
    let needle = format!("\"{name}\"");
    c.proxy
        .arrivals()
        .into_iter()
        .filter(|r| r.method != "GET")
        .filter(|r| {
            r.path.ends_with(&format!("/persistentvolumeclaims/{name}"))
                || r.body.as_deref().is_some_and(|b| b.contains(&needle))
        })
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

#[test]
fn tenants_cannot_turn_the_agent_against_anyone() {
    if !available("tenants_cannot_turn_the_agent_against_anyone", &[]) {
        return;
    }
    let fake_pg = block(FakePg::start(
        &[OWNED, LABELLED, ELSEWHERE, OPTED_OUT],
        Ask::Cleartext,
    ));
    let mut c = Cluster::new();
    let ns = c.ns.clone();
    // Another tenant's namespace.
    let evil = format!("{ns}-evil");
    c.create(
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": evil}}),
    );
    // The credential is bound to cluster `main` in this test's namespace.
    let secret_dir = tempfile::tempdir().expect("dir");
    let password = secret_dir.path().join("password");
    std::fs::write(&password, "s3cret-password-do-not-leak\n").expect("password");
    let yaml = format!(
        "clusters:\n  - {{ namespace: {ns}, cluster: main, operator: cloudnativepg, user: headroom, passwordFile: {}, port: {}, sslmode: prefer }}\n",
        password.display(),
        fake_pg.port
    );
    c.configmap(serde_json::json!({ "postgres.yaml": yaml }));

    // Owned by the cluster the credential names: the only pod the agent may try.
    postgres_claim(
        &mut c,
        &ns,
        "owned",
        PG_ENABLED,
        OWNED,
        Some(cnpg_owner("main")),
    );
    // The right labels, no ownership.
    postgres_claim(&mut c, &ns, "labelled", PG_ENABLED, LABELLED, None);
    // Owned by a Cluster `main`, in another namespace.
    postgres_claim(
        &mut c,
        &evil,
        "elsewhere",
        PG_ENABLED,
        ELSEWHERE,
        Some(cnpg_owner("main")),
    );
    // Owned correctly but never opted in: measured, nothing else.
    postgres_claim(
        &mut c,
        &ns,
        "opted-out",
        PG_OFF,
        OPTED_OUT,
        Some(cnpg_owner("main")),
    );
    // Not opted in, in the KEP-1790 infeasible state, with a history that would allow a retry.
    c.pvc(
        "infeasible",
        &c.fast,
        64,
        &[(
            "history",
            r#"[{"at":"2026-01-01T00:00:00Z","kind":"Grow","from":50331648,"to":67108864,"node":"n"}]"#,
        )],
        |p| {
            let spec = p.spec.as_mut().expect("spec");
            let requests = spec
                .resources
                .as_mut()
                .and_then(|r| r.requests.as_mut())
                .expect("requests");
            requests.insert("storage".into(), Quantity("128Mi".into()));
            p.status.as_mut().expect("status").allocated_resource_statuses = Some(
                [(
                    "storage".to_string(),
                    "ControllerResizeInfeasible".to_string(),
                )]
                .into(),
            );
        },
    );
    let uid = c.pod("pod-infeasible", &c.node, "infeasible");
    let pv = c.pv_name("infeasible");
    c.root.tmpfs_volume(&uid, &pv, 64 * MI);

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent_on(&c.node, c.root.path(), "300ms", &["--listen", &listen]);
    // The control: the owned pod is reached (and refused before the password, see below), and
    // the opted-in claims get their status written.
    wait_for(
        Duration::from_secs(20),
        "a connection to the owned pod",
        || (fake_pg.connections_to(OWNED) > 0).then_some(()),
    );
    wait_for(Duration::from_secs(20), "status on opted-in claims", || {
        ["owned", "labelled"]
            .iter()
            .all(|n| status_field(&c.get(n), "state").is_some())
            .then_some(())
    });
    // Several more scans for anything that would happen later.
    std::thread::sleep(Duration::from_secs(3));

    for ip in [LABELLED, ELSEWHERE, OPTED_OUT] {
        assert_eq!(fake_pg.connections_to(ip), 0, "the agent connected to {ip}");
    }
    for conn in fake_pg.connections() {
        assert!(
            conn.after_request.is_empty(),
            "a cleartext request was answered: {:?}",
            String::from_utf8_lossy(&conn.after_request)
        );
    }
    for name in ["opted-out", "infeasible"] {
        assert_eq!(writes_about(&c, name), Vec::<String>::new(), "{name}");
        assert!(
            c.events_for(name).is_empty(),
            "{name}: {:?}",
            c.events_for(name)
        );
        let pvc: PersistentVolumeClaim = c.get(name);
        assert_eq!(status_field(&pvc, "state"), None, "{name}");
    }
    assert_eq!(
        support::node::request_of(&c.get("infeasible")),
        128 * MI,
        "the infeasible request of a claim that never opted in was lowered"
    );
    // No WAL read for the claim that did not opt in: measured, no WAL facts.
    let (_, body) = get(port, "/volumes").expect("/volumes");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let volumes = v["volumes"].as_array().expect("volumes");
    let by_name = |n: &str| {
        volumes
            .iter()
            .find(|x| x["pvc"] == n)
            .unwrap_or_else(|| panic!("{n} not reported: {body}"))
    };
    assert!(by_name("opted-out")["wal"].is_null(), "{body}");
    assert!(by_name("opted-out")["measurement"].is_object(), "{body}");
    assert!(
        !by_name("owned")["wal"].is_null(),
        "the control read no WAL: {body}"
    );
}
