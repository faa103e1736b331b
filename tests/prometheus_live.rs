//! The monitoring, live: Debian's real `prometheus` scrapes an agent that runs against the real
//! API server (through the fault proxy), as the PodMonitor configures it (honor_labels, the
//! metrics port and path), with daemonset/monitoring/rules.yaml loaded as it ships but for its
//! `for:` durations. Scenarios on
//! real tmpfs volumes and a real PostgreSQL drive the agent; every assertion goes through
//! Prometheus's HTTP API: each dashboard query returns series once its variables are resolved,
//! every rule evaluates without error, and each alert the scenarios exercise fires where it should
//! and not where it should not.
//!
//! The shipped `for:` durations (5 m and more) would keep the alerts pending for the whole test,
//! so Prometheus loads a copy of the rules with every `for:` cut to 2 s: the expressions, labels
//! and annotations are the shipped ones, and Prometheus's own rule evaluation takes each alert
//! from pending to firing. The durations themselves are promtool's to check (tests/alerts.rs).

mod support {
    pub mod cluster;
    pub mod http;
    pub mod kube;
    pub mod kubelet_tls;
    pub mod node;
    pub mod pg;
    pub mod ports;
    pub mod root;
}

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use support::cluster::{Cluster, ENABLED, available, status_field};
use support::kube::block;
use support::kubelet_tls::{FakeKubelet, make_certificates};
use support::node::{Agent, CsiDriver, MI, fill, wait_for};
use support::pg::{Options, require_postgres};

const MONITORING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/daemonset/monitoring");

