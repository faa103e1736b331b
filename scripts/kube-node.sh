#!/usr/bin/env bash
# Builds what a real single-node cluster needs (tests/support/realnode), once per machine and
# Kubernetes release, and prints the directory that holds it:
# - kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl and
#   etcd of the release (scripts/kube-release.sh, from the Go module proxy), linked from its
#   directory (the tests drive the node with the release's own kubectl: drain's evictions are
#   policy/v1, and kustomize v5 reads the overlays);
# - the pause image: `gcc -static` of build/pause/linux/pause.c of the release's k8s.io/kubernetes
#   module, as the OCI archive pause.oci.tar named registry.k8s.io/pause:<TAG of its Makefile>;
# - the test CSI node plugin (tests/support/realnode/csi: a Go module of its own, its go.mod and
#   go.sum pin the CSI spec, gRPC and k8s.io/kubelet's plugin-registration API at the versions
#   of $KUBE_NEWEST; the same plugin serves an older node: registration v1 and CSI 1.x are stable),
#   named by the hash of its sources so an edited plugin is rebuilt, never stale.
# The release is $KUBE_NEWEST of scripts/kube-versions.sh, or HEADROOM_KUBE_NODE_VERSION (e.g.
# v1.34.4, $KUBE_OLDEST). Cached outside the clone in ${HEADROOM_KUBE_CACHE:-~/.cache/headroom}/
# node-<version>, with the Go build and module caches of kube-release.sh. Measured here on 2
# cores: the release itself 8-12 minutes (kube-release.sh: v1.34.4 in 8 min with a cold Go cache,
# v1.37.2 in 12 min after it); then the plugin 20 s with cold module and build caches, the pause
# image under a second, a whole run of this script on a built release 2-4 s. Installs
# containerd (1.6), runc, the CNI plugins, iptables, ipset, conntrack and xfsprogs from Debian's
# packages when missing (Kubernetes itself no longer comes from Debian's 1.20.2 source package).
# Runs as root (apt-get).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
. "$here/scripts/kube-versions.sh"
version="${HEADROOM_KUBE_NODE_VERSION:-$KUBE_NEWEST}"
cache="${HEADROOM_KUBE_CACHE:-$HOME/.cache/headroom}"
dir="$cache/node-$version"
csi="$here/tests/support/realnode/csi"
export PATH="/usr/local/go/bin:$PATH" GOTOOLCHAIN=local
export GOCACHE="$cache/go-build" GOMODCACHE="$cache/go-mod"
log() { echo "kube-node.sh: $*" >&2; }
die() { log "$*"; exit 1; }

if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
missing=()
need() { compgen -G "$1" >/dev/null || missing+=("$2"); }
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
need /usr/bin/curl curl
need /usr/bin/gcc gcc
need /usr/lib/x86_64-linux-gnu/libc.a libc6-dev
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} from Debian's packages"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" ca-certificates >/dev/null
fi

release="$("$here/scripts/kube-release.sh" "$version")" || die "cannot build Kubernetes $version"
mkdir -p "$dir"
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd; do
  ln -sfn "$release/$b" "$dir/$b"
done

# The pause image, under the name and tag the release's build/pause/Makefile gives it.
build_pause() {
  local src tag
  src="$GOMODCACHE/k8s.io/kubernetes@$version/build/pause"
  [ -f "$src/linux/pause.c" ] || go mod download "k8s.io/kubernetes@$version"
  tag=$(sed -n 's/^TAG ?= *//p' "$src/Makefile")
  [ -n "$tag" ] || die "no TAG in $src/Makefile"
  rm -rf "$dir/pause-root"; mkdir -p "$dir/pause-root"
  gcc -Os -static -o "$dir/pause-root/pause" "$src/linux/pause.c" -DVERSION="$tag"
  "$here/scripts/oci-archive.sh" "$dir/pause-root" "registry.k8s.io/pause:$tag" \
    "$dir/pause.oci.tar.tmp" '{"Entrypoint":["/pause"],"User":"65535:65535"}'
  mv "$dir/pause.oci.tar.tmp" "$dir/pause.oci.tar"
  rm -rf "$dir/pause-root"
}
[ -f "$dir/pause.oci.tar" ] || build_pause

# The plugin's binary is named by its sources' hash: an edited plugin or go.mod is rebuilt.
sum=$(cat "$csi/main.go" "$csi/go.mod" "$csi/go.sum" | sha256sum | cut -c1-16)
plugin="$dir/headroom-csi-$sum"
if [ ! -x "$plugin" ]; then
  start=$(date +%s)
  (cd "$csi" && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$plugin.tmp" .) \
    || die "building the CSI plugin failed"
  mv "$plugin.tmp" "$plugin"
  log "built the CSI plugin in $(( $(date +%s) - start ))s"
fi
ln -sfn "$(basename "$plugin")" "$dir/headroom-csi"
echo "$dir"
