//! Shared-filesystem detection and volume classes.
//!
//! Rules, in order (the first that applies wins):
//! 1. Block-mode volumes, and volumes whose filesystem could not be located, are `unknown`.
//! 2. Network and FUSE filesystems (nfs, nfs4, cephfs, glusterfs, fuse, fuse.*, 9p, cifs, smb3,
//!    lustre, virtiofs, ...) are `shared_network`: statfs reports the server's export.
//! 3. A volume that is not a mount point (a plain directory on the node's disk), a mount whose
//!    mountinfo root is not `/` (a bind of a subdirectory), or a volume whose device another PV
//!    also uses, is `directory`: statfs reports the whole underlying filesystem.
//! 4. ext2/3/4, xfs, btrfs, f2fs, zfs, bcachefs and tmpfs on a device of their own, mounted whole,
//!    are `owned_block` (tmpfs counts: each tmpfs mount is its own sized filesystem).
//! 5. Anything else is `unknown`.
//!
//! Sharing is counted between *different* PVs: the same PV mounted into two pods on this node is
//! one volume, not two sharing a disk. Without a PV name (scanning paths), the path is the
//! identity. `shared_with` lists every other volume on the same device, for all classes.

use std::collections::HashMap;
use std::path::PathBuf;

use super::{Volume, VolumeClass, VolumeMode};

const NETWORK_TYPES: &[&str] = &[
    "nfs",
    "nfs4",
    "cephfs",
    "ceph",
    "glusterfs",
    "fuse",
    "9p",
    "cifs",
    "smb3",
    "smbfs",
    "lustre",
    "beegfs",
    "gpfs",
    "virtiofs",
    "ocfs2",
    "gfs2",
];

const OWNED_TYPES: &[&str] = &[
    "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "bcachefs", "tmpfs",
];

pub fn is_network(fs_type: &str) -> bool {
    NETWORK_TYPES.contains(&fs_type) || fs_type.starts_with("fuse.")
}

/// Fills `shared_with` and `class` for every volume, from the set as a whole.
pub fn classify(volumes: &mut [Volume]) {
    let identity = |v: &Volume| {
        v.pv.clone()
            .unwrap_or_else(|| v.path.to_string_lossy().into_owned())
    };
    let mut by_device: HashMap<String, Vec<(String, PathBuf)>> = HashMap::new();
    for v in volumes.iter().filter(|v| v.mode == VolumeMode::Filesystem) {
        if let Some(dev) = &v.device {
            by_device
                .entry(dev.clone())
                .or_default()
                .push((identity(v), v.path.clone()));
        }
    }
    for v in volumes.iter_mut() {
        if v.mode != VolumeMode::Filesystem {
            v.shared_with.clear();
            v.class = VolumeClass::Unknown;
            continue;
        }
        let me = identity(v);
        v.shared_with = match &v.device {
            Some(dev) => by_device
                .get(dev)
                .map(|peers| {
                    peers
                        .iter()
                        .filter(|(id, _)| *id != me)
                        .map(|(_, p)| p.clone())
                        .collect()
                })
                .unwrap_or_default(),
            None => Vec::new(),
        };
        v.shared_with.sort();
        v.shared_with.dedup();
        v.class = class_of(v);
    }
}

