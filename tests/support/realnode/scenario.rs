//! The real node's scenario vocabulary for `tests/real_node.rs`: headroom installed from the
//! shipped manifests, namespaces, claims bound to the test CSI driver's volumes, workloads that
//! mount them, fills, and reading back what the agent wrote and reported.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use super::resizer::Resizer;
use super::{DRIVER, NODE, Node, Parts, wait_for_cmd};

pub const MI: u64 = 1 << 20;
pub const CLASS: &str = "headroom-real";
/// The class of the test driver's offline mode (csi/main.go): the filesystem grows only when the
/// volume is published again.
pub const OFFLINE_CLASS: &str = "headroom-real-offline";

/// The node with headroom installed and the test's resizer running.
pub struct Installed {
    pub node: Arc<Node>,
    pub _resizer: Resizer,
}

/// Tests that stop parts of the node take this exclusively; the others share it.
pub static DISRUPT: RwLock<()> = RwLock::new(());

pub fn installed(test: &str) -> Option<&'static Installed> {
    installed_by(test, install)
}

/// The node installed by `install`, the first time a test of this binary asks (one binary, one
/// way of installing).
pub fn installed_by(test: &str, install: fn(&Node)) -> Option<&'static Installed> {
    static ONCE: OnceLock<Installed> = OnceLock::new();
    let parts: Parts = super::parts(test)?;
    Some(ONCE.get_or_init(|| {
        let node = Node::shared(&parts);
        install(&node);
        let resizer = Resizer::start(node.clone(), Duration::from_secs(2));
        Installed {
            node,
            _resizer: resizer,
        }
    }))
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let t = to.join(e.file_name());
        if e.file_type().expect("file type").is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).expect("copy");
        }
    }
}

/// `kubectl apply -k` of an overlay over copies of the shipped daemonset/ and rbac/ that sets
/// only the image, then waits for the agent's pod to be Ready on its own probes.
pub fn install(node: &Node) {
    install_with(node, "", &[]);
}

/// [`install`] with `more` appended to the overlay's kustomization.yaml and `files` (name, text)
/// written beside it, for a binary that tests an optional part of the manifests.
pub fn install_with(node: &Node, more: &str, files: &[(&str, String)]) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let k = node.dir.join("kustomize");
    copy_dir(&repo.join("daemonset"), &k.join("daemonset"));
    copy_dir(&repo.join("rbac"), &k.join("rbac"));
    std::fs::create_dir_all(k.join("overlay")).expect("overlay dir");
    let (name, tag) = super::AGENT_IMAGE.rsplit_once(':').expect("image tag");
    std::fs::write(
        k.join("overlay/kustomization.yaml"),
        format!(
            "bases:\n  - ../daemonset\nimages:\n  - name: headroom\n    newName: {name}\n    newTag: {tag}\n{more}"
        ),
    )
    .expect("overlay");
    for (file, text) in files {
        std::fs::write(k.join("overlay").join(file), text).expect("overlay file");
    }
    let overlay = k.join("overlay").display().to_string();
    node.kubectl(&["apply", "-k", &overlay])
        .unwrap_or_else(|e| panic!("kubectl apply -k: {e}"));
    // The offline class's parameter is what a provisioner would copy into the volume
    // attributes; the tests' static PVs carry it themselves ([`claim`]).
    for (class, params) in [
        (CLASS, ""),
        (OFFLINE_CLASS, "parameters: {expansion: offline}\n"),
    ] {
        node.apply(&format!(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {class}\nprovisioner: {DRIVER}\nallowVolumeExpansion: true\nvolumeBindingMode: Immediate\n{params}"
        ));
    }
    agent_pod(node, Duration::from_secs(180));
}

/// The agent's pod once Ready: (name, pod IP, container id).
pub fn agent_pod(node: &Node, within: Duration) -> (String, String, String) {
    wait_for_cmd(within, "the agent's pod Ready", || ready_agent_pod(node))
}

/// One look for a Ready agent pod that is not being deleted: its name, IP and container id.
pub fn ready_agent_pod(node: &Node) -> Option<(String, String, String)> {
    ready_agent_in(&node.get_json(&[
        "-n",
        "headroom",
        "pods",
        "-l",
        "app.kubernetes.io/name=headroom",
    ]))
}

/// The Ready agent pod, not being deleted, of a pod list: its name, IP and container id.
pub fn ready_agent_in(pods: &serde_json::Value) -> Option<(String, String, String)> {
    let pod = pods["items"].as_array()?.iter().find(|p| {
        p["metadata"]["deletionTimestamp"].is_null()
            && p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })?;
    let id = pod["status"]["containerStatuses"][0]["containerID"]
        .as_str()?
        .strip_prefix("containerd://")?
        .to_owned();
    Some((
        pod["metadata"]["name"].as_str()?.to_owned(),
        pod["status"]["podIP"].as_str()?.to_owned(),
        id,
    ))
}

