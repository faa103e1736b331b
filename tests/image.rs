//! The image `scripts/image.sh` builds (no registry, no container builder) and the Dockerfile
//! describe the same image: entrypoint, command, user, port, the binary's path and file
//! capability, and the files the distroless base provides (the nonroot user, CA roots, glibc and
//! libgcc). The archive (`HEADROOM_IMAGE`, which scripts/test.sh builds) is unpacked as an OCI
//! layout, its layer extracted as containerd would (xattrs included), and the binary run from it
//! in a chroot as uid 65532, which proves the loader and libraries it needs are all there.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// What the Dockerfile says about the runtime image.
#[derive(Debug, Default)]
struct Described {
    entrypoint: Value,
    cmd: Value,
    user: String,
    port: String,
    binary: String,
    capability: String,
}

fn dockerfile() -> Described {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile"))
        .expect("Dockerfile");
    let mut d = Described::default();
    for line in text.lines() {
        let arg = |k: &str| line.strip_prefix(k).map(str::trim);
        if let Some(a) = arg("ENTRYPOINT ") {
            d.entrypoint = serde_json::from_str(a).expect("ENTRYPOINT is JSON");
        } else if let Some(a) = arg("CMD ") {
            d.cmd = serde_json::from_str(a).expect("CMD is JSON");
        } else if let Some(a) = arg("USER ") {
            d.user = a.to_owned();
        } else if let Some(a) = arg("EXPOSE ") {
            d.port = a.to_owned();
        } else if let Some(a) = arg("COPY --from=build /headroom ") {
            d.binary = a.to_owned();
        } else if let Some(a) = line.split("setcap ").nth(1) {
            d.capability = a.split_whitespace().next().unwrap_or_default().to_owned();
        }
    }
    d
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn archive(test: &str) -> Option<PathBuf> {
    let root = nix::unistd::geteuid().is_root();
    match std::env::var_os("HEADROOM_IMAGE").map(PathBuf::from) {
        Some(p) if p.is_file() && root => Some(p),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{test}: needs root and HEADROOM_IMAGE (scripts/image.sh), and CI is set")
        }
        _ => {
            eprintln!(
                "skipping {test}: needs root and HEADROOM_IMAGE (scripts/image.sh builds it; set CI to make this a failure)"
            );
            None
        }
    }
}

fn blob(dir: &Path, digest: &str) -> PathBuf {
    dir.join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("read json")).expect("json")
}

#[test]
fn the_script_and_the_dockerfile_describe_the_same_image() {
    let Some(archive) = archive("the_script_and_the_dockerfile_describe_the_same_image") else {
        return;
    };
    let want = dockerfile();
    let dir = tempfile::tempdir().expect("tempdir");
    let oci = dir.path().join("oci");
    std::fs::create_dir(&oci).expect("oci dir");
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&oci));
    assert_eq!(json(&oci.join("oci-layout"))["imageLayoutVersion"], "1.0.0");
    let index = json(&oci.join("index.json"));
    let entry = &index["manifests"][0];
    let name = entry["annotations"]["io.containerd.image.name"]
        .as_str()
        .unwrap_or_default();
    assert!(name.starts_with("docker.io/library/headroom:"), "{index}");
    let manifest = json(&blob(
        &oci,
        entry["digest"].as_str().expect("manifest digest"),
    ));
    let config = json(&blob(
        &oci,
        manifest["config"]["digest"]
            .as_str()
            .expect("config digest"),
    ));
    let c = &config["config"];
    assert_eq!(c["Entrypoint"], want.entrypoint, "{c}");
    assert_eq!(c["Cmd"], want.cmd, "{c}");
    assert_eq!(c["User"], want.user.as_str(), "{c}");
    assert!(
        c["ExposedPorts"]
            .get(format!("{}/tcp", want.port))
            .is_some(),
        "{c}"
    );
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    // docker load's format, over the same blobs.
    let docker = json(&oci.join("manifest.json"));
    assert_eq!(
        docker[0]["Layers"][0],
        format!(
            "blobs/sha256/{}",
            layers[0]["digest"]
                .as_str()
                .unwrap_or_default()
                .trim_start_matches("sha256:")
        )
    );

    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs).expect("rootfs");
    run(Command::new("tar")
        .args([
            "--xattrs",
            "--xattrs-include=security.capability",
            "--numeric-owner",
            "-xpf",
        ])
        .arg(blob(
            &oci,
            layers[0]["digest"].as_str().expect("layer digest"),
        ))
        .arg("-C")
        .arg(&rootfs));
    let binary = rootfs.join(want.binary.trim_start_matches('/'));
    let caps = run(Command::new("getcap").arg(&binary));
    let normalized = want.capability.replace("=+", "=");
    assert!(
        caps.trim_end().ends_with(&normalized),
        "getcap says {caps:?}, the Dockerfile {}",
        want.capability
    );
    let uid = want.user.split(':').next().unwrap_or_default();
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).expect("passwd");
    assert!(
        passwd.lines().any(|l| l.split(':').nth(2) == Some(uid)),
        "{passwd}"
    );
    let roots = std::fs::read_to_string(rootfs.join("etc/ssl/certs/ca-certificates.crt"))
        .expect("CA roots");
    assert!(roots.matches("BEGIN CERTIFICATE").count() > 100, "CA roots");
    for doc in ["libc6", "libgcc-s1", "ca-certificates"] {
        assert!(
            rootfs
                .join("usr/share/doc")
                .join(doc)
                .join("copyright")
                .is_file(),
            "{doc} copyright"
        );
    }
    // The binary runs from the image alone, as the image's user.
    let out = run(Command::new("chroot")
        .arg(format!("--userspec={}", want.user))
        .arg(&rootfs)
        .arg(&want.binary)
        .arg("--version"));
    assert!(out.starts_with("headroom "), "{out}");
}
