//! A real single-node Kubernetes for tests (`KUBE_NEWEST` of scripts/kube-versions.sh, or
//! `HEADROOM_KUBE_NODE_VERSION`): etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
//! kube-proxy (iptables), containerd with a bridge CNI, a kubelet with webhook authentication and
//! authorization, and the test CSI node plugin (`csi/main.go`). The release's binaries, its
//! kubectl, the plugin and the pause image come from `scripts/kube-node.sh`
//! (`HEADROOM_KUBE_NODE`, cached per machine and release), headroom's image from
//! `scripts/image.sh` (`HEADROOM_IMAGE`); containerd 1.6, runc and the CNI plugins are Debian's.
//!
//! The kubelet runs with `--root-dir=/var/lib/kubelet`, so the shipped DaemonSet needs no
//! hostPath change; one node per machine at a time (a pid file in /run says whose). Every process
//! is a child started with PR_SET_PDEATHSIG and killed by pid; teardown (at exit, and before a
//! start after a run that was killed) removes what [`host`] lists. The pods' network is a bridge
//! of the harness's own with nothing routed off it.
#![allow(dead_code)]

pub mod config;
pub mod host;
pub mod observe;
pub mod offline;
pub mod pki;
pub mod postgres;
pub mod proc;
pub mod resizer;
pub mod scenario;
mod start;
pub mod witness;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use proc::{log_file, spawn_tied};

pub const NODE: &str = "headroom-node";
pub const NODE_IP: &str = "10.213.77.1";
pub const POD_SUBNET: &str = "10.213.77.0/24";
pub const SERVICE_RANGE: &str = "10.213.78.0/24";
pub const SERVICE_IP: &str = "10.213.78.1";
pub const API_PORT: u16 = 6443;
pub const KUBELET_ROOT: &str = "/var/lib/kubelet";
pub const DRIVER: &str = "headroom.test.csi";
/// The name the harness gives the release's pause image (see `Node::tag_pause`).
pub const PAUSE_IMAGE: &str = "headroom.test/pause:realnode";
/// The name the test's kustomize overlay gives headroom's image (the archive is imported under
/// it); the shipped manifests say `headroom:0.1.0`.
pub const AGENT_IMAGE: &str = "headroom.test/headroom:realnode";
/// The kubelet's eviction floor for `nodefs` and `imagefs`, and the room a run asks of the host
/// before it starts (images, loop files, PostgreSQL's data, logs, with margin).
pub const EVICT_BELOW_MI: u64 = 256;
const NEEDS_FREE_MI: u64 = 1024;
const PID_FILE: &str = "/run/headroom-realnode.pid";

/// Where the node's binaries and images are.
#[derive(Clone, Debug)]
pub struct Parts {
    pub node_dir: PathBuf,
    pub apiserver: PathBuf,
    pub kubectl: PathBuf,
    pub image: PathBuf,
    /// PostgreSQL's image archive (`scripts/pg-image.sh`, `HEADROOM_PG_IMAGE`), imported when
    /// given; the Postgres tests require it (see [`postgres::parts`]).
    pub pg_image: Option<PathBuf>,
}

impl Parts {
    fn bin(&self, name: &str) -> PathBuf {
        self.node_dir.join(name)
    }
}

fn cache() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(
        std::env::var_os("HEADROOM_KUBE_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(&home).join(".cache/headroom")),
    )
}

/// The node's release: `HEADROOM_KUBE_NODE_VERSION` or `KUBE_NEWEST` of
/// scripts/kube-versions.sh, as scripts/kube-node.sh picks it.
fn node_version() -> Option<String> {
    if let Ok(v) = std::env::var("HEADROOM_KUBE_NODE_VERSION") {
        return Some(v);
    }
    let pins = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kube-versions.sh");
    let text = std::fs::read_to_string(pins).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("KUBE_NEWEST="))
        .map(|v| v.trim().to_owned())
}

