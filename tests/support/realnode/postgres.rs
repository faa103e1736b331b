//! PostgreSQL pods on the real node, in each operator's layout (issue 34): the image
//! `scripts/pg-image.sh` builds (`HEADROOM_PG_IMAGE`; its entrypoint `pg-run` makes the data
//! directory as the operator does and runs the server in the foreground), claims and pods with
//! the operator's paths, uid and labels, and SQL from the host over the pod network.
//!
//! The layouts, as each operator's own source gives them (the commits read are named in
//! docs/postgres.md, "Operator layouts as tested"; paths relative to each repository):
//! - CloudNativePG (cloudnative-pg/cloudnative-pg): the data volume at `/var/lib/postgresql/data`
//!   with PGDATA `.../data/pgdata` and the WAL volume at `/var/lib/postgresql/wal` whose `pg_wal`
//!   `--waldir` points into (`pkg/specs/volumes.go`, `pkg/specs/pods.go` `PgDataPath`); uid and
//!   gid 26 (`api/v1/cluster_types.go` `DefaultPostgresUID`); claims `<instance>` and
//!   `<instance>-wal` labelled `cnpg.io/cluster`, `cnpg.io/instanceName`, `cnpg.io/pvcRole`
//!   (`PG_DATA`, `PG_WAL`) and `app.kubernetes.io/name: postgresql`
//!   (`pkg/reconciler/persistentvolumeclaim/calculator.go`); pods also `cnpg.io/instanceRole`
//!   (`pkg/utils/labels_annotations.go`); a replica's slot `_cnpg_<instance>` with every run of
//!   `[^a-z0-9_]` made `_` (`api/v1/cluster_funcs.go` `GetSlotNameFromInstanceName`).
//! - Zalando (zalando/postgres-operator, zalando/spilo): one volume `pgdata` at
//!   `/home/postgres/pgdata`, PGDATA `pgroot/data` below it (operator
//!   `pkg/util/constants/postgresql.go`, spilo `postgres-appliance/Dockerfile`); pods and the
//!   claim template labelled `application: spilo`, `cluster-name`, `team`
//!   (`pkg/cluster/k8sres.go`), `spilo-role` set by Patroni; claims `pgdata-<cluster>-<n>`. The
//!   operator sets no uid by default (Spilo starts as root and drops to postgres); 101:103 is the
//!   uid and gid its documentation gives (`docs/reference/operator_parameters.md`).
//! - Crunchy PGO v5 (CrunchyData/postgres-operator): `/pgdata` with PGDATA `/pgdata/pg<major>`,
//!   and WAL in `/pgwal/pg<major>_wal` on a WAL volume, or without one in `/pgdata/pg<major>_wal`
//!   beside the data directory (`internal/postgres/config.go` `WALDirectory`); uid 26 (the image's
//!   `USER 26`) with fsGroup 26; one StatefulSet per instance, pod `<instance>-0`, claims
//!   `<instance>-pgdata` / `-pgwal` labelled `postgres-operator.crunchydata.com/{cluster,
//!   instance-set,instance,data=postgres}` and `role=pgdata|pgwal`
//!   (`internal/controller/postgrescluster/postgres.go`); Patroni labels the pod `role=master`.
//! - Bitnami (bitnami/charts `bitnami/postgresql`): `/bitnami/postgresql` with PGDATA `data`
//!   below it, uid and gid 1001 (`values.yaml`); the claim template `data` carries no labels of
//!   its own, so a claim `data-<release>-postgresql-0` has the StatefulSet selector's
//!   `app.kubernetes.io/{name: postgresql,instance,component: primary}`.

use std::path::PathBuf;
use std::time::Duration;

use super::scenario::{Vol, VolSpec, claim, vol_of};
use super::{Node, Parts, wait_for_cmd};

pub const PG_IMAGE: &str = "headroom.test/postgres:15";
const PSQL: &str = "/usr/lib/postgresql/15/bin/psql";

