//! `headroom scan`, the README's first command, goes through the agent's bounded probe pass in
//! every form: with a real hung FUSE mount (bindfs, stopped with SIGSTOP) among healthy tmpfs
//! volumes, `scan --kubelet-root`, `scan PATH...` and `scan` (this host) return, the healthy
//! volumes measured and the hung one reported `probe_timeout`. Before, each called statfs on the
//! main thread and never returned.

mod support {
    pub mod hung;
    pub mod node;
    pub mod root;
}

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use support::hung::HungMount;
use support::node::{KubeletRoot, MI};

/// Far above the probe's 5 s deadline: a command still running then is hung, not slow.
const HUNG: Duration = Duration::from_secs(60);

/// Runs `headroom ARGS`, killing it (and failing) if it does not return. Its output is read
/// while it runs: a host with many mounts prints more than a pipe holds.
fn run_headroom(args: &[&std::ffi::OsStr]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run headroom");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let hung = finished.recv_timeout(HUNG).is_err();
        if hung {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        hung
    });
    let out = child.wait_with_output().expect("output");
    let _ = done.send(());
    let hung = watchdog.join().expect("watchdog");
    assert!(
        !hung,
        "headroom {args:?} did not return within {HUNG:?}: hung on the stopped mount"
    );
    out
}

/// `headroom scan ARGS --format json`.
fn scan(args: &[&std::ffi::OsStr]) -> (Output, serde_json::Value) {
    let mut all: Vec<&std::ffi::OsStr> = vec!["scan".as_ref()];
    all.extend_from_slice(args);
    all.extend([OsStr::new("--format"), OsStr::new("json")]);
    let out = run_headroom(&all);
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, json)
}

fn row<'a>(rows: &'a serde_json::Value, path: &Path) -> &'a serde_json::Value {
    rows.as_array()
        .expect("rows")
        .iter()
        .find(|r| r["path"] == path.to_string_lossy().as_ref())
        .unwrap_or_else(|| panic!("no row for {}: {rows}", path.display()))
}

fn assert_hung(r: &serde_json::Value) {
    assert!(r["capacity_bytes"].is_null(), "{r}");
    assert!(
        r["findings"].to_string().contains("probe_timeout"),
        "the hung mount is reported not measured: {r}"
    );
}

fn assert_measured(r: &serde_json::Value) {
    assert_eq!(r["capacity_bytes"], 8 * MI, "{r}");
}

#[test]
fn scan_returns_with_a_stopped_fuse_mount_among_healthy_volumes() {
    if !support::root::require_root(
        "scan_returns_with_a_stopped_fuse_mount_among_healthy_volumes",
        &[("bindfs", "bindfs")],
    ) {
        return;
    }
    let mut root = KubeletRoot::new();
    let healthy: Vec<_> = (0..3)
        .map(|i| root.tmpfs_volume(&format!("u{i}"), &format!("pv-{i}"), 8 * MI))
        .collect();
    let source = tempfile::tempdir().expect("bindfs source");
    // Declared after the root: continued and unmounted before the root is removed.
    let hung = HungMount::start(source.path(), &root.csi_mount_point("u9", "pv-hung"));

    let (out, rows) = scan(&["--kubelet-root".as_ref(), root.path().as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for h in &healthy {
        assert_measured(row(&rows, h));
    }
    assert_hung(row(&rows, &hung.mount_point));

    // Named paths: like `df PATH`, an unmeasured one fails the command, but it returns.
    let mut args: Vec<&std::ffi::OsStr> = healthy.iter().map(|p| p.as_os_str()).collect();
    args.insert(1, hung.mount_point.as_os_str());
    let (out, rows) = scan(&args);
    assert!(!out.status.success());
    for h in &healthy {
        assert_measured(row(&rows, h));
    }
    assert_hung(row(&rows, &hung.mount_point));

    // This host, like `df`: the stopped mount is listed not measured, the rest measured.
    let (out, rows) = scan(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_hung(row(&rows, &hung.mount_point));
    assert!(
        rows.as_array()
            .expect("rows")
            .iter()
            .any(|r| r["path"] == "/" && r["capacity_bytes"].as_u64().unwrap_or(0) > 0),
        "{rows}"
    );
}

/// `wal-health --pgdata` and `trim` on the stopped mount return too, saying it did not answer.
#[test]
fn wal_health_and_trim_return_from_a_stopped_fuse_mount() {
    if !support::root::require_root(
        "wal_health_and_trim_return_from_a_stopped_fuse_mount",
        &[("bindfs", "bindfs")],
    ) {
        return;
    }
    let root = KubeletRoot::new();
    let source = tempfile::tempdir().expect("bindfs source");
    let hung = HungMount::start(source.path(), &root.csi_mount_point("u9", "pv-hung"));
    let mnt = hung.mount_point.as_os_str();

    let out = run_headroom(&[
        "wal-health".as_ref(),
        "--pgdata".as_ref(),
        mnt,
        "--format".as_ref(),
        "json".as_ref(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["errors"].to_string().contains("no answer within"), "{v}");
    assert_eq!(v["sources"]["volume"], false, "{v}");

    let out = run_headroom(&["trim".as_ref(), mnt, "--timeout".as_ref(), "2".as_ref()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no answer within 2s"), "{err}");
}
