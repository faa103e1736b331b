//! The mount table, from `/proc/self/mountinfo` (parsed line by line with `procfs`).
//!
//! procfs keeps the kernel's octal escapes (`\040` for a space, `\011`, `\012`, `\134`) in paths,
//! so mount points, roots and sources are unescaped here; without that a volume whose path holds a
//! space would never match its mount.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use procfs::process::MountInfo;
use serde::Serialize;

use super::ProbeError;

pub const MOUNTINFO: &str = "/proc/self/mountinfo";

/// One line of mountinfo, reduced to what the probe uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fs_type: String,
    /// The mount source (`/dev/sda1`, `server:/export`); `None` when the kernel says `none`.
    pub source: Option<String>,
    /// `major:minor` of the filesystem (`st_dev`).
    pub device: String,
    /// The directory of the filesystem that is mounted here: `/` for a whole filesystem, a
    /// subdirectory for a bind mount of one.
    pub root: PathBuf,
}

impl MountEntry {
    /// A mount of a subdirectory of its filesystem rather than of the whole filesystem.
    pub fn is_subdir_bind(&self) -> bool {
        self.root != Path::new("/")
    }
}

/// Reads this process's mount table.
pub fn read_mountinfo() -> Result<Vec<MountEntry>, ProbeError> {
    read_mountinfo_from(Path::new(MOUNTINFO))
}

pub fn read_mountinfo_from(path: &Path) -> Result<Vec<MountEntry>, ProbeError> {
    let bytes = read_whole(path).map_err(|source| ProbeError::Io {
        path: path.to_path_buf(),
        action: "read the mount table",
        source,
    })?;
    parse_mountinfo(&bytes, path)
}

/// Reads a procfs file in large reads: its size is unknown (0), and `fs::read` would start
/// small and double, one `read` of the generated text per step (dozens for 500 mounts).
fn read_whole(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    const CHUNK: usize = 256 * 1024;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0; CHUNK];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len + CHUNK, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// Parses mountinfo text. A line procfs cannot parse is an error naming the file and line: a
/// mount table read half-way would make mounted volumes look unmounted.
pub fn parse_mountinfo(bytes: &[u8], origin: &Path) -> Result<Vec<MountEntry>, ProbeError> {
    let mut out = Vec::new();
    for (idx, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line_err = |message: String| ProbeError::MountInfo {
            path: origin.to_path_buf(),
            line: idx + 1,
            message,
        };
        // Non-UTF-8 bytes (the kernel escapes only space, tab, newline and backslash) are
        // replaced by octal escapes so procfs can split the line, then restored byte-exact.
        let text = escape_non_utf8(raw);
        let info = MountInfo::from_line(&text).map_err(|e| line_err(e.to_string()))?;
        out.push(MountEntry {
            mount_point: PathBuf::from(unescape(&info.mount_point.to_string_lossy())),
            fs_type: info.fs_type,
            source: info
                .mount_source
                .map(|s| String::from_utf8_lossy(unescape(&s).as_encoded_bytes()).into_owned()),
            device: info.majmin,
            root: PathBuf::from(unescape(&info.root)),
        });
    }
    Ok(out)
}

fn escape_non_utf8(raw: &[u8]) -> String {
    match std::str::from_utf8(raw) {
        Ok(s) => s.to_owned(),
        Err(_) => {
            let mut s = String::with_capacity(raw.len() * 2);
            for chunk in raw.utf8_chunks() {
                s.push_str(chunk.valid());
                for b in chunk.invalid() {
                    s.push_str(&format!("\\{b:03o}"));
                }
            }
            s
        }
    }
}

/// Undoes the kernel's `\ooo` escapes, byte-exact (the result may not be UTF-8).
pub fn unescape(s: &str) -> OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && is_octal_triplet(&b[i + 1..i + 4]) {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    OsString::from_vec(out)
}

fn is_octal_triplet(t: &[u8]) -> bool {
    t.len() == 3 && t.iter().all(|c| (b'0'..=b'7').contains(c)) && t[0] <= b'3'
}

/// Mount lookups by mount point, built once per scan so locating N volumes is not N x M.
pub struct MountIndex<'a> {
    by_point: HashMap<&'a Path, &'a MountEntry>,
}

impl<'a> MountIndex<'a> {
    pub fn new(mounts: &'a [MountEntry]) -> Self {
        // Later entries overwrite earlier ones: a later mount on the same point hides them.
        let by_point = mounts
            .iter()
            .map(|m| (m.mount_point.as_path(), m))
            .collect();
        MountIndex { by_point }
    }

    /// The mount visible at exactly `path`.
    pub fn at(&self, path: &Path) -> Option<&'a MountEntry> {
        self.by_point.get(path).copied()
    }

    /// The mount that holds `path`: its nearest ancestor (or itself) that is a mount point.
    pub fn containing(&self, path: &Path) -> Option<&'a MountEntry> {
        path.ancestors().find_map(|a| self.at(a))
    }
}

/// Filesystem types `df` never shows (gnulib's `ME_DUMMY`), plus kernel interfaces that always
/// report zero blocks; the zero-blocks rule in the caller catches the rest, like `df`.
const DUMMY_TYPES: &[&str] = &[
    "autofs",
    "proc",
    "subfs",
    "debugfs",
    "devpts",
    "fusectl",
    "fuse.portal",
    "mqueue",
    "rpc_pipefs",
    "sysfs",
    "devfs",
    "kernfs",
    "ignore",
    "none",
    "cgroup",
    "cgroup2",
    "bpf",
    "tracefs",
    "securityfs",
    "pstore",
    "configfs",
    "binfmt_misc",
    "nsfs",
    "efivarfs",
];