/// Polls `check` every 500 ms until it says done or `timeout` passes; its last answer either
/// way, so a failure shows what was seen.
fn settle<T>(timeout: Duration, mut check: impl FnMut() -> (bool, T)) -> T {
    let end = Instant::now() + timeout;
    loop {
        let (done, seen) = check();
        if done || Instant::now() > end {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// (status, body) of a GET as HTTP/1.0: Prometheus answers 1.1 requests chunked, which
/// `support::http` does not decode.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let (_, body) = text.split_once("\r\n\r\n")?;
    Some((code, body.to_string()))
}

/// A Prometheus server of the test's own: config and TSDB in a tempdir, on a free port.
struct Prometheus {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

/// daemonset/monitoring/rules.yaml with every `for:` cut to 2 s.
fn quick_rules() -> String {
    let shipped = std::fs::read_to_string(format!("{MONITORING}/rules.yaml")).expect("rules.yaml");
    let mut cut = 0;
    let text: Vec<String> = shipped
        .lines()
        .map(|l| match l.trim_start().strip_prefix("for: ") {
            Some(_) => {
                cut += 1;
                format!("{}for: 2s", &l[..l.len() - l.trim_start().len()])
            }
            None => l.to_string(),
        })
        .collect();
    assert!(cut > 10, "only {cut} `for:` lines found in rules.yaml");
    text.join("\n")
}

impl Prometheus {
    /// Scrapes the agent at `target` every second as the PodMonitor would: `honor_labels`, path
    /// `/metrics`, and the target labels the operator adds (the agent pod's own `namespace`,
    /// which the agent's claim `namespace` must win over).
    fn start(target: u16) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let rules = dir.path().join("rules.yaml");
        std::fs::write(&rules, quick_rules()).expect("rules");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: headroom\n    honor_labels: true\n    metrics_path: /metrics\n\
             \x20   static_configs:\n      - targets: ['127.0.0.1:{target}']\n        labels:\n\
             \x20         namespace: headroom\n          pod: headroom-x7k2p\n          container: headroom\n\
             \x20         endpoint: metrics\n",
            rules.display()
        );
        let path = dir.path().join("prometheus.yml");
        std::fs::write(&path, config).expect("config");
        let port = support::ports::free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let p = Prometheus { child, port, dir };
        wait_for(Duration::from_secs(20), "prometheus ready", || {
            get(p.port, "/-/ready").filter(|(code, _)| *code == 200)
        });
        p
    }

    /// `data` of a successful API answer.
    fn api(&self, path: &str) -> Value {
        let (code, body) =
            get(self.port, path).unwrap_or_else(|| panic!("prometheus did not answer {path}"));
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(
            code == 200 && v["status"] == "success",
            "{path}: {code} {body}\n{}",
            self.log()
        );
        v["data"].clone()
    }

    /// The instant vector of `expr` now.
    fn query(&self, expr: &str) -> Vec<Value> {
        let q: String = form_urlencoded::byte_serialize(expr.as_bytes()).collect();
        let data = self.api(&format!("/api/v1/query?query={q}"));
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// Values of `label` on the series matching `selector` (Grafana's `label_values`).
    fn label_values(&self, selector: &str, label: &str) -> Vec<String> {
        let m: String = form_urlencoded::byte_serialize(selector.as_bytes()).collect();
        let data = self.api(&format!("/api/v1/series?match[]={m}"));
        let mut out: Vec<String> = data
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s[label].as_str().map(str::to_string))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn alerts(&self) -> Vec<Value> {
        self.api("/api/v1/alerts")["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `per_tick` more bytes every 250 ms into `mount`, from `from` up to `cap`: a fill at a
/// steady rate, until dropped.
struct Filler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Filler {
    fn start(mount: PathBuf, from: u64, cap: u64, per_tick: u64) -> Filler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut size = from;
            while !stopped.load(Ordering::SeqCst) && size <= cap {
                fill(&mount, size);
                std::thread::sleep(Duration::from_millis(250));
                size += per_tick;
            }
        });
        Filler {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A history annotation with grows of `(days ago, from MiB, to MiB)`.
fn grown(grows: &[(i64, u64, u64)]) -> String {
    let now = Timestamp::now();
    let entries: Vec<Value> = grows
        .iter()
        .map(|(days, from, to)| {
            let at = now - SignedDuration::from_hours(24 * days);
            json!({"at": at, "kind": "Grow", "from": from * MI, "to": to * MI,
                   "fs_before": from * MI, "landed": at + SignedDuration::from_secs(60),
                   "result": "Succeeded"})
        })
        .collect();
    Value::Array(entries).to_string()
}

/// A PostgreSQL data claim `pgdata` on a 256Mi volume (pod `pg-0` of CloudNativePG cluster
/// `pg`) whose archiving fails and whose slot nobody reads; returns the server (kept running)
/// and the volume's mount.
fn postgres_claim(c: &mut Cluster, bin: &Path) -> (support::pg::Cluster, PathBuf) {
    c.pvc(
        "pgdata",
        &c.fast.clone(),
        256,
        &[
            ("enabled", "true"),
            ("limit", "2Gi"),
            ("step", "64Mi"),
            ("postgres-role", "data"),
            ("wal-safety-acknowledge-wal-risk", "true"),
            ("wal-safety-max-slot-retention-bytes", "8Mi"),
        ],
        |_| {},
    );
    let uid = c.pod("pg-0", &c.node.clone(), "pgdata");
    c.cnpg_instance("pg-0", "pg");
    let disk = c.root.scratch_tmpfs(256 * MI);
    let pv = c.pv_name("pgdata");
    let mount = c.root.bind_volume(&uid, &pv, &disk);
    let pg = support::pg::Cluster::start_in(bin, &Options::archiving("false"), &disk);
    let su = block(pg.superuser());
    block(su.batch_execute("SELECT pg_create_physical_replication_slot('gone_replica', true)"))
        .expect("slot");
    block(pg.generate_wal(&su, 3));
    block(su.batch_execute("CHECKPOINT")).expect("checkpoint");
    (pg, mount)
}

fn used_bytes(mount: &Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(mount).expect("statvfs");
    (s.blocks() - s.blocks_free()) * s.fragment_size()
}

/// One alert as (name, claim, state, reason).
fn alert_key(a: &Value) -> (String, String, String, String) {
    let l = &a["labels"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&l["alertname"]),
        s(&l["persistentvolumeclaim"]),
        s(&a["state"]),
        s(&l["reason"]),
    )
}

/// An AdmissionReview of a claim CREATE that did not opt in, posted to the agent's webhook.
fn ask_webhook(port: u16, ns: &str) -> String {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "live-1", "operation": "CREATE", "namespace": ns,
            "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "object": {"metadata": {"name": "new-claim", "namespace": ns},
                       "spec": {"resources": {"requests": {"storage": "1Gi"}}}},
        },
    });
    let out = Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "5",
            "-H",
            "Content-Type: application/json",
        ])
        .arg("--data-binary")
        .arg(review.to_string())
        .arg(format!("https://127.0.0.1:{port}/mutate"))
        .output()
        .expect("run curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Each dashboard query with its variables resolved as Grafana would on this cluster: `$node`
/// and `$namespace` from their `label_values` definitions (each must give the scenario's value),
/// `$__rate_interval` from the 1 s scrape interval.
fn dashboard_queries(p: &Prometheus, node: &str, ns: &str) -> Vec<(String, String)> {
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{MONITORING}/dashboard.json")).expect("dashboard"),
    )
    .expect("dashboard JSON");
    let definition = |name: &str| {
        dash["templating"]["list"]
            .as_array()
            .expect("variables")
            .iter()
            .find(|v| v["name"] == name)
            .and_then(|v| v["definition"].as_str())
            .unwrap_or_else(|| panic!("variable {name} has no definition"))
            .to_string()
    };
    let resolve = |text: &str| {
        text.replace("${datasource}", "prometheus")
            .replace("$__rate_interval", "10s")
            .replace("$namespace", ns)
            .replace("$node", node)
    };
    for (var, want) in [("node", node), ("namespace", ns)] {
        let def = resolve(&definition(var));
        let (selector, label) = def
            .strip_prefix("label_values(")
            .and_then(|d| d.strip_suffix(')'))
            .and_then(|d| d.rsplit_once(','))
            .unwrap_or_else(|| panic!("${var}: not label_values(...): {def}"));
        let values = p.label_values(selector.trim(), label.trim());
        assert!(
            values.iter().any(|v| v == want),
            "${var} ({def}) offers {values:?}, not {want}"
        );
    }
    let mut out = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for t in panel["targets"].as_array().expect("targets") {
            let expr = resolve(t["expr"].as_str().expect("expr"));
            assert!(
                !expr.contains('$'),
                "an unresolved variable in {}: {expr}",
                panel["title"]
            );
            out.push((
                panel["title"].as_str().unwrap_or_default().to_string(),
                expr,
            ));
        }
    }
    out
}

