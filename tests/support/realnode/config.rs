//! Configuration files of the node's parts, written into the harness's directory.

use std::path::Path;

/// containerd's config. `restrict_oom_score_adj` is required here: root on these machines may
/// not lower `oom_score_adj`, and without it every sandbox fails with "can't get final child's
/// PID from pipe: EOF". runc's state lives under the harness's directory, not /run/containerd.
pub fn containerd(dir: &Path, sock: &Path, pause_image: &str) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
[grpc]
  address = "{sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
"#,
        sock = sock.display()
    )
}

/// A bridge network confined to the harness's bridge: no default route, no masquerade; routes
/// to the pod subnet (on link) and the service range (through the host, where kube-proxy's
/// rules translate it).
pub fn cni(dir: &Path, bridge: &str, subnet: &str, gateway: &str, services: &str) -> String {
    format!(
        r#"{{"cniVersion":"0.4.0","name":"headroom-realnode","plugins":[
  {{"type":"bridge","bridge":"{bridge}","isGateway":true,"isDefaultGateway":false,"ipMasq":false,
   "hairpinMode":true,"ipam":{{"type":"host-local","subnet":"{subnet}","gateway":"{gateway}",
   "dataDir":"{d}/cni-ipam","routes":[{{"dst":"{services}","gw":"{gateway}"}}]}}}},
  {{"type":"loopback"}}]}}"#,
        d = dir.display()
    )
}

pub fn kubeconfig(server: &str, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    \
         certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- \
         name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        ca.display()
    )
}

/// Static tokens: the test's admin, the node's parts (each under the identity its bootstrap RBAC
/// role expects; the controller manager and scheduler as masters, which the test does not
/// examine) and the kubelet as `system:node:<node>` in `system:nodes` (the Node authorizer and
/// NodeRestriction then apply to it as on a real cluster).
pub fn tokens(node: &str) -> String {
    format!(
        "admin-token,admin,admin,\"system:masters\"\n\
         kcm-token,system:kube-controller-manager,kcm,\"system:masters\"\n\
         scheduler-token,system:kube-scheduler,scheduler,\"system:masters\"\n\
         proxy-token,system:kube-proxy,proxy\n\
         kubelet-token,system:node:{node},kubelet,\"system:nodes\"\n"
    )
}
