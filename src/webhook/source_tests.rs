//! Claims restored from a VolumeSnapshot or cloned from a claim (issue 40, item 3): what their
//! source requires, how it combines with the group's size and the limit, and hostile sources.
//! The API server's side is tests/kube_webhook.rs.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};

use super::handle::answer;
use super::metrics::Outcome;
use super::serve_tests::{review, reviewer};
use super::size::{Because, Caveat, Keep, Layers, SourceSize, Verdict, verdict};
use super::source::{Source, clone_size, restore_size, source_of, unread};
use crate::policy::merge::CentralPolicy;
use crate::quantity::MI;

fn restored(spec_extra: Value, annotations: Value, labels: Value) -> PersistentVolumeClaim {
    let mut spec = json!({
        "storageClassName": "fast",
        "resources": {"requests": {"storage": "64Mi"}},
    });
    for (k, v) in spec_extra.as_object().expect("object") {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({
        "metadata": {"name": "pg-2", "namespace": "db", "annotations": annotations, "labels": labels},
        "spec": spec,
    }))
    .expect("claim")
}

fn from_snapshot(name: &str) -> Value {
    json!({"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": name}})
}

fn opted_in(limit: &str) -> Value {
    json!({"headroom.dev/enabled": "true", "headroom.dev/limit": limit})
}

fn known(mi: u64) -> SourceSize {
    SourceSize::Known {
        bytes: mi * MI,
        what: "VolumeSnapshot db/snap".into(),
    }
}

fn member(name: &str, size: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "db", "annotations": opted_in("200Mi"),
                     "labels": {"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"}},
        "spec": {"resources": {"requests": {"storage": size}}},
    }))
    .expect("member")
}

fn cnpg() -> Value {
    json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"})
}

fn decide(pvc: &PersistentVolumeClaim, source: &SourceSize) -> Verdict {
    let group = crate::k8s::roles::group_key(pvc, None);
    let members = [member("pg-1", "80Mi")];
    verdict(
        pvc,
        group.as_deref(),
        &members,
        source,
        Layers {
            class: None,
            namespace: None,
            central: &CentralPolicy::default(),
        },
    )
}

#[test]
fn a_restored_claim_is_raised_to_its_sources_size_within_its_limit() {
    let pvc = restored(from_snapshot("snap"), opted_in("200Mi"), json!({}));
    assert_eq!(
        decide(&pvc, &known(96)),
        Verdict::Raise {
            from: 64 * MI,
            to: 96 * MI,
            because: Because::Source("VolumeSnapshot db/snap".into()),
            caveat: None,
        }
    );
    // Never above its limit; the user is told the provisioner will refuse it.
    let capped = restored(from_snapshot("snap"), opted_in("72Mi"), json!({}));
    let Verdict::Raise {
        to,
        caveat: Some(Caveat::AboveLimit(m)),
        ..
    } = decide(&capped, &known(96))
    else {
        panic!("raised to the limit, with a caveat");
    };
    assert_eq!(to, 72 * MI);
    assert!(
        m.contains("db/pg-2") && m.contains("96Mi") && m.contains("72Mi"),
        "{m}"
    );
    // Already at the limit: kept, saying why.
    let at_limit = restored(from_snapshot("snap"), opted_in("64Mi"), json!({}));
    assert!(matches!(
        decide(&at_limit, &known(96)),
        Verdict::Keep(Keep::Caveat(Caveat::AboveLimit(_)))
    ));
    // Asking for more than the source needs: kept.
    assert_eq!(decide(&pvc, &known(32)), Verdict::Keep(Keep::AtSize));
    // Not opted in: kept as asked, whatever the source.
    let off = restored(from_snapshot("snap"), json!({}), json!({}));
    assert_eq!(decide(&off, &known(96)), Verdict::Keep(Keep::NotOptedIn));
    let central = CentralPolicy::default();
    let layers = Layers {
        class: None,
        namespace: None,
        central: &central,
    };
    assert!(!super::size::opted_in(&off, layers));
    assert!(super::size::opted_in(&pvc, layers));
}

