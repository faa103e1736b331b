#!/usr/bin/env bash
# Builds an image of PostgreSQL 15 with no registry and no container builder, for the real-node
# tests' PostgreSQL pods (tests/support/realnode/postgres.rs), and writes it as an OCI image
# archive: `scripts/pg-image.sh` prints the archive's path on stdout (logs on stderr). The tests
# find it through HEADROOM_PG_IMAGE, which points at that archive.
#
# Cached outside the clone, in
# ${HEADROOM_KUBE_CACHE:-$HOME/.cache/headroom}/postgres-image/postgres-15-<key>.oci.tar, where
# <key> is a short hash of the installed postgresql-15 package's version, this script's content
# and the image's name: a new package or an edited script builds a new archive; a hit prints the
# path at once.
#
# The image (name headroom.test/postgres:15, HEADROOM_PG_IMAGE_NAME overrides it): Debian's
# postgresql-15 binaries as this machine has them (/usr/lib/postgresql/15/{bin,lib},
# /usr/share/postgresql/15, /usr/share/zoneinfo), every shared library `ldd` names for them at its
# own path (and the loader at /lib64/ld-linux-x86-64.so.2), busybox-static at /bin/busybox with
# applet links in /bin (a shell, chown and chmod for the init container that owns the volumes), an
# /etc/passwd and /etc/group naming root, postgres 26:26 (CloudNativePG, Crunchy), spilo 101:101
# (Zalando Spilo) and bitnami 1001:0 (Bitnami) with their homes (initdb refuses a uid without a
# passwd line), /tmp and /var/run/postgresql mode 1777, and the copyright files of the packages
# it takes files from. postgresql-15 and busybox-static are installed with apt when missing.
# Config: user 26:26 (pods override it), port 5432, PATH with PostgreSQL's bin first,
# PGDATA=/var/lib/postgresql/data/pgdata, working directory /tmp, entrypoint
# /usr/local/bin/pg-run.
#
# pg-run (a busybox sh script, runs as any uid with a writable PGDATA parent; no root):
# - PGDATA (required) the data directory; PG_WALDIR (optional) makes pg_wal a symlink to it
#   (initdb / pg_basebackup --waldir); PG_ROLE primary (default) or replica.
# - primary, when $PGDATA/PG_VERSION is missing: initdb -U postgres -A trust, then appends to
#   postgresql.conf listen_addresses '*', unix_socket_directories '/tmp', archive_mode on with
#   archive_command '/bin/true' (in the file, never `-c`: a -c outranks ALTER SYSTEM, and tests
#   change archive_command with ALTER SYSTEM), wal_level replica, small WAL and buffer sizes,
#   fsync off; and to pg_hba.conf trust for all and for replication from anywhere.
# - replica (PG_PRIMARY, PG_SLOT required), when $PGDATA/PG_VERSION is missing: waits up to 120 s
#   for the primary's port 5432, then pg_basebackup -R -X stream -C -S $PG_SLOT (without -C when
#   the slot already exists on the primary, a retry).
# - PG_EXTRA_CONF (optional): lines appended to postgresql.conf when the directory is made (for a
#   replica, after the base backup), e.g. "port = 5433".
# - PG_HOLD=1 (replica only): the base backup is left as pg_basebackup wrote it (backup_label,
#   standby.signal) and the server is not started: the container sleeps, as a restore that has
#   not begun its recovery.
# - then exec postgres -D $PGDATA in the foreground.
#
# scripts/oci-archive.sh writes the archive (see there: ctr, docker and podman load it; the layer
# is reproducible).
set -euo pipefail
self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
cd "$(dirname "$self")/.."
name="${HEADROOM_PG_IMAGE_NAME:-headroom.test/postgres:15}"
cache="${HEADROOM_KUBE_CACHE:-$HOME/.cache/headroom}/postgres-image"
log() { echo "pg-image.sh: $*" >&2; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
missing=()
installed postgresql-15 && [ -x /usr/lib/postgresql/15/bin/postgres ] || missing+=(postgresql-15)
installed busybox-static && [ -x /bin/busybox ] || missing+=(busybox-static)
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} from Debian's packages"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  inst() { DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; }
  inst || { $SUDO apt-get update -qq >&2 && inst; } || { log "cannot install ${missing[*]}"; exit 1; }
