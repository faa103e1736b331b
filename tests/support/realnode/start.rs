//! Starting the node's processes, each a child of the test tied to it by PR_SET_PDEATHSIG, with
//! the flags that mattered on these machines (`../shared/real-node.md`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::*;

impl Node {
    pub(super) fn start_etcd(&self) {
        let mut cmd = Command::new(self.parts.bin("etcd"));
        cmd.arg("--name=realnode")
            .arg(format!("--data-dir={}", self.dir.join("etcd").display()))
            .arg("--listen-client-urls=http://127.0.0.1:23790")
            .arg("--advertise-client-urls=http://127.0.0.1:23790")
            .arg("--listen-peer-urls=http://127.0.0.1:23800")
            .arg("--initial-advertise-peer-urls=http://127.0.0.1:23800")
            .arg("--initial-cluster=realnode=http://127.0.0.1:23800")
            .arg("--log-level=error");
        self.spawn("etcd", cmd);
    }

    pub(super) fn start_apiserver(&self) {
        let p = |f: &str| self.pki().join(f).display().to_string();
        let mut cmd = Command::new(self.parts.bin("kube-apiserver"));
        cmd.arg("--etcd-servers=http://127.0.0.1:23790")
            .arg(format!("--bind-address={NODE_IP}"))
            .arg(format!("--advertise-address={NODE_IP}"))
            .arg(format!("--secure-port={API_PORT}"))
            .arg(format!("--tls-cert-file={}", p("apiserver.crt")))
            .arg(format!("--tls-private-key-file={}", p("apiserver.key")))
            .arg(format!("--client-ca-file={}", p("ca.crt")))
            .arg(format!("--kubelet-certificate-authority={}", p("ca.crt")))
            .arg(format!(
                "--kubelet-client-certificate={}",
                p("apiserver-kubelet-client.crt")
            ))
            .arg(format!(
                "--kubelet-client-key={}",
                p("apiserver-kubelet-client.key")
            ))
            .arg(format!(
                "--token-auth-file={}",
                self.dir.join("tokens.csv").display()
            ))
            .arg("--authorization-mode=Node,RBAC")
            // The node's name does not resolve; logs and exec go to its address.
            .arg("--kubelet-preferred-address-types=InternalIP")
            .arg("--enable-admission-plugins=NodeRestriction")
            .arg(format!("--service-account-key-file={}", p("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                p("sa.key")
            ))
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!("--service-cluster-ip-range={SERVICE_RANGE}"))
            .arg("--allow-privileged=true")
            .arg("--v=0");
        self.spawn("kube-apiserver", cmd);
        wait_for_cmd(Duration::from_secs(120), "kube-apiserver /readyz", || {
            self.kubectl_ok(&["get", "--raw", "/readyz"])
        });
    }

    pub(super) fn start_controllers(&self) {
        let p = |f: &str| self.pki().join(f).display().to_string();
        let mut kcm = Command::new(self.parts.bin("kube-controller-manager"));
        kcm.arg(format!("--kubeconfig={}", self.kubeconfig("kcm").display()))
            .arg("--controllers=*,-nodeipam")
            .arg("--leader-elect=false")
            .arg(format!("--root-ca-file={}", p("ca.crt")))
            .arg(format!(
                "--service-account-private-key-file={}",
                p("sa.key")
            ))
            .arg(format!(
                "--flex-volume-plugin-dir={}",
                self.dir.join("flex").display()
            ))
            .arg("--secure-port=0")
            .arg("--node-monitor-grace-period=40s");
        self.spawn("kube-controller-manager", kcm);
        let mut sched = Command::new(self.parts.bin("kube-scheduler"));
        sched
            .arg(format!(
                "--kubeconfig={}",
                self.kubeconfig("scheduler").display()
            ))
            .arg("--leader-elect=false")
            .arg("--secure-port=0");
        self.spawn("kube-scheduler", sched);
        let mut proxy = Command::new(self.parts.bin("kube-proxy"));
        proxy
            .arg(format!(
                "--kubeconfig={}",
                self.kubeconfig("proxy").display()
            ))
            .arg("--proxy-mode=iptables")
            .arg(format!("--hostname-override={NODE}"))
            .arg(format!("--cluster-cidr={POD_SUBNET}"))
            .arg("--conntrack-max-per-core=0")
            // Port 0 is refused ("must be a valid port"); one node per machine, so fixed ports.
            .arg("--healthz-bind-address=127.0.0.1:10356")
            .arg("--metrics-bind-address=127.0.0.1:10349");
        self.spawn("kube-proxy", proxy);
    }

