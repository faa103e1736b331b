#!/usr/bin/env bash
# Peak usage, threshold-only vs predictive trigger, from `headroom simulate --compare-predictive`
# over synthetic fills of a 20Gi claim (1 s samples, from 4Gi used, 20 %, until 22Gi have been
# written: one grow's worth past the claim) with a 60 s resize delay. Prints the Markdown table BENCHMARKS.md shows.
# Usage: scripts/bench-predictive.sh [path/to/headroom]   (default: target/release/headroom)
set -euo pipefail
bin=${1:-${CARGO_TARGET_DIR:-target}/release/headroom}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf 'enabled: true\nlimit: 100Gi\n' >"$dir/policy.yaml"
gi=$((1 << 30))
echo "| fill | interval | threshold-only: peak | full for | grows | final size | predictive: peak | full for | grows | final size |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for mbps in 10 50 200; do
    rate=$((mbps * 1000000))
    seconds=$((18 * gi / rate + 1))
    awk -v r="$rate" -v n="$seconds" -v s=$((4 * gi)) \
        'BEGIN { print "seconds,used_bytes"; for (t = 0; t <= n; t++) printf "%d,%.0f\n", t, s + r * t }' \
        >"$dir/fill-$mbps.csv"
    for interval in 10s 1s; do
        "$bin" simulate --policy "$dir/policy.yaml" --trace "$dir/fill-$mbps.csv" \
            --capacity 20Gi --interval "$interval" --resize-delay 60s \
            --compare-predictive --format json >"$dir/out.json"
        python3 - "$mbps" "$interval" "$dir/out.json" <<'PY'
import json, sys
mbps, interval, path = sys.argv[1], sys.argv[2], sys.argv[3]
c = json.load(open(path))
def cols(r):
    size = r['final_capacity_bytes'] / 2**30
    return f"{r['peak_used_percent']:.1f} % | {r['full_seconds']:.0f} s | {len(r['actions'])} | {size:.0f}Gi"
print(f"| {mbps} MB/s | {interval} | {cols(c['threshold_only'])} | {cols(c['predictive'])} |")
PY
    done
done