fn class_of(v: &Volume) -> VolumeClass {
    let Some(fs_type) = v.fs_type.as_deref() else {
        return VolumeClass::Unknown;
    };
    if is_network(fs_type) {
        return VolumeClass::SharedNetwork;
    }
    let subdir_bind = v
        .mount_root
        .as_deref()
        .is_some_and(|r| r != std::path::Path::new("/"));
    if !v.mounted || subdir_bind || !v.shared_with.is_empty() {
        return VolumeClass::Directory;
    }
    if OWNED_TYPES.contains(&fs_type) {
        VolumeClass::OwnedBlock
    } else {
        VolumeClass::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol(path: &str, pv: Option<&str>, fs: &str, dev: &str, root: &str, mounted: bool) -> Volume {
        let mut v = Volume::new(PathBuf::from(path), VolumeMode::Filesystem);
        v.pv = pv.map(str::to_owned);
        v.fs_type = Some(fs.to_owned());
        v.device = Some(dev.to_owned());
        v.mounted = mounted;
        v.mount_root = mounted.then(|| PathBuf::from(root));
        v
    }

    fn classes(vs: &[Volume]) -> Vec<&'static str> {
        vs.iter().map(|v| v.class.as_str()).collect()
    }

    #[test]
    fn owned_local_filesystems() {
        let mut vs = vec![
            vol("/a", Some("pv-a"), "ext4", "7:0", "/", true),
            vol("/b", Some("pv-b"), "tmpfs", "0:50", "/", true),
        ];
        classify(&mut vs);
        assert_eq!(classes(&vs), ["owned_block", "owned_block"]);
        assert!(
            vs.iter()
                .all(|v| v.shared_with.is_empty() && !v.class.is_shared())
        );
    }

    #[test]
    fn different_pvs_on_one_device_share_and_name_each_other() {
        let mut vs = vec![
            vol("/a", Some("pv-a"), "ext4", "8:1", "/", true),
            vol("/b", Some("pv-b"), "ext4", "8:1", "/", true),
        ];
        classify(&mut vs);
        assert_eq!(classes(&vs), ["directory", "directory"]);
        assert_eq!(vs[0].shared_with, [PathBuf::from("/b")]);
        assert_eq!(vs[1].shared_with, [PathBuf::from("/a")]);
    }

    #[test]
    fn same_pv_in_two_pods_is_not_shared() {
        let mut vs = vec![
            vol("/p1/a", Some("pv-a"), "xfs", "253:3", "/", true),
            vol("/p2/a", Some("pv-a"), "xfs", "253:3", "/", true),
        ];
        classify(&mut vs);
        assert_eq!(classes(&vs), ["owned_block", "owned_block"]);
        assert!(vs[0].shared_with.is_empty());
    }

    #[test]
    fn subdir_bind_and_plain_directory_are_directory() {
        let mut vs = vec![
            vol("/a", Some("pv-a"), "ext4", "8:1", "/srv/a", true),
            vol("/b", Some("pv-b"), "ext4", "8:2", "/", false),
        ];
        classify(&mut vs);
        assert_eq!(classes(&vs), ["directory", "directory"]);
        assert!(vs[0].shared_with.is_empty());
    }

    #[test]
    fn network_and_fuse_win_over_sharing() {
        let mut vs = vec![
            vol("/n", Some("pv-n"), "nfs4", "0:60", "/", true),
            vol("/m", Some("pv-m"), "nfs4", "0:60", "/sub", true),
            vol("/f", Some("pv-f"), "fuse.s3fs", "0:61", "/", true),
        ];
        classify(&mut vs);
        assert_eq!(
            classes(&vs),
            ["shared_network", "shared_network", "shared_network"]
        );
        assert_eq!(vs[0].shared_with, [PathBuf::from("/m")]);
        assert!(vs.iter().all(|v| v.class.is_shared()));
    }

    #[test]
    fn unknown_cases() {
        let mut block = Volume::new(PathBuf::from("/dev-map"), VolumeMode::Block);
        block.device = Some("8:1".into());
        let mut unlocated = Volume::new(PathBuf::from("/x"), VolumeMode::Filesystem);
        unlocated.pv = Some("pv-x".into());
        let mut vs = vec![
            block,
            unlocated,
            vol("/o", Some("pv-o"), "squashfs", "7:9", "/", true),
            vol("/e", Some("pv-e"), "ext4", "8:1", "/", true),
        ];
        classify(&mut vs);
        assert_eq!(
            classes(&vs),
            ["unknown", "unknown", "unknown", "owned_block"]
        );
        // A block volume never makes a filesystem volume look shared.
        assert!(vs[3].shared_with.is_empty());
    }
}