pub fn is_dummy(fs_type: &str) -> bool {
    DUMMY_TYPES.contains(&fs_type)
}

/// The host's real filesystems, one per device, chosen as `df` chooses: drop dummy types and
/// over-mounted entries, then per device prefer a source that is a path (a real device), then a
/// whole-filesystem mount over a bind of a subdirectory, then the shortest mount point.
pub fn host_filesystems(mounts: &[MountEntry]) -> Vec<&MountEntry> {
    let index = MountIndex::new(mounts);
    let mut chosen: Vec<&MountEntry> = Vec::new();
    let mut by_device: HashMap<&str, usize> = HashMap::new();
    for m in mounts {
        let visible = index
            .at(&m.mount_point)
            .is_some_and(|top| std::ptr::eq(top, m));
        if is_dummy(&m.fs_type) || !visible {
            continue;
        }
        match by_device.get(m.device.as_str()) {
            None => {
                by_device.insert(&m.device, chosen.len());
                chosen.push(m);
            }
            Some(&i) => {
                if df_prefers(m, chosen[i]) {
                    chosen[i] = m;
                }
            }
        }
    }
    chosen
}

fn df_prefers(new: &MountEntry, old: &MountEntry) -> bool {
    let key = |m: &MountEntry| {
        (
            !m.source.as_deref().is_some_and(|s| s.contains('/')),
            m.is_subdir_bind(),
            m.mount_point.as_os_str().len(),
        )
    };
    key(new) < key(old)
}

#[cfg(test)]
mod tests {

    use super::*;

    const SAMPLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw,nosuid shared:2 - proc proc rw
24 22 0:45 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv\\040one/mount rw shared:9 - tmpfs tmpfs rw,size=1024k
25 22 8:1 /srv/data /mnt/bind rw - ext4 /dev/sda1 rw
26 22 0:50 / /mnt/nfs rw - nfs4 srv:/export\\040x rw
27 22 0:51 / /mnt/tab\\011and\\134slash rw - tmpfs none rw
";

    fn parse(s: &str) -> Vec<MountEntry> {
        parse_mountinfo(s.as_bytes(), Path::new("test")).unwrap()
    }

    #[test]
    fn parses_fields_and_unescapes_paths() {
        let m = parse(SAMPLE);
        assert_eq!(m.len(), 6);
        assert_eq!(
            m[2].mount_point,
            Path::new("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv one/mount")
        );
        assert_eq!(m[2].device, "0:45");
        assert_eq!(m[2].fs_type, "tmpfs");
        assert_eq!(m[3].root, Path::new("/srv/data"));
        assert!(m[3].is_subdir_bind());
        assert!(!m[0].is_subdir_bind());
        assert_eq!(m[4].source.as_deref(), Some("srv:/export x"));
        assert_eq!(m[5].mount_point, Path::new("/mnt/tab\tand\\slash"));
        assert_eq!(m[5].source, None);
    }

    #[test]
    fn non_utf8_paths_survive_byte_exact() {
        let mut line = b"30 22 0:60 / /mnt/caf".to_vec();
        line.push(0xe9);
        line.extend_from_slice(b" rw - tmpfs tmpfs rw\n");
        let m = parse_mountinfo(&line, Path::new("t")).unwrap();
        assert_eq!(
            m[0].mount_point.as_os_str().as_encoded_bytes(),
            b"/mnt/caf\xe9"
        );
    }

    #[test]
    fn backslash_not_followed_by_octal_is_kept() {
        assert_eq!(unescape("a\\x\\04"), OsString::from("a\\x\\04"));
        assert_eq!(unescape("a\\0401"), OsString::from("a 1"));
    }

    #[test]
    fn malformed_line_names_file_and_line() {
        let err = parse_mountinfo(
            b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\ngarbage\n",
            Path::new("/x/mi"),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/x/mi") && msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn lookups_prefer_last_and_longest() {
        let mut m = parse(SAMPLE);
        m.push(MountEntry {
            device: "0:99".into(),
            ..m[4].clone()
        });
        let ix = MountIndex::new(&m);
        assert_eq!(ix.at(Path::new("/mnt/nfs")).unwrap().device, "0:99");
        let inner = ix.containing(Path::new("/mnt/nfs/a/b")).unwrap();
        assert_eq!(inner.device, "0:99");
        let top = ix.containing(Path::new("/mntx")).unwrap();
        assert_eq!(top.mount_point, Path::new("/"));
        assert_eq!(ix.containing(Path::new("/mnt/nfs")).unwrap().device, "0:99");
        assert!(ix.at(Path::new("/mnt")).is_none());
    }

    #[test]
    fn host_filesystems_skip_dummies_and_dedup_like_df() {
        let m = parse(SAMPLE);
        let host: Vec<_> = host_filesystems(&m)
            .iter()
            .map(|e| e.mount_point.clone())
            .collect();
        assert!(host.contains(&PathBuf::from("/")));
        assert!(!host.contains(&PathBuf::from("/proc")));
        // The bind of /srv/data shares 8:1 with / and loses to the whole-filesystem mount.
        assert!(!host.contains(&PathBuf::from("/mnt/bind")));
        assert_eq!(host.len(), 4);
    }

    #[test]
    fn overmounted_entry_is_hidden() {
        let text = "1 0 0:30 / /m rw - tmpfs a rw\n2 1 0:31 / /m rw - tmpfs b rw\n";
        let m = parse(text);
        let host = host_filesystems(&m);
        assert_eq!(host.len(), 1);
        assert_eq!(host[0].device, "0:31");
    }
}
