//! What the fuzz targets share: how an input is cut into named records, and how a byte-encoded
//! file tree is written to a temporary directory. Both formats are plain enough to write seeds
//! by hand and to build them from real files (`fuzz/seeds.sh`).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// `name=value` records separated by NUL bytes; a record without `=` is a name with an empty
/// value. Values are text as the API server would hand them over (invalid UTF-8 replaced).
pub fn records(data: &[u8]) -> Vec<(String, String)> {
    data.split(|b| *b == 0)
        .map(|r| {
            let (name, value) = match r.iter().position(|b| *b == b'=') {
                Some(i) => (&r[..i], &r[i + 1..]),
                None => (r, &[][..]),
            };
            (
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            )
        })
        .collect()
}

/// The records whose name starts with `prefix`, keyed by the rest of the name (the last one of a
/// name wins, as in a map).
pub fn map_of(records: &[(String, String)], prefix: &str) -> BTreeMap<String, String> {
    records
        .iter()
        .filter_map(|(n, v)| Some((n.strip_prefix(prefix)?.to_string(), v.clone())))
        .collect()
}

/// The value of the last record named `name`.
pub fn value<'a>(records: &'a [(String, String)], name: &str) -> Option<&'a str> {
    records
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// A number record; anything unparsable is `None`.
pub fn number<T: std::str::FromStr>(records: &[(String, String)], name: &str) -> Option<T> {
    value(records, name)?.trim().parse().ok()
}

/// Entries a tree may hold: the readers' own caps are far above, but a tree this size already
/// reaches every branch, and a bigger one only slows the fuzzer down.
pub const MAX_ENTRIES: usize = 256;

/// One entry of an encoded tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    File(Vec<u8>),
    Dir,
    Symlink(Vec<u8>),
    Fifo,
}

/// Decodes a tree: entries one after another, each a kind byte (`f` file, `d` directory, `l`
/// symlink, `p` FIFO; anything else ends the tree), a relative path up to a NUL, a little-endian
/// `u16` length and that many bytes of content (a file's bytes, a link's target; cut short
/// where the input ends). Paths with `..`, `.`, a leading `/` or an empty component are skipped,
/// as is any entry below a path that is not a directory of the tree.
pub fn decode_tree(mut data: &[u8]) -> Vec<(PathBuf, Entry)> {
    let mut out: Vec<(PathBuf, Entry)> = Vec::new();
    while let Some((&kind, rest)) = data.split_first() {
        let Some(nul) = rest.iter().position(|b| *b == 0) else {
            break;
        };
        let path = &rest[..nul];
        let rest = &rest[nul + 1..];
        let len = match rest {
            [a, b, ..] => u16::from_le_bytes([*a, *b]) as usize,
            _ => 0,
        };
        let rest = rest.get(2..).unwrap_or_default();
        let content = &rest[..len.min(rest.len())];
        data = &rest[content.len()..];
        let entry = match kind {
            b'f' => Entry::File(content.to_vec()),
            b'd' => Entry::Dir,
            b'l' => Entry::Symlink(content.to_vec()),
            b'p' => Entry::Fifo,
            _ => break,
        };
        if let Some(path) = relative(path) {
            out.push((path, entry));
        }
        if out.len() >= MAX_ENTRIES {
            break;
        }
    }
    out
}

fn relative(raw: &[u8]) -> Option<PathBuf> {
    let path = Path::new(OsStr::from_bytes(raw));
    if raw.is_empty() || raw.len() > 255 {
        return None;
    }
    let plain = path.components().all(|c| matches!(c, Component::Normal(_)));
    // `a//b` and `a/./b` normalise away: skip them so one path means one entry.
    let exact = path.as_os_str().as_bytes()
        == path
            .components()
            .collect::<PathBuf>()
            .as_os_str()
            .as_bytes();
    (plain && exact).then(|| path.to_path_buf())
}

/// Encodes a tree (for building seeds from real directories).
pub fn encode_tree(entries: &[(PathBuf, Entry)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, entry) in entries {
        let (kind, content): (u8, &[u8]) = match entry {
            Entry::File(b) => (b'f', b),
            Entry::Dir => (b'd', &[]),
            Entry::Symlink(t) => (b'l', t),
            Entry::Fifo => (b'p', &[]),
        };
        let len = content.len().min(u16::MAX as usize);
        out.push(kind);
        out.extend_from_slice(path.as_os_str().as_bytes());
        out.push(0);
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(&content[..len]);
    }
    out
}

/// Writes `entries` below `root`, which must be an empty directory of our own. Never writes
/// outside it: an entry is created only when every directory above it is a directory the tree
/// made (never through a symlink it planted), and files are created `O_EXCL | O_NOFOLLOW`.
pub fn write_tree(root: &Path, entries: &[(PathBuf, Entry)]) {
    use std::collections::BTreeSet;
    use std::os::unix::fs::OpenOptionsExt;
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    let mut taken: BTreeSet<PathBuf> = BTreeSet::new();
    for (path, entry) in entries {
        if taken.contains(path) {
            continue;
        }
        // Every ancestor must be free (made a directory here) or already a directory we made.
        let ancestors: Vec<&Path> = path
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .collect();
        if ancestors
            .iter()
            .any(|a| taken.contains(*a) && !dirs.contains(*a))
        {
            continue;
        }
        for a in ancestors.iter().rev() {
            if !dirs.contains(*a) {
                if std::fs::create_dir(root.join(a)).is_err() {
                    break;
                }
                dirs.insert(a.to_path_buf());
                taken.insert(a.to_path_buf());
            }
        }
        if !ancestors.iter().all(|a| dirs.contains(*a)) {
            continue;
        }
        let full = root.join(path);
        let made = match entry {
            Entry::Dir => {
                let ok = std::fs::create_dir(&full).is_ok();
                if ok {
                    dirs.insert(path.clone());
                }
                ok
            }
            Entry::File(bytes) => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&full)
                .and_then(|mut f| std::io::Write::write_all(&mut f, bytes))
                .is_ok(),
            Entry::Symlink(target) => {
                std::os::unix::fs::symlink(OsStr::from_bytes(target), &full).is_ok()
            }
            Entry::Fifo => mkfifo(&full),
        };
        if made {
            taken.insert(path.clone());
        }
    }
}

fn mkfifo(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    unsafe { libc::mkfifo(c.as_ptr(), 0o600) == 0 }
}

/// A scratch directory for one input: on tmpfs when there is one (a fuzzer writes thousands of
/// trees a second).
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(t) = tempfile::Builder::new()
            .prefix("headroom-fuzz")
            .tempdir_in(shm)
    {
        return t;
    }
    tempfile::Builder::new()
        .prefix("headroom-fuzz")
        .tempdir()
        .unwrap_or_else(|e| panic!("scratch directory: {e}"))
}
