//! `reclaimSpace`: whether and when a volume is trimmed (fstrim).
//!
//! The keys live in the same schema and the same live hierarchy as the resize keys, with two
//! additions:
//! - csi-addons' `reclaimspace.csiaddons.openshift.io/schedule` annotation is honoured for
//!   migration on the objects its design reads it from, in its precedence (PVC, Namespace,
//!   StorageClass, then the CSIDriver of the class's provisioner), each one directly below
//!   headroom's own annotations on the same object, so the order is: PVC
//!   `headroom.dev/reclaim-space-*`, PVC csi-addons, Namespace `headroom.dev/reclaim-space-*`,
//!   Namespace csi-addons, StorageClass `headroom.dev/reclaim-space-*`, StorageClass csi-addons,
//!   CSIDriver csi-addons, ConfigMap per-StorageClass, ConfigMap defaults: the resize keys'
//!   order ([`super::merge`]), with csi-addons beside headroom on each object. A Namespace's schedule applies only to claims of the
//!   drivers its `reclaimspace.csiaddons.openshift.io/drivers` lists, when it lists any. A
//!   csi-addons schedule also turns trimming on (that is what it meant to csi-addons); it sets
//!   no time zone.
//! - The ConfigMap data key `reclaimSpace.yaml` holds node-wide settings: `enabled: false` turns
//!   all trimming off at once, whatever any volume says; `timeout` bounds one trim.
//!
//! Trimming is independent of resizing: the resize `enabled` and `limit` keys are not consulted,
//! so a volume may be trimmed without being grown (and the other way round). A problem in a
//! resize key does not stop trimming; a problem in a `reclaimSpace` key refuses trimming for that
//! volume (and, like every bad key, refuses its resize policy too when validated as a whole).

use std::collections::BTreeMap;

use croner::Cron;
use jiff::tz::TimeZone;

use super::Finding;
use super::annotations::from_annotations;
use super::defaults::{RECLAIM_ENABLED, RECLAIM_SCHEDULE, RECLAIM_TIMEZONE};
use super::merge::{CentralPolicy, Source, merge_layers};
pub use super::reclaim_global::{DEFAULT_TIMEOUT, GLOBAL_KEY, ReclaimGlobal, parse_global};
use super::spec::{PolicySpec, Raw};
use super::value::boolean;
use super::window::{parse_cron, parse_timezone};

/// csi-addons' per-object schedule annotation.
pub const CSI_ADDONS_SCHEDULE: &str = "reclaimspace.csiaddons.openshift.io/schedule";
/// On a Namespace: the CSI drivers (comma-separated) its schedule is for; absent: all.
pub const CSI_ADDONS_DRIVERS: &str = "reclaimspace.csiaddons.openshift.io/drivers";

pub use super::merge::{Annotated, ClaimObjects};

/// The objects whose annotations say whether and when one claim is trimmed, beside the
/// ConfigMap.
#[derive(Debug, Clone, Copy)]
pub struct Objects<'a> {
    /// What the resize keys are read from too (its `spec_limit` is not read here).
    pub claim: ClaimObjects<'a>,
    /// The claim's CSI driver (its StorageClass's provisioner), and that CSIDriver object's
    /// annotations when it exists.
    pub driver: Option<(&'a str, Option<&'a BTreeMap<String, String>>)>,
}
const KEYS: [&str; 3] = [
    "reclaimSpace.enabled",
    "reclaimSpace.schedule",
    "reclaimSpace.timezone",
];

/// A volume's resolved trim schedule.
#[derive(Debug, Clone)]
pub struct ReclaimSchedule {
    pub schedule: String,
    pub timezone: String,
    pub cron: Cron,
    pub tz: TimeZone,
    /// The layer the schedule came from.
    pub source: Source,
}

/// What the hierarchy says about trimming one volume.
#[derive(Debug, Clone)]
pub enum Resolved {
    /// Not trimmed; says why (for logs).
    Off(String),
    Scheduled(Box<ReclaimSchedule>),
    /// The volume asks to be trimmed but a key is bad: refused, with findings naming the field.
    Invalid(Vec<Finding>),
}

