//! Opening files under the kubelet root without ever following a symlink.
//!
//! A path below a root descriptor is resolved in one `openat2` call with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: a symlink planted anywhere below the root (by a
//! pod that can write its volume, or by a race between listing and opening) makes the open fail
//! instead of leading outside. Where `openat2` is missing (kernels before 5.6) or refused (a
//! seccomp profile that predates it answers ENOSYS or EPERM), each component is opened relative
//! to its parent's descriptor with `O_NOFOLLOW` instead: the same guarantee in one call per
//! component. Crossing a mount point is fine either way (no `RESOLVE_NO_XDEV`): that is how a
//! volume's filesystem is reached, and its mount point is the last component.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, open, openat, openat2};
use nix::sys::stat::{Mode, SFlag, fstat};

/// Flags for a directory reached by walking: a handle for `*at` calls and `fstatfs`, nothing
/// read through it.
pub const WALK: OFlag = OFlag::O_PATH
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

const BENEATH: ResolveFlag = ResolveFlag::RESOLVE_BENEATH
    .union(ResolveFlag::RESOLVE_NO_SYMLINKS)
    .union(ResolveFlag::RESOLVE_NO_MAGICLINKS);

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
    open_beneath(root, components, WALK)
}

/// Opens `root/components...` with `flags` (which must include `O_NOFOLLOW`, and `O_DIRECTORY`
/// for a directory), refusing symlinks, `..` and anything that resolves outside `root`.
pub fn open_beneath<Fd: AsFd>(
    root: Fd,
    components: &[&OsStr],
    flags: OFlag,
) -> Result<OwnedFd, Errno> {
    let mut joined = OsString::with_capacity(components.iter().map(|c| c.len() + 1).sum());
    for (i, c) in components.iter().enumerate() {
        check_component(c)?;
        if i > 0 {
            joined.push("/");
        }
        joined.push(c);
    }
    if components.is_empty() {
        return Err(Errno::EINVAL);
    }
    let how = OpenHow::new().flags(flags).resolve(BENEATH);
    match openat2(root.as_fd(), joined.as_os_str(), how) {
        Err(Errno::ENOSYS | Errno::EPERM) => walk_beneath(root, components, flags),
        other => other,
    }
}

/// [`open_beneath`] one component at a time, without `openat2`: the fallback, public so that
/// tests can hold both to the same answers.
pub fn walk_beneath<Fd: AsFd>(
    root: Fd,
    components: &[&OsStr],
    flags: OFlag,
) -> Result<OwnedFd, Errno> {
    let Some((last, dirs)) = components.split_last() else {
        return Err(Errno::EINVAL);
    };
    let mut cur: Option<OwnedFd> = None;
    for c in dirs {
        check_component(c)?;
        let next = match &cur {
            None => openat(root.as_fd(), *c, WALK, Mode::empty())?,
            Some(fd) => openat(fd.as_fd(), *c, WALK, Mode::empty())?,
        };
        cur = Some(next);
    }
    check_component(last)?;
    match &cur {
        None => openat(root.as_fd(), *last, flags, Mode::empty()),
        Some(fd) => openat(fd.as_fd(), *last, flags, Mode::empty()),
    }
}

fn check_component(c: &OsStr) -> Result<(), Errno> {
    if c.is_empty() || c == "." || c == ".." || c.as_encoded_bytes().contains(&b'/') {
        return Err(Errno::EINVAL);
    }
    Ok(())
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

/// Opening a file to read: no symlink, no blocking open of a FIFO, no controlling terminal.
const READ: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_CLOEXEC)
    .union(OFlag::O_NOCTTY);

/// Reads a small regular file `name` inside directory `dir`, refusing symlinks, FIFOs and
/// devices, and anything over `cap` bytes.
pub fn read_capped<Fd: AsFd>(dir: Fd, name: &OsStr, cap: u64) -> Result<Vec<u8>, ReadError> {
    read_open(openat(dir.as_fd(), name, READ, Mode::empty())?, cap)
}

/// [`read_capped`] of `root/components...`, resolved as [`open_beneath`] resolves: one call
/// where the directory's descriptor would be two more.
pub fn read_capped_beneath<Fd: AsFd>(
    root: Fd,
    components: &[&OsStr],
    cap: u64,
) -> Result<Vec<u8>, ReadError> {
    read_open(open_beneath(root, components, READ)?, cap)
}

