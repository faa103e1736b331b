//! What the real node changes on the host outside its own directory, and how every trace of it
//! is removed: the bridge and its FORWARD rules, the kubelet's and kube-proxy's iptables chains,
//! mounts under the kubelet's root, loop devices of the CSI plugin's files (matched by inode:
//! `losetup` may show another mount namespace's path), network namespaces the runtime made, the
//! kubepods cgroups, and the directories the kubelet hard-codes. Every step is best effort, so a
//! teardown after a failed start still removes what exists.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const BRIDGE: &str = "hdrm0";
/// Tags the FORWARD rules the harness adds, so teardown deletes exactly those.
const COMMENT: &str = "headroom-realnode";
/// Directories the kubelet and the CNI plugins write whatever their flags say.
pub const HARD_CODED: [&str; 4] = [
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
];

pub fn sh(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn must(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A bridge whose subnet is the pods' and nothing routed between it and any other interface.
pub fn bridge_up(gateway_cidr: &str) {
    must("ip", &["link", "add", BRIDGE, "type", "bridge"]);
    must("ip", &["addr", "add", gateway_cidr, "dev", BRIDGE]);
    must("ip", &["link", "set", BRIDGE, "up"]);
    for (a, b) in [("-i", "-o"), ("-o", "-i")] {
        must(
            "iptables",
            &[
                "-I",
                "FORWARD",
                a,
                BRIDGE,
                "!",
                b,
                BRIDGE,
                "-m",
                "comment",
                "--comment",
                COMMENT,
                "-j",
                "DROP",
            ],
        );
    }
}

/// Which directories the kubelet hard-codes existed before the node started (those are kept).
pub fn existing_dirs() -> Vec<PathBuf> {
    HARD_CODED
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect()
}

/// Unmounts every mount at or below one of `roots`, deepest first (lazily: a busy mount of a
/// dead container must not keep the rest).
pub fn unmount_below(roots: &[&Path]) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| roots.iter().any(|r| Path::new(p).starts_with(r)))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = nix::mount::umount2(p.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Detaches loop devices whose backing file is one of the files in `dir`, matched by device and
/// inode as `losetup` reports them (this kernel's sysfs has no backing_inode; the path losetup
/// shows may be another mount namespace's, or "(deleted)").
pub fn detach_loops(dir: &Path) {
    let files: HashSet<(u64, u64)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| (m.dev(), m.ino()))
        .collect();
    let listed =
        sh("losetup", &["-l", "-n", "-O", "NAME,BACK-INO,BACK-MAJ:MIN"]).unwrap_or_default();
    for line in listed.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [name, ino, majmin] = f[..] else { continue };
        let Some((major, minor)) = majmin.split_once(':') else {
            continue;
        };
        let (Ok(ino), Ok(major), Ok(minor)) = (ino.parse::<u64>(), major.parse(), minor.parse())
        else {
            continue;
        };
        if files.contains(&(nix::sys::stat::makedev(major, minor), ino)) {
            let _ = sh("losetup", &["-d", name]);
        }
    }
}

/// Removes network namespaces under /run/netns that were not in `before`.
pub fn remove_netns(before: &HashSet<String>) {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !before.contains(&name) {
            let _ = nix::mount::umount2(&e.path(), nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_file(e.path());
        }
    }
    if before.is_empty() {
        let _ = std::fs::remove_dir("/run/netns");
    }
}

pub fn netns_now() -> HashSet<String> {
    std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Removes the kubepods cgroup tree in every hierarchy, deepest directories first.
pub fn remove_cgroups() {
    let Ok(controllers) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    for c in controllers.flatten() {
        let top = c.path().join("kubepods");
        if top.is_dir() {
            remove_cgroup_tree(&top);
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Deletes the rules jumping to KUBE-*/CNI-* chains and the harness's own rules, then those
/// chains, in every table.
pub fn remove_chains() {
    for table in ["filter", "nat", "mangle"] {
        let Some(rules) = sh("iptables-save", &["-t", table]) else {
            continue;
        };
        let ours = |l: &str| l.contains(COMMENT) || l.contains("-j KUBE-") || l.contains("-j CNI-");
        for rule in rules.lines().filter(|l| l.starts_with("-A ") && ours(l)) {
            let chain = rule.split(' ').nth(1).unwrap_or_default();
            if chain.starts_with("KUBE-") || chain.starts_with("CNI-") {
                continue; // the chain goes below
            }
            let mut args = vec!["-t", table, "-D"];
            args.extend(shell_words(&rule[3..]));
            let _ = sh("iptables", &args);
        }
        let chains: Vec<&str> = rules
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .filter_map(|l| l.split(' ').next())
            .filter(|c| c.starts_with("KUBE-") || c.starts_with("CNI-"))
            .collect();
        for c in &chains {
            let _ = sh("iptables", &["-t", table, "-F", c]);
        }
        for c in &chains {
            let _ = sh("iptables", &["-t", table, "-X", c]);
        }
    }
}

/// iptables-save quotes comments with double quotes; split respecting them.
fn shell_words(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let (word, tail) = if let Some(q) = rest.strip_prefix('"') {
            let end = q.find('"').unwrap_or(q.len());
            (&q[..end], q.get(end + 1..).unwrap_or(""))
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        };
        out.push(word);
        rest = tail.trim_start();
    }
    out
}

pub fn bridge_down() {
    let _ = sh("ip", &["link", "del", BRIDGE]);
}

pub fn ip_forward() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward")
        .unwrap_or_else(|_| "0".into())
        .trim()
        .to_owned()
}

pub fn set_ip_forward(v: &str) {
    let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", v);
}

/// Removes the directories the kubelet hard-codes unless they existed before (`kept`).
pub fn remove_dirs(kept: &[PathBuf]) {
    for d in HARD_CODED {
        if !kept.iter().any(|k| k == Path::new(d)) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Kills processes whose command line contains `marker` (the harness's own socket or directory
/// path, so only processes of this node match), e.g. containerd's shims, which outlive it.
pub fn kill_marked(marker: &str) {
    let me = std::process::id();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Free and total MiB of the filesystem holding `path` (or its nearest existing ancestor), as
/// the kubelet's `nodefs.available` counts it (blocks available to unprivileged users).
pub fn disk_mib(path: &Path) -> Option<(u64, u64)> {
    let at = path.ancestors().find(|p| p.exists())?;
    let s = nix::sys::statvfs::statvfs(at).ok()?;
    let f = s.fragment_size();
    Some(((s.blocks_available() * f) >> 20, (s.blocks() * f) >> 20))
}

/// Fails the run at once, naming the cause, when a filesystem the node writes to has too little
/// room: otherwise the kubelet reports DiskPressure and evicts every pod the tests start, and
/// each test fails later on a pod that never ran.
pub fn require_room(paths: &[&Path], need_mib: u64) {
    for p in paths {
        if let Some((free, total)) = disk_mib(p) {
            assert!(
                free >= need_mib,
                "the host has {free} MiB free of {total} MiB on the filesystem of {}; a real \
                 node needs {need_mib} MiB (its kubelet evicts pods below {} MiB): free space \
                 first (an old target/ or /tmp/headroom-* directory?)",
                p.display(),
                super::EVICT_BELOW_MI,
            );
        }
    }
}
