//! The API server's release, read once at start and said (issue 47, item 5): on the real server
//! (the release scripts/test.sh runs, 1.34 or 1.37) `headroom_api_server_info` names it
//! `tested`; a server reporting an older release, or a version no one can read (scripted by the
//! fault proxy: no real server can be made to report another release), is said with a warning
//! and the same series, bounded, while the agent goes on and writes nothing because of it.

mod support {
    pub mod cluster;
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use serde_json::{Value, json};
use support::cluster::{Cluster, available};
use support::http::{free_port, get};
use support::kube::server;
use support::node::{Agent, MI, fill, request_of, wait_for};

/// An agent on `c` with its admin endpoint; returns it and the endpoint's port once ready.
fn ready_agent(c: &Cluster) -> (Agent, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let agent = c.agent_on(&c.node, c.root.path(), "300ms", &["--listen", &listen]);
    wait_for(Duration::from_secs(30), "/ready", || {
        get(port, "/ready").filter(|(code, _)| *code == 200)
    });
    (agent, port)
}

/// The `headroom_api_server_info` lines of the agent's /metrics.
fn info_lines(port: u16) -> Vec<String> {
    let (_, text) = get(port, "/metrics").expect("metrics");
    text.lines()
        .filter(|l| l.starts_with("headroom_api_server_info{"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_real_servers_release_is_said_tested() {
    if !available("the_real_servers_release_is_said_tested", &[]) {
        return;
    }
    let c = Cluster::new();
    let (agent, port) = ready_agent(&c);
    let version = &server::release().expect("release").version;
    assert_eq!(
        info_lines(port),
        [format!(
            "headroom_api_server_info{{git_version=\"{version}\",support=\"tested\",node=\"{}\"}} 1",
            c.node
        )]
    );
    let log = agent.log_text();
    assert!(
        log.contains(&format!("api_server={version} (tested")),
        "{log}"
    );
}

/// A server answering `/version` with `info`: the series and the warning the agent gives it, and
/// the claim beside it still grown (the version gates nothing).
fn said_of(info: Value) -> (Vec<String>, String, Vec<String>) {
    let mut c = Cluster::new();
    c.proxy.report_version(info);
    let fast = c.fast.clone();
    let mount = c.claim(
        "data",
        &fast,
        32,
        &[("enabled", "true"), ("limit", "64Mi"), ("step", "16Mi")],
    );
    let (agent, port) = ready_agent(&c);
    let lines = info_lines(port);
    fill(&mount, 31 * MI);
    wait_for(Duration::from_secs(20), "the grow", || {
        (request_of(&c.get("data")) > 32 * MI).then_some(())
    });
    let writes: Vec<String> = c
        .proxy
        .requests()
        .into_iter()
        .filter(|r| !matches!(r.method.as_str(), "GET" | "HEAD"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    (lines, agent.log_text(), writes)
}

#[test]
fn an_older_or_unreadable_release_is_warned_of_and_gates_nothing() {
    if !available(
        "an_older_or_unreadable_release_is_warned_of_and_gates_nothing",
        &[],
    ) {
        return;
    }
    let (lines, log, writes) = said_of(json!({
        "major": "1", "minor": "31", "gitVersion": "v1.31.9", "platform": "linux/amd64",
    }));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("git_version=\"v1.31.9\",support=\"older\""),
        "{lines:?}"
    );
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("v1.31.9, older than the releases headroom is tested on (1.34 to 1.37)")),
        "{log}"
    );
    // The claim's grow (and its record) is all that was written.
    let claim = "/persistentvolumeclaims/data";
    assert!(
        writes
            .iter()
            .all(|w| w.ends_with(claim) || w.contains("/events")),
        "{writes:?}"
    );

    // A version no one can read, with bytes meant for a label or a terminal.
    let hostile = format!("v1.x\"}}\n\u{1b}[31m{}", "9".repeat(300));
    let (lines, log, _) = said_of(json!({"major": "one", "minor": "x", "gitVersion": hostile}));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("support=\"unknown\""), "{lines:?}");
    let label = lines[0]
        .split("git_version=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("git_version label");
    assert!(label.len() <= 64 && label.starts_with("v1.x"), "{label}");
    assert!(
        log.lines()
            .any(|l| l.contains("WARN")
                && l.contains("not a Kubernetes 1.x version headroom can read")),
        "{log}"
    );

    // Not a version.Info at all: unreadable, said the same way.
    let (lines, log, _) = said_of(json!({"major": 1, "minor": [], "gitVersion": {}}));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("git_version=\"unknown\",support=\"unknown\""),
        "{lines:?}"
    );
    assert!(
        log.contains("cannot read the API server's version"),
        "{log}"
    );
}
