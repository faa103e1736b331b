use super::*;
use crate::policy::test_map as map;

const CM: &str = "headroom/hp";

fn sections(text: &str) -> Vec<Section> {
    parse(text, CM).expect("a list")
}

const PG_MAIN: &str = "- namespaces: [db]\n  matchLabels: {cnpg.io/cluster: pg-main}\n  policy: {enabled: true, limit: 50Gi}\n- matchExpressions:\n  - {key: team, operator: In, values: [a, b]}\n  - {key: scratch, operator: DoesNotExist}\n  policy: {limit: 5Gi}\n";

#[test]
fn the_first_matching_section_wins() {
    let s = sections(PG_MAIN);
    assert!(s.iter().all(|s| s.errors.is_empty()), "{s:?}");
    let pg = map(&[("cnpg.io/cluster", "pg-main"), ("team", "a")]);
    let Matched::Section(m) = first_match(&s, "db", &pg) else {
        panic!("pg-main in db");
    };
    assert_eq!(m.index, 0);
    assert_eq!(m.policy.get("limit").map(|r| r.text.as_str()), Some("50Gi"));
    // The same labels in another namespace: the first section does not list it.
    let Matched::Section(m) = first_match(&s, "other", &pg) else {
        panic!("team a in other");
    };
    assert_eq!(m.index, 1);
    // Another cluster, another team, or a label the second section excludes: no section.
    let other = map(&[("cnpg.io/cluster", "pg-other")]);
    assert_eq!(first_match(&s, "db", &other), Matched::None);
    let scratch = map(&[("team", "b"), ("scratch", "")]);
    assert_eq!(first_match(&s, "db", &scratch), Matched::None);
    assert_eq!(
        first_match(&s, "db", &map(&[("team", "b")])),
        Matched::Section(&s[1])
    );
}

#[test]
fn not_in_matches_a_claim_without_the_label() {
    let s = sections(
        "- matchExpressions: [{key: tier, operator: NotIn, values: [dev]}]\n  policy: {limit: 1Gi}\n",
    );
    assert_eq!(
        first_match(&s, "x", &BTreeMap::new()),
        Matched::Section(&s[0])
    );
    assert_eq!(
        first_match(&s, "x", &map(&[("tier", "dev")])),
        Matched::None
    );
}

#[test]
fn an_invalid_expression_names_the_key_section_and_field() {
    let s = sections(
        "- matchLabels: {app: a}\n  policy: {limit: 1Gi}\n- namespaces: [db]\n  matchExpressions:\n  - {key: cnpg.io/cluster, operator: Equals, values: [pg-main]}\n  - {key: 'bad key', operator: Exists}\n  - {key: role, operator: In}\n  policy: {limit: 2Gi}\n",
    );
    let fields: Vec<String> = s[1].errors.iter().map(|e| e.finding().field).collect();
    assert_eq!(
        fields,
        [
            "selectors.yaml[1].matchExpressions[0].operator",
            "selectors.yaml[1].matchExpressions[1].key",
            "selectors.yaml[1].matchExpressions[2].values",
        ]
    );
    let msg = s[1].errors[0].to_string();
    assert!(
        msg.starts_with("ConfigMap headroom/hp key selectors.yaml, section 1, matchExpressions[0].operator: 'Equals' is not an operator"),
        "{msg}"
    );
    // The broken section refuses the claims of db that reach it, not those an earlier section
    // matched, nor those of a namespace it does not list.
    assert_eq!(
        first_match(&s, "db", &map(&[("app", "b")])),
        Matched::Broken(&s[1])
    );
    assert_eq!(
        first_match(&s, "db", &map(&[("app", "a")])),
        Matched::Section(&s[0])
    );
    assert_eq!(first_match(&s, "web", &map(&[("app", "b")])), Matched::None);
}

#[test]
fn a_broken_namespace_list_refuses_every_namespace() {
    let s = sections("- namespaces: [Payments]\n  policy: {limit: 1Gi}\n");
    assert_eq!(
        s[0].errors[0].finding().field,
        "selectors.yaml[0].namespaces[0]"
    );
    assert_eq!(
        first_match(&s, "web", &BTreeMap::new()),
        Matched::Broken(&s[0])
    );
}

#[test]
fn shapes_that_are_not_sections_are_errors() {
    let e = parse("policy: {limit: 1Gi}\n", CM).expect_err("a mapping");
    assert!(e.to_string().contains("expected a list of sections"), "{e}");
    assert!(parse("- [a\n", CM).is_err());
    assert!(sections("").is_empty());
    let s = sections("- matchLabels: {a: b}\n- 3\n- {matchLabels: {a: b}, polcy: {}}\n");
    assert_eq!(s[0].errors[0].finding().field, "selectors.yaml[0].policy");
    assert_eq!(
        s[1].errors[0].finding().field,
        "selectors.yaml[1].(section)"
    );
    let fields: Vec<String> = s[2].errors.iter().map(|e| e.finding().field).collect();
    assert_eq!(
        fields,
        ["selectors.yaml[2].polcy", "selectors.yaml[2].policy"]
    );
}

/// Issue 49: the same sections kept as a file are read alike, the file named where the
/// ConfigMap's key would be, in the section's messages and its policy's.
#[test]
fn a_file_of_sections_is_read_as_the_configmap_key_and_named() {
    let text = "- matchExpressions: [{key: app, operator: Equals}]\n  policy: {limit: 1Gi}\n- policy: {limt: 1Gi}\n";
    let from_file = parse_file(text, "selectors.yaml").expect("a list");
    let from_key = sections(text);
    let fields = |s: &[Section]| -> Vec<String> {
        s.iter()
            .flat_map(|s| s.errors.iter().map(|e| e.finding().field))
            .collect()
    };
    assert_eq!(fields(&from_file), fields(&from_key));
    assert_eq!(
        fields(&from_file),
        ["selectors.yaml[0].matchExpressions[0].operator"]
    );
    let msg = from_file[0].errors[0].to_string();
    assert!(
        msg.starts_with("selector sections file selectors.yaml, section 0, matchExpressions[0].operator: 'Equals'"),
        "{msg}"
    );
    let problem = &from_file[1].policy.problems[0];
    assert!(
        problem
            .message
            .contains("(in selector sections file selectors.yaml, section 1)"),
        "{problem:?}"
    );
    let e = parse_file("limit: 1Gi\n", "selectors.yaml").expect_err("a mapping");
    assert!(
        e.to_string()
            .starts_with("selector sections file selectors.yaml: expected a list of sections"),
        "{e}"
    );
}

#[test]
fn hostile_selectors_never_panic() {
    for text in [
        "- matchLabels: {'': ''}\n  policy: {}\n",
        "- matchExpressions: [{key: [a], operator: {x: 1}, values: x}]\n  policy: {}\n",
        "- namespaces: {a: b}\n  matchLabels: [a]\n  matchExpressions: 3\n  policy: [1]\n",
        "- namespaces: []\n  policy: {}\n",
        &format!(
            "- matchLabels: {{{}: v}}\n  policy: {{}}\n",
            "a".repeat(300)
        ),
    ] {
        let s = sections(text);
        assert!(
            !s[0].errors.is_empty() || !s[0].policy.problems.is_empty(),
            "{text}"
        );
        let _ = first_match(&s, "db", &map(&[("a", "b")]));
    }
}
