//! What `headroom validate` reads: a bare policy file, the central ConfigMap's whole manifest
//! (`kind: ConfigMap`, as `kubectl apply` or `helm template` would give it), or a Namespace's
//! (its `headroom.dev/*` annotations, a policy layer), told apart by `kind`. A ConfigMap's every
//! data key headroom reads is checked as the agent reads it: the defaults, each StorageClass
//! section and each selector section over the defaults, and the node-wide trim switch. A finding names the data key (and section) before its field.
//! Given the cluster's claims (`validate --context`), a selector section none of them reach is a
//! warning.

use std::collections::{BTreeMap, BTreeSet};

use super::Finding;
use super::annotations::from_annotations;
use super::checker::Context;
use super::merge::{
    CentralPolicy, POLICY_KEY, STORAGE_CLASSES_KEY, Source, merge_layers, parse_configmap,
};
use super::reclaim_global::GLOBAL_KEY;
use super::selector::{SELECTORS_KEY, SelectorError};
use super::selector_usage::{LiveClaim, unused_sections};
use super::spec::PolicySpec;
use super::validate::{Validation, parse_policy_yaml, validate};
use super::yaml::{Node, parse_yaml};

/// The ConfigMap's data keys that other parts of headroom read (not policy).
const OTHER_KEYS: &[&str] = &["postgres.yaml"];

/// Every finding of one document.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checked {
    pub errors: Vec<Finding>,
    pub warnings: Vec<Finding>,
}

impl From<Validation> for Checked {
    fn from(v: Validation) -> Self {
        Checked {
            errors: v.errors,
            warnings: v.warnings,
        }
    }
}

/// Checks a policy file or a ConfigMap manifest.
pub fn check_document(text: &str, ctx: &Context) -> Checked {
    check_document_on(text, ctx, None)
}

/// As [`check_document`]; given the cluster's claims, a ConfigMap's selector sections that
/// none of them reach are warnings too ([`unused_sections`]).
pub fn check_document_on(text: &str, ctx: &Context, claims: Option<&[LiveClaim]>) -> Checked {
    let Ok(Node::Map(entries)) = parse_yaml(text) else {
        return parse_policy_yaml(text, ctx).into();
    };
    let kind = entries.iter().find_map(|(k, v)| match (k.as_str(), v) {
        ("kind", Node::Scalar(s)) => Some(s.clone()),
        _ => None,
    });
    match kind.as_deref() {
        None => parse_policy_yaml(text, ctx).into(),
        Some("ConfigMap") => check_configmap(entries, ctx, claims),
        Some("Namespace") => check_namespace(entries, ctx),
        Some(other) => Checked {
            errors: vec![Finding {
                field: "kind".into(),
                message: format!(
                    "a {other} manifest; headroom validate reads a policy file, the central ConfigMap's manifest (kind: ConfigMap) or a Namespace's (its headroom.dev/* annotations)"
                ),
            }],
            warnings: Vec::new(),
        },
    }
}

fn check_configmap(
    entries: Vec<(String, Node)>,
    ctx: &Context,
    claims: Option<&[LiveClaim]>,
) -> Checked {
    let mut out = Checked::default();
    let (mut name, mut namespace) = (String::from("(unnamed)"), None);
    let mut data = BTreeMap::new();
    for (key, node) in entries {
        match (key.as_str(), node) {
            ("metadata", Node::Map(meta)) => {
                for (k, v) in meta {
                    match (k.as_str(), v) {
                        ("name", Node::Scalar(s)) => name = s,
                        ("namespace", Node::Scalar(s)) => namespace = Some(s),
                        _ => {}
                    }
                }
            }
            ("data", Node::Map(items)) => {
                for (k, v) in items {
                    match v {
                        Node::Scalar(text) => {
                            data.insert(k, text);
                        }
                        Node::Null => {
                            data.insert(k, String::new());
                        }
                        other => out.errors.push(Finding {
                            field: format!("data.{k}"),
                            message: format!(
                                "expected the key's text (a YAML block such as `{k}: |`), found {}",
                                other.kind()
                            ),
                        }),
                    }
                }
            }
            ("data", Node::Null) => {}
            ("data", other) => out.errors.push(Finding {
                field: "data".into(),
                message: format!("expected a mapping of key to text, found {}", other.kind()),
            }),
            _ => {}
        }
    }
    let shown = match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    };
    for key in data.keys() {
        let known = [POLICY_KEY, STORAGE_CLASSES_KEY, SELECTORS_KEY, GLOBAL_KEY];
        if !known.contains(&key.as_str()) && !OTHER_KEYS.contains(&key.as_str()) {
            out.warnings.push(Finding {
                field: format!("data.{key}"),
                message: format!(
                    "not a key headroom reads, so it has no effect; the policy keys are {}",
                    known.join(", ")
                ),
            });
        }
    }
    let central = parse_configmap(&data, &shown);
    out.errors.extend(central.errors.iter().cloned());
    // The switch's findings already name their key (`reclaimSpace.yaml timeout`).
    out.errors.extend(central.reclaim.errors.iter().cloned());
    sections(&central, ctx, &mut out);
    if let Some(claims) = claims {
        out.warnings
            .extend(unused_sections(&central.selectors, claims));
    }
    out
}