    pub fn start_containerd(&self) {
        let conf = self.dir.join("containerd.toml");
        std::fs::write(
            &conf,
            config::containerd(&self.dir, &self.containerd_sock(), PAUSE_IMAGE),
        )
        .expect("containerd config");
        std::fs::write(
            self.dir.join("cni/10-headroom.conflist"),
            config::cni(&self.dir, host::BRIDGE, POD_SUBNET, NODE_IP, SERVICE_RANGE),
        )
        .expect("cni config");
        let mut cmd = Command::new("/usr/bin/containerd");
        cmd.arg("--config").arg(&conf);
        self.spawn("containerd", cmd);
        wait_for_cmd(Duration::from_secs(30), "containerd", || {
            self.ctr(&["version"]).map(|_| ())
        });
    }

    /// Restarts containerd (SIGKILL, then start): running containers keep running in their shims.
    pub fn restart_containerd(&self) {
        self.kill("containerd");
        self.start_containerd();
    }

    pub fn ctr(&self, args: &[&str]) -> Option<String> {
        let sock = self.containerd_sock().display().to_string();
        let mut all = vec!["--address", sock.as_str(), "-n", "k8s.io"];
        all.extend_from_slice(args);
        host::sh("ctr", &all)
    }

    pub(super) fn import(&self, archive: &Path) {
        let a = archive.display().to_string();
        let out = self.ctr(&["images", "import", "--all-platforms", &a]);
        assert!(out.is_some(), "ctr images import {a} failed");
    }

    /// Gives headroom's imported image another name (e.g. a new tag for a rolling update).
    pub fn tag_image(&self, name: &str) {
        self.tag_imported(
            |l| l.contains("headroom:") && !l.starts_with("headroom.test/"),
            name,
        );
    }

    /// Names the imported pause image as containerd's `sandbox_image` and the test pods say:
    /// its archive carries the release's own name (`registry.k8s.io/pause:<tag>`), which
    /// changes with the release.
    pub(super) fn tag_pause(&self) {
        self.tag_imported(|l| l.starts_with("registry.k8s.io/pause:"), PAUSE_IMAGE);
    }

    fn tag_imported(&self, is_source: impl Fn(&str) -> bool, name: &str) {
        let listed = self.ctr(&["images", "ls", "-q"]).unwrap_or_default();
        let source = listed
            .lines()
            .find(|l| is_source(l))
            .unwrap_or_else(|| panic!("no imported image to name {name}: {listed}"))
            .to_owned();
        let _ = self.ctr(&["images", "rm", name]);
        assert!(
            self.ctr(&["images", "tag", &source, name]).is_some(),
            "ctr images tag {name}"
        );
    }

    pub(super) fn start_csi_plugin(&self) {
        std::fs::create_dir_all(self.csi_state()).expect("csi state dir");
        let mut cmd = Command::new(self.parts.bin("headroom-csi"));
        cmd.arg(format!("--driver={DRIVER}"))
            .arg(format!("--root-dir={KUBELET_ROOT}"))
            .arg(format!("--state-dir={}", self.csi_state().display()))
            .arg(format!("--node-id={NODE}"));
        self.spawn("headroom-csi", cmd);
    }

    pub fn start_kubelet(&self) {
        let conf = self.dir.join("kubelet.yaml");
        let text = config::kubelet(&config::Kubelet {
            address: NODE_IP,
            pki: &self.pki(),
            runtime_sock: &self.containerd_sock(),
            flex_dir: &self.dir.join("flex"),
            evict_below_mi: EVICT_BELOW_MI,
        });
        std::fs::write(&conf, text).expect("kubelet config");
        let mut cmd = Command::new(self.parts.bin("kubelet"));
        cmd.arg(format!("--config={}", conf.display()))
            .arg(format!(
                "--kubeconfig={}",
                self.kubeconfig("kubelet").display()
            ))
            .arg(format!("--root-dir={KUBELET_ROOT}"))
            .arg(format!("--hostname-override={NODE}"))
            .arg(format!("--node-ip={NODE_IP}"))
            .arg(format!(
                "--cert-dir={}",
                self.dir.join("kubelet-pki").display()
            ))
            .arg("--v=1");
        self.spawn("kubelet", cmd);
        // Serving on :10250 means it has its runtime: the 1.37 kubelet exits when containerd does
        // not answer as it starts (a restart test restarted containerd right after it), and the
        // node's Ready condition stays the old kubelet's for up to --node-monitor-grace-period.
        let serving = || super::observe::kubelet_get(self, "admin-token", "/healthz").0 == 200;
        wait_for_cmd(
            Duration::from_secs(90),
            "the kubelet serving :10250",
            || serving().then_some(()),
        );
    }
}
