//! The node probe on real filesystems: a kubelet-like root with tmpfs CSI volumes, ext4 on a
//! loop device, bind mounts of two directories of one filesystem, a block volume, an unmounted
//! volume and planted symlinks. Values are checked against `stat -f`.

mod support {
    pub mod root;
}

use std::path::{Path, PathBuf};
use std::process::Command;

use headroom::probe::{DEFAULT_DEADLINE, Prober, Volume, VolumeClass, VolumeMode, read_mountinfo};
use nix::mount::{MntFlags, MsFlags, mount, umount2};

const TOOLS: &[(&str, &str)] = &[
    ("mkfs.ext4", "e2fsprogs"),
    ("mount", "mount"),
    ("stat", "coreutils"),
];
const MI: u64 = 1024 * 1024;

/// A kubelet root built on real mounts; everything is unmounted on drop, even after a failed
/// assertion, in reverse order and lazily so a busy mount cannot leak.
struct Fixture {
    mounts: Vec<PathBuf>,
    dir: tempfile::TempDir,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for m in self.mounts.iter().rev() {
            if let Err(e) = umount2(m, MntFlags::MNT_DETACH) {
                eprintln!("cleanup: umount {}: {e}", m.display());
            }
        }
    }
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

impl Fixture {
    fn root(&self) -> PathBuf {
        self.dir.path().join("kubelet")
    }

    fn tmpfs(&mut self, at: &Path, size: &str) {
        std::fs::create_dir_all(at).unwrap();
        let opts = format!("size={size}");
        mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
        .unwrap();
        self.mounts.push(at.to_path_buf());
    }

    fn bind(&mut self, from: &Path, at: &Path) {
        std::fs::create_dir_all(at).unwrap();
        mount(Some(from), at, None::<&str>, MsFlags::MS_BIND, None::<&str>).unwrap();
        self.mounts.push(at.to_path_buf());
    }

    fn ext4(&mut self, at: &Path, size: u64) {
        let img = self.dir.path().join("ext4.img");
        std::fs::File::create(&img).unwrap().set_len(size).unwrap();
        run("mkfs.ext4", &["-q", "-F", img.to_str().unwrap()]);
        std::fs::create_dir_all(at).unwrap();
        // `mount -o loop` sets autoclear: the loop device goes away with the last unmount.
        run(
            "mount",
            &["-o", "loop", img.to_str().unwrap(), at.to_str().unwrap()],
        );
        self.mounts.push(at.to_path_buf());
    }

    fn csi_dir(&self, pod: &str, pv: &str) -> PathBuf {
        self.root()
            .join("pods")
            .join(pod)
            .join("volumes/kubernetes.io~csi")
            .join(pv)
    }

    fn vol_data(&self, dir: &Path, pv: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let json = format!(
            r#"{{"driverName":"test.csi.headroom","specVolID":"{pv}","volumeHandle":"handle-{pv}","nodeName":"n1","volumeLifecycleMode":"Persistent"}}"#
        );
        std::fs::write(dir.join("vol_data.json"), json).unwrap();
    }

    fn csi_tmpfs(&mut self, pod: &str, pv: &str, size: &str) -> PathBuf {
        let dir = self.csi_dir(pod, pv);
        self.vol_data(&dir, pv);
        self.tmpfs(&dir.join("mount"), size);
        dir.join("mount")
    }
}

/// The layout every test uses. Paths are returned in a map-like struct for readability.
struct Paths {
    small: PathBuf,
    big: PathBuf,
    big_again: PathBuf,
    ext4: PathBuf,
    shared_a: PathBuf,
    shared_b: PathBuf,
    unmounted: PathBuf,
    block: PathBuf,
    outside: PathBuf,
}

