//! What `headroom validate` reads: a bare policy file, the central ConfigMap's whole manifest
//! (`kind: ConfigMap`, as `kubectl apply` or `helm template` would give it), or a Namespace's
//! (its `headroom.dev/*` annotations, a policy layer), told apart by `kind`; or a file of the
//! ConfigMap's selector sections alone (as kept in Git beside a policy file), told apart by its
//! shape (a list) or its name (`selectors.yaml`, `prod-selectors.yml`). A ConfigMap's every
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
use super::selector::{self, SELECTORS_KEY, Section, SelectorError};
use super::selector_usage::{LiveClaim, unused_sections};
use super::spec::PolicySpec;
use super::validate::{Validation, parse_policy_yaml, validate};
use super::yaml::{Node, parse_yaml};

/// The ConfigMap's data keys that other parts of headroom read (not policy).
const OTHER_KEYS: &[&str] = &["postgres.yaml"];

/// What a file must be, said when it is none of them.
const FORMS: &str = "headroom validate reads a policy file (a mapping of policy keys), a file of selector sections (a list, as in the ConfigMap's selectors.yaml), the central ConfigMap's manifest (kind: ConfigMap) or a Namespace's (its headroom.dev/* annotations)";

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
    check_file("", text, ctx, claims)
}

/// As [`check_document_on`], for a file whose name (its last component) is `name`: a name
/// like `selectors.yaml` makes it a file of selector sections whatever it holds, so that one
/// written as a mapping by mistake is told it should be a list, not checked as a policy.
pub fn check_file(name: &str, text: &str, ctx: &Context, claims: Option<&[LiveClaim]>) -> Checked {
    let doc = parse_yaml(text);
    let kind = match &doc {
        Ok(Node::Map(entries)) => entries.iter().find_map(|(k, v)| match (k.as_str(), v) {
            ("kind", Node::Scalar(s)) => Some(s.clone()),
            _ => None,
        }),
        _ => None,
    };
    match (doc, kind) {
        (Ok(Node::Map(entries)), Some(kind)) => check_manifest(&kind, entries, ctx, claims),
        (Ok(Node::Seq(_)), _) => check_selectors_file(name, text, ctx, claims),
        _ if names_selectors(name) => check_selectors_file(name, text, ctx, claims),
        (Ok(other @ Node::Scalar(_)), _) => {
            wrong_form("(document)", &format!("the file is {}", other.kind()))
        }
        _ => parse_policy_yaml(text, ctx).into(),
    }
}

fn check_manifest(
    kind: &str,
    entries: Vec<(String, Node)>,
    ctx: &Context,
    claims: Option<&[LiveClaim]>,
) -> Checked {
    match kind {
        "ConfigMap" => check_configmap(entries, ctx, claims),
        "Namespace" => check_namespace(entries, ctx),
        other => wrong_form("kind", &format!("a {other} manifest")),
    }
}

/// A file no form of [`FORMS`] fits: `what` says what it is instead.
fn wrong_form(field: &str, what: &str) -> Checked {
    Checked {
        errors: vec![Finding {
            field: field.into(),
            message: format!("{what}; {FORMS}"),
        }],
        warnings: Vec::new(),
    }
}

/// `selectors.yaml`, `selectors.yml`, or such a name with a prefix (`prod-selectors.yaml`).
fn names_selectors(name: &str) -> bool {
    let stem = name
        .strip_suffix(".yaml")
        .or_else(|| name.strip_suffix(".yml"));
    stem.is_some_and(|s| s.ends_with("selectors"))
}

/// A file of the ConfigMap's selector sections, read and checked as its `selectors.yaml` key
/// is. The ConfigMap's defaults are not in the file, so each section is checked over none, as
/// a ConfigMap without `policy.yaml` would be.
fn check_selectors_file(
    name: &str,
    text: &str,
    ctx: &Context,
    claims: Option<&[LiveClaim]>,
) -> Checked {
    let mut out = Checked::default();
    // A document checked without its file's name (check_document) still names something.
    let name = if name.is_empty() { SELECTORS_KEY } else { name };
    match selector::parse_file(text, name) {
        Ok(sections) => {
            let defaults = PolicySpec::default();
            selector_sections(&sections, &defaults, ctx, &BTreeSet::new(), &mut out);
            if let Some(claims) = claims {
                out.warnings.extend(unused_sections(&sections, claims));
            }
        }
        Err(e) => out.errors.push(e.finding()),
    }
    out
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
    selector_sections(&central.selectors, &central.defaults, ctx, &seen, out);
}

/// Each selector section: what makes it unreadable, then its policy over the defaults.
fn selector_sections(
    sections: &[Section],
    defaults: &PolicySpec,
    ctx: &Context,
    seen: &BTreeSet<(String, String)>,
    out: &mut Checked,
) {
    for s in sections {
        out.errors
            .extend(s.errors.iter().map(SelectorError::finding));
        let c = check_layer(Some((Source::ConfigMapSelector, &s.policy)), defaults, ctx);
        push(out, &format!("{SELECTORS_KEY}[{}]", s.index), c, seen);
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
