//! Hung storage, end to end: a real FUSE mount (bindfs, stopped with SIGSTOP) among healthy
//! tmpfs volumes under the agent's kubelet root. The agent must keep scanning on schedule, grow
//! the healthy claims, report the hung one as not measured (probe_timeout), stay live and
//! ready, and exit on SIGTERM within its grace period although a thread is stuck in statfs. The
//! real API server (through the fault proxy, which counts the agent's PATCHes).

mod support {
    pub mod cluster;
    pub mod http;
    pub mod hung;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::cluster::{Cluster, ENABLED, available};
use support::http::{claim_metric, free_port, get, metric, volume_report};
use support::hung::HungMount;
use support::node::{MI, capacity_of, fill, wait_for};

#[test]
fn a_hung_mount_stops_neither_the_scans_nor_the_other_volumes_nor_shutdown() {
    if !available(
        "a_hung_mount_stops_neither_the_scans_nor_the_other_volumes_nor_shutdown",
        &[("bindfs", "bindfs")],
    ) {
        return;
    }
    let mut c = Cluster::new();
    let fast = c.fast.clone();
    let a = c.claim("a", &fast, 64, ENABLED);
    let b = c.claim("b", &fast, 64, ENABLED);
    c.pvc("hung", &fast, 64, ENABLED, |_| {});
    let uid = c.pod("pod-hung", &c.node, "hung");
    let source = tempfile::tempdir().expect("bindfs source");
    // Declared after the cluster: dropped (continued and unmounted) before the kubelet root is
    // removed, so nothing walks into a stopped filesystem.
    let hung = HungMount::start(
        source.path(),
        &c.root.csi_mount_point(&uid, &c.pv_name("hung")),
    );
    let _csi = c.csi(&[("a", a.clone()), ("b", b.clone())], 200);

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut agent = c.agent_on(
        &c.node,
        c.root.path(),
        "1s",
        &[
            "--probe-timeout",
            "2s",
            "--shutdown-grace",
            "3s",
            "--listen",
            &listen,
        ],
    );

    // The hung volume is reported, with its reason, on every surface.
    wait_for(Duration::from_secs(30), "hung volume not_measured", || {
        metric(
            port,
            "headroom_volume_not_measured",
            &["persistentvolumeclaim=\"hung\"", "reason=\"probe_timeout\""],
        )
        .filter(|v| *v == 1.0)
    });
    let report = volume_report(port, "hung").expect("hung volume in /volumes");
    assert_eq!(report["not_measured"], "probe_timeout", "{report:#}");
    assert_eq!(report["measured_by"], "none", "{report:#}");
    assert!(report["measurement"].is_null(), "{report:#}");
    wait_for(Duration::from_secs(15), "a ProbeTimeout Event", || {
        c.events_for("hung")
            .into_iter()
            .find(|(reason, kind, _)| reason == "ProbeTimeout" && kind == "Warning")
    });
    // The healthy ones are measured, and have no not-measured series.
    for name in ["a", "b"] {
        let r = volume_report(port, name).expect("healthy volume in /volumes");
        assert_eq!(r["measured_by"], "statfs", "{r:#}");
        assert!(
            metric(
                port,
                "headroom_volume_not_measured",
                &[&format!("persistentvolumeclaim=\"{name}\"")]
            )
            .is_none()
        );
    }

    // Scans go on: several more finish while the mount stays hung, and they do not wait on it
    // (a scan that did would take the 2 s deadline; these average under half of it).
    let count = |p| metric(p, "headroom_scan_duration_seconds_count", &[]);
    let sum = |p| metric(p, "headroom_scan_duration_seconds_sum", &[]);
    let (n0, s0) = (count(port).expect("count"), sum(port).expect("sum"));
    wait_for(Duration::from_secs(30), "five more scans", || {
        count(port).filter(|n| *n >= n0 + 5.0)
    });
    let (n1, s1) = (count(port).expect("count"), sum(port).expect("sum"));
    let mean = (s1 - s0) / (n1 - n0);
    assert!(
        mean < 1.0,
        "scans waited on the hung mount: {mean:.3} s on average"
    );
    // One stuck thread for the hung mount, however many scans ran: no second call was started.
    assert_eq!(
        metric(port, "headroom_probe_stuck_calls", &[]),
        Some(1.0),
        "stuck probe calls"
    );
    assert_eq!(metric(port, "headroom_scan_failures_total", &[]), Some(0.0));

    // The healthy claims are grown when filled.
    fill(&a, 56 * MI);
    wait_for(Duration::from_secs(30), "claim a grown", || {
        (capacity_of(&c.get("a")) == 80 * MI).then_some(())
    });
    assert_eq!(c.resize_patches("hung"), 0, "the hung claim was resized");
    assert_eq!(
        claim_metric(port, "headroom_volume_used_ratio", "b").map(|r| r < 0.5),
        Some(true)
    );

    // Honest health: the loop turns and scans succeed, so both answer 200.
    assert_eq!(get(port, "/live").map(|r| r.0), Some(200));
    assert_eq!(get(port, "/ready").map(|r| r.0), Some(200));

    // SIGTERM: the agent exits within its 3 s grace although a thread is stuck in statfs.
    let pid = Pid::from_raw(i32::try_from(agent.child.id()).expect("pid"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let status = wait_for(Duration::from_secs(5), "exit after SIGTERM", || {
        agent.child.try_wait().expect("try_wait")
    });
    assert!(status.success(), "agent exit: {status}");

    hung.resume();
    drop(hung);
}

/// The probe itself, without the agent: discovery lists only the kubelet's own directories, so it
/// finishes beside a hung mount; the hung volume's statfs times out once and is then skipped.
#[tokio::test(flavor = "multi_thread")]
async fn the_probe_walks_past_a_hung_mount_and_times_out_only_its_statfs() {
    if !support::root::require_root(
        "the_probe_walks_past_a_hung_mount_and_times_out_only_its_statfs",
        &[("bindfs", "bindfs")],
    ) {
        return;
    }
    use headroom::probe::{Prober, Unmeasured, bounded::BoundedError};
    let mut root = support::node::KubeletRoot::new();
    root.tmpfs_volume("pod-ok", "pv-ok", MI);
    let source = tempfile::tempdir().expect("bindfs source");
    let hung = HungMount::start(source.path(), &root.csi_mount_point("pod-hung", "pv-hung"));
    let deadline = Duration::from_millis(500);
    let prober = Prober::new(root.path().to_path_buf(), deadline);
    for scan in 0..3 {
        let vols = prober
            .probe()
            .await
            .expect("discovery must not wait on the hung mount");
        let by_pv = |pv: &str| {
            vols.iter()
                .find(|v| v.pv.as_deref() == Some(pv))
                .unwrap_or_else(|| panic!("{pv} not found: {vols:#?}"))
        };
        let ok = by_pv("pv-ok");
        assert!(ok.measurement.is_some(), "scan {scan}: {ok:#?}");
        let stuck = by_pv("pv-hung");
        assert_eq!(
            stuck.unmeasured,
            Some(Unmeasured::ProbeTimeout),
            "{stuck:#?}"
        );
        assert!(stuck.measurement.is_none());
        // The first scan waited for the deadline; the later ones refused at once.
        let want = if scan == 0 {
            BoundedError::TimedOut(deadline).to_string()
        } else {
            BoundedError::StillBusy.to_string()
        };
        assert!(
            stuck.findings.iter().any(|f| f.contains(&want)),
            "scan {scan}: {:?}",
            stuck.findings
        );
        assert_eq!(prober.stuck_calls(), 1);
    }
    hung.resume();
    drop(hung);
}
