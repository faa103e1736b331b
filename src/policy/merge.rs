//! The live hierarchy, merged key by key, highest first, the more specific target above the
//! wider one: the PVC's `headroom.dev/*` annotations, its `resize.topolvm.io/*` ones
//! ([`super::topolvm`]), the first matching selector section of the central ConfigMap
//! ([`super::selector`]), its Namespace's `headroom.dev/*`, the StorageClass's `headroom.dev/*`,
//! its `resize.topolvm.io/*`, then the central ConfigMap's per-StorageClass section and its
//! defaults. pvc-autoresizer's own defaults rank with the object that enables it. Each key
//! records which layer it came from. The trim schedule ([`super::reclaim`]) reads the same order.

use std::collections::BTreeMap;

use super::Finding;
use super::annotations::from_annotations;
use super::fields::FIELDS;
use super::reclaim_global::{ReclaimGlobal, global_from_configmap};
use super::selector::{self, Matched, SELECTORS_KEY, Section, SelectorError, first_match};
use super::spec::{Node, PolicySpec, parse_yaml};
use super::topolvm;

/// ConfigMap data key holding the defaults (a policy YAML).
pub const POLICY_KEY: &str = "policy.yaml";
/// ConfigMap data key holding a map of StorageClass name -> policy YAML.
pub const STORAGE_CLASSES_KEY: &str = "storageClasses.yaml";

/// Where a key's effective value came from, highest precedence first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    PvcAnnotation,
    /// csi-addons' `reclaimspace.csiaddons.openshift.io/schedule` on the PVC (reclaimSpace only).
    CsiAddonsPvcAnnotation,
    /// The first section of the central ConfigMap's `selectors.yaml` that matches the claim.
    ConfigMapSelector,
    /// The claim's Namespace's `headroom.dev/*` annotations.
    NamespaceAnnotation,
    /// The same csi-addons annotation on the claim's Namespace (reclaimSpace only).
    CsiAddonsNamespaceAnnotation,
    StorageClassAnnotation,
    /// The same csi-addons annotation on the StorageClass (reclaimSpace only).
    CsiAddonsStorageClassAnnotation,
    /// The same csi-addons annotation on the CSIDriver object of the class's provisioner
    /// (reclaimSpace only).
    CsiAddonsCsiDriverAnnotation,
    ConfigMapStorageClass,
    ConfigMapDefault,
    /// Translated from the PVC's `resize.topolvm.io/*` annotations (or its
    /// `spec.resources.limits.storage`, pvc-autoresizer's older limit).
    TopolvmPvcAnnotation,
    /// Translated from the StorageClass's `resize.topolvm.io/*` annotations.
    TopolvmStorageClassAnnotation,
    /// pvc-autoresizer's default for a key no annotation sets, on a claim it enables.
    TopolvmDefault,
    /// No layer sets the key: the built-in default applies (or, for `limit`, nothing does).
    Default,
}

impl Source {
    /// Written on the claim itself, by its owner: its `headroom.dev/*` annotations, or its
    /// `resize.topolvm.io/*` ones. pvc-autoresizer's defaults are not: nobody wrote them for
    /// this claim.
    pub fn on_claim(self) -> bool {
        matches!(self, Source::PvcAnnotation | Source::TopolvmPvcAnnotation)
    }
}

/// The effective spec and, for every policy key, the layer it came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    pub spec: PolicySpec,
    /// YAML path -> layer. Every key of [`FIELDS`] is present.
    pub provenance: BTreeMap<String, Source>,
    /// Where `resize.topolvm.io/enabled: "true"` enables the claim for pvc-autoresizer, when
    /// pvc-autoresizer would resize it.
    pub topolvm_enabled_by: Option<String>,
}

impl Merged {
    /// Where `minAvailable` came from (what validation's `Context::min_available_source` takes).
    pub fn min_available_source(&self) -> Option<Source> {
        self.provenance.get("minAvailable").copied()
    }