pub fn namespace(node: &Node, ns: &str) {
    let _ = node.kubectl(&["delete", "namespace", ns, "--wait=true"]);
    node.kubectl(&["create", "namespace", ns])
        .expect("create namespace");
    wait_for_cmd(
        Duration::from_secs(30),
        "the default service account",
        || {
            node.kubectl(&["-n", ns, "get", "serviceaccount", "default"])
                .ok()
        },
    );
}

/// A claim bound by the PV binder to a static PV of the test driver, mounted by a pause pod.
pub struct Vol {
    pub ns: String,
    pub claim: String,
    pub pv: String,
    pub pod_uid: String,
}

impl Vol {
    /// The mount as the kubelet made it on the host.
    pub fn mount(&self) -> PathBuf {
        Path::new(super::KUBELET_ROOT)
            .join("pods")
            .join(&self.pod_uid)
            .join("volumes/kubernetes.io~csi")
            .join(&self.pv)
            .join("mount")
    }
}

pub struct VolSpec<'a> {
    pub size_mi: u64,
    /// Extra lines under the claim's metadata (annotations:, labels:), indented by 2.
    pub claim_meta: &'a str,
    /// The backing file, when volumes share one.
    pub file: Option<&'a str>,
    /// On [`OFFLINE_CLASS`]: the driver grows the filesystem only at the next publish.
    pub offline: bool,
}

/// A static PV of the test driver and a claim the PV binder binds to it.
pub fn claim(node: &Node, ns: &str, claim: &str, spec: &VolSpec) -> String {
    let pv = format!("{ns}-{claim}");
    let file = spec
        .file
        .map(|f| format!("\n      file: {f}"))
        .unwrap_or_default();
    let size = spec.size_mi * MI;
    let (class, expansion) = if spec.offline {
        (OFFLINE_CLASS, "\n      expansion: offline")
    } else {
        (CLASS, "")
    };
    node.apply(&format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata:
  name: {pv}
spec:
  capacity: {{storage: {size}}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {class}
  claimRef: {{namespace: {ns}, name: {claim}}}
  csi:
    driver: {DRIVER}
    volumeHandle: {pv}
    fsType: xfs
    volumeAttributes:
      size: "{size}"{file}{expansion}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {claim}
  namespace: {ns}
{meta}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: {class}
  resources: {{requests: {{storage: {size}}}}}
"#,
        meta = spec.claim_meta
    ));
    wait_for_cmd(Duration::from_secs(60), "the claim Bound", || {
        let phase = node
            .kubectl(&[
                "-n",
                ns,
                "get",
                "pvc",
                claim,
                "-o",
                "jsonpath={.status.phase}",
            ])
            .ok()?;
        (phase == "Bound").then_some(())
    });
    pv
}

/// A pause pod named `pod` mounting `claims` (at /data, /data1, ...), bare or (`daemonset`) as
/// the only pod of a DaemonSet, which `kubectl drain --ignore-daemonsets` leaves running.
/// Returns the running pod's uid.
pub fn workload(node: &Node, ns: &str, pod: &str, claims: &[&str], daemonset: bool) -> String {
    let mut mounts = String::new();
    let mut volumes = String::new();
    for (i, c) in claims.iter().enumerate() {
        let path = if i == 0 {
            "/data".to_owned()
        } else {
            format!("/data{i}")
        };
        mounts.push_str(&format!("\n        - {{name: v{i}, mountPath: {path}}}"));
        volumes.push_str(&format!(
            "\n    - {{name: v{i}, persistentVolumeClaim: {{claimName: {c}}}}}"
        ));
    }
    let spec = format!(
        "  terminationGracePeriodSeconds: 0\n  containers:\n    - name: c\n      image: {pause}\n      imagePullPolicy: Never\n      volumeMounts:{mounts}\n  volumes:{volumes}\n",
        pause = super::PAUSE_IMAGE
    );
    let yaml = if daemonset {
        let indented: String = spec.lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: {pod}\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: {pod}}}\n  template:\n    metadata:\n      labels: {{app: {pod}}}\n    spec:\n{indented}"
        )
    } else {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: {ns}\n  labels: {{app: {pod}}}\nspec:\n{spec}"
        )
    };
    node.apply(&yaml);
    wait_for_cmd(Duration::from_secs(120), "the workload pod Running", || {
        let pods = node.get_json(&["-n", ns, "pods", "-l", &format!("app={pod}")]);
        let p = pods["items"]
            .as_array()?
            .iter()
            .find(|p| p["status"]["phase"] == "Running")?
            .clone();
        p["metadata"]["uid"].as_str().map(str::to_owned)
    })
}

/// One claim mounted by a bare pause pod.
pub fn volume(node: &Node, ns: &str, name: &str, spec: &VolSpec) -> Vol {
    let pv = claim(node, ns, name, spec);
    let pod_uid = workload(node, ns, &format!("{name}-pod"), &[name], false);
    Vol {
        ns: ns.to_owned(),
        claim: name.to_owned(),
        pv,
        pod_uid,
    }
}

