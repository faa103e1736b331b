//! The live hierarchy: PVC annotations over StorageClass annotations over the central
//! ConfigMap's per-StorageClass section over its defaults, merged key by key (a PVC may override
//! only `emergencyGrow.criticalThreshold`). Each key records which layer it came from.

use std::collections::BTreeMap;

use super::annotations::from_annotations;
use super::fields::FIELDS;
use super::spec::{Node, PolicySpec, parse_yaml};
use super::validate::Finding;

/// ConfigMap data key holding the defaults (a policy YAML).
pub const POLICY_KEY: &str = "policy.yaml";
/// ConfigMap data key holding a map of StorageClass name -> policy YAML.
pub const STORAGE_CLASSES_KEY: &str = "storageClasses.yaml";

/// Where a key's effective value came from, highest precedence first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    PvcAnnotation,
    StorageClassAnnotation,
    ConfigMapStorageClass,
    ConfigMapDefault,
    /// No layer sets the key: the built-in default applies (or, for `limit`, nothing does).
    Default,
}

/// The effective spec and, for every policy key, the layer it came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    pub spec: PolicySpec,
    /// YAML path -> layer. Every key of [`FIELDS`] is present.
    pub provenance: BTreeMap<String, Source>,
}

/// The central ConfigMap's policy sections.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CentralPolicy {
    pub defaults: PolicySpec,
    pub storage_classes: BTreeMap<String, PolicySpec>,
    /// Problems that make the whole ConfigMap unusable (YAML syntax, wrong shape). They are
    /// added to every merged policy, so every volume is refused rather than run on guesses.
    pub errors: Vec<Finding>,
}

impl CentralPolicy {
    /// Every problem in the ConfigMap, for logging when it is loaded.
    pub fn all_problems(&self) -> impl Iterator<Item = &Finding> {
        self.errors
            .iter()
            .chain(self.defaults.problems.iter())
            .chain(
                self.storage_classes
                    .values()
                    .flat_map(|s| s.problems.iter()),
            )
    }
}

/// Reads the ConfigMap's `data`. `name` (e.g. `headroom/headroom-policy`) appears in messages.
/// Other data keys are left to the parts of headroom that own them.
pub fn parse_configmap(data: &BTreeMap<String, String>, name: &str) -> CentralPolicy {
    let mut central = CentralPolicy::default();
    if let Some(text) = data.get(POLICY_KEY) {
        let origin = format!("ConfigMap {name} key {POLICY_KEY}");
        match parse_yaml(text) {
            Ok(node) => central.defaults = PolicySpec::from_node(node, Some(&origin)),
            Err(e) => central.errors.push(Finding {
                field: POLICY_KEY.to_string(),
                message: format!("{e} (in ConfigMap {name})"),
            }),
        }
    }
    if let Some(text) = data.get(STORAGE_CLASSES_KEY) {
        let bad = |message: String| Finding {
            field: STORAGE_CLASSES_KEY.to_string(),
            message: format!("{message} (in ConfigMap {name})"),
        };
        match parse_yaml(text) {
            Ok(Node::Null) => {}
            Ok(Node::Map(classes)) => {
                for (class, node) in classes {
                    let origin = format!("ConfigMap {name} key {STORAGE_CLASSES_KEY}, StorageClass {class}");
                    central.storage_classes.insert(class, PolicySpec::from_node(node, Some(&origin)));
                }
            }
            Ok(_) => central.errors.push(bad(
                "expected a mapping of StorageClass name to policy, e.g. `fast-ssd: { limit: 500Gi }`".to_string(),
            )),
            Err(e) => central.errors.push(bad(e.to_string())),
        }
    }
    central
}

/// Merges layers given highest precedence first.
pub fn merge_layers(layers: &[(Source, &PolicySpec)]) -> Merged {
    let mut merged = Merged::default();
    for f in FIELDS {
        let found = layers
            .iter()
            .find_map(|(source, spec)| spec.get(f.path).map(|raw| (*source, raw.clone())));
        let source = match found {
            Some((source, raw)) => {
                if let Some(slot) = merged.spec.slot_mut(f.path) {
                    *slot = Some(raw);
                }
                source
            }
            None => Source::Default,
        };
        merged.provenance.insert(f.path.to_string(), source);
    }
    for (_, spec) in layers {
        merged.spec.problems.extend(spec.problems.iter().cloned());
    }
    merged
}

/// The effective policy spec of one PVC. `pvc` and `storage_class` name the objects in messages
/// (e.g. `PVC db/data-pg-0`); `storage_class` is the class name, looked up in the ConfigMap.
pub fn effective(
    pvc: &str,
    pvc_annotations: &BTreeMap<String, String>,
    storage_class: Option<(&str, &BTreeMap<String, String>)>,
    central: &CentralPolicy,
) -> Merged {
    let pvc_spec = from_annotations(pvc_annotations, &format!("PVC {pvc}"));
    let sc_spec = storage_class
        .map(|(name, annotations)| from_annotations(annotations, &format!("StorageClass {name}")))
        .unwrap_or_default();
    let empty = PolicySpec::default();
    let cm_class = storage_class
        .and_then(|(name, _)| central.storage_classes.get(name))
        .unwrap_or(&empty);
    let mut merged = merge_layers(&[
        (Source::PvcAnnotation, &pvc_spec),
        (Source::StorageClassAnnotation, &sc_spec),
        (Source::ConfigMapStorageClass, cm_class),
        (Source::ConfigMapDefault, &central.defaults),
    ]);
    merged.spec.problems.extend(central.errors.iter().cloned());
    merged
}