/// A Namespace's `headroom.dev/*` annotations, as the layer the agent reads for its claims.
fn check_namespace(entries: Vec<(String, Node)>, ctx: &Context) -> Checked {
    let (mut name, mut annotations) = (String::from("(unnamed)"), BTreeMap::new());
    for (key, node) in entries {
        let ("metadata", Node::Map(meta)) = (key.as_str(), node) else {
            continue;
        };
        for (k, v) in meta {
            match (k.as_str(), v) {
                ("name", Node::Scalar(s)) => name = s,
                ("annotations", Node::Map(items)) => {
                    for (a, v) in items {
                        if let Node::Scalar(text) = v {
                            annotations.insert(a, text);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let spec = from_annotations(&annotations, &format!("Namespace {name}"));
    let empty = PolicySpec::default();
    check_layer(Some((Source::NamespaceAnnotation, &spec)), &empty, ctx)
}

/// The defaults alone, then each section over them; a section's findings that the defaults
/// already have are said once, under the defaults.
fn sections(central: &CentralPolicy, ctx: &Context, out: &mut Checked) {
    let defaults = check_layer(None, &central.defaults, ctx);
    let seen: BTreeSet<(String, String)> = defaults
        .errors
        .iter()
        .chain(&defaults.warnings)
        .map(|f| (f.field.clone(), f.message.clone()))
        .collect();
    push(out, POLICY_KEY, defaults, &BTreeSet::new());
    for (class, spec) in &central.storage_classes {
        let c = check_layer(
            Some((Source::ConfigMapStorageClass, spec)),
            &central.defaults,
            ctx,
        );
        push(out, &format!("{STORAGE_CLASSES_KEY}[{class}]"), c, &seen);
    }
    for s in &central.selectors {
        out.errors
            .extend(s.errors.iter().map(SelectorError::finding));
        let c = check_layer(
            Some((Source::ConfigMapSelector, &s.policy)),
            &central.defaults,
            ctx,
        );
        push(out, &format!("{SELECTORS_KEY}[{}]", s.index), c, &seen);
    }
}

/// One section over the defaults, as a claim that only the ConfigMap speaks for would get it.
/// A missing `limit` is an error only where the section turns headroom on: elsewhere a claim's
/// annotations, its Namespace or its StorageClass may give one.
fn check_layer(
    section: Option<(Source, &PolicySpec)>,
    defaults: &PolicySpec,
    ctx: &Context,
) -> Checked {
    let mut layers: Vec<(Source, &PolicySpec)> = section.into_iter().collect();
    layers.push((Source::ConfigMapDefault, defaults));
    let merged = merge_layers(&layers);
    let v = validate(&merged.spec, ctx);
    let enabled = merged.wants_enabled();
    let mut out = Checked {
        errors: Vec::new(),
        warnings: v.warnings,
    };
    for f in v.errors {
        let no_limit = f.field == "limit" && merged.spec.get("limit").is_none();
        match (no_limit, enabled) {
            (false, _) => out.errors.push(f),
            (true, true) => out.warnings.push(Finding {
                field: f.field,
                message: "not given while enabled is true: a claim this applies to is refused unless its annotations, its Namespace or its StorageClass give a limit; write e.g. limit: 100Gi".into(),
            }),
            (true, false) => {}
        }
    }
    out
}

fn scoped(scope: &str, f: &Finding) -> Finding {
    Finding {
        field: format!("{scope}: {}", f.field),
        message: f.message.clone(),
    }
}

fn push(out: &mut Checked, scope: &str, c: Checked, seen: &BTreeSet<(String, String)>) {
    let fresh = |f: &&Finding| !seen.contains(&(f.field.clone(), f.message.clone()));
    out.errors
        .extend(c.errors.iter().filter(fresh).map(|f| scoped(scope, f)));
    out.warnings
        .extend(c.warnings.iter().filter(fresh).map(|f| scoped(scope, f)));
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
