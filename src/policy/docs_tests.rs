//! docs/policy.md's table and ConfigMap example must match the code.

use std::collections::BTreeMap;

use super::fields::{FIELDS, default_text};
use super::merge::{Source, effective, parse_configmap};
use super::validate::{Context, validate};

const README: &str = include_str!("../../docs/policy.md");

fn section() -> &'static str {
    let start = README
        .find("<!-- policy-table:start -->")
        .expect("start marker");
    let end = README
        .find("<!-- policy-table:end -->")
        .expect("end marker");
    &README[start..end]
}

#[test]
fn table_documents_every_key_once_with_its_default() {
    let rows: Vec<Vec<&str>> = section()
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            l.split('|')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), FIELDS.len());
    for (row, field) in rows.iter().zip(FIELDS) {
        assert_eq!(row[0], format!("`{}`", field.path));
        assert_eq!(row[1], format!("`{}`", field.annotation));
        match default_text(field.path) {
            Some(d) => assert_eq!(row[2], format!("`{d}`"), "default of {}", field.path),
            None => assert!(
                row[2].starts_with("none"),
                "{} has no default: {}",
                field.path,
                row[2]
            ),
        }
    }
}

#[test]
fn configmap_example_is_valid() {
    let s = section();
    let start = s.find("```yaml\napiVersion").expect("example") + "```yaml\n".len();
    let end = start + s[start..].find("```").expect("end of example");
    #[derive(serde::Deserialize)]
    struct ConfigMap {
        data: BTreeMap<String, String>,
    }
    let cm: ConfigMap = serde_saphyr::from_str(&s[start..end]).expect("ConfigMap YAML");
    let central = parse_configmap(&cm.data, "headroom/headroom-policy");
    assert_eq!(central.all_problems().count(), 0);
    assert_eq!(central.storage_classes.len(), 2);
    for class in ["fast-ssd", "standard", "other"] {
        let pvc = BTreeMap::from([(
            "headroom.dev/emergency-grow-critical-threshold".to_string(),
            "97".to_string(),
        )]);
        let m = effective("db/data", &pvc, Some((class, &BTreeMap::new())), &central);
        let v = validate(&m.spec, &Context::default());
        assert!(v.errors.is_empty(), "{class}: {:?}", v.errors);
        assert_eq!(
            m.provenance["limit"],
            if class == "fast-ssd" {
                Source::ConfigMapStorageClass
            } else {
                Source::ConfigMapDefault
            }
        );
    }
}
