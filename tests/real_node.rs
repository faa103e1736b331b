//! headroom as it ships, on a real node (issue 23): the image `scripts/image.sh` builds, the
//! shipped `daemonset/` and `rbac/` installed with `kubectl apply -k` (through an overlay that
//! changes only the image), on a real kubelet 1.20.2 whose volumes a CSI node plugin mounts
//! (tests/support/realnode). One node serves every test of this binary; tests that disrupt it
//! (drain, restarts) take it exclusively.
//!
//! The kubelet runs with `--root-dir=/var/lib/kubelet`, the DaemonSet's own hostPath, so no path
//! is patched. In 1.20 the kubelet calls NodeExpandVolume at its periodic pod sync (about a
//! minute after the resize), so a grow takes that long to reach the filesystem.

mod support {
    pub mod realnode;
}

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::realnode::resizer::{Resizer, bytes};
use support::realnode::{DRIVER, NODE, Node, Parts, wait_for_cmd};

const MI: u64 = 1 << 20;
const CLASS: &str = "headroom-real";

/// The node with headroom installed and the test's resizer running.
struct Installed {
    node: Arc<Node>,
    _resizer: Resizer,
}

/// Tests that stop parts of the node take this exclusively; the others share it.
static DISRUPT: RwLock<()> = RwLock::new(());

fn installed(test: &str) -> Option<&'static Installed> {
    static ONCE: OnceLock<Installed> = OnceLock::new();
    let parts: Parts = support::realnode::parts(test)?;
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

fn copy_dir(from: &Path, to: &Path) {
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
fn install(node: &Node) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let k = node.dir.join("kustomize");
    copy_dir(&repo.join("daemonset"), &k.join("daemonset"));
    copy_dir(&repo.join("rbac"), &k.join("rbac"));
    std::fs::create_dir_all(k.join("overlay")).expect("overlay dir");
    let (name, tag) = support::realnode::AGENT_IMAGE
        .rsplit_once(':')
        .expect("image tag");
    std::fs::write(
        k.join("overlay/kustomization.yaml"),
        format!(
            "bases:\n  - ../daemonset\nimages:\n  - name: headroom\n    newName: {name}\n    newTag: {tag}\n"
        ),
    )
    .expect("overlay");
    let overlay = k.join("overlay").display().to_string();
    node.kubectl(&["apply", "-k", &overlay])
        .unwrap_or_else(|e| panic!("kubectl apply -k: {e}"));
    node.apply(&format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {CLASS}\nprovisioner: {DRIVER}\nallowVolumeExpansion: true\nvolumeBindingMode: Immediate\n"
    ));
    agent_pod(node, Duration::from_secs(180));
}

/// The agent's pod once Ready: (name, pod IP, container id).
fn agent_pod(node: &Node, within: Duration) -> (String, String, String) {
    wait_for_cmd(within, "the agent's pod Ready", || {
        let pods = node.get_json(&[
            "-n",
            "headroom",
            "pods",
            "-l",
            "app.kubernetes.io/name=headroom",
        ]);
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
    })
}

