//! The cluster's certificates, made with openssl: one CA that signs the API server's and the
//! kubelet's serving certificates and the API server's client certificate for the kubelet. The
//! same CA is the pods' `ca.crt` (kube-controller-manager `--root-ca-file`), so the agent's
//! default `--kubelet-ca` verifies the kubelet as it would on a cluster whose kubelets have
//! certificates from the cluster CA.

use std::path::Path;
use std::process::{Command, Stdio};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A key and a certificate `name`.{key,crt} signed by the CA, with `subject` and `sans`
/// (e.g. "IP:10.0.0.1,DNS:kubernetes"; empty for a client certificate).
fn signed(dir: &Path, name: &str, subject: &str, sans: &str) {
    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    openssl(dir, &["genrsa", "-out", &key, "2048"]);
    openssl(
        dir,
        &["req", "-new", "-key", &key, "-subj", subject, "-out", &csr],
    );
    let ext = if sans.is_empty() {
        "extendedKeyUsage=clientAuth\n".to_owned()
    } else {
        format!("extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName={sans}\n")
    };
    std::fs::write(dir.join(format!("{name}.ext")), ext).expect("write ext");
    let extfile = format!("{name}.ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &extfile,
            "-out",
            &crt,
        ],
    );
}

/// A CA of its own in `dir` (ca.key, ca.crt): a PostgreSQL cluster's, as an operator makes one.
pub fn ca(dir: &Path, subject: &str) {
    std::fs::create_dir_all(dir).expect("pki dir");
    openssl(dir, &["genrsa", "-out", "ca.key", "2048"]);
    openssl(
        dir,
        &[
            "req", "-x509", "-new", "-key", "ca.key", "-subj", subject, "-days", "2", "-out",
            "ca.crt",
        ],
    );
}

/// A serving certificate `name`.{key,crt} from `dir`'s CA for `sans`.
pub fn serving(dir: &Path, name: &str, sans: &str) {
    signed(dir, name, &format!("/CN={name}"), sans);
}

/// Writes ca, apiserver, kubelet (serving, for `node_ip`), apiserver-kubelet-client and the
/// service-account signing key pair into `dir`.
pub fn make(dir: &Path, node_ip: &str, service_ip: &str, node: &str) {
    ca(dir, "/CN=headroom-realnode-ca");
    signed(
        dir,
        "apiserver",
        "/CN=kube-apiserver",
        &format!(
            "IP:{node_ip},IP:{service_ip},IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,\
             DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
        ),
    );
    signed(
        dir,
        "kubelet",
        &format!("/O=system:nodes/CN=system:node:{node}"),
        &format!("IP:{node_ip},DNS:{node}"),
    );
    signed(
        dir,
        "apiserver-kubelet-client",
        "/O=system:masters/CN=kube-apiserver-kubelet-client",
        "",
    );
    openssl(dir, &["genrsa", "-out", "sa.key", "2048"]);
    openssl(dir, &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]);
}
