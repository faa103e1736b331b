# Sourced by scripts/kube-apiserver.sh and scripts/kube-node.sh: one Kubernetes source tree and one
# Go build cache for both, in ${HEADROOM_KUBE_CACHE:-~/.cache/headroom}/kubernetes-$version, so a
# cold machine compiles the packages the API server and the node binaries share (apimachinery,
# client-go, the API types: most of the work) once, not twice. Expects $version, $cache, log() and
# apt_install() from the caller; sets $src, GOPATH and GOCACHE.
tree="$cache/kubernetes-$version"
src="$tree/src"
export GOPATH="$tree/.go" GO111MODULE=off GOFLAGS= GOCACHE="$tree/.gocache"
export PATH="/usr/lib/go/bin:$PATH"

kube_source() {
  if [ ! -f "$src/.complete" ]; then
    if ! grep -rqs '^Types: deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      log "adding a deb-src entry for bookworm main"
      printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        | $SUDO tee /etc/apt/sources.list.d/headroom-deb-src.sources >/dev/null
      $SUDO apt-get update -qq
    fi
    rm -rf "$src" "$tree/dl"; mkdir -p "$tree/dl"
    log "fetching the kubernetes source package"
    (cd "$tree/dl" && apt-get source -qq --download-only kubernetes >/dev/null \
      && dpkg-source -x --no-check kubernetes_*.dsc "$src" >/dev/null)
    # dpkg-source leaves a copy of the upstream tarball beside the tree it extracts.
    rm -rf "$tree/dl" "$tree"/kubernetes_*
    touch "$src/.complete"
  fi
  # reflect2 v1.0.2's fix for Go 1.18+ (see scripts/kube-apiserver.sh), once per tree.
  if [ ! -f "$src/.reflect2-patched" ]; then
    command -v patch >/dev/null || apt_install patch
    patch -s -p1 -N -d "$src" <"$(dirname "${BASH_SOURCE[0]}")/kube-apiserver-reflect2.patch"
    touch "$src/.reflect2-patched"
  fi
  mkdir -p "$GOPATH/src/k8s.io"
  ln -sfn "$src" "$GOPATH/src/k8s.io/kubernetes"
}

# make WHAT="cmd/a cmd/b" and install each binary as "$dest/<name>$suffix".
kube_make() {
  local dest="$1" suffix="$2"; shift 2
  (cd "$GOPATH/src/k8s.io/kubernetes" \
    && make WHAT="$*" KUBE_GIT_VERSION="v$version" >"$tree/make.log" 2>&1) \
    || { tail -40 "$tree/make.log" >&2; return 1; }
  local w b out
  for w in "$@"; do
    b="${w#cmd/}"
    out=$(find "$src/_output" -type f -name "$b" -perm -u+x | head -1)
    [ -n "$out" ] || { log "no $b under _output"; return 1; }
    install -m 0755 "$out" "$dest/$b$suffix.tmp" && mv "$dest/$b$suffix.tmp" "$dest/$b$suffix"
  done
  rm -rf "$src/_output"
}

# The Go cache is GBs: it is kept only while one of the two scripts still has binaries to build.
kube_cache_done() {
  local b
  [ -x "$cache/kube-apiserver-$version" ] || return 0
  for b in kubelet kube-controller-manager kube-scheduler kube-proxy; do
    [ -x "$cache/node-$version/$b" ] || return 0
  done
  rm -rf "$GOCACHE"
}
