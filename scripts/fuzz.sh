#!/usr/bin/env bash
# The fuzz targets of fuzz/ in CI, bounded: builds them (cargo-fuzz, libFuzzer, AddressSanitizer,
# debug assertions), replays each target's checked-in corpus (fuzz/corpus/<target>), then fuzzes
# each for HEADROOM_FUZZ_SECONDS (default 10; 8 targets, 80 s in all) from that corpus with its
# dictionary. Any crash, leak, timeout or allocation over a target's bounds fails the run and
# leaves the input in $work/artifacts (printed). The checked-in corpus is only read.
#
# cargo-fuzz is installed once into ~/.cache/headroom/cargo-fuzz (cold: about 3 minutes), the
# fuzz build's target directory is ~/.cache/headroom/fuzz-target (outside the clone: a warm run
# rebuilds only headroom), and RUSTC_BOOTSTRAP=1 lets the stable toolchain take the sanitizer
# flags, so no nightly is needed.
#
#   scripts/fuzz.sh                 # all targets, CI budget
#   scripts/fuzz.sh claim policy    # some targets
#   HEADROOM_FUZZ_SECONDS=600 nice -n 19 scripts/fuzz.sh pg_datadir   # a longer run
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${HEADROOM_CACHE:-$HOME/.cache/headroom}"
cargo_fuzz_version=0.13.2
seconds="${HEADROOM_FUZZ_SECONDS:-10}"
log() { echo "fuzz.sh: $*" >&2; }

if ! "$cache/cargo-fuzz/bin/cargo-fuzz" --version 2>/dev/null | grep -qF "$cargo_fuzz_version"; then
  log "installing cargo-fuzz $cargo_fuzz_version into $cache/cargo-fuzz"
  cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --root "$cache/cargo-fuzz" >&2
fi
export PATH="$cache/cargo-fuzz/bin:$PATH"
export RUSTC_BOOTSTRAP=1
target_dir="$cache/fuzz-target"
cargo fuzz build --debug-assertions --target-dir "$target_dir" >&2
bin="$target_dir/x86_64-unknown-linux-gnu/release"

# Each target's contract (fuzz/README.md): the largest input, the time one input may take (s),
# and the memory: resident in all and one allocation (MB).
declare -A max_len=([pg_datadir]=16384 [kubelet_root]=16384 [admission]=16384 [claim]=8192
  [policy]=8192 [kubelet_stats]=8192 [schedule]=1024 [quantity]=256)
declare -A timeout=([pg_datadir]=5 [kubelet_root]=2 [admission]=2 [claim]=2 [policy]=2
  [kubelet_stats]=2 [schedule]=2 [quantity]=1)
rss_mb=1024
malloc_mb=256

targets=("$@")
[ "${#targets[@]}" -gt 0 ] || mapfile -t targets < <(cargo fuzz list)
work="$(mktemp -d "${TMPDIR:-/tmp}/headroom-fuzz.XXXXXX")"
mkdir -p "$work/artifacts"
for t in "${targets[@]}"; do
  [ -n "${max_len[$t]:-}" ] || { log "no contract for target $t in scripts/fuzz.sh"; exit 1; }
  opts=(-max_len="${max_len[$t]}" -timeout="${timeout[$t]}" -rss_limit_mb="$rss_mb"
    -malloc_limit_mb="$malloc_mb" -artifact_prefix="$work/artifacts/$t-" -print_final_stats=1)
  corpus="fuzz/corpus/$t"
  log "$t: replaying $(find "$corpus" -type f | wc -l) inputs of $corpus"
  if ! "$bin/$t" "${opts[@]}" -runs=0 "$corpus" >"$work/$t.replay.log" 2>&1; then
    tail -40 "$work/$t.replay.log" >&2
    log "$t: the checked-in corpus fails; input in $work/artifacts"
    exit 1
  fi
  log "$t: fuzzing for ${seconds}s"
  mkdir -p "$work/$t"
  if ! "$bin/$t" "${opts[@]}" -dict="fuzz/dict/$t.dict" -max_total_time="$seconds" \
    "$work/$t" "$corpus" >"$work/$t.log" 2>&1; then
    tail -40 "$work/$t.log" >&2
    log "$t: failed; the input is in $work/artifacts ($(ls "$work/artifacts"))"
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^#[0-9]+ +DONE' "$work/$t.log" | tail -1 >&2 || true
done
rm -rf "$work"
log "all ${#targets[@]} targets passed"
