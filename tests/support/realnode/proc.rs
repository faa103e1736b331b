//! Starting processes (the real node's, and the API server harness's etcd and kube-apiserver)
//! so that they die with the test process, however it ends.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Spawns `cmd` from a thread that lives as long as the test process, with PR_SET_PDEATHSIG
/// (the signal follows the thread that forked, so it must not be a test's own thread).
pub fn spawn_tied(mut cmd: Command) -> Child {
    use std::os::unix::process::CommandExt;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let _ = tx.send(cmd.spawn());
        loop {
            std::thread::park();
        }
    });
    rx.recv()
        .expect("spawner thread")
        .expect("spawn a test process")
}

pub fn log_file(dir: &Path, name: &str) -> Stdio {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
        .map(Stdio::from)
        .unwrap_or(Stdio::null())
}
