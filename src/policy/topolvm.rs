//! topolvm/pvc-autoresizer annotations as policy, so a cluster can switch to headroom without
//! re-annotating its claims. An object's `resize.topolvm.io/*` annotations are that object's own
//! settings: they rank just below the same object's `headroom.dev/*` keys and above the ConfigMap
//! (see [`super::merge::effective_with_limits`]), so the shipped ConfigMap's defaults cannot
//! silently change what a claim annotated for pvc-autoresizer does.
//!
//! The translation follows pvc-autoresizer's own reading of its annotations: the StorageClass
//! enables (exactly `"true"`), the claim gives thresholds and the increase, and a claim without a
//! non-zero limit is not resized at all. Percentages are of capacity; headroom's keys are "percent
//! used", so `threshold: 10%` (grow when less than 10 % is free) becomes `usageThreshold: 90`.

use std::collections::BTreeMap;

use super::Finding;
use super::spec::{PolicySpec, Raw};
use super::value::size;
use crate::quantity;

pub const PREFIX: &str = "resize.topolvm.io/";
pub const ENABLED: &str = "resize.topolvm.io/enabled";
pub const THRESHOLD: &str = "resize.topolvm.io/threshold";
pub const INODES_THRESHOLD: &str = "resize.topolvm.io/inodes-threshold";
pub const INCREASE: &str = "resize.topolvm.io/increase";
/// The design notes' name for the increase.
pub const AMOUNT: &str = "resize.topolvm.io/amount";
pub const STORAGE_LIMIT: &str = "resize.topolvm.io/storage_limit";
/// The label key whose value groups claims of one namespace (see `k8s::roles::group_key`).
pub const INITIAL_RESIZE_GROUP_BY: &str = "resize.topolvm.io/initial-resize-group-by";
/// Where pvc-autoresizer falls back to when `storage_limit` is absent (older releases).
pub const SPEC_LIMIT: &str = "spec.resources.limits.storage";

/// pvc-autoresizer's documented defaults (its `constants.go`: `DefaultThreshold`,
/// `DefaultInodesThreshold`, `DefaultIncrease`), applied only to claims topolvm enables.
pub const DEFAULT_THRESHOLD: &str = "10%";
pub const DEFAULT_INODES_THRESHOLD: &str = "10%";
pub const DEFAULT_INCREASE: &str = "10%";

/// Which object a translated value was written on; it ranks with that object's own keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    Pvc,
    StorageClass,
}

/// A value, the object it was written on and a description of where, for origins and messages.
struct Found<'a> {
    text: &'a str,
    object: Object,
    origin: String,
}

/// The claim and (optionally) its StorageClass annotations; the claim's value wins.
struct Objects<'a> {
    pvc: &'a str,
    pvc_annotations: &'a BTreeMap<String, String>,
    storage_class: Option<(&'a str, &'a BTreeMap<String, String>)>,
}

impl<'a> Objects<'a> {
    /// An empty value counts as absent, as pvc-autoresizer reads it.
    fn lookup(&self, key: &str) -> Option<Found<'a>> {
        let given = |t: &&String| !t.trim().is_empty();
        let on_pvc = self.pvc_annotations.get(key).filter(given).map(|t| Found {
            text: t.as_str(),
            object: Object::Pvc,
            origin: format!("PVC {} annotation {key}", self.pvc),
        });
        on_pvc.or_else(|| {
            let (name, annotations) = self.storage_class?;
            annotations.get(key).filter(given).map(|t| Found {
                text: t.as_str(),
                object: Object::StorageClass,
                origin: format!("StorageClass {name} annotation {key}"),
            })
        })
    }
}

