//! WAL safety with no credentials, against real servers of every supported major (13-18, from
//! scripts/postgres-versions.sh): what headroom reads off the data directory (each slot's
//! `restart_lsn`, the WAL position, the role, the archiving settings) checked against
//! `pg_replication_slots`, `pg_is_in_recovery()` and `pg_stat_archiver` of the same server, and
//! the engine's answer from it. Then the role changes (failover, standbys with `archive_mode` on
//! and always, a base backup in progress, clusters of one to three) on one major.
//! Runs as root (servers run as the `postgres` user); skips without HEADROOM_PG_VERSIONS unless CI.

mod support {
    pub mod pg;
    pub mod ports;
    pub mod wal_engine;
}

use std::path::Path;
use std::time::Duration;

use headroom::decide::{
    BlockReason, Decision, Note, ServerRole, SlotActivity, VolumeRole, WalHealth,
};
use headroom::postgres::datadir;
use headroom::postgres::lsn::Lsn;
use headroom::postgres::slots::Tracker;
use headroom::postgres::{Limits, SqlTarget, combine, health, read_volumes};
use jiff::{SignedDuration, Timestamp};
use support::pg::{Cluster, Options, poll, require_major};
use support::wal_engine::decide_with;
use tokio_postgres::types::PgLsn;

const SEG: u64 = 16 << 20;
/// Short enough for a test to see a slot stand still; the agent uses 15 minutes.
const WINDOW: SignedDuration = SignedDuration::from_millis(1500);
const WAIT: Duration = Duration::from_secs(60);

fn archiving() -> Options {
    Options::archiving("cp %p {archive}/%f")
}

/// One read of a data directory holding its `pg_wal`, as the agent makes it, with no SQL.
fn volume_only(data: &Path, tracker: &mut Tracker, max_pending: u64) -> WalHealth {
    let now = Timestamp::now();
    let read = read_volumes(data, Some(data), None, now);
    combine(read, None, tracker, Limits::from(max_pending), now)
}

/// The engine on a 10 GiB volume at 90 % holding WAL (`role`; a data volume acknowledges the
/// risk), with a slot limit.
fn decide_for(wal: &WalHealth, role: VolumeRole, max_pending: u64, max_slot: u64) -> Decision {
    decide_with(wal, role, true, max_pending, max_slot)
}

async fn sql_slots(c: &Cluster) -> Vec<(String, Option<u64>, bool, Option<u64>)> {
    let client = c.superuser().await;
    let reference = if in_recovery(c).await {
        "pg_last_wal_receive_lsn()"
    } else {
        "pg_current_wal_lsn()"
    };
    client
        .query(
            &format!(
                "SELECT slot_name::text, restart_lsn, active, \
                 pg_wal_lsn_diff({reference}, restart_lsn)::int8 \
                 FROM pg_replication_slots ORDER BY slot_name"
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let lsn: Option<PgLsn> = r.get(1);
            let diff: Option<i64> = r.get(3);
            (
                r.get(0),
                lsn.map(u64::from),
                r.get(2),
                diff.map(|d| d.max(0) as u64),
            )
        })
        .collect()
}

async fn in_recovery(c: &Cluster) -> bool {
    c.in_recovery().await
}

/// Runs each `;`-separated statement on its own (ALTER SYSTEM refuses a transaction block).
async fn sql(c: &Cluster, statements: &str) {
    let client = c.superuser().await;
    for s in statements.split(';').filter(|s| !s.trim().is_empty()) {
        client.batch_execute(s).await.unwrap();
    }
}

/// Each slot's `restart_lsn` on disk equals `pg_replication_slots.restart_lsn` exactly, and
/// its retained bytes trail SQL's by less than one segment (README, "WAL health").
async fn assert_slots_match_sql(c: &Cluster, h: &WalHealth, major: u32) {
    let disk = datadir::read(&c.data).unwrap();
    assert_eq!(disk.major.get(), major);
    let on_disk: Vec<(String, Lsn)> = disk
        .slots
        .as_ref()
        .unwrap()
        .iter()
        .map(|s| {
            let f = s.file.as_ref().unwrap();
            (f.name.clone(), f.restart_lsn)
        })
        .collect();
    let sql = sql_slots(c).await;
    assert_eq!(on_disk.len(), sql.len(), "{on_disk:?} vs {sql:?}");
    for ((name, lsn), (sql_name, sql_lsn, _, sql_retained)) in on_disk.iter().zip(&sql) {
        assert_eq!(name, sql_name);
        assert_eq!(Some(lsn.0), *sql_lsn, "{major}: restart_lsn of {name}");
        let listed = h
            .inactive_slots
            .as_ref()
            .unwrap()
            .iter()
            .find(|s| &s.name == name)
            .unwrap_or_else(|| panic!("{name} not in {h:?}"));
        let sql_retained = sql_retained.unwrap();
        assert!(
            listed.retained_bytes <= sql_retained && sql_retained - listed.retained_bytes < SEG,
            "{major}: {name} retains {} on disk, {sql_retained} in SQL",
            listed.retained_bytes
        );
    }
}

