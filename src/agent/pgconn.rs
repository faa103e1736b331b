//! How to reach a Postgres instance on this node: the ConfigMap's `postgres.yaml` binds each
//! credential (a user and a password file from a Secret mounted into the DaemonSet) to one
//! cluster in one namespace, as its operator owns it.
//!
//! ```yaml
//! clusters:
//!   - { namespace: db, cluster: pg-main, operator: cloudnativepg, user: monitor,
//!       passwordFile: /etc/headroom/pg-main/password, sslmode: verify-ca,
//!       caFile: /etc/headroom/pg-main/ca.crt }
//! ```
//!
//! Labels are written by whoever creates the pod, so they choose nothing here: a credential is
//! used only for a pod in its namespace whose controller owner is the operator's object for that
//! cluster. There is no default credential: it would go to every namespace.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::postgres::sql::{SqlError, SqlTarget};

pub const KEY: &str = "postgres.yaml";

/// Who runs the cluster, and so which owner a pod of it has.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Operator {
    /// Pods owned by `Cluster` (`postgresql.cnpg.io/v1`) named after the cluster.
    CloudNativePG,
    /// Pods owned by the StatefulSet named after the `postgresql` (`acid.zalan.do`) object.
    Zalando,
    /// Pods owned by a StatefulSet `<cluster>-<instance set>-<suffix>` of a `PostgresCluster`.
    Crunchy,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    Disable,
    #[default]
    Prefer,
    Require,
    VerifyCa,
}

