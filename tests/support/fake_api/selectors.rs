//! `fieldSelector` and `labelSelector` as kube-apiserver parses and applies them, plus the
//! [`Filter`] that LIST and WATCH share so both see exactly the same objects.

use std::collections::BTreeMap;

use serde_json::Value;

use super::resources::{Res, ResourceType};
use super::status::ApiError;

#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Terms `a=b`, `a==b`, `a!=b` joined by commas; a label the type does not index is a 400,
    /// as the real server refuses it rather than ignoring it.
    pub fn parse(s: &str, rt: &ResourceType) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if !rt.supports_field(field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(field, equal, value)| (field_value(obj, field) == *value) == *equal)
    }
}

/// A dotted path's value as the field-label functions render it; absent fields read as "".
fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(next) => cur = next,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

#[derive(Debug, Clone)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, Clone, Default)]
pub struct LabelSelector(Vec<LabelReq>);

impl LabelSelector {
    /// Equality (`=`, `==`, `!=`) and set-based (`in`, `notin`, `key`, `!key`) requirements.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in split_top_level(s) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            reqs.push(parse_requirement(term).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unable to parse requirement: found '{term}', expected: in, notin, =, ==, !=, or exists"
                ))
            })?);
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => labels.get(k) == Some(v),
            // As in apimachinery: != and notin also match objects without the label.
            LabelReq::NotEq(k, v) => labels.get(k) != Some(v),
            LabelReq::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            LabelReq::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            LabelReq::Exists(k) => labels.contains_key(k),
            LabelReq::NotExists(k) => !labels.contains_key(k),
        })
    }
}

/// Commas inside `( )` belong to a set, not to the list of requirements.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_token(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'))
}

fn valid_value(s: &str) -> bool {
    s.is_empty() || valid_token(s)
}

fn parse_requirement(term: &str) -> Option<LabelReq> {
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        return valid_token(key).then(|| LabelReq::NotExists(key.into()));
    }
    if let Some((key, rest)) = term.split_once(char::is_whitespace) {
        let rest = rest.trim_start();
        let (negated, set) = if let Some(set) = rest.strip_prefix("notin") {
            (true, set)
        } else if let Some(set) = rest.strip_prefix("in") {
            (false, set)
        } else {
            return parse_equality(term);
        };
        let inner = set.trim().strip_prefix('(')?.strip_suffix(')')?;
        let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
        if !valid_token(key) || !values.iter().all(|v| valid_value(v)) {
            return None;
        }
        let key = key.to_string();
        return Some(if negated {
            LabelReq::NotIn(key, values)
        } else {
            LabelReq::In(key, values)
        });
    }
    parse_equality(term)
}

fn parse_equality(term: &str) -> Option<LabelReq> {
    let (key, value, equal) = if let Some((k, v)) = term.split_once("!=") {
        (k, v, false)
    } else if let Some((k, v)) = term.split_once("==") {
        (k, v, true)
    } else if let Some((k, v)) = term.split_once('=') {
        (k, v, true)
    } else {
        let key = term.trim();
        return valid_token(key).then(|| LabelReq::Exists(key.into()));
    };
    let (key, value) = (key.trim(), value.trim());
    if !valid_token(key) || !valid_value(value) {
        return None;
    }
    Some(if equal {
        LabelReq::Eq(key.into(), value.into())
    } else {
        LabelReq::NotEq(key.into(), value.into())
    })
}

/// Which objects a LIST or a WATCH sees.
#[derive(Debug, Clone)]
pub struct Filter {
    pub res: Res,
    pub namespace: Option<String>,
    pub fields: FieldSelector,
    pub labels: LabelSelector,
}

impl Filter {
    pub fn all(res: Res, namespace: Option<String>) -> Self {
        Self {
            res,
            namespace,
            fields: FieldSelector::default(),
            labels: LabelSelector::default(),
        }
    }

    pub fn matches(&self, res: Res, obj: &Value) -> bool {
        if res != self.res {
            return false;
        }
        let meta = &obj["metadata"];
        if let Some(ns) = &self.namespace
            && meta["namespace"].as_str() != Some(ns.as_str())
        {
            return false;
        }
        let labels: BTreeMap<String, String> = meta
            .get("labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        self.fields.matches(obj) && self.labels.matches(&labels)
    }
}