/// The claims without Postgres: `resized` (grown by the agent, its resize landing 300 ms later),
/// `capped` (at its limit, filling), `nearlimit`, `farlimit`, `quiet`, `converging` and `waiting`
/// (a grow recommended to a person); returns the driver that lands the resize and `capped`'s
/// mount.
fn seed_claims(c: &mut Cluster) -> (CsiDriver, PathBuf) {
    let fast = c.fast.clone();
    // Grown by the agent, the resize landing 300 ms later.
    let resized = c.claim("resized", &fast, 64, ENABLED);
    fill(&resized, 56 * MI);
    let csi = c.csi(&[("resized", resized.clone())], 300);
    // At its limit and filling: blocked at_limit, full within minutes.
    let capped = c.claim(
        "capped",
        &fast,
        32,
        &[("enabled", "true"), ("limit", "32Mi"), ("step", "16Mi")],
    );
    // Grown 32Mi in the last week, 20Mi left to its limit: about four days.
    let near = grown(&[(3, 48, 64), (1, 64, 80)]);
    let mut policy = ENABLED.to_vec();
    policy.push(("history", &near));
    c.claim("nearlimit", &fast, 80, &policy);
    // Grown 16Mi in the week, years from a 10Gi limit; and one never grown.
    let far = grown(&[(2, 48, 64)]);
    c.claim(
        "farlimit",
        &fast,
        64,
        &[("enabled", "true"), ("limit", "10Gi"), ("history", &far)],
    );
    c.claim("quiet", &fast, 64, ENABLED);
    // Past its threshold under enforcement: recommend: the grow waits for a person.
    let waiting = c.claim(
        "waiting",
        &fast,
        64,
        &[
            ("enabled", "true"),
            ("limit", "100Mi"),
            ("enforcement", "recommend"),
        ],
    );
    fill(&waiting, 56 * MI);
    // Convergent mode: a target size (capped at its limit, where it already is: nothing to
    // grow, so no resize waits for a driver that is not there).
    c.claim(
        "converging",
        &fast,
        64,
        &[
            ("enabled", "true"),
            ("mode", "convergent"),
            ("limit", "64Mi"),
        ],
    );
    (csi, capped)
}

