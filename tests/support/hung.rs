//! A real hung filesystem: `bindfs` (FUSE) mounted in the foreground, then stopped with SIGSTOP.
//! From then on statfs, open and stat of anything under the mount block until SIGCONT, as with
//! an NFS server that stopped answering.
//!
//! The test process must never touch the mount itself while it is stopped (a stuck test thread
//! could not be cancelled): it waits for the mount in `/proc/self/mountinfo`, never by stat.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::mount::{MntFlags, umount2};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Continued, unmounted and ended on drop, even after a failed assertion.
pub struct HungMount {
    child: Child,
    pub mount_point: PathBuf,
}

fn mounted(path: &Path) -> bool {
    let want = path.to_string_lossy().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

impl HungMount {
    /// Mounts `source` at `mount_point` with bindfs and stops the daemon.
    pub fn start(source: &Path, mount_point: &Path) -> HungMount {
        let m = Self::running(source, mount_point);
        m.stop();
        m
    }

    /// Mounts `source` at `mount_point` with bindfs, answering until [`HungMount::stop`].
    pub fn running(source: &Path, mount_point: &Path) -> HungMount {
        let child = Command::new("bindfs")
            .arg("-f")
            .arg(source)
            .arg(mount_point)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn bindfs");
        let mut m = HungMount {
            child,
            mount_point: mount_point.to_path_buf(),
        };
        let start = Instant::now();
        while !mounted(mount_point) {
            if let Ok(Some(status)) = m.child.try_wait() {
                panic!("bindfs exited before mounting: {status}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "bindfs did not mount {}",
                mount_point.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    /// Stops the daemon: from now on the mount hangs.
    pub fn stop(&self) {
        self.signal(Signal::SIGSTOP);
    }

    fn signal(&self, s: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        kill(pid, s).expect("signal bindfs");
    }

    /// Lets the filesystem answer again.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }
}

impl Drop for HungMount {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGCONT);
        let _ = umount2(&self.mount_point, MntFlags::MNT_DETACH);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
