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

/// What the kubelet reads from its config file (the flags for these are deprecated or gone).
pub struct Kubelet<'a> {
    pub address: &'a str,
    pub pki: &'a Path,
    pub runtime_sock: &'a Path,
    pub flex_dir: &'a Path,
    pub evict_below_mi: u64,
}

/// The kubelet's KubeletConfiguration. `failCgroupV1: false`: these machines mount cgroup v1
/// (v2 only at /sys/fs/cgroup/unified, without controllers), which 1.35+ refuses by default.
/// Eviction floors are absolute, not percentages: a CI host's large root disk can be 99 % used
/// with gigabytes free, and a percentage then evicts every pod the tests start (stop 39's CI:
/// DiskPressure at 2.7 GiB free of 252). The short transition period keeps a brief dip from
/// holding the node under pressure for the default five minutes. containerd 1.6 lacks the CRI
/// RuntimeConfig call, so the kubelet's own `cgroupDriver` is used (until 1.38).
pub fn kubelet(k: &Kubelet) -> String {
    let pki = |f: &str| k.pki.join(f).display().to_string();
    let sock = format!("unix://{}", k.runtime_sock.display());
    let evict = k.evict_below_mi;
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "{address}"
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: "{ca}"}}
authorization: {{mode: Webhook}}
tlsCertFile: "{crt}"
tlsPrivateKeyFile: "{key}"
containerRuntimeEndpoint: "{sock}"
imageServiceEndpoint: "{sock}"
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
volumePluginDir: "{flex}"
evictionHard:
  memory.available: 100Mi
  nodefs.available: {evict}Mi
  imagefs.available: {evict}Mi
evictionPressureTransitionPeriod: 30s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
"#,
        address = k.address,
        ca = pki("ca.crt"),
        crt = pki("kubelet.crt"),
        key = pki("kubelet.key"),
        flex = k.flex_dir.display(),
    )
}
