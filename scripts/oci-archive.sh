#!/usr/bin/env bash
# Writes a root filesystem as a one-layer OCI image archive that `ctr images import`,
# `docker load` and `podman load` accept: `scripts/oci-archive.sh ROOTFS NAME OUT CONFIG`, where
# NAME is the full reference (docker.io/library/headroom:0.1.0) and CONFIG the image config's
# "config" object as JSON ({"Entrypoint":[...],...}). The archive holds an OCI layout (oci-layout,
# index.json naming the image in the io.containerd.image.name and
# org.opencontainers.image.ref.name annotations, manifest, config, one uncompressed layer) and a
# docker-archive manifest.json over the same blobs. The layer keeps the files' owners, modes and
# security.capability xattrs, with sorted names and mtime SOURCE_DATE_EPOCH (default 0), so the
# same inputs give the same digests.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: $0 ROOTFS NAME OUT CONFIG-JSON" >&2; exit 2; }
root="$1" name="$2" out="$3" cfg="$4"
epoch="${SOURCE_DATE_EPOCH:-0}"
work=$(mktemp -d "${TMPDIR:-/tmp}/oci-archive.XXXXXX")
trap 'rm -rf "$work"' EXIT
blobs="$work/oci/blobs/sha256"
mkdir -p "$blobs"

tar --create --file "$work/layer.tar" --directory "$root" --sort=name --format=posix \
  --xattrs --xattrs-include=security.capability --numeric-owner \
  --mtime="@$epoch" --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime .
blob() { # blob FILE: moves FILE into the blob store, prints its digest's hex
  local d; d=$(sha256sum "$1" | cut -d' ' -f1); mv "$1" "$blobs/$d"; echo "$d"
}
size() { stat -c %s "$blobs/$1"; }
layer=$(blob "$work/layer.tar")
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
printf '%s' '{"architecture":"amd64","os":"linux","created":"'"$created"'","config":'"$cfg"',"rootfs":{"type":"layers","diff_ids":["sha256:'"$layer"'"]},"history":[{"created":"'"$created"'","created_by":"scripts/oci-archive.sh"}]}' >"$work/config.json"
config=$(blob "$work/config.json")
printf '%s' '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:'"$config"'","size":'"$(size "$config")"'},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:'"$layer"'","size":'"$(size "$layer")"'}]}' >"$work/manifest.json"
manifest=$(blob "$work/manifest.json")
printf '%s' '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:'"$manifest"'","size":'"$(size "$manifest")"',"annotations":{"io.containerd.image.name":"'"$name"'","org.opencontainers.image.ref.name":"'"${name##*:}"'"}}]}' >"$work/oci/index.json"
printf '%s' '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
printf '%s' '[{"Config":"blobs/sha256/'"$config"'","RepoTags":["'"${name#docker.io/library/}"'"],"Layers":["blobs/sha256/'"$layer"'"]}]' >"$work/oci/manifest.json"

mkdir -p "$(dirname "$out")"
tar --create --file "$out.tmp" --directory "$work/oci" --sort=name --numeric-owner \
  --owner=0 --group=0 --mtime="@$epoch" .
mv "$out.tmp" "$out"
echo "oci-archive.sh: $name: $(stat -c %s "$out") bytes, layer sha256:$layer" >&2
