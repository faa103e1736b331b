#!/usr/bin/env bash
# The fuzz targets of fuzz/ (cargo-fuzz, libFuzzer, AddressSanitizer, debug assertions).
#
#   scripts/fuzz.sh [target ...]            # CI: replay each checked-in corpus, then fuzz each
#   scripts/fuzz.sh --planted [target ...]  # each target must find its planted bug
#
# Default mode: builds the targets, replays each target's checked-in corpus (fuzz/corpus/<t>),
# then fuzzes each for HEADROOM_FUZZ_SECONDS (default 10) from that corpus with its dictionary.
# Any crash, leak, timeout or allocation over a target's bounds fails the run and leaves the
# input in the artifacts directory it prints. The checked-in corpus is only read; what the run
# adds stays in HEADROOM_FUZZ_WORK (default: a temporary directory, removed after a pass).
#
# --planted: the same runs, on a copy of the tree with fuzz/planted.patch applied (one bug per
# target, each switched on by HEADROOM_PLANTED=<target>, off otherwise). Each target must fail
# within the same budget, and the input it fails on must pass on the same binary with its bug
# switched off, so the failure is the planted bug and nothing else. A target that cannot fail
# fails this mode. HEADROOM_FUZZ_CORPUS=none starts from an empty corpus (dictionary only).
#
# HEADROOM_FUZZ_BUILD: `dev` (default: unoptimised, a few minutes cold, about ten times fewer
# executions per second) or `release` (the campaign's: optimised, codegen in one unit, about 11
# minutes cold). HEADROOM_FUZZ_RUNS caps the executions per target (the campaign's 10 million).
#
# cargo-fuzz is installed once into ~/.cache/headroom/cargo-fuzz (cold: about 3 minutes); the
# build's target directory is ~/.cache/headroom/fuzz-target and the planted copy of the tree
# ~/.cache/headroom/fuzz-planted-tree (outside the clone, so a warm run rebuilds only headroom);
# RUSTC_BOOTSTRAP=1 lets the stable toolchain
# take the sanitizer flags, so no nightly is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${HEADROOM_CACHE:-$HOME/.cache/headroom}"
cargo_fuzz_version=0.13.2
seconds="${HEADROOM_FUZZ_SECONDS:-10}"
profile="${HEADROOM_FUZZ_BUILD:-dev}"
log() { echo "fuzz.sh: $*" >&2; }

planted=""
if [ "${1:-}" = "--planted" ]; then
  planted=1
  shift
fi
case "$profile" in
  dev) build_flag=(--dev) out=debug ;;
  release) build_flag=(--release --debug-assertions) out=release ;;
  *) log "HEADROOM_FUZZ_BUILD must be dev or release, not $profile"; exit 1 ;;
esac

if ! "$cache/cargo-fuzz/bin/cargo-fuzz" --version 2>/dev/null | grep -qF "$cargo_fuzz_version"; then
  log "installing cargo-fuzz $cargo_fuzz_version into $cache/cargo-fuzz"
  cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --root "$cache/cargo-fuzz" >&2
fi
export PATH="$cache/cargo-fuzz/bin:$PATH"
export RUSTC_BOOTSTRAP=1

# Each target's contract (fuzz/README.md): the largest input, the time one input may take (s),
# and the memory: resident in all and one allocation (MB).
declare -A max_len=([pg_datadir]=16384 [kubelet_root]=16384 [admission]=16384 [claim]=8192
  [policy]=8192 [kubelet_stats]=8192 [schedule]=1024 [quantity]=256)
declare -A timeout=([pg_datadir]=5 [kubelet_root]=2 [admission]=2 [claim]=2 [policy]=2
  [kubelet_stats]=2 [schedule]=2 [quantity]=1)
# The unoptimised build runs about ten times slower: its time bound is five times the figure.
slower=1
[ "$profile" = release ] || slower=5
rss_mb=1024
malloc_mb=256

keep="${HEADROOM_FUZZ_WORK:-}"
work="${keep:-$(mktemp -d "${TMPDIR:-/tmp}/headroom-fuzz.XXXXXX")}"
mkdir -p "$work/artifacts"