/// `headroom wal-health --pgdata` on `c`'s data directory, as printed in `format`.
fn wal_health_cli(c: &Cluster, format: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .arg("wal-health")
        .arg("--pgdata")
        .arg(&c.data)
        .args(["--format", format])
        .output()
        .expect("run headroom wal-health");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Issue 36: what `headroom wal-health` prints (JSON and table) reads like
/// `pg_replication_slots`: each slot's `restart_lsn` exactly as the server shows it, and the
/// position its retention was measured from, with its source, within the README's bound (less
/// than one segment behind the server's; after a CHECKPOINT nothing is left unflushed).
async fn assert_printed_slots_match_sql(c: &Cluster, major: u32) {
    let json: serde_json::Value = serde_json::from_str(&wal_health_cli(c, "json")).unwrap();
    let table = wal_health_cli(c, "table");
    let client = c.superuser().await;
    let rows = client
        .query(
            "SELECT slot_name::text, slot_type, restart_lsn::text FROM pg_replication_slots",
            &[],
        )
        .await
        .unwrap();
    let printed = json["slots"].as_array().unwrap_or_else(|| panic!("{json}"));
    assert_eq!(printed.len(), rows.len(), "{major}: {json}");
    assert!(!rows.is_empty());
    for r in &rows {
        let (name, kind, lsn): (String, String, Option<String>) = (r.get(0), r.get(1), r.get(2));
        let p = printed
            .iter()
            .find(|s| s["slot_name"] == name.as_str())
            .unwrap_or_else(|| panic!("{major}: {name} not printed: {json}"));
        assert_eq!(p["restart_lsn"].as_str(), lsn.as_deref(), "{major}: {name}");
        assert_eq!(p["slot_type"], kind.as_str(), "{major}: {name}");
        let shown = format!(
            "{name} {kind} restart_lsn {} ",
            lsn.as_deref().unwrap_or("null")
        );
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("slot ") && l.contains(&shown)),
            "{major}: '{shown}' not in\n{table}"
        );
    }
    let pos = &json["position"];
    let source = pos["source"].as_str().unwrap_or_else(|| panic!("{json}"));
    assert!(["checkpoint", "newest_segment"].contains(&source), "{pos}");
    let lsn: Lsn = pos["lsn"].as_str().unwrap().parse().unwrap();
    let current: PgLsn = client
        .query_one("SELECT pg_current_wal_lsn()", &[])
        .await
        .unwrap()
        .get(0);
    let current = u64::from(current);
    assert!(
        lsn.0 <= current && current - lsn.0 < SEG,
        "{major}: position {lsn} from {source}, server at {current:X}"
    );
    assert!(
        table.contains(&format!("wal position            {lsn} ({source}: ")),
        "{major}: {table}"
    );
}