fi

pgver=$(dpkg-query -W -f='${Version}' postgresql-15)
key=$({ printf '%s\n%s\n' "$pgver" "$name"; cat "$self"; } | sha256sum | cut -c1-12)
out="$cache/postgres-15-$key.oci.tar"
if [ -f "$out" ]; then
  echo "$out"
  exit 0
fi

start=$(date +%s)
log "building $name from postgresql-15 $pgver into $out"
work=$(mktemp -d "${TMPDIR:-/tmp}/headroom-pg-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
pg=/usr/lib/postgresql/15
mkdir -p "$root$pg" "$root/usr/share/postgresql" "$root/usr/local/bin" "$root/usr/bin" \
  "$root/bin" "$root/etc" "$root/tmp" "$root/var/run/postgresql" "$root/var/lib/postgresql" \
  "$root/root" "$root/home"

# PostgreSQL itself, its shared data and the time zones (Debian builds it with the system tzdata).
cp -a "$pg/bin" "$pg/lib" "$root$pg/"
# Not the JIT provider: it pulls in libLLVM and libz3 (over 100 MB); `jit = off` below.
rm -rf "$root$pg"/lib/llvmjit*
cp -a /usr/share/postgresql/15 "$root/usr/share/postgresql/"
cp -a /usr/share/zoneinfo "$root/usr/share/"
rm -f "$root/usr/share/zoneinfo/localtime" # -> /etc/localtime, which the image does not have

# Every library ldd names for every binary and module, at its own path.
libs=$(
  for f in "$pg"/bin/* "$pg"/lib/*.so; do
    [ -L "$f" ] && continue
    case "$f" in */llvmjit*) continue ;; esac
    out_ldd=$(ldd "$f" 2>&1) || { log "ldd $f: $out_ldd"; exit 1; }
    if grep -q 'not found' <<<"$out_ldd"; then log "ldd $f: $out_ldd"; exit 1; fi
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' <<<"$out_ldd"
  done | sort -u
)
grep -qx /lib64/ld-linux-x86-64.so.2 <<<"$libs" || libs+=$'\n/lib64/ld-linux-x86-64.so.2'
while read -r lib; do
  case "$lib" in "$pg"/*) continue ;; esac # the modules themselves, already there
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done <<<"$libs"

# busybox (static) for a shell and the tools, an applet link each.
cp /bin/busybox "$root/bin/busybox"
# The list is read once: `busybox --list | grep -q` under pipefail fails when grep exits on its
# match before busybox has written the rest (SIGPIPE), as it did on a loaded machine ("no applet
# echo" with echo there).
applets=$(/bin/busybox --list)
for a in sh ash chown chmod chgrp mkdir rmdir ls cat sleep ln rm cp mv true false test [ echo id \
  env printf sed grep egrep touch head tail du df stat readlink realpath kill ps find dd wc date \
  sort uniq cut tr awk tee xargs basename dirname pwd whoami hostname uname nc less vi sync \
  timeout usleep mktemp tar gzip which free top pidof nproc seq expr; do
  grep -qxF -- "$a" <<<"$applets" || { log "busybox has no applet $a"; exit 1; }
  ln -s busybox "$root/bin/$a"
done
ln -s /bin/busybox "$root/usr/bin/env"

# Users: the uids each operator runs PostgreSQL as, with homes they can write.
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
postgres:x:26:26:PostgreSQL (CloudNativePG, Crunchy):/home/postgres:/bin/sh
spilo:x:101:101:PostgreSQL (Zalando Spilo):/home/spilo:/bin/sh
bitnami:x:1001:0:PostgreSQL (Bitnami):/home/bitnami:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
postgres:x:26:
spilo:x:101:
spilo-docs:x:103:
bitnami:x:1001:
nogroup:x:65534:
EOF
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
# 0755, not 0700: Spilo's volume is mounted at /home/postgres/pgdata and runs as 101.
for u in postgres:26:26 spilo:101:101 bitnami:1001:0; do
  IFS=: read -r user uid gid <<<"$u"
  mkdir -p "$root/home/$user"
  chown "$uid:$gid" "$root/home/$user"
  chmod 0755 "$root/home/$user"
done
chmod 0700 "$root/root"
chmod 1777 "$root/tmp" "$root/var/run/postgresql"

# The copyright files of the packages the image takes files from.
pkgs=$(
  {
    echo postgresql-15
    echo busybox-static
    while read -r lib; do
      case "$lib" in "$pg"/*) continue ;; esac
      dpkg -S "$lib" 2>/dev/null || dpkg -S "/usr${lib}" 2>/dev/null \
        || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || log "no package owns $lib"
    done <<<"$libs" | sed -n 's/^\([^:,]*\).*: .*/\1/p'
    dpkg -S /usr/share/zoneinfo 2>/dev/null | tr ',' '\n' | sed -n 's/^ *\([^:]*\).*/\1/p' | grep -x tzdata
  } | sort -u
)
for p in $pkgs; do
  if [ -f "/usr/share/doc/$p/copyright" ]; then
    mkdir -p "$root/usr/share/doc/$p"
    cp -L "/usr/share/doc/$p/copyright" "$root/usr/share/doc/$p/"
  else
    log "no copyright file for $p"
  fi
