//! The fast loop's re-measurement on real mounts: it opens a volume's mount point by its path
//! and takes the numbers only when the descriptor is the mount the scan's symlink-refusing walk
//! reached. Whatever happens between passes (symlinks planted inside the volume, the volume
//! unmounted so its path answers for the kubelet root's filesystem, another filesystem mounted
//! in its place, a bind mount over a parent, a symlink swapped in above it), a number that is
//! not the volume's own is never returned; a descriptor is never kept (a plain unmount succeeds
//! right after a pass); and a volume that hangs after the scan times out alone. Needs root
//! (and `bindfs` for the last test).

mod support {
    pub mod hung;
    pub mod node;
    pub mod root;
}

use std::path::{Path, PathBuf};
use std::time::Duration;

use headroom::probe::anchor::RemeasureError;
use headroom::probe::statfs::FsStats;
use headroom::probe::{Prober, Target, Volume};
use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use support::node::{KubeletRoot, MI, fill};

const DEADLINE: Duration = Duration::from_secs(5);

async fn scan(prober: &Prober) -> Vec<Volume> {
    prober.probe().await.expect("probe")
}

fn by_pv<'a>(vols: &'a [Volume], pv: &str) -> &'a Volume {
    vols.iter()
        .find(|v| v.pv.as_deref() == Some(pv))
        .unwrap_or_else(|| panic!("{pv} not found: {vols:#?}"))
}

async fn target(prober: &Prober, pv: &str) -> Target {
    let vols = scan(prober).await;
    let v = by_pv(&vols, pv);
    v.target()
        .unwrap_or_else(|| panic!("{pv} was not measured through the walk: {v:#?}"))
}

async fn pod_a(prober: &Prober) -> Target {
    scan(prober)
        .await
        .iter()
        .find(|v| v.pod_uid.as_deref() == Some("pod-a"))
        .and_then(Volume::target)
        .expect("pod-a measured")
}

async fn once(prober: &Prober, t: &Target) -> Result<FsStats, RemeasureError> {
    let mut out = prober.remeasure(vec![t.clone()]).await;
    assert_eq!(out.len(), 1);
    out.remove(0)
}

fn tmpfs(at: &Path, bytes: u64) {
    let opts = format!("size={bytes}");
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::empty(),
        Some(opts.as_str()),
    )
    .expect("mount tmpfs");
}

