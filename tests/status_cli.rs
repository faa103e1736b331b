//! `headroom status` as a user runs it: the built binary, a kubeconfig, and the real API server
//! (through the fault proxy, which logs its LISTs and fails on cue) holding claims annotated the
//! way the agent writes them.

mod support {
    pub mod cluster;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::path::Path;
use std::process::{Command, Output};

use headroom::decide::{Action, GrowKind};
use headroom::k8s::state::{HISTORY, STATUS, StatusAnnotation, append};
use headroom::quantity::GI;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};
use support::cluster::Cluster;
use support::kube::proxy::FaultProxy;
use support::kube::server::{self, ADMIN_TOKEN};

/// A bound claim, created and its status set as the PV controller does.
fn pvc(c: &Cluster, ns: &str, name: &str, labels: Value, annotations: Value, size: &str) {
    c.create(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": { "name": name, "namespace": ns, "labels": labels, "annotations": annotations },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "fast-ssd",
            "volumeName": format!("pv-{name}"),
            "resources": { "requests": { "storage": size } },
        },
    }));
    let status = json!({ "status": { "phase": "Bound", "capacity": { "storage": size } } });
    c.patch_status_in::<PersistentVolumeClaim>(ns, name, status);
}

fn status(state: &str, blocked: Option<&str>, size_gi: u64, used: f64) -> StatusAnnotation {
    serde_json::from_value(json!({
        "node": "worker-2",
        "updatedAt": Timestamp::now(),
        "effectiveSizeBytes": size_gi * GI,
        "limitBytes": 100 * GI,
        "state": state,
        "blockedReason": blocked,
        "lastDecision": "test",
        "usedPercent": used,
        "budgetLeft": 1,
    }))
    .expect("status annotation")
}

fn annotations(status: &StatusAnnotation, history: &[Action]) -> Value {
    json!({
        STATUS: serde_json::to_string(status).expect("encode"),
        HISTORY: serde_json::to_string(history).expect("encode"),
    })
}

