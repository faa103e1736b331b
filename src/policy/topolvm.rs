//! topolvm/pvc-autoresizer annotations as the lowest policy layer, so a cluster can switch to
//! headroom without re-annotating its claims. Any headroom setting of a key wins over the value
//! translated from topolvm (see [`super::merge::effective_with_limits`]).
//!
//! The translation follows pvc-autoresizer's own reading of its annotations: the StorageClass
//! enables (exactly `"true"`), the claim gives thresholds and the increase, and a claim without a
//! non-zero limit is not resized at all. Percentages are of capacity; headroom's keys are "percent
//! used", so `threshold: 10%` (grow when less than 10 % is free) becomes `usageThreshold: 90`.

use std::collections::BTreeMap;

use super::spec::{PolicySpec, Raw};
use super::validate::Finding;
use super::value::size;
use crate::quantity;

pub const PREFIX: &str = "resize.topolvm.io/";
pub const ENABLED: &str = "resize.topolvm.io/enabled";
pub const THRESHOLD: &str = "resize.topolvm.io/threshold";
pub const INODES_THRESHOLD: &str = "resize.topolvm.io/inodes-threshold";
pub const INCREASE: &str = "resize.topolvm.io/increase";
pub const STORAGE_LIMIT: &str = "resize.topolvm.io/storage_limit";
/// Where pvc-autoresizer falls back to when `storage_limit` is absent (older releases).
pub const SPEC_LIMIT: &str = "spec.resources.limits.storage";

/// pvc-autoresizer's documented defaults (its `constants.go`: `DefaultThreshold`,
/// `DefaultInodesThreshold`, `DefaultIncrease`), applied only to claims topolvm enables.
pub const DEFAULT_THRESHOLD: &str = "10%";
pub const DEFAULT_INODES_THRESHOLD: &str = "10%";
pub const DEFAULT_INCREASE: &str = "10%";

/// A value and a description of where it was written, for origins and messages.
struct Found<'a> {
    text: &'a str,
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
            origin: format!("PVC {} annotation {key}", self.pvc),
        });
        on_pvc.or_else(|| {
            let (name, annotations) = self.storage_class?;
            annotations.get(key).filter(given).map(|t| Found {
                text: t.as_str(),
                origin: format!("StorageClass {name} annotation {key}"),
            })
        })
    }
}

/// The policy layer topolvm's annotations express for one claim. `pvc` and the class name appear
/// in messages; `spec_limit` is the claim's `spec.resources.limits.storage`, if any. Empty when
/// topolvm does not enable the claim; invalid values become problems naming the annotation.
pub fn layer(
    pvc: &str,
    pvc_annotations: &BTreeMap<String, String>,
    storage_class: Option<(&str, &BTreeMap<String, String>)>,
    spec_limit: Option<&str>,
) -> PolicySpec {
    let objects = Objects {
        pvc,
        pvc_annotations,
        storage_class,
    };
    let mut spec = PolicySpec::default();
    let Some(enabled) = objects.lookup(ENABLED) else {
        return spec;
    };
    match enabled.text.trim() {
        "true" => {}
        "false" => {
            set(&mut spec.enabled, "false", &enabled.origin);
            return spec;
        }
        other => {
            problem(
                &mut spec,
                ENABLED,
                format!(
                    "'{other}' does not enable pvc-autoresizer (it accepts exactly \"true\"); write \"true\" or \"false\" (on {})",
                    enabled.origin
                ),
            );
            return spec;
        }
    }

    // pvc-autoresizer leaves a claim alone without a non-zero limit; so does this layer.
    let Some((limit_text, limit_origin)) = limit(&objects, spec_limit, &mut spec) else {
        return spec;
    };
    set(&mut spec.enabled, "true", &enabled.origin);
    set(&mut spec.limit, &limit_text, &limit_origin);

    let default_origin = |key: &str, default: &str| {
        format!(
            "pvc-autoresizer default {key}: {default} ({} enables the claim)",
            enabled.origin
        )
    };
    let pick = |key: &str, default: &'static str| match objects.lookup(key) {
        Some(found) => (
            found.text.to_string(),
            format!("{}: {}", found.origin, found.text),
        ),
        None => (default.to_string(), default_origin(key, default)),
    };

    let (text, origin) = pick(THRESHOLD, DEFAULT_THRESHOLD);
    match threshold(&text) {
        Ok(Threshold::Percent(used)) => set(&mut spec.usage_threshold, &used.to_string(), &origin),
        Ok(Threshold::Bytes(bytes)) => {
            set(&mut spec.min_available, &quantity::format(bytes), &origin);
            // With a size, pvc-autoresizer has no percent trigger; 99 is as close as headroom's
            // range allows, so the default 80 % does not grow the claim earlier than it used to.
            set(&mut spec.usage_threshold, "99", &origin);
        }
        Err(m) => problem(&mut spec, THRESHOLD, format!("{m} (in {origin})")),
    }

    let (text, origin) = pick(INODES_THRESHOLD, DEFAULT_INODES_THRESHOLD);
    match inodes_threshold(&text) {
        Ok(used) => set(&mut spec.inode_threshold, &used.to_string(), &origin),
        Err(m) => problem(&mut spec, INODES_THRESHOLD, format!("{m} (in {origin})")),
    }

    let (text, origin) = pick(INCREASE, DEFAULT_INCREASE);
    match increase(&text) {
        Ok(step) => set(&mut spec.step, &step, &origin),
        Err(m) => problem(&mut spec, INCREASE, format!("{m} (in {origin})")),
    }
    spec
}

/// The limit and its origin: the annotation first, then the claim's spec. A zero limit is
/// ignored, as pvc-autoresizer documents.
fn limit(
    objects: &Objects<'_>,
    spec_limit: Option<&str>,
    spec: &mut PolicySpec,
) -> Option<(String, String)> {
    let candidates = [
        objects
            .lookup(STORAGE_LIMIT)
            .map(|f| (f.text.to_string(), f.origin, STORAGE_LIMIT)),
        spec_limit.map(|t| {
            (
                t.to_string(),
                format!("PVC {} {SPEC_LIMIT}", objects.pvc),
                SPEC_LIMIT,
            )
        }),
    ];
    for (text, origin, field) in candidates.into_iter().flatten() {
        if text.trim().is_empty() {
            continue;
        }
        match size(&text) {
            Ok(0) => continue,
            Ok(_) => return Some((text.trim().to_string(), origin)),
            Err(m) => {
                problem(spec, field, format!("{m} (in {origin})"));
                return None;
            }
        }
    }
    None
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
