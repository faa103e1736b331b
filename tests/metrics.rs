//! The metrics as Prometheus scrapes them: encode a `Metrics` fed realistic reports, parse the
//! text format, check the series.

mod support {
    pub mod reports;
}

use std::time::Duration;

use headroom::decide::VolumeRole;
use headroom::decide::{BlockReason, GrowKind};
use headroom::metrics::Metrics;
use headroom::metrics::labels::{ResizeResult, VolumeLabels};
use support::reports::*;

const PG: &[(&str, &str)] = &[
    ("namespace", "shop"),
    ("persistentvolumeclaim", "pgdata-orders-1"),
    ("volume_role", "data"),
];

fn scrape(m: &Metrics) -> Vec<Sample> {
    parse(&m.encode().expect("encode"))
}

#[test]
fn a_postgres_data_volume_exports_every_series_with_joinable_labels() {
    let m = Metrics::new("node-a").unwrap();
    let reports = vec![pg_data("shop", "pgdata-orders-1")];
    let done = at("2025-03-01T10:00:01.5Z");
    m.observe_scan(&reports, Duration::from_millis(120), done);
    let s = scrape(&m);

    // Every series carries the node and is joinable with kubelet_volume_stats_*.
    for sample in s.iter().filter(|s| s.name.starts_with("headroom_volume_")) {
        assert_eq!(
            sample.labels.get("node").map(String::as_str),
            Some("node-a")
        );
        assert!(
            sample.labels.contains_key("persistentvolumeclaim"),
            "{sample:?}"
        );
        assert!(sample.labels.contains_key("namespace"), "{sample:?}");
    }
    assert_eq!(
        value(&s, "headroom_volume_capacity_bytes", PG),
        (10 * GI) as f64
    );
    assert_eq!(
        value(&s, "headroom_volume_used_bytes", PG),
        (8 * GI + GI / 2) as f64
    );
    assert_eq!(
        value(&s, "headroom_volume_available_bytes", PG),
        (GI + GI / 2) as f64
    );
    assert!((value(&s, "headroom_volume_used_ratio", PG) - 0.85).abs() < 1e-9);
    assert_eq!(value(&s, "headroom_volume_inodes", PG), 655_360.0);
    assert_eq!(value(&s, "headroom_volume_inodes_used", PG), 1_234.0);
    assert_eq!(value(&s, "headroom_volume_inodes_free", PG), 654_126.0);
    assert_eq!(
        value(&s, "headroom_volume_limit_bytes", PG),
        (50 * GI) as f64
    );
    assert_eq!(value(&s, "headroom_volume_at_limit", PG), 0.0);
    assert_eq!(value(&s, "headroom_volume_shared_filesystem", PG), 0.0);
    assert_eq!(
        value(&s, "headroom_volume_effective_size_bytes", PG),
        (10 * GI) as f64
    );
    assert_eq!(
        value(&s, "headroom_volume_target_size_bytes", PG),
        (12 * GI) as f64
    );
    assert_eq!(value(&s, "headroom_volume_seconds_to_full", PG), 3_600.0);
    assert_eq!(value(&s, "headroom_volume_seconds_to_limit", PG), 86_400.0);
    assert_eq!(
        value(&s, "headroom_volume_resize_budget_remaining", PG),
        2.0
    );

    // One state series per state, exactly one of them 1 (issue 24 added Emergency).
    let states = find(&s, "headroom_volume_state", PG);
    assert_eq!(states.len(), 6);
    let on: Vec<&str> = states
        .iter()
        .filter(|x| x.value == 1.0)
        .map(|x| x.labels["state"].as_str())
        .collect();
    assert_eq!(on, ["Blocked"]);
    // One blocked series per reason, the engine's reason set to 1.
    let blocked = find(&s, "headroom_volume_resize_blocked", PG);
    assert_eq!(blocked.len(), BlockReason::ALL.len());
    let on: Vec<&str> = blocked
        .iter()
        .filter(|x| x.value == 1.0)
        .map(|x| x.labels["reason"].as_str())
        .collect();
    assert_eq!(on, ["wal_archive_unhealthy"]);

    let info = find(&s, "headroom_volume_info", PG);
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].labels["storage_class"], "fast-ssd");
    assert_eq!(info[0].labels["measured_by"], "statfs");
    assert_eq!(info[0].labels["postgres_cluster"], "orders");

    assert_eq!(value(&s, "headroom_wal_archive_configured", PG), 1.0);
    assert_eq!(value(&s, "headroom_wal_archive_healthy", PG), 0.0);
    assert_eq!(value(&s, "headroom_wal_pending_archive_files", PG), 340.0);
    assert_eq!(
        value(&s, "headroom_wal_oldest_pending_seconds", PG),
        5_400.0
    );
    assert_eq!(value(&s, "headroom_wal_inactive_slots", PG), 1.0);
    assert_eq!(value(&s, "headroom_wal_size_bytes", PG), (6 * GI) as f64);
    let slot = [PG, &[("slot", "old_replica")]].concat();
    assert_eq!(
        value(&s, "headroom_wal_slot_retention_bytes", &slot),
        (3 * GI) as f64
    );

    assert_eq!(value(&s, "headroom_volumes_seen", &[]), 1.0);
    assert_eq!(
        value(&s, "headroom_last_successful_scan_timestamp_seconds", &[]),
        done.as_millisecond() as f64 / 1000.0
    );
    assert_eq!(value(&s, "headroom_scan_duration_seconds_count", &[]), 1.0);
    assert!((value(&s, "headroom_scan_duration_seconds_sum", &[]) - 0.12).abs() < 1e-9);
    assert_eq!(
        value(
            &s,
            "headroom_scan_duration_seconds_bucket",
            &[("le", "0.25")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "headroom_scan_duration_seconds_bucket",
            &[("le", "0.1")]
        ),
        0.0
    );
}