/// Unmounts on drop (a test's own extra mounts), after a failed assertion too.
struct Mounts(Vec<PathBuf>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for m in self.0.iter().rev() {
            let _ = umount2(m, MntFlags::MNT_DETACH);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_tenant_plants_in_its_volume_changes_nothing_and_an_unmounted_volume_is_refused() {
    if !support::root::needs_root("probe_remeasure: planted symlinks, unmount") {
        return;
    }
    for keep in [None, Some(0)] {
        tenant_plants_and_unmounts(keep).await;
    }
}

/// A prober at its default descriptor budget (`None`), or at `keep_parents(n)`.
fn prober(root: &KubeletRoot, keep: Option<usize>) -> Prober {
    let p = Prober::new(root.path().to_path_buf(), DEADLINE);
    match keep {
        Some(n) => p.keep_parents(n),
        None => p,
    }
}

async fn tenant_plants_and_unmounts(keep: Option<usize>) {
    let mut root = KubeletRoot::new();
    let mnt = root.tmpfs_volume("pod-a", "pv-a", MI);
    let prober = prober(&root, keep);
    let t = target(&prober, "pv-a").await;
    // Everything a tenant can write is below its mount point: symlinks out of it, one named
    // like the kubelet's own directories, a directory tree shaped like a kubelet root.
    std::os::unix::fs::symlink("/", mnt.join("escape")).unwrap();
    std::os::unix::fs::symlink("/", mnt.join("mount")).unwrap();
    std::fs::create_dir_all(mnt.join("pods/pod-a/volumes/kubernetes.io~csi/pv-a")).unwrap();
    std::os::unix::fs::symlink(
        "/",
        mnt.join("pods/pod-a/volumes/kubernetes.io~csi/pv-a/mount"),
    )
    .unwrap();
    fill(&mnt, MI / 4);
    let s = once(&prober, &t).await.expect("the volume itself");
    assert_eq!(s.measurement.capacity_bytes, MI);
    assert!(s.measurement.used_bytes >= MI / 4, "{s:?}");
    // No descriptor is kept between passes: a plain unmount (no MNT_DETACH) succeeds at once.
    umount2(&mnt, MntFlags::empty()).expect("unmount right after a pass: nothing holds it");
    // The path now answers for the kubelet root's filesystem: never taken as the volume's.
    let host = headroom::probe::statfs::statfs_path(&mnt).expect("statfs of the bare directory");
    assert_ne!(host.measurement.capacity_bytes, MI);
    assert_eq!(
        once(&prober, &t).await,
        Err(RemeasureError::Moved),
        "{keep:?}"
    );
    // The kubelet then removes the volume's directories: nothing to measure, nothing else
    // measured in its place (the directory a scan kept open is gone with them).
    std::fs::remove_dir(&mnt).unwrap();
    let e = once(&prober, &t).await.unwrap_err();
    assert!(
        matches!(e, RemeasureError::Open(Errno::ENOENT)),
        "{keep:?}: {e:?}"
    );
    let pv_dir = mnt.parent().unwrap();
    let _ = std::fs::remove_file(pv_dir.join("vol_data.json"));
    std::fs::remove_dir(pv_dir).unwrap();
    let e = once(&prober, &t).await.unwrap_err();
    assert!(
        matches!(e, RemeasureError::Open(Errno::ENOENT)),
        "{keep:?}: {e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_point_replaced_between_passes_is_refused_until_the_next_scan() {
    if !support::root::needs_root("probe_remeasure: mount point replaced") {
        return;
    }
    for keep in [None, Some(0)] {
        mount_point_replaced(keep).await;
    }
}

async fn mount_point_replaced(keep: Option<usize>) {
    let mut root = KubeletRoot::new();
    let mnt = root.tmpfs_volume("pod-a", "pv-a", MI);
    let mut extra = Mounts(Vec::new());
    let prober = prober(&root, keep);
    let t = target(&prober, "pv-a").await;
    assert_eq!(
        once(&prober, &t).await.unwrap().measurement.capacity_bytes,
        MI
    );
    // Another filesystem at the same mount point.
    umount2(&mnt, MntFlags::MNT_DETACH).unwrap();
    tmpfs(&mnt, 2 * MI);
    extra.0.push(mnt.clone());
    assert_eq!(once(&prober, &t).await, Err(RemeasureError::Moved));
    // The next scan finds what is there now, and the loop measures that.
    let t2 = target(&prober, "pv-a").await;
    assert_ne!(t2, t);
    assert_eq!(
        once(&prober, &t2).await.unwrap().measurement.capacity_bytes,
        2 * MI
    );
    // The mount point itself swapped for a symlink to another filesystem: not followed.
    umount2(&mnt, MntFlags::MNT_DETACH).unwrap();
    std::fs::remove_dir(&mnt).unwrap();
    let elsewhere = root.scratch_tmpfs(3 * MI);
    std::os::unix::fs::symlink(&elsewhere, &mnt).unwrap();
    let e = once(&prober, &t2).await.unwrap_err();
    assert!(
        matches!(e, RemeasureError::Open(Errno::ELOOP | Errno::ENOTDIR)),
        "{e:?}"
    );
    let vols = scan(&prober).await;
    let v = by_pv(&vols, "pv-a");
    assert!(v.measurement.is_none() && v.target().is_none(), "{v:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_mount_over_a_parent_never_yields_what_it_covers() {
    if !support::root::needs_root("probe_remeasure: bind mount over a parent") {
        return;
    }
    let mut root = KubeletRoot::new();
    root.tmpfs_volume("pod-a", "pv-a", MI);
    let mut extra = Mounts(Vec::new());
    let prober = Prober::new(root.path().to_path_buf(), DEADLINE);
    let t = target(&prober, "pv-a").await;
    // The same volume as a prober that keeps no directory open sees it (past its descriptor
    // budget): opened from the kubelet root.
    let rooted = Prober::new(root.path().to_path_buf(), DEADLINE).keep_parents(0);
    let t_rooted = target(&rooted, "pv-a").await;
    // A tree of the same shape on another filesystem, bound over the pod's directory: the path
    // now leads to a plain directory there.
    let decoy = root.scratch_tmpfs(4 * MI);
    std::fs::create_dir_all(decoy.join("volumes/kubernetes.io~csi/pv-a/mount")).unwrap();
    let pod = root.path().join("pods/pod-a");
    mount(
        Some(&decoy),
        &pod,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .expect("bind over the pod directory");
    extra.0.push(pod.clone());
    // From the root: the decoy's directory, refused.
    assert_eq!(once(&rooted, &t_rooted).await, Err(RemeasureError::Moved));
    // From the volume's own directory, which the scan kept open below the bind: the volume's
    // mount and its own numbers. Never the decoy's.
    assert_eq!(
        once(&prober, &t).await.unwrap().measurement.capacity_bytes,
        MI
    );
    // Gone again: the path leads to the scan's mount, which is measured as before.
    umount2(&pod, MntFlags::empty()).expect("unmount the bind");
    extra.0.clear();
    for (p, t) in [(&prober, &t), (&rooted, &t_rooted)] {
        assert_eq!(once(p, t).await.unwrap().measurement.capacity_bytes, MI);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_in_above_the_mount_is_taken_only_to_the_same_mount() {
    if !support::root::needs_root("probe_remeasure: symlinked kubelet directory") {
        return;
    }
    let mut root = KubeletRoot::new();
    root.tmpfs_volume("pod-a", "pv-a", MI);
    let other = root.tmpfs_volume("pod-b", "pv-a", 2 * MI);
    let prober = Prober::new(root.path().to_path_buf(), DEADLINE);
    let t = pod_a(&prober).await;
    let rooted = Prober::new(root.path().to_path_buf(), DEADLINE).keep_parents(0);
    let t_rooted = pod_a(&rooted).await;
    let pods = root.path().join("pods");
    // The pod directory moved aside and a symlink put in its place: the open follows it to the
    // very mount the scan found, so these are the volume's numbers (and the scan itself, which
    // follows no symlink, no longer measures it).
    std::fs::rename(pods.join("pod-a"), pods.join("pod-a.moved")).unwrap();
    std::os::unix::fs::symlink("pod-a.moved", pods.join("pod-a")).unwrap();
    for (p, t) in [(&prober, &t), (&rooted, &t_rooted)] {
        assert_eq!(once(p, t).await.unwrap().measurement.capacity_bytes, MI);
    }
    let rescanned = scan(&prober).await;
    assert!(
        rescanned
            .iter()
            .filter(|v| v.pod_uid.as_deref() == Some("pod-a"))
            .all(|v| v.measurement.is_none()),
        "{rescanned:#?}"
    );
    // Pointed at another pod's tree, where another filesystem is mounted at the same name: from
    // the root, that mount, refused; from the directory the scan kept open (moved aside with
    // its pod), still the volume's own.
    std::fs::remove_file(pods.join("pod-a")).unwrap();
    std::os::unix::fs::symlink("pod-b", pods.join("pod-a")).unwrap();
    assert!(other.starts_with(pods.join("pod-b")));
    assert_eq!(once(&rooted, &t_rooted).await, Err(RemeasureError::Moved));
    assert_eq!(
        once(&prober, &t).await.unwrap().measurement.capacity_bytes,
        MI
    );
    // Put back (KubeletRoot unmounts by the original paths).
    std::fs::remove_file(pods.join("pod-a")).unwrap();
    std::fs::rename(pods.join("pod-a.moved"), pods.join("pod-a")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_that_hangs_after_the_scan_times_out_alone() {
    if !support::root::require_root(
        "probe_remeasure: a volume hung after the scan",
        &[("bindfs", "bindfs")],
    ) {
        return;
    }
    let mut root = KubeletRoot::new();
    for i in 0..20 {
        root.tmpfs_volume(&format!("pod-{i}"), &format!("pv-{i}"), MI);
    }
    let source = tempfile::tempdir().expect("bindfs source");
    let hung = support::hung::HungMount::running(
        source.path(),
        &root.csi_mount_point("pod-hung", "pv-hung"),
    );
    let deadline = Duration::from_millis(800);
    let prober = Prober::new(root.path().to_path_buf(), deadline);
    let vols = scan(&prober).await;
    let targets: Vec<Target> = vols.iter().filter_map(Volume::target).collect();
    assert_eq!(
        targets.len(),
        21,
        "the FUSE mount answered the scan: {vols:#?}"
    );
    hung.stop();
    for pass in 0..2 {
        let out = prober.remeasure(targets.clone()).await;
        for (t, r) in targets.iter().zip(&out) {
            if t.path.starts_with(root.path().join("pods/pod-hung")) {
                let e = r.as_ref().unwrap_err();
                assert!(e.is_timeout(), "pass {pass}: {e:?}");
            } else {
                let s = r.as_ref().unwrap_or_else(|e| panic!("pass {pass}: {e}"));
                assert_eq!(s.measurement.capacity_bytes, MI);
            }
        }
        // One stuck call however many passes ran.
        assert_eq!(prober.stuck_calls(), 1);
    }
    hung.resume();
    drop(hung);
}