/// `blind`, a claim statfs cannot see (its mount is a symlink), and the kubelet whose numbers
/// stand in for it and cross-check `resized` (8Mi used where statfs sees 56Mi).
fn blind_claim_and_kubelet(c: &mut Cluster) -> FakeKubelet {
    let fast = c.fast.clone();
    c.pvc("blind", &fast, 64, ENABLED, |_| {});
    let uid = c.pod("pod-blind", &c.node.clone(), "blind");
    let blind = c.root.csi_mount_point(&uid, &c.pv_name("blind"));
    std::fs::remove_dir(&blind).expect("rmdir");
    std::os::unix::fs::symlink("/tmp", &blind).expect("symlink");
    let volume = |claim: &str, used: u64| {
        json!({"time": Timestamp::now().to_string(), "name": "data",
               "pvcRef": {"name": claim, "namespace": c.ns},
               "capacityBytes": 64 * MI, "usedBytes": used, "availableBytes": 64 * MI - used,
               "inodes": 16384, "inodesUsed": 2, "inodesFree": 16382})
    };
    let pods: Vec<Value> = [("resized", 8 * MI), ("blind", 4 * MI)]
        .iter()
        .map(|(claim, used)| {
            json!({"podRef": {"name": format!("pod-{claim}"), "namespace": c.ns},
                   "volume": [volume(claim, *used)]})
        })
        .collect();
    block(FakeKubelet::start(
        json!({"node": {"nodeName": c.node}, "pods": pods}),
    ))
}

