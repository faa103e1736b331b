//! The per-volume series as scraped: names, label order, one-hot families, and volumes that
//! leave.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::*;
use crate::decide::{ClaimState, Decision, Measurement, ResizeState, State, Verdict, VolumeRole};
use crate::quantity::GI;
use crate::report::MeasuredBy;

/// A data volume `db/<pvc>` of 10Gi on node n1, limit 100Gi, balanced (also the notifications'
/// fixture).
pub(crate) fn report(pvc: &str, used: Option<u64>) -> VolumeReport {
    VolumeReport {
        logical: None,
        namespace: "db".into(),
        pvc: pvc.into(),
        pv: format!("pv-{pvc}"),
        node: "n1".into(),
        storage_class: Some("fast".into()),
        role: VolumeRole::Data,
        tablespace: None,
        instance: None,
        postgres_cluster: None,
        mount_path: "/m".into(),
        fs_class: "owned_block".into(),
        shared_with: vec![],
        measurement: used.map(|u| Measurement {
            capacity_bytes: 10 * GI,
            used_bytes: u,
            available_bytes: 10 * GI - u,
            inodes_total: 100,
            inodes_used: 10,
        }),
        measured_by: MeasuredBy::Statfs,
        measured_at: Some(Timestamp::from_second(1_700_000_000).expect("time")),
        not_measured: None,
        limit_bytes: Some(100 * GI),
        provenance: BTreeMap::new(),
        policy_errors: vec![],
        policy_warnings: vec![],
        future_history: None,
        claim: ClaimState {
            request_bytes: 10 * GI,
            capacity_bytes: 10 * GI,
            resize: ResizeState::Idle,
        },
        decision: Decision {
            budget_left: 3,
            ..Decision::bare(Verdict::NoAction {
                state: State::Balanced,
            })
        },
        wal: None,
        last_action: None,
        fill_rate: None,
        quota: None,
        pool: None,
        enforced: None,
        evaluated_at: Timestamp::from_second(1_700_000_000).expect("time"),
    }
}

fn scrape(m: &Metrics) -> String {
    m.encode().expect("encode")
}

fn lines<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

#[test]
fn a_scan_s_series_read_as_a_gauge_vec_s_did() {
    let m = Metrics::new("n1").expect("metrics");
    let now = Timestamp::from_second(1_700_000_010).expect("time");
    m.observe_scan(
        &[report("a", Some(GI)), report("b", None)],
        Duration::from_millis(5),
        now,
    );
    let text = scrape(&m);
    // Labels sorted by name, then the registry's node label.
    assert_eq!(
        lines(&text, "headroom_volume_used_bytes"),
        [
            "headroom_volume_used_bytes{namespace=\"db\",persistentvolumeclaim=\"a\",volume_role=\"data\",node=\"n1\"} 1073741824"
        ]
    );
    assert_eq!(
        lines(&text, "headroom_volume_info{"),
        [
            "headroom_volume_info{fs_class=\"owned_block\",measured_by=\"statfs\",namespace=\"db\",persistentvolumeclaim=\"a\",postgres_cluster=\"\",pv=\"pv-a\",storage_class=\"fast\",volume_role=\"data\",node=\"n1\"} 1",
            "headroom_volume_info{fs_class=\"owned_block\",measured_by=\"statfs\",namespace=\"db\",persistentvolumeclaim=\"b\",postgres_cluster=\"\",pv=\"pv-b\",storage_class=\"fast\",volume_role=\"data\",node=\"n1\"} 1",
        ]
    );
    assert_eq!(
        lines(&text, "# TYPE headroom_volume_used_bytes gauge").len(),
        1
    );
    assert_eq!(
        lines(&text, "# HELP headroom_volume_used_bytes Bytes used.").len(),
        1
    );
    // One-hot: every state once per volume, the current one 1 (issue 24 added the RFC's
    // Emergency beside the engine's states and Blocked).
    let states = lines(&text, "headroom_volume_state{");
    assert_eq!(states.len(), 2 * (State::ALL.len() + 2));
    assert_eq!(states.iter().filter(|l| l.ends_with(" 1")).count(), 2);
    assert!(states.contains(
        &"headroom_volume_state{namespace=\"db\",persistentvolumeclaim=\"a\",state=\"Balanced\",volume_role=\"data\",node=\"n1\"} 1"
    ));
    // Unknown values are absent, not 0.
    assert!(lines(&text, "headroom_volume_capacity_bytes{").len() == 1);
    assert!(lines(&text, "headroom_volume_target_size_bytes{").is_empty());
    assert!(lines(&text, "headroom_wal_").is_empty());
}

#[test]
fn a_volume_that_left_the_node_loses_its_series_and_a_repeated_report_counts_once() {
    let m = Metrics::new("n1").expect("metrics");
    let now = Timestamp::from_second(1_700_000_010).expect("time");
    m.observe_scan(
        &[report("a", Some(GI)), report("b", Some(GI))],
        Duration::ZERO,
        now,
    );
    m.observe_scan(
        &[report("b", Some(GI)), report("b", Some(2 * GI))],
        Duration::ZERO,
        now,
    );
    let text = scrape(&m);
    assert!(!text.contains("persistentvolumeclaim=\"a\""), "{text}");
    assert_eq!(
        lines(&text, "headroom_volume_used_bytes{"),
        [
            "headroom_volume_used_bytes{namespace=\"db\",persistentvolumeclaim=\"b\",volume_role=\"data\",node=\"n1\"} 2147483648"
        ]
    );
    assert_eq!(lines(&text, "headroom_volume_info{").len(), 1);
    m.observe_scan(&[], Duration::ZERO, now);
    assert!(lines(&scrape(&m), "headroom_volume_").is_empty());
}
