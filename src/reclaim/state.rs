//! The last trim of a claim, kept on the claim in `headroom.dev/reclaim`, so a restarted agent
//! or the node the workload moves to does not trim again before the next due time.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ReclaimError;
use crate::k8s::pvc_name;

pub const ANNOTATION: &str = "headroom.dev/reclaim";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Succeeded,
    Failed,
    /// The node agent cannot trim this claim (block mode); `error` says why. Never a trim.
    NotPossible,
}

/// `{"at":…,"bytes":…,"durationMs":…,"result":"Succeeded","node":…}`; `error` only on failure
/// (and, with `"result":"NotPossible"`, the reason no trim can happen).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimRecord {
    pub at: Timestamp,
    pub bytes: u64,
    pub duration_ms: u64,
    pub result: Outcome,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The claim's last trim; `None` when it has none (or the annotation was cleared with
/// `kubectl annotate pvc x headroom.dev/reclaim=`). Corrupt JSON is an error naming the claim
/// and the annotation: the agent then does not trim (it cannot tell when it last did).
pub fn read(pvc: &PersistentVolumeClaim) -> Result<Option<ReclaimRecord>, ReclaimError> {
    let Some(text) = pvc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .filter(|s| !s.trim().is_empty())
    else {
        return Ok(None);
    };
    serde_json::from_str(text)
        .map(Some)
        .map_err(|source| ReclaimError::Annotation {
            object: pvc_name(pvc),
            annotation: ANNOTATION,
            source,
        })
}

/// A JSON merge patch that sets only `headroom.dev/reclaim`. It carries no resourceVersion: the
/// annotation has one writer (the agent of the node the volume is mounted on) and touches no key
/// a resize patch writes, so a precondition would only turn the agent's own status and resize
/// patches, made while a trim runs, into conflicts and lost trim records. The resize patches keep
/// their precondition; this patch changing the resourceVersion at most costs them one re-read.
pub fn patch(record: &ReclaimRecord) -> Result<Value, serde_json::Error> {
    Ok(json!({
        "metadata": { "annotations": { ANNOTATION: serde_json::to_string(record)? } }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pvc(value: Option<&str>) -> PersistentVolumeClaim {
        let mut p = PersistentVolumeClaim::default();
        p.metadata.namespace = Some("db".into());
        p.metadata.name = Some("data-pg-0".into());
        p.metadata.annotations =
            value.map(|v| BTreeMap::from([(ANNOTATION.to_string(), v.to_string())]));
        p
    }

    #[test]
    fn round_trip_through_the_patch() {
        let r = ReclaimRecord {
            at: "2026-01-04T03:00:05Z".parse().expect("ts"),
            bytes: 67_108_864,
            duration_ms: 412,
            result: Outcome::Succeeded,
            node: "node-a".into(),
            error: None,
        };
        let body = patch(&r).expect("patch");
        let text = body["metadata"]["annotations"][ANNOTATION]
            .as_str()
            .expect("string value");
        assert_eq!(
            text,
            r#"{"at":"2026-01-04T03:00:05Z","bytes":67108864,"durationMs":412,"result":"Succeeded","node":"node-a"}"#
        );
        assert_eq!(body["metadata"].as_object().map(|m| m.len()), Some(1));
        assert_eq!(read(&pvc(Some(text))).expect("read"), Some(r));
        assert_eq!(read(&pvc(None)).expect("none"), None);
        assert_eq!(read(&pvc(Some(" "))).expect("cleared"), None);
    }

    #[test]
    fn corrupt_annotation_names_the_claim_and_the_key() {
        let e = read(&pvc(Some("{\"at\": 3"))).expect_err("corrupt");
        let m = e.to_string();
        assert!(m.contains("PVC db/data-pg-0"), "{m}");
        assert!(m.contains("headroom.dev/reclaim"), "{m}");
    }
}