fn finding(spec: &PolicySpec, path: &str, message: String) -> Finding {
    let message = match spec.get(path).and_then(|r| r.origin.as_deref()) {
        Some(origin) => format!("{message} (set by {origin})"),
        None => message,
    };
    Finding {
        field: path.to_string(),
        message,
    }
}

/// Checks the `reclaimSpace` keys of one (merged) spec. The parsed values are returned only
/// when there is no finding.
pub fn check_keys(spec: &PolicySpec) -> (Option<(bool, Cron, TimeZone)>, Vec<Finding>) {
    let text = |path: &str, default: &str| {
        spec.get(path)
            .map_or(default.to_string(), |r| r.text.trim().to_string())
    };
    let mut errors = Vec::new();
    let enabled = match spec.get(KEYS[0]) {
        None => Some(RECLAIM_ENABLED),
        Some(r) => boolean(&r.text)
            .map_err(|m| errors.push(finding(spec, KEYS[0], m)))
            .ok(),
    };
    let cron = parse_cron(&text(KEYS[1], RECLAIM_SCHEDULE))
        .map_err(|e| {
            let m =
                format!("{e}; write 5 cron fields like \"0 3 * * 0\" or @daily, @weekly, @monthly");
            errors.push(finding(spec, KEYS[1], m))
        })
        .ok();
    let tz = parse_timezone(&text(KEYS[2], RECLAIM_TIMEZONE))
        .map_err(|e| errors.push(finding(spec, KEYS[2], e.to_string())))
        .ok();
    match (enabled, cron, tz) {
        (Some(e), Some(c), Some(t)) if errors.is_empty() => (Some((e, c, t)), errors),
        _ => (None, errors),
    }
}

/// The csi-addons layer of one object: its schedule, which also means "trim this".
fn csi_addons_layer(annotations: &BTreeMap<String, String>, object: &str) -> PolicySpec {
    let mut spec = PolicySpec::default();
    if let Some(schedule) = annotations.get(CSI_ADDONS_SCHEDULE) {
        let origin = Some(format!("{object} annotation {CSI_ADDONS_SCHEDULE}"));
        spec.reclaim_space.schedule = Some(Raw {
            text: schedule.clone(),
            origin: origin.clone(),
        });
        spec.reclaim_space.enabled = Some(Raw {
            text: "true".into(),
            origin,
        });
    }
    spec
}

/// The Namespace's csi-addons layer, when its schedule is for the claim's driver: csi-addons
/// reads `drivers` as the drivers the Namespace's schedule applies to (all when absent).
fn namespace_layer(o: &Objects<'_>) -> PolicySpec {
    let Some((name, annotations)) = o.claim.namespace else {
        return PolicySpec::default();
    };
    let for_driver = match annotations.get(CSI_ADDONS_DRIVERS) {
        None => true,
        Some(list) => o
            .driver
            .is_some_and(|(driver, _)| list.split(',').map(str::trim).any(|d| d == driver)),
    };
    if !for_driver {
        return PolicySpec::default();
    }
    csi_addons_layer(annotations, &format!("Namespace {name}"))
}

fn is_reclaim_problem(f: &Finding) -> bool {
    f.field.starts_with("reclaimSpace") || f.field.contains("reclaim-space")
}

/// Whether and when to trim one PVC, resolved live from its annotations, its StorageClass's and
/// the ConfigMap (so a changed StorageClass annotation applies at the next scan). Arguments as
/// for [`super::merge::effective`].
pub fn resolve(
    pvc: &str,
    pvc_annotations: &BTreeMap<String, String>,
    storage_class: Option<(&str, &BTreeMap<String, String>)>,
    central: &CentralPolicy,
) -> Resolved {
    resolve_objects(
        &Objects {
            claim: ClaimObjects {
                pvc,
                pvc_annotations,
                pvc_namespace: "",
                pvc_labels: &BTreeMap::new(),
                namespace: None,
                storage_class,
                spec_limit: None,
            },
            driver: None,
        },
        central,
    )
}