/// Issue 21's promise on one major: no credentials, a slot nobody reads blocks growth of the
/// volume holding WAL with its name and bytes; a healthy cluster grows; archiving that fails
/// blocks; a promoted standby is a primary at the next read.
async fn check_major(major: u32) {
    let Some(bin) = require_major(major) else {
        return;
    };
    let mut primary = Cluster::start_with(&bin, &archiving(), &["wal_level = logical"]);
    sql(
        &primary,
        "SELECT pg_create_physical_replication_slot('gone_replica', true); \
         SELECT pg_create_logical_replication_slot('cdc', 'test_decoding')",
    )
    .await;
    primary.generate_wal(&primary.superuser().await, 2).await;
    sql(&primary, "CHECKPOINT").await;

    let mut tracker = Tracker::new(WINDOW);
    let first = volume_only(&primary.data, &mut tracker, 100);
    assert_eq!(first.detail.role, Some(ServerRole::Primary), "{first:?}");
    assert_eq!(first.detail.archive_mode.as_deref(), Some("on"));
    assert!(first.detail.errors.is_empty(), "{:?}", first.detail.errors);
    assert_slots_match_sql(&primary, &first, major).await;
    assert_printed_slots_match_sql(&primary, major).await;
    for s in first.inactive_slots.as_ref().unwrap() {
        assert_eq!(s.activity, SlotActivity::Unknown, "first sight: {s:?}");
    }

    // Nobody reads the slots while WAL advances: inactive after the window, and growth of the
    // WAL volume (and of a data volume holding WAL) is blocked, naming the slot and its bytes.
    tokio::time::sleep(WINDOW.unsigned_abs() + Duration::from_millis(200)).await;
    primary.generate_wal(&primary.superuser().await, 2).await;
    sql(&primary, "CHECKPOINT").await;
    let later = volume_only(&primary.data, &mut tracker, 100);
    assert_slots_match_sql(&primary, &later, major).await;
    let slots = later.inactive_slots.clone().unwrap();
    assert!(
        slots.iter().all(|s| s.activity == SlotActivity::Inactive),
        "{slots:?}"
    );
    for role in [VolumeRole::Wal, VolumeRole::Data] {
        let d = decide_for(&later, role, 100, SEG);
        assert_eq!(
            d.blocked_reason(),
            Some(BlockReason::WalSlotRetention),
            "{d:?}"
        );
        // The reason names the slot and its bytes, over the limit.
        let named = d.notes.iter().find_map(|n| match n {
            Note::SlotOverLimit { name, retained, .. } => Some((name.clone(), *retained)),
            _ => None,
        });
        let (name, retained) = named.unwrap_or_else(|| panic!("{:?}", d.notes));
        assert!(["cdc", "gone_replica"].contains(&name.as_str()), "{name}");
        assert!(retained > SEG, "{retained}");
        let shown = d
            .notes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        assert!(
            shown.contains(&format!("replication slot {name}")) && shown.contains("Mi of WAL"),
            "{shown}"
        );
    }

    // Healthy: the slots dropped, the archive keeps up.
    sql(
        &primary,
        "SELECT pg_drop_replication_slot('gone_replica'); SELECT pg_drop_replication_slot('cdc')",
    )
    .await;
    let healthy = poll("the archive to drain", WAIT, || async {
        let h = volume_only(&primary.data, &mut Tracker::new(WINDOW), 100);
        (h.pending_files == Some(0)).then_some(h)
    })
    .await;
    assert_eq!(healthy.inactive_slots, Some(vec![]));
    assert_eq!(healthy.archive_healthy, Some(true), "{healthy:?}");
    let d = decide_for(&healthy, VolumeRole::Wal, 100, SEG);
    assert!(d.grow_to().is_some(), "{d:?}");

    // Archiving fails: the backlog blocks, from the volume alone.
    sql(
        &primary,
        "ALTER SYSTEM SET archive_command = 'false'; SELECT pg_reload_conf()",
    )
    .await;
    primary.generate_wal(&primary.superuser().await, 3).await;
    let failing = poll("segments to wait for the archiver", WAIT, || async {
        let h = volume_only(&primary.data, &mut Tracker::new(WINDOW), 2);
        (h.pending_files.unwrap_or(0) >= 3).then_some(h)
    })
    .await;
    assert_eq!(failing.archive_healthy, Some(false));
    let d = decide_for(&failing, VolumeRole::Wal, 2, SEG);
    assert_eq!(
        d.blocked_reason(),
        Some(BlockReason::WalPendingFiles),
        "{d:?}"
    );
    let archiver: i64 = primary
        .superuser()
        .await
        .query_one("SELECT failed_count FROM pg_stat_archiver", &[])
        .await
        .unwrap()
        .get(0);
    assert!(archiver > 0, "the server agrees archiving fails");
    sql(
        &primary,
        "ALTER SYSTEM RESET archive_command; SELECT pg_reload_conf()",
    )
    .await;

    // A standby, then promoted: the role at the next read, as pg_is_in_recovery() says.
    let standby = Cluster::standby_of(&mut primary, None);
    poll("the standby to accept connections", WAIT, || async {
        Some(standby.superuser().await)
    })
    .await;
    let h = volume_only(&standby.data, &mut Tracker::new(WINDOW), 100);
    assert!(in_recovery(&standby).await);
    assert_eq!(h.detail.role, Some(ServerRole::Standby), "{h:?}");
    assert_eq!(
        h.archive_configured,
        Some(false),
        "archive_mode on: a standby does not archive"
    );
    standby.promote().await;
    let h = volume_only(&standby.data, &mut Tracker::new(WINDOW), 100);
    assert!(!in_recovery(&standby).await);
    assert_eq!(h.detail.role, Some(ServerRole::Primary), "{h:?}");
    assert_eq!(h.archive_configured, Some(true));
}

