//! A replication slot's `pg_replslot/<name>/state` file (`ReplicationSlotOnDisk`), parsed from
//! its bytes: no I/O here.
//!
//! The file is a 16-byte header (magic, CRC-32C, format version, length of what follows), then
//! `ReplicationSlotPersistentData`, whose first fields are the same in every supported major:
//! `name` (64 bytes), `database` (0 for a physical slot), `persistency`, `xmin`,
//! `catalog_xmin`, `restart_lsn`, then the invalidation (`invalidated_at`, an LSN, in 13-15; the
//! `invalidated` cause, an enum, from 16). What follows grows between majors, which is why the
//! version and length are checked against the data directory's own major. The checksum covers
//! everything after itself. The bytes are the tenant's: every check is an error for this slot,
//! never a panic.

use serde::Serialize;

use super::lsn::{Lsn, Major, crc32c, u32_at, u64_at};

const MAGIC: u32 = 0x0105_1CA1;
const HEADER: usize = 16;
const NAME_LEN: usize = 64;
const DATABASE: usize = HEADER + NAME_LEN;
const PERSISTENCY: usize = DATABASE + 4;
const RESTART_LSN: usize = HEADER + 80;
const INVALIDATION: usize = RESTART_LSN + 8;
/// Larger than any supported major writes; more is not a slot file.
pub const MAX_SIZE: u64 = 1024;

/// The format version and the length after the header each major writes (`SLOT_VERSION`,
/// `ReplicationSlotOnDiskV2Size`), read off the files PostgreSQL 13.23, 14.23, 15.18, 16.14,
/// 17.10 and 18.4 wrote (tests/postgres_versions.rs checks them against each).
fn format_of(major: Major) -> (u32, u32) {
    match major.get() {
        13 => (2, 168),
        14 | 15 => (2, 184),
        16 => (3, 184),
        _ => (5, 184),
    }
}

/// What one slot file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotFile {
    pub name: String,
    /// A logical slot belongs to a database; a physical one does not.
    pub logical: bool,
    /// False for a slot still being created (`RS_EPHEMERAL`), which Postgres drops on restart.
    pub persistent: bool,
    /// The oldest WAL the slot keeps; invalid when it never reserved any or was invalidated.
    pub restart_lsn: Lsn,
    /// Invalidated (its WAL was removed, or its rows vacuumed away): it holds back no WAL.
    pub invalidated: bool,
}

