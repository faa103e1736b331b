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
use support::realnode::witness::{Witness, report_line, witness};

/// The node with headroom and PostgreSQL's image, shared with the other scenarios, and
/// namespace `ns` on it with the witness that prints it should the scenario fail; `None` when
/// the test skips off CI.
fn scenario(
    test: &str,
    ns: &str,
) -> Option<(&'static support::realnode::Node, Hold, Witness<'static>)> {
    support::realnode::postgres::parts(test)?;
    let (env, hold) = shared(test)?;
    let node: &'static support::realnode::Node = &env.node;
    namespace(node, ns);
    Some((node, hold, witness(node, &[ns])))
}

/// Opted in, small steps, and the WAL limits the faults below cross: a slot retaining more than
/// 64Mi (above the image's `max_wal_size` of 64MB, what a slot in use can hold between
/// checkpoints), more than three segments waiting for the archiver. Emergencies only past 95 %
/// (the default 1Gi free is more than every test volume has). No predictive growth: a base
/// backup streams WAL fast enough that the fill rate alone grew a WAL volume to its limit in one
/// step (seen in CI), and these scenarios are about WAL safety at the threshold.
const WAL_POLICY: &str = "    headroom.dev/enabled: \"true\"\n    headroom.dev/limit: 4Gi\n    headroom.dev/step: 200Mi\n    headroom.dev/wal-safety-max-slot-retention-bytes: 64Mi\n    headroom.dev/wal-safety-max-pending-wal-files: \"3\"\n    headroom.dev/emergency-grow-critical-threshold: \"95\"\n    headroom.dev/emergency-grow-critical-minimum-free: 1Mi\n    headroom.dev/trigger-predictive: \"false\"\n";

fn report(node: &support::realnode::Node, v: &Vol) -> Value {
    let (_, ip, _) = agent_pod(node, Duration::from_secs(60));
    reported(&ip, v, Duration::from_secs(60))
}

