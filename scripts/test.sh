#!/usr/bin/env bash
# The whole test suite, runnable on a fresh Debian machine as root: installs what the tests need
# (PostgreSQL and promtool from Debian's packages), then runs every test. Tests that need root or Postgres fail
# loudly when CI is set and they cannot run; on a laptop they skip with a message.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "test.sh: installing PostgreSQL from Debian's packages" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi

if ! command -v promtool >/dev/null 2>&1; then
  echo "test.sh: installing promtool (Debian package prometheus) for the alert rule tests" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

cargo test --all-targets "$@"
