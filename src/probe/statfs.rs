//! statfs (statvfs) into a [`Measurement`], computed the way GNU `df` computes its columns.

use std::os::fd::AsFd;
use std::path::Path;

use nix::errno::Errno;
use nix::sys::statvfs::{Statvfs, fstatvfs, statvfs};
use serde::Serialize;

use crate::decide::Measurement;

/// One statfs result: the measurement plus the facts needed to check it against `stat -f`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FsStats {
    pub measurement: Measurement,
    /// The unit the block counts are in (`f_frsize`, falling back to `f_bsize`).
    pub block_size: u64,
    pub blocks: u64,
    pub inodes_free: u64,
}

impl FsStats {
    /// Like `df`, which hides filesystems with no blocks (kernel interfaces such as cgroup2).
    pub fn is_empty(&self) -> bool {
        self.blocks == 0
    }
}

// The casts are no-ops on 64-bit Linux but not on 32-bit targets, where the fields are 32 bits.
#[allow(clippy::unnecessary_cast)]
pub fn from_statvfs(s: &Statvfs) -> FsStats {
    // f_frsize is the unit of the block counts; f_bsize is only the preferred I/O size.
    let unit = match s.fragment_size() as u64 {
        0 => s.block_size() as u64,
        f => f,
    };
    let blocks = s.blocks() as u64;
    let free = s.blocks_free() as u64;
    let avail = s.blocks_available() as u64;
    let files = s.files() as u64;
    let files_free = s.files_free() as u64;
    FsStats {
        measurement: Measurement {
            capacity_bytes: blocks.saturating_mul(unit),
            used_bytes: blocks.saturating_sub(free).saturating_mul(unit),
            available_bytes: avail.saturating_mul(unit),
            inodes_total: files,
            inodes_used: files.saturating_sub(files_free),
        },
        block_size: unit,
        blocks,
        inodes_free: files_free,
    }
}

/// statfs of a path the caller chose (follows symlinks, like `df PATH`).
pub fn statfs_path(path: &Path) -> Result<FsStats, Errno> {
    statvfs(path).map(|s| from_statvfs(&s))
}

/// statfs of an already opened (possibly `O_PATH`) descriptor: no path is resolved again.
pub fn statfs_fd<Fd: AsFd>(fd: Fd) -> Result<FsStats, Errno> {
    fstatvfs(fd).map(|s| from_statvfs(&s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_filesystem_measures_consistently() {
        let s = statfs_path(Path::new("/")).unwrap();
        let m = s.measurement;
        assert!(m.used_bytes <= m.capacity_bytes);
        assert_eq!(m.capacity_bytes, s.blocks * s.block_size);
        assert!(s.block_size.is_power_of_two());
    }

    #[test]
    fn missing_path_is_an_errno() {
        assert_eq!(
            statfs_path(Path::new("/nonexistent/headroom")).unwrap_err(),
            Errno::ENOENT
        );
    }
}
