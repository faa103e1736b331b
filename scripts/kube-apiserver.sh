#!/usr/bin/env bash
# Builds kube-apiserver from Debian's `kubernetes` source package (1.20.2) once per machine and
# prints its path. The binary is cached outside the clone, in ${HEADROOM_KUBE_CACHE:-~/.cache/headroom},
# and reused while it exists; etcd comes from Debian's etcd-server package. Runs as root (apt-get).
# Build recipe as debian/rules does it: GOPATH mode with a .go/src/k8s.io/kubernetes symlink, and
# `make WHAT=cmd/kube-apiserver` (which generates the OpenAPI definitions first; needs rsync).
set -euo pipefail
version=1.20.2
cache="${HEADROOM_KUBE_CACHE:-$HOME/.cache/headroom}"
bin="$cache/kube-apiserver-$version"
log() { echo "kube-apiserver.sh: $*" >&2; }

if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
[ -x /usr/bin/etcd ] || { log "installing etcd-server"; apt_install etcd-server; }

if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

missing=()
command -v go >/dev/null || [ -x /usr/lib/go/bin/go ] || missing+=(golang-go)
command -v rsync >/dev/null || missing+=(rsync)
command -v dpkg-source >/dev/null || missing+=(dpkg-dev)
command -v make >/dev/null || missing+=(make)
if ! grep -rqs '^Types: deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  log "adding a deb-src entry for bookworm main"
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    | $SUDO tee /etc/apt/sources.list.d/headroom-deb-src.sources >/dev/null
fi
log "installing build tools: ${missing[*]:-none missing}"
apt_install "${missing[@]}" ca-certificates

work="$cache/build"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
log "fetching the kubernetes source package"
apt-get source -qq --download-only kubernetes >/dev/null
dpkg-source -x --no-check kubernetes_*.dsc src >/dev/null
mkdir -p .go/src/k8s.io
ln -s "$work/src" .go/src/k8s.io/kubernetes
export GOPATH="$work/.go" GO111MODULE=off GOFLAGS= GOCACHE="$work/.gocache"
export PATH="/usr/lib/go/bin:$PATH"
start=$(date +%s)
log "building cmd/kube-apiserver (about 12-15 minutes on 2 cores)"
cd .go/src/k8s.io/kubernetes
make WHAT=cmd/kube-apiserver KUBE_GIT_VERSION="v$version" >"$work/make.log" 2>&1 || { tail -40 "$work/make.log" >&2; exit 1; }
out=$(find _output -type f -name kube-apiserver -perm -u+x | head -1)
[ -n "$out" ] || { log "no kube-apiserver under _output"; exit 1; }
install -m 0755 "$out" "$bin.tmp" && mv "$bin.tmp" "$bin"
log "built in $(( $(date +%s) - start ))s"
cd "$cache"; rm -rf "$work"
echo "$bin"
