//! The review's reading and answering, the size a new claim gets, StatefulSet membership and
//! the certificates, hostile inputs included. The API server's side is tests/kube_webhook.rs.

use base64::Engine;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

use super::lookup::{has_ordinal_peers, statefulset_group};
use super::review::{self, Reviewed};
use super::size::{Because, Keep, Layers, SourceSize, Verdict, verdict};
use crate::policy::merge::{CentralPolicy, POLICY_KEY, parse_configmap};
use crate::quantity::MI;

fn claim(name: &str, size: &str, annotations: Value, labels: Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "db", "annotations": annotations, "labels": labels},
        "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": size}}},
    }))
    .expect("claim")
}

fn opted_in() -> Value {
    json!({"headroom.dev/enabled": "true", "headroom.dev/limit": "200Mi"})
}

fn cnpg() -> Value {
    json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"})
}

fn review_body(object: Value, operation: &str) -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1", "operation": operation, "namespace": "db",
            "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "object": object,
        },
    })
    .to_string()
    .into_bytes()
}

fn response(answer: &[u8]) -> Value {
    let v: Value = serde_json::from_slice(answer).expect("answer is JSON");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(v["response"]["allowed"], true, "the webhook never denies");
    v["response"].clone()
}

#[test]
fn a_create_is_read_with_the_requests_namespace() {
    let obj = json!({"metadata": {"name": "data-web-2"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}});
    let Ok(Reviewed::Create(c)) = review::parse(&review_body(obj.clone(), "CREATE")) else {
        panic!("a claim CREATE");
    };
    assert_eq!(c.uid, "u-1");
    assert_eq!(c.pvc.metadata.namespace.as_deref(), Some("db"));
    assert!(matches!(
        review::parse(&review_body(obj, "UPDATE")),
        Ok(Reviewed::Other { uid }) if uid == "u-1"
    ));
}

#[test]
fn hostile_reviews_are_errors_never_panics() {
    let bodies: Vec<Vec<u8>> =
        vec![
        b"".to_vec(),
        b"{".to_vec(),
        b"null".to_vec(),
        b"[1,2]".to_vec(),
        vec![0xff, 0xfe, 0x00],
        json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}})
            .to_string()
            .into_bytes(),
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}).to_string().into_bytes(),
        // A claim CREATE whose object is not a claim, or is missing.
        review_body(json!("a string"), "CREATE"),
        review_body(json!({"spec": {"resources": {"requests": {"storage": {"a": 1}}}}}), "CREATE"),
        review_body(Value::Null, "CREATE"),
    ];
    for b in &bodies {
        assert!(review::parse(b).is_err(), "{}", String::from_utf8_lossy(b));
        // The answer still allows, naming the uid when there is one.
        let r = response(&review::allow(
            &review::uid_of(b).unwrap_or_default(),
            None,
            Some("x"),
        ));
        assert!(r.get("patch").is_none());
    }
    assert_eq!(
        review::uid_of(&review_body(Value::Null, "CREATE")).as_deref(),
        Some("u-1")
    );
}

