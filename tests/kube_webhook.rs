//! The claim admission webhook (issue 25, item 3) on the real kube-apiserver 1.20 + etcd
//! (tests/support/kube): its `MutatingAdmissionWebhook` plugin (on by default) calls the agents
//! over HTTPS with the `caBundle` they set, and applies their JSONPatch before the claim is
//! stored. The configuration is `overlays/webhook/`'s, reached by URL instead of its Service (no
//! kube-proxy here); the agents run as their service account with `rbac/` plus the overlay's
//! RBAC, exactly as shipped.
//!
//! The configuration is cluster-wide and the Secret is one per agent namespace, so the tests of
//! this file run one at a time (a lock), each in its own namespace.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use support::http::metric;
use support::kube::block;
use support::kube::cluster::{CNPG_GROUP_POLICY, KubeCluster, POLICY, annotation};
use support::kube::server;
use support::kube::webhook::{
    agent_calls, ca_bundle, configure, configure_all, create_claim, delete_secret, dry_run_request,
    headroom_annotations, secret, serving_agent, wait_serving, webhook_args, webhook_cluster,
};
use support::node::{MI, fill, request_of, wait_for};
use support::ports::free_port;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `headroom_webhook_requests_total{outcome}` of the agent whose admin endpoint is `admin`.
fn answered(admin: u16, outcome: &str) -> Option<f64> {
    metric(
        admin,
        "headroom_webhook_requests_total",
        &[&format!("outcome=\"{outcome}\"")],
    )
}

fn statefulset(c: &KubeCluster, name: &str, template: &str) {
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": c.ns},
        "spec": {
            "serviceName": name, "replicas": 3,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "db", "image": "postgres:17"}]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": template},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
            }],
        },
    }))
    .expect("statefulset");
    let api: Api<StatefulSet> = Api::namespaced(c.admin.0.clone(), &c.ns);
    block(async move {
        api.create(&PostParams::default(), &set)
            .await
            .expect("create statefulset")
    });
}

#[test]
fn new_members_are_born_at_their_groups_size_and_others_as_asked() {
    if !server::available("new_members_are_born_at_their_groups_size_and_others_as_asked") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = webhook_cluster();
    let policy = headroom_annotations(POLICY);
    // Existing members, created before the webhook is configured: one grown to 80Mi.
    statefulset(&c, "web", "data");
    let sts = json!({"app": "web"});
    create_claim(&c, "data-web-0", 80, policy.clone(), sts.clone());
    create_claim(&c, "data-web-1", 64, policy.clone(), sts.clone());
    let cnpg = json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"});
    create_claim(&c, "pg-1", 96, policy.clone(), cnpg.clone());
    // A claim made by hand, named like a member, of no StatefulSet.
    create_claim(&c, "cache-0", 80, policy.clone(), json!({}));

    let (_agent, admin) = serving_agent(&c);

    // A StatefulSet scale-up on 1.20: the template's claim, no owner, named <template>-<set>-2.
    let started = Instant::now();
    assert_eq!(
        create_claim(&c, "data-web-2", 64, policy.clone(), sts.clone()),
        80 * MI
    );
    let took = started.elapsed();
    // A CloudNativePG instance joining its cluster.
    assert_eq!(
        create_claim(&c, "pg-2", 64, policy.clone(), cnpg.clone()),
        96 * MI
    );
    // Its own limit caps it.
    let mut capped = policy.clone();
    capped["headroom.dev/limit"] = json!("72Mi");
    assert_eq!(create_claim(&c, "pg-3", 64, capped, cnpg.clone()), 72 * MI);
    // Not opted in: a member of the same set, created as asked.
    assert_eq!(
        create_claim(&c, "data-web-3", 64, json!({}), sts.clone()),
        64 * MI
    );
    // A hand-made claim beside a larger one with the same prefix: no StatefulSet, no group.
    assert_eq!(
        create_claim(&c, "cache-1", 64, policy.clone(), json!({})),
        64 * MI
    );
    // Born at size: the webhook's patch, not a PATCH by the agent afterwards.
    for name in ["data-web-2", "pg-2", "pg-3"] {
        assert!(
            c.claim_writes(name).is_empty(),
            "{name}: {:?}",
            c.claim_writes(name)
        );
    }
    // The StatefulSets were listed only for the claims with ordinal peers.
    let lists = agent_calls(&c, "statefulsets", "list");
    let here = lists
        .iter()
        .filter(|e| e.namespace() == Some(c.ns.as_str()))
        .count();
    assert_eq!(here, 3, "data-web-2, data-web-3 and cache-1: {lists:?}");
    // Each review counted by what became of it, and timed.
    assert_eq!(answered(admin, "raised"), Some(3.0));
    assert_eq!(answered(admin, "as_requested"), Some(2.0));
    assert_eq!(answered(admin, "lookup_failed"), Some(0.0));
    let timed = metric(
        admin,
        "headroom_webhook_request_duration_seconds_count",
        &[],
    );
    assert_eq!(timed, Some(5.0));
    eprintln!("CREATE of a StatefulSet member through the webhook took {took:?}");

    // Opted in by its Namespace alone: once the Namespace's policy has reached the agent's
    // watch store (no read per review), a member that carries no policy is raised too. Each
    // try is a new member of the set, created until one is raised.
    let body = json!({"metadata": {"annotations": policy}});
    c.patch_cluster::<k8s_openapi::api::core::v1::Namespace>(&c.ns.clone(), body);
    let mut tries = 3;
    let (name, size) = wait_for(
        Duration::from_secs(20),
        "a Namespace-opted member raised",
        || {
            tries += 1;
            let name = format!("data-web-{tries}");
            let size = create_claim(&c, &name, 64, json!({}), sts.clone());
            (size == 80 * MI).then_some((name, size))
        },
    );
    assert_eq!(size, 80 * MI, "{name}");
    assert!(c.claim_writes(&name).is_empty(), "{name}: born at size");
}

