//! The Postgres promise as it runs (issue 34): real PostgreSQL 15 servers in pods on the real
//! node (tests/support/realnode), in each operator's layout and uid, beside headroom installed
//! from the shipped `daemonset/` and `rbac/`, with no credentials. A streaming replica is made
//! with `pg_basebackup` over the pod network through a physical slot; SQL comes from the host
//! over the same network. Every fault is made by the server itself: a replica gone for good
//! while its slot stays, `archive_command` failing after `ALTER SYSTEM`.

mod support {
    pub mod realnode;
}

use std::time::Duration;

use serde_json::Value;
use support::realnode::observe::*;
use support::realnode::postgres::*;
use support::realnode::scenario::*;
use support::realnode::wait_for_cmd;

/// The node with headroom and PostgreSQL's image; `None` when the test skips off CI.
fn node(test: &str) -> Option<(&'static Installed, Hold)> {
    support::realnode::postgres::parts(test)?;
    shared(test)
}

/// Opted in, small steps, and the WAL limits the faults below cross: a slot retaining more than
/// 80Mi (above the image's `max_wal_size` of 64MB, what a slot in use can hold between
/// checkpoints), more than three segments waiting for the archiver. Emergencies only past 95 %
/// (the default 1Gi free is more than every test volume has).
const WAL_POLICY: &str = "    headroom.dev/enabled: \"true\"\n    headroom.dev/limit: 4Gi\n    headroom.dev/step: 200Mi\n    headroom.dev/wal-safety-max-slot-retention-bytes: 80Mi\n    headroom.dev/wal-safety-max-pending-wal-files: \"3\"\n    headroom.dev/emergency-grow-critical-threshold: \"95\"\n    headroom.dev/emergency-grow-critical-minimum-free: 1Mi\n";

fn report(node: &support::realnode::Node, v: &Vol) -> Value {
    let (_, ip, _) = agent_pod(node, Duration::from_secs(60));
    reported(&ip, v, Duration::from_secs(60))
}

/// The agent's report of `v` once `ok` holds for it.
fn report_until(
    node: &support::realnode::Node,
    v: &Vol,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for_cmd(Duration::from_secs(180), what, || {
            last = report(node, v);
            ok(&last).then(|| last.clone())
        })
    }));
    found.unwrap_or_else(|_| panic!("{what}: not within 180 s; last report: {last:#}"))
}

/// Waits for `done` on the claim; on timeout, fails with its status and the agent's report.
fn wait_claim(
    node: &support::realnode::Node,
    v: &Vol,
    what: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) {
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for_cmd(within, what, || done(&claim_json(node, v)).then_some(()))
    }));
    if ok.is_err() {
        let c = claim_json(node, v);
        let status = &c["metadata"]["annotations"]["headroom.dev/status"];
        panic!(
            "{}/{}: {what}: not within {within:?}: status {status}; report {}",
            v.ns,
            v.claim,
            report(node, v)
        );
    }
}

fn wait_blocked(node: &support::realnode::Node, v: &Vol, reason: &str) {
    wait_claim(
        node,
        v,
        &format!("blocked as {reason}"),
        Duration::from_secs(90),
        |c| status_field(c, "blockedReason").as_deref() == Some(reason),
    );
}

fn wait_grown(node: &support::realnode::Node, v: &Vol, from: u64, within: Duration) {
    wait_claim(node, v, "grown", within, |c| request(c) > from);
}

