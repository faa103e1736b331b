#!/usr/bin/env bash
# Builds what a real single-node cluster needs (tests/support/realnode), once per machine, and
# prints the directory that holds it: kubelet, kube-controller-manager, kube-scheduler and
# kube-proxy from Debian's `kubernetes` source package (1.20.2, the recipe of
# scripts/kube-apiserver.sh, all missing ones in one `make WHAT=...` so the Go cache is shared),
# the pause image (`gcc -static` of the source's build/pause/linux/pause.c, as the OCI archive
# pause.oci.tar named k8s.gcr.io/pause:3.2, the 1.20 kubelet's default) and the test CSI node
# plugin (tests/support/realnode/csi/main.go, built with the same Go against the source's vendored
# CSI spec and kubelet plugin-registration API). Cached outside the clone in
# ${HEADROOM_KUBE_CACHE:-~/.cache/headroom}/node-1.20.2; the source tree (shared with
# scripts/kube-apiserver.sh through scripts/kube-source.sh, in kubernetes-1.20.2) is kept without
# its build output so a changed plugin rebuilds in seconds. Installs containerd, runc, the CNI
# plugins, iptables, ipset, conntrack and xfsprogs from Debian's packages when missing. Runs as
# root (apt-get).
set -euo pipefail
version=1.20.2
cache="${HEADROOM_KUBE_CACHE:-$HOME/.cache/headroom}"
dir="$cache/node-$version"
here="$(cd "$(dirname "$0")/.." && pwd)"
plugin_src="$here/tests/support/realnode/csi/main.go"
log() { echo "kube-node.sh: $*" >&2; }

if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
missing=()
need() { compgen -G "$1" >/dev/null || missing+=("$2"); }
need /usr/bin/etcd etcd-server
need /usr/bin/containerd containerd
need /usr/sbin/runc runc
need /usr/lib/cni/bridge containernetworking-plugins
need /usr/sbin/iptables iptables
need /usr/sbin/ipset ipset
need /usr/sbin/conntrack conntrack
need /usr/sbin/xfs_growfs xfsprogs
need /usr/sbin/mkfs.ext4 e2fsprogs
need /usr/sbin/losetup mount
need /usr/bin/openssl openssl
need /usr/bin/gcc gcc
need /usr/lib/x86_64-linux-gnu/libc.a libc6-dev
need /usr/bin/go golang-go
need /usr/bin/rsync rsync
need /usr/bin/dpkg-source dpkg-dev
need /usr/bin/make make
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} from Debian's packages"
  apt_install "${missing[@]}" ca-certificates
fi

mkdir -p "$dir"
# Before the tree was shared it lived here; a machine that has it gets the space back.
rm -rf "$dir/src" "$dir/.go" "$dir/.gocache"
. "$here/scripts/kube-source.sh"
kube_source

want=()
for b in kubelet kube-controller-manager kube-scheduler kube-proxy; do
  [ -x "$dir/$b" ] || want+=("cmd/$b")
done
if [ "${#want[@]}" -gt 0 ]; then
  start=$(date +%s)
  log "building ${want[*]} (about 12 minutes on 2 cores after kube-apiserver filled the Go cache)"
  kube_make "$dir" "" "${want[@]}"
  log "built ${want[*]} in $(( $(date +%s) - start ))s"
fi

if [ ! -x "$dir/pause" ]; then
  gcc -Os -static -o "$dir/pause.tmp" "$src/build/pause/linux/pause.c" -DVERSION=3.4.1
  mv "$dir/pause.tmp" "$dir/pause"
fi
if [ ! -f "$dir/pause.oci.tar" ]; then
  rm -rf "$dir/pause-root"; mkdir -p "$dir/pause-root"
  install -m 0755 "$dir/pause" "$dir/pause-root/pause"
  "$here/scripts/oci-archive.sh" "$dir/pause-root" k8s.gcr.io/pause:3.2 "$dir/pause.oci.tar" \
    '{"Entrypoint":["/pause"],"User":"65535:65535"}'
  rm -rf "$dir/pause-root"
fi

# The plugin's binary is named by its source's hash: an edited plugin is rebuilt, never stale.
if [ -f "$plugin_src" ]; then
  sum=$(sha256sum "$plugin_src" | cut -c1-16)
  plugin="$dir/headroom-csi-$sum"
  if [ ! -x "$plugin" ]; then
    pkg="$src/cmd/headroom-csi"
    mkdir -p "$pkg" && cp "$plugin_src" "$pkg/main.go"
    start=$(date +%s)
    (cd "$GOPATH/src/k8s.io/kubernetes" \
      && CGO_ENABLED=0 go build -o "$plugin.tmp" ./cmd/headroom-csi) || exit 1
    mv "$plugin.tmp" "$plugin"
    ln -sfn "$(basename "$plugin")" "$dir/headroom-csi"
    log "built the CSI plugin in $(( $(date +%s) - start ))s"
  fi
  ln -sfn "$(basename "$plugin")" "$dir/headroom-csi"
fi
# The plugin's own dependencies rebuild in under a minute without the Go cache.
kube_cache_done
echo "$dir"
