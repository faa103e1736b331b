//! ext4 on a loop device backed by a sparse file: the loop driver turns discards into holes
//! punched in the file, so blocks freed and trimmed show up as fewer allocated blocks of the
//! backing file.
#![allow(dead_code)]

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::mount::{MntFlags, umount2};

pub const MI: u64 = 1 << 20;
pub const FS_SIZE: u64 = 256 * MI;
pub const FILE_SIZE: u64 = 64 * MI;
/// Allowance for metadata (journal, bitmaps, the directory) freed or kept around a delete.
pub const SLACK: u64 = 8 * MI;

/// The tools a test using [`LoopExt4`] runs, for `support::root::require_root`.
pub const TOOLS: &[(&str, &str)] = &[
    ("mkfs.ext4", "e2fsprogs"),
    ("losetup", "mount"),
    ("mount", "mount"),
];

pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Unmounted and detached on drop, even after a failed assertion.
pub struct LoopExt4 {
    dir: tempfile::TempDir,
    img: PathBuf,
    mnt: PathBuf,
    dev: Option<String>,
    mounted: bool,
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        if self.mounted {
            let _ = umount2(&self.mnt, MntFlags::MNT_DETACH);
        }
        if let Some(dev) = &self.dev {
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
    }
}

impl LoopExt4 {
    /// Mounted on a directory of its own.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mount dir");
        Self::mounted(dir, mnt)
    }

    /// Mounted on `mnt` (an existing directory, e.g. a CSI volume's `mount` in a kubelet root).
    pub fn new_at(mnt: &Path) -> Self {
        Self::mounted(tempfile::tempdir().expect("tempdir"), mnt.to_path_buf())
    }

    fn mounted(dir: tempfile::TempDir, mnt: PathBuf) -> Self {
        let img = dir.path().join("disk.img");
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(FS_SIZE))
            .expect("sparse image");
        let mut fx = LoopExt4 {
            dir,
            img,
            mnt,
            dev: None,
            mounted: false,
        };
        let img = fx.img.to_str().expect("utf8").to_string();
        fx.dev = Some(run("losetup", &["--find", "--show", &img]));
        let dev = fx.dev.clone().expect("dev");
        run("mkfs.ext4", &["-q", "-F", &dev]);
        // No `-o discard`: freed blocks must stay allocated until FITRIM.
        run(
            "mount",
            &["-t", "ext4", &dev, fx.mnt.to_str().expect("utf8")],
        );
        fx.mounted = true;
        fx
    }

    pub fn mnt(&self) -> PathBuf {
        self.mnt.clone()
    }

    pub fn image(&self) -> &Path {
        &self.img
    }

    /// Bytes the backing file really occupies (not its apparent size).
    pub fn allocated(&self) -> u64 {
        std::fs::metadata(&self.img).expect("stat").blocks() * 512
    }

    /// The filesystem's device as `major:minor`.
    pub fn device(&self) -> String {
        let dev = std::fs::metadata(&self.mnt).expect("stat").dev();
        format!(
            "{}:{}",
            nix::sys::stat::major(dev),
            nix::sys::stat::minor(dev)
        )
    }

    pub fn sync(&self) {
        let f = std::fs::File::open(&self.mnt).expect("open mount");
        nix::unistd::syncfs(&f).expect("syncfs");
    }

    /// Free bytes in ext4's buddy allocator, what FITRIM walks (`/proc/fs/ext4/<dev>/mb_groups`).
    fn buddy_free_bytes(&self) -> u64 {
        let dev = self.dev.as_deref().expect("dev");
        let name = Path::new(dev).file_name().expect("device name");
        let table = Path::new("/proc/fs/ext4").join(name).join("mb_groups");
        let text = std::fs::read_to_string(&table).expect("mb_groups");
        let blocks: u64 = text
            .lines()
            .filter(|l| !l.starts_with("#group"))
            .filter_map(|l| {
                l.split(':')
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        let block = nix::sys::statvfs::statvfs(&self.mnt)
            .expect("statvfs")
            .block_size();
        blocks * block
    }

    /// Waits until the deleted file's blocks are free in the buddy allocator: under load a trim
    /// right after the delete and sync sometimes found nothing to discard. Likely (not proven):
    /// the blocks go at the inode's last reference, which a process another test forks at that
    /// moment holds until it execs, so they are freed in a later journal commit than the sync's.
    fn wait_freed(&self, buddy_before: u64) {
        let start = std::time::Instant::now();
        while self.buddy_free_bytes() < buddy_before + FILE_SIZE - SLACK {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "the deleted file's blocks were not freed within 20 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
            self.sync();
        }
    }

    /// Writes FILE_SIZE of non-zero data, syncs, deletes it and syncs again; returns the backing
    /// file's allocation with the file's blocks freed by ext4 but not yet discarded.
    pub fn write_and_delete(&self) -> u64 {
        let path = self.mnt.join("big");
        let chunk = vec![0xA5u8; MI as usize];
        let mut f = std::fs::File::create(&path).expect("create");
        for _ in 0..FILE_SIZE / MI {
            f.write_all(&chunk).expect("write");
        }
        f.sync_all().expect("fsync");
        drop(f);
        self.sync();
        let with_file = self.allocated();
        let buddy_before = self.buddy_free_bytes();
        std::fs::remove_file(&path).expect("delete");
        self.sync();
        self.wait_freed(buddy_before);
        let after_delete = self.allocated();
        assert!(
            after_delete + SLACK >= with_file,
            "deleting must not free the backing file's blocks without a trim ({with_file} -> {after_delete}); is the filesystem mounted with discard?"
        );
        assert!(with_file >= FILE_SIZE, "the data reached the backing file");
        after_delete
    }

    /// Asserts that a trim reporting `reported` bytes freed the deleted file's blocks.
    pub fn assert_reclaimed(&self, before: u64, reported: u64) {
        let after = self.allocated();
        let apparent = std::fs::metadata(&self.img).expect("stat").len();
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
}
