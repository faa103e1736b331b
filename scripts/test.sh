#!/usr/bin/env bash
# The whole test suite, runnable on a fresh Debian machine as root: installs what the tests need
# from Debian's packages (PostgreSQL, e2fsprogs, mount, and promtool from prometheus), then runs
# every test. Tests that need root, Postgres or promtool fail loudly when CI is set and they
# cannot run; on a laptop they skip with a message.
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
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test.sh: installing ${missing[*]} from Debian's packages" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cargo test --all-targets "$@"