/// GET on the agent's port from the host (the pod network is reachable from it).
fn agent_get(ip: &str, path: &str) -> Option<(u16, String)> {
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "5", "-w", "\n%{http_code}"])
        .arg(format!("http://{ip}:9737{path}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.parse().ok()?, body.to_owned()))
}

fn namespace(node: &Node, ns: &str) {
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
struct Vol {
    ns: String,
    claim: String,
    pv: String,
    pod_uid: String,
}

impl Vol {
    /// The mount as the kubelet made it on the host.
    fn mount(&self) -> PathBuf {
        Path::new(support::realnode::KUBELET_ROOT)
            .join("pods")
            .join(&self.pod_uid)
            .join("volumes/kubernetes.io~csi")
            .join(&self.pv)
            .join("mount")
    }
}

struct VolSpec<'a> {
    size_mi: u64,
    /// Extra lines under the claim's metadata (annotations:, labels:), indented by 2.
    claim_meta: &'a str,
    /// The backing file, when volumes share one.
    file: Option<&'a str>,
}

/// A static PV of the test driver and a claim the PV binder binds to it.
fn claim(node: &Node, ns: &str, claim: &str, spec: &VolSpec) -> String {
    let pv = format!("{ns}-{claim}");
    let file = spec
        .file
        .map(|f| format!("\n      file: {f}"))
        .unwrap_or_default();
    let size = spec.size_mi * MI;
    node.apply(&format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata:
  name: {pv}
spec:
  capacity: {{storage: {size}}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {CLASS}
  claimRef: {{namespace: {ns}, name: {claim}}}
  csi:
    driver: {DRIVER}
    volumeHandle: {pv}
    fsType: xfs
    volumeAttributes:
      size: "{size}"{file}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {claim}
  namespace: {ns}
{meta}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: {CLASS}
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
fn workload(node: &Node, ns: &str, pod: &str, claims: &[&str], daemonset: bool) -> String {
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
        pause = support::realnode::PAUSE_IMAGE
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
fn volume(node: &Node, ns: &str, name: &str, spec: &VolSpec) -> Vol {
    let pv = claim(node, ns, name, spec);
    let pod_uid = workload(node, ns, &format!("{name}-pod"), &[name], false);
    Vol {
        ns: ns.to_owned(),
        claim: name.to_owned(),
        pv,
        pod_uid,
    }
}

fn statfs(path: &Path) -> (u64, u64) {
    let s = nix::sys::statvfs::statvfs(path).expect("statvfs");
    let f = s.fragment_size();
    (s.blocks() * f, (s.blocks() - s.blocks_free()) * f)
}

/// Allocates real blocks until `percent` of the filesystem is used.
fn fill_to(mount: &Path, percent: u64, name: &str) {
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

fn claim_json(node: &Node, v: &Vol) -> Value {
    node.get_json(&["-n", &v.ns, "pvc", &v.claim])
}

fn request(c: &Value) -> u64 {
    bytes(
        c["spec"]["resources"]["requests"]["storage"]
            .as_str()
            .unwrap_or("0"),
    )
}

fn history(c: &Value) -> Vec<Value> {
    c["metadata"]["annotations"]["headroom.dev/history"]
        .as_str()
        .and_then(|h| serde_json::from_str(h).ok())
        .unwrap_or_default()
}

fn status_field(c: &Value, field: &str) -> Option<String> {
    let s: Value =
        serde_json::from_str(c["metadata"]["annotations"]["headroom.dev/status"].as_str()?).ok()?;
    s.get(field).map(|x| {
        x.as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| x.to_string())
    })
}

/// The opt-in annotations of a grow-able test claim: small steps, a limit far above.
fn policy(extra: &str) -> String {
    format!(
        "  annotations:\n    headroom.dev/enabled: \"true\"\n    headroom.dev/limit: 4Gi\n    headroom.dev/step: 200Mi\n{extra}"
    )
}

/// The agent's report of `v`, once it lists it with a measurement.
fn reported(ip: &str, v: &Vol, within: Duration) -> Value {
    wait_for_cmd(within, "the agent's report of the claim", || {
        let (_, body) = agent_get(ip, "/volumes")?;
        let all: Value = serde_json::from_str(&body).ok()?;
        all["volumes"]
            .as_array()?
            .iter()
            .find(|r| {
                r["namespace"] == v.ns.as_str()
                    && r["pvc"] == v.claim.as_str()
                    && !r["measurement"].is_null()
            })
            .cloned()
    })
}

#[test]
fn agent_pod_is_ready_on_its_probes_as_uid_65532_with_dac_read_search_only() {
    let Some(env) = installed("agent_pod_is_ready_on_its_probes") else {
        return;
    };
    let _shared = DISRUPT.read().unwrap_or_else(|e| e.into_inner());
    let (name, ip, id) = agent_pod(&env.node, Duration::from_secs(60));
    let pod = env.node.get_json(&["-n", "headroom", "pod", &name]);
    assert_eq!(pod["spec"]["nodeName"], NODE);
    // Ready comes from the kubelet running the readiness probe; answer both probes ourselves too.
    assert_eq!(agent_get(&ip, "/ready").map(|r| r.0), Some(200));
    assert_eq!(agent_get(&ip, "/live").map(|r| r.0), Some(200));
    let tasks = env.node.ctr(&["tasks", "ls"]).expect("ctr tasks ls");
    let pid = tasks
        .lines()
        .find(|l| l.starts_with(&id))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no task {id} in {tasks}"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("agent's status");
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}:")))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert_eq!(field("Uid"), "65532 65532 65532 65532", "{status}");
    assert_eq!(field("Gid"), "65532 65532 65532 65532", "{status}");
    // DAC_READ_SEARCH is capability 2: bit 0x4, and nothing else, effective and bounding.
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(field(set), "0000000000000004", "{set}: {status}");
    }
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe");
    assert!(exe.ends_with("usr/local/bin/headroom"), "{exe:?}");
}

#[test]
fn a_claim_mounted_after_the_agent_started_is_measured_through_a_0700_directory() {
    let Some(env) = installed("a_claim_mounted_after_the_agent_started") else {
        return;
    };
    let _shared = DISRUPT.read().unwrap_or_else(|e| e.into_inner());
    let node = &env.node;
    let (_, ip, _) = agent_pod(node, Duration::from_secs(60));
    namespace(node, "rn-late");
    let v = volume(
        node,
        "rn-late",
        "data",
        &VolSpec {
            size_mi: 300,
            claim_meta: &policy(""),
            file: None,
        },
    );
    // As Postgres keeps its data: the volume's root owned by uid 26, mode 0700, data inside.
    let m = v.mount();
    std::fs::create_dir(m.join("pgdata")).expect("pgdata");
    fill_to(&m, 30, "pgdata/base");
    for p in [m.join("pgdata/base"), m.join("pgdata"), m.clone()] {
        nix::unistd::chown(&p, Some(26.into()), Some(26.into())).expect("chown");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
    }
    let (_, used) = statfs(&m);
    // Scans before the fill saw less; a later one must see what statfs on the host sees.
    let r = wait_for_cmd(
        Duration::from_secs(60),
        "the agent measuring the filled volume",
        || {
            let r = reported(&ip, &v, Duration::from_secs(60));
            let seen = r["measurement"]["used_bytes"].as_u64().unwrap_or(0);
            (seen.abs_diff(used) < 8 * MI).then_some(r)
        },
    );
    assert_eq!(r["measured_by"], "statfs", "{r}");
}

#[test]
fn fill_patch_resize_node_expand_grows_the_filesystem_and_the_history_lands() {
    let Some(env) = installed("fill_patch_resize_node_expand") else {
        return;
    };
    let _shared = DISRUPT.read().unwrap_or_else(|e| e.into_inner());
    let node = &env.node;
    namespace(node, "rn-fill");
    let v = volume(
        node,
        "rn-fill",
        "data",
        &VolSpec {
            size_mi: 300,
            claim_meta: &policy(""),
            file: None,
        },
    );
    let m = v.mount();
    let (size0, _) = statfs(&m);
    let req0 = request(&claim_json(node, &v));
    // As a volume fills in steady state: a scan has seen it within 5 points of its threshold
    // (78 %), so the fast measurement loop watches it; the clock starts at the crossing write
    // (78 % -> 85 %), as in benches/reaction.rs.
    let (_, ip, _) = agent_pod(node, Duration::from_secs(60));
    fill_to(&m, 78, "fill-near");
    wait_for_cmd(
        Duration::from_secs(60),
        "a scan of the nearly full claim",
        || {
            let r = reported(&ip, &v, Duration::from_secs(60));
            let used = r["measurement"]["used_bytes"].as_u64()?;
            let avail = r["measurement"]["available_bytes"].as_u64()?;
            (used * 100 / (used + avail) >= 75).then_some(())
        },
    );
    let filled = Instant::now();
    fill_to(&m, 85, "fill");
    let patched = wait_for_cmd(Duration::from_secs(60), "the agent's PATCH", || {
        (request(&claim_json(node, &v)) > req0).then(Instant::now)
    });
    // The kubelet's periodic pod sync notices FileSystemResizePending (about a minute in 1.20).
    let grown = wait_for_cmd(
        Duration::from_secs(240),
        "NodeExpandVolume grows the filesystem",
        || (statfs(&m).0 > size0).then(Instant::now),
    );
    let c = claim_json(node, &v);
    let want = request(&c);
    // The filesystem the pod sees: its mount namespace's /data.
    let pause_pid = node
        .ctr(&["tasks", "ls"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u32>().ok())
        .find(|pid| {
            let dev = |p: &Path| {
                std::fs::metadata(p)
                    .map(|m| std::os::unix::fs::MetadataExt::dev(&m))
                    .ok()
            };
            dev(Path::new(&format!("/proc/{pid}/root/data"))) == dev(&m)
        })
        .expect("the workload's pause process");
    let in_pod = statfs(Path::new(&format!("/proc/{pause_pid}/root/data"))).0;
    assert!(
        in_pod > size0,
        "the pod sees {in_pod} bytes, before {size0}"
    );
    let entry = wait_for_cmd(Duration::from_secs(60), "the history entry landed", || {
        let h = history(&claim_json(node, &v));
        let last = h.last()?.clone();
        (!last["landed"].is_null()).then_some((h.len(), last))
    });
    assert_eq!(entry.0, 1, "one fill, one grow: {:?}", entry.1);
    assert_eq!(entry.1["result"], "Succeeded", "{}", entry.1);
    let c = claim_json(node, &v);
    assert_eq!(
        bytes(c["status"]["capacity"]["storage"].as_str().unwrap_or("0")),
        want,
        "the kubelet set status.capacity: {c}"
    );
    // The learned lead time is the real one: from the PATCH to the grown filesystem, within a scan.
    let at: jiff::Timestamp = entry.1["at"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("at");
    let landed: jiff::Timestamp = entry.1["landed"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("landed");
    let learned = landed.duration_since(at).as_secs_f64();
    let real = grown.duration_since(patched).as_secs_f64();
    assert!(
        (learned - real).abs() < 15.0,
        "learned lead time {learned} s, real {real} s"
    );
    eprintln!(
        "real-node latency: fill -> PATCH {:.1} s, fill -> filesystem grown {:.1} s, learned lead time {learned:.1} s",
        patched.duration_since(filled).as_secs_f64(),
        grown.duration_since(filled).as_secs_f64()
    );
}

/// The agent's own service-account token, as the kubelet sees it.
fn token_of(node: &Node, ns: &str, sa: &str) -> String {
    let secret = wait_for_cmd(
        Duration::from_secs(30),
        "the service account's token",
        || {
            let s = node.get_json(&["-n", ns, "serviceaccount", sa]);
            s["secrets"][0]["name"].as_str().map(str::to_owned)
        },
    );
    let data = node
        .kubectl(&[
            "-n",
            ns,
            "get",
            "secret",
            &secret,
            "-o",
            "jsonpath={.data.token}",
        ])
        .expect("token secret");
    let out = std::process::Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(data.as_bytes())?;
            c.wait_with_output()
        })
        .expect("base64");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubelet_get(node: &Node, token: &str, path: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "10",
            "-A",
            "headroom-realnode-test",
            "-w",
            "\n%{http_code}",
            "--cacert",
        ])
        .arg(node.pki().join("ca.crt"))
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!(
            "https://{}:10250{path}",
            support::realnode::NODE_IP
        ))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.parse().unwrap_or(0), body.to_owned())
}

#[test]
fn the_agents_token_reads_kubelet_stats_and_a_token_without_nodes_stats_is_refused() {
    let Some(env) = installed("the_agents_token_reads_kubelet_stats") else {
        return;
    };
    let _shared = DISRUPT.read().unwrap_or_else(|e| e.into_inner());
    let node = &env.node;
    let (agent, _, _) = agent_pod(node, Duration::from_secs(60));
    let token = token_of(node, "headroom", "headroom");
    // The kubelet's TLS certificate verifies against the cluster CA (the pods' ca.crt).
    let summary = wait_for_cmd(
        Duration::from_secs(120),
        "the agent's container in /stats/summary",
        || {
            let (code, body) = kubelet_get(node, &token, "/stats/summary");
            assert_eq!(code, 200, "the agent's token on /stats/summary: {body}");
            let v: Value = serde_json::from_str(&body).ok()?;
            let pod = v["pods"]
                .as_array()?
                .iter()
                .find(|p| p["podRef"]["name"] == agent.as_str())?
                .clone();
            let c = pod["containers"]
                .as_array()?
                .iter()
                .find(|c| c["name"] == "agent")?
                .clone();
            (!c["memory"]["workingSetBytes"].is_null() && !c["cpu"]["usageNanoCores"].is_null())
                .then_some(c)
        },
    );
    eprintln!(
        "agent container as the kubelet reports it: memory workingSet {} bytes, rss {} bytes, cpu {} nanocores",
        summary["memory"]["workingSetBytes"],
        summary["memory"]["rssBytes"],
        summary["cpu"]["usageNanoCores"]
    );
    namespace(node, "rn-nostats");
    node.kubectl(&["-n", "rn-nostats", "create", "serviceaccount", "nostats"])
        .expect("create sa");
    let other = token_of(node, "rn-nostats", "nostats");
    let (code, body) = kubelet_get(node, &other, "/stats/summary");
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("resource=nodes, subresource=stats"), "{body}");
    // The agent's grant is nodes/stats, not nodes/proxy: the kubelet's other endpoints refuse it.
    let (code, body) = kubelet_get(node, &token, "/pods");
    assert_eq!(code, 403, "the agent reached /pods: {body}");
}

