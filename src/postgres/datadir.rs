//! What a data directory says about its server with no credentials: the major version, the role
//! (`standby.signal`, `recovery.signal`, `backup_label`), `pg_control`, every replication slot's
//! state file, and the archiving settings of its configuration files.
//!
//! Every file is the tenant's. Each is opened below the volume's descriptor without following a
//! symlink (see [`super::volume`]), must be a regular file (a FIFO is never read: it is opened
//! non-blocking and refused), and is read only up to a cap; what fails is an error for that one
//! fact, named with its path. The caller bounds the whole read with a deadline.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::stat::SFlag;
use serde::Serialize;

use super::conf::{self, FileError, Files, Lookup};
use super::control::{self, Control};
use super::lsn::{Lsn, Major};
use super::slotfile::{self, SlotFile};
use super::volume::{self, Rel, VolumeError, io_err};
use crate::decide::{PositionSource, ServerRole, WalPosition};
use crate::probe::safe_open::{self, ReadError};

/// Slots read at most (Postgres's `max_replication_slots` is 10 by default).
pub const MAX_SLOTS: usize = 1000;
/// Configuration files are read up to this size each.
pub const MAX_CONF_BYTES: u64 = 1 << 20;

/// `archive_mode` and what archives, from the configuration files; `None` is unknown (a file
/// that may set it was not read).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ArchiveSettings {
    pub mode: Option<String>,
    pub command: Option<String>,
    pub library: Option<String>,
    /// The file that set `archive_mode`, when one did.
    pub mode_file: Option<String>,
    /// Configuration files that could not be read, with the reason.
    pub unread: Vec<String>,
}

/// One `pg_replslot/<dir>/state`, or why it could not be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotRead {
    pub dir: String,
    pub file: Result<SlotFile, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DataDir {
    pub path: PathBuf,
    pub major: Major,
    /// From the signal files: `standby.signal` a standby, `recovery.signal` a point-in-time
    /// restore, neither a primary.
    pub role: ServerRole,
    /// `backup_label`: a base backup restored here has not finished its recovery.
    pub backup_label: bool,
    pub control: Result<Control, String>,
    pub slots: Result<Vec<SlotRead>, String>,
    pub archive: ArchiveSettings,
    /// `checkpoint_timeout` where a configuration file (or the command line) sets it: a physical
    /// slot's file moves only at checkpoints, so this paces judging whether one is in use.
    pub checkpoint_timeout: Option<jiff::SignedDuration>,
}

impl DataDir {
    /// The WAL position as far as the disk shows it: the later of the last checkpoint and the
    /// start of the segment written last (`newest_segment`, from the volume holding `pg_wal`).
    /// It trails the server's insert position by less than one segment plus what the server has
    /// not yet written out (see README, "WAL health").
    pub fn position(&self, newest_segment: Option<&str>) -> Option<Lsn> {
        self.position_from(newest_segment).map(|p| p.lsn)
    }

    /// [`DataDir::position`], with which of the two it is (the checkpoint on a tie).
    pub fn position_from(&self, newest_segment: Option<&str>) -> Option<WalPosition> {
        let control = self.control.as_ref().ok()?;
        let segment = newest_segment
            .and_then(|n| super::lsn::segment_start(n, control.segment_size))
            .unwrap_or_default();
        Some(if segment > control.checkpoint {
            WalPosition {
                lsn: segment,
                source: PositionSource::NewestSegment,
            }
        } else {
            WalPosition {
                lsn: control.checkpoint,
                source: PositionSource::Checkpoint,
            }
        })
    }
}

/// Reads the data directory on the volume mounted at `mount`.
pub fn read(mount: &Path) -> Result<DataDir, VolumeError> {
    let root = safe_open::open_root(mount).map_err(io_err(mount))?;
    let Some(dir) = volume::find_datadir(&root, mount)? else {
        return Err(VolumeError::NotFound {
            path: mount.to_path_buf(),
        });
    };
    let reader = Reader { root: &root, dir };
    let version = reader
        .file("PG_VERSION", 64)
        .map_err(|e| reader.err("PG_VERSION", e))?;
    let major = Major::parse(&version).map_err(|e| VolumeError::Io {
        path: reader.dir.shown.join("PG_VERSION"),
        source: std::io::Error::other(e.to_string()),
    })?;
    let role = if reader.exists("standby.signal") {
        ServerRole::Standby
    } else if reader.exists("recovery.signal") {
        ServerRole::Recovery
    } else {
        ServerRole::Primary
    };
    let (archive, checkpoint_timeout) = reader.settings();
    Ok(DataDir {
        path: reader.dir.shown.clone(),
        major,
        role,
        backup_label: reader.exists("backup_label"),
        control: reader
            .file("global/pg_control", control::FILE_SIZE as u64)
            .map_err(|e| reader.shown("global/pg_control", &e))
            .and_then(|b| control::parse(&b, major).map_err(|e| format!("global/pg_control: {e}"))),
        slots: reader.slots(major),
        archive,
        checkpoint_timeout,
    })
}