#[test]
fn unknown_values_are_absent_series_not_zero() {
    let m = Metrics::new("node-a").unwrap();
    m.observe_scan(
        &[unmeasured("shop", "scratch")],
        Duration::from_millis(5),
        at("2025-03-01T10:00:00Z"),
    );
    let s = scrape(&m);
    let vol = &[("persistentvolumeclaim", "scratch")];
    for absent in [
        "headroom_volume_capacity_bytes",
        "headroom_volume_used_bytes",
        "headroom_volume_used_ratio",
        "headroom_volume_inodes",
        "headroom_volume_limit_bytes",
        "headroom_volume_at_limit",
        "headroom_volume_target_size_bytes",
        "headroom_volume_seconds_to_full",
        "headroom_volume_seconds_to_limit",
        "headroom_wal_archive_healthy",
        "headroom_wal_pending_archive_files",
        "headroom_wal_inactive_slots",
    ] {
        assert!(
            find(&s, absent, vol).is_empty(),
            "{absent} should be absent"
        );
    }
    // What is known is still there.
    assert_eq!(
        value(&s, "headroom_volume_resize_budget_remaining", vol),
        3.0
    );
    assert_eq!(
        value(
            &s,
            "headroom_volume_state",
            &[vol[0], ("state", "Balanced")]
        ),
        1.0
    );
    assert_eq!(value(&s, "headroom_volume_info", vol), 1.0);
}

#[test]
fn a_disabled_volume_has_no_budget_series() {
    let m = Metrics::new("node-a").unwrap();
    let mut r = unmeasured("shop", "optout");
    r.decision.verdict = headroom::decide::Verdict::Blocked {
        reason: BlockReason::Disabled,
    };
    r.decision.budget_left = 0;
    m.observe_scan(&[r], Duration::ZERO, at("2025-03-01T10:00:00Z"));
    let s = scrape(&m);
    let vol = &[("persistentvolumeclaim", "optout")];
    assert!(find(&s, "headroom_volume_resize_budget_remaining", vol).is_empty());
    let disabled = [vol[0], ("reason", "disabled")];
    assert_eq!(value(&s, "headroom_volume_resize_blocked", &disabled), 1.0);
}