#[test]
fn two_claims_on_one_device_are_refused() {
    let Some(env) = installed("two_claims_on_one_device_are_refused") else {
        return;
    };
    let _shared = DISRUPT.read().unwrap_or_else(|e| e.into_inner());
    let node = &env.node;
    namespace(node, "rn-shared");
    let spec = VolSpec {
        size_mi: 300,
        claim_meta: &policy(""),
        file: Some("rn-shared.img"),
    };
    let a = volume(node, "rn-shared", "a", &spec);
    let b = volume(node, "rn-shared", "b", &spec);
    assert_eq!(
        std::fs::metadata(a.mount())
            .map(|m| std::os::unix::fs::MetadataExt::dev(&m))
            .ok(),
        std::fs::metadata(b.mount())
            .map(|m| std::os::unix::fs::MetadataExt::dev(&m))
            .ok(),
        "the plugin mounted one device twice"
    );
    fill_to(&a.mount(), 90, "fill");
    for v in [&a, &b] {
        wait_for_cmd(
            Duration::from_secs(60),
            "blocked as shared_filesystem",
            || {
                (status_field(&claim_json(node, v), "blockedReason").as_deref()
                    == Some("shared_filesystem"))
                .then_some(())
            },
        );
        let c = claim_json(node, v);
        assert_eq!(request(&c), 300 * MI, "a shared filesystem grew: {c}");
        assert!(history(&c).is_empty(), "{c}");
    }
}

