//! A node for end-to-end tests: a kubelet-like root whose CSI volumes are real tmpfs mounts, a
//! "CSI driver + kubelet" that carries out resizes, and the agent run as a child process.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nix::mount::{MntFlags, MsFlags, mount, umount2};

pub const MI: u64 = 1 << 20;

/// A kubelet root; every mount is detached on drop, even after a failed assertion.
pub struct KubeletRoot {
    pub dir: tempfile::TempDir,
    mounts: Vec<PathBuf>,
}

impl Drop for KubeletRoot {
    fn drop(&mut self) {
        for m in self.mounts.iter().rev() {
            let _ = umount2(m, MntFlags::MNT_DETACH);
        }
    }
}

impl KubeletRoot {
    pub fn new() -> Self {
        KubeletRoot {
            dir: tempfile::tempdir().expect("tempdir"),
            mounts: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn volume_dir(&self, pod_uid: &str, pv: &str) -> PathBuf {
        let dir = self
            .path()
            .join("pods")
            .join(pod_uid)
            .join("volumes/kubernetes.io~csi")
            .join(pv);
        std::fs::create_dir_all(dir.join("mount")).expect("volume dir");
        let data = serde_json::json!({
            "driverName": "test.csi.headroom.dev", "specVolID": pv, "volumeHandle": format!("h-{pv}"),
            "nodeName": "node-a", "volumeLifecycleMode": "Persistent",
        });
        std::fs::write(dir.join("vol_data.json"), data.to_string()).expect("vol_data.json");
        dir
    }

    /// The (empty) mount point of a CSI filesystem volume, for a filesystem the caller mounts
    /// and unmounts itself (e.g. ext4 on a loop device).
    pub fn csi_mount_point(&self, pod_uid: &str, pv: &str) -> PathBuf {
        self.volume_dir(pod_uid, pv).join("mount")
    }

    /// A CSI filesystem volume backed by its own tmpfs of `bytes`.
    pub fn tmpfs_volume(&mut self, pod_uid: &str, pv: &str, bytes: u64) -> PathBuf {
        let mnt = self.volume_dir(pod_uid, pv).join("mount");
        let opts = format!("size={bytes},mode=0777");
        mount(
            Some("tmpfs"),
            &mnt,
            Some("tmpfs"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
        .expect("mount tmpfs");
        self.mounts.push(mnt.clone());
        mnt
    }

    /// The same filesystem (or directory) bind-mounted as another pod's volume.
    pub fn bind_volume(&mut self, pod_uid: &str, pv: &str, source: &Path) -> PathBuf {
        let mnt = self.volume_dir(pod_uid, pv).join("mount");
        mount(
            Some(source),
            &mnt,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .expect("bind mount");
        self.mounts.push(mnt.clone());
        mnt
    }

    /// A block-mode volume: listed by the kubelet under volumeDevices, never mounted.
    pub fn block_volume(&mut self, pod_uid: &str, pv: &str) -> PathBuf {
        let dir = self
            .path()
            .join("pods")
            .join(pod_uid)
            .join("volumeDevices/kubernetes.io~csi");
        std::fs::create_dir_all(&dir).expect("volumeDevices dir");
        let link = dir.join(pv);
        std::os::unix::fs::symlink("/dev/null", &link).expect("block device link");
        link
    }

    /// A plain tmpfs outside the kubelet root (a "node disk" for directory-backed volumes).
    pub fn scratch_tmpfs(&mut self, bytes: u64) -> PathBuf {
        let dir = self.path().join(format!("disk-{}", self.mounts.len()));
        std::fs::create_dir_all(&dir).expect("disk dir");
        let opts = format!("size={bytes}");
        mount(
            Some("tmpfs"),
            &dir,
            Some("tmpfs"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
        .expect("mount disk");
        self.mounts.push(dir.clone());
        dir
    }
}

/// Grows (or shrinks) the file `fill` in `mount` to exactly `bytes`.
pub fn fill(mount: &Path, bytes: u64) {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(mount.join("fill"))
        .expect("open fill");
    // tmpfs allocates on write, not on set_len: write real data.
    let have = f.metadata().map(|m| m.len()).unwrap_or(0);
    if bytes < have {
        f.set_len(bytes).expect("truncate");
        return;
    }
    use std::io::{Seek, SeekFrom, Write};
    let mut f = f;
    f.seek(SeekFrom::Start(have)).expect("seek");
    let chunk = vec![0x5au8; MI as usize];
    let mut left = bytes - have;
    while left > 0 {
        let n = left.min(MI);
        f.write_all(&chunk[..n as usize]).expect("write fill");
        left -= n;
    }
    f.sync_all().ok();
}

pub fn quantity_bytes(q: Option<&Quantity>) -> u64 {
    q.map(|q| headroom::quantity::parse(&q.0).expect("quantity"))
        .unwrap_or(0)
}

pub fn request_of(pvc: &PersistentVolumeClaim) -> u64 {
    quantity_bytes(
        pvc.spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage")),
    )
}

pub fn capacity_of(pvc: &PersistentVolumeClaim) -> u64 {
    quantity_bytes(
        pvc.status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage")),
    )
}

/// What the simulated storage system needs of an API server (the fake or a real one): read a
/// claim, and set its `status.capacity` as the kubelet does once the filesystem grew.
pub trait ClaimStore: Send + Sync + 'static {
    fn claim(&self, ns: &str, name: &str) -> Option<PersistentVolumeClaim>;
    fn set_capacity(&self, ns: &str, name: &str, bytes: u64);
}

/// The storage system: after `delay`, each claim whose request exceeds its capacity has its tmpfs
/// remounted at the new size and `status.capacity` set, as a CSI driver and the kubelet would.
pub struct CsiDriver {
    stop: Arc<Mutex<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CsiDriver {
    pub fn start(
        store: Arc<dyn ClaimStore>,
        volumes: BTreeMap<(String, String), Vec<PathBuf>>,
        delay: Duration,
    ) -> Self {
        let stop = Arc::new(Mutex::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen: BTreeMap<(String, String), Instant> = BTreeMap::new();
            while !*stopped.lock().expect("stop flag") {
                for ((ns, name), mounts) in &volumes {
                    let Some(pvc) = store.claim(ns, name) else {
                        continue;
                    };
                    let (req, cap) = (request_of(&pvc), capacity_of(&pvc));
                    if req <= cap {
                        seen.remove(&(ns.clone(), name.clone()));
                        continue;
                    }
                    let since = *seen
                        .entry((ns.clone(), name.clone()))
                        .or_insert_with(Instant::now);
                    if since.elapsed() < delay {
                        continue;
                    }
                    for m in mounts {
                        let opts = format!("size={req}");
                        mount(
                            Some("tmpfs"),
                            m,
                            Some("tmpfs"),
                            MsFlags::MS_REMOUNT,
                            Some(opts.as_str()),
                        )
                        .expect("remount");
                    }
                    store.set_capacity(ns, name, req);
                    seen.remove(&(ns.clone(), name.clone()));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        CsiDriver {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for CsiDriver {
    fn drop(&mut self) {
        if let Ok(mut s) = self.stop.lock() {
            *s = true;
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `headroom agent` as a child process, killed on drop. Its log goes to a file, printed (the
/// end of it) when the test fails, or straight to the test's stderr with `HEADROOM_TEST_LOG`.
pub struct Agent {
    pub child: Child,
    log: Option<tempfile::NamedTempFile>,
}

pub struct AgentOpts<'a> {
    pub kubeconfig: &'a Path,
    pub node: &'a str,
    pub root: &'a Path,
    pub interval: &'a str,
    pub extra: &'a [&'a str],
}

impl Agent {
    pub fn spawn(o: &AgentOpts) -> Agent {
        let inherit = std::env::var_os("HEADROOM_TEST_LOG").is_some();
        // A bench measures the agent's CPU: its log costs what it did when the numbers were taken.
        let bench = std::env::args().any(|a| a == "--bench");
        let log =
            (!inherit && !bench).then(|| tempfile::NamedTempFile::new().expect("agent log file"));
        let stderr = match &log {
            Some(f) => f.reopen().expect("agent log file").into(),
            None if inherit => Stdio::inherit(),
            None => Stdio::null(),
        };
        // Benches compare binaries (before and after a change) under the same harness.
        let bin = std::env::var_os("HEADROOM_BENCH_AGENT_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_headroom").into());
        let child = Command::new(bin)
            .arg("agent")
            .args(o.extra)
            .env("KUBECONFIG", o.kubeconfig)
            .env("NODE_NAME", o.node)
            .env("POD_NAMESPACE", "headroom")
            .env("HEADROOM_KUBELET_ROOT", o.root)
            .env("HEADROOM_INTERVAL", o.interval)
            .env("HEADROOM_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "headroom=debug,info")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn headroom agent");
        Agent { child, log }
    }

    /// What the agent has logged so far (empty when its log is not kept).
    pub fn log_text(&self) -> String {
        self.log
            .as_ref()
            .and_then(|l| std::fs::read_to_string(l.path()).ok())
            .unwrap_or_default()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How much of a failed test's agent log is printed.
const LOG_TAIL: usize = 60;

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
        if self.log.is_none() || !std::thread::panicking() {
            return;
        }
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL)..];
        eprintln!(
            "--- agent pid {} ({} log lines, the last {}):\n{}\n---",
            self.child.id(),
            lines.len(),
            tail.len(),
            tail.join("\n")
        );
    }
}

/// Polls `check` every 50 ms until it returns Some, or panics after `timeout` saying `what`.
pub fn wait_for<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// splitmix64: a few lines of deterministic randomness, so a seeded run repeats exactly.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