#[test]
fn the_answer_carries_a_base64_json_patch_and_a_clean_warning() {
    let r = response(&review::allow(
        "u-9",
        Some(&review::raise_patch(80 * MI)),
        Some("line\none\u{7}"),
    ));
    assert_eq!(r["uid"], "u-9");
    assert_eq!(r["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(r["patch"].as_str().expect("patch"))
        .expect("base64");
    let patch: Value = serde_json::from_slice(&patch).expect("JSON");
    assert_eq!(
        patch,
        json!([{"op": "replace", "path": "/spec/resources/requests/storage", "value": "80Mi"}])
    );
    assert_eq!(r["warnings"], json!(["headroom: lineone"]));
}

fn members() -> Vec<PersistentVolumeClaim> {
    vec![
        claim("pg-1", "80Mi", opted_in(), cnpg()),
        claim("pg-2", "64Mi", opted_in(), cnpg()),
        // Another cluster's claim is larger: not a member.
        claim(
            "other-1",
            "150Mi",
            opted_in(),
            json!({"cnpg.io/cluster": "other", "cnpg.io/pvcRole": "PG_DATA"}),
        ),
    ]
}

fn decide(pvc: &PersistentVolumeClaim, central: &CentralPolicy) -> Verdict {
    let group = crate::k8s::roles::group_key(pvc, None);
    verdict(
        pvc,
        group.as_deref(),
        &members(),
        &SourceSize::None,
        layers(None, central),
    )
}

fn layers<'a>(class: Option<&'a StorageClass>, central: &'a CentralPolicy) -> Layers<'a> {
    Layers {
        class,
        namespace: None,
        central,
    }
}

#[test]
fn a_new_member_is_raised_to_its_groups_size_within_its_limit() {
    let central = CentralPolicy::default();
    let pvc = claim("pg-3", "64Mi", opted_in(), cnpg());
    assert_eq!(
        decide(&pvc, &central),
        Verdict::Raise {
            from: 64 * MI,
            to: 80 * MI,
            because: Because::Group("db/cnpg/pg/PG_DATA".into()),
            caveat: None,
        }
    );
    // Its own limit caps the raise.
    let capped = claim(
        "pg-3",
        "64Mi",
        json!({"headroom.dev/enabled": "true", "headroom.dev/limit": "70Mi"}),
        cnpg(),
    );
    assert!(matches!(decide(&capped, &central), Verdict::Raise { to, .. } if to == 70 * MI));
    // Asking for more than the group: kept.
    let big = claim("pg-3", "100Mi", opted_in(), cnpg());
    assert_eq!(decide(&big, &central), Verdict::Keep(Keep::AtSize));
    // A claim re-created under a member's name is not its own peer.
    let again = claim("pg-1", "64Mi", opted_in(), cnpg());
    let alone = vec![claim("pg-1", "80Mi", opted_in(), cnpg())];
    let group = crate::k8s::roles::group_key(&again, None);
    assert_eq!(
        verdict(
            &again,
            group.as_deref(),
            &alone,
            &SourceSize::None,
            layers(None, &central)
        ),
        Verdict::Keep(Keep::AtSize)
    );
}

#[test]
fn only_a_claim_that_opted_in_is_raised() {
    let pvc = claim("pg-3", "64Mi", json!({}), cnpg());
    assert_eq!(
        decide(&pvc, &CentralPolicy::default()),
        Verdict::Keep(Keep::NotOptedIn)
    );
    let off = claim(
        "pg-3",
        "64Mi",
        json!({"headroom.dev/enabled": "false", "headroom.dev/limit": "1Gi"}),
        cnpg(),
    );
    assert_eq!(
        decide(&off, &CentralPolicy::default()),
        Verdict::Keep(Keep::NotOptedIn)
    );
    // The ConfigMap's defaults opt it in, as they do for the agent.
    let data = [(
        POLICY_KEY.to_string(),
        "enabled: true\nlimit: 1Gi\n".to_string(),
    )]
    .into();
    let central = parse_configmap(&data, "headroom/headroom");
    assert!(matches!(decide(&pvc, &central), Verdict::Raise { to, .. } if to == 80 * MI));
    // So does the StorageClass.
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "fast", "annotations": {"headroom.dev/enabled": "true", "headroom.dev/limit": "1Gi"}},
        "provisioner": "x",
    }))
    .expect("class");
    let group = crate::k8s::roles::group_key(&pvc, None);
    assert!(matches!(
        verdict(
            &pvc,
            group.as_deref(),
            &members(),
            &SourceSize::None,
            layers(Some(&class), &CentralPolicy::default())
        ),
        Verdict::Raise { .. }
    ));
    // And so does the claim's Namespace, read from the agent's store like the class.
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": "db", "annotations": {"headroom.dev/enabled": "true", "headroom.dev/limit": "1Gi"}},
    }))
    .expect("namespace");
    let central = CentralPolicy::default();
    let by_namespace = Layers {
        class: None,
        namespace: Some(&namespace),
        central: &central,
    };
    assert!(super::size::opted_in(&pvc, by_namespace));
    assert!(matches!(
        verdict(&pvc, group.as_deref(), &members(), &SourceSize::None, by_namespace),
        Verdict::Raise { to, .. } if to == 80 * MI
    ));
}

#[test]
fn hostile_claims_keep_their_size_and_say_why() {
    let central = CentralPolicy::default();
    for size in ["lots", "-1Gi", "1e999", "99999999999999999999Ei", ""] {
        let pvc = claim("pg-3", size, opted_in(), cnpg());
        let Verdict::Keep(k @ Keep::NoRequest(_)) = decide(&pvc, &central) else {
            panic!("{size}: kept");
        };
        assert!(k.warning().is_some_and(|w| w.contains("pg-3")), "{k:?}");
    }
    let mut none = claim("pg-3", "1Gi", opted_in(), cnpg());
    none.spec = None;
    assert!(matches!(
        decide(&none, &central),
        Verdict::Keep(Keep::NoRequest(_))
    ));
    let bad_policy = claim(
        "pg-3",
        "64Mi",
        json!({"headroom.dev/enabled": "true", "headroom.dev/limit": "10GB"}),
        cnpg(),
    );
    let Verdict::Keep(Keep::InvalidPolicy(m)) = decide(&bad_policy, &central) else {
        panic!("an invalid policy is kept");
    };
    assert!(m.contains("limit") && m.contains("db/pg-3"), "{m}");
    // A member with an unreadable size is not counted; the others are.
    let mut with_bad = members();
    with_bad.push(claim("pg-9", "garbage", opted_in(), cnpg()));
    let pvc = claim("pg-3", "64Mi", opted_in(), cnpg());
    let group = crate::k8s::roles::group_key(&pvc, None);
    assert!(matches!(
        verdict(&pvc, group.as_deref(), &with_bad, &SourceSize::None, layers(None, &central)),
        Verdict::Raise { to, .. } if to == 80 * MI
    ));
    // No group, no raise.
    let loner = claim("scratch", "1Mi", opted_in(), json!({}));
    assert_eq!(decide(&loner, &central), Verdict::Keep(Keep::NoGroup));
}