#[test]
fn wal_volume_at_limit_and_growing() {
    let m = Metrics::new("node-a").unwrap();
    let mut r = wal_at_limit("shop", "pgwal-orders-1");
    // Zero inodes is btrfs's "no inode limit": unknown, not full.
    r.measurement.as_mut().unwrap().inodes_total = 0;
    m.observe_scan(&[r], Duration::from_millis(5), at("2025-03-01T10:00:00Z"));
    let s = scrape(&m);
    let vol = &[
        ("persistentvolumeclaim", "pgwal-orders-1"),
        ("volume_role", "wal"),
    ];
    assert_eq!(value(&s, "headroom_volume_at_limit", vol), 1.0);
    assert_eq!(
        value(
            &s,
            "headroom_volume_state",
            &[vol[0], ("state", "NeedsGrow")]
        ),
        1.0
    );
    assert!(
        find(&s, "headroom_volume_resize_blocked", vol)
            .iter()
            .all(|x| x.value == 0.0)
    );
    assert_eq!(value(&s, "headroom_wal_archive_healthy", vol), 1.0);
    assert_eq!(value(&s, "headroom_wal_pending_archive_files", vol), 0.0);
    assert_eq!(value(&s, "headroom_wal_inactive_slots", vol), 0.0);
    assert!(find(&s, "headroom_wal_oldest_pending_seconds", vol).is_empty());
    assert!(find(&s, "headroom_wal_slot_retention_bytes", vol).is_empty());
    assert!(find(&s, "headroom_volume_inodes", vol).is_empty());
    // Its previous grow landed at 09:00 (the history's landed time): HeadroomResizeOccurred's.
    assert_eq!(
        value(
            &s,
            "headroom_volume_last_resize_timestamp_seconds",
            &[vol[0], ("kind", "EmergencyGrow")]
        ),
        at("2025-03-01T09:00:00Z").as_second() as f64
    );
}

#[test]
fn shared_filesystems_are_flagged() {
    let m = Metrics::new("node-a").unwrap();
    let mut nfs = unmeasured("shop", "uploads");
    nfs.fs_class = "shared_network".into();
    let mut local = unmeasured("shop", "cache");
    local.shared_with = vec!["/var/lib/kubelet/pods/y/volumes/other".into()];
    let own = unmeasured("shop", "own");
    m.observe_scan(
        &[nfs, local, own],
        Duration::ZERO,
        at("2025-03-01T10:00:00Z"),
    );
    let s = scrape(&m);
    let shared = |pvc| {
        value(
            &s,
            "headroom_volume_shared_filesystem",
            &[("persistentvolumeclaim", pvc)],
        )
    };
    assert_eq!(
        (shared("uploads"), shared("cache"), shared("own")),
        (1.0, 1.0, 0.0)
    );
}