impl SlotFile {
    /// The WAL this slot makes the server keep, up to `position`.
    pub fn retains(&self, position: Lsn) -> u64 {
        if self.invalidated || !self.restart_lsn.is_valid() {
            return 0;
        }
        position.since(self.restart_lsn)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotFileError {
    #[error("{0} bytes: too short for a slot state file")]
    Short(usize),
    #[error("over {MAX_SIZE} bytes: not a slot state file")]
    TooLong,
    #[error("magic number {0:#x} is not a slot state file's")]
    Magic(u32),
    #[error("format version {found} with length {length}, where PostgreSQL {major} writes {want}")]
    Format {
        found: u32,
        length: u32,
        major: Major,
        want: String,
    },
    #[error("checksum {stored:#010x} does not match the contents ({computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("names slot {inside:?}, but lives in directory {dir:?}")]
    Name { inside: String, dir: String },
}

/// Parses a slot state file of a data directory of `major`, found in directory `dir`.
pub fn parse(bytes: &[u8], major: Major, dir: &str) -> Result<SlotFile, SlotFileError> {
    if bytes.len() as u64 > MAX_SIZE {
        return Err(SlotFileError::TooLong);
    }
    let (Some(magic), Some(stored), Some(version), Some(length)) = (
        u32_at(bytes, 0),
        u32_at(bytes, 4),
        u32_at(bytes, 8),
        u32_at(bytes, 12),
    ) else {
        return Err(SlotFileError::Short(bytes.len()));
    };
    if magic != MAGIC {
        return Err(SlotFileError::Magic(magic));
    }
    let (want_version, want_length) = format_of(major);
    if (version, length) != (want_version, want_length) {
        return Err(SlotFileError::Format {
            found: version,
            length,
            major,
            want: format!("version {want_version} with length {want_length}"),
        });
    }
    let end = HEADER + want_length as usize;
    if bytes.len() != end {
        return Err(SlotFileError::Short(bytes.len()));
    }
    let computed = crc32c(&bytes[8..end]);
    if computed != stored {
        return Err(SlotFileError::Checksum { stored, computed });
    }
    let name_bytes = &bytes[HEADER..HEADER + NAME_LEN];
    let name_end = name_bytes.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
    let name = String::from_utf8_lossy(&name_bytes[..name_end]).into_owned();
    if name != dir {
        return Err(SlotFileError::Name {
            inside: name,
            dir: dir.to_string(),
        });
    }
    // In range: `end` is at least HEADER + 168 and every offset below is under HEADER + 100.
    let field = |at| u32_at(bytes, at).unwrap_or(0);
    let invalidated = if major.get() <= 15 {
        u64_at(bytes, INVALIDATION).unwrap_or(0) != 0
    } else {
        field(INVALIDATION) != 0
    };
    Ok(SlotFile {
        name,
        logical: field(DATABASE) != 0,
        persistent: field(PERSISTENCY) == 0,
        restart_lsn: Lsn(u64_at(bytes, RESTART_LSN).unwrap_or(0)),
        invalidated,
    })
}

/// A state file as `major` writes it, for tests.
#[cfg(test)]
pub fn test_file(major: u32, name: &str, database: u32, restart: u64) -> Vec<u8> {
    tests::file(major, name, database, restart)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state file as `major` writes it.
    pub fn file(major: u32, name: &str, database: u32, restart: u64) -> Vec<u8> {
        let (version, length) = format_of(Major::of(major));
        let mut b = vec![0u8; HEADER + length as usize];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&version.to_le_bytes());
        b[12..16].copy_from_slice(&length.to_le_bytes());
        b[HEADER..HEADER + name.len()].copy_from_slice(name.as_bytes());
        b[DATABASE..DATABASE + 4].copy_from_slice(&database.to_le_bytes());
        b[RESTART_LSN..RESTART_LSN + 8].copy_from_slice(&restart.to_le_bytes());
        seal(&mut b);
        b
    }

    fn seal(b: &mut [u8]) {
        let crc = crc32c(&b[8..]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn reads_every_supported_major() {
        for major in 13..=18 {
            let s = parse(
                &file(major, "standby_1", 0, 0x3_0000_0028),
                Major::of(major),
                "standby_1",
            )
            .unwrap();
            assert_eq!(s.restart_lsn, Lsn(0x3_0000_0028), "{major}");
            assert!(!s.logical && s.persistent && !s.invalidated);
            assert_eq!(s.retains(Lsn(0x3_0000_1028)), 0x1000);
            let l = parse(&file(major, "cdc", 16384, 7), Major::of(major), "cdc").unwrap();
            assert!(l.logical);
        }
    }

    #[test]
    fn a_file_of_another_major_is_refused() {
        let e = parse(&file(13, "s", 0, 1), Major::of(17), "s").unwrap_err();
        assert!(matches!(e, SlotFileError::Format { .. }), "{e}");
        assert!(e.to_string().contains("PostgreSQL 17 writes"), "{e}");
    }

    #[test]
    fn hostile_bytes_are_errors_never_panics() {
        let good = file(16, "s", 0, 1);
        for len in [0, 3, 15, 16, 100, good.len() - 1] {
            assert!(parse(&good[..len], Major::of(16), "s").is_err(), "{len}");
        }
        let mut long = good.clone();
        long.extend(vec![0u8; 2000]);
        assert_eq!(
            parse(&long, Major::of(16), "s"),
            Err(SlotFileError::TooLong)
        );
        let mut padded = good.clone();
        padded.push(0);
        assert!(parse(&padded, Major::of(16), "s").is_err());

        let mut flipped = good.clone();
        flipped[RESTART_LSN] ^= 1;
        assert!(matches!(
            parse(&flipped, Major::of(16), "s"),
            Err(SlotFileError::Checksum { .. })
        ));
        let mut magic = good.clone();
        magic[0] = 0;
        assert!(matches!(
            parse(&magic, Major::of(16), "s"),
            Err(SlotFileError::Magic(_))
        ));
        // A huge length field does not make the reader index past the end.
        let mut length = good.clone();
        length[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        seal(&mut length);
        assert!(parse(&length, Major::of(16), "s").is_err());
        // The name inside must be the directory's: a copied file does not pose as another slot.
        let e = parse(&good, Major::of(16), "other").unwrap_err();
        assert!(matches!(e, SlotFileError::Name { .. }), "{e}");
        // No NUL in the name field, invalid UTF-8: still no panic.
        let mut name = good;
        name[HEADER..HEADER + NAME_LEN].fill(0xFF);
        seal(&mut name);
        assert!(parse(&name, Major::of(16), "s").is_err());
    }

    #[test]
    fn an_invalidated_slot_retains_nothing() {
        let mut b = file(15, "s", 0, 0);
        b[INVALIDATION..INVALIDATION + 8].copy_from_slice(&0x5000u64.to_le_bytes());
        seal(&mut b);
        let s = parse(&b, Major::of(15), "s").unwrap();
        assert!(s.invalidated);
        assert_eq!(s.retains(Lsn(1 << 40)), 0);
        let mut b = file(17, "s", 0, 0x100);
        b[INVALIDATION] = 1; // RS_INVAL_WAL_REMOVED
        seal(&mut b);
        let s = parse(&b, Major::of(17), "s").unwrap();
        assert!(s.invalidated);
        assert_eq!(s.retains(Lsn(1 << 40)), 0);
    }
}
