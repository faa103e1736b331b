#!/usr/bin/env bash
# Builds kube-apiserver from Debian's `kubernetes` source package (1.20.2) once per machine and
# prints its path. The binary is cached outside the clone, in ${HEADROOM_KUBE_CACHE:-~/.cache/headroom},
# and reused while it exists; etcd comes from Debian's etcd-server package. Runs as root (apt-get).
# Build recipe as debian/rules does it: GOPATH mode with a .go/src/k8s.io/kubernetes symlink, and
# `make WHAT=cmd/kube-apiserver` (which generates the OpenAPI definitions first; needs rsync). The
# source tree and Go cache are shared with scripts/kube-node.sh (scripts/kube-source.sh), which
# patches the tree with kube-apiserver-reflect2.patch: Debian's Go 1.19 and the vendored reflect2
# v1.0.1 make json-iterator's sorted-map encoding write through a garbage pointer, which kills the
# server (SIGSEGV) whenever a mutating webhook returns a JSONPatch (tests/kube_webhook.rs). A
# binary built before the patch (no matching stamp beside it) is rebuilt.
set -euo pipefail
version=1.20.2
cache="${HEADROOM_KUBE_CACHE:-$HOME/.cache/headroom}"
bin="$cache/kube-apiserver-$version"
stamp="$bin.patches"
patches="$(sha256sum "$(dirname "$0")/kube-apiserver-reflect2.patch" | cut -d' ' -f1)"
log() { echo "kube-apiserver.sh: $*" >&2; }

if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
[ -x /usr/bin/etcd ] || { log "installing etcd-server"; apt_install etcd-server; }

if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$patches" ]; then echo "$bin"; exit 0; fi

missing=()
command -v go >/dev/null || [ -x /usr/lib/go/bin/go ] || missing+=(golang-go)
command -v rsync >/dev/null || missing+=(rsync)
command -v dpkg-source >/dev/null || missing+=(dpkg-dev)
command -v make >/dev/null || missing+=(make)
command -v patch >/dev/null || missing+=(patch)
log "installing build tools: ${missing[*]:-none missing}"
apt_install "${missing[@]}" ca-certificates

. "$(dirname "$0")/kube-source.sh"
kube_source
start=$(date +%s)
log "building cmd/kube-apiserver (about 10 minutes on 2 cores with a cold Go cache)"
kube_make "$cache" "-$version" cmd/kube-apiserver
echo "$patches" >"$stamp"
log "built in $(( $(date +%s) - start ))s"
kube_cache_done
echo "$bin"
