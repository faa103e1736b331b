//! A real kube-apiserver on etcd, both from one Kubernetes release built from the Go module proxy
//! by `scripts/kube-release.sh` (the releases tested are pinned in `scripts/kube-versions.sh`:
//! `scripts/test.sh` runs these tests once on the oldest and again on the newest), on free
//! loopback ports, as controller-runtime's envtest runs one for Go controllers. No controller manager, scheduler or
//! kubelet: tests play those parts (binding claims, setting `status.capacity`, pod IPs).
//!
//! Authentication is a static token file: `admin` (system:masters) and the agent's service
//! account identity `system:serviceaccount:headroom:headroom`, which only the project's own
//! `rbac/` manifests authorise. An audit log records every request with the user, verb, object
//! and status code, so tests count the agent's writes on the server's own record.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const ADMIN_TOKEN: &str = "headroom-test-admin";
pub const AGENT_TOKEN: &str = "headroom-test-agent";
pub const AGENT_USER: &str = "system:serviceaccount:headroom:headroom";

const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Request
    resources:
      - group: ""
        resources: ["persistentvolumeclaims"]
    verbs: ["patch", "update", "create"]
  - level: Request
    resources:
      - group: "events.k8s.io"
        resources: ["events"]
    verbs: ["create"]
  - level: Request
    resources:
      - group: "postgresql.cnpg.io"
        resources: ["clusters"]
      - group: "acid.zalan.do"
        resources: ["postgresqls"]
      - group: "postgres-operator.crunchydata.com"
        resources: ["postgresclusters"]
    verbs: ["patch", "update"]
  - level: Metadata
"#;

/// One Kubernetes release's server binaries: a directory `scripts/kube-release.sh` printed.
#[derive(Debug, Clone)]
pub struct Release {
    pub dir: PathBuf,
    /// As the binary reports it, e.g. `v1.34.4`.
    pub version: String,
    /// The minor version, e.g. 34.
    pub minor: u32,
}

impl Release {
    pub fn apiserver(&self) -> PathBuf {
        self.dir.join("kube-apiserver")
    }
    pub fn etcd(&self) -> PathBuf {
        self.dir.join("etcd")
    }
}

/// The release the tests run on: `HEADROOM_KUBE_RELEASE`, else the oldest tested release
/// (`KUBE_OLDEST` in scripts/kube-versions.sh) in the per-machine cache `scripts/kube-release.sh`
/// fills. `Err` says what is missing.
pub fn release() -> Result<&'static Release, String> {
    static RELEASE: OnceLock<Result<Release, String>> = OnceLock::new();
    RELEASE
        .get_or_init(find_release)
        .as_ref()
        .map_err(Clone::clone)
}