/// The agent's report of `v` once `ok` holds for it (the witness prints the rest on failure).
fn report_until(
    node: &support::realnode::Node,
    v: &Vol,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let start = std::time::Instant::now();
    let mut last = String::from("no Ready agent pod");
    loop {
        if let Some(r) = ready_agent_pod(node).and_then(|(_, ip, _)| {
            let r = reported_once(&ip, v);
            last = r.as_ref().map_or_else(
                || format!("{ip}: the claim not measured in /volumes"),
                report_line,
            );
            r
        }) && ok(&r)
        {
            return r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "{}/{}: {what}: not within 180 s; last report: {last}",
            v.ns,
            v.claim
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits for `done` on the claim; on timeout, fails with its status and the agent's report.
fn wait_claim(
    node: &support::realnode::Node,
    v: &Vol,
    what: &str,
    within: Duration,
    mut done: impl FnMut(&Value) -> bool,
) {
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for_cmd(within, what, || done(&claim_json(node, v)).then_some(()))
    }));
    if ok.is_err() {
        let c = claim_json(node, v);
        let status = &c["metadata"]["annotations"]["headroom.dev/status"];
        panic!(
            "{}/{}: {what}: not within {within:?}: status {status}",
            v.ns, v.claim
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

/// Keeps the volume 90 % full until it grows past `from`: the server goes on removing segments
/// it no longer needs (at each checkpoint, past `min_wal_size`), which would let a single fill
/// fall back under the line before the agent looks.
fn fill_up_until_grown(node: &support::realnode::Node, v: &Vol, from: u64) {
    let mut i = 0;
    wait_claim(node, v, "grown", Duration::from_secs(60), |c| {
        i += 1;
        fill_to(&v.mount(), 90, &format!("fill-again-{i}"));
        request(c) > from
    });
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
fn cloudnativepg_primary_replicas_a_stale_slot_and_a_promotion() {
    let ns = "pg-cnpg";
    let Some((node, _hold, _witness)) = scenario("cloudnativepg_primary_replicas", ns) else {
        return;
    };
    let spec =
        |instance, role| InstanceSpec::new(Layout::CloudNativePG, "pg", instance, role, WAL_POLICY);
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
    // About 100 MB: past the limit, yet leaving the 300Mi WAL volume under its line, so that
    // nothing grows it before the slot is seen standing still.
    write_wal(&primary, 96);
    let wal = primary.wal_volume();
    let slot_state = |r: &Value, name: &str| -> Option<String> {
        r["wal"]["slots"]
            .as_array()?
            .iter()
            .find(|s| s["slot_name"] == name)
            .map(|s| s["activity"].as_str().unwrap_or("").to_owned())
    };
    let t = std::time::Instant::now();
    report_until(node, wal, "the stale slot read as inactive", |r| {
        // WAL keeps advancing, as on a live primary.
        let _ = primary.sql("select pg_logical_emit_message(false, 'headroom', 'tick')");
        slot_state(r, "_cnpg_pg_3").as_deref() == Some("inactive")
    });
    eprintln!(
        "measured: replica deleted -> its slot read as inactive: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let t = std::time::Instant::now();
    fill_to(&wal.mount(), 85, "fill");
    wait_blocked(node, wal, "wal_slot_retention");
    eprintln!(
        "measured: filled past the line -> blocked (wal_slot_retention): {:.1} s",
        t.elapsed().as_secs_f64()
    );
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
    assert!(retained > 64.0 * MI as f64, "{retained}");
    let held = request(&claim_json(node, wal));
    still(node, wal, held, Duration::from_secs(10));

    // The slot dropped (its WAL freed at the checkpoint), the volume filled again: it grows.
    primary.sql_ok("select pg_drop_replication_slot('_cnpg_pg_3')");
    primary.sql_ok("checkpoint");
    let t = std::time::Instant::now();
    fill_up_until_grown(node, wal, held);
    eprintln!(
        "measured: slot dropped, filled again -> grown (PATCH): {:.1} s",
        t.elapsed().as_secs_f64()
    );

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
    let ns = "pg-archive";
    let Some((node, _hold, _witness)) = scenario("cloudnativepg_failing_archive", ns) else {
        return;
    };
    let pg = instance(
        node,
        ns,
        &InstanceSpec::new(
            Layout::CloudNativePG,
            "arch",
            "arch-1",
            Role::Primary,
            WAL_POLICY,
        ),
    );
    pg.sql_ok("alter system set archive_command = '/bin/false'");
    pg.sql_ok("select pg_reload_conf()");
    for _ in 0..6 {
        write_wal(&pg, 2);
    }
    let wal = pg.wal_volume();
    let t = std::time::Instant::now();
    fill_to(&wal.mount(), 85, "fill");
    wait_blocked(node, wal, "wal_pending_files");
    eprintln!(
        "measured: WAL volume filled with archiving failing -> blocked: {:.1} s",
        t.elapsed().as_secs_f64()
    );
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

    let t = std::time::Instant::now();
    pg.sql_ok("alter system reset archive_command");
    pg.sql_ok("select pg_reload_conf()");
    // The reload and a segment switch wake the archiver (it waits a minute after failures).
    write_wal(&pg, 1);
    report_until(node, wal, "the backlog archived", |r| {
        r["wal"]["pending_files"] == 0
    });
    eprintln!(
        "measured: archiving fixed -> the agent reads the backlog drained: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    // Archived segments are recycled at the checkpoint: the volume filled again, it grows.
    pg.sql_ok("checkpoint");
    let t = std::time::Instant::now();
    fill_up_until_grown(node, wal, 300 * MI);
    eprintln!(
        "measured: filled past the line, archiving healthy -> grown (PATCH): {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// Zalando's, Crunchy's (with and without a WAL volume) and Bitnami's layouts, each with its
/// own uid: every data directory and WAL directory found where the operator puts it, read from
/// the volume (`pg_wal` read, its backlog counted), and the server read as a primary.
#[test]
fn spilo_crunchy_and_bitnami_layouts_are_found_and_classified() {
    let ns = "pg-layouts";
    let Some((node, _hold, _witness)) = scenario("spilo_crunchy_and_bitnami_layouts", ns) else {
        return;
    };
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
            &InstanceSpec::new(layout, cluster, pod, Role::Primary, &ack),
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

/// The same promise with credentials, as docs/postgres.md documents them: a `pg_monitor` role
/// with a SCRAM password, the Secret `headroom-postgres` (password and the cluster's CA) and
/// `postgres.yaml` binding it to Zalando's cluster (a StatefulSet named after it) in one
/// namespace, `sslmode: verify-ca` against the server's own CA. SQL reaches the pod over the pod
/// network and both sources answer; a pod of the same name and labels in another namespace gets
/// no SQL.
#[test]
fn credentials_reach_their_own_cluster_over_tls_and_no_other() {
    if support::realnode::postgres::parts("credentials_reach_their_own_cluster").is_none() {
        return;
    }
    // The agent's pod is restarted to mount the new Secret: no other test may watch it then.
    let Some((env, _hold)) = alone("credentials_reach_their_own_cluster") else {
        return;
    };
    let node = &env.node;
    let _witness = witness(node, &["pg-creds", "pg-creds-other"]);
    let pki = node.dir.join("pg-creds-pki");
    support::realnode::pki::ca(&pki, "/CN=acid-main-ca");
    support::realnode::pki::serving(&pki, "acid-main", "DNS:acid-main");
    let password = "headroom-test-password-4f8a0c";
    let mut servers = Vec::new();
    for ns in ["pg-creds", "pg-creds-other"] {
        namespace(node, ns);
        let crt = format!(
            "--from-file=tls.crt={}",
            pki.join("acid-main.crt").display()
        );
        let key = format!(
            "--from-file=tls.key={}",
            pki.join("acid-main.key").display()
        );
        node.kubectl(&[
            "-n",
            ns,
            "create",
            "secret",
            "generic",
            "acid-main-tls",
            &crt,
            &key,
        ])
        .expect("tls secret");
        let ack =
            format!("{WAL_POLICY}    headroom.dev/wal-safety-acknowledge-wal-risk: \"true\"\n");
        let i = instance(
            node,
            ns,
            &InstanceSpec {
                statefulset: true,
                tls_secret: Some("acid-main-tls"),
                ..InstanceSpec::new(
                    Layout::Spilo,
                    "acid-main",
                    "acid-main-0",
                    Role::Primary,
                    &ack,
                )
            },
        );
        // The role the docs give, reachable only over TLS with SCRAM (first match in pg_hba).
        i.sql_ok(&format!(
            "create role headroom login password '{password}' in role pg_monitor"
        ));
        let hba = i.pgdata_on_host().join("pg_hba.conf");
        let old = std::fs::read_to_string(&hba).expect("pg_hba.conf");
        std::fs::write(
            &hba,
            format!("hostssl all headroom 0.0.0.0/0 scram-sha-256\nhost all headroom 0.0.0.0/0 reject\n{old}"),
        )
        .expect("write pg_hba.conf");
        i.sql_ok("select pg_reload_conf()");
        servers.push(i);
    }
    // From the host, as the agent will: verify-ca against the cluster's CA, SCRAM.
    let out = std::process::Command::new("/usr/lib/postgresql/15/bin/psql")
        .arg(format!(
            "host={} user=headroom dbname=postgres sslmode=verify-ca sslrootcert={} connect_timeout=5",
            servers[0].ip,
            pki.join("ca.crt").display()
        ))
        .args(["-XAtc", "select ssl from pg_stat_ssl where pid = pg_backend_pid()"])
        .env("PGPASSWORD", password)
        .output()
        .expect("psql");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "t", "{out:?}");

    let secret_pw = format!("--from-literal=password={password}");
    let secret_ca = format!("--from-file=ca.crt={}", pki.join("ca.crt").display());
    let _ = node.kubectl(&["-n", "headroom", "delete", "secret", "headroom-postgres"]);
    node.kubectl(&[
        "-n",
        "headroom",
        "create",
        "secret",
        "generic",
        "headroom-postgres",
        &secret_pw,
        &secret_ca,
    ])
    .expect("headroom-postgres");
    let conf = "clusters:\n  - namespace: pg-creds\n    cluster: acid-main\n    operator: zalando\n    user: headroom\n    passwordFile: /etc/headroom/postgres/password\n    sslmode: verify-ca\n    caFile: /etc/headroom/postgres/ca.crt\n";
    let patch = serde_json::json!({"data": {"postgres.yaml": conf}}).to_string();
    node.kubectl(&[
        "-n",
        "headroom",
        "patch",
        "configmap",
        "headroom",
        "--type",
        "merge",
        "-p",
        &patch,
    ])
    .expect("patch postgres.yaml");
    let (agent, _, _) = agent_pod(node, Duration::from_secs(60));
    node.kubectl(&["-n", "headroom", "delete", "pod", &agent, "--wait=true"])
        .expect("restart the agent");

    let ours = report_until(node, &servers[0].data, "both sources answering", |r| {
        r["wal"]["sources"]["sql"] == true && r["wal"]["sources"]["volume"] == true
    });
    assert!(ours["wal"]["disagreements"].is_array(), "{}", ours["wal"]);
    assert_eq!(ours["wal"]["role"], "primary", "{}", ours["wal"]);
    let other = report_until(node, &servers[1].data, "the other namespace's read", |r| {
        r["wal"]["sources"]["volume"] == true
    });
    assert_eq!(other["wal"]["sources"]["sql"], false, "{}", other["wal"]);

    // `headroom wal-health` in the agent's container, both sources side by side.
    let (agent, _, _) = agent_pod(node, Duration::from_secs(60));
    let dsn = format!(
        "host={} user=headroom dbname=postgres sslmode=require",
        servers[0].ip
    );
    let pgdata = servers[0].pgdata_on_host().display().to_string();
    let out = node
        .kubectl(&[
            "-n",
            "headroom",
            "exec",
            &agent,
            "--",
            "headroom",
            "wal-health",
            "--pgdata",
            &pgdata,
            "--dsn",
            &dsn,
            "--password-file",
            "/etc/headroom/postgres/password",
            "--ca-file",
            "/etc/headroom/postgres/ca.crt",
            "--format",
            "json",
        ])
        .expect("wal-health");
    let h: Value = serde_json::from_str(&out).expect("wal-health json");
    assert_eq!(h["by_source"]["sql"]["role"], "primary", "{h}");
    assert_eq!(h["by_source"]["volume"]["role"], "primary", "{h}");
    assert!(h["disagreements"].is_array(), "{h}");
}

/// A tenant's hostile files in its own data directory, planted while its server runs: a FIFO
/// as `postmaster.opts`, a slot whose `state` is a symlink to the host's `/etc/shadow`, and an
/// include of `/etc/shadow` in `postgresql.conf`. Each is named in the claim's report, nothing is
/// followed or hung on, and the instance beside it still grows when filled.
#[test]
fn a_tenants_hostile_files_are_named_and_block_nothing_else() {
    let ns = "pg-hostile";
    let Some((node, _hold, _witness)) = scenario("a_tenants_hostile_files", ns) else {
        return;
    };
    let ack = format!("{WAL_POLICY}    headroom.dev/wal-safety-acknowledge-wal-risk: \"true\"\n");
    let spec = |instance| InstanceSpec::new(Layout::Bitnami, "bn", instance, Role::Primary, &ack);
    let tenant = instance(node, ns, &spec("bn-a-postgresql-0"));
    let beside = instance(node, ns, &spec("bn-b-postgresql-0"));
    let pgdata = tenant.pgdata_on_host();
    let opts = pgdata.join("postmaster.opts");
    std::fs::remove_file(&opts).expect("postmaster.opts");
    nix::unistd::mkfifo(&opts, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let slot = pgdata.join("pg_replslot/evil");
    std::fs::create_dir_all(&slot).expect("slot dir");
    std::os::unix::fs::symlink("/etc/shadow", slot.join("state")).expect("symlink");
    let conf = pgdata.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).expect("postgresql.conf");
    text.push_str("include '/etc/shadow'\n");
    std::fs::write(&conf, text).expect("write postgresql.conf");
    for p in [&opts, &slot.join("state"), &conf] {
        let _ = nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            p.as_path(),
            Some(1001.into()),
            Some(1001.into()),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        );
    }

    let r = report_until(node, &tenant.data, "the hostile files named", |r| {
        let errors = r["wal"]["errors"].to_string();
        errors.contains("postmaster.opts")
            && errors.contains("pg_replslot/evil")
            && errors.contains("/etc/shadow (included by")
    });
    let errors = r["wal"]["errors"].to_string();
    assert!(
        !errors.contains("root:"),
        "read the host's /etc/shadow: {errors}"
    );
    assert_eq!(r["wal"]["role"], "primary", "{}", r["wal"]);
    // The instance beside it: measured, filled, grown.
    fill_to(&beside.data.mount(), 85, "fill");
    wait_grown(node, &beside.data, 300 * MI, Duration::from_secs(60));
}

/// A base backup taken through a slot and not yet started (`backup_label` and `standby.signal`
/// as `pg_basebackup -R` leaves them, no server): read as a standby restoring a backup, and its
/// WAL volume, filled, is not held back as a WAL fault. With predictive growth on, the fill is
/// the copy's and is not extrapolated (issue 40): the volume grows by its step, not to its limit,
/// and the status of both its volumes (the data volume's WAL is elsewhere) says it is restoring.
#[test]
fn a_base_backup_not_yet_started_is_classified_not_a_fault() {
    let ns = "pg-backup";
    let Some((node, _hold, _witness)) = scenario("a_base_backup_not_yet_started", ns) else {
        return;
    };
    let predictive = WAL_POLICY.replace(
        "trigger-predictive: \"false\"",
        "trigger-predictive: \"true\"",
    );
    let cnpg = Layout::CloudNativePG;
    let primary = instance(
        node,
        ns,
        &InstanceSpec::new(cnpg, "bk", "bk-1", Role::Primary, WAL_POLICY),
    );
    let from_primary = Role::BaseBackup {
        primary_ip: &primary.ip,
        slot: "_cnpg_bk_2",
    };
    let restore = instance(
        node,
        ns,
        &InstanceSpec::new(cnpg, "bk", "bk-2", from_primary, &predictive),
    );
    let wal = restore.wal_volume();
    let r = report_until(node, wal, "the restore read", |r| {
        r["wal"]["restoring_backup"] == true
    });
    assert_eq!(r["wal"]["role"], "standby", "{}", r["wal"]);
    fill_to(&wal.mount(), 85, "fill");
    wait_grown(node, wal, 300 * MI, Duration::from_secs(60));
    let c = claim_json(node, wal);
    let blocked = status_field(&c, "blockedReason").unwrap_or_default();
    assert!(!blocked.starts_with("wal_"), "{blocked}");
    // Its ordinary step (300Mi + 200Mi), at its group's size already: not the copy's rate
    // extrapolated over the lead time (which took such a volume to its 4Gi limit in one step).
    let status = &c["metadata"]["annotations"]["headroom.dev/status"];
    assert_eq!(request(&c), 500 * MI, "{status}");
    let restoring = status_field(&c, "restoring").unwrap_or_default();
    assert!(
        restoring.contains("restoring a base backup: grown by its step"),
        "{status}"
    );
    wait_claim(
        node,
        &restore.data,
        "the data volume's status saying it restores",
        Duration::from_secs(90),
        |c| status_field(c, "restoring").is_some_and(|r| r.contains("restoring a base backup")),
    );
}