fn vol_of(ns: &str, claim: &str, pod_uid: &str) -> Vol {
    Vol {
        ns: ns.to_owned(),
        claim: claim.to_owned(),
        pv: format!("{ns}-{claim}"),
        pod_uid: pod_uid.to_owned(),
    }
}

/// Emergencies only past 95 % used (not the default 1Gi free, which every test volume is under).
fn drain_policy() -> String {
    policy(
        "    headroom.dev/emergency-grow-critical-threshold: \"95\"\n    headroom.dev/emergency-grow-critical-minimum-free: 1Mi\n",
    )
}

#[test]
fn a_drain_pauses_planned_growth_emergencies_still_act_and_uncordon_resumes() {
    let Some(env) = installed("a_drain_pauses_planned_growth") else {
        return;
    };
    let _alone = DISRUPT.write().unwrap_or_else(|e| e.into_inner());
    let node = &env.node;
    namespace(node, "rn-drain");
    let spec = VolSpec {
        size_mi: 300,
        claim_meta: &drain_policy(),
        file: None,
    };
    claim(node, "rn-drain", "planned", &spec);
    claim(node, "rn-drain", "urgent", &spec);
    // A DaemonSet's pod, as a Postgres operator's would not be: drain --ignore-daemonsets keeps it
    // (and its volumes) on the node, so the agent still has something to decide about.
    let uid = workload(node, "rn-drain", "db", &["planned", "urgent"], true);
    let (planned, urgent) = (
        vol_of("rn-drain", "planned", &uid),
        vol_of("rn-drain", "urgent", &uid),
    );
    let out = node.kubectl(&[
        "drain",
        NODE,
        "--ignore-daemonsets",
        "--force",
        "--delete-emptydir-data",
        "--timeout=120s",
    ]);
    let uncordon = Uncordon(node);
    out.unwrap_or_else(|e| panic!("kubectl drain: {e}"));
    let (agent, ..) = agent_pod(node, Duration::from_secs(30));
    fill_to(&planned.mount(), 85, "fill");
    fill_to(&urgent.mount(), 97, "fill");
    wait_for_cmd(
        Duration::from_secs(60),
        "planned growth blocked by the drain",
        || {
            (status_field(&claim_json(node, &planned), "blockedReason").as_deref()
                == Some("node_draining"))
            .then_some(())
        },
    );
    wait_for_cmd(
        Duration::from_secs(60),
        "the emergency grown while cordoned",
        || (request(&claim_json(node, &urgent)) > 300 * MI).then_some(()),
    );
    assert_eq!(
        request(&claim_json(node, &planned)),
        300 * MI,
        "planned growth while cordoned"
    );
    let still = agent_pod(node, Duration::from_secs(5)).0;
    assert_eq!(still, agent, "the drain replaced the agent's pod");
    drop(uncordon);
    wait_for_cmd(
        Duration::from_secs(60),
        "planned growth after uncordon",
        || (request(&claim_json(node, &planned)) > 300 * MI).then_some(()),
    );
    for v in [&planned, &urgent] {
        assert_eq!(history(&claim_json(node, v)).len(), 1, "one grow each");
    }
}

