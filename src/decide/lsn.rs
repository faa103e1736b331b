//! WAL positions as the engine's inputs carry them: each slot's `restart_lsn` and the position
//! its retention is measured from, shown as PostgreSQL shows them so they read against
//! `pg_replication_slots`. Here rather than in `postgres` because [`super::WalHealth`] carries
//! them; `postgres::lsn` re-exports [`Lsn`] beside the on-disk arithmetic.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A WAL position (`XLogRecPtr`): a byte offset into the WAL stream, shown as Postgres shows it
/// (`16/B374D848`). Zero is `InvalidXLogRecPtr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    pub fn is_valid(self) -> bool {
        self.0 != 0
    }

    /// Bytes from `older` up to `self`; zero when `older` is not older.
    pub fn since(self, older: Lsn) -> u64 {
        self.0.saturating_sub(older.0)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LsnError {
    /// Text that is not an LSN (`X/Y`, each up to 8 hex digits).
    #[error("'{0}' is not a WAL position (X/Y in hex, as 16/B374D848)")]
    NotAnLsn(String),
}

impl FromStr for Lsn {
    type Err = LsnError;

    /// Postgres's text form, as `pg_lsn` prints and reads it.
    fn from_str(s: &str) -> Result<Lsn, LsnError> {
        let bad = || LsnError::NotAnLsn(s.chars().take(40).collect());
        let (hi, lo) = s.split_once('/').ok_or_else(bad)?;
        let half = |t: &str| {
            let ok = (1..=8).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_hexdigit());
            ok.then(|| u64::from_str_radix(t, 16).ok()).flatten()
        };
        match (half(hi), half(lo)) {
            (Some(h), Some(l)) => Ok(Lsn(h << 32 | l)),
            _ => Err(bad()),
        }
    }
}

impl Serialize for Lsn {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Lsn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Lsn, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Where the WAL position a slot's retention is measured from came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PositionSource {
    /// `pg_control`'s last checkpoint (on the volume, no credentials).
    Checkpoint,
    /// The start of the segment written last in `pg_wal` (on the volume), when it is later
    /// than the checkpoint.
    NewestSegment,
    /// The server: `pg_current_wal_lsn()` on a primary, the last received (else replayed) LSN
    /// on a standby.
    Sql,
}

impl PositionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            PositionSource::Checkpoint => "checkpoint",
            PositionSource::NewestSegment => "newest_segment",
            PositionSource::Sql => "sql",
        }
    }

    /// How far the live insert position may be ahead of a position from this source (README,
    /// "WAL health"): what a slot's retained bytes may be short of the server's.
    pub fn bound(self) -> &'static str {
        match self {
            PositionSource::Sql => "the server's own",
            PositionSource::Checkpoint | PositionSource::NewestSegment => {
                "the server's is ahead by less than one WAL segment plus WAL not yet written out"
            }
        }
    }
}

/// The WAL position retention was measured from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalPosition {
    pub lsn: Lsn,
    pub source: PositionSource,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_read_back_as_postgres_prints_them() {
        for text in ["0/0", "0/3000148", "16/B374D848", "FFFFFFFF/FFFFFFFF"] {
            let lsn: Lsn = text.parse().expect(text);
            assert_eq!(lsn.to_string(), text);
        }
        assert_eq!("16/b374d848".parse(), Ok(Lsn(0x16_B374_D848)));
        for bad in [
            "",
            "0",
            "/1",
            "1/",
            "1/2/3",
            "G/1",
            "123456789/0",
            "-1/0",
            " 0/1",
        ] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
        let json = serde_json::to_string(&Lsn(0x3000148)).expect("json");
        assert_eq!(json, "\"0/3000148\"");
        assert_eq!(
            serde_json::from_str::<Lsn>(&json).expect("back"),
            Lsn(0x3000148)
        );
    }
}