/// The parts, or `None` (skip) when some are missing and CI is unset; with CI set a missing
/// part fails the test.
pub fn parts(test: &str) -> Option<Parts> {
    let node_dir = std::env::var_os("HEADROOM_KUBE_NODE")
        .map(PathBuf::from)
        .or_else(|| Some(cache()?.join(format!("node-{}", node_version()?))))
        .unwrap_or_default();
    let image = std::env::var_os("HEADROOM_IMAGE")
        .map(PathBuf::from)
        .unwrap_or_default();
    let mut missing = Vec::new();
    for b in [
        "etcd",
        "kube-apiserver",
        "kubelet",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
        "kubectl",
        "headroom-csi",
        "pause.oci.tar",
    ] {
        if !node_dir.join(b).is_file() {
            missing.push(format!("{b} (scripts/kube-node.sh, HEADROOM_KUBE_NODE)"));
        }
    }
    for (p, what) in [
        (
            &image,
            "headroom's image archive (scripts/image.sh, HEADROOM_IMAGE)",
        ),
        (
            &PathBuf::from("/usr/bin/containerd"),
            "containerd (Debian package containerd)",
        ),
        (
            &PathBuf::from("/usr/lib/cni/bridge"),
            "CNI plugins (containernetworking-plugins)",
        ),
        (&PathBuf::from("/usr/sbin/xfs_growfs"), "xfsprogs"),
    ] {
        if !p.is_file() {
            missing.push(what.to_owned());
        }
    }
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_owned());
    }
    if missing.is_empty() {
        return Some(Parts {
            apiserver: node_dir.join("kube-apiserver"),
            kubectl: node_dir.join("kubectl"),
            node_dir,
            image,
            pg_image: std::env::var_os("HEADROOM_PG_IMAGE")
                .map(PathBuf::from)
                .filter(|p| p.is_file()),
        });
    }
    let why = missing.join(", ");
    if std::env::var_os("CI").is_some() {
        panic!("{test} cannot run: it needs {why}, and CI is set so it may not skip");
    }
    eprintln!(
        "skipping {test}: needs {why} (set CI to make this a failure; ./scripts/test.sh builds them)"
    );
    None
}

/// The running node. Dropping it (or process exit, for the shared one) tears it down.
pub struct Node {
    pub dir: PathBuf,
    pub parts: Parts,
    procs: Mutex<BTreeMap<&'static str, Child>>,
    kept_dirs: Vec<PathBuf>,
    netns_before: HashSet<String>,
    ip_forward_before: String,
    pub started: Instant,
    torn_down: AtomicBool,
}

static SHARED: OnceLock<Arc<Node>> = OnceLock::new();

extern "C" fn stop_shared_at_exit() {
    if let Some(n) = SHARED.get() {
        n.teardown();
    }
}

impl Node {
    /// The node shared by every test of this process.
    pub fn shared(parts: &Parts) -> Arc<Node> {
        SHARED
            .get_or_init(|| {
                // SAFETY: registers a plain function; it only touches the initialised static.
                unsafe { libc::atexit(stop_shared_at_exit) };
                Arc::new(Node::start(parts.clone()))
            })
            .clone()
    }