/// The node's parts with PostgreSQL's image, or `None` (skip) off CI; with CI set a missing
/// image fails the test.
pub fn parts(test: &str) -> Option<Parts> {
    let parts = super::parts(test)?;
    if parts.pg_image.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!(
                "{test}: needs PostgreSQL's image (scripts/pg-image.sh, HEADROOM_PG_IMAGE), and CI is set"
            );
        }
        eprintln!("skipping {test}: no PostgreSQL image (scripts/pg-image.sh, HEADROOM_PG_IMAGE)");
        return None;
    }
    Some(parts)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    CloudNativePG,
    Spilo,
    /// Crunchy PGO v5 with a WAL volume (`walVolumeClaimSpec`).
    Crunchy,
    /// Crunchy PGO v5 without one: WAL beside the data directory on the data volume.
    CrunchyNoWalVolume,
    Bitnami,
}

/// Where one layout keeps things inside the pod.
struct Paths {
    uid: u32,
    gid: u32,
    data_mount: &'static str,
    pgdata: &'static str,
    wal_mount: Option<&'static str>,
    waldir: Option<&'static str>,
}

impl Layout {
    fn paths(self) -> Paths {
        let (uid, gid, data_mount, pgdata) = match self {
            Layout::CloudNativePG => (
                26,
                26,
                "/var/lib/postgresql/data",
                "/var/lib/postgresql/data/pgdata",
            ),
            Layout::Spilo => (
                101,
                103,
                "/home/postgres/pgdata",
                "/home/postgres/pgdata/pgroot/data",
            ),
            Layout::Crunchy | Layout::CrunchyNoWalVolume => (26, 26, "/pgdata", "/pgdata/pg15"),
            Layout::Bitnami => (
                1001,
                1001,
                "/bitnami/postgresql",
                "/bitnami/postgresql/data",
            ),
        };
        let (wal_mount, waldir) = match self {
            Layout::CloudNativePG => (
                Some("/var/lib/postgresql/wal"),
                Some("/var/lib/postgresql/wal/pg_wal"),
            ),
            Layout::Crunchy => (Some("/pgwal"), Some("/pgwal/pg15_wal")),
            Layout::CrunchyNoWalVolume => (None, Some("/pgdata/pg15_wal")),
            Layout::Spilo | Layout::Bitnami => (None, None),
        };
        Paths {
            uid,
            gid,
            data_mount,
            pgdata,
            wal_mount,
            waldir,
        }
    }

    /// The claims' names for the pod `pod` (data, then WAL) and the cluster.
    fn claim_names(self, pod: &str) -> (String, String) {
        let crunchy = pod.strip_suffix("-0").unwrap_or(pod);
        match self {
            Layout::CloudNativePG => (pod.to_owned(), format!("{pod}-wal")),
            Layout::Spilo => (format!("pgdata-{pod}"), String::new()),
            Layout::Crunchy | Layout::CrunchyNoWalVolume => {
                (format!("{crunchy}-pgdata"), format!("{crunchy}-pgwal"))
            }
            Layout::Bitnami => (format!("data-{pod}"), String::new()),
        }
    }

    /// The labels the operator puts on the pod (`pvc_role` None) or on a claim.
    fn labels(self, cluster: &str, pod: &str, primary: bool, pvc_role: Option<&str>) -> String {
        let crunchy = "postgres-operator.crunchydata.com";
        let role = |p: &str, r: &str| if primary { p.to_owned() } else { r.to_owned() };
        let mut l: Vec<String> = match self {
            Layout::CloudNativePG => vec![
                format!("cnpg.io/cluster: {cluster}"),
                format!("cnpg.io/instanceName: {pod}"),
                "app.kubernetes.io/name: postgresql".into(),
                format!("app.kubernetes.io/instance: {cluster}"),
            ],
            Layout::Spilo => vec![
                "application: spilo".into(),
                format!("cluster-name: {cluster}"),
                "team: acid".into(),
            ],
            Layout::Crunchy | Layout::CrunchyNoWalVolume => vec![
                format!("{crunchy}/cluster: {cluster}"),
                format!("{crunchy}/instance-set: \"00\""),
                format!(
                    "{crunchy}/instance: {}",
                    pod.strip_suffix("-0").unwrap_or(pod)
                ),
                format!("{crunchy}/data: postgres"),
            ],
            Layout::Bitnami => vec![
                "app.kubernetes.io/name: postgresql".into(),
                format!("app.kubernetes.io/instance: {cluster}"),
                format!("app.kubernetes.io/component: {}", role("primary", "read")),
            ],
        };
        match (self, pvc_role) {
            (Layout::CloudNativePG, Some(r)) => l.push(format!("cnpg.io/pvcRole: {r}")),
            (Layout::CloudNativePG, None) => l.push(format!(
                "cnpg.io/instanceRole: {}",
                role("primary", "replica")
            )),
            (Layout::Spilo, None) => l.push(format!("spilo-role: {}", role("master", "replica"))),
            (Layout::Crunchy | Layout::CrunchyNoWalVolume, r) => l.push(format!(
                "{crunchy}/role: {}",
                r.map(str::to_owned)
                    .unwrap_or_else(|| role("master", "replica"))
            )),
            _ => {}
        }
        let mut out = String::from("  labels:\n");
        for x in l {
            out.push_str(&format!("    {x}\n"));
        }
        out
    }