/// Two CloudNativePG claims in `db`, an untouched claim and a corrupt one in `apps`, and one in
/// `default` (the kubeconfig's namespace). The only claims on this test binary's server.
fn seed(c: &Cluster) {
    for ns in ["db", "apps"] {
        c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    let now = Timestamp::now();
    let grown = append(
        &[],
        Action {
            node: "worker-2".into(),
            ..Action::new(
                now - SignedDuration::from_hours(3),
                GrowKind::Grow,
                10 * GI,
                20 * GI,
            )
        },
        now,
    );
    let cnpg = |role: &str| json!({ "cnpg.io/cluster": "pg-main", "cnpg.io/pvcRole": role });
    pvc(
        c,
        "db",
        "pg-main-1",
        cnpg("PG_DATA"),
        annotations(
            &StatusAnnotation {
                full_in_seconds: Some(2_400),
                limit_in_seconds: Some(3 * 86_400),
                ..status("Blocked", Some("budget_exhausted"), 20, 85.04)
            },
            &grown,
        ),
        "20Gi",
    );
    pvc(
        c,
        "db",
        "pg-main-1-wal",
        cnpg("PG_WAL"),
        annotations(&status("Balanced", None, 5, 12.0), &[]),
        "5Gi",
    );
    pvc(
        c,
        "apps",
        "uploads",
        json!({ "app": "web" }),
        json!({}),
        "1Gi",
    );
    pvc(
        c,
        "apps",
        "broken",
        json!({ "app": "web" }),
        json!({ HISTORY: "[{\"at\":\"2026-03-01T10:00:00Z\",\"kind\":\"Gr" }),
        "2Gi",
    );
    pvc(c, "default", "scratch", json!({}), json!({}), "3Gi");
}

fn run(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_headroom"))
        .arg("status")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run headroom status")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "headroom status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (namespace, name) of each table row, and the row text.
fn rows(table: &str) -> Vec<(String, String, String)> {
    let mut lines = table.lines();
    let header = lines.next().expect("header line");
    assert!(header.starts_with("NAMESPACE"), "{header}");
    for col in [
        "NODE",
        "SIZE/LIMIT",
        "USED%",
        "FULL IN",
        "LIMIT IN",
        "STATE",
        "LAST ACTION",
        "BUDGET",
        "QUOTA LEFT",
        "BLOCKED",
    ] {
        assert!(header.contains(col), "{header}");
    }
    lines
        .map(|l| {
            let mut f = l.split_whitespace();
            let ns = f.next().unwrap_or_default().to_string();
            let name = f.next().unwrap_or_default().to_string();
            (ns, name, l.to_string())
        })
        .collect()
}

fn names(rows: &[(String, String, String)]) -> Vec<String> {
    rows.iter().map(|(ns, n, _)| format!("{ns}/{n}")).collect()
}

/// The LISTs of claims the binary made, as (path, labelSelector).
fn pvc_lists(proxy: &FaultProxy) -> Vec<(String, Option<String>)> {
    proxy
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("persistentvolumeclaims"))
        .map(|r| (r.path.clone(), r.param("labelSelector")))
        .collect()
}

#[test]
fn status_lists_claims_by_namespace_selector_and_format() {
    if !server::available("status_lists_claims_by_namespace_selector_and_format") {
        return;
    }
    let c = Cluster::new();
    seed(&c);
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    c.proxy.kubeconfig(ADMIN_TOKEN, &kc);

    // -n: one namespace, one LIST.
    c.proxy.clear_requests();
    let out = run(&kc, &["-n", "db"]);
    let table = stdout(&out);
    // The server's release on stderr, the table alone on stdout.
    let said = String::from_utf8_lossy(&out.stderr);
    let release = server::release().expect("release");
    assert!(
        said.contains(&format!("API server {} (tested", release.version)),
        "{said}"
    );
    let r = rows(&table);
    assert_eq!(names(&r), ["db/pg-main-1", "db/pg-main-1-wal"]);
    let data = &r[0].2;
    for cell in [
        "worker-2",
        "20Gi/100Gi",
        "85.0",
        "Blocked",
        "Grow 10Gi->20Gi 3h ago",
        "budget_exhausted",
    ] {
        assert!(data.contains(cell), "missing {cell}: {data}");
    }
    // USED%, FULL IN, LIMIT IN, STATE side by side.
    let words: Vec<&str> = data.split_whitespace().collect();
    assert!(
        words
            .windows(4)
            .any(|w| w == ["85.0", "40m", "3d", "Blocked"]),
        "{data}"
    );
    assert!(
        r[1].2.contains("Balanced") && r[1].2.contains("5Gi/100Gi"),
        "{}",
        r[1].2
    );
    assert_eq!(
        pvc_lists(&c.proxy),
        [(
            "/api/v1/namespaces/db/persistentvolumeclaims".to_string(),
            None
        )]
    );

    // No namespace flag: the kubeconfig context's namespace.
    let r = rows(&stdout(&run(&kc, &[])));
    assert_eq!(names(&r), ["default/scratch"]);
    assert!(r[0].2.contains("3Gi/-"), "{}", r[0].2);

    // -A: every namespace; untouched claims show dashes, a corrupt annotation is an error row.
    c.proxy.clear_requests();
    let r = rows(&stdout(&run(&kc, &["-A"])));
    assert_eq!(
        names(&r),
        [
            "apps/broken",
            "apps/uploads",
            "db/pg-main-1",
            "db/pg-main-1-wal",
            "default/scratch"
        ]
    );
    let broken = &r[0].2;
    assert!(broken.contains("Error"), "{broken}");
    assert!(
        broken.contains("error: PVC apps/broken: annotation headroom.dev/history is not valid"),
        "{broken}"
    );
    let uploads: Vec<&str> = r[1].2.split_whitespace().collect();
    assert_eq!(
        uploads,
        [
            "apps", "uploads", "-", "1Gi/-", "-", "-", "-", "-", "-", "-", "-", "-"
        ]
    );
    assert_eq!(
        pvc_lists(&c.proxy),
        [("/api/v1/persistentvolumeclaims".to_string(), None)]
    );

    // -l goes to the server as the LIST's labelSelector.
    c.proxy.clear_requests();
    let r = rows(&stdout(&run(&kc, &["-A", "-l", "cnpg.io/pvcRole=PG_WAL"])));
    assert_eq!(names(&r), ["db/pg-main-1-wal"]);
    assert_eq!(
        pvc_lists(&c.proxy),
        [(
            "/api/v1/persistentvolumeclaims".to_string(),
            Some("cnpg.io/pvcRole=PG_WAL".to_string())
        )]
    );

    // --format json: a list of objects with the annotations decoded.
    let out = stdout(&run(&kc, &["-A", "-l", "app=web", "--format", "json"]));
    let v: Value = serde_json::from_str(&out).expect("JSON output");
    let list = v.as_array().expect("a list");
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["name"], "broken");
    assert_eq!(list[0]["sizeBytes"], 2 * GI);
    assert!(
        list[0]["errors"][0]
            .as_str()
            .is_some_and(|e| e.contains("headroom.dev/history")),
        "{out}"
    );
    assert_eq!(list[1]["name"], "uploads");
    assert_eq!(list[1]["status"], Value::Null);
    assert_eq!(list[1]["errors"], json!([]));

    let out = stdout(&run(&kc, &["-n", "db", "--format", "json"]));
    let v: Value = serde_json::from_str(&out).expect("JSON output");
    assert_eq!(v[0]["status"]["state"], "Blocked");
    assert_eq!(v[0]["status"]["blockedReason"], "budget_exhausted");
    assert_eq!(v[0]["status"]["usedPercent"], 85.04);
    assert_eq!(v[0]["lastAction"]["to"], 20 * GI);
    assert_eq!(v[0]["lastAction"]["kind"], "Grow");
}

