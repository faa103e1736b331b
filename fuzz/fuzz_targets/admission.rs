//! The webhook's AdmissionReview handling, the pure part of `Reviewer::review`
//! (`src/webhook/handle.rs`) in its order: the body read (`review::parse`, or `uid_of` for an
//! unreadable one), the claim's group (`roles::group_key`, else its StatefulSet's), its data
//! source sized (`source::source_of`, `restore_size`, `clone_size`) when it opted in, the size
//! verdict over the namespace's claims, its StorageClass and the ConfigMap (`size::verdict`),
//! and the answer (`handle::answer`). The API reads are the sections below.
//!
//! Input: NUL-separated sections: the AdmissionReview body, the namespace's claims (a JSON
//! list), its StatefulSets (a JSON list), the StorageClass (JSON), the ConfigMap's `data` (a
//! JSON object), the data source as read (a VolumeSnapshot's JSON, or the source claim's;
//! none: it does not exist) and the claim's Namespace (JSON); a missing or unreadable section is
//! empty.
//!
//! Beyond "no panic": only a claim's CREATE is sized; every answer is an AdmissionReview that
//! allows the request and carries the request's uid; a raise goes up, only for a claim that opted in with a valid policy, never
//! over its limit, and its patch decodes to the size it names.
#![no_main]

use base64::Engine;
use headroom::policy::merge::{CentralPolicy, parse_configmap};
use headroom::policy::validate::{Context, validate};
use headroom::webhook::handle::answer;
use headroom::webhook::lookup::statefulset_group;
use headroom::webhook::review::{self, Reviewed};
use headroom::webhook::size::{Layers, SourceSize, Verdict, opted_in, pvc_label, verdict};
use headroom::webhook::source::{Source, clone_size, restore_size, source_of};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The answer must allow the request and name its uid.
fn check_answer(answer: &[u8], uid: &str) -> Value {
    let v: Value =
        serde_json::from_slice(answer).unwrap_or_else(|e| panic!("answer is not JSON: {e}"));
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(v["response"]["allowed"], true);
    assert_eq!(v["response"]["uid"], uid);
    v
}

/// What `source::size` would read for `pvc`, from the section standing for the API server.
fn source_size(pvc: &PersistentVolumeClaim, read: Option<&Value>) -> SourceSize {
    let ns = pvc.metadata.namespace.as_deref().unwrap_or("");
    match source_of(pvc) {
        None => SourceSize::None,
        Some(Source::OtherNamespace { kind, reference }) => {
            SourceSize::Unknown(format!("{kind} {reference} of another namespace"))
        }
        Some(Source::BadName { kind, name }) => {
            SourceSize::Unknown(format!("{kind} {name:?} is not an object name"))
        }
        Some(Source::Snapshot(name)) => match read {
            Some(snapshot) => restore_size(snapshot, format!("VolumeSnapshot {ns}/{name}")),
            None => SourceSize::Unknown(format!("VolumeSnapshot {ns}/{name} does not exist")),
        },
        Some(Source::Claim(name)) => {
            let found: Option<PersistentVolumeClaim> =
                read.and_then(|v| serde_json::from_value(v.clone()).ok());
            clone_size(found.as_ref(), format!("PVC {ns}/{name}"))
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut sections = data.splitn(7, |b| *b == 0);
    let body = sections.next().unwrap_or_default();
    let mut json = || -> Option<Value> { serde_json::from_slice(sections.next()?).ok() };
    let members: Vec<PersistentVolumeClaim> = json()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let sets: Vec<StatefulSet> = json()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let class: Option<StorageClass> = json().and_then(|v| serde_json::from_value(v).ok());
    let data: Option<std::collections::BTreeMap<String, String>> =
        json().and_then(|v| serde_json::from_value(v).ok());
    let read = json();
    let namespace: Option<Namespace> = json().and_then(|v| serde_json::from_value(v).ok());
    let central = match data {
        Some(d) if !d.is_empty() => parse_configmap(&d, "headroom/headroom"),
        _ => CentralPolicy::default(),
    };
    let c = match review::parse(body) {
        Ok(Reviewed::Create(c)) => {
            // Only a claim's CREATE is sized: a raise on UPDATE would rewrite the request of
            // every claim edited (the API server refuses a shrink, and a raise is a resize).
            // Read as the webhook reads it: a field it ignores may hold bytes that are not
            // UTF-8 (serde skips them unchecked), which a `Value` of the whole body refuses.
            let text = String::from_utf8_lossy(body);
            let request: Option<Value> = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("request").cloned());
            let field = |name: &str| {
                request
                    .as_ref()
                    .and_then(|r| r.get(name))
                    .cloned()
                    .unwrap_or_default()
            };
            assert_eq!(field("operation"), "CREATE", "sized a request that is not a CREATE");
            assert_eq!(field("kind")["kind"], "PersistentVolumeClaim", "sized another kind");
            c
        }
        Ok(Reviewed::Other { uid }) => {
            check_answer(&review::allow(&uid, None, None), &uid);
            return;
        }
        Err(e) => {
            let uid = review::uid_of(body).unwrap_or_default();
            check_answer(&review::allow(&uid, None, Some(&e.to_string())), &uid);
            return;
        }
    };
    let pvc = &c.pvc;
    let group =
        headroom::k8s::roles::group_key(pvc, None).or_else(|| statefulset_group(pvc, &sets));
    let layers = Layers {
        class: class.as_ref(),
        namespace: namespace.as_ref(),
        central: &central,
    };
    let source = if opted_in(pvc, layers) {
        source_size(pvc, read.as_ref())
    } else {
        SourceSize::None
    };
    let v = verdict(
        pvc,
        group.as_deref(),
        &members,
        &source,
        layers,
    );
    if let Verdict::Raise { from, to, .. } = &v {
        assert!(to > from, "a raise that does not raise: {v:?}");
        let merged = headroom::resolve::claim_policy(
            pvc,
            pvc.spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref()),
            class.as_ref(),
            namespace.as_ref(),
            &central,
        );
        let ctx = Context {
            current_size: Some(*from),
            ..Default::default()
        };
        let Some(policy) = validate(&merged.spec, &ctx).policy else {
            panic!("raised under an invalid policy: {v:?}");
        };
        assert!(policy.enabled, "raised a claim that did not opt in");
        assert!(
            *to <= policy.limit,
            "raised over the limit {}: {v:?}",
            policy.limit
        );
    }
    let raised = match &v {
        Verdict::Raise { to, .. } => Some(*to),
        Verdict::Keep(_) => None,
    };
    let (_, bytes) = answer(&c.uid, &pvc_label(pvc), v);
    let answered = check_answer(&bytes, &c.uid);
    if let Some(to) = raised {
        let encoded = answered["response"]["patch"].as_str().unwrap_or_default();
        let patch: Value = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_else(|| panic!("patch does not decode: {encoded}"));
        let written = patch[0]["value"].as_str().unwrap_or_default();
        assert_eq!(
            headroom::quantity::parse(written).ok(),
            Some(to),
            "patch {patch}"
        );
    }
});
