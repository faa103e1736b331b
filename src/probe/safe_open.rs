//! Opening files under the kubelet root without ever following a symlink.
//!
//! Every path component is opened relative to its parent's descriptor with `O_NOFOLLOW`, so a
//! symlink planted anywhere below the root (by a pod that can write its volume, or by a race
//! between listing and opening) makes the open fail instead of leading outside. Crossing a mount
//! point is fine: that is how a volume's filesystem is reached.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, open, openat};
use nix::sys::stat::{Mode, SFlag, fstat};

const WALK: OFlag = OFlag::O_PATH
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Opens a trusted root directory (the operator named it, so a symlinked root is allowed).
pub fn open_root(root: &Path) -> Result<OwnedFd, Errno> {
    open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Opens the directory `root/components...` as an `O_PATH` descriptor, refusing symlinks.
pub fn open_dir_beneath<Fd: AsFd>(root: Fd, components: &[&OsStr]) -> Result<OwnedFd, Errno> {
    let mut cur: Option<OwnedFd> = None;
    for c in components {
        if c.is_empty() || *c == "." || *c == ".." || c.as_encoded_bytes().contains(&b'/') {
            return Err(Errno::EINVAL);
        }
        let next = match &cur {
            None => openat(root.as_fd(), *c, WALK, Mode::empty())?,
            Some(fd) => openat(fd.as_fd(), *c, WALK, Mode::empty())?,
        };
        cur = Some(next);
    }
    match cur {
        Some(fd) => Ok(fd),
        None => Err(Errno::EINVAL),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Open(#[from] Errno),
    #[error("not a regular file")]
    NotRegular,
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads a small regular file `name` inside directory `dir`, refusing symlinks, FIFOs and
/// devices, and anything over `cap` bytes.
pub fn read_capped<Fd: AsFd>(dir: Fd, name: &OsStr, cap: u64) -> Result<Vec<u8>, ReadError> {
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_CLOEXEC
        | OFlag::O_NOCTTY;
    let fd = openat(dir.as_fd(), name, flags, Mode::empty())?;
    let st = fstat(&fd)?;
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        return Err(ReadError::NotRegular);
    }
    let mut buf = Vec::new();
    File::from(fd).take(cap + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(ReadError::TooLarge(cap));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_symlinked_component_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(outside.path().join("secret"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("real/f"))
            .unwrap();
        let root = open_root(dir.path()).unwrap();
        assert!(open_dir_beneath(&root, &[OsStr::new("real")]).is_ok());
        // O_NOFOLLOW with O_DIRECTORY fails a symlink with ENOTDIR (ELOOP without O_DIRECTORY).
        let e = open_dir_beneath(&root, &[OsStr::new("link")]).unwrap_err();
        assert!(matches!(e, Errno::ELOOP | Errno::ENOTDIR), "{e}");
        assert_eq!(
            open_dir_beneath(&root, &[OsStr::new("..")]).unwrap_err(),
            Errno::EINVAL
        );
        // An O_PATH directory descriptor serves as the base for reads below it.
        let real = open_dir_beneath(&root, &[OsStr::new("real")]).unwrap();
        assert!(matches!(
            read_capped(&real, OsStr::new("f"), 10),
            Err(ReadError::Open(Errno::ELOOP))
        ));
    }

    #[test]
    fn caps_size() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("big"), vec![b'a'; 100]).unwrap();
        let d = open_root(dir.path()).unwrap();
        assert!(matches!(
            read_capped(&d, OsStr::new("big"), 10),
            Err(ReadError::TooLarge(10))
        ));
        assert_eq!(read_capped(&d, OsStr::new("big"), 100).unwrap().len(), 100);
    }
}
