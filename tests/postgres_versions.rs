//! Every supported PostgreSQL major (13-18, from scripts/postgres-versions.sh) on real servers:
//! the on-disk facts headroom reads from a volume (replication slot state files, pg_control,
//! PG_VERSION) where the code expects them, and a streaming standby that is promoted.
//! Runs as root (servers run as the `postgres` user); skips without HEADROOM_PG_VERSIONS unless CI.

mod support {
    pub mod pg;
    pub mod ports;
}

use std::fs;
use std::time::Duration;

use support::pg::{Cluster, MAJORS, Options, poll, require_major};
use tokio_postgres::types::PgLsn;

/// What a slot's state file starts with (ReplicationSlotOnDisk in slot.c).
const SLOT_MAGIC: u32 = 0x0105_1CA1;

fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

async fn in_recovery(c: &Cluster) -> bool {
    c.in_recovery().await
}

async fn check_major(major: u32) {
    let Some(bin) = require_major(major) else {
        return;
    };
    let opts = Options {
        archive_mode: "off",
        archive_command: "",
        tls_only: false,
    };
    let mut primary = Cluster::start_with(&bin, &opts, &["wal_level = logical"]);
    let su = primary.superuser().await;
    let version: i32 = su
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        version as u32 / 10000,
        major,
        "server_version_num {version}"
    );

    su.batch_execute(
        "SELECT pg_create_physical_replication_slot('phys', true);
         SELECT pg_create_logical_replication_slot('logi', 'test_decoding');",
    )
    .await
    .unwrap();
    primary.generate_wal(&su, 2).await;
    su.batch_execute("CHECKPOINT").await.unwrap();

    assert_eq!(
        fs::read_to_string(primary.data.join("PG_VERSION"))
            .unwrap()
            .trim(),
        major.to_string()
    );

    // Slot state files: a 16-byte header (magic, CRC32C, version, length), then the slot's
    // persistent data; the CRC covers everything after itself; restart_lsn at offset 96.
    for (slot, physical) in [("phys", true), ("logi", false)] {
        let b = fs::read(primary.data.join("pg_replslot").join(slot).join("state")).unwrap();
        assert_eq!(u32_at(&b, 0), SLOT_MAGIC, "{slot}: magic");
        let length = u32_at(&b, 12) as usize;
        assert_eq!(
            b.len(),
            16 + length,
            "{slot}: size against the length field"
        );
        assert_eq!(b.len(), if major == 13 { 184 } else { 200 }, "{slot}: size");
        assert_eq!(crc32c(&b[8..16 + length]), u32_at(&b, 4), "{slot}: CRC32C");
        assert_eq!(&b[16..16 + slot.len() + 1], format!("{slot}\0").as_bytes());
        let row = su
            .query_one(
                "SELECT restart_lsn, datoid IS NULL FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap();
        let restart: PgLsn = row.get(0);
        assert_eq!(u64_at(&b, 96), u64::from(restart), "{slot}: restart_lsn");
        assert_eq!(row.get::<_, bool>(1), physical, "{slot}: database");
        assert_eq!(u32_at(&b, 80) == 0, physical, "{slot}: database oid");
        // Not invalidated: invalidated_at (13-15) or the invalidation cause (16-18).
        assert_eq!(u64_at(&b, 104), 0, "{slot}: invalidation");
    }

    // pg_control: identifier, last checkpoint and its redo, timeline, segment size, CRC32C.
    let control = fs::read(primary.data.join("global/pg_control")).unwrap();
    assert_eq!(control.len(), 8192);
    let row = su
        .query_one(
            "SELECT s.system_identifier, c.checkpoint_lsn, c.redo_lsn, c.timeline_id
             FROM pg_control_system() s, pg_control_checkpoint() c",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        u64_at(&control, 0),
        row.get::<_, i64>(0) as u64,
        "system identifier"
    );
    assert_eq!(
        u64_at(&control, 32),
        u64::from(row.get::<_, PgLsn>(1)),
        "checkPoint"
    );
    assert_eq!(
        u64_at(&control, 40),
        u64::from(row.get::<_, PgLsn>(2)),
        "redo"
    );
    assert_eq!(
        u32_at(&control, 48),
        row.get::<_, i32>(3) as u32,
        "timeline"
    );
    assert_eq!(u32_at(&control, 228), 16 << 20, "xlog_seg_size");
    let crc_at = if major >= 18 { 292 } else { 288 };
    assert_eq!(
        crc32c(&control[..crc_at]),
        u32_at(&control, crc_at),
        "pg_control CRC32C at {crc_at}"
    );
    drop(su);

    let standby = Cluster::standby_of(&mut primary, Some("phys"));
    assert!(
        in_recovery(&standby).await,
        "a fresh standby is in recovery"
    );
    // The restarted primary kept its port and streams to the standby from the slot.
    let su = primary.superuser().await;
    poll(
        "the standby streaming from slot phys",
        Duration::from_secs(30),
        || {
            let su = &su;
            async move {
                let row = su
                    .query_one(
                        "SELECT active FROM pg_replication_slots WHERE slot_name = 'phys'",
                        &[],
                    )
                    .await
                    .unwrap();
                row.get::<_, bool>(0).then_some(())
            }
        },
    )
    .await;
    assert!(!in_recovery(&primary).await);

    standby.promote().await;
    assert!(!in_recovery(&standby).await);
    // A promoted standby takes writes on a new timeline.
    let sb = standby.superuser().await;
    sb.batch_execute("CREATE TABLE after_promotion (x int)")
        .await
        .unwrap();
    let wal_file: String = sb
        .query_one("SELECT pg_walfile_name(pg_current_wal_lsn())", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(&wal_file[..8], "00000002", "timeline after promotion");
}

macro_rules! majors {
    ($($name:ident: $major:literal,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                check_major($major).await;
            }
        )*

        #[test]
        fn every_major_has_a_test() {
            assert_eq!([$($major),*], MAJORS);
        }
    };
}

majors! {
    postgres_13: 13,
    postgres_14: 14,
    postgres_15: 15,
    postgres_16: 16,
    postgres_17: 17,
    postgres_18: 18,
}