#[test]
fn with_every_agent_down_a_claim_is_created_as_asked_then_grown() {
    if !server::available("with_every_agent_down_a_claim_is_created_as_asked_then_grown") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = webhook_cluster();
    // Configured and trusted, but nothing listens: failurePolicy Ignore lets the CREATE through.
    let dead = free_port();
    let ca = headroom::webhook::certs::generate(
        &["127.0.0.1".into()],
        jiff::Timestamp::now(),
        Duration::from_secs(3600),
    )
    .expect("cert");
    configure(&c, dead, Some(&ca.ca));
    let labels = |p: &mut Value| {
        p["metadata"]["labels"] = json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"});
    };
    let fast = c.fast.clone();
    let node_b = format!("{}-b", c.node);
    c.add_node(&node_b);
    c.pvc("pg-1", &fast, 80, CNPG_GROUP_POLICY, labels);
    c.pod("pg-1", &node_b, "pg-1");
    let started = Instant::now();
    c.pvc("pg-2", &fast, 64, CNPG_GROUP_POLICY, labels);
    let took = started.elapsed();
    assert_eq!(
        request_of(&c.get("pg-2")),
        64 * MI,
        "created at the size asked"
    );

    // Its instance starts on this node; the agent (its webhook on another port) raises it.
    let uid = c.pod("pg-2", &c.node.clone(), "pg-2");
    let pv = c.pv_name("pg-2");
    let mount = c.root.tmpfs_volume(&uid, &pv, 64 * MI);
    fill(&mount, MI);
    let _csi = c.csi(&[("pg-2", mount.clone())], 200);
    let port = free_port();
    let _agent = c.agent(
        "300ms",
        &webhook_args(port)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    c.wait_capacity("pg-2", 80 * MI);
    let history = annotation(&c.get("pg-2"), "headroom.dev/history").expect("history");
    assert!(history.contains("GroupGrow"), "{history}");
    c.assert_resize_patches("pg-2", 1);
    eprintln!("CREATE with the webhook down took {took:?}");
}

/// `openssl s_client` against `port`, verifying the chain to `ca` and the name 127.0.0.1; the
/// certificate it was served (PEM).
fn served_certificate(port: u16, ca: &str) -> String {
    let dir = tempfile::tempdir().expect("dir");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).expect("write ca");
    // A listener that accepts and never answers would hold s_client forever.
    let out = Command::new("timeout")
        .args(["30", "openssl", "s_client", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-CAfile")
        .arg(&ca_file)
        .args(["-verify_return_error", "-verify_ip", "127.0.0.1"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains("Verify return code: 0 (ok)"),
        "{port}: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let begin = text
        .find("-----BEGIN CERTIFICATE-----")
        .expect("certificate");
    let end =
        text.find("-----END CERTIFICATE-----").expect("end") + "-----END CERTIFICATE-----".len();
    text[begin..end].to_string()
}

#[test]
fn two_agents_started_together_end_with_one_secret_and_one_ca_bundle() {
    if !server::available("two_agents_started_together_end_with_one_secret_and_one_ca_bundle") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = webhook_cluster();
    delete_secret(&c);
    wait_for(Duration::from_secs(10), "the old Secret to go", || {
        secret(&c, "ca.crt").is_none().then_some(())
    });
    let creates_before = agent_calls(&c, "secrets", "create").len();
    let (p1, p2) = (free_port(), free_port());
    configure(&c, p1, None);
    let node_b = format!("{}-b", c.node);
    c.add_node(&node_b);
    let a1 = webhook_args(p1);
    let a2 = webhook_args(p2);
    let _one_agent = c.agent("1s", &a1.iter().map(String::as_str).collect::<Vec<_>>());
    let _other = c.agent_on(
        &node_b,
        c.root.path(),
        "1s",
        &a2.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_serving(&c, p1);
    wait_for(
        Duration::from_secs(30),
        "the second agent to listen",
        || std::net::TcpStream::connect(("127.0.0.1", p2)).ok(),
    );

    let ca = secret(&c, "ca.crt").expect("the Secret");
    let cert = secret(&c, "tls.crt").expect("tls.crt");
    assert_eq!(ca_bundle(&c).as_deref(), Some(ca.as_str()));
    // Both serve the Secret's certificate, which chains to the one caBundle.
    for port in [p1, p2] {
        assert_eq!(served_certificate(port, &ca).trim(), cert.trim(), "{port}");
    }
    // One creation succeeded; a loser of the race got 409 and read the winner's.
    let creates: Vec<u16> = agent_calls(&c, "secrets", "create")
        .iter()
        .skip(creates_before)
        .map(|e| e.code())
        .collect();
    assert_eq!(
        creates.iter().filter(|c| **c == 201).count(),
        1,
        "{creates:?}"
    );
    assert!(
        creates.iter().all(|c| *c == 201 || *c == 409),
        "{creates:?}"
    );

    // Through the API server, with either agent behind the one bundle.
    let policy = headroom_annotations(POLICY);
    let cnpg = json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_WAL"});
    create_claim(&c, "pg-1-wal", 96, policy.clone(), cnpg.clone());
    assert_eq!(
        create_claim(&c, "pg-2-wal", 64, policy.clone(), cnpg.clone()),
        96 * MI
    );
    let bundle = ca_bundle(&c);
    configure(&c, p2, bundle.as_deref());
    wait_for(
        Duration::from_secs(20),
        "the new configuration in effect",
        || (dry_run_request(&c, 64, policy.clone(), cnpg.clone()) == 96 * MI).then_some(()),
    );
    assert_eq!(create_claim(&c, "pg-3-wal", 64, policy, cnpg), 96 * MI);
}

/// The CA certificates of a PEM bundle.
fn cas(bundle: &str) -> Vec<String> {
    headroom::webhook::certs::pem_blocks(bundle)
        .into_iter()
        .map(|b| b.trim().to_string())
        .collect()
}

/// Issue 36 part 3: certificates valid for 9 s, so renewed every few seconds, a new CA each time,
/// while claims are created through both agents' webhooks (failurePolicy Fail here, so a
/// handshake the API server refuses fails the CREATE instead of passing it unsized).
#[test]
fn certificates_and_ca_rotate_under_creates_with_none_refused_and_no_restart() {
    if !server::available(
        "certificates_and_ca_rotate_under_creates_with_none_refused_and_no_restart",
    ) {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = webhook_cluster();
    delete_secret(&c);
    wait_for(Duration::from_secs(10), "the old Secret to go", || {
        secret(&c, "ca.crt").is_none().then_some(())
    });
    let (p1, p2) = (free_port(), free_port());
    configure_all(&c, &[p1, p2], None, "Fail");
    let node_b = format!("{}-b", c.node);
    c.add_node(&node_b);
    let admins = [free_port(), free_port()];
    let args = |port: u16, admin: u16| {
        let mut a = webhook_args(port);
        a.extend([
            "--webhook-cert-validity".into(),
            "9s".into(),
            "--listen".into(),
            format!("127.0.0.1:{admin}"),
        ]);
        a
    };
    let (a1, a2) = (args(p1, admins[0]), args(p2, admins[1]));
    let mut one = c.agent("1s", &a1.iter().map(String::as_str).collect::<Vec<_>>());
    let mut other = c.agent_on(
        &node_b,
        c.root.path(),
        "1s",
        &a2.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let pids = (one.child.id(), other.child.id());
    wait_serving(&c, p1);
    wait_for(
        Duration::from_secs(30),
        "the second agent to listen",
        || std::net::TcpStream::connect(("127.0.0.1", p2)).ok(),
    );
    let first_ca = secret(&c, "ca.crt").expect("ca.crt");
    let mut certs_seen = vec![secret(&c, "tls.crt").expect("tls.crt")];

    let policy = headroom_annotations(POLICY);
    let cnpg = json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"});
    assert_eq!(
        create_claim(&c, "pg-1", 96, policy.clone(), cnpg.clone()),
        96 * MI
    );
    let started = Instant::now();
    let mut created = 1;
    while started.elapsed() < Duration::from_secs(36) {
        created += 1;
        let name = format!("pg-{created}");
        let took = Instant::now();
        assert_eq!(
            create_claim(&c, &name, 64, policy.clone(), cnpg.clone()),
            96 * MI,
            "{name} sized at {:?}",
            started.elapsed()
        );
        // A CREATE a second or so apart; the Secret looked at in between.
        while took.elapsed() < Duration::from_secs(1) {
            if let Some(cert) = secret(&c, "tls.crt")
                && certs_seen.last() != Some(&cert)
            {
                certs_seen.push(cert);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let last_ca = secret(&c, "ca.crt").expect("ca.crt");
    eprintln!(
        "{created} claims created through both webhooks; {} serving certificates",
        certs_seen.len()
    );
    // Renewed at least twice, and the first CA rotated out of the bundle (a new one trusted).
    assert!(certs_seen.len() >= 3, "{} certificates", certs_seen.len());
    for ca in cas(&first_ca) {
        assert!(
            !cas(&last_ca).contains(&ca),
            "the first CA is still trusted"
        );
    }
    // Every CREATE reviewed by each agent, none failing to size it.
    for admin in admins {
        let answered = |outcome: &str| answered(admin, outcome).unwrap_or(0.0);
        let sized = answered("raised") + answered("as_requested");
        assert_eq!(sized, f64::from(created), "agent at {admin}");
        assert_eq!(answered("lookup_failed") + answered("timed_out"), 0.0);
        let expiry = metric(
            admin,
            "headroom_webhook_certificate_expiry_timestamp_seconds",
            &[],
        )
        .expect("expiry");
        let now = jiff::Timestamp::now().as_second() as f64;
        assert!(expiry > now && expiry <= now + 10.0, "{expiry} at {now}");
    }
    // The same processes throughout.
    assert_eq!((one.child.id(), other.child.id()), pids);
    assert!(one.child.try_wait().expect("wait").is_none());
    assert!(other.child.try_wait().expect("wait").is_none());
}
