//! Which selector sections the cluster's claims reach (`headroom validate --context`): a section
//! that selects no claim, or whose every claim an earlier section takes first, gives its policy
//! to none, which is a mistake nobody sees otherwise. Pure: the claims' namespaces and labels in
//! (one LIST, made by the command), warnings out.

use std::collections::{BTreeMap, BTreeSet};

use super::Finding;
use super::selector::{Matched, SELECTORS_KEY, Section, first_match};

/// A claim on the cluster, as the sections see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveClaim {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
}

/// A warning per readable section that `claims` leave unused: one that selects none of them,
/// or one whose claims all match an earlier section first. A section that cannot be read has
/// its errors already and is not warned about again.
pub fn unused_sections(sections: &[Section], claims: &[LiveClaim]) -> Vec<Finding> {
    let firsts: Vec<Matched<'_>> = claims
        .iter()
        .map(|c| first_match(sections, &c.namespace, &c.labels))
        .collect();
    let mut out = Vec::new();
    for s in sections.iter().filter(|s| s.errors.is_empty()) {
        let selected: Vec<&Matched<'_>> = claims
            .iter()
            .zip(&firsts)
            .filter(|(c, _)| s.allows(&c.namespace) && s.selects(&c.labels))
            .map(|(_, m)| m)
            .collect();
        let field = format!("{SELECTORS_KEY}[{}]", s.index);
        if selected.is_empty() {
            out.push(Finding {
                field,
                message: format!(
                    "selects no claim on the cluster ({}), so its policy applies to none; check its namespaces and labels against the claims'",
                    describe(s)
                ),
            });
            continue;
        }
        let taken: BTreeSet<usize> = selected
            .iter()
            .filter_map(|m| match m {
                Matched::Section(t) | Matched::Broken(t) if t.index != s.index => Some(t.index),
                _ => None,
            })
            .collect();
        if selected.iter().all(|m| !is(m, s.index)) {
            let earlier: Vec<String> = taken
                .iter()
                .map(|i| format!("{SELECTORS_KEY}[{i}]"))
                .collect();
            out.push(Finding {
                field,
                message: format!(
                    "every claim it selects ({}) is matched first by {}, so its policy applies to none; move it earlier or narrow the earlier section",
                    selected.len(),
                    earlier.join(", ")
                ),
            });
        }
    }
    out
}

fn is(m: &Matched<'_>, index: usize) -> bool {
    matches!(m, Matched::Section(t) if t.index == index)
}

/// The section's namespaces and labels, as a user wrote them.
fn describe(s: &Section) -> String {
    let namespaces = match &s.namespaces {
        Some(list) => format!("namespaces {}", list.join(", ")),
        None => "every namespace".to_string(),
    };
    let mut labels: Vec<String> = s
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    labels.extend(
        s.match_expressions
            .iter()
            .map(|e| format!("{} {:?} [{}]", e.key, e.operator, e.values.join(", "))),
    );
    if labels.is_empty() {
        format!("{namespaces}, any labels")
    } else {
        format!("{namespaces}, labels {}", labels.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::selector::parse;

    fn claim(ns: &str, labels: &[(&str, &str)]) -> LiveClaim {
        LiveClaim {
            namespace: ns.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    const SECTIONS: &str = "
- matchLabels: {cnpg.io/cluster: pg-main}
  policy: {enabled: true, limit: 10Gi}
- namespaces: [payments]
  matchLabels: {app: ledger}
  policy: {enabled: true, limit: 10Gi}
- namespaces: [db]
  matchExpressions: [{key: cnpg.io/cluster, operator: Exists}]
  policy: {enabled: true, limit: 10Gi}
- matchLabels: {cnpg.io/cluster: [broken]}
  policy: {enabled: true}
";

    #[test]
    fn a_section_no_claim_reaches_is_named_with_its_selector() {
        let sections = parse(SECTIONS, "headroom/headroom").expect("sections");
        let claims = [
            claim("db", &[("cnpg.io/cluster", "pg-main")]),
            // In payments, but not the labels section 1 asks for.
            claim("payments", &[("app", "web")]),
        ];
        let w = unused_sections(&sections, &claims);
        let fields: Vec<&str> = w.iter().map(|f| f.field.as_str()).collect();
        // 1 selects nothing; 2's only claim is section 0's; 3 is broken (its errors say so).
        assert_eq!(fields, ["selectors.yaml[1]", "selectors.yaml[2]"], "{w:?}");
        assert!(
            w[0].message
                .contains("namespaces payments, labels app=ledger"),
            "{}",
            w[0].message
        );
        assert!(
            w[1].message.contains("matched first by selectors.yaml[0]"),
            "{}",
            w[1].message
        );
    }

    #[test]
    fn sections_each_with_a_claim_of_their_own_are_quiet() {
        let sections = parse(SECTIONS, "headroom/headroom").expect("sections");
        let claims = [
            claim("db", &[("cnpg.io/cluster", "pg-main")]),
            claim("payments", &[("app", "ledger")]),
            claim("db", &[("cnpg.io/cluster", "pg-other")]),
        ];
        assert_eq!(unused_sections(&sections, &claims), []);
    }
}