#[test]
fn the_group_and_the_source_each_raise_and_the_larger_wins() {
    let pvc = restored(from_snapshot("snap"), opted_in("200Mi"), cnpg());
    let raised = |v: Verdict| match v {
        Verdict::Raise { to, because, .. } => (to / MI, because),
        other => panic!("{other:?}"),
    };
    // The source needs more than the group (80Mi).
    assert_eq!(
        raised(decide(&pvc, &known(96))),
        (96, Because::Source("VolumeSnapshot db/snap".into()))
    );
    // The group needs more than the source.
    assert_eq!(
        raised(decide(&pvc, &known(72))),
        (80, Because::Group("db/cnpg/pg/PG_DATA".into()))
    );
    // A source that could not be sized: the group's size still applies, with a caveat.
    let unknown = SourceSize::Unknown("VolumeSnapshot db/snap does not exist".into());
    let Verdict::Raise {
        to,
        caveat: Some(Caveat::SourceUnknown(_)),
        ..
    } = decide(&pvc, &unknown)
    else {
        panic!("raised to the group's size");
    };
    assert_eq!(to, 80 * MI);
    // Outside a group: kept as asked, saying why.
    let loner = restored(from_snapshot("snap"), opted_in("200Mi"), json!({}));
    assert_eq!(
        decide(&loner, &unknown),
        Verdict::Keep(Keep::Caveat(Caveat::SourceUnknown(
            "VolumeSnapshot db/snap does not exist".into()
        )))
    );
}

