//! FITRIM on real filesystems: ext4 on a loop device backed by a sparse file (the loop driver
//! turns discards into holes punched in the file, so freed blocks show up as fewer allocated
//! blocks of the backing file), and tmpfs, which cannot be trimmed.

mod support {
    pub mod loop_ext4;
    pub mod root;
}

use std::path::{Path, PathBuf};
use std::process::Command;

use headroom::reclaim::{TrimError, fitrim, fitrim::fitrim_device};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use support::loop_ext4::{self, LoopExt4, SLACK};

fn tools(test: &str) -> bool {
    support::root::require_root(test, loop_ext4::TOOLS)
}

#[test]
fn trims_a_deleted_file_on_ext4() {
    if !tools("trims_a_deleted_file_on_ext4") {
        return;
    }
    let fx = LoopExt4::new();
    let before = fx.write_and_delete();
    let reported = fitrim(&fx.mnt()).expect("trim");
    fx.assert_reclaimed(before, reported);

    // The checked variant trims only the filesystem it was told about.
    let before = fx.write_and_delete();
    match fitrim_device(&fx.mnt(), "0:1") {
        Err(TrimError::DeviceChanged { found, .. }) => assert_eq!(found, fx.device()),
        other => panic!("expected a device mismatch, got {other:?}"),
    }
    assert!(fx.allocated() + SLACK >= before, "nothing was trimmed");
    let reported = fitrim_device(&fx.mnt(), &fx.device()).expect("trim");
    fx.assert_reclaimed(before, reported);
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
    fx.assert_reclaimed(before, bytes);
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