fn find_release() -> Result<Release, String> {
    let dir = match std::env::var_os("HEADROOM_KUBE_RELEASE") {
        Some(d) => PathBuf::from(d),
        None => {
            let versions = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kube-versions.sh");
            let text =
                std::fs::read_to_string(&versions).map_err(|e| format!("{versions:?}: {e}"))?;
            let oldest = text
                .lines()
                .find_map(|l| l.strip_prefix("KUBE_OLDEST="))
                .ok_or_else(|| format!("no KUBE_OLDEST in {versions:?}"))?;
            let home = std::env::var_os("HOME").ok_or("HOME is not set")?;
            let cache = std::env::var_os("HEADROOM_KUBE_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(&home).join(".cache/headroom"));
            cache.join(format!("kube-{}", oldest.trim()))
        }
    };
    let apiserver = dir.join("kube-apiserver");
    if !apiserver.is_file() || !dir.join("etcd").is_file() {
        return Err(format!(
            "kube-apiserver and etcd in {} (run scripts/kube-release.sh, or ./scripts/test.sh)",
            dir.display()
        ));
    }
    let out = Command::new(&apiserver)
        .arg("--version")
        .output()
        .map_err(|e| format!("{}: {e}", apiserver.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .find(|w| w.starts_with("v1."))
        .ok_or_else(|| format!("{} --version said {text:?}", apiserver.display()))?
        .to_string();
    let minor = version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| format!("{} --version said {text:?}", apiserver.display()))?;
    Ok(Release {
        dir,
        version,
        minor,
    })
}

/// True when the real-server tests may run; with `CI` set a missing part fails the test.
pub fn available(test: &str) -> bool {
    let mut missing = Vec::new();
    if let Err(why) = release() {
        missing.push(why);
    }
    if !Path::new("/usr/bin/openssl").is_file() {
        missing.push("openssl (Debian package openssl)".to_string());
    }
    if !nix::unistd::geteuid().is_root() {
        missing.push("root (the tests mount tmpfs volumes)".to_string());
    }
    if missing.is_empty() {
        return true;
    }
    let why = missing.join(", ");
    if std::env::var_os("CI").is_some() {
        panic!("{test} cannot run: it needs {why}, and CI is set so it may not skip");
    }
    eprintln!("skipping {test}: needs {why} (set CI to make this a failure)");
    false
}

use super::super::ports::free_port;

// The real node's processes are tied to the test process the same way.
#[path = "../realnode/proc.rs"]
mod proc;
use proc::spawn_tied;

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run command");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One etcd + kube-apiserver pair with its own data directory.
pub struct Server {
    pub dir: PathBuf,
    pub port: u16,
    etcd_port: u16,
    etcd: Mutex<Option<Child>>,
    apiserver: Mutex<Option<Child>>,
}

static SHARED: OnceLock<Arc<Server>> = OnceLock::new();

/// A static is never dropped: the shared server's processes and data directory (etcd's WAL alone
/// preallocates 120 MB) go when the test process exits, failed tests included.
extern "C" fn stop_shared_at_exit() {
    if let Some(s) = SHARED.get() {
        s.stop();
    }
}

const DIR_PREFIX: &str = "headroom-kube-";

/// Removes the data directories of servers whose test process is gone (killed before its exit
/// handler ran, e.g. by a CI timeout).
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(DIR_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Server {
    /// The server shared by every test of this process (each test works in its own namespace,
    /// node and class names, so tests run in parallel).
    pub fn shared() -> Arc<Server> {
        SHARED
            .get_or_init(|| {
                let server = Arc::new(Server::start());
                // SAFETY: registers a plain function; it only touches the initialised static.
                unsafe { libc::atexit(stop_shared_at_exit) };
                server
            })
            .clone()
    }

    /// A server of its own, for tests that stop and restart it.
    pub fn start() -> Server {
        remove_stale_dirs();
        let dir = std::env::temp_dir().join(format!(
            "{DIR_PREFIX}{}-{}",
            std::process::id(),
            free_port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("pki")).expect("server dir");
        run(Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(dir.join("sa.key"))
            .arg("2048")
            .stderr(Stdio::piped()));
        run(Command::new("openssl")
            .arg("rsa")
            .arg("-in")
            .arg(dir.join("sa.key"))
            .args(["-pubout", "-out"])
            .arg(dir.join("sa.pub"))
            .stderr(Stdio::piped()));
        std::fs::write(
            dir.join("tokens.csv"),
            format!(
                "{ADMIN_TOKEN},admin,admin-uid,\"system:masters\"\n\
                 {AGENT_TOKEN},{AGENT_USER},headroom-sa-uid,\"system:serviceaccounts,system:serviceaccounts:headroom\"\n"
            ),
        )
        .expect("token file");
        std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY).expect("audit policy");
        let server = Server {
            port: free_port(),
            etcd_port: free_port(),
            etcd: Mutex::new(None),
            apiserver: Mutex::new(None),
            dir,
        };
        server.start_etcd();
        server.start_apiserver();
        server
    }

    fn start_etcd(&self) {
        let peer = free_port();
        let client = format!("http://127.0.0.1:{}", self.etcd_port);
        let peer = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new(release().expect("Kubernetes release").etcd());
        cmd.arg("--name=test")
            .arg(format!("--data-dir={}", self.dir.join("etcd").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .arg("--logger=zap")
            .arg("--log-level=error")
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir, "etcd.log"));
        *self.etcd.lock().expect("etcd lock") = Some(spawn_tied(cmd));
    }

    /// Starts the API server (again, after [`Server::stop_apiserver`]) on the same port and
    /// waits until it is ready.
    pub fn start_apiserver(&self) {
        let bin = release().expect("Kubernetes release").apiserver();
        let d = |f: &str| self.dir.join(f).display().to_string();
        let mut cmd = Command::new(bin);
        cmd.arg(format!(
            "--etcd-servers=http://127.0.0.1:{}",
            self.etcd_port
        ))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        // No Service endpoints to keep: 1.37's default reconciler refuses a loopback address.
        .arg("--endpoint-reconciler-type=none")
        .arg(format!("--secure-port={}", self.port))
        .arg(format!("--cert-dir={}", d("pki")))
        .arg(format!("--token-auth-file={}", d("tokens.csv")))
        .arg("--authorization-mode=RBAC")
        .arg(format!("--service-account-key-file={}", d("sa.pub")))
        .arg(format!(
            "--service-account-signing-key-file={}",
            d("sa.key")
        ))
        .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
        .arg("--service-cluster-ip-range=10.0.0.0/24")
        .arg("--disable-admission-plugins=ServiceAccount")
        .arg(format!("--audit-policy-file={}", d("audit-policy.yaml")))
        .arg(format!("--audit-log-path={}", d("audit.log")))
        .arg("--audit-log-format=json")
        .arg("--audit-log-mode=blocking")
        .arg("--v=0")
        .stdout(Stdio::null())
        .stderr(log_file(&self.dir, "apiserver.log"));
        *self.apiserver.lock().expect("apiserver lock") = Some(spawn_tied(cmd));
        self.wait_ready(Duration::from_secs(90));
    }

    /// Kills the API server (SIGKILL: connections drop as in a crash); etcd keeps the data.
    pub fn stop_apiserver(&self) {
        // A test that panicked while holding the lock (the server exiting at start) still stops it.
        let held = self
            .apiserver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut c) = held {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn wait_ready(&self, within: Duration) {
        let start = Instant::now();
        loop {
            let out = Command::new("curl")
                .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
                .arg(format!("Authorization: Bearer {ADMIN_TOKEN}"))
                .arg(format!("https://127.0.0.1:{}/readyz", self.port))
                .output();
            if out.is_ok_and(|o| o.stdout == b"200") {
                return;
            }
            if let Some(c) = self.apiserver.lock().expect("apiserver lock").as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!(
                    "kube-apiserver {} exited ({status}); see {} (and {} for etcd)",
                    release().map_or("?", |r| &r.version),
                    self.dir.join("apiserver.log").display(),
                    self.dir.join("etcd.log").display()
                );
            }
            assert!(
                start.elapsed() < within,
                "kube-apiserver {} not ready within {within:?}; see {} (and {} for etcd)",
                release().map_or("?", |r| &r.version),
                self.dir.join("apiserver.log").display(),
                self.dir.join("etcd.log").display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A kubeconfig for `token` (admin or agent), trusting the server's self-signed CA.
    pub fn kubeconfig(&self, token: &str, path: &Path) {
        let ca = self.dir.join("pki/apiserver.crt");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: test\n    user: u\n    namespace: default\ncurrent-context: c\n",
            self.port,
            ca.display()
        );
        std::fs::write(path, text).expect("write kubeconfig");
    }

    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }
}

fn log_file(dir: &Path, name: &str) -> Stdio {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
        .map(Stdio::from)
        .unwrap_or(Stdio::null())
}

impl Server {
    /// Kills both processes and removes the data directory (idempotent).
    fn stop(&self) {
        self.stop_apiserver();
        if let Some(mut c) = self.etcd.lock().map(|mut e| e.take()).ok().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Established TCP connections process `pid` holds to `127.0.0.1:port` (its socket inodes, looked
/// up in the kernel's TCP tables).
pub fn connections(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let port_hex = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
        .flat_map(|text| text.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // remote address, state 01 (ESTABLISHED), inode
            f.len() > 9 && f[2].ends_with(&port_hex) && f[3] == "01" && inodes.contains(f[9])
        })
        .count()
}