pub fn statfs(path: &Path) -> (u64, u64) {
    let s = nix::sys::statvfs::statvfs(path).expect("statvfs");
    let f = s.fragment_size();
    (s.blocks() * f, (s.blocks() - s.blocks_free()) * f)
}

/// Allocates real blocks until `percent` of the filesystem is used.
pub fn fill_to(mount: &Path, percent: u64, name: &str) {
    let (size, used) = statfs(mount);
    let want = size * percent / 100;
    if want <= used {
        return;
    }
    let path = mount.join(name);
    let out = std::process::Command::new("fallocate")
        .args(["-l", &(want - used).to_string()])
        .arg(&path)
        .output()
        .expect("fallocate");
    assert!(
        out.status.success(),
        "fallocate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The opt-in annotations of a grow-able test claim: small steps, a limit far above.
pub fn policy(extra: &str) -> String {
    format!(
        "  annotations:\n    headroom.dev/enabled: \"true\"\n    headroom.dev/limit: 4Gi\n    headroom.dev/step: 200Mi\n{extra}"
    )
}

pub fn vol_of(ns: &str, claim: &str, pod_uid: &str) -> Vol {
    Vol {
        ns: ns.to_owned(),
        claim: claim.to_owned(),
        pv: format!("{ns}-{claim}"),
        pod_uid: pod_uid.to_owned(),
    }
}

/// Emergencies only past 95 % used (not the default 1Gi free, which every test volume is under).
pub fn drain_policy() -> String {
    policy(
        "    headroom.dev/emergency-grow-critical-threshold: \"95\"\n    headroom.dev/emergency-grow-critical-minimum-free: 1Mi\n",
    )
}

/// Uncordons the node when dropped, so a failed drain test leaves it schedulable.
pub struct Uncordon<'a>(pub &'a Node);

impl Drop for Uncordon<'_> {
    fn drop(&mut self) {
        let _ = self.0.kubectl(&["uncordon", NODE]);
    }
}

/// A data directory made by the real `initdb`, as CloudNativePG lays it out (`<mount>/pgdata`,
/// owned by postgres, 0700), with `n` segments waiting for the archiver.
pub fn pgdata_with_backlog(mount: &Path, n: usize) {
    let initdb = std::fs::read_dir("/usr/lib/postgresql")
        .expect("Debian's postgresql (scripts/test.sh installs it)")
        .flatten()
        .map(|e| e.path().join("bin/initdb"))
        .find(|p| p.is_file())
        .expect("initdb");
    let pg = nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .expect("postgres user");
    // initdb runs as postgres, who cannot traverse the kubelet's 0750 directories: it writes
    // into a scratch directory, copied onto the volume with owners and modes kept.
    let scratch = tempfile::tempdir().expect("scratch dir");
    nix::unistd::chown(scratch.path(), Some(pg.uid), Some(pg.gid)).expect("chown scratch");
    let out = std::process::Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(&initdb)
        .args(["-D"])
        .arg(scratch.path().join("pgdata"))
        .args(["--no-sync", "-A", "trust"])
        .output()
        .expect("initdb");
    assert!(
        out.status.success(),
        "initdb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(scratch.path().join("pgdata"))
        .arg(mount)
        .output()
        .expect("cp");
    assert!(
        out.status.success(),
        "cp: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    nix::unistd::chown(mount, Some(pg.uid), Some(pg.gid)).expect("chown mount");
    let pgdata = mount.join("pgdata");
    let status = pgdata.join("pg_wal/archive_status");
    for i in 1..=n {
        let ready = status.join(format!("0000000100000000000000{i:02X}.ready"));
        std::fs::write(&ready, b"").expect("ready file");
        nix::unistd::chown(&ready, Some(pg.uid), Some(pg.gid)).expect("chown ready");
    }
}

/// A test's hold on the node: shared with the tests that leave it as it is, or alone for one
/// that stops parts of it. Released when dropped.
pub enum Hold {
    Shared(std::sync::RwLockReadGuard<'static, ()>),
    Alone(std::sync::RwLockWriteGuard<'static, ()>),
}

/// The installed node, shared with the other tests that do not disrupt it; `None` when the
/// test skips (outside CI, without the parts).
pub fn shared(test: &str) -> Option<(&'static Installed, Hold)> {
    let env = installed(test)?;
    Some((
        env,
        Hold::Shared(DISRUPT.read().unwrap_or_else(|e| e.into_inner())),
    ))
}

/// The installed node, for this test alone (drains, restarts).
pub fn alone(test: &str) -> Option<(&'static Installed, Hold)> {
    let env = installed(test)?;
    Some((
        env,
        Hold::Alone(DISRUPT.write().unwrap_or_else(|e| e.into_inner())),
    ))
}

/// Namespace `ns` with one 300Mi volume, claim `data`, carrying `claim_meta`.
pub fn data_volume(node: &Node, ns: &str, claim_meta: &str) -> Vol {
    namespace(node, ns);
    volume(
        node,
        ns,
        "data",
        &VolSpec {
            size_mi: 300,
            claim_meta,
            file: None,
            offline: false,
        },
    )
}
