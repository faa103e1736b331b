//! Reading back what the real node's parts say: the claim as the API server holds it, the
//! agent's own endpoints and reports, and the kubelet's stats as a token sees them.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::resizer::bytes;
use super::scenario::Vol;
use super::{Node, wait_for_cmd};

/// GET on the agent's port from the host (the pod network is reachable from it).
pub fn agent_get(ip: &str, path: &str) -> Option<(u16, String)> {
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "5", "-w", "\n%{http_code}"])
        .arg(format!("http://{ip}:9737{path}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.parse().ok()?, body.to_owned()))
}

pub fn claim_json(node: &Node, v: &Vol) -> Value {
    node.get_json(&["-n", &v.ns, "pvc", &v.claim])
}

pub fn request(c: &Value) -> u64 {
    bytes(
        c["spec"]["resources"]["requests"]["storage"]
            .as_str()
            .unwrap_or("0"),
    )
}

pub fn history(c: &Value) -> Vec<Value> {
    c["metadata"]["annotations"]["headroom.dev/history"]
        .as_str()
        .and_then(|h| serde_json::from_str(h).ok())
        .unwrap_or_default()
}

pub fn status_field(c: &Value, field: &str) -> Option<String> {
    let s: Value =
        serde_json::from_str(c["metadata"]["annotations"]["headroom.dev/status"].as_str()?).ok()?;
    s.get(field).map(|x| {
        x.as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| x.to_string())
    })
}

/// The agent's report of `v`, once it lists it with a measurement.
pub fn reported(ip: &str, v: &Vol, within: Duration) -> Value {
    wait_for_cmd(within, "the agent's report of the claim", || {
        reported_once(ip, v)
    })
}

/// The agent's report of `v` now, if it lists it with a measurement.
pub fn reported_once(ip: &str, v: &Vol) -> Option<Value> {
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
}

/// A token of service account `sa` (the agent's own, as the kubelet sees it), from the
/// TokenRequest API: since 1.24 no Secret holds one.
pub fn token_of(node: &Node, ns: &str, sa: &str) -> String {
    let token = wait_for_cmd(
        Duration::from_secs(30),
        "the service account's token",
        || node.kubectl(&["-n", ns, "create", "token", sa]).ok(),
    );
    token.trim().to_owned()
}

pub fn kubelet_get(node: &Node, token: &str, path: &str) -> (u16, String) {
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
        .arg(format!("https://{}:10250{path}", super::NODE_IP))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.parse().unwrap_or(0), body.to_owned())
}

/// The number of PATCHes that changed the claim's request, from its history (one per grow).
pub fn wait_landed(node: &Node, v: &Vol, entries: usize, within: Duration) -> Vec<Value> {
    wait_for_cmd(within, "the history entry landed", || {
        let h = history(&claim_json(node, v));
        (h.len() == entries && h.iter().all(|e| !e["landed"].is_null())).then_some(h)
    })
}

/// With `HEADROOM_FUZZ_CAPTURE=<dir>` set, writes what the real node hands the agent while `v`'s
/// pod runs, for `fuzz/seeds.py` to make the `kubelet_root` and `kubelet_stats` seeds of
/// (fuzz/README.md): the host's `mountinfo`, the kubelet's `vol_data.json` beside `v`, and
/// `summary.json`, the kubelet's `/stats/summary` to the agent's token once it lists `v`'s claim.
/// Unset, it does nothing.
pub fn capture_for_fuzzing(node: &Node, v: &Vol) {
    let Some(dir) = std::env::var_os("HEADROOM_FUZZ_CAPTURE").map(PathBuf::from) else {
        return;
    };
    let token = token_of(node, "headroom", "headroom");
    let summary = wait_for_cmd(
        Duration::from_secs(120),
        "the claim's volume in /stats/summary",
        || {
            let (code, body) = kubelet_get(node, &token, "/stats/summary");
            let s: Value = serde_json::from_str(&body).ok()?;
            let listed = s["pods"].as_array()?.iter().any(|p| {
                p["volume"].as_array().into_iter().flatten().any(|vol| {
                    vol["pvcRef"]["name"] == v.claim.as_str()
                        && vol["pvcRef"]["namespace"] == v.ns.as_str()
                        && !vol["usedBytes"].is_null()
                })
            });
            (code == 200 && listed).then_some(body)
        },
    );
    std::fs::create_dir_all(&dir).expect("capture dir");
    for (name, bytes) in [
        ("summary.json", summary.into_bytes()),
        (
            "mountinfo",
            std::fs::read("/proc/self/mountinfo").expect("mountinfo"),
        ),
        (
            "vol_data.json",
            std::fs::read(v.mount().with_file_name("vol_data.json")).expect("vol_data.json"),
        ),
    ] {
        std::fs::write(dir.join(name), bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    eprintln!(
        "captured the real node's inputs for fuzzing into {}",
        dir.display()
    );
}
