//! What a failed real-node test prints, in a few dozen lines: CI shows only the head of a failed
//! run's output, so a failure must say at once whether the host, the node, the agent or the
//! claim went wrong. The parts' full logs go to `<tmp>/headroom-realnode-logs` as before.
//!
//! It runs while the test unwinds, where a second panic aborts the whole binary: nothing here
//! panics (a failed read prints as such), and every call is bounded (kubectl 10 s, curl 5 s), so
//! a broken node cannot make a failure take minutes more.

use std::path::Path;

use serde_json::Value;

use super::host::disk_mib;
use super::observe::agent_get;
use super::scenario::ready_agent_in;
use super::{KUBELET_ROOT, NODE, Node};

/// Prints [`summary`] of `namespaces` when dropped during a panic (a failed assertion or wait).
pub struct Witness<'a> {
    node: &'a Node,
    namespaces: Vec<String>,
}

pub fn witness<'a>(node: &'a Node, namespaces: &[&str]) -> Witness<'a> {
    Witness {
        node,
        namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
    }
}

impl Drop for Witness<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let ns: Vec<&str> = self.namespaces.iter().map(String::as_str).collect();
            eprintln!("{}", summary(self.node, &ns));
        }
    }
}

/// The host's load, the node's conditions, the agent's pods and log tail, and for every claim
/// of `namespaces` its size, status and the agent's report in one line each.
pub fn summary(node: &Node, namespaces: &[&str]) -> String {
    let mut out = vec![format!(
        "=== witness {:.0} s into the node: {} ===",
        node.started.elapsed().as_secs_f64(),
        namespaces.join(", ")
    )];
    out.push(host());
    out.push(conditions(node));
    // One read of the agent's pods serves their lines, the /volumes lookup and the log tail.
    let agents = get(node, &["-n", "headroom", "pods"]);
    out.extend(pod_lines("headroom", &agents));
    let reports = agent_reports(&agents);
    for ns in namespaces {
        out.extend(pod_lines(ns, &get(node, &["-n", ns, "pods"])));
        out.extend(claims(node, ns, &reports));
    }
    out.push("agent log, last 20 lines:".into());
    out.push(agent_log(node, &agents));
    out.push("=== end of witness ===".into());
    out.join("\n")
}

fn host() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let disk = |p: &Path| match disk_mib(p) {
        Some((free, total)) => format!("{} has {free} MiB free of {total}", p.display()),
        None => format!("{}: unread", p.display()),
    };
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemAvailable"))
        .unwrap_or("")
        .split_whitespace()
        .nth(1)
        .and_then(|k| k.parse::<u64>().ok())
        .unwrap_or(0)
        >> 10;
    format!(
        "host: load {}; {}; {}; {mem} MiB memory available",
        load.trim(),
        disk(Path::new(KUBELET_ROOT)),
        disk(&std::env::temp_dir()),
    )
}

fn conditions(node: &Node) -> String {
    let n = get(node, &["node", NODE]);
    let conds: Vec<String> = n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("{}={}", str_of(&c["type"]), str_of(&c["status"])))
        .collect();
    format!("node: {}{}", conds.join(" "), failed(&n))
}

fn pod_line(p: &Value) -> String {
    let s = &p["status"]["containerStatuses"][0];
    let last = &s["lastState"]["terminated"];
    let last = if last.is_null() {
        String::new()
    } else {
        format!(
            " last exit {} ({}) at {}",
            last["exitCode"],
            str_of(&last["reason"]),
            str_of(&last["finishedAt"])
        )
    };
    format!(
        "  pod {}: {} ready={} restarts={}{}{} ip={}",
        str_of(&p["metadata"]["name"]),
        str_of(&p["status"]["phase"]),
        s["ready"],
        s["restartCount"],
        last,
        if p["metadata"]["deletionTimestamp"].is_null() {
            ""
        } else {
            " (being deleted)"
        },
        str_of(&p["status"]["podIP"])
    )
}

/// Namespace `ns`'s heading (or why its pods were not read), then a line per pod.
fn pod_lines(ns: &str, pods: &Value) -> Vec<String> {
    let mut out = vec![format!("{ns}:{}", failed(pods))];
    out.extend(pods["items"].as_array().into_iter().flatten().map(pod_line));
    out
}

/// What [`get`] could not read, as the end of a heading line.
fn failed(v: &Value) -> String {
    v["error"]
        .as_str()
        .map(|e| format!(" {}", e.trim()))
        .unwrap_or_default()
}