impl SslMode {
    fn libpq(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            // verify-ca is set up on the target after the DSN (tokio-postgres cannot parse it).
            SslMode::Require | SslMode::VerifyCa => "require",
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Credential {
    pub namespace: String,
    pub cluster: String,
    pub operator: Operator,
    pub user: String,
    pub password_file: PathBuf,
    #[serde(default = "default_port")]
    pub port: u16,
    #[serde(default = "default_dbname")]
    pub dbname: String,
    #[serde(default)]
    pub sslmode: SslMode,
    /// PEM CA bundle for `sslmode: verify-ca`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

fn default_port() -> u16 {
    5432
}
fn default_dbname() -> String {
    "postgres".into()
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Credentials {
    pub clusters: Vec<Credential>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    default: Option<IgnoredAny>,
    #[serde(default)]
    clusters: Vec<Credential>,
}

impl Credentials {
    /// Parses the ConfigMap key; an error names the ConfigMap, key and field.
    pub fn parse(configmap: &str, text: &str) -> Result<Self, String> {
        let at = format!("ConfigMap {configmap} key {KEY}");
        let raw: Raw = serde_saphyr::from_str(text).map_err(|e| format!("{at}: {e}"))?;
        if raw.default.is_some() {
            return Err(format!(
                "{at}: default: a credential must name the namespace and cluster it is for \
                 (a default would be sent to any namespace); list it under clusters"
            ));
        }
        for (i, c) in raw.clusters.iter().enumerate() {
            let field = |f: &str| format!("{at}: clusters[{i}].{f}");
            if c.namespace.trim().is_empty() || c.namespace.contains('*') {
                return Err(format!("{}: one namespace, by name", field("namespace")));
            }
            if c.cluster.trim().is_empty() || c.cluster.contains('*') {
                return Err(format!("{}: one cluster, by name", field("cluster")));
            }
            if c.sslmode == SslMode::VerifyCa && c.ca_file.is_none() {
                return Err(format!(
                    "{}: required with sslmode: verify-ca",
                    field("caFile")
                ));
            }
        }
        Ok(Credentials {
            clusters: raw.clusters,
        })
    }

    /// The credential bound to the namespace and owning cluster of `pod`, if any.
    pub fn for_pod(&self, pod: &Pod) -> Option<&Credential> {
        let ns = pod.metadata.namespace.as_deref()?;
        self.clusters
            .iter()
            .find(|c| c.namespace == ns && owned_by(pod, c.operator, &c.cluster))
    }
}

/// Whether `pod`'s controller is `operator`'s object for `cluster`. Only the pod is read: for
/// the StatefulSet-based operators the StatefulSet's own owner is not checked (that would need a
/// watch and RBAC on StatefulSets); the namespace binding is what keeps other tenants out.
pub fn owned_by(pod: &Pod, operator: Operator, cluster: &str) -> bool {
    let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    else {
        return false;
    };
    match operator {
        Operator::CloudNativePG => {
            owner.api_version == "postgresql.cnpg.io/v1"
                && owner.kind == "Cluster"
                && owner.name == cluster
        }
        Operator::Zalando => {
            owner.api_version == "apps/v1" && owner.kind == "StatefulSet" && owner.name == cluster
        }
        Operator::Crunchy => {
            owner.api_version == "apps/v1"
                && owner.kind == "StatefulSet"
                && owner
                    .name
                    .strip_prefix(cluster)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|rest| !rest.is_empty())
        }
    }
}

/// A target for the pod at `host`. Reads the password file and the CA file: blocking I/O.
pub fn target(cred: &Credential, host: &str) -> Result<SqlTarget, SqlError> {
    let dsn = format!(
        "host={host} port={} user={} dbname={} sslmode={}",
        cred.port,
        cred.user,
        cred.dbname,
        cred.sslmode.libpq()
    );
    let mut t = SqlTarget::from_dsn(&dsn)?;
    if let (SslMode::VerifyCa, Some(ca)) = (cred.sslmode, &cred.ca_file) {
        let shown = ca.display().to_string();
        let pem = std::fs::read(ca).map_err(|source| SqlError::CaFile {
            path: shown.clone(),
            source,
        })?;
        t.set_verify_ca(&shown, &pem)?;
    }
    t.set_password_file(&cred.password_file)?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    const TWO: &str = "clusters:\n  - { namespace: db, cluster: main, operator: cloudnativepg, user: m, passwordFile: /p }\n  - { namespace: other, cluster: z, operator: zalando, user: z, passwordFile: /q, port: 5433 }\n";

    fn pod(ns: &str, owner: Option<(&str, &str, &str)>, labels: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p.metadata.owner_references = owner.map(|(api_version, kind, name)| {
            vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: name.into(),
                controller: Some(true),
                ..Default::default()
            }]
        });
        p
    }

    #[test]
    fn a_credential_goes_only_to_its_namespace_and_owner() {
        let c = Credentials::parse("headroom/headroom", TWO).expect("parse");
        let cnpg = ("postgresql.cnpg.io/v1", "Cluster", "main");
        assert_eq!(
            c.for_pod(&pod("db", Some(cnpg), &[]))
                .map(|c| c.user.as_str()),
            Some("m")
        );
        // Another namespace, even owned by a Cluster of the same name: nothing.
        assert_eq!(c.for_pod(&pod("evil", Some(cnpg), &[])), None);
        // The right labels without the ownership: nothing.
        let labels = [
            ("cnpg.io/cluster", "main"),
            ("cnpg.io/instanceRole", "primary"),
        ];
        assert_eq!(c.for_pod(&pod("db", None, &labels)), None);
        let sts = ("apps/v1", "StatefulSet", "main");
        assert_eq!(c.for_pod(&pod("db", Some(sts), &labels)), None);
        // A lookalike owner kind or group.
        assert_eq!(
            c.for_pod(&pod("db", Some(("example.com/v1", "Cluster", "main")), &[])),
            None
        );
        assert_eq!(
            c.for_pod(&pod("other", Some(("apps/v1", "StatefulSet", "z")), &[]))
                .map(|c| c.port),
            Some(5433)
        );
    }

    #[test]
    fn crunchy_statefulsets_carry_the_cluster_as_a_prefix() {
        let set = |n| pod("db", Some(("apps/v1", "StatefulSet", n)), &[]);
        assert!(owned_by(
            &set("hippo-instance1-abcd"),
            Operator::Crunchy,
            "hippo"
        ));
        assert!(!owned_by(&set("hippo"), Operator::Crunchy, "hippo"));
        assert!(!owned_by(&set("hippo-"), Operator::Crunchy, "hippo"));
        assert!(!owned_by(
            &set("hippopotamus-x"),
            Operator::Crunchy,
            "hippo"
        ));
    }

    #[test]
    fn a_default_or_wildcard_is_an_error_naming_the_field() {
        let e = Credentials::parse("ns/cm", "default: { user: x, passwordFile: /p }\n")
            .expect_err("default");
        assert!(
            e.contains("ns/cm") && e.contains(KEY) && e.contains("default"),
            "{e}"
        );
        let e = Credentials::parse(
            "ns/cm",
            "clusters:\n  - { namespace: '*', cluster: a, operator: zalando, user: x, passwordFile: /p }\n",
        )
        .expect_err("wildcard");
        assert!(e.contains("clusters[0].namespace"), "{e}");
        let e = Credentials::parse(
            "ns/cm",
            "clusters:\n  - { namespace: a, cluster: a, operator: zalando, user: x, passwordFile: /p, sslmode: verify-ca }\n",
        )
        .expect_err("no CA");
        assert!(e.contains("clusters[0].caFile"), "{e}");
    }

    #[test]
    fn a_socket_directory_is_a_unix_target_and_a_pod_ip_is_not() {
        let dir = tempfile::tempdir().expect("dir");
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "secret\n").expect("write");
        let cred = Credential {
            namespace: "db".into(),
            cluster: "pg".into(),
            operator: Operator::CloudNativePG,
            user: "headroom".into(),
            password_file: pw,
            port: 5432,
            dbname: "postgres".into(),
            sslmode: SslMode::Require,
            ca_file: None,
        };
        assert!(
            target(&cred, "/run/postgresql")
                .expect("target")
                .unix_only()
        );
        assert!(!target(&cred, "10.0.0.7").expect("target").unix_only());
    }

    #[test]
    fn typos_are_errors_naming_the_configmap() {
        let e = Credentials::parse(
            "ns/cm",
            "clusters:\n  - { namespace: a, cluster: a, operator: zalando, usr: x, passwordFile: /p }\n",
        )
        .expect_err("typo");
        assert!(e.contains("ns/cm") && e.contains(KEY), "{e}");
    }
}