    /// The data directory below the data volume's mount `mount` (as the host sees it).
    fn pgdata_below(self, mount: &std::path::Path) -> PathBuf {
        let p = self.paths();
        let rel = p.pgdata.strip_prefix(p.data_mount).unwrap_or("");
        mount.join(rel.trim_start_matches('/'))
    }

    fn pvc_roles(self) -> (Option<&'static str>, Option<&'static str>) {
        match self {
            Layout::CloudNativePG => (Some("PG_DATA"), Some("PG_WAL")),
            Layout::Crunchy | Layout::CrunchyNoWalVolume => (Some("pgdata"), Some("pgwal")),
            _ => (None, None),
        }
    }
}

/// What an instance is started as.
pub enum Role<'a> {
    Primary,
    /// A streaming replica of the primary at this pod IP, made with `pg_basebackup` through the
    /// physical slot of this name (created by `pg_basebackup -C`).
    Replica {
        primary_ip: &'a str,
        slot: &'a str,
    },
    /// The same base backup, left as `pg_basebackup` wrote it (`backup_label`, `standby.signal`)
    /// with no server started: a restore that has not begun its recovery.
    BaseBackup {
        primary_ip: &'a str,
        slot: &'a str,
    },
}

pub struct InstanceSpec<'a> {
    pub layout: Layout,
    pub cluster: &'a str,
    pub instance: &'a str,
    pub role: Role<'a>,
    /// Annotation lines for every claim of the instance (indented by 4, under `annotations:`).
    pub annotations: &'a str,
    pub size_mi: u64,
    /// Run as a StatefulSet named after the cluster (`instance` must then be `<cluster>-0`).
    pub statefulset: bool,
    /// A Secret with `tls.crt` and `tls.key` the server serves TLS with.
    pub tls_secret: Option<&'a str>,
}

impl<'a> InstanceSpec<'a> {
    /// A bare pod of 300Mi claims, no TLS.
    pub fn new(
        layout: Layout,
        cluster: &'a str,
        instance: &'a str,
        role: Role<'a>,
        annotations: &'a str,
    ) -> Self {
        InstanceSpec {
            layout,
            cluster,
            instance,
            role,
            annotations,
            size_mi: 300,
            statefulset: false,
            tls_secret: None,
        }
    }
}

/// A PostgreSQL instance running in a pod on the node.
pub struct Instance {
    pub ns: String,
    pub pod: String,
    pub pod_uid: String,
    pub ip: String,
    pub data: Vol,
    pub wal: Option<Vol>,
    pub layout: Layout,
}

impl Instance {
    /// The data directory as the host sees it through the data volume's mount.
    pub fn pgdata_on_host(&self) -> PathBuf {
        self.layout.pgdata_below(&self.data.mount())
    }

    /// The volume WAL is written to.
    pub fn wal_volume(&self) -> &Vol {
        self.wal.as_ref().unwrap_or(&self.data)
    }

    /// One SQL statement over the pod network, as the superuser (trust on the test's pod
    /// network only): its unaligned output, or psql's error.
    pub fn sql(&self, statement: &str) -> Result<String, String> {
        sql_at(&self.ip, statement)
    }

    pub fn sql_ok(&self, statement: &str) -> String {
        self.sql(statement)
            .unwrap_or_else(|e| panic!("{} on {}: {e}", statement, self.pod))
    }
}