#[test]
fn status_reports_api_and_kubeconfig_errors() {
    if !server::available("status_reports_api_and_kubeconfig_errors") {
        return;
    }
    let c = Cluster::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    c.proxy.kubeconfig(ADMIN_TOKEN, &kc);

    c.proxy.set_failing(true);
    let out = run(&kc, &["-A"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("listing PersistentVolumeClaims in all namespaces"),
        "{err}"
    );
    c.proxy.set_failing(false);

    let out = run(&dir.path().join("missing"), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kubeconfig") && err.contains("missing"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// Issue 24: a convergent claim's status as the agent now writes it (the RFC's status model)
/// shows its own size, the Emergency state and the budget split planned/emergency.
#[test]
fn status_shows_the_rfcs_emergency_state_and_budget() {
    if !server::available("status_shows_the_rfcs_emergency_state_and_budget") {
        return;
    }
    // A server of its own: the first test lists every claim of the shared one.
    let c = Cluster::on(std::sync::Arc::new(server::Server::start()));
    c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "db"}}));
    let st: StatusAnnotation = serde_json::from_value(json!({
        "node": "worker-2",
        "updatedAt": Timestamp::now(),
        "sizeBytes": 12 * GI,
        "effectiveSizeBytes": 20 * GI,
        "targetSizeBytes": 15 * GI,
        "limitBytes": 100 * GI,
        "state": "Emergency",
        "blockedReason": "resize_in_progress",
        "lastDecision": "blocked: resize_in_progress",
        "usedPercent": 96.0,
        "budgetLeft": 1,
        "budget": { "actionsLast24h": 3, "reservedForEmergency": 1, "availableForPlanned": 0,
                    "availableForEmergency": 1, "budgetResetsAt": "2026-03-03T03:00:05Z" },
        "conditions": [{ "type": "Emergency", "status": "True", "reason": "PastCriticalLine" }],
        "quota": { "quota": "db-storage", "resource": "requests.storage", "hardBytes": 40 * GI,
                   "usedBytes": 37 * GI, "leftBytes": 3 * GI },
    }))
    .expect("status annotation");
    pvc(
        &c,
        "db",
        "pg-conv-1",
        json!({ "cnpg.io/cluster": "pg-conv", "cnpg.io/pvcRole": "PG_DATA" }),
        annotations(&st, &[]),
        "12Gi",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    c.proxy.kubeconfig(ADMIN_TOKEN, &kc);

    let r = rows(&stdout(&run(&kc, &["-n", "db"])));
    let cells: Vec<&str> = r[0].2.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "db",
            "pg-conv-1",
            "worker-2",
            "12Gi/100Gi",
            "96.0",
            "-",
            "-",
            "Emergency",
            "-",
            "0/1",
            "3Gi",
            "(db-storage)",
            "resize_in_progress"
        ]
    );
    let out = stdout(&run(&kc, &["-n", "db", "--format", "json"]));
    let v: Value = serde_json::from_str(&out).expect("JSON output");
    let s = &v[0]["status"];
    assert_eq!(s["effectiveSizeBytes"], 20 * GI);
    assert_eq!(s["targetSizeBytes"], 15 * GI);
    assert_eq!(s["budget"]["availableForEmergency"], 1);
    assert_eq!(s["quota"]["leftBytes"], 3 * GI);
    assert_eq!(s["budget"]["budgetResetsAt"], "2026-03-03T03:00:05Z");
    assert_eq!(s["conditions"][0]["type"], "Emergency");
}
