//! Selector sections of the central ConfigMap (`selectors.yaml`): an ordered list of
//! `{namespaces, matchLabels, matchExpressions, policy}` aimed at a workload's claims by their
//! labels (e.g. `cnpg.io/cluster: pg-main`). The first section that matches a claim is its
//! selector layer; later ones are not read for it. Matching is pure: the claim's namespace and
//! labels in, a section out.
//!
//! A section that cannot be read (an invalid expression, a bad namespace name) is not skipped:
//! every claim that reaches it in the order, and that its namespaces do not rule out, is
//! refused with the section's errors, since the section may have been meant for it. Claims that
//! an earlier section matches, or whose namespace the section does not list, are not delayed.

use std::collections::BTreeMap;

use super::Finding;
use super::spec::PolicySpec;
use super::yaml::{Node, parse_yaml};

/// ConfigMap data key holding the selector sections (a YAML list).
pub const SELECTORS_KEY: &str = "selectors.yaml";

/// A selector section that cannot be read, naming where the sections were read (the ConfigMap
/// and its key, or a file of them), the section and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{place}: {message}")]
    Document { place: String, message: String },
    #[error("{place}, section {index}, {field}: {message}")]
    Section {
        place: String,
        index: usize,
        field: String,
        message: String,
    },
}

impl SelectorError {
    /// As a policy finding: the field is `selectors.yaml[N].<field>`.
    pub fn finding(&self) -> Finding {
        let field = match self {
            SelectorError::Document { .. } => SELECTORS_KEY.to_string(),
            SelectorError::Section { index, field, .. } => {
                format!("{SELECTORS_KEY}[{index}].{field}")
            }
        };
        Finding {
            field,
            message: self.to_string(),
        }
    }
}

/// `matchExpressions[].operator`, as in a Kubernetes label selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expression {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

impl Expression {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

/// One section, in the order written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Section {
    pub index: usize,
    /// `None`: every namespace.
    pub namespaces: Option<Vec<String>>,
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Expression>,
    pub policy: PolicySpec,
    /// Why the section cannot be read; not empty: it matches nothing and refuses the claims it
    /// could have been meant for.
    pub errors: Vec<SelectorError>,
}

/// What the sections say about one claim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Matched<'a> {
    /// No section matches: the claim has no selector layer.
    None,
    Section(&'a Section),
    /// The first section the claim reaches cannot be read.
    Broken(&'a Section),
}

impl Section {
    /// Whether the section's namespaces allow `namespace` (a broken list allows every one).
    pub(super) fn allows(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|list| list.iter().any(|n| n == namespace))
    }

    pub(super) fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| e.matches(labels))
    }
}

/// The first section for a claim in `namespace` with `labels`.
pub fn first_match<'a>(
    sections: &'a [Section],
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Matched<'a> {
    for s in sections.iter().filter(|s| s.allows(namespace)) {
        if !s.errors.is_empty() {
            return Matched::Broken(s);
        }
        if s.selects(labels) {
            return Matched::Section(s);
        }
    }
    Matched::None
}

/// Reads `selectors.yaml`; `configmap` (e.g. `headroom/headroom-policy`) names it in messages.
pub fn parse(text: &str, configmap: &str) -> Result<Vec<Section>, SelectorError> {
    parse_at(text, &format!("ConfigMap {configmap} key {SELECTORS_KEY}"))
}

/// Reads the same sections kept as a file of their own (in Git beside a policy file), named
/// `file` in messages: the ConfigMap it will go in is not known here.
pub fn parse_file(text: &str, file: &str) -> Result<Vec<Section>, SelectorError> {
    parse_at(text, &format!("selector sections file {file}"))
}