/// What topolvm's annotations say about one claim, split by the object each value was written
/// on, so that each ranks with that object's `headroom.dev/*` keys (see
/// [`super::merge::effective_with_limits`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layers {
    /// Values written on the claim (and its `spec.resources.limits.storage`).
    pub pvc: PolicySpec,
    /// Values written on the StorageClass.
    pub storage_class: PolicySpec,
    /// pvc-autoresizer's defaults for what no annotation says; they rank with the object that
    /// enables the claim, since enabling pvc-autoresizer is asking for them.
    pub defaults: PolicySpec,
    /// The object whose `resize.topolvm.io/enabled: "true"` enables the claim and where that is
    /// written, when pvc-autoresizer would resize the claim.
    pub enabled_by: Option<(Object, String)>,
}

impl Layers {
    fn of(&mut self, object: Option<Object>) -> &mut PolicySpec {
        match object {
            Some(Object::Pvc) => &mut self.pvc,
            Some(Object::StorageClass) => &mut self.storage_class,
            None => &mut self.defaults,
        }
    }

    /// Sets `path` in the layer of `object` (`None`: the defaults).
    fn set(&mut self, object: Option<Object>, path: &str, text: &str, origin: &str) {
        if let Some(slot) = self.of(object).slot_mut(path) {
            set(slot, text, origin);
        }
    }

    fn problem(&mut self, field: &str, message: String) {
        problem(&mut self.pvc, field, message);
    }
}

/// The policy topolvm's annotations express for one claim. `pvc` and the class name appear in
/// messages; `spec_limit` is the claim's `spec.resources.limits.storage`, if any. Empty when
/// topolvm does not enable the claim; invalid values become problems naming the annotation.
pub fn layers(
    pvc: &str,
    pvc_annotations: &BTreeMap<String, String>,
    storage_class: Option<(&str, &BTreeMap<String, String>)>,
    spec_limit: Option<&str>,
) -> Layers {
    let objects = Objects {
        pvc,
        pvc_annotations,
        storage_class,
    };
    let mut out = Layers::default();
    let Some(enabled) = objects.lookup(ENABLED) else {
        return out;
    };
    match enabled.text.trim() {
        "true" => {}
        "false" => {
            out.set(Some(enabled.object), "enabled", "false", &enabled.origin);
            return out;
        }
        other => {
            out.problem(
                ENABLED,
                format!(
                    "'{other}' does not enable pvc-autoresizer (it accepts exactly \"true\"); write \"true\" or \"false\" (on {})",
                    enabled.origin
                ),
            );
            return out;
        }
    }

    // pvc-autoresizer leaves a claim alone without a non-zero limit; so does this translation.
    // An unreadable limit is a claim asking to be resized with a typo: it is enabled, so that the
    // problem is reported (pvc-autoresizer counts it as a failed resize).
    let found_limit = limit(&objects, spec_limit, &mut out);
    if matches!(found_limit, Limit::None) {
        return out;
    }
    let on = Some(enabled.object);
    out.enabled_by = Some((enabled.object, enabled.origin.clone()));
    out.set(on, "enabled", "true", &enabled.origin);
    // pvc-autoresizer only ever grows on thresholds: a ConfigMap's `mode: convergent` is not
    // what this claim asked for.
    let mode_origin = format!(
        "pvc-autoresizer grows on thresholds ({} enables the claim)",
        enabled.origin
    );
    out.set(on, "mode", "threshold", &mode_origin);
    // Nor does it grow ahead of a fill: headroom's default predictive trigger is not what this
    // claim asked for either.
    let predictive_origin = format!(
        "pvc-autoresizer grows only at its threshold ({} enables the claim)",
        enabled.origin
    );
    out.set(on, "trigger.predictive", "false", &predictive_origin);
    let Limit::Found(limit_text, limit_object, limit_origin) = found_limit else {
        return out;
    };
    out.set(Some(limit_object), "limit", &limit_text, &limit_origin);

    let values = Values {
        objects: &objects,
        enabled_by: &enabled.origin,
    };
    values.threshold(&mut out);
    values.inodes_threshold(&mut out);
    values.increase(&limit_text, &mut out);
    out
}

