//! WAL positions and the pieces of PostgreSQL's on-disk formats every reader needs: the LSN, the
//! segment-name arithmetic, the supported major versions and the CRC-32C their files carry.

use std::fmt;

use serde::Serialize;

pub use crate::decide::Lsn;

/// Where a segment named `TTTTTTTTXXXXXXXXYYYYYYYY` (timeline, log, segment) starts, for
/// segments of `segment_size` bytes: `XXXXXXXX * (4 GiB / segment_size) + YYYYYYYY` segments in.
/// `None` for a name that is not a segment's, or a segment size that is not a power of two from
/// 1 MiB to 1 GiB (what `initdb --wal-segsize` accepts).
pub fn segment_start(name: &str, segment_size: u64) -> Option<Lsn> {
    if !is_segment_name(name) {
        return None;
    }
    if !valid_segment_size(segment_size) {
        return None;
    }
    let log = u64::from_str_radix(&name[8..16], 16).ok()?;
    let seg = u64::from_str_radix(&name[16..24], 16).ok()?;
    let per_log = 0x1_0000_0000 / segment_size;
    if seg >= per_log {
        return None;
    }
    log.checked_mul(per_log)?
        .checked_add(seg)?
        .checked_mul(segment_size)
        .map(Lsn)
}

/// WAL segment file names are 24 hex digits (timeline, log, segment).
pub fn is_segment_name(name: &str) -> bool {
    name.len() == 24 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

pub fn valid_segment_size(size: u64) -> bool {
    size.is_power_of_two() && (1 << 20..=1 << 30).contains(&size)
}

/// The major versions whose on-disk formats headroom reads (the ones CloudNativePG runs).
pub const SUPPORTED_MAJORS: std::ops::RangeInclusive<u32> = 13..=18;

/// A supported major version, read from `PG_VERSION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Major(u32);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MajorError {
    #[error("PG_VERSION is not a version number")]
    Unreadable,
    #[error("PostgreSQL {0} is not supported: headroom reads the on-disk formats of 13 to 18 only")]
    Unsupported(String),
}

impl Major {
    /// Parses `PG_VERSION` (`15\n`; `9.6\n` before 10).
    pub fn parse(text: &[u8]) -> Result<Major, MajorError> {
        let text = std::str::from_utf8(text).map_err(|_| MajorError::Unreadable)?;
        let text = text.trim();
        if text.is_empty()
            || text.len() > 8
            || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        {
            return Err(MajorError::Unreadable);
        }
        match text.parse::<u32>() {
            Ok(n) if SUPPORTED_MAJORS.contains(&n) => Ok(Major(n)),
            _ => Err(MajorError::Unsupported(text.to_string())),
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }

    #[cfg(test)]
    pub fn of(n: u32) -> Major {
        assert!(SUPPORTED_MAJORS.contains(&n));
        Major(n)
    }
}

impl fmt::Display for Major {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// CRC-32C (Castagnoli), the checksum of `pg_control` and of slot state files.
pub fn crc32c(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |crc, &b| {
        CRC_TABLE[((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8)
    })
}

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0x82F6_3B78 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// Little-endian fixed-width reads at an offset; `None` past the end (the caller has checked the
/// length, but a tenant's bytes never get an index that can panic).
pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

pub fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        // The check value of CRC-32C over "123456789" (RFC 3720, appendix B.4).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn lsn_shows_as_postgres_does_and_segments_map_to_positions() {
        assert_eq!(Lsn(0x16_B374_D848).to_string(), "16/B374D848");
        let mib16 = 16 << 20;
        assert_eq!(
            segment_start("000000010000000000000003", mib16),
            Some(Lsn(3 * mib16))
        );
        assert_eq!(
            segment_start("00000002000000010000000A", mib16),
            Some(Lsn(0x1_0000_0000 + 10 * mib16))
        );
        // 256 segments of 16 MiB per log file: FF is the last, 100 is no segment.
        assert!(segment_start("0000000100000000000000FF", mib16).is_some());
        assert_eq!(segment_start("000000010000000000000100", mib16), None);
        assert_eq!(segment_start("00000001000000000000000G", mib16), None);
        assert_eq!(segment_start("00000001.history", mib16), None);
        assert_eq!(segment_start("000000010000000000000001", 3), None);
        // The largest name does not overflow.
        assert!(segment_start("FFFFFFFFFFFFFFFF000000FF", mib16).is_some());
        assert_eq!(Lsn(10).since(Lsn(20)), 0);
    }

    #[test]
    fn majors_13_to_18_are_read_and_others_refused_by_name() {
        assert_eq!(Major::parse(b"15\n").unwrap().get(), 15);
        assert_eq!(Major::parse(b"18").unwrap().get(), 18);
        for old in ["12", "9.6", "19", "100"] {
            let e = Major::parse(old.as_bytes()).unwrap_err();
            assert!(e.to_string().contains(&format!("PostgreSQL {old} ")), "{e}");
        }
        for bad in [&b""[..], b"fifteen", b"\xff\xfe", b"1234567890123"] {
            assert_eq!(Major::parse(bad), Err(MajorError::Unreadable));
        }
    }

    #[test]
    fn reads_past_the_end_are_none() {
        let b = [1u8, 0, 0, 0, 2];
        assert_eq!(u32_at(&b, 0), Some(1));
        assert_eq!(u32_at(&b, 2), None);
        assert_eq!(u64_at(&b, 0), None);
        assert_eq!(u32_at(&b, usize::MAX), None);
    }
}