#[test]
fn series_of_volumes_that_left_the_node_are_removed() {
    let m = Metrics::new("node-a").unwrap();
    let t = at("2025-03-01T10:00:00Z");
    m.observe_scan(
        &[
            pg_data("shop", "pgdata-orders-1"),
            unmeasured("shop", "scratch"),
        ],
        Duration::ZERO,
        t,
    );
    m.resize(
        VolumeLabels::new("shop", "pgdata-orders-1", VolumeRole::Data),
        GrowKind::Grow,
        ResizeResult::Success,
    );
    m.resize(
        VolumeLabels::new("shop", "scratch", VolumeRole::Other),
        GrowKind::EmergencyGrow,
        ResizeResult::Error,
    );
    m.kubelet_disagreement(
        VolumeLabels::new("shop", "pgdata-orders-1", VolumeRole::Data),
        0.02,
    );
    m.kubelet_disagreement(VolumeLabels::new("shop", "scratch", VolumeRole::Other), 0.3);
    let before = scrape(&m);
    assert!(!find(&before, "headroom_resizes_total", PG).is_empty());
    assert!(!find(&before, "headroom_wal_slot_retention_bytes", PG).is_empty());

    // The Postgres pod moved to another node; its slot was dropped elsewhere in the meantime.
    m.observe_scan(&[unmeasured("shop", "scratch")], Duration::ZERO, t);
    let after = scrape(&m);
    let stale: Vec<_> = after
        .iter()
        .filter(|x| {
            x.labels.get("persistentvolumeclaim").map(String::as_str) == Some("pgdata-orders-1")
        })
        .collect();
    assert!(stale.is_empty(), "stale series: {stale:?}");
    let scratch = &[("persistentvolumeclaim", "scratch")];
    assert_eq!(
        value(
            &after,
            "headroom_resizes_total",
            &[scratch[0], ("kind", "EmergencyGrow"), ("result", "error")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "headroom_kubelet_statfs_disagreement_ratio",
            scratch
        ),
        0.3
    );
    assert_eq!(value(&after, "headroom_volumes_seen", &[]), 1.0);
}

#[test]
fn counters_for_resizes_api_requests_and_watch_restarts() {
    let m = Metrics::new("node-b").unwrap();
    m.observe_scan(
        &[pg_data("shop", "pgdata-orders-1")],
        Duration::ZERO,
        at("2025-03-01T10:00:00Z"),
    );
    for _ in 0..3 {
        m.resize(
            VolumeLabels::new("shop", "pgdata-orders-1", VolumeRole::Data),
            GrowKind::ScheduledGrow,
            ResizeResult::Success,
        );
    }
    m.resize(
        VolumeLabels::new("shop", "pgdata-orders-1", VolumeRole::Data),
        GrowKind::ScheduledGrow,
        ResizeResult::Conflict,
    );
    m.api_request("patch", 200);
    m.api_request("patch", 200);
    m.api_request("list", 403);
    m.watch_restart("pods");
    let s = scrape(&m);
    let ok = [PG, &[("kind", "ScheduledGrow"), ("result", "success")]].concat();
    assert_eq!(value(&s, "headroom_resizes_total", &ok), 3.0);
    let conflict = [PG, &[("kind", "ScheduledGrow"), ("result", "conflict")]].concat();
    assert_eq!(value(&s, "headroom_resizes_total", &conflict), 1.0);
    assert_eq!(
        value(
            &s,
            "headroom_api_requests_total",
            &[("verb", "patch"), ("code", "200")]
        ),
        2.0
    );
    assert_eq!(
        value(
            &s,
            "headroom_api_requests_total",
            &[("verb", "list"), ("code", "403")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "headroom_watch_restarts_total",
            &[("watcher", "pods"), ("node", "node-b")]
        ),
        1.0
    );
}

#[test]
fn each_metrics_has_its_own_registry() {
    // Two agents in one process (tests, or a restart in place) must not collide on registration.
    let a = Metrics::new("node-a").unwrap();
    let b = Metrics::new("node-b").unwrap();
    a.watch_restart("pvcs");
    let sb = scrape(&b);
    assert!(find(&sb, "headroom_watch_restarts_total", &[]).is_empty());
    assert!(
        prometheus::gather().is_empty(),
        "the global default registry stays empty"
    );
}

/// Issue 24: a tablespace volume's series carry the `tablespace` label (the RFC's), its resize
/// counter too; other volumes' series have no such label.
#[test]
fn tablespace_volumes_carry_their_tablespace_label() {
    let m = Metrics::new("node-a").unwrap();
    let mut tbs = pg_data("shop", "pgtbs-orders-1");
    tbs.role = headroom::decide::VolumeRole::Tablespace;
    tbs.tablespace = Some("archive".into());
    let data = pg_data("shop", "pgdata-orders-1");
    m.observe_scan(
        &[tbs.clone(), data.clone()],
        Duration::ZERO,
        at("2025-03-01T10:00:00Z"),
    );
    m.resize_of(&tbs, GrowKind::Grow, ResizeResult::Success);
    m.resize_of(&data, GrowKind::Grow, ResizeResult::Success);
    let s = scrape(&m);
    let per_volume = |pvc: &str| -> Vec<Sample> {
        s.iter()
            .filter(|x| {
                x.labels.get("persistentvolumeclaim").map(String::as_str) == Some(pvc)
                    && x.name.starts_with("headroom_")
            })
            .cloned()
            .collect()
    };
    let tbs_series = per_volume("pgtbs-orders-1");
    assert!(tbs_series.len() > 30, "{}", tbs_series.len());
    for x in &tbs_series {
        assert_eq!(
            x.labels.get("tablespace").map(String::as_str),
            Some("archive"),
            "{x:?}"
        );
    }
    assert!(
        tbs_series
            .iter()
            .any(|x| x.name == "headroom_resizes_total" && x.value == 1.0)
    );
    let data_series = per_volume("pgdata-orders-1");
    assert!(
        data_series
            .iter()
            .any(|x| x.name == "headroom_resizes_total")
    );
    assert!(
        data_series
            .iter()
            .all(|x| !x.labels.contains_key("tablespace")),
        "{data_series:?}"
    );
    let used = [
        ("persistentvolumeclaim", "pgtbs-orders-1"),
        ("volume_role", "tablespace"),
        ("tablespace", "archive"),
    ];
    assert!((value(&s, "headroom_volume_used_ratio", &used) - 0.85).abs() < 1e-9);
}
