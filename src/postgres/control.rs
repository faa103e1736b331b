//! `global/pg_control` (`ControlFileData`), parsed from its bytes: no I/O here.
//!
//! Its head is the same in every supported major: the system identifier, the control and
//! catalog versions, the cluster state, the time of the last update, the last checkpoint's LSN
//! and a copy of that checkpoint (its redo LSN and timeline first). Further fields, among them
//! the WAL segment size and the CRC-32C that covers everything before it, move between majors.

use jiff::Timestamp;
use serde::Serialize;

use super::lsn::{Lsn, Major, crc32c, u32_at, u64_at, valid_segment_size};

/// `PG_CONTROL_FILE_SIZE`: the file is padded to this size.
pub const FILE_SIZE: usize = 8192;

/// Offsets of `xlog_seg_size` and of `crc` in each major's `ControlFileData`, read off the
/// files PostgreSQL 13.23 to 18.4 wrote (tests/postgres_versions.rs checks them against each).
fn layout(major: Major) -> (usize, usize) {
    match major.get() {
        13..=17 => (228, 288),
        // 18 added a field (`default_char_signedness`) before the checksum.
        _ => (228, 292),
    }
}

/// `DBState`: what the server was doing when it last wrote the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DbState {
    Startup,
    ShutDown,
    ShutDownInRecovery,
    ShuttingDown,
    InCrashRecovery,
    InArchiveRecovery,
    InProduction,
}

impl DbState {
    fn from_raw(n: u32) -> Option<DbState> {
        Some(match n {
            0 => DbState::Startup,
            1 => DbState::ShutDown,
            2 => DbState::ShutDownInRecovery,
            3 => DbState::ShuttingDown,
            4 => DbState::InCrashRecovery,
            5 => DbState::InArchiveRecovery,
            6 => DbState::InProduction,
            _ => return None,
        })
    }

    /// A standby (or a server replaying archived WAL) as of the last update.
    pub fn in_recovery(self) -> bool {
        matches!(
            self,
            DbState::InArchiveRecovery | DbState::ShutDownInRecovery
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Control {
    pub state: DbState,
    /// When the server last wrote the file (each checkpoint or restartpoint does).
    pub updated: Option<Timestamp>,
    /// The last checkpoint's (or restartpoint's) record.
    pub checkpoint: Lsn,
    /// Where replay of that checkpoint starts.
    pub redo: Lsn,
    pub timeline: u32,
    pub segment_size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("{0} bytes, where pg_control has {FILE_SIZE}")]
    Size(usize),
    #[error("checksum {stored:#010x} does not match the contents ({computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("cluster state {0} is unknown")]
    State(u32),
    #[error("WAL segment size {0} is not one PostgreSQL allows")]
    SegmentSize(u64),
}

pub fn parse(bytes: &[u8], major: Major) -> Result<Control, ControlError> {
    if bytes.len() != FILE_SIZE {
        return Err(ControlError::Size(bytes.len()));
    }
    let (seg_at, crc_at) = layout(major);
    // In range: the file is FILE_SIZE bytes and every offset is under 300.
    let u32_field = |at| u32_at(bytes, at).unwrap_or(0);
    let u64_field = |at| u64_at(bytes, at).unwrap_or(0);
    let stored = u32_field(crc_at);
    let computed = crc32c(&bytes[..crc_at]);
    if stored != computed {
        return Err(ControlError::Checksum { stored, computed });
    }
    let raw_state = u32_field(16);
    let state = DbState::from_raw(raw_state).ok_or(ControlError::State(raw_state))?;
    let segment_size = u64::from(u32_field(seg_at));
    if !valid_segment_size(segment_size) {
        return Err(ControlError::SegmentSize(segment_size));
    }
    let time = i64::try_from(u64_field(24)).ok();
    Ok(Control {
        state,
        updated: time.and_then(|t| Timestamp::from_second(t).ok()),
        checkpoint: Lsn(u64_field(32)),
        redo: Lsn(u64_field(40)),
        timeline: u32_field(48),
        segment_size,
    })
}

/// A `pg_control` as `major` writes it, for tests.
#[cfg(test)]
pub fn test_file(major: u32, state: u32, checkpoint: u64, seg: u32) -> Vec<u8> {
    tests::file(major, state, checkpoint, seg)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn file(major: u32, state: u32, checkpoint: u64, seg: u32) -> Vec<u8> {
        let (seg_at, crc_at) = layout(Major::of(major));
        let mut b = vec![0u8; FILE_SIZE];
        b[16..20].copy_from_slice(&state.to_le_bytes());
        b[24..32].copy_from_slice(&1_900_000_000u64.to_le_bytes());
        b[32..40].copy_from_slice(&checkpoint.to_le_bytes());
        b[40..48].copy_from_slice(&(checkpoint - 0x28).to_le_bytes());
        b[48..52].copy_from_slice(&1u32.to_le_bytes());
        b[seg_at..seg_at + 4].copy_from_slice(&seg.to_le_bytes());
        let crc = crc32c(&b[..crc_at]);
        b[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn reads_the_checkpoint_of_every_supported_major() {
        for major in 13..=18 {
            let c = parse(&file(major, 6, 0x2_0000_0100, 16 << 20), Major::of(major)).unwrap();
            assert_eq!(c.state, DbState::InProduction);
            assert_eq!(c.checkpoint, Lsn(0x2_0000_0100));
            assert_eq!(c.redo, Lsn(0x2_0000_00D8));
            assert_eq!(c.timeline, 1);
            assert_eq!(c.segment_size, 16 << 20);
            assert_eq!(c.updated, Timestamp::from_second(1_900_000_000).ok());
        }
        let standby = parse(&file(16, 5, 0x100, 1 << 20), Major::of(16)).unwrap();
        assert!(standby.state.in_recovery());
    }

    #[test]
    fn hostile_bytes_are_errors() {
        let good = file(16, 6, 0x100, 16 << 20);
        assert_eq!(
            parse(&good[..100], Major::of(16)),
            Err(ControlError::Size(100))
        );
        let mut bad = good.clone();
        bad[33] ^= 1;
        assert!(matches!(
            parse(&bad, Major::of(16),),
            Err(ControlError::Checksum { .. })
        ));
        assert!(matches!(
            parse(&file(16, 99, 0x100, 16 << 20), Major::of(16)),
            Err(ControlError::State(99))
        ));
        assert!(matches!(
            parse(&file(16, 6, 0x100, 12345), Major::of(16)),
            Err(ControlError::SegmentSize(12345))
        ));
    }
}
