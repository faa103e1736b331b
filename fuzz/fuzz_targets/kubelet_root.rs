//! The probe's discovery as the agent runs it: the mount table (`/proc/self/mountinfo` text)
//! parsed, the kubelet root walked with that table (`vol_data.json` read beside each CSI volume),
//! each volume measured, the volumes classified (shared devices, network filesystems), and the
//! table's fingerprint and host filesystems (`headroom scan` on a host).
//!
//! Input: mountinfo text, a NUL, then the bytes of `vol_data.json` (written beside a CSI
//! filesystem volume and a CSI block volume of a fixed kubelet root). `@ROOT@` in the mountinfo
//! stands for that root's path, so the table can name its volumes.
//!
//! Beyond "no panic": every volume found is below the root, and one classed as its own block
//! device is mounted whole, on a local filesystem, with no other volume on its device (the
//! shared-filesystem refusal).
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use headroom::probe::kubelet_dir::{discover, mounts_fingerprint};
use headroom::probe::mounts::{MountIndex, host_filesystems, parse_mountinfo};
use headroom::probe::shared::{classify, is_network};
use headroom::probe::{Volume, VolumeClass, VolumeMode};
use libfuzzer_sys::fuzz_target;

const FS_DATA: &str = "pods/u1/volumes/kubernetes.io~csi/pv-1/vol_data.json";
const BLOCK_DATA: &str = "plugins/kubernetes.io/csi/volumeDevices/pv-2/data/vol_data.json";

/// A kubelet root with a CSI filesystem volume (mounted: its `mount` directory exists), a CSI
/// block volume, a CSI volume not mounted yet and a non-CSI one.
fn root() -> &'static Path {
    static ROOT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &ROOT
        .get_or_init(|| {
            let dir = headroom_fuzz::scratch();
            let r = dir.path();
            for d in [
                "pods/u1/volumes/kubernetes.io~csi/pv-1/mount",
                "pods/u1/volumes/kubernetes.io~csi/pv-4",
                "pods/u1/volumes/kubernetes.io~local-volume/pv-3",
                "pods/u1/volumeDevices/kubernetes.io~csi",
                "plugins/kubernetes.io/csi/volumeDevices/pv-2/data",
            ] {
                std::fs::create_dir_all(r.join(d)).unwrap_or_else(|e| panic!("{d}: {e}"));
            }
            let _ = std::os::unix::fs::symlink(
                "/dev/null",
                r.join("pods/u1/volumeDevices/kubernetes.io~csi/pv-2"),
            );
            let canonical = std::fs::canonicalize(r).unwrap_or_else(|e| panic!("root: {e}"));
            (dir, canonical)
        })
        .1
}

fuzz_target!(|data: &[u8]| {
    let root = root();
    let (table, vol_data) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    for f in [FS_DATA, BLOCK_DATA] {
        std::fs::write(root.join(f), vol_data).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    let shown = root.as_os_str().as_encoded_bytes();
    let mut text = Vec::with_capacity(table.len());
    let mut rest = table;
    while let Some(i) = rest.windows(6).position(|w| w == b"@ROOT@") {
        text.extend_from_slice(&rest[..i]);
        text.extend_from_slice(shown);
        rest = &rest[i + 6..];
    }
    text.extend_from_slice(rest);
    // A table that does not parse stops the agent's scan; the walk still runs here with no
    // mounts (as on a node where none of the kubelet's volumes is mounted) so `vol_data.json` is
    // reached whatever the table.
    let mounts = parse_mountinfo(&text, Path::new("/proc/self/mountinfo")).unwrap_or_default();
    let index = MountIndex::new(&mounts);
    let _ = index.containing(root);
    let _ = host_filesystems(&mounts);
    let _ = mounts_fingerprint(&mounts, root);
    let Ok(mut volumes) = discover(root, &mounts) else {
        return;
    };
    for v in &volumes {
        assert!(v.path.starts_with(root), "a volume outside the root: {v:?}");
    }
    classify(&mut volumes);
    for v in &volumes {
        let _ = serde_json::to_string(v);
        if v.class == VolumeClass::OwnedBlock {
            owned_is_alone(v, &volumes);
        }
    }
});

/// The probe's promise (headroom acts only on a filesystem that is the claim's): a volume
/// classed as its own block device is mounted whole, on a local filesystem, and no other
/// volume's filesystem (another PV, or a path with no PV) is on its device.
fn owned_is_alone(v: &Volume, all: &[Volume]) {
    let root_mount = v.mount_root.as_deref() == Some(Path::new("/"));
    assert!(
        v.mounted && root_mount && v.shared_with.is_empty(),
        "owned_block but not mounted whole and alone: {v:?}"
    );
    assert!(
        !v.fs_type.as_deref().is_some_and(is_network),
        "owned_block on a network filesystem: {v:?}"
    );
    let identity = |x: &Volume| x.pv.clone().unwrap_or_else(|| x.path.display().to_string());
    let peer = all.iter().find(|o| {
        o.mode == VolumeMode::Filesystem
            && o.device.is_some()
            && o.device == v.device
            && identity(o) != identity(v)
    });
    assert!(peer.is_none(), "owned_block sharing its device: {v:?} and {peer:?}");
}
