//! The alert rules and dashboard in daemonset/monitoring: promtool checks and unit-tests the
//! rules, the PrometheusRule carries exactly rules.yaml, and every metric they (and the README)
//! name is one the agent exports.

mod support {
    pub mod promtool;
    pub mod reports;
}

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use headroom::decide::GrowKind;
use headroom::decide::VolumeRole;
use headroom::decide::pool::PoolView;
use headroom::decide::quota::{QuotaLine, QuotaView};
use headroom::metrics::Metrics;
use headroom::metrics::labels::{NotificationOutcome, ResizeResult, VolumeLabels};
use headroom::reclaim::ReclaimMetrics;
use headroom::reclaim::state::{Outcome, ReclaimRecord};
use support::reports::*;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/daemonset/monitoring");

fn read(rel: &str) -> String {
    let p = Path::new(DIR).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn yaml(rel: &str) -> serde_json::Value {
    serde_saphyr::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn promtool(args: &[&str]) {
    let Some(bin) = support::promtool::require_promtool() else {
        return;
    };
    let out = Command::new(bin)
        .args(args)
        .current_dir(DIR)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    assert!(text.contains("SUCCESS"), "promtool {args:?}:\n{text}");
}

#[test]
fn promtool_checks_the_rules() {
    promtool(&["check", "rules", "rules.yaml"]);
}

#[test]
fn promtool_unit_tests_every_alert() {
    // Every alert of rules.yaml has a test case, so a new alert cannot ship untested.
    let alerts: BTreeSet<String> = alert_rules()
        .into_iter()
        .map(|r| r["alert"].as_str().unwrap().to_string())
        .collect();
    let tests = yaml("tests/alerts_test.yaml");
    let tested: BTreeSet<String> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .filter(|c| !c["exp_alerts"].as_array().unwrap().is_empty())
        .map(|c| c["alertname"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(alerts, tested, "alerts without a firing test case");
    promtool(&["test", "rules", "tests/alerts_test.yaml"]);
}

fn alert_rules() -> Vec<serde_json::Value> {
    let rules = yaml("rules.yaml");
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect()
}

#[test]
fn prometheus_rule_carries_exactly_rules_yaml() {
    let pr = yaml("prometheusrule.yaml");
    assert_eq!(pr["kind"], "PrometheusRule");
    assert_eq!(
        pr["spec"],
        yaml("rules.yaml"),
        "copy rules.yaml's groups into prometheusrule.yaml's spec"
    );
    for r in alert_rules() {
        let a = &r["annotations"];
        for key in ["summary", "description", "runbook"] {
            assert!(
                a[key].as_str().is_some_and(|s| !s.is_empty()),
                "{}: no {key}",
                r["alert"]
            );
        }
    }
}

#[test]
fn pod_monitor_scrapes_the_metrics_port_and_keeps_our_namespace_label() {
    let pm = yaml("podmonitor.yaml");
    assert_eq!(pm["kind"], "PodMonitor");
    let ep = &pm["spec"]["podMetricsEndpoints"][0];
    assert_eq!(ep["port"], "metrics");
    assert_eq!(ep["path"], "/metrics");
    assert_eq!(ep["honorLabels"], true);
}

/// Every family name a fully populated agent exports, histogram suffixes included.
fn exported() -> BTreeSet<String> {
    let m = Metrics::new("node-a").unwrap();
    let mut hung = unmeasured("shop", "nfs");
    hung.not_measured = Some(headroom::probe::Unmeasured::ProbeTimeout);
    // A namespace with a storage quota: its claims' room is exported.
    let mut data = pg_data("shop", "pgdata-orders-1");
    data.quota = QuotaView::of(
        &[QuotaLine {
            quota: "storage".into(),
            resource: "requests.storage".into(),
            hard_bytes: 100 << 30,
            used_bytes: Some(40 << 30),
        }],
        false,
    );
    // A claim carved from a pool its driver publishes for this node.
    data.pool = Some(PoolView {
        class: "topolvm-provisioner".into(),
        segment: "topology.topolvm.io/node=node-a".into(),
        source: "CSIStorageCapacity kube-system/csisc-1".into(),
        free_bytes: 200 << 30,
        max_volume_bytes: None,
    });
    m.observe_scan(
        &[
            data,
            wal_at_limit("shop", "pgwal-orders-1"),
            hung,
            awaiting_remount("shop", "pgdata-orders-2"),
            recommended("shop", "pgdata-orders-3"),
        ],
        Duration::from_millis(50),
        at("2025-03-01T10:00:00Z"),
    );
    m.resize(
        VolumeLabels::new("shop", "pgdata-orders-1", VolumeRole::Data),
        GrowKind::Grow,
        ResizeResult::Success,
    );
    m.api_request("patch", 200);
    m.api_server("v1.34.4", "tested");
    m.notifications("team", NotificationOutcome::Sent, 1);
    m.watch_restart("pods");
    m.kubelet_disagreement(
        VolumeLabels::new("shop", "pgdata-orders-1", VolumeRole::Data),
        0.01,
    );
    // The agent registers the trim metrics into the same registry (src/agent/mod.rs).
    let reclaim = ReclaimMetrics::new().unwrap();
    reclaim.register(m.registry()).unwrap();
    reclaim.record(&ReclaimRecord {
        at: at("2025-03-01T10:00:00Z"),
        bytes: 1 << 20,
        duration_ms: 10,
        result: Outcome::Succeeded,
        node: "node-a".into(),
        error: None,
    });
    // And the webhook's, when it is served (src/agent/mod.rs `spawn_webhook`).
    headroom::webhook::metrics::WebhookMetrics::new(m.registry()).unwrap();
    parse(&m.encode().unwrap())
        .into_iter()
        .map(|s| s.name)
        .collect()
}

fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("headroom_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // `headroom_volume_*` style wildcards in prose are not names.
        if !tail[end..].starts_with('*') {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

#[test]
fn every_metric_in_rules_dashboard_and_tests_is_exported() {
    let exported = exported();
    let mut exprs = String::new();
    for r in alert_rules() {
        exprs.push_str(r["expr"].as_str().unwrap());
        exprs.push('\n');
    }
    let dash: serde_json::Value = serde_json::from_str(&read("dashboard.json")).unwrap();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push_str(t["expr"].as_str().unwrap());
            exprs.push('\n');
        }
    }
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            exprs.push_str(q);
        }
    }
    exprs.push_str(&read("tests/alerts_test.yaml"));
    let used = names_in(&exprs);
    assert!(used.len() > 15, "found too few names: {used:?}");
    let unknown: Vec<_> = used.difference(&exported).collect();
    assert!(unknown.is_empty(), "not exported by the agent: {unknown:?}");
}

#[test]
fn readme_documents_every_exported_metric() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    let documented = names_in(&readme);
    let families: BTreeSet<String> = exported()
        .into_iter()
        .map(|n| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| n.strip_suffix(s).filter(|b| b.ends_with("_seconds")))
                .map_or(n.clone(), str::to_string)
        })
        .collect();
    let missing: Vec<_> = families.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "docs/metrics.md does not document: {missing:?}"
    );
    let stale: Vec<_> = documented.difference(&families).collect();
    assert!(
        stale.is_empty(),
        "docs/metrics.md documents metrics the agent does not export: {stale:?}"
    );
}
