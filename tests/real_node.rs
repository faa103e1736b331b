//! headroom as it ships, on a real node (issue 23): the image `scripts/image.sh` builds, the
//! shipped `daemonset/` and `rbac/` installed with `kubectl apply -k` (through an overlay that
//! changes only the image), on a real kubelet (1.37.2, `KUBE_NEWEST` of scripts/kube-versions.sh)
//! whose volumes a CSI node plugin mounts (tests/support/realnode). One node serves every test of
//! this binary; tests that disrupt it (drain, restarts) take it exclusively.
//!
//! The kubelet runs with `--root-dir=/var/lib/kubelet`, the DaemonSet's own hostPath, so no path
//! is patched. The kubelet calls NodeExpandVolume at its periodic pod sync (about a minute after
//! the resize, in 1.20 as in 1.37: 61-79 s from fill to grown filesystem on 1.34.4 and 1.37.2
//! here), so a grow takes that long to reach the filesystem.

mod support {
    pub mod realnode;
}

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::realnode::observe::*;
use support::realnode::resizer::bytes;
use support::realnode::scenario::*;
use support::realnode::witness::witness;
use support::realnode::{NODE, wait_for_cmd};

#[test]
fn agent_pod_is_ready_on_its_probes_as_uid_65532_with_dac_read_search_only() {
    let Some((env, _hold)) = shared("agent_pod_is_ready_on_its_probes") else {
        return;
    };
    let _witness = witness(&env.node, &[]);
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
    let Some((env, _hold)) = shared("a_claim_mounted_after_the_agent_started") else {
        return;
    };
    let node = &env.node;
    let _witness = witness(node, &["rn-late"]);
    let (_, ip, _) = agent_pod(node, Duration::from_secs(60));
    let v = data_volume(node, "rn-late", &policy(""));
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
    capture_for_fuzzing(node, &v);
}

#[test]
fn fill_patch_resize_node_expand_grows_the_filesystem_and_the_history_lands() {
    let Some((env, _hold)) = shared("fill_patch_resize_node_expand") else {
        return;
    };
    let node = &env.node;
    let _witness = witness(node, &["rn-fill"]);
    let v = data_volume(node, "rn-fill", &policy(""));
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
    // The kubelet's periodic pod sync notices NodeResizePending (about a minute).
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
    // The kubelet's status write carries the claim's resourceVersion; when the agent's own write
    // (the landing above) comes between its read and that write, it is refused with a conflict
    // and the kubelet writes again on its next reconcile (seen once in CI, a few seconds later).
    let capacity = |c: &Value| bytes(c["status"]["capacity"]["storage"].as_str().unwrap_or("0"));
    wait_for_cmd(
        Duration::from_secs(120),
        "the kubelet sets status.capacity",
        || (capacity(&claim_json(node, &v)) == want).then_some(()),
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

#[test]
fn the_agents_token_reads_kubelet_stats_and_a_token_without_nodes_stats_is_refused() {
    let Some((env, _hold)) = shared("the_agents_token_reads_kubelet_stats") else {
        return;
    };
    let node = &env.node;
    let _witness = witness(node, &["rn-nostats"]);
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
    assert!(
        body.contains("resource=nodes, subresource(s)=[stats]"),
        "{body}"
    );
    // The agent's grant is nodes/stats, not nodes/proxy: the kubelet's other endpoints refuse it.
    let (code, body) = kubelet_get(node, &token, "/pods");
    assert_eq!(code, 403, "the agent reached /pods: {body}");
}

#[test]
fn two_claims_on_one_device_are_refused() {
    let Some((env, _hold)) = shared("two_claims_on_one_device_are_refused") else {
        return;
    };
    let node = &env.node;
    let _witness = witness(node, &["rn-shared"]);
    namespace(node, "rn-shared");
    let spec = VolSpec {
        size_mi: 300,
        claim_meta: &policy(""),
        file: Some("rn-shared.img"),
        offline: false,
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

#[test]
fn a_drain_pauses_planned_growth_emergencies_still_act_and_uncordon_resumes() {
    let Some((env, _hold)) = alone("a_drain_pauses_planned_growth") else {
        return;
    };
    let node = &env.node;
    let _witness = witness(node, &["rn-drain"]);
    namespace(node, "rn-drain");
    let spec = VolSpec {
        size_mi: 300,
        claim_meta: &drain_policy(),
        file: None,
        offline: false,
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

#[test]
fn restarts_during_fills_give_one_grow_per_fill_and_keep_the_history() {
    let Some((env, _hold)) = alone("restarts_during_fills") else {
        return;
    };
    let node = &env.node;
    let _witness = witness(node, &["rn-restart"]);
    let v = data_volume(node, "rn-restart", &policy(""));
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
        let (name, ..) = ready_agent_pod(node)?;
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

#[test]
fn a_cloudnativepg_data_volume_with_a_ready_backlog_does_not_grow() {
    let Some((env, _hold)) = shared("a_cloudnativepg_data_volume_with_a_ready_backlog") else {
        return;
    };
    let node = &env.node;
    let _witness = witness(node, &["rn-cnpg"]);
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
            offline: false,
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