macro_rules! majors {
    ($($name:ident: $major:expr),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            check_major($major).await;
        }
    )*};
}

majors! {
    no_credentials_postgres_13: 13,
    no_credentials_postgres_14: 14,
    no_credentials_postgres_15: 15,
    no_credentials_postgres_16: 16,
    no_credentials_postgres_17: 17,
    no_credentials_postgres_18: 18,
}

/// The major the role scenarios run on.
const ROLES_MAJOR: u32 = 17;

fn monitor_target(c: &Cluster, password_file: &Path) -> SqlTarget {
    let mut t = SqlTarget::from_dsn(&c.dsn("headroom", "disable")).unwrap();
    t.set_password_file(password_file).unwrap();
    t
}

/// `pg_replication_slots.active` is a process holding the slot; the volume sees whether the slot
/// moves. A standby whose WAL receiver is stopped (SIGSTOP) keeps its connection, so SQL says
/// active while the slot stands still: the volume calls it inactive, SQL wins where it answers,
/// and the status lists the disagreement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_consumer_is_active_in_sql_and_inactive_on_the_volume() {
    let Some(bin) = require_major(ROLES_MAJOR) else {
        return;
    };
    let mut primary = Cluster::start_with(&bin, &archiving(), &["wal_sender_timeout = 0"]);
    sql(
        &primary,
        "SELECT pg_create_physical_replication_slot('standby', true)",
    )
    .await;
    let standby = Cluster::standby_of(&mut primary, Some("standby"));
    let receiver: i32 = poll("the WAL receiver", WAIT, || async {
        let row = standby
            .superuser()
            .await
            .query_opt(
                "SELECT pid FROM pg_stat_wal_receiver WHERE status = 'streaming'",
                &[],
            )
            .await
            .ok()??;
        Some(row.get(0))
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(receiver);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // A physical slot's file is written at checkpoints: this one holds where the receiver stopped.
    sql(&primary, "CHECKPOINT").await;
    let password = primary.monitor_role().await;
    let target = monitor_target(&primary, &password);
    let mut tracker = Tracker::new(WINDOW);
    let read = |tracker: &mut Tracker, facts| {
        let now = Timestamp::now();
        let v = read_volumes(&primary.data, Some(&primary.data), None, now);
        combine(v, facts, tracker, Limits::from(100), now)
    };
    let _ = read(&mut tracker, None);
    tokio::time::sleep(WINDOW.unsigned_abs() + Duration::from_millis(200)).await;
    primary.generate_wal(&primary.superuser().await, 2).await;
    sql(&primary, "CHECKPOINT").await;
    let disk = read(&mut tracker, None);
    let facts = health::query(Some(&target)).await;
    let both = read(&mut tracker, facts);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();

    let on_disk = &disk.inactive_slots.as_ref().unwrap()[0];
    assert_eq!(
        (on_disk.name.as_str(), on_disk.activity),
        ("standby", SlotActivity::Inactive)
    );
    assert!(
        sql_slots(&primary).await[0].2,
        "SQL says the stopped receiver's slot is active"
    );
    assert!(both.sources.sql && both.sources.volume);
    assert_eq!(both.inactive_slots, Some(vec![]), "SQL wins: {both:?}");
    assert!(
        both.detail
            .disagreements
            .iter()
            .any(|d| d.contains("replication slot standby: SQL says active")),
        "{:?}",
        both.detail.disagreements
    );
}

/// Failover: the standby is promoted and the old primary is turned into a standby (its
/// `standby.signal` written, as the operator does before restarting it): each data directory
/// says its new role at the first read after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_swaps_the_roles_within_one_read() {
    let Some(bin) = require_major(ROLES_MAJOR) else {
        return;
    };
    let mut old = Cluster::start(&bin, &archiving());
    let new = Cluster::standby_of(&mut old, None);
    let role = |c: &Cluster| {
        volume_only(&c.data, &mut Tracker::new(WINDOW), 100)
            .detail
            .role
    };
    assert_eq!(role(&old), Some(ServerRole::Primary));
    assert_eq!(role(&new), Some(ServerRole::Standby));
    old.stop();
    new.promote().await;
    std::fs::write(old.data.join("standby.signal"), "").unwrap();
    assert_eq!(role(&new), Some(ServerRole::Primary));
    assert_eq!(role(&old), Some(ServerRole::Standby));
    // The demoted primary's leftover .ready files are no fault now: it does not archive.
    std::fs::write(
        old.data
            .join("pg_wal/archive_status/0000000100000000000000AA.ready"),
        "",
    )
    .unwrap();
    let h = volume_only(&old.data, &mut Tracker::new(WINDOW), 0);
    assert_eq!(h.archive_configured, Some(false));
    let d = decide_for(&h, VolumeRole::Wal, 0, SEG);
    assert!(d.grow_to().is_some(), "{d:?}");
}