/// The value annotations of a claim pvc-autoresizer enables, each set in the layer of the object
/// it was written on, or pvc-autoresizer's default in the layer of the object that enables it.
struct Values<'a> {
    objects: &'a Objects<'a>,
    /// Where `resize.topolvm.io/enabled` enables the claim.
    enabled_by: &'a str,
}

impl Values<'_> {
    /// The text of `key` (or its default), its layer (`None`: pvc-autoresizer's default) and its
    /// origin.
    fn pick(&self, key: &str, default: &str) -> (String, Option<Object>, String) {
        match self.objects.lookup(key) {
            Some(found) => (
                found.text.to_string(),
                Some(found.object),
                format!("{}: {}", found.origin, found.text),
            ),
            None => (
                default.to_string(),
                None,
                format!(
                    "pvc-autoresizer default {key}: {default} ({} enables the claim)",
                    self.enabled_by
                ),
            ),
        }
    }

    /// pvc-autoresizer's threshold is a free-space floor, in bytes or in percent of the
    /// filesystem's size, and it grows only strictly below it: headroom's minAvailable, read the
    /// same way. It has no percent-used trigger, so `usageThreshold: 0` keeps a ConfigMap's from
    /// adding one.
    fn threshold(&self, out: &mut Layers) {
        let (text, object, origin) = self.pick(THRESHOLD, DEFAULT_THRESHOLD);
        match threshold(&text) {
            Ok(floor) => {
                let floor = match floor {
                    Threshold::Percent(free) => format!("{free}%"),
                    Threshold::Bytes(bytes) => quantity::format(bytes),
                };
                out.set(object, "minAvailable", &floor, &origin);
                out.set(object, "usageThreshold", "0", &origin);
            }
            Err(m) => out.problem(THRESHOLD, format!("{m} (in {origin})")),
        }
    }

    fn inodes_threshold(&self, out: &mut Layers) {
        let (text, object, origin) = self.pick(INODES_THRESHOLD, DEFAULT_INODES_THRESHOLD);
        match inodes_threshold(&text) {
            Ok(used) => out.set(object, "inodeThreshold", &used.to_string(), &origin),
            Err(m) => out.problem(INODES_THRESHOLD, format!("{m} (in {origin})")),
        }
    }

    /// `amount` is what pvc-autoresizer's design notes call the increase (their own example:
    /// `threshold: 20%`, `amount: 20Gi`); its code reads `increase`, which wins when both are set.
    fn increase(&self, limit_text: &str, out: &mut Layers) {
        let key = [INCREASE, AMOUNT]
            .into_iter()
            .find(|k| self.objects.lookup(k).is_some())
            .unwrap_or(INCREASE);
        let (text, object, origin) = self.pick(key, DEFAULT_INCREASE);
        match increase(&text) {
            Ok(step) => {
                if step.ends_with('%') {
                    // pvc-autoresizer does not clamp a percent increase (it stops at the limit):
                    // a ConfigMap's minStep/maxStep would change the size it grows to.
                    out.set(object, "minStep", "0", &origin);
                    out.set(object, "maxStep", limit_text, &origin);
                }
                out.set(object, "step", &step, &origin);
            }
            Err(m) => out.problem(key, format!("{m} (in {origin})")),
        }
    }
}

enum Limit {
    /// The limit as written, the object it was written on, and its origin.
    Found(String, Object, String),
    /// No non-zero limit anywhere.
    None,
    /// A limit that is not a quantity (a problem is recorded).
    Invalid,
}

/// The limit: the annotation first, then the claim's spec. A zero limit is ignored, as
/// pvc-autoresizer documents.
fn limit(objects: &Objects<'_>, spec_limit: Option<&str>, out: &mut Layers) -> Limit {
    let candidates = [
        objects
            .lookup(STORAGE_LIMIT)
            .map(|f| (f.text.to_string(), f.object, f.origin, STORAGE_LIMIT)),
        spec_limit.map(|t| {
            (
                t.to_string(),
                Object::Pvc,
                format!("PVC {} {SPEC_LIMIT}", objects.pvc),
                SPEC_LIMIT,
            )
        }),
    ];
    for (text, object, origin, field) in candidates.into_iter().flatten() {
        if text.trim().is_empty() {
            continue;
        }
        match size(&text) {
            Ok(0) => continue,
            Ok(_) => return Limit::Found(text.trim().to_string(), object, origin),
            Err(m) => {
                out.problem(field, format!("{m} (in {origin})"));
                return Limit::Invalid;
            }
        }
    }
    Limit::None
}