fn build() -> (Fixture, Paths) {
    let dir = tempfile::Builder::new()
        .prefix("headroom-probe")
        .tempdir()
        .unwrap();
    let mut fx = Fixture {
        mounts: Vec::new(),
        dir,
    };
    let small = fx.csi_tmpfs("pod-a", "pv-small", "4m");
    let big = fx.csi_tmpfs("pod-a", "pv-big", "16m");
    // The same PV mounted into a second pod (the kubelet bind-mounts it): one volume, not shared.
    let big_again = fx.csi_dir("pod-d", "pv-big").join("mount");
    fx.vol_data(&fx.csi_dir("pod-d", "pv-big"), "pv-big");
    fx.bind(&big, &big_again);
    let ext4_dir = fx.csi_dir("pod-b", "pv-ext4");
    fx.vol_data(&ext4_dir, "pv-ext4");
    let ext4 = ext4_dir.join("mount");
    fx.ext4(&ext4, 32 * MI);

    // A "node disk" with two provisioner directories, each bind-mounted as a PV.
    let disk = fx.dir.path().join("node-disk");
    fx.tmpfs(&disk, "64m");
    std::fs::create_dir_all(disk.join("pv-shared-a")).unwrap();
    std::fs::create_dir_all(disk.join("pv-shared-b")).unwrap();
    let local = fx
        .root()
        .join("pods/pod-c/volumes/kubernetes.io~local-volume");
    let (shared_a, shared_b) = (local.join("pv-shared-a"), local.join("pv-shared-b"));
    fx.bind(&disk.join("pv-shared-a"), &shared_a);
    fx.bind(&disk.join("pv-shared-b"), &shared_b);

    let unmounted_dir = fx.csi_dir("pod-c", "pv-unmounted");
    fx.vol_data(&unmounted_dir, "pv-unmounted");
    let unmounted = unmounted_dir.join("mount");
    std::fs::create_dir_all(&unmounted).unwrap();

    // Block volume: the kubelet maps it as a symlink to the device, here the ext4 loop device.
    let loopdev = read_mountinfo()
        .unwrap()
        .into_iter()
        .rev()
        .find(|m| m.mount_point == ext4)
        .unwrap()
        .source
        .unwrap();
    let block_dir = fx.root().join("pods/pod-c/volumeDevices/kubernetes.io~csi");
    std::fs::create_dir_all(&block_dir).unwrap();
    let block = block_dir.join("pv-block");
    std::os::unix::fs::symlink(&loopdev, &block).unwrap();
    let meta = fx
        .root()
        .join("plugins/kubernetes.io/csi/volumeDevices/pv-block/data");
    fx.vol_data(&meta, "pv-block");

    // Planted symlinks, all pointing outside the kubelet root.
    let outside = fx.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(
        outside.join("vol_data.json"),
        r#"{"driverName":"evil","specVolID":"evil"}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink("/", small.join("escape")).unwrap();
    let evil = fx.csi_dir("pod-e", "pv-evil-mount");
    std::fs::create_dir_all(&evil).unwrap();
    std::os::unix::fs::symlink(&disk, evil.join("mount")).unwrap();
    let evil_json = fx.csi_dir("pod-e", "pv-evil-json");
    std::fs::create_dir_all(evil_json.join("mount")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("vol_data.json"),
        evil_json.join("vol_data.json"),
    )
    .unwrap();
    let evil_local = fx
        .root()
        .join("pods/pod-e/volumes/kubernetes.io~local-volume");
    std::fs::create_dir_all(&evil_local).unwrap();
    std::os::unix::fs::symlink(&disk, evil_local.join("pv-evil-link")).unwrap();
    std::os::unix::fs::symlink(&outside, fx.root().join("pods/pod-f")).unwrap();

    let paths = Paths {
        small,
        big,
        big_again,
        ext4,
        shared_a,
        shared_b,
        unmounted,
        block,
        outside,
    };
    (fx, paths)
}

/// The agent's (and `headroom scan`'s) one probe path: discovery, then a bounded statfs pass.
fn probe(fx: &Fixture) -> Vec<Volume> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(Prober::new(fx.root(), DEFAULT_DEADLINE).probe())
        .unwrap()
}

fn find<'a>(vols: &'a [Volume], path: &Path) -> &'a Volume {
    vols.iter()
        .find(|v| v.path == path)
        .unwrap_or_else(|| panic!("no volume at {}: {vols:#?}", path.display()))
}

/// `stat -f` of a path: (block size, blocks, free, avail, inodes, inodes free).
fn stat_f(path: &Path) -> [u64; 6] {
    let out = run(
        "stat",
        &["-f", "-c", "%S %b %f %a %c %d", path.to_str().unwrap()],
    );
    let v: Vec<u64> = out.split_whitespace().map(|s| s.parse().unwrap()).collect();
    [v[0], v[1], v[2], v[3], v[4], v[5]]
}

