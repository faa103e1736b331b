#!/usr/bin/env bash
# Prints the path of kubectl 1.20.2 from Debian's `kubernetes-client` package, the kubectl the
# migration test installs headroom with (`kubectl apply -k daemonset/`, as README says). The
# package is unpacked into ${HEADROOM_KUBE_CACHE:-~/.cache/headroom}, not installed: a machine
# may already have another package's /usr/bin/kubectl (Google's `kubectl` package conflicts).
set -euo pipefail
version=1.20.2
cache="${HEADROOM_KUBE_CACHE:-$HOME/.cache/headroom}"
dir="$cache/kubectl-$version"
bin="$dir/usr/bin/kubectl"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work" # apt-get download runs as _apt where it can
(cd "$work" && { apt-get download kubernetes-client >/dev/null 2>&1 \
  || { $SUDO apt-get update -qq && apt-get download kubernetes-client >/dev/null 2>&1; }; })
mkdir -p "$dir"
dpkg-deb -x "$work"/kubernetes-client_*.deb "$dir"
"$bin" version --client 2>/dev/null | grep -q "GitVersion:\"v$version\"" \
  || { echo "kubectl.sh: $bin is not kubectl $version" >&2; exit 1; }
echo "$bin"
