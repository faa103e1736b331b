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
    let Limit::Found(limit_text, limit_object, limit_origin) = found_limit else {
        return out;
    };
    out.set(Some(limit_object), "limit", &limit_text, &limit_origin);

    let default_origin = |key: &str, default: &str| {
        format!(
            "pvc-autoresizer default {key}: {default} ({} enables the claim)",
            enabled.origin
        )
    };
    // (text, layer: None for pvc-autoresizer's default, origin)
    let pick = |key: &str, default: &'static str| match objects.lookup(key) {
        Some(found) => (
            found.text.to_string(),
            Some(found.object),
            format!("{}: {}", found.origin, found.text),
        ),
        None => (default.to_string(), None, default_origin(key, default)),
    };

    let (text, object, origin) = pick(THRESHOLD, DEFAULT_THRESHOLD);
    match threshold(&text) {
        Ok(Threshold::Percent(used)) => {
            out.set(object, "usageThreshold", &used.to_string(), &origin);
            // One trigger, as pvc-autoresizer has: a ConfigMap's minAvailable would add another.
            out.set(object, "minAvailable", "0", &origin);
        }
        Ok(Threshold::Bytes(bytes)) => {
            out.set(object, "minAvailable", &quantity::format(bytes), &origin);
            // With a size, pvc-autoresizer has no percent trigger; 99 is as close as headroom's
            // range allows, so the default 80 % does not grow the claim earlier than it used to.
            out.set(object, "usageThreshold", "99", &origin);
        }
        Err(m) => out.problem(THRESHOLD, format!("{m} (in {origin})")),
    }

    let (text, object, origin) = pick(INODES_THRESHOLD, DEFAULT_INODES_THRESHOLD);
    match inodes_threshold(&text) {
        Ok(used) => out.set(object, "inodeThreshold", &used.to_string(), &origin),
        Err(m) => out.problem(INODES_THRESHOLD, format!("{m} (in {origin})")),
    }

    let (text, object, origin) = pick(INCREASE, DEFAULT_INCREASE);
    match increase(&text) {
        Ok(step) => {
            if step.ends_with('%') {
                // pvc-autoresizer does not clamp a percent increase (it stops at the limit):
                // a ConfigMap's minStep/maxStep would change the size it grows to.
                out.set(object, "minStep", "0", &origin);
                out.set(object, "maxStep", &limit_text, &origin);
            }
            out.set(object, "step", &step, &origin);
        }
        Err(m) => out.problem(INCREASE, format!("{m} (in {origin})")),
    }
    out
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
    /// headroom's `usageThreshold`.
    Percent(u8),
    /// headroom's `minAvailable`.
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
        return match used_percent(free) {
            0 => Err(format!(
                "'{}' would grow on every check; write a percent of free space below 100%, such as 10%",
                text.trim()
            )),
            used => Ok(Threshold::Percent(used)),
        };
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