done

# The entrypoint.
cat >"$root/usr/local/bin/pg-run" <<'PGRUN'
#!/bin/sh
# pg-run: makes PostgreSQL 15's data directory as an operator would, then runs the server in the
# foreground. Written by headroom's scripts/pg-image.sh, which describes the environment:
# PGDATA (required), PG_WALDIR, PG_ROLE=primary|replica, PG_PRIMARY and PG_SLOT (replica),
# PG_EXTRA_CONF (lines appended to postgresql.conf when the directory is made).
set -eu
log() { echo "pg-run: $*" >&2; }
die() { log "$*"; exit 1; }
me="uid $(id -u) gid $(id -g)"

[ -n "${PGDATA:-}" ] || die "PGDATA is required"
role="${PG_ROLE:-primary}"
waldir="${PG_WALDIR:-}"
case "$PGDATA" in /*) ;; *) die "PGDATA must be an absolute path, not $PGDATA" ;; esac
case "$waldir" in ''|/*) ;; *) die "PG_WALDIR must be an absolute path, not $waldir" ;; esac
case "$role" in primary|replica) ;; *) die "PG_ROLE must be primary or replica, not $role" ;; esac
export PGDATA

# can_make DIR WHAT: DIR is writable, or does not exist and its parent is.
can_make() {
  if [ -e "$1" ]; then
    [ -d "$1" ] || die "$2 $1 exists and is not a directory"
    [ -w "$1" ] && [ -x "$1" ] || die "$2 $1 is not writable by $me (chown it to this uid first, e.g. from an init container running as root)"
  else
    p=$(dirname "$1")
    [ -d "$p" ] || die "$2's parent $p does not exist (make it and chown it to $me first)"
    [ -w "$p" ] && [ -x "$p" ] || die "$2's parent $p is not writable by $me (chown it to this uid first, e.g. from an init container running as root)"
  fi
}
# empty DIR: removes what DIR holds (a base backup cut short).
empty() {
  for f in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    if [ -e "$f" ] || [ -L "$f" ]; then rm -rf "$f"; fi
  done
}
waldir_opt() { if [ -n "$waldir" ]; then echo "--waldir=$waldir"; fi; }

if [ ! -f "$PGDATA/PG_VERSION" ]; then
  can_make "$PGDATA" PGDATA
  if [ -n "$waldir" ]; then can_make "$waldir" PG_WALDIR; fi
  if [ "$role" = primary ]; then
    log "initdb $PGDATA as $me${waldir:+, WAL in $waldir}"
    # shellcheck disable=SC2046
    initdb -D "$PGDATA" -U postgres -A trust --no-sync $(waldir_opt)
    cat >>"$PGDATA/postgresql.conf" <<'EOF'

# pg-run (headroom's test image)
listen_addresses = '*'
unix_socket_directories = '/tmp'
archive_mode = on
archive_command = '/bin/true'
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
max_wal_size = '64MB'
min_wal_size = '32MB'
wal_keep_size = 0
shared_buffers = '16MB'
checkpoint_timeout = '30s'
fsync = off
jit = off
EOF
    cat >>"$PGDATA/pg_hba.conf" <<'EOF'
host all all 0.0.0.0/0 trust
host replication all 0.0.0.0/0 trust
EOF
  else
    [ -n "${PG_PRIMARY:-}" ] || die "PG_PRIMARY (the primary's host or IP) is required for a replica"
    [ -n "${PG_SLOT:-}" ] || die "PG_SLOT (the replication slot's name) is required for a replica"
    case "$PG_SLOT" in *[!a-z0-9_]*) die "PG_SLOT may hold only a-z, 0-9 and _, not $PG_SLOT" ;; esac
    log "waiting for the primary $PG_PRIMARY:5432"
    deadline=$(( $(date +%s) + 120 ))
    until pg_isready -q -h "$PG_PRIMARY" -p 5432 -U postgres -d postgres -t 2; do
      [ "$(date +%s)" -lt "$deadline" ] || die "the primary $PG_PRIMARY:5432 is not ready after 120 s"
      sleep 1
    done
    n=$(psql -h "$PG_PRIMARY" -p 5432 -U postgres -d postgres -XAtq \
      -c "select count(*) from pg_replication_slots where slot_name = '$PG_SLOT'") \
      || die "cannot list the primary's replication slots"
    if [ "$n" = 0 ]; then create=-C; else create=; log "slot $PG_SLOT exists on the primary: using it"; fi
    # Whatever an earlier, interrupted pg_basebackup left (no PG_VERSION: not a data directory).
    if [ -d "$PGDATA" ]; then empty "$PGDATA"; fi
    if [ -n "$waldir" ] && [ -d "$waldir" ]; then empty "$waldir"; fi
    log "pg_basebackup from $PG_PRIMARY into $PGDATA as $me, slot $PG_SLOT${waldir:+, WAL in $waldir}"
    # shellcheck disable=SC2046,SC2086
    pg_basebackup -h "$PG_PRIMARY" -p 5432 -U postgres -D "$PGDATA" -R -X stream $create \
      -S "$PG_SLOT" $(waldir_opt)
  fi
  if [ -n "${PG_EXTRA_CONF:-}" ]; then
    printf '%s\n' "$PG_EXTRA_CONF" >>"$PGDATA/postgresql.conf"
  fi
  chmod 0700 "$PGDATA"
fi
if [ "${PG_HOLD:-}" = 1 ] && [ "$role" = replica ]; then
  log "holding the base backup in $PGDATA: the server is not started"
  exec sleep 2147483647
fi
exec postgres -D "$PGDATA"
PGRUN
chmod 0755 "$root/usr/local/bin/pg-run"

# The layer is written as root owns what was copied; the homes keep their owners.
scripts/oci-archive.sh "$root" "$name" "$out.$$.tmp" \
  '{"User":"26:26","ExposedPorts":{"5432/tcp":{}},"Env":["PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin:/bin","PGDATA=/var/lib/postgresql/data/pgdata"],"Entrypoint":["/usr/local/bin/pg-run"],"WorkingDir":"/tmp"}'
mv "$out.$$.tmp" "$out"
log "built $out ($(stat -c %s "$out") bytes) in $(( $(date +%s) - start )) s"
echo "$out"