fn assert_matches_stat(v: &Volume) {
    let [bs, blocks, free, avail, files, ffree] = stat_f(&v.path);
    let m = v
        .measurement
        .unwrap_or_else(|| panic!("{} not measured: {:?}", v.path.display(), v.findings));
    assert_eq!(v.block_size, Some(bs), "{}", v.path.display());
    assert_eq!(m.capacity_bytes, blocks * bs, "{}", v.path.display());
    assert_eq!(m.used_bytes, (blocks - free) * bs, "{}", v.path.display());
    assert_eq!(m.available_bytes, avail * bs, "{}", v.path.display());
    assert_eq!(m.inodes_total, files, "{}", v.path.display());
    assert_eq!(m.inodes_used, files - ffree, "{}", v.path.display());
}

#[test]
fn kubelet_root_volumes_are_found_measured_and_classified() {
    if !support::root::require_root(
        "kubelet_root_volumes_are_found_measured_and_classified",
        TOOLS,
    ) {
        return;
    }
    let (fx, p) = build();
    let vols = probe(&fx);
    let root = std::fs::canonicalize(fx.root()).unwrap();
    assert!(vols.iter().all(|v| v.path.starts_with(&root)), "{vols:#?}");

    for path in [&p.small, &p.big, &p.big_again, &p.ext4] {
        let v = find(&vols, path);
        assert_matches_stat(v);
        assert!(v.mounted);
        assert_eq!(v.class, VolumeClass::OwnedBlock, "{v:#?}");
        assert!(v.shared_with.is_empty(), "{v:#?}");
        assert_eq!(v.driver.as_deref(), Some("test.csi.headroom"));
    }
    let small = find(&vols, &p.small);
    assert_eq!(small.pv.as_deref(), Some("pv-small"));
    assert_eq!(small.volume_handle.as_deref(), Some("handle-pv-small"));
    assert_eq!(small.fs_type.as_deref(), Some("tmpfs"));
    assert_eq!(small.measurement.unwrap().capacity_bytes, 4 * MI);
    assert_eq!(
        find(&vols, &p.big).measurement.unwrap().capacity_bytes,
        16 * MI
    );
    assert_eq!(find(&vols, &p.big).device, find(&vols, &p.big_again).device);
    let ext4 = find(&vols, &p.ext4);
    assert_eq!(ext4.fs_type.as_deref(), Some("ext4"));
    assert!(
        ext4.source.as_deref().unwrap().starts_with("/dev/loop"),
        "{ext4:#?}"
    );
    let cap = ext4.measurement.unwrap().capacity_bytes;
    assert!(cap > 20 * MI && cap <= 32 * MI, "{cap}");

    let (a, b) = (find(&vols, &p.shared_a), find(&vols, &p.shared_b));
    for (v, other) in [(a, &p.shared_b), (b, &p.shared_a)] {
        assert_matches_stat(v);
        assert_eq!(v.class, VolumeClass::Directory, "{v:#?}");
        assert!(v.class.is_shared());
        assert_eq!(v.shared_with, std::slice::from_ref(other));
        assert_eq!(v.plugin.as_deref(), Some("kubernetes.io~local-volume"));
        assert_eq!(v.driver.as_deref(), Some("kubernetes.io/local-volume"));
    }
    assert_eq!(a.mount_root.as_deref(), Some(Path::new("/pv-shared-a")));

    let un = find(&vols, &p.unmounted);
    assert!(!un.mounted);
    assert_eq!(un.class, VolumeClass::Directory);
    assert!(
        un.findings
            .iter()
            .any(|f| f.starts_with("not a mount point")),
        "{un:#?}"
    );
    let [bs, blocks, ..] = stat_f(&p.unmounted);
    assert_eq!(un.measurement.unwrap().capacity_bytes, bs * blocks);

    let block = find(&vols, &p.block);
    assert_eq!(block.mode, VolumeMode::Block);
    assert!(block.measurement.is_none());
    assert_eq!(block.driver.as_deref(), Some("test.csi.headroom"));
    assert_eq!(block.source, ext4.source);

    // Planted symlinks: never followed, never measured, never read.
    let pod_e = root.join("pods/pod-e/volumes");
    let evil_mount = find(&vols, &pod_e.join("kubernetes.io~csi/pv-evil-mount/mount"));
    assert!(
        evil_mount.measurement.is_none()
            && evil_mount.findings.iter().any(|f| f.contains("symlink"))
    );
    let evil_json = find(&vols, &pod_e.join("kubernetes.io~csi/pv-evil-json/mount"));
    assert_eq!(
        evil_json.pv.as_deref(),
        Some("pv-evil-json"),
        "the outside vol_data.json was read"
    );
    assert_ne!(evil_json.driver.as_deref(), Some("evil"));
    let evil_link = find(
        &vols,
        &pod_e.join("kubernetes.io~local-volume/pv-evil-link"),
    );
    assert!(evil_link.measurement.is_none());
    assert!(
        vols.iter()
            .all(|v| !v.path.starts_with(root.join("pods/pod-f"))),
        "followed a symlinked pod dir"
    );
    assert!(vols.iter().all(|v| !v.path.starts_with(&p.outside)));
    assert_eq!(vols.len(), 11, "{vols:#?}");
}