fn read_open(fd: OwnedFd, cap: u64) -> Result<Vec<u8>, ReadError> {
    let st = fstat(&fd)?;
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        return Err(ReadError::NotRegular);
    }
    // Sized from fstat (one read and the read that sees the end, where an unsized buffer takes
    // a probe read more), yet read to the end: the size is a hint, the cap is the limit.
    let hint = u64::try_from(st.st_size).unwrap_or(0).min(cap) as usize;
    let mut buf = Vec::with_capacity(hint + 1);
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

    /// Runs `f` on a thread of its own whose `openat2` fails with `errno`, as under a container
    /// runtime whose seccomp profile predates the call (a filter applies to the thread that
    /// installs it and the threads it starts, not to the rest of the test process).
    fn without_openat2<T: Send>(errno: i32, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                let nr = u32::try_from(libc::SYS_openat2).unwrap();
                // SAFETY: a valid 4-instruction program for this thread; the kernel copies it.
                unsafe {
                    let mut prog = [
                        // The syscall number is the first word of struct seccomp_data.
                        libc::BPF_STMT((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0),
                        libc::BPF_JUMP(
                            (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                            nr,
                            0,
                            1,
                        ),
                        libc::BPF_STMT(
                            (libc::BPF_RET | libc::BPF_K) as u16,
                            libc::SECCOMP_RET_ERRNO | errno as u32,
                        ),
                        libc::BPF_STMT(
                            (libc::BPF_RET | libc::BPF_K) as u16,
                            libc::SECCOMP_RET_ALLOW,
                        ),
                    ];
                    let fprog = libc::sock_fprog {
                        len: prog.len() as u16,
                        filter: prog.as_mut_ptr(),
                    };
                    assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
                    let r = libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        0,
                        &fprog as *const libc::sock_fprog,
                    );
                    assert_eq!(r, 0, "seccomp: {}", Errno::last());
                }
                f()
            })
            .join()
            .unwrap()
        })
    }

    #[test]
    fn falls_back_to_the_component_walk_without_openat2_and_refuses_the_same_things() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b/c")).unwrap();
        std::fs::write(dir.path().join("a/b/c/f"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("a/link")).unwrap();
        let root = open_root(dir.path()).unwrap();
        let abc = ["a", "b", "c"].map(OsStr::new);
        let via_link = ["a", "link"].map(OsStr::new);
        let read = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        for errno in [Errno::ENOSYS, Errno::EPERM] {
            let (probe, opened, listed, read, refused) = without_openat2(errno as i32, || {
                let probe = openat2(&root, "a", OpenHow::new().flags(WALK).resolve(BENEATH));
                let opened =
                    open_dir_beneath(&root, &abc).map(|fd| read_capped(fd, OsStr::new("f"), 10));
                let listed = open_beneath(&root, &abc, read).map(|fd| {
                    let mut d = nix::dir::Dir::from_fd(fd).unwrap();
                    d.iter()
                        .filter_map(Result::ok)
                        .any(|e| e.file_name().to_bytes() == b"f")
                });
                let file = ["a", "b", "c", "f"].map(OsStr::new);
                let read = read_capped_beneath(&root, &file, 10).map_err(|e| e.to_string());
                let refused = open_dir_beneath(&root, &via_link);
                (probe.map(drop), opened, listed, read, refused)
            });
            // The filter works, so the answers below came from the walk.
            assert_eq!(probe, Err(errno));
            assert_eq!(opened.unwrap().unwrap(), b"x");
            assert_eq!(listed, Ok(true));
            assert_eq!(read.as_deref(), Ok(&b"x"[..]));
            let e = refused.unwrap_err();
            assert!(matches!(e, Errno::ELOOP | Errno::ENOTDIR), "{e}");
        }
        // And openat2 itself, where the kernel has it, gives the same answers.
        if openat2(&root, "a", OpenHow::new().flags(WALK).resolve(BENEATH)).is_ok() {
            assert!(open_dir_beneath(&root, &abc).is_ok());
            let e = open_dir_beneath(&root, &via_link).unwrap_err();
            assert!(matches!(e, Errno::ELOOP | Errno::ENOTDIR), "{e}");
            std::fs::create_dir(outside.path().join("d")).unwrap();
            let through = ["a", "link", "d"].map(OsStr::new);
            assert_eq!(open_dir_beneath(&root, &through).unwrap_err(), Errno::ELOOP);
            std::fs::write(outside.path().join("d/f"), b"secret").unwrap();
            let file = ["a", "link", "d", "f"].map(OsStr::new);
            assert!(matches!(
                read_capped_beneath(&root, &file, 10),
                Err(ReadError::Open(Errno::ELOOP))
            ));
        }
    }
}