/// `/volumes` of the Ready agent, or why there is none.
fn agent_reports(agents: &Value) -> Result<Vec<Value>, String> {
    let (_, ip, _) = ready_agent_in(agents).ok_or("no Ready agent pod")?;
    let (code, body) = agent_get(&ip, "/volumes").ok_or(format!("{ip}:9737 did not answer"))?;
    let all: Value = serde_json::from_str(&body).map_err(|e| format!("/volumes {code}: {e}"))?;
    Ok(all["volumes"].as_array().cloned().unwrap_or_default())
}

fn claims(node: &Node, ns: &str, reports: &Result<Vec<Value>, String>) -> Vec<String> {
    let claims = get(node, &["-n", ns, "pvc"]);
    let unread = failed(&claims);
    let unread = (!unread.is_empty()).then(|| format!("  claims:{unread}"));
    let each = claims["items"].as_array().into_iter().flatten();
    unread
        .into_iter()
        .chain(each.map(|c| claim_line(c, ns, reports)))
        .collect()
}

/// The claim's size and headroom status, and the agent's report of it on the next line.
fn claim_line(c: &Value, ns: &str, reports: &Result<Vec<Value>, String>) -> String {
    let name = str_of(&c["metadata"]["name"]);
    let status = c["metadata"]["annotations"]["headroom.dev/status"]
        .as_str()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .map(|s| {
            format!(
                "state={} blocked={}",
                str_of(&s["state"]),
                str_of(&s["blockedReason"])
            )
        })
        .unwrap_or_else(|| "no status".into());
    let report = match reports {
        Err(e) => format!("report: {e}"),
        Ok(all) => all
            .iter()
            .find(|r| r["namespace"] == ns && r["pvc"] == name)
            .map(report_line)
            .unwrap_or_else(|| "not in /volumes".into()),
    };
    format!(
        "  claim {name}: request {} capacity {}; {status}\n    {report}",
        str_of(&c["spec"]["resources"]["requests"]["storage"]),
        str_of(&c["status"]["capacity"]["storage"]),
    )
}

/// The report's measurement, verdict and WAL reading in one line.
pub fn report_line(r: &Value) -> String {
    let m = &r["measurement"];
    let measured = if m.is_null() {
        format!("not measured ({})", str_of(&r["not_measured"]))
    } else {
        format!(
            "used {} MiB of {} MiB at {}",
            m["used_bytes"].as_u64().unwrap_or(0) >> 20,
            m["capacity_bytes"].as_u64().unwrap_or(0) >> 20,
            str_of(&r["measured_at"])
        )
    };
    let d = &r["decision"];
    let w = &r["wal"];
    let wal = if w.is_null() {
        String::new()
    } else {
        format!(
            "; wal role={} pending={} archive_mode={} sources={} slots={}",
            str_of(&w["role"]),
            w["pending_files"],
            str_of(&w["archive_mode"]),
            w["sources"],
            w["slots"]
        )
    };
    format!(
        "{measured}; {} {} {}{wal}",
        str_of(&d["verdict"]),
        str_of(&d["reason"]),
        d["notes"]
    )
}

/// The newest agent pod's log tail, and its previous container's when it restarted.
fn agent_log(node: &Node, agents: &Value) -> String {
    let Some(p) = agents["items"]
        .as_array()
        .into_iter()
        .flatten()
        .max_by_key(|p| str_of(&p["metadata"]["creationTimestamp"]))
    else {
        return "  (no agent pod)".into();
    };
    let name = str_of(&p["metadata"]["name"]);
    let mut out = quick(node, &["-n", "headroom", "logs", &name, "--tail=20"]);
    if p["status"]["containerStatuses"][0]["restartCount"].as_u64() > Some(0) {
        out.push_str("\nthe container before its restart, last 10 lines:\n");
        out.push_str(&quick(
            node,
            &["-n", "headroom", "logs", &name, "--previous", "--tail=10"],
        ));
    }
    out
}

/// kubectl within 10 s: its output, or what went wrong.
fn quick(node: &Node, args: &[&str]) -> String {
    let out = node
        .kubectl_cmd()
        // The later flag wins: a broken API server costs seconds here, not a minute per call.
        .arg("--request-timeout=10s")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => format!(
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("kubectl {args:?}: {e}"),
    }
}

/// `kubectl get -o json`, or `{"error": ...}` when it failed (shown where it was needed).
fn get(node: &Node, args: &[&str]) -> Value {
    let mut all = vec!["get", "-o", "json"];
    all.extend_from_slice(args);
    let text = quick(node, &all);
    serde_json::from_str(&text).unwrap_or_else(|_| serde_json::json!({ "error": text }))
}

fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}
