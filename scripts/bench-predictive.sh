#!/usr/bin/env bash
# Peak usage, threshold-only vs predictive (the default since issue 27), from
# `headroom simulate --compare-predictive` over synthetic fills, one row a second (the agent's
# measurement loop), evaluated every second: a claim of SIZE with 20 % used filling at 10, 50,
# 200 and 500 MB/s until one grow's worth past the claim has been written, with a 3 s and a 60 s
# resizer. Policy: `enabled: true`, `limit: 1Ti`, every other key at its default. Prints the
# Markdown table BENCHMARKS.md shows, plus for each row the most any volume this fast can have
# free and still be saved: no trigger can keep a volume whose free space fills in less than the
# time to see the fill (5 samples) plus the resize from reaching 100 %.
# Usage: scripts/bench-predictive.sh [path/to/headroom] [size in Gi, default 20]
set -euo pipefail
bin=${1:-${CARGO_TARGET_DIR:-target}/release/headroom}
size=${2:-20}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf 'enabled: true\nlimit: 1Ti\n' >"$dir/policy.yaml"
gi=$((1 << 30))
echo "| fill | resizer | free fills in | threshold-only: peak | full for | grows | final size | predictive: peak | full for | grows | final size |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for mbps in 10 50 200 500; do
    rate=$((mbps * 1000000))
    from=$((size * gi / 5))
    # One grow's worth (20 %) past the claim: 1.2 x size written from 20 %.
    seconds=$((size * gi / rate + 1))
    awk -v r="$rate" -v n="$seconds" -v s="$from" \
        'BEGIN { print "seconds,used_bytes"; for (t = 0; t <= n; t++) printf "%d,%.0f\n", t, s + r * t }' \
        >"$dir/fill-$mbps.csv"
    for delay in 3s 60s; do
        "$bin" simulate --policy "$dir/policy.yaml" --trace "$dir/fill-$mbps.csv" \
            --capacity "${size}Gi" --interval 1s --resize-delay "$delay" \
            --compare-predictive --format json >"$dir/out.json"
        python3 - "$mbps" "$delay" "$size" "$dir/out.json" <<'PY'
import json, sys
mbps, delay, size, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
c = json.load(open(path))
free_s = size * 2**30 * 0.8 / (int(mbps) * 1e6)
def cols(r):
    gi = r['final_capacity_bytes'] / 2**30
    return f"{r['peak_used_percent']:.1f} % | {r['full_seconds']:.0f} s | {len(r['actions'])} | {gi:.0f}Gi"
print(f"| {mbps} MB/s | {delay} | {free_s:.0f} s | {cols(c['threshold_only'])} | {cols(c['predictive'])} |")
PY
    done
done