/// [`resolve`], with the claim's Namespace and CSIDriver.
pub fn resolve_objects(o: &Objects<'_>, central: &CentralPolicy) -> Resolved {
    let c = &o.claim;
    let (pvc, pvc_annotations, storage_class) = (c.pvc, c.pvc_annotations, c.storage_class);
    let pvc_object = format!("PVC {pvc}");
    let pvc_spec = from_annotations(pvc_annotations, &pvc_object);
    let pvc_csi = csi_addons_layer(pvc_annotations, &pvc_object);
    let ns_spec = c
        .namespace
        .map(|(name, a)| from_annotations(a, &format!("Namespace {name}")))
        .unwrap_or_default();
    let ns_csi = namespace_layer(o);
    let driver_csi = match o.driver {
        Some((name, Some(a))) => csi_addons_layer(a, &format!("CSIDriver {name}")),
        _ => PolicySpec::default(),
    };
    let (sc_spec, sc_csi) = match storage_class {
        Some((name, a)) => {
            let object = format!("StorageClass {name}");
            (from_annotations(a, &object), csi_addons_layer(a, &object))
        }
        None => Default::default(),
    };
    let empty = PolicySpec::default();
    let cm_class = storage_class
        .and_then(|(name, _)| central.storage_classes.get(name))
        .unwrap_or(&empty);
    let (selected, broken) = central.selector_layer(c.pvc_namespace, c.pvc_labels);
    let merged = merge_layers(&[
        (Source::PvcAnnotation, &pvc_spec),
        (Source::CsiAddonsPvcAnnotation, &pvc_csi),
        (Source::ConfigMapSelector, selected.unwrap_or(&empty)),
        (Source::NamespaceAnnotation, &ns_spec),
        (Source::CsiAddonsNamespaceAnnotation, &ns_csi),
        (Source::StorageClassAnnotation, &sc_spec),
        (Source::CsiAddonsStorageClassAnnotation, &sc_csi),
        (Source::CsiAddonsCsiDriverAnnotation, &driver_csi),
        (Source::ConfigMapStorageClass, cm_class),
        (Source::ConfigMapDefault, &central.defaults),
    ]);
    let spec = &merged.spec;
    // The switch wins over every volume; a broken reclaimSpace.yaml fails closed (below).
    if !central.reclaim.enabled && central.reclaim.errors.is_empty() {
        return Resolved::Off(format!(
            "trimming is turned off for every volume by the ConfigMap's {GLOBAL_KEY}"
        ));
    }
    let wants = spec.get(KEYS[0]).is_some_and(|r| r.text.trim() != "false");
    if !wants {
        return Resolved::Off("reclaimSpace.enabled is not true".into());
    }
    let mut errors: Vec<Finding> = central.reclaim.errors.clone();
    // A ConfigMap that cannot be read may hide the switch or the defaults, a selector section
    // that cannot be read this claim's schedule: refuse, do not guess.
    errors.extend(central.errors.iter().cloned());
    errors.extend(broken);
    errors.extend(
        spec.problems
            .iter()
            .filter(|f| is_reclaim_problem(f))
            .cloned(),
    );
    let (keys, key_errors) = check_keys(spec);
    errors.extend(key_errors);
    match keys {
        Some((true, cron, tz)) if errors.is_empty() => {
            Resolved::Scheduled(Box::new(ReclaimSchedule {
                schedule: spec
                    .get(KEYS[1])
                    .map_or(RECLAIM_SCHEDULE.to_string(), |r| r.text.trim().to_string()),
                timezone: spec
                    .get(KEYS[2])
                    .map_or(RECLAIM_TIMEZONE.to_string(), |r| r.text.trim().to_string()),
                cron,
                tz,
                source: merged.provenance[KEYS[1]],
            }))
        }
        Some((false, ..)) if errors.is_empty() => {
            Resolved::Off("reclaimSpace.enabled is false".into())
        }
        _ => Resolved::Invalid(errors),
    }
}