/// `place` says where the sections were read, in every message.
fn parse_at(text: &str, place: &str) -> Result<Vec<Section>, SelectorError> {
    let doc = |message: String| SelectorError::Document {
        place: place.to_string(),
        message,
    };
    match parse_yaml(text) {
        Ok(Node::Null) => Ok(Vec::new()),
        Ok(Node::Seq(items)) => Ok(items
            .into_iter()
            .enumerate()
            .map(|(index, node)| section(index, node, place))
            .collect()),
        Ok(other) => Err(doc(format!(
            "expected a list of sections, e.g. `- matchLabels: {{cnpg.io/cluster: pg-main}}` with a `policy:`, found {}",
            other.kind()
        ))),
        Err(e) => Err(doc(e.to_string())),
    }
}

struct Reader<'c> {
    place: &'c str,
    index: usize,
    errors: Vec<SelectorError>,
}

impl Reader<'_> {
    fn bad(&mut self, field: &str, message: String) {
        self.errors.push(SelectorError::Section {
            place: self.place.to_string(),
            index: self.index,
            field: field.to_string(),
            message,
        });
    }

    /// A list of plain values (`namespaces`, `values`).
    fn strings(&mut self, field: &str, node: Node) -> Option<Vec<String>> {
        let Node::Seq(items) = node else {
            self.bad(field, format!("expected a list, found {}", node.kind()));
            return None;
        };
        let mut out = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            match item {
                Node::Scalar(s) => out.push(s),
                other => self.bad(
                    &format!("{field}[{i}]"),
                    format!("expected a single value, found {}", other.kind()),
                ),
            }
        }
        Some(out)
    }
}

fn section(index: usize, node: Node, place: &str) -> Section {
    let mut r = Reader {
        place,
        index,
        errors: Vec::new(),
    };
    let mut s = Section {
        index,
        ..Section::default()
    };
    let Node::Map(entries) = node else {
        r.bad(
            "(section)",
            format!(
                "expected a mapping with namespaces, matchLabels, matchExpressions and policy, found {}",
                node.kind()
            ),
        );
        s.errors = r.errors;
        return s;
    };
    let mut has_policy = false;
    for (key, value) in entries {
        match key.as_str() {
            "namespaces" => s.namespaces = namespaces(&mut r, value),
            "matchLabels" => s.match_labels = match_labels(&mut r, value),
            "matchExpressions" => s.match_expressions = expressions(&mut r, value),
            "policy" => {
                has_policy = true;
                let origin = format!("{place}, section {index}");
                s.policy = PolicySpec::from_node(value, Some(&origin));
            }
            other => r.bad(
                other,
                "unknown key; a section has namespaces, matchLabels, matchExpressions and policy"
                    .into(),
            ),
        }
    }
    if !has_policy {
        r.bad(
            "policy",
            "required: the policy keys for the claims this section selects, e.g. policy: { enabled: true, limit: 100Gi }".into(),
        );
    }
    s.errors = r.errors;
    s
}

fn namespaces(r: &mut Reader<'_>, node: Node) -> Option<Vec<String>> {
    let list = r.strings("namespaces", node)?;
    let before = r.errors.len();
    for (i, n) in list.iter().enumerate() {
        if let Err(m) = dns_label(n) {
            r.bad(&format!("namespaces[{i}]"), m);
        }
    }
    if list.is_empty() {
        r.bad(
            "namespaces",
            "an empty list selects no namespace; list the namespaces, or remove namespaces to select in every one".into(),
        );
    }
    // A list that cannot be read rules out no namespace: the section refuses them all.
    (r.errors.len() == before).then_some(list)
}

