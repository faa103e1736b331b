//! How to reach a Postgres instance on this node: the ConfigMap's `postgres.yaml` names a user and
//! a password file (a Secret mounted into the DaemonSet), by default or per cluster.
//!
//! ```yaml
//! default:  { user: headroom, passwordFile: /etc/headroom/postgres/password }
//! clusters:
//!   pg-main: { user: monitor, passwordFile: /etc/headroom/pg-main/password, sslmode: require }
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::postgres::sql::{SqlError, SqlTarget};

pub const KEY: &str = "postgres.yaml";

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Credential {
    pub user: String,
    pub password_file: PathBuf,
    #[serde(default = "default_port")]
    pub port: u16,
    #[serde(default = "default_dbname")]
    pub dbname: String,
    #[serde(default = "default_sslmode")]
    pub sslmode: String,
}

fn default_port() -> u16 {
    5432
}
fn default_dbname() -> String {
    "postgres".into()
}
fn default_sslmode() -> String {
    "prefer".into()
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    #[serde(default)]
    pub default: Option<Credential>,
    #[serde(default)]
    pub clusters: BTreeMap<String, Credential>,
}

impl Credentials {
    /// Parses the ConfigMap key; an error names the ConfigMap and key.
    pub fn parse(configmap: &str, text: &str) -> Result<Self, String> {
        serde_saphyr::from_str(text).map_err(|e| format!("ConfigMap {configmap} key {KEY}: {e}"))
    }

    pub fn for_cluster(&self, cluster: Option<&str>) -> Option<&Credential> {
        cluster
            .and_then(|c| self.clusters.get(c))
            .or(self.default.as_ref())
    }
}

/// A target for the pod at `host`. The password stays in the file until connection time.
pub fn target(cred: &Credential, host: &str) -> Result<SqlTarget, SqlError> {
    let dsn = format!(
        "host={host} port={} user={} dbname={} sslmode={}",
        cred.port, cred.user, cred.dbname, cred.sslmode
    );
    let mut t = SqlTarget::from_dsn(&dsn)?;
    t.set_password_file(&cred.password_file)?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_cluster_over_default() {
        let c = Credentials::parse(
            "headroom/headroom",
            "default: { user: headroom, passwordFile: /p }\nclusters:\n  a: { user: x, passwordFile: /q, port: 5433 }\n",
        )
        .expect("parse");
        assert_eq!(c.for_cluster(Some("a")).map(|c| c.port), Some(5433));
        assert_eq!(
            c.for_cluster(Some("b")).map(|c| c.user.as_str()),
            Some("headroom")
        );
        assert_eq!(
            c.for_cluster(None).map(|c| c.dbname.as_str()),
            Some("postgres")
        );
    }

    #[test]
    fn a_socket_directory_is_a_unix_target_and_a_pod_ip_is_not() {
        let dir = tempfile::tempdir().expect("dir");
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "secret\n").expect("write");
        let cred = Credential {
            user: "headroom".into(),
            password_file: pw,
            port: 5432,
            dbname: "postgres".into(),
            sslmode: "require".into(),
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
        let e = Credentials::parse("ns/cm", "default: { usr: x, passwordFile: /p }\n")
            .expect_err("typo");
        assert!(e.contains("ns/cm") && e.contains(KEY), "{e}");
    }
}
