//! WAL health of one volume, for the scan: read from the volumes with no credentials, asked of
//! the server where a credential is configured, combined with what earlier scans saw of each
//! replication slot. For a data volume whose WAL has a volume of its own, only whether a base
//! backup is being restored into it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::pgconn::{self, Credentials};
use crate::decide::{VolumeRole, WalHealth};
use crate::k8s::roles;
use crate::postgres::health::{self, Limits};
use crate::postgres::slots::Tracker;
use crate::probe::{self, Volume};
use crate::resolve::{Prepared, Subject};

/// How long a WAL read waits for another call on the same mount (a statfs takes microseconds;
/// one that has not returned in this long is a hung mount's).
const WAIT_FOR_MOUNT: std::time::Duration = std::time::Duration::from_secs(1);

/// WAL health for a volume that holds its instance's WAL; `None` for any other volume.
/// `data_mount` is the instance's data volume when WAL has a volume of its own: the slots,
/// `pg_control`, signal files and settings are there.
pub async fn health(
    prober: &probe::Prober,
    slots: &Mutex<Tracker>,
    s: &Subject<'_>,
    prepared: &Prepared,
    creds: &Credentials,
    data_mount: Option<&Path>,
    now: Timestamp,
) -> Option<WalHealth> {
    // Only a claim that opted in (a valid, enabled policy) has its volume read or its server
    // asked: the others are measured for metrics and nothing more.
    let policy = prepared.policy().filter(|p| p.enabled)?;
    let (role, wal_on_data) = prepared.postgres_role();
    let data_mount = match role {
        VolumeRole::Data if wal_on_data => Some(s.volume.path.clone()),
        VolumeRole::Wal => data_mount.map(Path::to_path_buf),
        _ => return None,
    };
    let limits = Limits {
        max_pending: policy.wal_safety.max_pending_wal_files,
        max_pending_age_seconds: policy.wal_safety.max_pending_wal_age_seconds,
    };
    let sql = sql_target(s, creds).await;
    // The volumes are read on a blocking worker, bounded like statfs, and not read again while
    // an earlier read (or statfs) of this mount is stuck.
    let path = s.volume.path.clone();
    let mounted_at = s
        .pvc
        .metadata
        .name
        .as_deref()
        .and_then(|c| roles::mount_path(s.pod, c));
    let from_volume = async {
        // Waited for behind the fast loop's statfs of the same mount: refused, this read would
        // leave WAL health unknown and the grow it gates unchecked.
        let read = prober
            .busy_paths()
            .run_when_free(
                &s.volume.path,
                WAIT_FOR_MOUNT,
                prober.deadline(),
                move || {
                    health::read_volumes(&path, data_mount.as_deref(), mounted_at.as_deref(), now)
                },
            )
            .await;
        read.unwrap_or_else(|e| health::failed(format!("reading the WAL directories: {e}")))
    };
    let (read, facts) = tokio::join!(from_volume, health::query(sql.as_ref()));
    let mut tracker = slots
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Some(health::combine(read, facts, &mut tracker, limits, now))
}

/// Whether an opted-in data volume whose WAL has a volume of its own (no WAL health is read from
/// it) holds a base backup being restored; false for any other volume, and when it cannot be
/// read (then it is sized as any other volume, as before the copy).
pub async fn restoring(prober: &probe::Prober, s: &Subject<'_>, prepared: &Prepared) -> bool {
    let opted_in = prepared.policy().is_some_and(|p| p.enabled);
    if !opted_in || prepared.postgres_role() != (VolumeRole::Data, false) {
        return false;
    }
    let path = s.volume.path.clone();
    let read = prober
        .busy_paths()
        .run_when_free(
            &s.volume.path,
            WAIT_FOR_MOUNT,
            prober.deadline(),
            move || crate::postgres::datadir::restoring(&path),
        )
        .await;
    match read {
        Ok(Ok(restoring)) => restoring,
        Ok(Err(e)) => {
            tracing::debug!(path = %s.volume.path.display(), error = %e, "no data directory read for a restore");
            false
        }
        Err(e) => {
            tracing::debug!(path = %s.volume.path.display(), error = %e, "data directory not read for a restore");
            false
        }
    }
}

async fn sql_target(s: &Subject<'_>, creds: &Credentials) -> Option<crate::postgres::SqlTarget> {
    let pod_ip = s.pod.status.as_ref().and_then(|st| st.pod_ip.clone())?;
    // The pod's namespace and owner choose the credential, never its labels.
    let cred = creds.for_pod(s.pod).cloned()?;
    // Reading the password file is blocking I/O: keep it off the async workers.
    tokio::task::spawn_blocking(move || pgconn::target(&cred, &pod_ip))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
        .map_err(|e| tracing::warn!(error = %e, "Postgres credential unusable"))
        .ok()
}

/// The mount of the pod's Postgres data volume on this node, where a WAL volume's instance keeps
/// its data directory.
pub fn data_mount(
    pod: &k8s_openapi::api::core::v1::Pod,
    claims: &[std::sync::Arc<PersistentVolumeClaim>],
    volumes: &[Volume],
) -> Option<PathBuf> {
    let uid = pod.metadata.uid.as_deref()?;
    let pv = claims.iter().find_map(|c| {
        let pg = roles::postgres_volume(c, Some(pod)).ok()??;
        (pg.role == VolumeRole::Data)
            .then(|| c.spec.as_ref()?.volume_name.clone())
            .flatten()
    })?;
    volumes
        .iter()
        .find(|v| v.pv.as_deref() == Some(pv.as_str()) && v.pod_uid.as_deref() == Some(uid))
        .map(|v| v.path.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn claim(name: &str, role: &str, pv: &str) -> Arc<PersistentVolumeClaim> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "db",
                             "labels": {"cnpg.io/pvcRole": role, "cnpg.io/cluster": "pg"}},
                "spec": {"volumeName": pv},
            }))
            .unwrap(),
        )
    }

    fn volume(pod: &str, pv: &str) -> Volume {
        let mut v = Volume::new(
            PathBuf::from(format!(
                "/k/pods/{pod}/volumes/kubernetes.io~csi/{pv}/mount"
            )),
            probe::VolumeMode::Filesystem,
        );
        v.pv = Some(pv.into());
        v.pod_uid = Some(pod.into());
        v
    }

    #[test]
    fn a_wal_volume_finds_its_own_pods_data_volume() {
        let pod: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "pg-1", "uid": "u1"}}))
                .unwrap();
        let claims = [
            claim("pg-1-wal", "PG_WAL", "pv-w"),
            claim("pg-1", "PG_DATA", "pv-d"),
        ];
        // The same PV mounted by another pod (an old pod during a move) is not this pod's.
        let volumes = [
            volume("u0", "pv-d"),
            volume("u1", "pv-w"),
            volume("u1", "pv-d"),
        ];
        assert_eq!(
            data_mount(&pod, &claims, &volumes),
            Some(PathBuf::from(
                "/k/pods/u1/volumes/kubernetes.io~csi/pv-d/mount"
            ))
        );
        // No data claim, or its volume not mounted here: none.
        assert_eq!(data_mount(&pod, &claims[..1], &volumes), None);
        assert_eq!(data_mount(&pod, &claims, &volumes[..2]), None);
    }
}