fn match_labels(r: &mut Reader<'_>, node: Node) -> BTreeMap<String, String> {
    let Node::Map(entries) = node else {
        r.bad(
            "matchLabels",
            format!(
                "expected a mapping of label to value, found {}",
                node.kind()
            ),
        );
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for (key, value) in entries {
        let field = format!("matchLabels.{key}");
        if let Err(m) = label_key(&key) {
            r.bad(&field, m);
        }
        match value {
            Node::Scalar(v) => {
                if let Err(m) = label_value(&v) {
                    r.bad(&field, m);
                }
                out.insert(key, v);
            }
            other => r.bad(
                &field,
                format!("expected a label value, found {}", other.kind()),
            ),
        }
    }
    out
}

fn expressions(r: &mut Reader<'_>, node: Node) -> Vec<Expression> {
    let Node::Seq(items) = node else {
        r.bad(
            "matchExpressions",
            format!(
                "expected a list of {{key, operator, values}}, found {}",
                node.kind()
            ),
        );
        return Vec::new();
    };
    items
        .into_iter()
        .enumerate()
        .filter_map(|(i, n)| expression(r, &format!("matchExpressions[{i}]"), n))
        .collect()
}

fn expression(r: &mut Reader<'_>, at: &str, node: Node) -> Option<Expression> {
    let Node::Map(entries) = node else {
        r.bad(
            at,
            format!("expected {{key, operator, values}}, found {}", node.kind()),
        );
        return None;
    };
    let (mut key, mut operator, mut values) = (None, None, None);
    for (k, v) in entries {
        let field = format!("{at}.{k}");
        match (k.as_str(), v) {
            ("key", Node::Scalar(s)) => match label_key(&s) {
                Ok(()) => key = Some(s),
                Err(m) => r.bad(&field, m),
            },
            ("operator", Node::Scalar(s)) => match s.as_str() {
                "In" => operator = Some(Operator::In),
                "NotIn" => operator = Some(Operator::NotIn),
                "Exists" => operator = Some(Operator::Exists),
                "DoesNotExist" => operator = Some(Operator::DoesNotExist),
                _ => r.bad(
                    &field,
                    format!("'{s}' is not an operator; write In, NotIn, Exists or DoesNotExist"),
                ),
            },
            ("values", v) => values = r.strings(&field, v),
            ("key" | "operator", other) => r.bad(
                &field,
                format!("expected a single value, found {}", other.kind()),
            ),
            (_, _) => r.bad(
                &field,
                "unknown key; an expression has key, operator and values".into(),
            ),
        }
    }
    for (name, missing) in [("key", key.is_none()), ("operator", operator.is_none())] {
        if missing
            && !r
                .errors
                .iter()
                .any(|e| names_field(e, &format!("{at}.{name}")))
        {
            r.bad(&format!("{at}.{name}"), "required".into());
        }
    }
    let (key, operator) = (key?, operator?);
    let values = values.unwrap_or_default();
    let field = format!("{at}.values");
    match operator {
        Operator::In | Operator::NotIn if values.is_empty() => r.bad(
            &field,
            format!("{operator:?} needs at least one value, e.g. values: [pg-main]"),
        ),
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => r.bad(
            &field,
            format!("{operator:?} takes no values; remove values, or write In"),
        ),
        _ => {}
    }
    for v in &values {
        if let Err(m) = label_value(v) {
            r.bad(&field, m);
        }
    }
    Some(Expression {
        key,
        operator,
        values,
    })
}

fn names_field(e: &SelectorError, field: &str) -> bool {
    matches!(e, SelectorError::Section { field: f, .. } if f == field)
}

/// A label's name part or a namespace-free value: alphanumerics, `-`, `_`, `.`, starting and
/// ending with an alphanumeric, at most 63 characters.
fn label_name(s: &str) -> bool {
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    s.len() <= 63
        && ends(s.chars().next())
        && ends(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn dns_label(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{s}' is not a namespace name (lower-case letters, digits and '-', at most 63)"
        ))
    }
}

/// `[prefix/]name`, the prefix a DNS subdomain of at most 253 characters.
fn label_key(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty() && p.len() <= 253 && p.split('.').all(|part| dns_label(part).is_ok())
    });
    if prefix_ok && label_name(name) {
        Ok(())
    } else {
        Err(format!(
            "'{s}' is not a label key; write [prefix/]name, e.g. cnpg.io/cluster"
        ))
    }
}

fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() || label_name(s) {
        Ok(())
    } else {
        Err(format!(
            "'{s}' is not a label value (letters, digits, '-', '_', '.', at most 63)"
        ))
    }
}

#[cfg(test)]
#[path = "selector_tests.rs"]
mod tests;