# The tree the targets are built from: this one, or a copy with the planted bugs.
tree="$PWD"
target_dir="$cache/fuzz-target"
if [ -n "$planted" ]; then
  # A fixed place, so a warm run rebuilds only what the copy changed.
  tree="$cache/fuzz-planted-tree"
  rm -rf "$tree"
  mkdir -p "$tree"
  git ls-files -z --cached --others --exclude-standard | grep -zv '^fuzz/corpus/' \
    | xargs -0 cp --parents --preserve=timestamps -t "$tree"
  # The copy has no .git: the ceiling keeps git from applying to a repository around it.
  patch="$PWD/fuzz/planted.patch"
  (cd "$tree" && GIT_CEILING_DIRECTORIES="$(dirname "$tree")" git apply "$patch")
fi
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || mapfile -t targets < <(cd fuzz && cargo fuzz list)
(cd "$tree/fuzz" && cargo fuzz build "${build_flag[@]}" --target-dir "$target_dir" >&2)
bin="$target_dir/x86_64-unknown-linux-gnu/$out"
if [ -n "$planted" ]; then
  # Both trees build in one target directory (the dependencies are built once), where each
  # build links its binaries to the same names: the planted ones are kept aside at once.
  mkdir -p "$tree/bin"
  for t in "${targets[@]}"; do cp "$bin/$t" "$tree/bin/$t"; done
  bin="$tree/bin"
fi

# run TARGET LOG ARGS...: one libFuzzer run under the target's contract.
run() {
  local t="$1" out="$2"
  shift 2
  local opts=(-max_len="${max_len[$t]}" -timeout="$((timeout[$t] * slower))" -rss_limit_mb="$rss_mb"
    -malloc_limit_mb="$malloc_mb" -artifact_prefix="$work/artifacts/$t-" -print_final_stats=1)
  [ -z "${HEADROOM_FUZZ_RUNS:-}" ] || opts+=(-runs="$HEADROOM_FUZZ_RUNS")
  "$bin/$t" "${opts[@]}" "$@" >"$out" 2>&1
}

# fuzz TARGET: replay the corpus, then fuzz from it; the status of the first run that fails,
# with `stage` naming it.
fuzz() {
  local t="$1" corpus="fuzz/corpus/$1"
  [ "${HEADROOM_FUZZ_CORPUS:-}" != none ] || corpus="$work/empty-$t"
  mkdir -p "$corpus" "$work/$t"
  log "$t: replaying $(find "$corpus" -type f | wc -l) inputs of $corpus"
  stage=replay
  run "$t" "$work/$t.replay.log" -runs=0 "$corpus" || return 1
  log "$t: fuzzing for ${seconds}s"
  stage=fuzz
  run "$t" "$work/$t.log" -dict="fuzz/dict/$t.dict" -max_total_time="$seconds" "$work/$t" "$corpus"
}

for t in "${targets[@]}"; do
  [ -n "${max_len[$t]:-}" ] || { log "no contract for target $t in scripts/fuzz.sh"; exit 1; }
  if [ -z "$planted" ]; then
    if ! fuzz "$t"; then
      tail -40 "$work/$t.log" "$work/$t.replay.log" 2>/dev/null >&2 || true
      log "$t: failed; the input is in $work/artifacts ($(ls "$work/artifacts"))"
      exit 1
    fi
    grep -E '^#[0-9]+[[:space:]]+DONE' "$work/$t.log" | tail -1 >&2 || true
    continue
  fi
  started=$(date +%s%N)
  if HEADROOM_PLANTED="$t" fuzz "$t"; then
    log "$t: its planted bug was not found within ${seconds}s"
    exit 1
  fi
  took_ms=$((($(date +%s%N) - started) / 1000000))
  failed_log="$work/$t.log"
  [ "$stage" = fuzz ] || failed_log="$work/$t.replay.log"
  found=$(ls -t "$work/artifacts" | grep "^$t-" | head -1 || true)
  if [ -z "$found" ] || ! run "$t" "$work/$t.clean.log" "$work/artifacts/$found"; then
    tail -40 "$failed_log" >&2
    log "$t: failed on something other than its planted bug (${found:-no input}); see $work"
    exit 1
  fi
  why=$(grep -m1 -E "panicked at|^SUMMARY" "$failed_log" || true)
  execs=$(grep -oE "^#[0-9]+" "$failed_log" | tail -1 || true)
  log "$t: planted bug found ($stage, $((took_ms / 1000)).$((took_ms % 1000 / 100)) s after start${execs:+, after $execs executions}): $why"
done
[ -n "$keep" ] || rm -rf "$work"
log "all ${#targets[@]} targets passed"
