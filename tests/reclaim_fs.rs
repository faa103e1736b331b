//! FITRIM on real filesystems: ext4 on a loop device backed by a sparse file (the loop driver
//! turns discards into holes punched in the file, so freed blocks show up as fewer allocated
//! blocks of the backing file), and tmpfs, which cannot be trimmed.

mod support {
    pub mod root;
}

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use headroom::reclaim::{TrimError, fitrim, fitrim::fitrim_device};
use nix::mount::{MntFlags, MsFlags, mount, umount2};

const MI: u64 = 1 << 20;
const FS_SIZE: u64 = 256 * MI;
const FILE_SIZE: u64 = 64 * MI;
/// Allowance for metadata (journal, bitmaps, the directory) freed or kept around a delete.
const SLACK: u64 = 8 * MI;

fn tools(test: &str) -> bool {
    support::root::require_root(
        test,
        &[
            ("mkfs.ext4", "e2fsprogs"),
            ("losetup", "mount"),
            ("mount", "mount"),
        ],
    )
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// ext4 on a loop device over a sparse file; unmounted and detached on drop, even after a
/// failed assertion.
struct LoopExt4 {
    dir: tempfile::TempDir,
    img: PathBuf,
    dev: Option<String>,
    mounted: bool,
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        if self.mounted {
            let _ = umount2(&self.mnt(), MntFlags::MNT_DETACH);
        }
        if let Some(dev) = &self.dev {
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
    }
}

impl LoopExt4 {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("disk.img");
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(FS_SIZE))
            .expect("sparse image");
        let mut fx = LoopExt4 {
            dir,
            img,
            dev: None,
            mounted: false,
        };
        let img = fx.img.to_str().expect("utf8").to_string();
        fx.dev = Some(run("losetup", &["--find", "--show", &img]));
        let dev = fx.dev.clone().expect("dev");
        run("mkfs.ext4", &["-q", "-F", &dev]);
        std::fs::create_dir(fx.mnt()).expect("mount dir");
        // No `-o discard`: freed blocks must stay allocated until FITRIM.
        run(
            "mount",
            &["-t", "ext4", &dev, fx.mnt().to_str().expect("utf8")],
        );
        fx.mounted = true;
        fx
    }

    fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// Bytes the backing file really occupies (not its apparent size).
    fn allocated(&self) -> u64 {
        std::fs::metadata(&self.img).expect("stat").blocks() * 512
    }

    fn device(&self) -> String {
        let dev = std::fs::metadata(self.mnt()).expect("stat").dev();
        format!(
            "{}:{}",
            nix::sys::stat::major(dev),
            nix::sys::stat::minor(dev)
        )
    }

    fn sync(&self) {
        let f = std::fs::File::open(self.mnt()).expect("open mount");
        nix::unistd::syncfs(&f).expect("syncfs");
    }

    /// Writes FILE_SIZE of non-zero data, syncs, deletes it and syncs again; returns the backing
    /// file's allocation with the file's blocks freed by ext4 but not yet discarded.
    fn write_and_delete(&self) -> u64 {
        let path = self.mnt().join("big");
        let chunk = vec![0xA5u8; MI as usize];
        let mut f = std::fs::File::create(&path).expect("create");
        for _ in 0..FILE_SIZE / MI {
            f.write_all(&chunk).expect("write");
        }
        f.sync_all().expect("fsync");
        drop(f);
        self.sync();
        let with_file = self.allocated();
        std::fs::remove_file(&path).expect("delete");
        self.sync();
        let after_delete = self.allocated();
        assert!(
            after_delete + SLACK >= with_file,
            "deleting must not free the backing file's blocks without a trim ({with_file} -> {after_delete}); is the filesystem mounted with discard?"
        );
        assert!(with_file >= FILE_SIZE, "the data reached the backing file");
        after_delete
    }
}

fn assert_reclaimed(fx: &LoopExt4, before: u64, reported: u64) {
    let after = fx.allocated();
    let apparent = std::fs::metadata(&fx.img).expect("stat").len();
    assert_eq!(apparent, FS_SIZE, "the apparent size does not change");
    assert!(
        before.saturating_sub(after) >= FILE_SIZE - SLACK,
        "backing file allocation {before} -> {after}: expected at least {} freed",
        FILE_SIZE - SLACK
    );
    assert!(
        (FILE_SIZE - SLACK..=FS_SIZE).contains(&reported),
        "reported {reported} bytes; expected between {} and {FS_SIZE}",
        FILE_SIZE - SLACK
    );
}

#[test]
fn trims_a_deleted_file_on_ext4() {
    if !tools("trims_a_deleted_file_on_ext4") {
        return;
    }
    let fx = LoopExt4::new();
    let before = fx.write_and_delete();
    let reported = fitrim(&fx.mnt()).expect("trim");
    assert_reclaimed(&fx, before, reported);

    // The checked variant trims only the filesystem it was told about.
    let before = fx.write_and_delete();
    match fitrim_device(&fx.mnt(), "0:1") {
        Err(TrimError::DeviceChanged { found, .. }) => assert_eq!(found, fx.device()),
        other => panic!("expected a device mismatch, got {other:?}"),
    }
    assert!(fx.allocated() + SLACK >= before, "nothing was trimmed");
    let reported = fitrim_device(&fx.mnt(), &fx.device()).expect("trim");
    assert_reclaimed(&fx, before, reported);
}

#[test]
fn headroom_trim_command_reports_what_it_reclaimed() {
    if !tools("headroom_trim_command_reports_what_it_reclaimed") {
        return;
    }
    let fx = LoopExt4::new();
    let before = fx.write_and_delete();
    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .arg("trim")
        .arg(fx.mnt())
        .output()
        .expect("run headroom");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `<path>: trimmed <quantity> (<bytes> bytes) in <secs>s`
    let bytes: u64 = stdout
        .split('(')
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {stdout:?}"));
    assert!(
        stdout.starts_with(&format!("{}: trimmed ", fx.mnt().display())),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with('s'), "{stdout}");
    assert_reclaimed(&fx, before, bytes);
}

fn tmpfs(dir: &Path) -> impl Drop {
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = umount2(&self.0, MntFlags::MNT_DETACH);
        }
    }
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::empty(),
        Some("size=16m"),
    )
    .expect("mount tmpfs");
    Unmount(dir.to_path_buf())
}

#[test]
fn tmpfs_cannot_be_trimmed_and_says_so() {
    if !support::root::require_root("tmpfs_cannot_be_trimmed_and_says_so", &[]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let _m = tmpfs(dir.path());
    let e = fitrim(dir.path()).expect_err("tmpfs has no FITRIM");
    assert!(matches!(e, TrimError::NotSupported { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("does not support discard"), "{msg}");
    assert!(msg.contains("(tmpfs)"), "{msg}");
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");

    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .arg("trim")
        .arg(dir.path())
        .output()
        .expect("run headroom");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not support discard"), "{stderr}");

    let missing = dir.path().join("nope");
    let e = fitrim(&missing).expect_err("no such directory");
    assert!(e.to_string().contains("cannot open"), "{e}");
}
