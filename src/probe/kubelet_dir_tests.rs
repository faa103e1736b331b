/// A kubelet root reached through a symlink (`/var/lib/kubelet` -> `/data/kubelet`):
/// mountinfo names its mounts by the resolved path, so that is the print's root.
#[test]
fn the_walks_print_is_of_the_resolved_root() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("data-kubelet");
    std::fs::create_dir_all(real.join("pods")).unwrap();
    let link = dir.path().join("kubelet");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let real = std::fs::canonicalize(&real).unwrap();
    let line = |n: u32, dev: &str, pv: &str| {
        format!(
            "{n} 1 {dev} / {}/pods/u{n}/volumes/kubernetes.io~csi/{pv}/mount rw - tmpfs tmpfs rw",
            real.display()
        )
    };
    let table = |lines: &[String]| {
        crate::probe::mounts::parse_mountinfo(lines.join("\n").as_bytes(), Path::new("t")).unwrap()
    };
    let one = table(&[line(40, "0:50", "pv-a")]);
    let two = table(&[line(40, "0:50", "pv-a"), line(41, "0:50", "pv-b")]);
    let found = find(&link, &one).unwrap();
    assert_eq!(found.root, real);
    assert_eq!(found.mounts_print, mounts_fingerprint(&one, &real));
    assert_ne!(found.mounts_print, find(&link, &two).unwrap().mounts_print);
}

#[test]
fn the_fingerprint_moves_with_the_kubelets_mounts_alone() {
    let table = |lines: &[&str]| {
        crate::probe::mounts::parse_mountinfo(lines.join("\n").as_bytes(), Path::new("t")).unwrap()
    };
    let root = Path::new("/var/lib/kubelet");
    let base = [
        "1 0 8:1 / / rw - ext4 /dev/sda1 rw",
        "40 1 0:50 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-a/mount rw - tmpfs tmpfs rw",
    ];
    let print = mounts_fingerprint(&table(&base), root);
    assert_eq!(print, mounts_fingerprint(&table(&base), root), "stable");
    // A container's mount elsewhere, or a pod's token mounted by the kubelet, changes nothing.
    let mut other = base.to_vec();
    other.push("41 1 0:60 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/c1/rootfs rw - overlay overlay rw");
    other.push("45 1 0:61 / /var/lib/kubelet/pods/u3/volumes/kubernetes.io~projected/kube-api-access-x rw - tmpfs tmpfs rw");
    assert_eq!(print, mounts_fingerprint(&table(&other), root));
    // The same device mounted for a second claim, or the first mounted again, does.
    let mut twin = base.to_vec();
    twin.push("42 1 0:50 / /var/lib/kubelet/pods/u2/volumes/kubernetes.io~csi/pv-b/mount rw - tmpfs tmpfs rw");
    assert_ne!(print, mounts_fingerprint(&table(&twin), root));
    let again = [
        base[0],
        "43 1 0:51 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-a/mount rw - tmpfs tmpfs rw",
    ];
    assert_ne!(print, mounts_fingerprint(&table(&again), root));
    // A sibling directory whose name merely starts like the root is not below it.
    let mut sibling = base.to_vec();
    sibling.push("44 1 0:70 / /var/lib/kubelet2/x rw - tmpfs tmpfs rw");
    assert_eq!(print, mounts_fingerprint(&table(&sibling), root));
}

use super::*;

#[test]
fn vol_data_reads_kubelet_fields_and_ignores_others() {
    let json = r#"{"attachmentID":"csi-abc","driverName":"ebs.csi.aws.com","nodeName":"n1",
        "specVolID":"pvc-123","volumeHandle":"vol-9","volumeLifecycleMode":"Persistent","seLinuxMountContext":""}"#;
    let d: VolData = serde_json::from_str(json).unwrap();
    assert_eq!(d.spec_vol_id.as_deref(), Some("pvc-123"));
    assert_eq!(d.driver_name.as_deref(), Some("ebs.csi.aws.com"));
    assert_eq!(d.volume_lifecycle_mode.as_deref(), Some("Persistent"));
}

#[test]
fn walk_of_plain_directories_skips_pod_local_plugins() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    std::fs::create_dir_all(r.join("pods/u1/volumes/kubernetes.io~secret/token")).unwrap();
    std::fs::create_dir_all(r.join("pods/u1/volumes/kubernetes.io~local-volume/pv-local")).unwrap();
    std::fs::create_dir_all(r.join("pods/u1/volumes/kubernetes.io~csi/pv-csi")).unwrap();
    std::fs::write(
        r.join("pods/u1/volumes/kubernetes.io~csi/pv-csi/vol_data.json"),
        b"{not json",
    )
    .unwrap();
    let mounts = crate::probe::read_mountinfo().unwrap();
    let vols = discover(r, &mounts).unwrap();
    assert_eq!(vols.len(), 2, "{vols:#?}");
    let csi = &vols[0];
    assert_eq!(csi.pv.as_deref(), Some("pv-csi"));
    assert!(
        csi.findings
            .iter()
            .any(|f| f.contains("vol_data.json: invalid")),
        "{:?}",
        csi.findings
    );
    assert!(csi.findings.iter().any(|f| f.contains("not mounted yet")));
    assert!(csi.measurement.is_none());
    let local = &vols[1];
    assert_eq!(local.driver.as_deref(), Some("kubernetes.io/local-volume"));
    assert!(!local.mounted);
    assert!(local.measurement.is_some());
}

#[tokio::test]
async fn async_wrapper_gives_the_same_answer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pods/u1/volumes/kubernetes.io~nfs/pv-n")).unwrap();
    let vols = crate::probe::probe_kubelet_root_async(dir.path().to_path_buf())
        .await
        .unwrap();
    assert_eq!(vols.len(), 1);
    assert_eq!(vols[0].pv.as_deref(), Some("pv-n"));
    assert_eq!(vols[0].driver.as_deref(), Some("kubernetes.io/nfs"));
    // A plain directory, not an NFS mount: its numbers are the disk's.
    assert_eq!(vols[0].class, crate::probe::VolumeClass::Directory);
}

#[test]
fn missing_root_is_an_error_naming_it() {
    let err = discover(Path::new("/nonexistent/kubelet"), &[]).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/kubelet"), "{err}");
}
