//! The webhook's AdmissionReview handling, the pure part of `Reviewer::review`
//! (`src/webhook/handle.rs`) in its order: the body read (`review::parse`, or `uid_of` for an
//! unreadable one), the claim's group (`roles::group_key`, else its StatefulSet's), the size
//! verdict over the namespace's claims, its StorageClass and the ConfigMap (`size::verdict`),
//! and the answer (`review::allow`, with `raise_patch`). The API reads are the records below.
//!
//! Input: NUL-separated sections: the AdmissionReview body, the namespace's claims (a JSON
//! list), its StatefulSets (a JSON list), the StorageClass (JSON) and the ConfigMap's `data`
//! (a JSON object); a missing or unreadable section is empty.
//!
//! Beyond "no panic": every answer is an AdmissionReview that allows the request and carries
//! the request's uid; a raise goes up, never over the claim's limit, and its patch decodes to
//! the size it names.
#![no_main]

use base64::Engine;
use headroom::policy::merge::{CentralPolicy, parse_configmap};
use headroom::webhook::lookup::statefulset_group;
use headroom::webhook::review::{self, Reviewed};
use headroom::webhook::size::{Verdict, verdict};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
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

fuzz_target!(|data: &[u8]| {
    let mut sections = data.splitn(5, |b| *b == 0);
    let body = sections.next().unwrap_or_default();
    let mut json = |what: &str| -> Option<Value> {
        let s = sections.next()?;
        serde_json::from_slice(s).map_err(|_| what).ok()
    };
    let members: Vec<PersistentVolumeClaim> = json("claims")
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let sets: Vec<StatefulSet> = json("sets")
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let class: Option<StorageClass> = json("class").and_then(|v| serde_json::from_value(v).ok());
    let data: Option<std::collections::BTreeMap<String, String>> =
        json("configmap").and_then(|v| serde_json::from_value(v).ok());
    let central = match data {
        Some(d) if !d.is_empty() => parse_configmap(&d, "headroom/headroom"),
        _ => CentralPolicy::default(),
    };
    let c = match review::parse(body) {
        Ok(Reviewed::Create(c)) => c,
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
    let v = verdict(pvc, group.as_deref(), &members, class.as_ref(), &central);
    let answer = match &v {
        Verdict::Raise { from, to, group } => {
            assert!(to > from, "a raise that does not raise: {v:?}");
            let merged = headroom::resolve::claim_policy(
                pvc,
                pvc.spec
                    .as_ref()
                    .and_then(|s| s.storage_class_name.as_deref()),
                class.as_ref(),
                &central,
            );
            let ctx = headroom::policy::validate::Context {
                current_size: Some(*from),
                ..Default::default()
            };
            let policy = headroom::policy::validate::validate(&merged.spec, &ctx).policy;
            let Some(policy) = policy else {
                panic!("raised under an invalid policy: {v:?}");
            };
            assert!(policy.enabled, "raised a claim that did not opt in");
            assert!(
                *to <= policy.limit,
                "raised over the limit: {v:?}, limit {}",
                policy.limit
            );
            let patch = review::raise_patch(*to);
            let note = format!("raised to the size of its group {group}");
            review::allow(&c.uid, Some(&patch), Some(&note))
        }
        Verdict::Keep(keep) => review::allow(&c.uid, None, keep.warning()),
    };
    let v_answer = check_answer(&answer, &c.uid);
    if let Verdict::Raise { to, .. } = v {
        let encoded = v_answer["response"]["patch"].as_str().unwrap_or_default();
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