pub fn sql_at(ip: &str, statement: &str) -> Result<String, String> {
    let out = std::process::Command::new("timeout")
        .args([
            "30", PSQL, "-h", ip, "-U", "postgres", "-d", "postgres", "-XAtq", "-c",
        ])
        .arg(statement)
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The instance's claims (bound to the test driver's volumes), its pod, and the server answering
/// SQL on the pod's IP.
pub fn instance(node: &Node, ns: &str, spec: &InstanceSpec) -> Instance {
    let layout = spec.layout;
    let paths = layout.paths();
    let primary = matches!(spec.role, Role::Primary);
    let (data_name, wal_name) = layout.claim_names(spec.instance);
    let (data_role, wal_role) = layout.pvc_roles();
    let meta = |role: Option<&str>| {
        format!(
            "  annotations:\n{}{}",
            spec.annotations,
            layout.labels(spec.cluster, spec.instance, primary, role)
        )
    };
    let vol = |name: &str, role: Option<&str>| {
        let m = meta(role);
        claim(
            node,
            ns,
            name,
            &VolSpec {
                size_mi: spec.size_mi,
                claim_meta: &m,
                file: None,
                offline: false,
            },
        );
    };
    vol(&data_name, data_role);
    let has_wal = paths.wal_mount.is_some();
    if has_wal {
        vol(&wal_name, wal_role);
    }
    let pod = pod_yaml(ns, spec, &data_name, has_wal.then_some(wal_name.as_str()));
    node.apply(&pod);
    let (uid, ip) = wait_for_cmd(
        Duration::from_secs(180),
        "the PostgreSQL pod running",
        || {
            let p = node.get_json(&["-n", ns, "pod", spec.instance]);
            (p["status"]["phase"] == "Running")
                .then(|| {
                    Some((
                        p["metadata"]["uid"].as_str()?.to_owned(),
                        p["status"]["podIP"].as_str()?.to_owned(),
                    ))
                })
                .flatten()
        },
    );
    let data_host = || layout.pgdata_below(&vol_of(ns, &data_name, &uid).mount());
    if matches!(spec.role, Role::BaseBackup { .. }) {
        wait_for_cmd(Duration::from_secs(180), "the base backup written", || {
            data_host().join("backup_label").is_file().then_some(())
        });
    } else {
        wait_for_cmd(
            Duration::from_secs(180),
            "the PostgreSQL server answering over the pod network",
            || sql_at(&ip, "select 1").ok().filter(|r| r == "1"),
        );
    }
    Instance {
        ns: ns.to_owned(),
        pod: spec.instance.to_owned(),
        pod_uid: uid.clone(),
        ip,
        data: vol_of(ns, &data_name, &uid),
        wal: has_wal.then(|| vol_of(ns, &wal_name, &uid)),
        layout,
    }
}

/// The instance's volumes (`volumes:` entries) and the container's mounts of them, and the
/// directories the init container gives the server's uid.
fn volumes(
    spec: &InstanceSpec,
    data_claim: &str,
    wal_claim: Option<&str>,
) -> (String, String, String) {
    let p = spec.layout.paths();
    let mut mounts = format!("\n        - {{name: pgdata, mountPath: {}}}", p.data_mount);
    let mut volumes =
        format!("\n    - {{name: pgdata, persistentVolumeClaim: {{claimName: {data_claim}}}}}");
    let mut roots = p.data_mount.to_owned();
    if let (Some(claim), Some(at)) = (wal_claim, p.wal_mount) {
        mounts.push_str(&format!("\n        - {{name: pgwal, mountPath: {at}}}"));
        volumes.push_str(&format!(
            "\n    - {{name: pgwal, persistentVolumeClaim: {{claimName: {claim}}}}}"
        ));
        roots.push(' ');
        roots.push_str(at);
    }
    if let Some(secret) = spec.tls_secret {
        // 0640 (decimal 416), root's and the server's group: Postgres accepts a key so owned.
        volumes.push_str(&format!(
            "\n    - {{name: tls, secret: {{secretName: {secret}, defaultMode: 416}}}}"
        ));
    }
    (mounts, volumes, roots)
}

