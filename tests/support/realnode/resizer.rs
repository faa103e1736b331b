//! The controller half of a CSI resize, as external-resizer does it for a driver whose
//! ControllerExpandVolume grows the backing storage: for each bound claim of the test driver
//! whose request exceeds its PV's capacity, after `delay`, grow the backing file, set the PV's
//! `spec.capacity`, then the claim's `allocatedResources`, `allocatedResourceStatuses`
//! (`NodeResizePending`) and `FileSystemResizePending` condition. The kubelet then calls the
//! plugin's NodeExpandVolume and sets the claim's `status.capacity`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{DRIVER, Node};

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
    // What external-resizer leaves on a claim whose driver grows the filesystem on the node:
    // since KEP-1790 (GA in 1.34) the kubelet expands only a claim whose
    // allocatedResourceStatuses say NodeResizePending (or InProgress), and the condition alone
    // is no longer enough.
    let status = serde_json::json!({"status": {
        "allocatedResources": {"storage": want.to_string()},
        "allocatedResourceStatuses": {"storage": "NodeResizePending"},
        "conditions": [{
            "type": "FileSystemResizePending", "status": "True",
            "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "message": "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
        }]
    }});
    status_patch(node, ns, claim, &status)
}

/// A merge patch of a claim's status subresource.
pub fn status_patch(node: &Node, ns: &str, claim: &str, body: &serde_json::Value) -> bool {
    let body = body.to_string();
    node.kubectl(&[
        "patch",
        "pvc",
        claim,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &body,
    ])
    .is_ok()
}
