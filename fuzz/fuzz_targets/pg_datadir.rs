//! A whole hostile volume through the agent's WAL reader: `read_volumes` (the data directory's
//! `PG_VERSION`, signal files, `backup_label`, `global/pg_control`, `pg_replslot/*/state`,
//! `postgresql.conf` with its includes, `postgresql.auto.conf`, `postmaster.opts`, `pg_wal` and
//! `archive_status`) then `combine`, twice, as two scans do (the slot tracker carries over).
//!
//! Input: one flag byte, then a tree (`headroom_fuzz::decode_tree`). Flag bit 0: the tree holds
//! two volumes, `data/` (the data directory's) and `wal/` (a WAL volume), as Crunchy's and
//! Zalando's WAL volumes are read; bit 1: the WAL volume's mount path in the pod is known
//! (`/pgwal`), so a `pg_wal` link into it is mapped; bits 2-7: the backlog limit.
//!
//! Beyond "no panic": nothing is read from outside the volume. A data directory outside every
//! tree, at [`OUTSIDE`] (the dictionary names it, so links to it are tried), sets `archive_mode`
//! to a marker drawn at start; the marker showing up in what the reader reports means a link
//! was followed out of the volume.
#![no_main]

use headroom::postgres::health::{Limits, combine, read_volumes};
use headroom::postgres::slots::Tracker;
use headroom_fuzz::{decode_tree, scratch, write_tree};
use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::OnceLock;

/// A data directory no tree contains.
const OUTSIDE: &str = "/dev/shm/headroom-fuzz-outside";

fn marker() -> &'static str {
    static MARKER: OnceLock<String> = OnceLock::new();
    MARKER.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let marker = format!("outside{:x}{:x}", std::process::id(), nanos);
        let root = Path::new(OUTSIDE);
        let _ = std::fs::remove_dir_all(root);
        for dir in [
            "",
            "pgdata",
            "pg_wal/archive_status",
            "pgdata/pg_wal/archive_status",
        ] {
            let _ = std::fs::create_dir_all(root.join(dir));
        }
        let conf = format!("archive_mode = '{marker}'\narchive_command = '{marker}'\n");
        for dir in ["", "pgdata"] {
            let _ = std::fs::write(root.join(dir).join("PG_VERSION"), "15\n");
            let _ = std::fs::write(root.join(dir).join("postgresql.conf"), &conf);
        }
        marker
    })
}

fuzz_target!(|data: &[u8]| {
    let marker = marker();
    let Some((&flags, tree)) = data.split_first() else {
        return;
    };
    let dir = scratch();
    write_tree(dir.path(), &decode_tree(tree));
    let (wal, datadir) = if flags & 1 == 1 {
        (dir.path().join("wal"), dir.path().join("data"))
    } else {
        (dir.path().to_path_buf(), dir.path().to_path_buf())
    };
    let mounted_at = (flags & 2 == 2).then(|| std::path::PathBuf::from("/pgwal"));
    let limits = Limits {
        max_pending: u64::from(flags >> 2),
        max_pending_age_seconds: 600,
    };
    let now = Timestamp::now();
    let mut tracker = Tracker::default();
    for _ in 0..2 {
        let read = read_volumes(&wal, Some(&datadir), mounted_at.as_deref(), now);
        let health = combine(read, None, &mut tracker, limits, now);
        // A health that says archiving is unhealthy names why; the status shows it.
        if health.archive_healthy == Some(false) {
            assert!(
                !health.detail.problems.is_empty(),
                "unhealthy archiving with no problem named: {health:?}"
            );
        }
        let shown = serde_json::to_string(&health).unwrap_or_default();
        assert!(
            !shown.contains(marker),
            "read from outside the volume ({OUTSIDE}): {shown}"
        );
    }
});
