//! The `FITRIM` ioctl, as `fstrim` issues it: ask the filesystem mounted at a directory to
//! discard its free blocks, so thin-provisioned storage underneath can reuse them.
//!
//! Blocking (a trim of a large filesystem can take minutes): async callers go through
//! `spawn_blocking`. Needs `CAP_SYS_ADMIN`.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::sys::stat::{Mode, fstat, major, minor};

/// `struct fstrim_range` from `<linux/fs.h>`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FstrimRange {
    pub start: u64,
    pub len: u64,
    pub minlen: u64,
}

// #define FITRIM _IOWR('X', 121, struct fstrim_range)
nix::ioctl_readwrite!(fitrim_ioctl, b'X', 121, FstrimRange);

#[derive(Debug, thiserror::Error)]
pub enum TrimError {
    #[error("cannot open {}: {errno}", path.display())]
    Open { path: PathBuf, errno: Errno },
    #[error(
        "{}: the filesystem does not support discard (FITRIM){fs}; tmpfs, network filesystems and \
         devices without discard support cannot be trimmed",
        path.display(),
        fs = fs_type.as_deref().map(|t| format!(" ({t})")).unwrap_or_default()
    )]
    NotSupported {
        path: PathBuf,
        fs_type: Option<String>,
    },
    #[error(
        "{}: not permitted; trimming needs CAP_SYS_ADMIN (run as root, or deploy the DaemonSet's \
         reclaim-space variant)",
        path.display()
    )]
    Permission { path: PathBuf },
    #[error("{}: is a mount point of device {found}, expected {expected}; the volume moved, not trimming", path.display())]
    DeviceChanged {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("{}: FITRIM failed: {errno}", path.display())]
    Ioctl { path: PathBuf, errno: Errno },
}

fn open_dir(path: &Path) -> Result<OwnedFd, TrimError> {
    open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| TrimError::Open {
        path: path.to_path_buf(),
        errno,
    })
}

/// `major:minor` of the filesystem holding an open directory.
fn device_of(fd: &OwnedFd, path: &Path) -> Result<String, TrimError> {
    let st = fstat(fd).map_err(|errno| TrimError::Open {
        path: path.to_path_buf(),
        errno,
    })?;
    let dev = st.st_dev;
    Ok(format!("{}:{}", major(dev), minor(dev)))
}

/// The filesystem type at `path`, for messages only.
fn fs_type(path: &Path) -> Option<String> {
    let table = crate::probe::mounts::read_mountinfo().ok()?;
    let canonical = std::fs::canonicalize(path).ok()?;
    table
        .iter()
        .rfind(|m| m.mount_point == canonical)
        .map(|m| m.fs_type.clone())
}

fn trim_fd(fd: &OwnedFd, path: &Path) -> Result<u64, TrimError> {
    // The whole filesystem, any extent size: what `fstrim` does without options.
    let mut range = FstrimRange {
        start: 0,
        len: u64::MAX,
        minlen: 0,
    };
    // SAFETY: `fd` is an open descriptor for the call's duration and `range` is a valid,
    // exclusively borrowed `struct fstrim_range` the kernel reads and writes.
    match unsafe { fitrim_ioctl(fd.as_raw_fd(), &mut range) } {
        // On return the kernel has replaced `len` with the number of bytes it discarded.
        Ok(_) => Ok(range.len),
        Err(Errno::EOPNOTSUPP | Errno::ENOTTY) => Err(TrimError::NotSupported {
            path: path.to_path_buf(),
            fs_type: fs_type(path),
        }),
        Err(Errno::EPERM | Errno::EACCES) => Err(TrimError::Permission {
            path: path.to_path_buf(),
        }),
        Err(errno) => Err(TrimError::Ioctl {
            path: path.to_path_buf(),
            errno,
        }),
    }
}

/// Trims the filesystem mounted at `path`; returns the bytes the kernel reports discarded.
/// (Filesystems report what they asked the device to discard; a repeat trim of unchanged free
/// space may report it again, ext4 skips groups it already trimmed since mount.)
pub fn fitrim(path: &Path) -> Result<u64, TrimError> {
    let fd = open_dir(path)?;
    trim_fd(&fd, path)
}

/// As [`fitrim`], but only if the directory still holds the filesystem of device `expected`
/// (`major:minor`, as the probe recorded it): between a scan and the trim the volume may have
/// been unmounted, and trimming the directory left behind would trim the host's disk instead.
/// The check and the trim use the same descriptor, so nothing can change in between.
pub fn fitrim_device(path: &Path, expected: &str) -> Result<u64, TrimError> {
    let fd = open_dir(path)?;
    let found = device_of(&fd, path)?;
    if found != expected {
        return Err(TrimError::DeviceChanged {
            path: path.to_path_buf(),
            expected: expected.to_string(),
            found,
        });
    }
    trim_fd(&fd, path)
}
