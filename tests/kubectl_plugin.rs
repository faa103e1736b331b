//! `kubectl headroom`: the built binary on PATH as `kubectl-headroom` (a symlink, as krew installs
//! it), run by the real kubectl 1.30 against the real API server (through the fault proxy), with
//! a kubeconfig of two contexts that differ in their namespace.

mod support {
    pub mod cluster;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::path::{Path, PathBuf};
use std::process::Command;

use headroom::k8s::state::StatusAnnotation;
use headroom::quantity::MI;
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use support::cluster::Cluster;
use support::kube::server::{self, ADMIN_TOKEN};
use support::node::ClaimStore;

/// kubectl 1.30 from scripts/helm-kubectl.sh (`HEADROOM_KUBECTL_130`); None (after saying why) to
/// skip, and a panic under CI.
fn kubectl_bin(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("HEADROOM_KUBECTL_130")
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if found.is_none() {
        let why = "HEADROOM_KUBECTL_130 is not kubectl 1.30 (scripts/helm-kubectl.sh kubectl)";
        assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
        eprintln!("skipping {test}: {why}");
    }
    found
}

/// A kubeconfig for the proxy with the admin token: contexts `db` and `apps` (namespaces `db` and
/// `apps`), `current` the current one.
fn kubeconfig(server: &str, current: &str, path: &Path) {
    let context = |name: &str| json!({ "name": name, "context": { "cluster": "proxy", "user": "admin", "namespace": name } });
    let kc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{ "name": "proxy", "cluster": { "server": server } }],
        "users": [{ "name": "admin", "user": { "token": ADMIN_TOKEN } }],
        "contexts": [context("db"), context("apps")],
        "current-context": current,
    });
    std::fs::write(path, serde_json::to_string(&kc).expect("encode")).expect("write kubeconfig");
}

/// A status annotation holding a recommendation waiting for approval (`enforcement: approve`).
fn waiting() -> String {
    let now = Timestamp::now();
    let status: StatusAnnotation = serde_json::from_value(json!({
        "node": "worker-2", "updatedAt": now, "effectiveSizeBytes": 64 * MI,
        "state": "Balanced", "lastDecision": "grow recommended", "budgetLeft": 1,
        "recommendation": {
            "id": "3f1c9a0b27de", "kind": "Grow", "fromBytes": 64 * MI, "toBytes": 80 * MI,
            "madeAt": now, "staleAt": now + SignedDuration::from_hours(1),
        },
    }))
    .expect("a status annotation");
    serde_json::to_string(&status).expect("encode")
}

