#!/usr/bin/env bash
# Builds headroom's node agent image with no registry and no container builder, as the
# Dockerfile describes it, and writes it as an OCI image archive: `scripts/image.sh [OUT.tar]`
# (default target/image/headroom-<version>.oci.tar) prints the archive's path.
#
# The image: the `agent`-profile binary at /usr/local/bin/headroom with the file capability
# cap_dac_read_search=+ep, glibc's and libgcc's shared objects it links (from Debian's libc6 and
# libgcc-s1 packages, with their copyright files), the CA roots of Debian's ca-certificates, an
# /etc/passwd with the nonroot user 65532; user 65532:65532, port 9737, entrypoint
# ["/usr/local/bin/headroom"], cmd ["agent"]. tests/image.rs checks that this and the Dockerfile
# describe the same image.
#
# scripts/oci-archive.sh writes the archive (an OCI layout plus a docker-archive manifest), so
# `ctr -n k8s.io images import`, `docker load` and `podman load` all accept it; the layer is
# reproducible (sorted names, mtime SOURCE_DATE_EPOCH, default 0).
# HEADROOM_IMAGE_NAME overrides the name (default docker.io/library/headroom:<version>).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
name="${HEADROOM_IMAGE_NAME:-docker.io/library/headroom:$version}"
out="${1:-target/image/headroom-$version.oci.tar}"
log() { echo "image.sh: $*" >&2; }

for tool in setcap:libcap2-bin dpkg-deb:dpkg apt-get:apt; do
  command -v "${tool%%:*}" >/dev/null || { log "needs ${tool%%:*} (Debian package ${tool#*:})"; exit 1; }
done

cargo build --profile agent --locked --bin headroom >&2
work=$(mktemp -d "${TMPDIR:-/tmp}/headroom-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot" "$work/debs"

# glibc, libgcc and the CA roots from Debian's packages (the versions this machine's apt knows).
(cd "$work/debs" && apt-get download -qq libc6 libgcc-s1 ca-certificates >/dev/null 2>&1) \
  || { log "apt-get download libc6 libgcc-s1 ca-certificates failed"; exit 1; }
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/pkg"; done
# libgcc-s1's doc directory is a symlink to its source package's base (gcc-12-base in bookworm),
# which carries the copyright.
base=$(readlink "$work/pkg/usr/share/doc/libgcc-s1" || true)
if [ -n "$base" ]; then
  (cd "$work/debs" && apt-get download -qq "$base" >/dev/null 2>&1) \
    || { log "apt-get download $base failed"; exit 1; }
  dpkg-deb -x "$work"/debs/"${base}"_*.deb "$work/pkg"
fi
for lib in libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2; do
  src=$(find "$work/pkg" -name "$lib" | head -1)
  [ -n "$src" ] || { log "no $lib in the packages"; exit 1; }
  mkdir -p "$root/lib/x86_64-linux-gnu"
  cp -L "$src" "$root/lib/x86_64-linux-gnu/$lib"
done
mkdir -p "$root/lib64"
ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/lib64/ld-linux-x86-64.so.2"
for p in libc6 libgcc-s1 ca-certificates; do
  mkdir -p "$root/usr/share/doc/$p"
  cp -L "$work/pkg/usr/share/doc/$p/copyright" "$root/usr/share/doc/$p/"
done
# What update-ca-certificates makes of the package's certificates (Mozilla's roots).
cat "$work"/pkg/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"

printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n' >"$root/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
install -m 0755 target/agent/headroom "$root/usr/local/bin/headroom"
# A non-root process gains DAC_READ_SEARCH only from the file's capability set (see Dockerfile);
# tar's --xattrs carries it into the layer as SCHILY.xattr.security.capability.
setcap cap_dac_read_search=+ep "$root/usr/local/bin/headroom"
chmod 1777 "$root/tmp"
chmod 0700 "$root/home/nonroot"
chown 65532:65532 "$root/home/nonroot"

scripts/oci-archive.sh "$root" "$name" "$out" \
  '{"User":"65532:65532","ExposedPorts":{"9737/tcp":{}},"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],"Entrypoint":["/usr/local/bin/headroom"],"Cmd":["agent"],"WorkingDir":"/"}'
echo "$out"