/// `archive_mode = always` on a standby archives there too: a failing command piles up `.ready`
/// files that block, where `on` would not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_with_archive_mode_always_and_a_failing_command_is_blocked() {
    let Some(bin) = require_major(ROLES_MAJOR) else {
        return;
    };
    let opts = Options {
        archive_mode: "always",
        archive_command: "false",
        tls_only: false,
    };
    let mut primary = Cluster::start(&bin, &opts);
    let standby = Cluster::standby_of(&mut primary, None);
    primary.generate_wal(&primary.superuser().await, 3).await;
    let h = poll("segments to wait on the standby", WAIT, || async {
        let h = volume_only(&standby.data, &mut Tracker::new(WINDOW), 2);
        (h.pending_files.unwrap_or(0) >= 3).then_some(h)
    })
    .await;
    assert_eq!(h.detail.role, Some(ServerRole::Standby));
    assert_eq!(h.archive_configured, Some(true), "{h:?}");
    let d = decide_for(&h, VolumeRole::Wal, 2, SEG);
    assert_eq!(
        d.blocked_reason(),
        Some(BlockReason::WalPendingFiles),
        "{d:?}"
    );
}

/// A base backup taken from a running primary (`pg_backup_start`, a copy, `pg_backup_stop`'s
/// label written into the copy): the primary is a primary throughout and grows; the copy says it
/// is a restored backup that has not finished recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_backup_in_progress_is_classified_and_not_a_fault() {
    let Some(bin) = require_major(ROLES_MAJOR) else {
        return;
    };
    let primary = Cluster::start(&bin, &archiving());
    let client = primary.superuser().await;
    client
        .batch_execute("SELECT pg_backup_start('headroom-test')")
        .await
        .unwrap();
    let during = volume_only(&primary.data, &mut Tracker::new(WINDOW), 100);
    assert_eq!(during.detail.role, Some(ServerRole::Primary));
    assert!(
        decide_for(&during, VolumeRole::Wal, 100, SEG)
            .grow_to()
            .is_some()
    );
    let copy = tempfile::tempdir().unwrap();
    let target = copy.path().join("pgdata");
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(&primary.data)
        .arg(&target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let label: String = client
        .query_one("SELECT labelfile FROM pg_backup_stop()", &[])
        .await
        .unwrap()
        .get(0);
    std::fs::write(target.join("backup_label"), label).unwrap();
    let _ = std::fs::remove_file(target.join("postmaster.pid"));
    let h = volume_only(copy.path(), &mut Tracker::new(WINDOW), 100);
    assert!(h.detail.restoring_backup, "{h:?}");
    assert_eq!(
        ServerRole::Primary,
        datadir::read(copy.path()).unwrap().role
    );
}

/// One, two and three instances: exactly one primary, every other member a standby, each from
/// its own data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_of_one_two_and_three_instances_have_one_primary() {
    let Some(bin) = require_major(ROLES_MAJOR) else {
        return;
    };
    let mut primary = Cluster::start(&bin, &archiving());
    let role = |c: &Cluster| {
        volume_only(&c.data, &mut Tracker::new(WINDOW), 100)
            .detail
            .role
    };
    assert_eq!(role(&primary), Some(ServerRole::Primary));
    let first = Cluster::standby_of(&mut primary, None);
    assert_eq!(
        [role(&primary), role(&first)],
        [Some(ServerRole::Primary), Some(ServerRole::Standby)]
    );
    let second = Cluster::standby_of(&mut primary, None);
    assert_eq!(
        [role(&primary), role(&first), role(&second)],
        [
            Some(ServerRole::Primary),
            Some(ServerRole::Standby),
            Some(ServerRole::Standby)
        ]
    );
    for c in [&first, &second] {
        assert!(in_recovery(c).await);
        let h = volume_only(&c.data, &mut Tracker::new(WINDOW), 100);
        assert!(
            decide_for(&h, VolumeRole::Wal, 100, SEG)
                .grow_to()
                .is_some(),
            "{h:?}"
        );
    }
}
