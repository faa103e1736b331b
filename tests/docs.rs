//! The documentation holds together (issue 35): README.md is a landing page short enough to read
//! at once, with the two set-up commands at its top; every section the README had before it moved
//! to docs/ lives on as a heading in README.md or docs/; every relative link and anchor in the
//! project's Markdown resolves.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The README's headings before the references moved to docs/ (issue 35).
const HEADINGS_BEFORE_THE_SPLIT: &[&str] = &[
    "headroom",
    "Quick start on a fresh machine",
    "Policy",
    "Growing before the threshold (`trigger.predictive`)",
    "One grow per modification interval (`modificationInterval`)",
    "Where a volume's policy comes from",
    "Convergent mode",
    "Getting space back: headroom never shrinks",
    "Triggers: percent used, free space, or both",
    "Reclaim space (fstrim)",
    "What the agent does",
    "New claims created at size (the webhook overlay)",
    "Logical volumes",
    "Namespace quotas",
    "The kubelet's numbers",
    "Failure modes",
    "Install",
    "With Helm",
    "With kustomize",
    "Migrating from topolvm/pvc-autoresizer",
    "WAL health",
    "Postgres credentials",
    "`headroom status`: what headroom did, cluster-wide",
    "Metrics and endpoints",
];

/// README.md, docs/*.md and the other Markdown a reader is sent to.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.extend(
        [
            "README.md",
            "SECURITY.md",
            "BENCHMARKS.md",
            "tests/README.md",
        ]
        .iter()
        .map(|f| root.join(f)),
    );
    docs
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

fn headings(text: &str) -> Vec<String> {
    prose(text)
        .into_iter()
        .filter_map(|l| {
            let hashes = l.len() - l.trim_start_matches('#').len();
            (1..=6)
                .contains(&hashes)
                .then(|| l[hashes..].strip_prefix(' '))
                .flatten()
                .map(|h| h.trim().to_string())
        })
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to
/// `-`; a repeated one gets `-1`, `-2`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    headings(text)
        .into_iter()
        .map(|h| {
            let slug: String = h
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            let n = seen.entry(slug.clone()).or_default();
            let anchor = if *n == 0 { slug } else { format!("{slug}-{n}") };
            *n += 1;
            anchor
        })
        .collect()
}

/// The targets of the inline links `[text](target)` in `text`'s prose.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let tail = &rest[i + 2..];
            let Some(end) = tail.find(')') else { break };
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    out
}

#[test]
fn the_readme_is_a_landing_page_with_the_two_commands_at_its_top() {
    let readme = read(&Path::new(ROOT).join("README.md"));
    let lines = readme.lines().count();
    assert!(lines < 300, "README.md is {lines} lines");
    let top: String = readme.lines().take(40).collect::<Vec<_>>().join("\n");
    for command in ["cargo run --release -- scan", "./scripts/test.sh"] {
        assert!(top.contains(command), "README.md's top lacks `{command}`");
    }
}

#[test]
fn every_section_of_the_old_readme_lives_on() {
    let mut all = BTreeSet::new();
    for doc in documents()
        .iter()
        .filter(|d| d.ends_with("README.md") || d.parent().is_some_and(|p| p.ends_with("docs")))
    {
        all.extend(headings(&read(doc)));
    }
    let lost: Vec<&&str> = HEADINGS_BEFORE_THE_SPLIT
        .iter()
        .filter(|h| !all.contains(**h))
        .collect();
    assert!(
        lost.is_empty(),
        "headings no document has any more: {lost:?}"
    );
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = read(&doc);
        let dir = doc.parent().expect("a document's folder");
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                doc.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!("{}: {target} (no such file)", doc.display()));
                continue;
            }
            if !anchor.is_empty()
                && file.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&file)).contains(anchor)
            {
                broken.push(format!("{}: {target} (no such heading)", doc.display()));
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} links found: the parser misses them"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_anchor_rule_is_githubs() {
    let a = anchors(
        "# Migrating from topolvm/pvc-autoresizer\n## `headroom status`: what headroom did, cluster-wide\n## Logical volumes\n## Logical volumes\n",
    );
    for want in [
        "migrating-from-topolvmpvc-autoresizer",
        "headroom-status-what-headroom-did-cluster-wide",
        "logical-volumes",
        "logical-volumes-1",
    ] {
        assert!(a.contains(want), "{want} not in {a:?}");
    }
}

/// Every alert's `runbook_url` points at its own section of docs/operations.md, and every
/// section there names an alert that exists (kube-prometheus's convention).
#[test]
fn every_alert_links_its_runbook_section() {
    let root = Path::new(ROOT);
    let rules: serde_json::Value =
        serde_saphyr::from_str(&read(&root.join("daemonset/monitoring/rules.yaml")))
            .expect("rules.yaml");
    let operations = read(&root.join("docs/operations.md"));
    let sections: BTreeSet<String> = operations
        .split("\n## Runbooks")
        .nth(1)
        .map(headings)
        .unwrap_or_default()
        .into_iter()
        .collect();
    let anchors = anchors(&operations);
    let mut alerts = BTreeSet::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            alerts.insert(alert.to_string());
            let url = rule["annotations"]["runbook_url"].as_str().unwrap_or("");
            assert_eq!(
                url,
                format!("docs/operations.md#{}", alert.to_lowercase()),
                "{alert}'s runbook_url"
            );
            assert!(
                anchors.contains(&alert.to_lowercase()),
                "docs/operations.md has no section for {alert}"
            );
        }
    }
    assert!(alerts.len() > 10, "found {} alerts", alerts.len());
    let orphans: Vec<&String> = sections.difference(&alerts).collect();
    assert!(
        orphans.is_empty(),
        "runbook sections without an alert: {orphans:?}"
    );
}
