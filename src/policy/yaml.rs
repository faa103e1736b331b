//! YAML text to a [`Node`] tree with serde-saphyr. A tree rather than derived structs, so that
//! every unknown key is reported (not just the first) and every scalar keeps its text.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::PolicyError;

/// A YAML document reduced to what a policy needs: scalars keep their text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Scalar(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Node::Null => "nothing",
            Node::Scalar(_) => "a single value",
            Node::Seq(_) => "a list",
            Node::Map(_) => "a mapping",
        }
    }
}

/// Parses YAML into a [`Node`]. Errors become one line (no source snippet): they are printed
/// after a file name.
pub(crate) fn parse_yaml(text: &str) -> Result<Node, PolicyError> {
    if text.trim().is_empty() {
        return Ok(Node::Null);
    }
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    // Keep scalars as written: `yes` stays a string (refused as a boolean with a hint) rather
    // than silently becoming true, `010` stays `010`.
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    serde_saphyr::from_str_with_options::<Node>(text, options)
        .map_err(|e| PolicyError::Yaml(one_line(&e.to_string())))
}

pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Scalar(v.to_string()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Scalar(v.to_string()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Scalar(v.to_string()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
        Ok(Node::Scalar(v.to_string()))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Node, E> {
        Ok(Node::Scalar(v.to_string()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Scalar(v.to_string()))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Scalar(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Scalar(v))
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let Node::Scalar(key) = key else {
                return Err(de::Error::custom(format!(
                    "a key must be a plain name, not {}",
                    key.kind()
                )));
            };
            entries.push((key, map.next_value::<Node>()?));
        }
        Ok(Node::Map(entries))
    }
}