fn set(name: &str, templates: &[&str]) -> StatefulSet {
    let t: Vec<Value> = templates
        .iter()
        .map(|t| json!({"metadata": {"name": t}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "db"},
        "spec": {"selector": {}, "serviceName": name, "template": {}, "volumeClaimTemplates": t},
    }))
    .expect("statefulset")
}

#[test]
fn statefulset_membership_comes_from_the_sets_not_the_name_alone() {
    let pvc = claim("data-pg-main-3", "1Gi", json!({}), json!({}));
    let sets = [set("main", &["logs"]), set("pg-main", &["data", "wal"])];
    assert_eq!(
        statefulset_group(&pvc, &sets).as_deref(),
        Some("db/sts/pg-main/data")
    );
    // The key reads back through the agent's own membership test.
    let peer = claim("data-pg-main-0", "2Gi", json!({}), json!({}));
    assert!(crate::k8s::roles::in_group(&peer, "db/sts/pg-main/data"));
    // A hand-made claim named like a member of no set is in no group.
    let hand = claim("cache-1", "1Gi", json!({}), json!({}));
    assert_eq!(statefulset_group(&hand, &sets), None);
    // Peers by name: the prefix before the ordinal must match exactly.
    let others = vec![
        claim("data-pg-main-0", "1Gi", json!({}), json!({})),
        claim("data-pg-mainx-1", "1Gi", json!({}), json!({})),
    ];
    assert!(has_ordinal_peers("data-pg-main-3", &others));
    assert!(!has_ordinal_peers("data-pg-main-0", &others[..1]));
    assert!(!has_ordinal_peers("data-pg-main-x", &others));
    assert!(!has_ordinal_peers("-3", &others));
    assert!(!has_ordinal_peers("", &others));
}

#[test]
fn a_generated_certificate_serves_and_chains_to_its_ca() {
    let names = super::certs::names("headroom-webhook", "headroom", &["127.0.0.1".into()]);
    assert_eq!(names[0], "headroom-webhook.headroom.svc");
    let issued = jiff::Timestamp::from_second(1_780_000_000).expect("time");
    let ninety_days = std::time::Duration::from_secs(90 * 86_400);
    let cert = super::certs::generate(&names, issued, ninety_days).expect("generate");
    assert!(cert.ca.contains("BEGIN CERTIFICATE") && cert.key.contains("PRIVATE KEY"));
    super::live::LiveCert::new(&cert).expect("rustls takes it");
    // Valid for the 90 days asked, from 5 minutes before (a verifier's clock a little behind).
    let v = super::certs::validity(&cert.cert).expect("validity");
    assert_eq!(
        (v.not_before, v.not_after),
        (1_780_000_000 - 300, 1_780_000_000 + 90 * 86_400)
    );
    assert_eq!(super::certs::validity(&cert.ca).expect("ca"), v);
    // The leaf verifies against the CA, for the Service name and for the extra IP.
    use rustls::client::WebPkiServerVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut store = rustls::RootCertStore::empty();
    store
        .add(CertificateDer::from_pem_slice(cert.ca.as_bytes()).expect("ca pem"))
        .expect("root");
    let verifier = WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(store),
        std::sync::Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .expect("verifier");
    let leaf = CertificateDer::from_pem_slice(cert.cert.as_bytes()).expect("leaf pem");
    let now = UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_780_000_100));
    for name in ["headroom-webhook.headroom.svc", "127.0.0.1"] {
        let server = ServerName::try_from(name).expect("name");
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            verifier.as_ref(),
            &leaf,
            &[],
            &server,
            &[],
            now,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let other = ServerName::try_from("evil.example").expect("name");
    assert!(
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            verifier.as_ref(),
            &leaf,
            &[],
            &other,
            &[],
            now
        )
        .is_err()
    );
    // After its validity, it does not verify.
    let after =
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_780_000_001 + 90 * 86_400));
    let server = ServerName::try_from("127.0.0.1").expect("name");
    assert!(
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            verifier.as_ref(),
            &leaf,
            &[],
            &server,
            &[],
            after
        )
        .is_err()
    );
    // A broken certificate or key, or another certificate's key, is an error, not a panic.
    let live = super::live::LiveCert::new(&cert).expect("live");
    let mut broken = cert.clone();
    broken.key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".into();
    assert!(live.swap(&broken).is_err());
    broken.key = super::certs::generate(&names, issued, ninety_days)
        .expect("other")
        .key;
    assert!(live.swap(&broken).is_err(), "a key of another certificate");
    broken.cert = String::new();
    assert!(super::live::LiveCert::new(&broken).is_err());
}