/// `pg-run`'s environment.
fn env(spec: &InstanceSpec) -> String {
    let p = spec.layout.paths();
    let role = if matches!(spec.role, Role::Primary) {
        "primary"
    } else {
        "replica"
    };
    let mut env = format!(
        "\n        - {{name: PGDATA, value: {}}}\n        - {{name: PG_ROLE, value: {role}}}",
        p.pgdata
    );
    if let Some(w) = p.waldir {
        env.push_str(&format!("\n        - {{name: PG_WALDIR, value: {w}}}"));
    }
    if let Role::Replica { primary_ip, slot } | Role::BaseBackup { primary_ip, slot } = spec.role {
        env.push_str(&format!(
            "\n        - {{name: PG_PRIMARY, value: \"{primary_ip}\"}}\n        - {{name: PG_SLOT, value: {slot}}}"
        ));
    }
    if matches!(spec.role, Role::BaseBackup { .. }) {
        env.push_str("\n        - {name: PG_HOLD, value: \"1\"}");
    }
    if spec.tls_secret.is_some() {
        env.push_str(
            "\n        - {name: PG_EXTRA_CONF, value: \"ssl = on\\nssl_cert_file = '/tls/tls.crt'\\nssl_key_file = '/tls/tls.key'\"}",
        );
    }
    env
}

/// The pod, bare or (`spec.statefulset`) as the one replica of a StatefulSet named after the
/// cluster, as Zalando's operator runs it (its pods' controller is that StatefulSet).
fn pod_yaml(ns: &str, spec: &InstanceSpec, data_claim: &str, wal_claim: Option<&str>) -> String {
    let p = spec.layout.paths();
    let (uid, gid) = (p.uid, p.gid);
    let (mut mounts, volumes, roots) = volumes(spec, data_claim, wal_claim);
    let init_mounts = mounts.clone();
    if spec.tls_secret.is_some() {
        mounts.push_str("\n        - {name: tls, mountPath: /tls, readOnly: true}");
    }
    let parent = std::path::Path::new(p.pgdata)
        .parent()
        .map(|x| x.display().to_string())
        .unwrap_or_default();
    let env = env(spec);
    let labels = spec.layout.labels(
        spec.cluster,
        spec.instance,
        matches!(spec.role, Role::Primary),
        None,
    );
    // The Secret's files in the server's group (TLS only: elsewhere the volumes stay as the
    // init container leaves them).
    let fs_group = if spec.tls_secret.is_some() {
        format!("\n  securityContext: {{fsGroup: {gid}}}")
    } else {
        String::new()
    };
    let pod_spec = format!(
        r#"  terminationGracePeriodSeconds: 5{fs_group}
  initContainers:
    - name: own-the-volumes
      image: {PG_IMAGE}
      imagePullPolicy: Never
      securityContext: {{runAsUser: 0, runAsGroup: 0}}
      command: [/bin/sh, -c, "mkdir -p {parent} && chown {uid}:{gid} {roots} {parent} && chmod 0700 {roots} {parent}"]
      volumeMounts:{init_mounts}
  containers:
    - name: postgres
      image: {PG_IMAGE}
      imagePullPolicy: Never
      securityContext: {{runAsUser: {uid}, runAsGroup: {gid}}}
      env:{env}
      volumeMounts:{mounts}
  volumes:{volumes}
"#
    );
    if !spec.statefulset {
        return format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n  namespace: {ns}\n{labels}spec:\n{pod_spec}",
            spec.instance
        );
    }
    // Zalando's StatefulSet selects on `application` and `cluster-name` (`pkg/cluster/k8sres.go`).
    assert_eq!(
        spec.layout,
        Layout::Spilo,
        "only Zalando's StatefulSet is modelled"
    );
    let indent = |text: &str| -> String { text.lines().map(|l| format!("    {l}\n")).collect() };
    format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: {cluster}\n  namespace: {ns}\nspec:\n  serviceName: {cluster}\n  replicas: 1\n  selector:\n    matchLabels:\n      application: spilo\n      cluster-name: {cluster}\n  template:\n    metadata:\n{labels}    spec:\n{spec}",
        cluster = spec.cluster,
        labels = indent(&labels),
        spec = indent(&pod_spec),
    )
}

/// Writes at least `mib` MiB of WAL on the primary (non-transactional logical messages: WAL
/// and nothing else, so the data volume does not fill) and switches segments.
pub fn write_wal(primary: &Instance, mib: u64) {
    // The messages are compressed on their way into WAL (about 0.84 of their size, measured on
    // 15): a quarter more is asked for.
    let n = mib + mib / 4 + 1;
    primary.sql_ok(&format!(
        "select count(pg_logical_emit_message(false, 'headroom', repeat('x', 1048576))) from generate_series(1, {n})"
    ));
    primary.sql_ok("select pg_switch_wal()");
    primary.sql_ok("checkpoint");
}