/// The claim's Events, as `reason: message` lines.
fn events(node: &support::realnode::Node, v: &Vol) -> Vec<String> {
    let e = node.get_json(&[
        "-n",
        &v.ns,
        "events",
        "--field-selector",
        &format!(
            "involvedObject.kind=PersistentVolumeClaim,involvedObject.name={}",
            v.claim
        ),
    ]);
    e["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{}: {}",
                e["reason"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// The agent's value of `family` for the claim, with `extra` (`reason="x"`) among its labels.
fn metric(node: &support::realnode::Node, v: &Vol, family: &str, extra: &str) -> Option<f64> {
    let (_, ip, _) = agent_pod(node, Duration::from_secs(60));
    let (_, body) = agent_get(&ip, "/metrics")?;
    let claim = format!("persistentvolumeclaim=\"{}\"", v.claim);
    let ns = format!("namespace=\"{}\"", v.ns);
    body.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| l.contains(&claim) && l.contains(&ns) && l.contains(extra))
        .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
}

fn still(node: &support::realnode::Node, v: &Vol, size: u64, for_: Duration) {
    std::thread::sleep(for_);
    let c = claim_json(node, v);
    assert_eq!(request(&c), size, "grew while blocked: {c}");
}

/// CloudNativePG's layout (data and WAL volumes, uid 26): a primary and two streaming replicas
/// made through physical slots, classified with no credentials; each data volume filled grows;
/// a replica deleted for good leaves its slot retaining WAL, and the primary's WAL volume,
/// filled past its threshold, is held back naming the slot until the slot is dropped; then the
/// primary's pod deleted and a replica promoted: its role is read as primary.
#[test]
#[ignore = "issue 34, open: on the real node the WAL volume's crossing grew once with the stale slot already read as inactive (later scans block it); runs with --ignored until that is found"]
fn cloudnativepg_primary_replicas_a_stale_slot_and_a_promotion() {
    let Some((env, _hold)) = node("cloudnativepg_primary_replicas") else {
        return;
    };
    let node = &env.node;
    let ns = "pg-cnpg";
    namespace(node, ns);
    let spec = |instance, role| InstanceSpec {
        layout: Layout::CloudNativePG,
        cluster: "pg",
        instance,
        role,
        annotations: WAL_POLICY,
        size_mi: 300,
    };
    let primary = instance(node, ns, &spec("pg-1", Role::Primary));
    let replica = |name, slot| {
        instance(
            node,
            ns,
            &spec(
                name,
                Role::Replica {
                    primary_ip: &primary.ip,
                    slot,
                },
            ),
        )
    };
    let standby = replica("pg-2", "_cnpg_pg_2");
    let gone = replica("pg-3", "_cnpg_pg_3");
    assert_eq!(
        primary.sql_ok("select string_agg(slot_name || ':' || active, ',' order by slot_name) from pg_replication_slots"),
        "_cnpg_pg_2:true,_cnpg_pg_3:true"
    );
    assert_eq!(standby.sql_ok("select pg_is_in_recovery()"), "t");

    // Classified from the volumes alone: the WAL volumes hold WAL, the data volumes do not.
    for (i, role) in [
        (&primary, "primary"),
        (&standby, "standby"),
        (&gone, "standby"),
    ] {
        let r = report_until(node, i.wal_volume(), "the WAL volume's server role", |r| {
            r["wal"]["role"] == role
        });
        assert_eq!(r["role"], "wal", "{r}");
        assert_eq!(r["postgres_cluster"], "pg", "{r}");
        let d = report(node, &i.data);
        assert_eq!(d["role"], "data", "{d}");
    }

    // Filled, each data volume grows (WAL is elsewhere: nothing to acknowledge).
    for i in [&primary, &standby] {
        fill_to(&i.data.mount(), 85, "fill");
        wait_grown(node, &i.data, 300 * MI, Duration::from_secs(60));
    }

    // pg-3 gone for good; its slot stays and holds WAL back as the primary writes. From the
    // volume the slot is in use until it has stood still for three of the server's
    // checkpoint_timeouts (30 s in the image) while WAL advanced.
    node.kubectl(&["-n", ns, "delete", "pod", "pg-3", "--wait=true"])
        .expect("delete pg-3");
    write_wal(&primary, 120);
    let wal = primary.wal_volume();
    let slot_state = |r: &Value, name: &str| -> Option<String> {
        r["wal"]["slots"]
            .as_array()?
            .iter()
            .find(|s| s["slot_name"] == name)
            .map(|s| s["activity"].as_str().unwrap_or("").to_owned())
    };
    report_until(node, wal, "the stale slot read as inactive", |r| {
        // WAL keeps advancing, as on a live primary.
        let _ = primary.sql("select pg_logical_emit_message(false, 'headroom', 'tick')");
        slot_state(r, "_cnpg_pg_3").as_deref() == Some("inactive")
    });
    fill_to(&wal.mount(), 85, "fill");
    wait_blocked(node, wal, "wal_slot_retention");
    let c = claim_json(node, wal);
    let slots = status_field(&c, "wal").unwrap_or_default();
    assert!(
        slots.contains("_cnpg_pg_3"),
        "the status names the slot: {slots}"
    );
    assert!(
        events(node, wal)
            .iter()
            .any(|e| e.starts_with("ResizeBlocked") && e.contains("_cnpg_pg_3")),
        "{:?}",
        events(node, wal)
    );
    assert_eq!(
        metric(
            node,
            wal,
            "headroom_volume_resize_blocked",
            "reason=\"wal_slot_retention\""
        ),
        Some(1.0)
    );
    let retained = metric(
        node,
        wal,
        "headroom_wal_slot_retention_bytes",
        "slot=\"_cnpg_pg_3\"",
    )
    .expect("the slot's retention metric");
    assert!(retained > 80.0 * MI as f64, "{retained}");
    let held = request(&claim_json(node, wal));
    still(node, wal, held, Duration::from_secs(10));

    // The slot dropped (its WAL freed at the checkpoint), the volume filled again: it grows.
    primary.sql_ok("select pg_drop_replication_slot('_cnpg_pg_3')");
    primary.sql_ok("checkpoint");
    fill_to(&wal.mount(), 90, "fill-again");
    wait_grown(node, wal, held, Duration::from_secs(60));

    // The primary's pod deleted, the standby promoted: read as a primary from its volumes.
    node.kubectl(&["-n", ns, "delete", "pod", "pg-1", "--wait=true"])
        .expect("delete pg-1");
    node.kubectl(&[
        "-n",
        ns,
        "exec",
        "pg-2",
        "--",
        "pg_ctl",
        "promote",
        "-w",
        "-D",
        "/var/lib/postgresql/data/pgdata",
    ])
    .expect("pg_ctl promote");
    assert_eq!(standby.sql_ok("select pg_is_in_recovery()"), "f");
    report_until(
        node,
        standby.wal_volume(),
        "the promoted server read as primary",
        |r| r["wal"]["role"] == "primary",
    );
}

/// `archive_command` made to fail with `ALTER SYSTEM` while WAL is written: the WAL volume,
/// filled, is held back once more than maxPendingWALFiles segments wait; archiving fixed, the
/// backlog drains and it grows.
#[test]
fn cloudnativepg_failing_archive_holds_the_wal_volume_until_fixed() {
    let Some((env, _hold)) = node("cloudnativepg_failing_archive") else {
        return;
    };
    let node = &env.node;
    let ns = "pg-archive";
    namespace(node, ns);
    let pg = instance(
        node,
        ns,
        &InstanceSpec {
            layout: Layout::CloudNativePG,
            cluster: "arch",
            instance: "arch-1",
            role: Role::Primary,
            annotations: WAL_POLICY,
            size_mi: 300,
        },
    );
    pg.sql_ok("alter system set archive_command = '/bin/false'");
    pg.sql_ok("select pg_reload_conf()");
    for _ in 0..6 {
        write_wal(&pg, 2);
    }
    let wal = pg.wal_volume();
    fill_to(&wal.mount(), 85, "fill");
    wait_blocked(node, wal, "wal_pending_files");
    let r = report(node, wal);
    assert!(
        r["wal"]["pending_files"].as_u64() >= Some(4),
        "{}",
        r["wal"]
    );
    assert_eq!(r["wal"]["archive_mode"], "on", "{}", r["wal"]);
    assert_eq!(
        metric(
            node,
            wal,
            "headroom_volume_resize_blocked",
            "reason=\"wal_pending_files\""
        ),
        Some(1.0)
    );
    still(node, wal, 300 * MI, Duration::from_secs(10));

    pg.sql_ok("alter system reset archive_command");
    pg.sql_ok("select pg_reload_conf()");
    // The reload and a segment switch wake the archiver (it waits a minute after failures).
    write_wal(&pg, 1);
    report_until(node, wal, "the backlog archived", |r| {
        r["wal"]["pending_files"] == 0
    });
    // Archived segments are recycled at the checkpoint: the volume filled again, it grows.
    pg.sql_ok("checkpoint");
    fill_to(&wal.mount(), 90, "fill-again");
    wait_grown(node, wal, 300 * MI, Duration::from_secs(60));
}

/// Zalando's, Crunchy's (with and without a WAL volume) and Bitnami's layouts, each with its
/// own uid: every data directory and WAL directory found where the operator puts it, read from
/// the volume (`pg_wal` read, its backlog counted), and the server read as a primary.
#[test]
fn spilo_crunchy_and_bitnami_layouts_are_found_and_classified() {
    let Some((env, _hold)) = node("spilo_crunchy_and_bitnami_layouts") else {
        return;
    };
    let node = &env.node;
    let ns = "pg-layouts";
    namespace(node, ns);
    let ack = format!("{WAL_POLICY}    headroom.dev/wal-safety-acknowledge-wal-risk: \"true\"\n");
    for (layout, cluster, pod) in [
        (Layout::Spilo, "acid-main", "acid-main-0"),
        (Layout::Crunchy, "hippo", "hippo-00-abcd-0"),
        (Layout::CrunchyNoWalVolume, "rhino", "rhino-00-wxyz-0"),
        (Layout::Bitnami, "bn", "bn-postgresql-0"),
    ] {
        let i = instance(
            node,
            ns,
            &InstanceSpec {
                layout,
                cluster,
                instance: pod,
                role: Role::Primary,
                annotations: &ack,
                size_mi: 300,
            },
        );
        assert!(
            i.pgdata_on_host().join("PG_VERSION").is_file(),
            "{layout:?}"
        );
        // The volume holding WAL: its pg_wal read (a backlog counted, possibly 0) and the
        // server's role read beside it.
        let w = report_until(node, i.wal_volume(), "the WAL read from the volume", |r| {
            r["wal"]["role"] == "primary" && r["wal"]["pending_files"].is_u64()
        });
        assert_eq!(w["wal"]["wal_on_volume"], true, "{layout:?}: {w}");
        assert_eq!(w["postgres_cluster"], cluster, "{layout:?}: {w}");
        let d = report(node, &i.data);
        assert_eq!(d["role"], "data", "{layout:?}: {d}");
        if let Some(wal) = &i.wal {
            assert_eq!(w["role"], "wal", "{layout:?}: {w}");
            assert!(
                d["wal"].is_null(),
                "{layout:?}: WAL is on {}: {d}",
                wal.claim
            );
        }
    }
}