/// Whether the data directory on the volume mounted at `mount` holds `backup_label` (a base
/// backup being restored): the one fact of [`read`] a data volume whose WAL lives elsewhere
/// needs, for sizing it while the copy runs.
pub fn restoring(mount: &Path) -> Result<bool, VolumeError> {
    let root = safe_open::open_root(mount).map_err(io_err(mount))?;
    let Some(dir) = volume::find_datadir(&root, mount)? else {
        return Err(VolumeError::NotFound {
            path: mount.to_path_buf(),
        });
    };
    Ok(Reader { root: &root, dir }.exists("backup_label"))
}

struct Reader<'a> {
    root: &'a OwnedFd,
    dir: Rel,
}

impl Reader<'_> {
    fn parts<'p>(&'p self, rel: &'p str) -> Vec<&'p OsStr> {
        self.dir
            .parts
            .iter()
            .map(|p| p.as_os_str())
            .chain(rel.split('/').map(OsStr::new))
            .collect()
    }

    fn file(&self, rel: &str, cap: u64) -> Result<Vec<u8>, ReadError> {
        safe_open::read_capped_beneath(self.root, &self.parts(rel), cap)
    }

    fn exists(&self, rel: &str) -> bool {
        volume::is_file_at(self.root, &self.dir, rel)
    }

    fn shown(&self, rel: &str, e: &ReadError) -> String {
        format!("{}: {e}", self.dir.shown.join(rel).display())
    }

    fn err(&self, rel: &str, e: ReadError) -> VolumeError {
        VolumeError::Io {
            path: self.dir.shown.join(rel),
            source: std::io::Error::other(e.to_string()),
        }
    }

    fn slots(&self, major: Major) -> Result<Vec<SlotRead>, String> {
        let rel = self.dir.join(OsStr::new("pg_replslot"));
        let fd = match volume::open_dir(self.root, &rel) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(Vec::new()),
            Err(e) => return Err(format!("{}: {e}", rel.shown.display())),
        };
        let (d, mut names) = volume::list(fd, &rel.shown).map_err(|e| e.to_string())?;
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let Some(text) = name.to_str() else { continue };
            // A slot being created or dropped; and only directories hold slots.
            let is_dir =
                volume::stat_at(&d, &name).is_ok_and(|st| volume::kind(&st) == SFlag::S_IFDIR);
            if text.ends_with(".tmp") || !is_dir {
                continue;
            }
            if out.len() == MAX_SLOTS {
                return Err(format!(
                    "{}: more than {MAX_SLOTS} slots; not read further",
                    rel.shown.display()
                ));
            }
            let path = format!("pg_replslot/{text}/state");
            let file = self
                .file(&path, slotfile::MAX_SIZE)
                .map_err(|e| self.shown(&path, &e))
                .and_then(|b| slotfile::parse(&b, major, text).map_err(|e| format!("{path}: {e}")));
            out.push(SlotRead {
                dir: text.to_string(),
                file,
            });
        }
        Ok(out)
    }

    /// The archive settings and `checkpoint_timeout`, as the server reads its configuration.
    fn settings(&self) -> (ArchiveSettings, Option<jiff::SignedDuration>) {
        let mut settings = conf::load(&mut ConfFiles(self));
        match self.file(conf::COMMAND_LINE, MAX_CONF_BYTES) {
            Ok(opts) => conf::apply_command_line(&mut settings, &String::from_utf8_lossy(&opts)),
            // Not started yet (a restored backup) or removed: the files are all there is.
            Err(ReadError::Open(Errno::ENOENT)) => {}
            Err(e) => settings.lost(self.shown(conf::COMMAND_LINE, &e)),
        }
        let text = |name| match settings.get(name) {
            Lookup::Set(s) => Some(s.value.clone()),
            Lookup::Default => Some(String::new()),
            Lookup::Unknown => None,
        };
        let (mode, mode_file) = match settings.get("archive_mode") {
            Lookup::Set(s) => (Some(s.value.to_ascii_lowercase()), Some(s.file.clone())),
            Lookup::Default => (Some("off".to_string()), None),
            Lookup::Unknown => (None, None),
        };
        let checkpoint_timeout = match settings.get("checkpoint_timeout") {
            Lookup::Set(s) => conf::seconds(&s.value),
            Lookup::Default | Lookup::Unknown => None,
        };
        let archive = ArchiveSettings {
            mode,
            command: text("archive_command"),
            library: text("archive_library"),
            mode_file,
            unread: settings.unread,
        };
        (archive, checkpoint_timeout)
    }
}

struct ConfFiles<'a, 'b>(&'a Reader<'b>);

impl Files for ConfFiles<'_, '_> {
    fn read(&mut self, path: &str) -> Result<Vec<u8>, FileError> {
        self.0.file(path, MAX_CONF_BYTES).map_err(|e| match e {
            ReadError::Open(Errno::ENOENT) => FileError::Missing,
            e => FileError::Unreadable(e.to_string()),
        })
    }

    fn list(&mut self, dir: &str) -> Result<Vec<String>, FileError> {
        let mut rel = self.0.dir.clone();
        for c in dir.split('/') {
            rel = rel.join(OsStr::new(c));
        }
        let fd = volume::open_dir(self.0.root, &rel).map_err(|e| match e {
            Errno::ENOENT => FileError::Missing,
            e => FileError::Unreadable(e.to_string()),
        })?;
        let (_, names) =
            volume::list(fd, &rel.shown).map_err(|e| FileError::Unreadable(e.to_string()))?;
        Ok(names
            .into_iter()
            .filter_map(|n| n.into_string().ok())
            .collect())
    }
}
