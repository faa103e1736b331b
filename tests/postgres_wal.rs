//! WAL health against a real PostgreSQL started by each test (issue 4, scenarios 1-6). headroom
//! always connects as the README's `pg_monitor` role, so every scenario also proves that role is
//! enough for every query.

mod support {
    pub mod pg;
    pub mod ports;
    pub mod wal_engine;
}

use std::path::Path;
use std::time::Duration;

use headroom::decide::{BlockReason, Decision, VolumeRole, WalHealth};
use headroom::postgres::{SqlTarget, gather};
use jiff::Timestamp;
use support::pg::{Cluster, Options, poll, require_postgres};
use support::wal_engine::{GI, decide_with};

const WAIT: Duration = Duration::from_secs(60);

fn target(c: &Cluster, user: &str, password_file: &Path, sslmode: &str) -> SqlTarget {
    let mut t = SqlTarget::from_dsn(&c.dsn(user, sslmode)).unwrap();
    t.set_password_file(password_file).unwrap();
    t
}

async fn both(c: &Cluster, t: &SqlTarget, max_pending: u64) -> WalHealth {
    gather(Some(&c.data), Some(t), max_pending, Timestamp::now()).await
}

/// A small `maxSlotRetentionBytes`: the stuck slot of scenario 3 holds more.
const SMALL_SLOT_LIMIT: u64 = 32 << 20;

/// The same health through the engine for a WAL volume, and for a single data volume holding
/// WAL with and without `acknowledgeWALRisk`: `expected` blocks, or `None` grows.
fn assert_engine(
    wal: &WalHealth,
    max_pending: u64,
    max_slot: u64,
    expected: Option<BlockReason>,
) -> Decision {
    let data_unacked = decide_with(wal, VolumeRole::Data, false, max_pending, max_slot);
    assert_eq!(
        data_unacked.blocked_reason(),
        Some(BlockReason::WalRiskNotAcknowledged),
        "{data_unacked:?}"
    );
    let mut last = None;
    for (role, ack) in [(VolumeRole::Wal, false), (VolumeRole::Data, true)] {
        let d = decide_with(wal, role, ack, max_pending, max_slot);
        assert_eq!(d.blocked_reason(), expected, "{role:?}: {d:?} from {wal:?}");
        if expected.is_none() {
            assert!(d.grow_to().is_some(), "{role:?}: {d:?}");
        }
        last = Some(d);
    }
    last.unwrap()
}