struct Plugin {
    kubectl: PathBuf,
    /// The only directory on PATH: `kubectl-headroom` and nothing else.
    bin: PathBuf,
    /// `$KUBECONFIG`, and the home without a ~/.kube/config.
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Plugin {
    /// `kubectl args...`: (success, stdout, stderr).
    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(&self.kubectl)
            .args(args)
            .env_clear()
            .env("PATH", &self.bin)
            .env("HOME", &self.home)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .expect("run kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The namespace/name of each row `kubectl headroom args...` prints.
    fn claims(&self, args: &[&str]) -> Vec<String> {
        let (ok, out, err) = self.run(args);
        assert!(ok, "kubectl {args:?}: {err}");
        let mut lines = out.lines();
        let header = lines.next().unwrap_or_default();
        assert!(header.starts_with("NAMESPACE"), "kubectl {args:?}: {out}");
        lines
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join("/"))
            .collect()
    }
}

#[test]
fn kubectl_runs_headroom_as_a_plugin_with_its_context_namespace_and_kubeconfig() {
    let test = "kubectl_runs_headroom_as_a_plugin_with_its_context_namespace_and_kubeconfig";
    if !server::available(test) {
        return;
    }
    let Some(kubectl) = kubectl_bin(test) else {
        return;
    };
    // A server of its own: `-A` lists every claim on it.
    let c = Cluster::on(std::sync::Arc::new(server::Server::start()));
    for ns in ["db", "apps"] {
        c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    c.pvc_in("db", "data-pg-1", "fast-ssd", 64, &[], |_| {});
    c.pvc_in("db", "data-pg-2", "fast-ssd", 64, &[], |_| {});
    c.pvc_in(
        "apps",
        "uploads",
        "fast-ssd",
        64,
        &[("status", &waiting())],
        |_| {},
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&bin).expect("mkdir bin");
    std::fs::create_dir_all(&home).expect("mkdir home");
    let plugin = bin.join("kubectl-headroom");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_headroom"), &plugin).expect("symlink");
    let db_current = dir.path().join("db.kubeconfig");
    let apps_current = dir.path().join("apps.kubeconfig");
    kubeconfig(&c.proxy.url(), "db", &db_current);
    kubeconfig(&c.proxy.url(), "apps", &apps_current);
    let k = Plugin {
        kubectl,
        bin: bin.clone(),
        kubeconfig: db_current,
        home,
    };

    let (ok, out, err) = k.run(&["plugin", "list"]);
    assert!(ok, "kubectl plugin list: {err}");
    assert!(out.contains(&plugin.display().to_string()), "{out}");

    // $KUBECONFIG's current context, and its namespace.
    assert_eq!(
        k.claims(&["headroom", "status"]),
        ["db/data-pg-1", "db/data-pg-2"]
    );
    assert_eq!(
        k.claims(&["headroom", "status", "-n", "db", "data-pg-1"]),
        ["db/data-pg-1"]
    );
    assert_eq!(
        k.claims(&["headroom", "status", "-A"]),
        ["apps/uploads", "db/data-pg-1", "db/data-pg-2"]
    );
    // kubectl's flags before the subcommand, as a kubectl user writes them, and after it.
    assert_eq!(
        k.claims(&["headroom", "--context", "apps", "status"]),
        ["apps/uploads"]
    );
    assert_eq!(
        k.claims(&["headroom", "status", "--context=apps"]),
        ["apps/uploads"]
    );
    assert_eq!(
        k.claims(&["headroom", "--context", "apps", "-n", "db", "status"]),
        ["db/data-pg-1", "db/data-pg-2"]
    );
    assert_eq!(
        k.claims(&["headroom", "--namespace=apps", "status"]),
        ["apps/uploads"]
    );
    // --kubeconfig over $KUBECONFIG: the other file's current context.
    let other = apps_current.to_str().expect("utf-8 path");
    assert_eq!(
        k.claims(&["headroom", "--kubeconfig", other, "status"]),
        ["apps/uploads"]
    );
    assert_eq!(
        k.claims(&[
            "headroom",
            "--kubeconfig",
            other,
            "--context",
            "db",
            "status"
        ]),
        ["db/data-pg-1", "db/data-pg-2"]
    );

    // headroom approve as a plugin command, with kubectl's flags before it: the claim in the
    // context's namespace, approved.
    let (ok, out, err) = k.run(&["headroom", "--context", "apps", "approve", "uploads"]);
    assert!(ok, "kubectl headroom approve: {err}");
    assert!(
        out.contains("approved recommendation 3f1c9a0b27de for PersistentVolumeClaim apps/uploads"),
        "{out}"
    );
    let uploads = c
        .admin
        .claim("apps", "uploads")
        .expect("claim apps/uploads");
    let annotations = uploads.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("headroom.dev/approve").map(String::as_str),
        Some("3f1c9a0b27de")
    );
    let (ok, _, err) = k.run(&["headroom", "-n", "db", "approve", "data-pg-1"]);
    assert!(!ok);
    assert!(
        err.contains("PersistentVolumeClaim db/data-pg-1 has no recommendation waiting"),
        "{err}"
    );

    // kubectl itself keeps its flags from a plugin written after them.
    let (ok, _, err) = k.run(&["--context", "apps", "headroom", "status"]);
    assert!(!ok);
    assert!(
        err.contains("flags cannot be placed before plugin name"),
        "{err}"
    );

    // No arguments: the usage, named as it is run.
    let (ok, out, err) = k.run(&["headroom"]);
    assert!(!ok);
    assert!(
        format!("{out}{err}").contains("Usage: kubectl headroom"),
        "{out}{err}"
    );
    let (ok, out, err) = k.run(&["headroom", "--help"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("Usage: kubectl headroom") && out.contains("--context"),
        "{out}"
    );
    // The agent is the DaemonSet's, not a plugin command.
    let (ok, _, err) = k.run(&["headroom", "agent", "--node-name", "n1"]);
    assert!(!ok);
    assert!(err.contains("runs on a node"), "{err}");

    // Offline commands answer too.
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policy.yaml");
    let (ok, out, err) = k.run(&["headroom", "validate", policy.to_str().expect("utf-8")]);
    assert!(ok, "kubectl headroom validate: {out}{err}");
}

/// scripts/kubectl-plugin.sh packs the binary as `kubectl-headroom` and fills krew's manifest from
/// plugins/headroom.yaml: the archive's sha256, the version, the URI given; the unpacked archive
/// on PATH is `kubectl headroom` to kubectl 1.30.
#[test]
fn the_release_script_packs_the_plugin_and_its_krew_manifest() {
    let test = "the_release_script_packs_the_plugin_and_its_krew_manifest";
    let Some(kubectl) = kubectl_bin(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let archive = out.join(format!(
        "kubectl-headroom_v{}_linux_amd64.tar.gz",
        env!("CARGO_PKG_VERSION")
    ));
    let uri = format!("file://{}", archive.display());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = Command::new(root.join("scripts/kubectl-plugin.sh"))
        .arg(&uri)
        .env("HEADROOM_PLUGIN_BINARY", env!("CARGO_BIN_EXE_headroom"))
        .env("HEADROOM_PLUGIN_OUT", &out)
        .output()
        .expect("run scripts/kubectl-plugin.sh");
    let printed = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let manifest_path = out.join("headroom.yaml");
    assert_eq!(
        printed.lines().collect::<Vec<_>>(),
        [
            archive.display().to_string(),
            manifest_path.display().to_string()
        ]
    );

    let text = std::fs::read_to_string(&manifest_path).expect("read the manifest");
    assert!(!text.contains('@'), "a placeholder left: {text}");
    let m: serde_json::Value = serde_saphyr::from_str(&text).expect("the manifest is YAML");
    assert_eq!(
        m["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(m["kind"], "Plugin");
    // krew: the name is the manifest's file name and what `kubectl <name>` runs.
    assert_eq!(m["metadata"]["name"], "headroom");
    assert_eq!(
        m["spec"]["version"],
        format!("v{}", env!("CARGO_PKG_VERSION"))
    );
    let platform = &m["spec"]["platforms"][0];
    assert_eq!(
        platform["selector"]["matchLabels"],
        json!({"os": "linux", "arch": "amd64"})
    );
    assert_eq!(platform["uri"], uri);
    assert_eq!(platform["bin"], "kubectl-headroom");
    let bytes = std::fs::read(&archive).expect("read the archive");
    let sha: String = ring::digest::digest(&ring::digest::SHA256, &bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(platform["sha256"], sha);

    // The archive holds the binary alone, under the name krew links and kubectl runs.
    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir_all(&unpacked).expect("mkdir");
    let tar = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .expect("run tar");
    assert!(tar.success());
    let names: Vec<_> = std::fs::read_dir(&unpacked)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["kubectl-headroom"]);
    assert!(
        std::fs::read(unpacked.join("kubectl-headroom")).expect("read")
            == std::fs::read(env!("CARGO_BIN_EXE_headroom")).expect("read"),
        "the archive's binary is not the one given"
    );
    let help = Command::new(&kubectl)
        .args(["headroom", "--help"])
        .env_clear()
        .env("PATH", &unpacked)
        .env("HOME", dir.path())
        .output()
        .expect("run kubectl");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.status.success() && text.contains("Usage: kubectl headroom"),
        "{text}"
    );
}