    pub fn start(parts: Parts) -> Node {
        clean_stale_run();
        let tmp = std::env::temp_dir();
        host::require_room(&[Path::new(KUBELET_ROOT), &tmp], NEEDS_FREE_MI);
        let dir = tmp.join(format!("headroom-realnode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("cni")).expect("node dir");
        std::fs::write(
            PID_FILE,
            format!("{} {}\n", std::process::id(), dir.display()),
        )
        .expect("pid file");
        let node = Node {
            kept_dirs: host::existing_dirs(),
            netns_before: host::netns_now(),
            ip_forward_before: host::ip_forward(),
            dir,
            parts,
            procs: Mutex::new(BTreeMap::new()),
            started: Instant::now(),
            torn_down: AtomicBool::new(false),
        };
        node.boot();
        node
    }

    fn boot(&self) {
        pki::make(&self.pki(), NODE_IP, SERVICE_IP, NODE);
        std::fs::write(self.dir.join("tokens.csv"), config::tokens(NODE)).expect("tokens");
        for (who, token) in [
            ("admin", "admin-token"),
            ("kcm", "kcm-token"),
            ("scheduler", "scheduler-token"),
            ("proxy", "proxy-token"),
            ("kubelet", "kubelet-token"),
        ] {
            let text = config::kubeconfig(
                &format!("https://{NODE_IP}:{API_PORT}"),
                &self.pki().join("ca.crt"),
                token,
            );
            std::fs::write(self.kubeconfig(who), text).expect("kubeconfig");
        }
        host::bridge_up(&format!("{NODE_IP}/24"));
        self.start_etcd();
        self.start_apiserver();
        self.start_controllers();
        self.start_containerd();
        self.import(&self.parts.node_dir.join("pause.oci.tar"));
        self.tag_pause();
        self.import(&self.parts.image.clone());
        self.tag_image(AGENT_IMAGE);
        if let Some(pg) = self.parts.pg_image.clone() {
            self.import(&pg);
        }
        self.start_csi_plugin();
        self.start_kubelet();
        self.wait_node_ready(Duration::from_secs(120));
        // Pods reach the API server through the `kubernetes` Service: kube-proxy's rules.
        wait_for_cmd(
            Duration::from_secs(60),
            "kube-proxy's rule for the kubernetes Service",
            || {
                host::sh("iptables-save", &["-t", "nat"])
                    .filter(|r| r.contains(&format!("-d {SERVICE_IP}/32")))
                    .map(|_| ())
            },
        );
        self.apply(&format!(
            "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n  name: {DRIVER}\nspec:\n  attachRequired: false\n  podInfoOnMount: false\n  volumeLifecycleModes: [Persistent]\n"
        ));
    }

    pub fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }

    pub fn kubeconfig(&self, who: &str) -> PathBuf {
        self.dir.join(format!("{who}.kubeconfig"))
    }

    pub fn csi_state(&self) -> PathBuf {
        self.dir.join("csi")
    }

    fn containerd_sock(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    fn spawn(&self, name: &'static str, mut cmd: Command) {
        cmd.stdin(Stdio::null())
            .stdout(log_file(&self.dir, &format!("{name}.log")))
            .stderr(log_file(&self.dir, &format!("{name}.log")));
        let child = spawn_tied(cmd);
        self.procs.lock().expect("procs").insert(name, child);
    }

    /// Kills one part by pid (SIGKILL, as a crash).
    pub fn kill(&self, name: &str) {
        if let Some(mut c) = self.procs.lock().expect("procs").remove(name) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    pub fn wait_node_ready(&self, within: Duration) {
        wait_for_cmd(within, "node Ready", || {
            let s = self
                .kubectl(&[
                    "get",
                    "node",
                    NODE,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                ])
                .ok()?;
            (s == "True").then_some(())
        });
    }

    pub fn kubectl_cmd(&self) -> Command {
        let mut c = Command::new(&self.parts.kubectl);
        c.arg(format!(
            "--kubeconfig={}",
            self.kubeconfig("admin").display()
        ))
        // Each request bounded: a hung API server fails the test instead of holding CI.
        .arg("--request-timeout=60s");
        c
    }

    /// kubectl as the admin: stdout, or stderr as the error.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .kubectl_cmd()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn kubectl_ok(&self, args: &[&str]) -> Option<()> {
        self.kubectl(args).ok().map(|_| ())
    }

    pub fn get_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["get", "-o", "json"];
        all.extend_from_slice(args);
        let text = self
            .kubectl(&all)
            .unwrap_or_else(|e| panic!("kubectl get {args:?}: {e}"));
        serde_json::from_str(&text).expect("kubectl json")
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) {
        use std::io::Write;
        let mut child = self
            .kubectl_cmd()
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl apply");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(yaml.as_bytes())
            .expect("write yaml");
        let out = child.wait_with_output().expect("kubectl apply");
        assert!(
            out.status.success(),
            "kubectl apply: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops everything and removes every trace on the host. Only the first call acts: a bench
    /// tears its node down and then drops it, and a second pass would replace the kept logs with
    /// a diagnosis of a node that no longer exists.
    pub fn teardown(&self) {
        if self.torn_down.swap(true, Ordering::SeqCst) {
            return;
        }
        self.keep_logs();
        self.kill("kubelet");
        if let Some(tasks) = self.ctr(&["tasks", "ls", "-q"]) {
            for t in tasks.lines() {
                let _ = self.ctr(&["tasks", "kill", "-s", "SIGKILL", t]);
            }
        }
        let names: Vec<&'static str> = self
            .procs
            .lock()
            .map(|p| p.keys().copied().collect())
            .unwrap_or_default();
        for n in names {
            self.kill(n);
        }
        host::kill_marked(&self.dir.display().to_string());
        cleanup_host(
            &self.dir,
            &self.kept_dirs,
            &self.netns_before,
            &self.ip_forward_before,
        );
        let _ = std::fs::remove_file(PID_FILE);
    }
}

impl Node {
    /// Copies the parts' logs to `<tmp>/headroom-realnode-logs` (replacing an older run's), for
    /// a failure to be read after the node is gone.
    fn keep_logs(&self) {
        let to = std::env::temp_dir().join("headroom-realnode-logs");
        let _ = std::fs::remove_dir_all(&to);
        let _ = std::fs::create_dir_all(&to);
        for e in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "log") {
                let _ = std::fs::copy(e.path(), to.join(e.file_name()));
            }
        }
        let _ = std::fs::write(to.join("cluster.txt"), self.diagnose());
        // The agent's container logs, every restart of it.
        let pods = std::fs::read_dir("/var/log/pods")
            .into_iter()
            .flatten()
            .flatten();
        for pod in pods.filter(|p| p.file_name().to_string_lossy().starts_with("headroom_")) {
            for log in std::fs::read_dir(pod.path().join("agent"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = format!(
                    "agent-{}-{}",
                    pod.file_name().to_string_lossy(),
                    log.file_name().to_string_lossy()
                );
                let _ = std::fs::copy(log.path(), to.join(name));
            }
        }
    }

    /// What a failed wait should show: every pod, the events, the node.
    pub fn diagnose(&self) -> String {
        [
            &["get", "pods", "-A", "-o", "wide"][..],
            &["get", "events", "-A", "--sort-by=.lastTimestamp"],
            &["describe", "pods", "-n", "headroom"],
            &["describe", "node", NODE],
        ]
        .iter()
        .map(|args| self.kubectl(args).unwrap_or_else(|e| e))
        .collect::<Vec<_>>()
        .join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn cleanup_host(dir: &Path, kept: &[PathBuf], netns_before: &HashSet<String>, ip_forward: &str) {
    // Shims and containers may take a moment to die after SIGKILL; their mounts go lazily anyway.
    std::thread::sleep(Duration::from_millis(500));
    host::unmount_below(&[Path::new(KUBELET_ROOT), dir]);
    host::detach_loops(&dir.join("csi"));
    host::remove_netns(netns_before);
    host::remove_cgroups();
    host::remove_chains();
    host::bridge_down();
    host::set_ip_forward(ip_forward);
    host::remove_dirs(kept);
    // containerd's shims put their sockets in /run/containerd/s whatever the config says; the
    // directories go once empty (remove_dir never removes a non-empty one).
    let _ = std::fs::remove_dir("/run/containerd/s");
    let _ = std::fs::remove_dir("/run/containerd");
    let _ = std::fs::remove_dir_all(dir);
}

/// A run killed before its exit handler left its pid file: clean up after it (its processes
/// died with it through PR_SET_PDEATHSIG, except containerd's shims, found by its directory).
fn clean_stale_run() {
    let Ok(text) = std::fs::read_to_string(PID_FILE) else {
        return;
    };
    let mut f = text.split_whitespace();
    let (Some(pid), Some(dir)) = (f.next().and_then(|p| p.parse::<i32>().ok()), f.next()) else {
        let _ = std::fs::remove_file(PID_FILE);
        return;
    };
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    assert!(
        !alive,
        "another real-node run (pid {pid}, {dir}) is using {KUBELET_ROOT}"
    );
    host::kill_marked(dir);
    cleanup_host(Path::new(dir), &[], &HashSet::new(), "0");
    let _ = std::fs::remove_file(PID_FILE);
}

pub fn wait_for_cmd<T>(within: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
