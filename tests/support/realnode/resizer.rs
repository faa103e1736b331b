//! The controller half of a CSI resize, as external-resizer does it for a driver whose
//! ControllerExpandVolume grows the backing storage: for each bound claim of the test driver
//! whose request exceeds its PV's capacity, after `delay`, grow the backing file, set the PV's
//! `spec.capacity` and the claim's `FileSystemResizePending` condition. The kubelet then calls
//! the plugin's NodeExpandVolume and sets the claim's `status.capacity`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{API_PORT, DRIVER, NODE_IP, Node};

/// When the resizer saw a request and when it had done its part, per PV.
#[derive(Clone, Debug, Default)]
pub struct Done {
    pub seen: Option<Instant>,
    pub expanded: Vec<(u64, Instant)>,
}

pub struct Resizer {
    stop: Arc<AtomicBool>,
    pub log: Arc<Mutex<BTreeMap<String, Done>>>,
}

impl Drop for Resizer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A quantity in bytes; the API server writes a byte count as e.g. `524288k`.
pub fn bytes(q: &str) -> u64 {
    const SUFFIXES: [(&str, u64); 8] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    let (num, mult) = SUFFIXES
        .iter()
        .find_map(|(s, m)| q.strip_suffix(s).map(|n| (n, *m)))
        .unwrap_or((q, 1));
    num.parse::<u64>().map(|n| n * mult).unwrap_or(0)
}

impl Resizer {
    pub fn start(node: Arc<Node>, delay: Duration) -> Resizer {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(BTreeMap::new()));
        let (s, l) = (stop.clone(), log.clone());
        std::thread::spawn(move || {
            let mut pending: BTreeMap<String, Instant> = BTreeMap::new();
            while !s.load(Ordering::Relaxed) {
                pass(&node, delay, &mut pending, &l);
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        Resizer { stop, log }
    }
}

fn pass(
    node: &Node,
    delay: Duration,
    pending: &mut BTreeMap<String, Instant>,
    log: &Mutex<BTreeMap<String, Done>>,
) {
    let Ok(text) = node.kubectl(&["get", "pv", "-o", "json"]) else {
        return;
    };
    let Ok(pvs) = serde_json::from_str::<serde_json::Value>(&text) else {
        return;
    };
    let claims: serde_json::Value = node
        .kubectl(&["get", "pvc", "-A", "-o", "json"])
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    for pv in pvs["items"].as_array().into_iter().flatten() {
        if pv["spec"]["csi"]["driver"] != DRIVER {
            continue;
        }
        let name = pv["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let cap = bytes(pv["spec"]["capacity"]["storage"].as_str().unwrap_or("0"));
        let (ns, claim) = (
            pv["spec"]["claimRef"]["namespace"]
                .as_str()
                .unwrap_or_default(),
            pv["spec"]["claimRef"]["name"].as_str().unwrap_or_default(),
        );
        let Some(pvc) = claims["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["metadata"]["namespace"] == ns && c["metadata"]["name"] == claim)
        else {
            continue;
        };
        let want = bytes(
            pvc["spec"]["resources"]["requests"]["storage"]
                .as_str()
                .unwrap_or("0"),
        );
        if want <= cap {
            pending.remove(&name);
            continue;
        }
        let first = *pending.entry(name.clone()).or_insert_with(Instant::now);
        log.lock()
            .expect("log")
            .entry(name.clone())
            .or_default()
            .seen
            .get_or_insert(first);
        if first.elapsed() < delay {
            continue;
        }
        let file = pv["spec"]["csi"]["volumeAttributes"]["file"]
            .as_str()
            .or(pv["spec"]["csi"]["volumeHandle"].as_str())
            .unwrap_or_default();
        if expand(node, &name, file, ns, claim, want) {
            pending.remove(&name);
            log.lock()
                .expect("log")
                .entry(name)
                .or_default()
                .expanded
                .push((want, Instant::now()));
        }
    }
}

fn expand(node: &Node, pv: &str, file: &str, ns: &str, claim: &str, want: u64) -> bool {
    let path = node.csi_state().join(file);
    let grown = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| {
            let len = f.metadata()?.len();
            if len < want { f.set_len(want) } else { Ok(()) }
        });
    if let Err(e) = grown {
        eprintln!("resizer: grow {}: {e}", path.display());
        return false;
    }
    let patch = format!(r#"{{"spec":{{"capacity":{{"storage":"{want}"}}}}}}"#);
    if node
        .kubectl(&["patch", "pv", pv, "--type=merge", "-p", &patch])
        .is_err()
    {
        return false;
    }
    let cond = serde_json::json!({"status": {"conditions": [{
        "type": "FileSystemResizePending", "status": "True",
        "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "message": "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
    }]}});
    status_patch(
        node,
        &format!("/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}/status"),
        &cond,
    )
}

/// A merge patch of a status subresource (kubectl 1.20 has no `--subresource`). Not as "curl":
/// kube-apiserver pretty-prints JSON for curl's user agent, and 1.20.2 built with Debian's Go
/// 1.19 crashes doing so ("fatal error: fault" in reflect2's map iteration, the json-iterator
/// sortKeys encoder: reflect2 before 1.0.2 does not work with Go 1.18's maps).
pub fn status_patch(node: &Node, path: &str, body: &serde_json::Value) -> bool {
    let out = std::process::Command::new("curl")
        .args([
            "-sf",
            "-o",
            "/dev/null",
            "-A",
            "headroom-realnode-test",
            "--cacert",
        ])
        .arg(node.pki().join("ca.crt"))
        .args([
            "-H",
            "Authorization: Bearer admin-token",
            "-H",
            "Content-Type: application/merge-patch+json",
            "-X",
            "PATCH",
            "--data",
        ])
        .arg(body.to_string())
        .arg(format!("https://{NODE_IP}:{API_PORT}{path}"))
        .status();
    out.is_ok_and(|s| s.success())
}