    /// Whether the claim asks to be managed: `enabled` is not false, or pvc-autoresizer's
    /// annotations enable it. In the second case a headroom `enabled: false` over them is a
    /// problem to report, never a silent no.
    pub fn wants_enabled(&self) -> bool {
        self.topolvm_enabled_by.is_some()
            || self
                .spec
                .get("enabled")
                .is_some_and(|r| r.text.trim() != "false")
    }

    /// Whether the layers declare `nodeExpansion: offline`, read before validation (which needs
    /// the claim's resize state for its size): a value validation refuses counts as `online`
    /// here, and refuses the policy there.
    pub fn node_offline(&self) -> bool {
        self.spec.get("nodeExpansion").is_some_and(|r| {
            super::value::node_expansion(&r.text) == Ok(super::NodeExpansion::Offline)
        })
    }
}

/// The central ConfigMap's policy sections.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CentralPolicy {
    pub defaults: PolicySpec,
    pub storage_classes: BTreeMap<String, PolicySpec>,
    /// Problems that make the whole ConfigMap unusable (YAML syntax, wrong shape). They are
    /// added to every merged policy, so every volume is refused rather than run on guesses.
    pub errors: Vec<Finding>,
    /// `reclaimSpace.yaml`: the node-wide trim switch and timeout.
    pub reclaim: ReclaimGlobal,
    /// `selectors.yaml`, in order.
    pub selectors: Vec<Section>,
}

impl CentralPolicy {
    /// Every problem in the ConfigMap, for logging when it is loaded.
    pub fn all_problems(&self) -> impl Iterator<Item = Finding> + '_ {
        self.errors
            .iter()
            .chain(self.reclaim.errors.iter())
            .chain(self.defaults.problems.iter())
            .chain(
                self.storage_classes
                    .values()
                    .flat_map(|s| s.problems.iter()),
            )
            .cloned()
            .chain(self.selectors.iter().flat_map(|s| {
                let errors = s.errors.iter().map(SelectorError::finding);
                errors.chain(s.policy.problems.iter().cloned())
            }))
    }

    /// The selector layer of a claim in `namespace` with `labels`: the first matching section's
    /// policy, and the errors of a broken section it reaches (which refuse it).
    pub fn selector_layer(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> (Option<&PolicySpec>, Vec<Finding>) {
        match first_match(&self.selectors, namespace, labels) {
            Matched::None => (None, Vec::new()),
            Matched::Section(s) => (Some(&s.policy), Vec::new()),
            Matched::Broken(s) => (None, s.errors.iter().map(SelectorError::finding).collect()),
        }
    }
}

/// Reads the ConfigMap's `data`. `name` (e.g. `headroom/headroom-policy`) appears in messages.
/// Other data keys are left to the parts of headroom that own them.
pub fn parse_configmap(data: &BTreeMap<String, String>, name: &str) -> CentralPolicy {
    let mut central = CentralPolicy {
        reclaim: global_from_configmap(data, name),
        ..CentralPolicy::default()
    };
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
    if let Some(text) = data.get(SELECTORS_KEY) {
        // A list that cannot be read at all may have been meant for any claim: refuse them all.
        match selector::parse(text, name) {
            Ok(sections) => central.selectors = sections,
            Err(e) => central.errors.push(e.finding()),
        }
    }
    central
}

/// An object's name and annotations.
pub type Annotated<'a> = (&'a str, &'a BTreeMap<String, String>);

/// The objects one claim's policy is read from, beside the central ConfigMap.
#[derive(Debug, Clone, Copy)]
pub struct ClaimObjects<'a> {
    /// `namespace/name`, for messages.
    pub pvc: &'a str,
    pub pvc_annotations: &'a BTreeMap<String, String>,
    /// The claim's namespace and labels, for the selector sections.
    pub pvc_namespace: &'a str,
    pub pvc_labels: &'a BTreeMap<String, String>,
    /// The claim's Namespace's annotations, when the Namespace is known.
    pub namespace: Option<Annotated<'a>>,
    /// The class name (looked up in the ConfigMap) and its object's annotations.
    pub storage_class: Option<Annotated<'a>>,
    /// The claim's `spec.resources.limits.storage` as written (pvc-autoresizer's older limit).
    pub spec_limit: Option<&'a str>,
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
/// topolvm annotations count, but not the claim's `spec.resources.limits.storage`: see
/// [`effective_with_limits`].
pub fn effective(
    pvc: &str,
    pvc_annotations: &BTreeMap<String, String>,
    storage_class: Option<(&str, &BTreeMap<String, String>)>,
    central: &CentralPolicy,
) -> Merged {
    effective_with_limits(pvc, pvc_annotations, storage_class, None, central)
}

