//! A Kubernetes label selector (`metav1.LabelSelector`) against one object's labels, as the API
//! machinery evaluates it: every `matchLabels` pair and every expression must hold; an empty
//! selector selects everything. An operator it does not know, or values where its operator
//! takes none (or none where it needs some), is an error: the API server admits neither, so
//! such an object did not come through validation and is not guessed at.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` selects `labels`; the error says which term is malformed.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let pairs = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let mut all = pairs;
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let has = labels.get(&e.key);
        let holds = match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!("{} {} has no values", e.key, e.operator));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!("{} {} takes no values", e.key, e.operator));
            }
            "In" => has.is_some_and(|v| values.contains(v)),
            "NotIn" => has.is_none_or(|v| !values.contains(v)),
            "Exists" => has.is_some(),
            "DoesNotExist" => has.is_none(),
            other => {
                let shown: String = other.chars().take(32).collect();
                return Err(format!(
                    "{} has operator '{}', not In, NotIn, Exists or DoesNotExist",
                    e.key,
                    shown.escape_debug()
                ));
            }
        };
        all &= holds;
    }
    Ok(all)
}