#[derive(Debug, PartialEq)]
enum Threshold {
    /// Free space below this percent of the filesystem's size: `minAvailable: N%`.
    Percent(f64),
    /// Free bytes: `minAvailable`.
    Bytes(u64),
}

/// A pvc-autoresizer percent (`10%`, `12.5%`), 0 to 100 as it accepts.
fn percent(text: &str) -> Option<Result<f64, String>> {
    let number = text.trim().strip_suffix('%')?;
    Some(match number.trim().parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "'{}' is not a percent from 0% to 100%; write e.g. 10%",
            text.trim()
        )),
    })
}

/// Free percent -> percent used, rounded so headroom grows no later than pvc-autoresizer did.
fn used_percent(free: f64) -> u8 {
    // `free` is within 0..=100, so the result fits.
    (100.0 - free).floor().clamp(0.0, 100.0) as u8
}

fn threshold(text: &str) -> Result<Threshold, String> {
    if let Some(p) = percent(text) {
        let free = p?;
        if free <= 0.0 {
            return Err(format!(
                "'{}' would never grow on free space, which headroom cannot turn off; write a percent of free space such as 10%",
                text.trim()
            ));
        }
        // pvc-autoresizer accepts 100 %: free space is always below the whole volume, so it
        // grows at every check until the limit. headroom refuses it (README, migration section).
        if free >= 100.0 {
            return Err(format!(
                "'{}' would grow on every check until the limit (free space is always below the whole volume); pvc-autoresizer accepts it, headroom refuses it: write a percent of free space below 100%, such as 10%",
                text.trim()
            ));
        }
        return Ok(Threshold::Percent(free));
    }
    match size(text)? {
        0 => Err(format!(
            "'{}' would never grow the claim; write a free-space size such as 5Gi, or a percent such as 10%",
            text.trim()
        )),
        bytes => Ok(Threshold::Bytes(bytes)),
    }
}

fn inodes_threshold(text: &str) -> Result<u8, String> {
    let Some(p) = percent(text) else {
        return Err(format!(
            "'{}' is not a percent; pvc-autoresizer reads this annotation as a percent of free inodes, e.g. 10%",
            text.trim()
        ));
    };
    // headroom always watches inodes; 0 % (never on inodes) maps to the latest it allows.
    Ok(match used_percent(p?) {
        100 => 99,
        0 => {
            return Err(format!(
                "'{}' would grow on every check; write a percent of free inodes below 100%, such as 10%",
                text.trim()
            ));
        }
        used => used,
    })
}

fn increase(text: &str) -> Result<String, String> {
    if let Some(p) = percent(text) {
        let p = p?;
        if p <= 0.0 {
            return Err(format!(
                "'{}' would never grow the claim; write e.g. 10% or 10Gi",
                text.trim()
            ));
        }
        // Rounded up: headroom steps are whole percents.
        return Ok(format!("{}%", p.ceil() as u32));
    }
    match size(text)? {
        0 => Err(format!(
            "'{}' would never grow the claim; write e.g. 10% or 10Gi",
            text.trim()
        )),
        bytes => Ok(quantity::format(bytes)),
    }
}

fn set(slot: &mut Option<Raw>, text: &str, origin: &str) {
    *slot = Some(Raw {
        text: text.to_string(),
        origin: Some(origin.to_string()),
    });
}

fn problem(spec: &mut PolicySpec, field: &str, message: String) {
    spec.problems.push(Finding {
        field: field.to_string(),
        message,
    });
}

#[cfg(test)]
#[path = "topolvm_tests.rs"]
mod tests;