/// Uncordons the node when dropped, so a failed drain test leaves it schedulable.
struct Uncordon<'a>(&'a Node);

impl Drop for Uncordon<'_> {
    fn drop(&mut self) {
        let _ = self.0.kubectl(&["uncordon", NODE]);
    }
}

/// The number of PATCHes that changed the claim's request, from its history (one per grow).
fn wait_landed(node: &Node, v: &Vol, entries: usize, within: Duration) -> Vec<Value> {
    wait_for_cmd(within, "the history entry landed", || {
        let h = history(&claim_json(node, v));
        (h.len() == entries && h.iter().all(|e| !e["landed"].is_null())).then_some(h)
    })
}

#[test]
fn restarts_during_fills_give_one_grow_per_fill_and_keep_the_history() {
    let Some(env) = installed("restarts_during_fills") else {
        return;
    };
    let _alone = DISRUPT.write().unwrap_or_else(|e| e.into_inner());
    let node = &env.node;
    namespace(node, "rn-restart");
    let v = volume(
        node,
        "rn-restart",
        "data",
        &VolSpec {
            size_mi: 300,
            claim_meta: &policy(""),
            file: None,
        },
    );
    let m = v.mount();

    // Fill 1: the agent's container is killed as the fill happens; the kubelet restarts it.
    let (_, _, id) = agent_pod(node, Duration::from_secs(30));
    fill_to(&m, 85, "fill-1");
    node.ctr(&["tasks", "kill", "-s", "SIGKILL", &id])
        .expect("ctr tasks kill");
    wait_for_cmd(Duration::from_secs(90), "the grow after the kill", || {
        (request(&claim_json(node, &v)) > 300 * MI).then_some(())
    });
    // While that resize waits for the kubelet: the kubelet and then containerd restart.
    node.kill("kubelet");
    node.start_kubelet();
    node.wait_node_ready(Duration::from_secs(120));
    node.restart_containerd();
    let h = wait_landed(node, &v, 1, Duration::from_secs(240));
    assert_eq!(h[0]["result"], "Succeeded", "{h:?}");
    let ready = agent_pod(node, Duration::from_secs(120));
    assert_eq!(agent_get(&ready.1, "/ready").map(|r| r.0), Some(200));

    // Fill 2: a rolling update of the DaemonSet (a new image name) as the fill happens.
    let grown = request(&claim_json(node, &v));
    node.tag_image("headroom.test/headroom:rolled");
    fill_to(&m, 85, "fill-2");
    node.kubectl(&[
        "-n",
        "headroom",
        "set",
        "image",
        "daemonset/headroom",
        "agent=headroom.test/headroom:rolled",
    ])
    .expect("kubectl set image");
    wait_for_cmd(Duration::from_secs(180), "the rolled pod Ready", || {
        let (name, ..) = agent_pod(node, Duration::from_secs(60));
        let p = node.get_json(&["-n", "headroom", "pod", &name]);
        (p["spec"]["containers"][0]["image"] == "headroom.test/headroom:rolled").then_some(())
    });
    let h = wait_landed(node, &v, 2, Duration::from_secs(240));
    assert!(
        request(&claim_json(node, &v)) > grown,
        "fill 2 did not grow"
    );
    assert_eq!(
        h.iter().filter(|e| e["result"] == "Succeeded").count(),
        2,
        "{h:?}"
    );
    // Nothing more: a third grow would need a third fill.
    std::thread::sleep(Duration::from_secs(25));
    assert_eq!(history(&claim_json(node, &v)).len(), 2);
}