/// The agent on the test's node, every second, with its metrics port, the webhook on its own
/// certificate and `kubelet`; returns it with (metrics port, webhook port).
fn start_agent(c: &Cluster, kubelet: &FakeKubelet, certs: &Path) -> (Agent, u16, u16) {
    let (_, crt, key) = make_certificates(certs);
    let port = support::ports::free_port();
    let webhook = support::ports::free_port();
    let mut flags: Vec<String> = [
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--webhook-listen",
        &format!("127.0.0.1:{webhook}"),
        "--webhook-cert-file",
        &crt.display().to_string(),
        "--webhook-key-file",
        &key.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    flags.extend(kubelet.agent_flags());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let agent = c.agent_on(&c.node.clone(), c.root.path(), "1s", &flags);
    (agent, port, webhook)
}

/// The scenarios' alerts, firing, on exactly the claims they should be.
fn assert_alerts(p: &Prometheus) {
    // What the scenarios must raise, as (alert, claim, state, reason).
    let expected: [(&str, &str, &str, &str); 7] = [
        (
            "HeadroomVolumeFullSoonBlocked",
            "capped",
            "firing",
            "at_limit",
        ),
        ("HeadroomVolumeFullSoonBlocked", "pgdata", "firing", "wal_"),
        ("HeadroomVolumeLimitSoon", "nearlimit", "firing", ""),
        ("HeadroomResizeOccurred", "resized", "firing", ""),
        ("HeadroomVolumeAtLimit", "capped", "firing", ""),
        (
            "HeadroomResizeBlocked",
            "pgdata",
            "firing",
            "wal_slot_retention",
        ),
        ("HeadroomWALInactiveSlots", "pgdata", "firing", ""),
    ];
    let matches = |a: &(String, String, String, String), e: &(&str, &str, &str, &str)| {
        a.0 == e.0 && a.1 == e.1 && a.2 == e.2 && a.3.starts_with(e.3)
    };
    let alerts = settle(Duration::from_secs(60), || {
        let alerts: Vec<_> = p.alerts().iter().map(alert_key).collect();
        let all = expected
            .iter()
            .all(|e| alerts.iter().any(|a| matches(a, e)));
        (all, alerts)
    });
    for e in &expected {
        assert!(
            alerts.iter().any(|a| matches(a, e)),
            "no {e:?} in {alerts:?}"
        );
    }
    eprintln!("alerts: {alerts:?}");
    // Not where they should not be: only the claims above, each alert once (the seeded grows
    // landed days ago: no HeadroomResizeOccurred for them).
    for name in [
        "HeadroomVolumeFullSoonBlocked",
        "HeadroomVolumeLimitSoon",
        "HeadroomResizeOccurred",
        "HeadroomVolumeAtLimit",
        "HeadroomResizeBlocked",
        "HeadroomWALInactiveSlots",
    ] {
        let mut on: Vec<&str> = alerts
            .iter()
            .filter(|a| a.0 == name)
            .map(|a| a.1.as_str())
            .collect();
        on.sort();
        let mut want: Vec<&str> = expected
            .iter()
            .filter(|e| e.0 == name)
            .map(|e| e.1)
            .collect();
        want.sort();
        assert_eq!(on, want, "{name}: {alerts:?}");
    }
}

/// The deadlines where they are known, in the alert, `/volumes` and the status annotation.
fn assert_deadlines(p: &Prometheus, c: &Cluster, port: u16) {
    // The pace toward the limit is known only where the claim grew this week; 0 at the limit.
    let to_limit = p.query("headroom_volume_seconds_to_limit");
    let mut with_pace: Vec<&str> = to_limit
        .iter()
        .filter_map(|s| s["metric"]["persistentvolumeclaim"].as_str())
        .collect();
    with_pace.sort();
    assert_eq!(
        with_pace,
        ["capped", "converging", "farlimit", "nearlimit", "resized"],
        "{to_limit:?}"
    );

    // The critical alert says why and how soon.
    let page = p
        .alerts()
        .into_iter()
        .find(|a| {
            a["labels"]["alertname"] == "HeadroomVolumeFullSoonBlocked"
                && a["labels"]["persistentvolumeclaim"] == "capped"
        })
        .expect("the capped claim's alert");
    let summary = page["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("will be full in") && summary.ends_with("will not grow it: at_limit"),
        "{summary}"
    );
    // The same deadline in /volumes (exact) and the status annotation (rounded down to a step:
    // 4.4 days is `3d`).
    let (_, body) = support::http::get(port, "/volumes").expect("/volumes");
    let volumes: Value = serde_json::from_str(&body).expect("/volumes JSON");
    let near = volumes["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["pvc"] == "nearlimit")
        .expect("nearlimit on /volumes");
    let exact = near["decision"]["seconds_to_limit"].as_f64().unwrap_or(0.0);
    assert!((exact - 4.375 * 86_400.0).abs() < 60.0, "{exact}");
    assert_eq!(
        status_field(&c.get("nearlimit"), "limitInSeconds").as_deref(),
        Some("259200")
    );
}

/// honor_labels as the PodMonitor sets it, and every rule loaded and evaluating without error.
fn assert_labels_and_rules(p: &Prometheus, ns: &str) {
    // honor_labels: the claim's namespace, not the agent pod's; agent-wide series get the pod's.
    let ratio = p.query("headroom_volume_used_ratio{persistentvolumeclaim=\"capped\"}");
    assert_eq!(ratio.len(), 1, "{ratio:?}");
    assert_eq!(ratio[0]["metric"]["namespace"], ns, "{ratio:?}");
    assert!(ratio[0]["metric"]["exported_namespace"].is_null());
    let seen = p.query("headroom_volumes_seen");
    assert_eq!(seen[0]["metric"]["namespace"], "headroom", "{seen:?}");

    // Every rule loaded and evaluating without error.
    let groups = p.api("/api/v1/rules")["groups"].clone();
    let rules: Vec<&Value> = groups
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .collect();
    assert!(rules.len() >= 18, "{} rules loaded", rules.len());
    for r in &rules {
        assert_eq!(r["health"], "ok", "{}: {}", r["name"], r["lastError"]);
    }
}

/// A watch that fails once is restarted, and counted: its re-watch is answered 500.
fn restart_a_watch(c: &Cluster, port: u16) {
    wait_for(Duration::from_secs(20), "open watches", || {
        (c.proxy.open_watches() > 0).then_some(())
    });
    c.proxy
        .fail_next_matching(2, 500, "GET", "persistentvolumeclaims");
    c.proxy.drop_watches();
    wait_for(Duration::from_secs(20), "a watch restart", || {
        support::http::metric(port, "headroom_watch_restarts_total", &[])
    });
}

/// Every dashboard query returns series; how many there are.
fn assert_dashboard(p: &Prometheus, c: &Cluster) -> usize {
    // Every dashboard query returns series (the kubelet's cross-check is asked once a minute and
    // the webhook's histogram needs its answer: wait for the slowest, then ask each).
    let queries = dashboard_queries(p, &c.node, &c.ns);
    assert!(queries.len() >= 20, "{} queries", queries.len());
    let empty = settle(Duration::from_secs(30), || {
        let empty: Vec<_> = queries
            .iter()
            .filter(|(_, q)| p.query(q).is_empty())
            .collect();
        (empty.is_empty(), empty)
    });
    assert!(
        empty.is_empty(),
        "dashboard queries without series: {empty:#?}"
    );
    queries.len()
}

#[test]
fn prometheus_scrapes_evaluates_and_alerts_on_a_live_agent() {
    let start = Instant::now();
    // Under CI none of these may be missing: the test fails instead of skipping.
    let tools = [
        ("prometheus", "prometheus"),
        ("curl", "curl"),
        ("openssl", "openssl"),
    ];
    if !available(
        "prometheus_scrapes_evaluates_and_alerts_on_a_live_agent",
        &tools,
    ) {
        return;
    }
    let Some(pg_bin) = require_postgres() else {
        return;
    };
    let mut c = Cluster::new();
    let (_pg, pg_mount) = postgres_claim(&mut c, &pg_bin);
    let (_csi, capped) = seed_claims(&mut c);
    let kubelet = blind_claim_and_kubelet(&mut c);
    // The PostgreSQL volume past its threshold and both blocked volumes filling at 32 KiB/s.
    // (The fill file tops the database's own files up to 85 %.)
    let from = (256 * MI * 85 / 100).saturating_sub(used_bytes(&pg_mount));
    fill(&pg_mount, from);
    let _pg_fill = Filler::start(pg_mount, from, 230 * MI, 8 * 1024);
    let _capped_fill = Filler::start(capped, 27 * MI, 31 * MI, 8 * 1024);

    let certs = tempfile::tempdir().expect("certs");
    let (_agent, port, webhook) = start_agent(&c, &kubelet, certs.path());
    let p = Prometheus::start(port);

    // The webhook answers a CREATE.
    let answer = wait_for(Duration::from_secs(20), "the webhook's answer", || {
        let a = ask_webhook(webhook, &c.ns);
        a.contains("\"allowed\":true").then_some(a)
    });
    assert!(answer.contains("live-1"), "{answer}");
    assert_alerts(&p);
    assert_deadlines(&p, &c, port);
    assert_labels_and_rules(&p, &c.ns);
    restart_a_watch(&c, port);
    let queries = assert_dashboard(&p, &c);
    let took = start.elapsed();
    eprintln!("{queries} dashboard queries answered; {took:?} in all");
}
