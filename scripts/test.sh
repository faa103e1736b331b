#!/usr/bin/env bash
# The whole test suite, runnable on a fresh Debian machine as root: installs what the tests need
# (PostgreSQL from Debian's packages), then runs every test. Tests that need root or Postgres fail
# loudly when CI is set and they cannot run; on a laptop they skip with a message.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "test.sh: installing PostgreSQL from Debian's packages" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
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

cargo test --all-targets "$@"