#[test]
fn the_source_is_read_from_data_source_ref_first_and_only_in_its_namespace() {
    let with = |extra: Value| source_of(&restored(extra, json!({}), json!({})));
    assert_eq!(
        with(from_snapshot("snap")),
        Some(Source::Snapshot("snap".into()))
    );
    let clone = json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "pg-1"}});
    assert_eq!(with(clone), Some(Source::Claim("pg-1".into())));
    // dataSourceRef wins over dataSource (they agree unless a namespace is given).
    let both = json!({
        "dataSource": {"kind": "PersistentVolumeClaim", "name": "pg-1"},
        "dataSourceRef": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap", "namespace": "db"},
    });
    assert_eq!(with(both), Some(Source::Snapshot("snap".into())));
    let other = json!({"dataSourceRef": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap", "namespace": "prod"}});
    assert_eq!(
        with(other),
        Some(Source::OtherNamespace {
            kind: "VolumeSnapshot".into(),
            reference: "prod/snap".into()
        })
    );
    // A populator, a look-alike group, no source: nothing to size.
    for extra in [
        json!({"dataSourceRef": {"apiGroup": "hello.example.com", "kind": "Hello", "name": "h"}}),
        json!({"dataSource": {"apiGroup": "snapshot.storage.k8s.io.evil", "kind": "VolumeSnapshot", "name": "s"}}),
        json!({"dataSource": {"apiGroup": "", "kind": "VolumeSnapshot", "name": "s"}}),
        json!({}),
    ] {
        assert_eq!(with(extra.clone()), None, "{extra}");
    }
    // A name that would be a path in the URL is never read.
    for name in [
        "../../api/v1/namespaces/headroom/secrets/x",
        "",
        "Snap",
        "a/b",
        "-a",
        "a.",
        &"a".repeat(254),
    ] {
        assert!(
            matches!(with(from_snapshot(name)), Some(Source::BadName { .. })),
            "{name}"
        );
    }
}

#[test]
fn hostile_restore_sizes_are_unknown_never_a_size() {
    let what = || "VolumeSnapshot db/snap".to_string();
    let status = |v: Value| json!({"status": {"restoreSize": v}});
    assert_eq!(
        restore_size(&status(json!("96Mi")), what()),
        SourceSize::Known {
            bytes: 96 * MI,
            what: what()
        }
    );
    // The CRD's int-or-string: a byte count.
    assert_eq!(
        restore_size(&status(json!(1_048_576)), what()),
        SourceSize::Known {
            bytes: MI,
            what: what()
        }
    );
    let long = "9".repeat(100_000);
    for v in [
        json!("lots"),
        json!("-1Gi"),
        json!("1e999"),
        json!("99999999999999999999Ei"),
        json!(""),
        json!("1.5"),
        json!(long),
        json!(-5),
        json!(1.5),
        json!(true),
        json!({"a": 1}),
        Value::Null,
    ] {
        let SourceSize::Unknown(m) = restore_size(&status(v.clone()), what()) else {
            panic!("{v}: unknown");
        };
        assert!(
            m.starts_with("VolumeSnapshot db/snap: status.restoreSize"),
            "{m}"
        );
        assert!(
            m.len() < 300,
            "the value is not echoed whole: {} bytes",
            m.len()
        );
    }
    assert!(matches!(
        restore_size(&json!({"spec": {}}), what()),
        SourceSize::Unknown(m) if m.contains("not set")
    ));
}

#[test]
fn a_clone_needs_its_sources_capacity() {
    let what = || "PVC db/pg-1".to_string();
    let mut source = member("pg-1", "64Mi");
    assert!(
        matches!(clone_size(None, what()), SourceSize::Unknown(m) if m.contains("does not exist"))
    );
    assert!(
        matches!(clone_size(Some(&source), what()), SourceSize::Unknown(m) if m.contains("status.capacity"))
    );
    source.status =
        serde_json::from_value(json!({"capacity": {"storage": "96Mi"}})).expect("status");
    assert_eq!(
        clone_size(Some(&source), what()),
        SourceSize::Known {
            bytes: 96 * MI,
            what: what()
        }
    );
    source.status = serde_json::from_value(json!({"capacity": {"storage": "-1"}})).expect("status");
    assert!(
        matches!(clone_size(Some(&source), what()), SourceSize::Unknown(m) if m.contains("status.capacity.storage"))
    );
}

fn api_error(code: u16, name: &str) -> kube::Error {
    let status: kube::core::Status = serde_json::from_value(json!({
        "status": "Failure", "message": "m", "reason": if code == 404 { "NotFound" } else { "Forbidden" },
        "code": code, "details": {"name": name},
    }))
    .expect("status");
    kube::Error::Api(Box::new(status))
}

#[test]
fn a_source_that_cannot_be_read_says_what_fixes_it() {
    let r = "snapshot.storage.k8s.io/v1 volumesnapshots";
    let w = "VolumeSnapshot db/snap";
    assert_eq!(
        unread(w, r, &api_error(404, "snap")),
        "VolumeSnapshot db/snap does not exist"
    );
    assert!(unread(w, r, &api_error(404, "")).contains("CRDs are not installed"));
    assert!(unread(w, r, &api_error(403, "snap")).contains("RBAC"));
    assert!(unread(w, r, &api_error(500, "snap")).contains("reading it failed"));
}

#[test]
fn an_unsized_source_is_counted_and_the_claim_still_admitted() {
    let unknown = Caveat::SourceUnknown("VolumeSnapshot db/snap does not exist".into());
    let kept = answer(
        "u-1",
        "db/pg-2",
        Verdict::Keep(Keep::Caveat(unknown.clone())),
    );
    let raised = answer(
        "u-1",
        "db/pg-2",
        Verdict::Raise {
            from: 64 * MI,
            to: 80 * MI,
            because: Because::Group("db/cnpg/pg/PG_DATA".into()),
            caveat: Some(unknown),
        },
    );
    for (outcome, body) in [&kept, &raised] {
        assert_eq!(*outcome, Outcome::SourceUnknown);
        let v: Value = serde_json::from_slice(body).expect("json");
        assert_eq!(v["response"]["allowed"], true);
        let warning = v["response"]["warnings"][0].as_str().expect("warning");
        assert!(
            warning.contains("VolumeSnapshot db/snap does not exist"),
            "{warning}"
        );
    }
    let v: Value = serde_json::from_slice(&kept.1).expect("json");
    assert!(v["response"].get("patch").is_none());
    let v: Value = serde_json::from_slice(&raised.1).expect("json");
    assert!(v["response"]["patch"].is_string());
    // Above the limit is the user's policy, not a failure to size.
    let above = Caveat::AboveLimit("m".into());
    assert_eq!(
        answer("u", "c", Verdict::Keep(Keep::Caveat(above))).0,
        Outcome::AsRequested
    );
}

/// A review of a claim whose dataSourceRef names another namespace, against an API server that
/// accepts connections and never answers: any read would time the review out, so an answer
/// in time with `source_unknown` shows nothing was read.
#[tokio::test]
async fn a_source_in_another_namespace_is_never_read() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let api = format!("http://{}", silent.local_addr().expect("addr"));
    let (reviewer, _registry) = reviewer(&api, Duration::from_secs(1));
    let review = |extra: Value| {
        // No label and no ordinal in its name: no group, so no read of members either.
        let mut pvc = restored(extra, opted_in("200Mi"), json!({}));
        pvc.metadata.name = Some("restored".into());
        review(serde_json::to_value(pvc).expect("json"))
    };
    let other = json!({"dataSourceRef": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap", "namespace": "prod"}});
    let (outcome, body) = reviewer
        .review(&review(other), Duration::from_secs(1))
        .await;
    assert_eq!(outcome, Outcome::SourceUnknown);
    let v: Value = serde_json::from_slice(&body).expect("json");
    let warning = v["response"]["warnings"][0].as_str().expect("warning");
    assert!(
        warning.contains("prod/snap of another namespace"),
        "{warning}"
    );
    // The same snapshot in the claim's own namespace is read: the silent server times it out.
    let (outcome, _) = reviewer
        .review(&review(from_snapshot("snap")), Duration::from_millis(300))
        .await;
    assert_eq!(outcome, Outcome::TimedOut);
}