#[test]
fn filling_a_volume_moves_the_numbers() {
    if !support::root::require_root("filling_a_volume_moves_the_numbers", TOOLS) {
        return;
    }
    let (fx, p) = build();
    let before = probe(&fx);
    for (path, bytes) in [(&p.big, 5 * MI), (&p.ext4, 8 * MI), (&p.shared_a, 3 * MI)] {
        let f = path.join("fill");
        std::fs::write(&f, vec![7u8; bytes as usize]).unwrap();
        std::fs::File::open(&f).unwrap().sync_all().unwrap();
    }
    let after = probe(&fx);
    for (path, bytes) in [
        (&p.big, 5 * MI),
        (&p.big_again, 5 * MI),
        (&p.ext4, 8 * MI),
        (&p.shared_b, 3 * MI),
    ] {
        let (b, a) = (
            find(&before, path).measurement.unwrap(),
            find(&after, path).measurement.unwrap(),
        );
        assert!(
            a.used_bytes >= b.used_bytes + bytes,
            "{}: {b:?} -> {a:?}",
            path.display()
        );
        assert!(
            a.available_bytes + bytes <= b.available_bytes,
            "{}: {b:?} -> {a:?}",
            path.display()
        );
        assert_eq!(a.inodes_used, b.inodes_used + 1, "{}", path.display());
        assert_matches_stat(find(&after, path));
    }
    // A volume nobody wrote to did not move.
    assert_eq!(
        find(&before, &p.small).measurement,
        find(&after, &p.small).measurement
    );
}

#[test]
fn scan_command_prints_json_with_the_documented_keys() {
    if !support::root::require_root("scan_command_prints_json_with_the_documented_keys", TOOLS) {
        return;
    }
    let (fx, p) = build();
    let bin = env!("CARGO_BIN_EXE_headroom");
    let out = Command::new(bin)
        .args(["scan", "--format", "json", "--kubelet-root"])
        .arg(fx.root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 11);
    let keys = [
        "path",
        "pv",
        "driver",
        "fs_type",
        "device",
        "capacity_bytes",
        "used_bytes",
        "available_bytes",
        "used_percent",
        "inodes_total",
        "inodes_used",
        "class",
        "shared_with",
    ];
    for row in &rows {
        for k in keys {
            assert!(row.get(k).is_some(), "missing {k} in {row}");
        }
    }
    let a = rows
        .iter()
        .find(|r| r["path"] == p.shared_a.to_str().unwrap())
        .unwrap();
    assert_eq!(a["class"], "directory");
    assert_eq!(
        a["shared_with"],
        serde_json::json!([p.shared_b.to_str().unwrap()])
    );
    let small = rows.iter().find(|r| r["pv"] == "pv-small").unwrap();
    let [bs, blocks, free, avail, ..] = stat_f(&p.small);
    assert_eq!(small["capacity_bytes"], blocks * bs);
    assert_eq!(small["used_bytes"], (blocks - free) * bs);
    assert_eq!(small["available_bytes"], avail * bs);
    assert_eq!(small["class"], "owned_block");

    // PATH mode measures exactly the given mount points; a missing one fails the command.
    let out = Command::new(bin)
        .args(["scan", "--format", "json"])
        .arg(&p.ext4)
        .arg(&p.small)
        .output()
        .unwrap();
    assert!(out.status.success());
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["fs_type"], "ext4");
    let out = Command::new(bin)
        .args(["scan"])
        .arg(p.small.join("nope"))
        .output()
        .unwrap();
    assert!(!out.status.success());

    // No arguments: the host's filesystems, like df, which includes our tmpfs volumes.
    let out = Command::new(bin)
        .args(["scan", "--format", "json"])
        .output()
        .unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rows.iter().any(|r| r["path"] == p.ext4.to_str().unwrap()));
    assert!(
        rows.iter()
            .all(|r| r["fs_type"] != "proc" && r["fs_type"] != "sysfs")
    );
}