/// A data directory made by the real `initdb`, as CloudNativePG lays it out (`<mount>/pgdata`,
/// owned by postgres, 0700), with `n` segments waiting for the archiver.
fn pgdata_with_backlog(mount: &Path, n: usize) {
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

#[test]
fn a_cloudnativepg_data_volume_with_a_ready_backlog_does_not_grow() {
    let Some(env) = installed("a_cloudnativepg_data_volume_with_a_ready_backlog") else {
        return;
    };
    let _shared = DISRUPT.read().unwrap_or_else(|e| e.into_inner());
    let node = &env.node;
    namespace(node, "rn-cnpg");
    let meta = policy(
        "    headroom.dev/wal-safety-acknowledge-wal-risk: \"true\"\n    headroom.dev/wal-safety-max-pending-wal-files: \"3\"\n  labels:\n    cnpg.io/cluster: pg\n    cnpg.io/instanceName: pg-1\n    cnpg.io/pvcRole: PG_DATA\n",
    );
    let pv = claim(
        node,
        "rn-cnpg",
        "pg-1",
        &VolSpec {
            size_mi: 300,
            claim_meta: &meta,
            file: None,
        },
    );
    let uid = workload(node, "rn-cnpg", "pg-1", &["pg-1"], false);
    let v = Vol {
        ns: "rn-cnpg".into(),
        claim: "pg-1".into(),
        pv,
        pod_uid: uid,
    };
    pgdata_with_backlog(&v.mount(), 5);
    fill_to(&v.mount(), 90, "pgdata/base/fill");
    wait_for_cmd(
        Duration::from_secs(60),
        "blocked as wal_pending_files",
        || {
            (status_field(&claim_json(node, &v), "blockedReason").as_deref()
                == Some("wal_pending_files"))
            .then_some(())
        },
    );
    let (_, ip, _) = agent_pod(node, Duration::from_secs(30));
    let r = reported(&ip, &v, Duration::from_secs(30));
    assert_eq!(r["wal"]["pending_files"], 5, "{}", r["wal"]);
    std::thread::sleep(Duration::from_secs(15));
    let c = claim_json(node, &v);
    assert_eq!(request(&c), 300 * MI, "grew over a WAL backlog: {c}");
    assert!(history(&c).is_empty(), "{c}");
}

#[test]
fn quantities_read_as_the_api_server_writes_them() {
    assert_eq!(bytes("300Mi"), 300 * MI);
    assert_eq!(bytes("524288k"), 524_288_000);
    assert_eq!(bytes("314572800"), 314_572_800);
    assert_eq!(bytes("2G"), 2_000_000_000);
}