/// [`effective`], with the claim's `spec.resources.limits.storage` (as written), which
/// pvc-autoresizer takes as the limit when its `storage_limit` annotation is absent.
pub fn effective_with_limits(
    pvc: &str,
    pvc_annotations: &BTreeMap<String, String>,
    storage_class: Option<(&str, &BTreeMap<String, String>)>,
    spec_limit: Option<&str>,
    central: &CentralPolicy,
) -> Merged {
    effective_for(
        &ClaimObjects {
            pvc,
            pvc_annotations,
            pvc_namespace: "",
            pvc_labels: &NO_LABELS,
            namespace: None,
            storage_class,
            spec_limit,
        },
        central,
    )
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// The effective policy of one claim from every object that speaks for it.
pub fn effective_for(o: &ClaimObjects<'_>, central: &CentralPolicy) -> Merged {
    let (pvc, pvc_annotations, storage_class) = (o.pvc, o.pvc_annotations, o.storage_class);
    let pvc_spec = from_annotations(pvc_annotations, &format!("PVC {pvc}"));
    let ns_spec = o
        .namespace
        .map(|(name, annotations)| from_annotations(annotations, &format!("Namespace {name}")))
        .unwrap_or_default();
    let sc_spec = storage_class
        .map(|(name, annotations)| from_annotations(annotations, &format!("StorageClass {name}")))
        .unwrap_or_default();
    let empty = PolicySpec::default();
    let cm_class = storage_class
        .and_then(|(name, _)| central.storage_classes.get(name))
        .unwrap_or(&empty);
    let (selected, broken) = central.selector_layer(o.pvc_namespace, o.pvc_labels);
    let tv = topolvm::layers(pvc, pvc_annotations, storage_class, o.spec_limit);
    let (pvc_defaults, sc_defaults) = match tv.enabled_by {
        Some((topolvm::Object::Pvc, _)) => (&tv.defaults, &empty),
        _ => (&empty, &tv.defaults),
    };
    let mut merged = merge_layers(&[
        (Source::PvcAnnotation, &pvc_spec),
        (Source::TopolvmPvcAnnotation, &tv.pvc),
        (Source::TopolvmDefault, pvc_defaults),
        (Source::ConfigMapSelector, selected.unwrap_or(&empty)),
        (Source::NamespaceAnnotation, &ns_spec),
        (Source::StorageClassAnnotation, &sc_spec),
        (Source::TopolvmStorageClassAnnotation, &tv.storage_class),
        (Source::TopolvmDefault, sc_defaults),
        (Source::ConfigMapStorageClass, cm_class),
        (Source::ConfigMapDefault, &central.defaults),
    ]);
    merged.spec.problems.extend(central.errors.iter().cloned());
    merged.spec.problems.extend(broken);
    if let Some((_, enabler)) = tv.enabled_by {
        let off = merged
            .spec
            .get("enabled")
            .filter(|r| r.text.trim() == "false");
        if let Some(off) = off {
            let by = off
                .origin
                .clone()
                .unwrap_or_else(|| "a headroom setting".into());
            merged.spec.problems.push(Finding {
                field: "enabled".into(),
                message: format!(
                    "{enabler} enables pvc-autoresizer for PVC {pvc}, but {by} turns headroom off for it, so nothing resizes it; remove one of the two"
                ),
            });
        }
        merged.topolvm_enabled_by = Some(enabler);
    }
    merged
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
