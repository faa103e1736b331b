#!/usr/bin/env bash
# Packs `kubectl headroom` for a release: `scripts/kubectl-plugin.sh [URI]` writes
# target/plugin/kubectl-headroom_v<version>_<os>_<arch>.tar.gz (the release binary as
# `kubectl-headroom`, the name kubectl and krew look for) and target/plugin/headroom.yaml, krew's
# manifest from the template plugins/headroom.yaml with the version, platform and the archive's
# sha256 filled in, and prints both paths.
#
# URI is where the archive will be downloadable; without it the manifest keeps the placeholder
# @URI@ (this repository publishes no archive), which `kubectl krew install --manifest=...
# --archive=...` does not download. Only the host's platform is packed (the binary cargo builds
# here). HEADROOM_PLUGIN_BINARY: a binary already built (default: cargo build --release);
# HEADROOM_PLUGIN_OUT: the output directory. The archive is reproducible (sorted, owner 0, mtime
# SOURCE_DATE_EPOCH, default 0).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
uri="${1:-@URI@}"
out="${HEADROOM_PLUGIN_OUT:-target/plugin}"
log() { echo "kubectl-plugin.sh: $*" >&2; }

os=$(uname -s | tr '[:upper:]' '[:lower:]')
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) log "no krew arch for $(uname -m)"; exit 1 ;;
esac
binary="${HEADROOM_PLUGIN_BINARY:-}"
if [ -z "$binary" ]; then
  cargo build --release --locked --bin headroom >&2
  binary=target/release/headroom
fi
[ -x "$binary" ] || { log "$binary is not an executable"; exit 1; }

mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/headroom-plugin.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$binary" "$work/kubectl-headroom"
chmod 0755 "$work/kubectl-headroom"
archive="$out/kubectl-headroom_v${version}_${os}_${arch}.tar.gz"
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner \
  --mtime="@${SOURCE_DATE_EPOCH:-0}" -cf - kubectl-headroom | gzip -n >"$archive"
sha=$(sha256sum "$archive" | cut -d' ' -f1)
# Only the manifest's body: the template's header comment says it is a template.
grep -v '^#' plugins/headroom.yaml \
  | sed -e "s|@VERSION@|$version|" -e "s|@OS@|$os|" -e "s|@ARCH@|$arch|" \
        -e "s|@SHA256@|$sha|" -e "s|@URI@|$uri|" >"$out/headroom.yaml"
[ "$uri" = "@URI@" ] && log "no URI given: $out/headroom.yaml keeps the placeholder @URI@"
echo "$archive"
echo "$out/headroom.yaml"
