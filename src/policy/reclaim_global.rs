//! `reclaimSpace.yaml`: the node-wide trim switch and timeout from the central ConfigMap. Apart
//! from [`super::reclaim`] because the ConfigMap's parsed form ([`super::merge::CentralPolicy`])
//! holds it, and the per-volume resolution in turn reads that ConfigMap.

use std::collections::BTreeMap;
use std::str::FromStr;

use jiff::SignedDuration;

use super::Finding;
use super::spec::{Node, parse_yaml};
use super::value::boolean;

/// ConfigMap data key of the node-wide reclaim settings (the global switch).
pub const GLOBAL_KEY: &str = "reclaimSpace.yaml";
/// Bound on one trim unless `reclaimSpace.yaml` says otherwise: the csi-addons ReclaimSpace
/// design's 10 minutes (a ReclaimSpaceJob's default `retryDeadlineSeconds: 600`).
pub const DEFAULT_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);

/// The node-wide settings from `reclaimSpace.yaml`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReclaimGlobal {
    /// `false` turns every trim off. Absent means volumes decide for themselves.
    pub enabled: bool,
    pub timeout: SignedDuration,
    /// A broken `reclaimSpace.yaml` turns trimming off (fail closed) and is reported.
    pub errors: Vec<Finding>,
}

impl Default for ReclaimGlobal {
    fn default() -> Self {
        ReclaimGlobal {
            enabled: true,
            timeout: DEFAULT_TIMEOUT,
            errors: Vec::new(),
        }
    }
}

/// Reads `reclaimSpace.yaml` (`enabled`, `timeout`); `configmap` names the ConfigMap in messages.
pub fn parse_global(text: &str, configmap: &str) -> ReclaimGlobal {
    let mut g = ReclaimGlobal::default();
    let mut bad = |field: &str, message: String| {
        g.errors.push(Finding {
            field: format!("{GLOBAL_KEY} {field}"),
            message: format!("{message} (in ConfigMap {configmap} key {GLOBAL_KEY})"),
        })
    };
    let entries = match parse_yaml(text) {
        Ok(Node::Null) => Vec::new(),
        Ok(Node::Map(entries)) => entries,
        Ok(other) => {
            bad(
                "(document)",
                format!(
                    "expected a mapping like `enabled: false`, found {}",
                    other.kind()
                ),
            );
            Vec::new()
        }
        Err(e) => {
            bad("(document)", e.to_string());
            Vec::new()
        }
    };
    let (mut enabled, mut timeout) = (None, None);
    for (key, node) in entries {
        let Node::Scalar(text) = node else {
            bad(
                &key,
                format!("expected a single value, found {}", node.kind()),
            );
            continue;
        };
        match key.as_str() {
            "enabled" => match boolean(&text) {
                Ok(b) => enabled = Some(b),
                Err(m) => bad(&key, m),
            },
            "timeout" => match SignedDuration::from_str(text.trim()) {
                Ok(d) if d > SignedDuration::ZERO => timeout = Some(d),
                _ => bad(
                    &key,
                    format!("'{text}' is not a positive duration; write e.g. 10m or 2h"),
                ),
            },
            _ => bad(&key, "unknown key; the keys are enabled and timeout".into()),
        }
    }
    g.enabled = enabled.unwrap_or(true);
    g.timeout = timeout.unwrap_or(DEFAULT_TIMEOUT);
    g
}

/// Reads the global settings out of the ConfigMap data (used by [`super::merge::parse_configmap`]).
pub(crate) fn global_from_configmap(
    data: &BTreeMap<String, String>,
    configmap: &str,
) -> ReclaimGlobal {
    data.get(GLOBAL_KEY)
        .map(|text| parse_global(text, configmap))
        .unwrap_or_default()
}