fn archived_files(c: &Cluster) -> usize {
    std::fs::read_dir(&c.archive).unwrap().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_working_archive_is_healthy_and_backlog_drains() {
    let Some(bin) = require_postgres() else {
        return;
    };
    let c = Cluster::start(&bin, &Options::archiving("cp %p {archive}/%f"));
    let t = target(&c, "headroom", &c.monitor_role().await, "disable");
    c.generate_wal(&c.superuser().await, 3).await;

    let h = poll("the archive to drain", WAIT, || async {
        let h = both(&c, &t, 100).await;
        (h.pending_files == Some(0) && archived_files(&c) >= 3).then_some(h)
    })
    .await;
    assert_eq!(h.archive_configured, Some(true), "{h:?}");
    assert_eq!(h.archive_healthy, Some(true), "{h:?}");
    assert!(h.sources.volume && h.sources.sql, "{h:?}");
    assert_eq!(h.detail.failed_count, Some(0));
    assert!(h.detail.last_archived_time.is_some());
    assert_eq!(h.detail.in_recovery, Some(false));
    assert_eq!(h.detail.wal_on_volume, Some(true));
    assert!(h.detail.wal_bytes.unwrap() >= 16 << 20, "{h:?}");
    assert_eq!(h.inactive_slots, Some(vec![]));
    assert!(
        h.detail.errors.is_empty() && h.detail.problems.is_empty(),
        "{h:?}"
    );

    // Without credentials: the .done markers show archiving is on, and nothing waits.
    let v = gather(Some(&c.data), None, 100, Timestamp::now()).await;
    assert_eq!(
        (v.archive_configured, v.archive_healthy, v.pending_files),
        (Some(true), Some(true), Some(0))
    );
    assert!(v.sources.volume && !v.sources.sql);
    // The data directory's pg_replslot answers without SQL (issue 21): no slots here.
    assert_eq!(v.inactive_slots, Some(vec![]), "slots come from the volume");
    assert_eq!(v.detail.archive_mode.as_deref(), Some("on"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_failing_archive_command_is_unhealthy_from_both_sources() {
    let Some(bin) = require_postgres() else {
        return;
    };
    // Archiving works first, then breaks: the last failure must be newer than the last success.
    // The command fails while a marker file exists, so breaking it is immediate (a reload of
    // archive_command reaches the archiver process only some time later, and segments switched
    // meanwhile would still be archived).
    let c = Cluster::start(
        &bin,
        &Options::archiving("test ! -e {archive}.broken && cp %p {archive}/%f"),
    );
    let t = target(&c, "headroom", &c.monitor_role().await, "disable");
    let su = c.superuser().await;
    c.generate_wal(&su, 1).await;
    poll("the first segment to be archived", WAIT, || async {
        let h = both(&c, &t, 100).await;
        (h.pending_files == Some(0) && h.detail.last_archived_time.is_some()).then_some(())
    })
    .await;
    std::fs::write(format!("{}.broken", c.archive.display()), b"").unwrap();
    c.generate_wal(&su, 4).await;

    let h = poll("failed_count > 0 and .ready files", WAIT, || async {
        let h = both(&c, &t, 100).await;
        (h.detail.failed_count.unwrap_or(0) > 0 && h.pending_files.unwrap_or(0) >= 4).then_some(h)
    })
    .await;
    assert_eq!(
        (h.archive_configured, h.archive_healthy),
        (Some(true), Some(false)),
        "{h:?}"
    );
    assert!(
        h.detail
            .problems
            .iter()
            .any(|p| p.contains("archiving fails")),
        "{h:?}"
    );
    assert!(
        h.detail.last_failed_time > h.detail.last_archived_time,
        "{h:?}"
    );
    assert_eq!(archived_files(&c), 1);
    assert_engine(
        &h,
        100,
        SMALL_SLOT_LIMIT,
        Some(BlockReason::WalArchiveUnhealthy),
    );
    assert_engine(&h, 3, SMALL_SLOT_LIMIT, Some(BlockReason::WalPendingFiles));

    // The volume alone counts the backlog; over the limit it is unhealthy...
    let v = gather(Some(&c.data), None, 3, Timestamp::now()).await;
    assert_eq!(
        (v.archive_configured, v.archive_healthy),
        (Some(true), Some(false)),
        "{v:?}"
    );
    assert!(v.pending_files.unwrap() >= 4);
    assert!(
        v.detail
            .problems
            .iter()
            .any(|p| p.contains("wait to be archived")),
        "{v:?}"
    );
    // ...but a young backlog under the limit looks healthy from the volume alone (by design:
    // one snapshot cannot tell a failing archiver from a busy one until the oldest gets stale).
    let v = gather(Some(&c.data), None, 100, Timestamp::now()).await;
    assert_eq!(v.archive_healthy, Some(true), "{v:?}");

    // SQL alone sees the same backlog through pg_ls_archive_statusdir().
    let s = gather(None, Some(&t), 100, Timestamp::now()).await;
    assert_eq!(s.archive_healthy, Some(false), "{s:?}");
    assert!(s.pending_files.unwrap() >= 4, "{s:?}");
    assert!(s.oldest_pending_seconds.is_some());

    // The CLI prints the same classification as JSON, null for what it cannot know.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args([
            "wal-health",
            "--format",
            "json",
            "--max-pending-wal-files",
            "100",
            "--dsn",
            &c.dsn("headroom", "disable"),
        ])
        .arg("--password-file")
        .arg(c.dir().join("headroom.password"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["archive_configured"], true, "{json}");
    assert_eq!(json["archive_healthy"], false, "{json}");
    assert!(json["pending_files"].as_u64().unwrap() >= 4, "{json}");
    assert_eq!(json["inactive_slots"], serde_json::json!([]));
    assert_eq!(
        json["sources"],
        serde_json::json!({"volume": false, "sql": true})
    );
    assert!(json["wal_on_volume"].is_null(), "{json}");
    assert!(json["by_source"]["volume"].is_null(), "{json}");
    assert_eq!(json["by_source"]["sql"]["archive_healthy"], false, "{json}");

    // Both sources: each one's own answer side by side, and the combined one.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .arg("wal-health")
        .arg("--pgdata")
        .arg(&c.data)
        .args(["--dsn", &c.dsn("headroom", "disable")])
        .arg("--password-file")
        .arg(c.dir().join("headroom.password"))
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(table.contains("by source"), "{table}");
    let row = table
        .lines()
        .find(|l| l.starts_with("archive_mode") && l.contains("on  "))
        .unwrap_or_else(|| panic!("{table}"));
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["archive_mode", "on", "on"],
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_inactive_slot_retains_wal() {
    let Some(bin) = require_postgres() else {
        return;
    };
    let c = Cluster::start(&bin, &Options::archiving("cp %p {archive}/%f"));
    let t = target(&c, "headroom", &c.monitor_role().await, "disable");
    let su = c.superuser().await;
    su.batch_execute("SELECT pg_create_physical_replication_slot('stuck', true)")
        .await
        .unwrap();
    c.generate_wal(&su, 4).await;

    let h = poll("the archive to drain", WAIT, || async {
        let h = both(&c, &t, 100).await;
        (h.pending_files == Some(0)).then_some(h)
    })
    .await;
    assert_eq!(h.archive_healthy, Some(true), "{h:?}");
    let slots = h.inactive_slots.clone().unwrap();
    assert_eq!(slots.len(), 1, "{slots:?}");
    assert_eq!(slots[0].name, "stuck");
    // Four segment switches after the slot reserved WAL: at least three whole 16 MiB segments.
    assert!(slots[0].retained_bytes >= 3 * (16 << 20), "{slots:?}");
    // Issue 36: as pg_replication_slots shows it, measured from the server's own position.
    let sql_lsn: String = su
        .query_one(
            "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = 'stuck'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let restart = slots[0].restart_lsn.expect("restart_lsn");
    assert_eq!(restart.to_string(), sql_lsn);
    let p = h.detail.position.expect("position");
    assert_eq!(p.source, headroom::decide::PositionSource::Sql, "{h:?}");
    assert_eq!(p.lsn.since(restart), slots[0].retained_bytes);
    let listed = h.detail.slots.as_ref().expect("slots");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].restart_lsn, Some(restart));
    assert_engine(
        &h,
        100,
        SMALL_SLOT_LIMIT,
        Some(BlockReason::WalSlotRetention),
    );
    assert_engine(&h, 100, 10 * GI, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_archive_mode_off_is_not_configured() {
    let Some(bin) = require_postgres() else {
        return;
    };
    let opts = Options {
        archive_mode: "off",
        archive_command: "",
        tls_only: false,
    };
    let c = Cluster::start(&bin, &opts);
    let t = target(&c, "headroom", &c.monitor_role().await, "disable");
    c.generate_wal(&c.superuser().await, 2).await;

    let h = both(&c, &t, 100).await;
    assert_eq!(
        (h.archive_configured, h.archive_healthy),
        (Some(false), None),
        "{h:?}"
    );
    assert_eq!(h.pending_files, Some(0));
    assert!(h.sources.volume && h.sources.sql);
    let d = assert_engine(&h, 100, SMALL_SLOT_LIMIT, None);
    assert!(
        d.notes
            .iter()
            .any(|n| n.to_string().contains("not configured")),
        "{d:?}"
    );
    // Without SQL: the configuration files on the volume say archive_mode is off (issue 21;
    // before, no markers left it unknown).
    let v = gather(Some(&c.data), None, 100, Timestamp::now()).await;
    assert_eq!(
        (v.archive_configured, v.archive_healthy),
        (Some(false), None),
        "{v:?}"
    );
    assert_eq!(v.detail.archive_mode.as_deref(), Some("off"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_s6_unreachable_server_is_unknown_with_clear_errors() {
    let Some(bin) = require_postgres() else {
        return;
    };
    let mut c = Cluster::start(&bin, &Options::archiving("cp %p {archive}/%f"));
    let good = c.monitor_role().await;

    let sql_error = |h: &WalHealth| {
        assert!(!h.sources.sql, "{h:?}");
        assert_eq!(
            (
                h.archive_configured,
                h.archive_healthy,
                h.inactive_slots.clone()
            ),
            // The volume still answers for all three when SQL fails (slots from pg_replslot).
            (Some(true), Some(true), Some(vec![]))
        );
        let e = h
            .detail
            .errors
            .iter()
            .find(|e| e.starts_with("sql: "))
            .cloned();
        e.unwrap_or_else(|| panic!("no sql error in {h:?}"))
    };
    c.generate_wal(&c.superuser().await, 1).await;
    poll("the archive to drain", WAIT, || async {
        let h = gather(Some(&c.data), None, 100, Timestamp::now()).await;
        (h.pending_files == Some(0) && archived_files(&c) >= 1).then_some(())
    })
    .await;

    // Wrong password: the server's message, and no password in it.
    let bad = c.dir().join("wrong.password");
    std::fs::write(&bad, "not-the-password\n").unwrap();
    let h = both(&c, &target(&c, "headroom", &bad, "disable"), 100).await;
    let e = sql_error(&h);
    assert!(
        e.contains("password authentication failed for user \"headroom\""),
        "{e}"
    );
    assert!(
        !e.contains("not-the-password") && !e.contains("monitor-secret"),
        "{e}"
    );
    assert!(!format!("{:?}", target(&c, "headroom", &good, "disable")).contains("monitor-secret"));

    // A role without pg_monitor cannot read the WAL directory: the grant is what makes it work.
    c.superuser()
        .await
        .batch_execute("CREATE ROLE plain LOGIN PASSWORD 'monitor-secret'")
        .await
        .unwrap();
    let e = sql_error(&both(&c, &target(&c, "plain", &good, "disable"), 100).await);
    assert!(e.contains("permission denied"), "{e}");

    // Refused: nothing listens on the port.
    let mut refused = SqlTarget::from_dsn(&format!(
        "host=127.0.0.1 port={} user=headroom dbname=postgres",
        support::pg::free_port()
    ))
    .unwrap();
    refused.set_password_file(&good).unwrap();
    let e = sql_error(&both(&c, &refused, 100).await);
    assert!(e.contains("refused"), "{e}");

    // A server that accepts but never answers: bounded by the timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let mut hung = SqlTarget::from_dsn(&format!(
        "host=127.0.0.1 port={port} user=headroom dbname=postgres sslmode=disable"
    ))
    .unwrap();
    hung.set_timeout(Duration::from_secs(1));
    let e = sql_error(&both(&c, &hung, 100).await);
    assert!(e.contains("no answer within 1s"), "{e}");
    hold.abort();

    // The server stopped: SQL unknown, the volume still answers.
    c.stop();
    let h = both(&c, &target(&c, "headroom", &good, "disable"), 100).await;
    let e = sql_error(&h);
    assert!(e.contains("refused"), "{e}");
    assert!(h.sources.volume);
    // The volume answers for the slots too (issue 21: none here), so a stopped server leaves
    // nothing unknown to fail open on.
    let d = assert_engine(&h, 100, SMALL_SLOT_LIMIT, None);
    assert_eq!(h.inactive_slots, Some(vec![]));
    assert!(
        !d.notes.iter().any(|n| n.to_string().contains("unknown")),
        "{d:?}"
    );
    let sql_only = gather(
        None,
        Some(&target(&c, "headroom", &good, "disable")),
        100,
        Timestamp::now(),
    )
    .await;
    assert_eq!(
        (sql_only.archive_configured, sql_only.archive_healthy),
        (None, None)
    );
    let d = assert_engine(&sql_only, 100, SMALL_SLOT_LIMIT, None);
    assert!(
        d.notes
            .iter()
            .any(|n| n.to_string().contains("archive health unknown")),
        "{d:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_require_and_prefer_connect_to_a_tls_only_server() {
    let Some(bin) = require_postgres() else {
        return;
    };
    let opts = Options {
        tls_only: true,
        ..Options::archiving("cp %p {archive}/%f")
    };
    let c = Cluster::start(&bin, &opts);
    let pw = c.monitor_role().await;
    for mode in ["require", "prefer"] {
        let h = gather(
            None,
            Some(&target(&c, "headroom", &pw, mode)),
            100,
            Timestamp::now(),
        )
        .await;
        assert!(h.sources.sql, "sslmode={mode}: {h:?}");
    }
    let h = gather(
        None,
        Some(&target(&c, "headroom", &pw, "disable")),
        100,
        Timestamp::now(),
    )
    .await;
    let e = h.detail.errors.join("; ");
    assert!(
        e.contains("no pg_hba.conf entry") && e.contains("no encryption"),
        "{e}"
    );
}
