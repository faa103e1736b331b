#!/usr/bin/env bash
# Samples the real node's agent every 5 s (BENCHMARKS.md, "Postgres faults on the real node,
# timed"): its pid, the Postgres volumes it reports, its RSS (KiB) and CPU ticks (user+system).
# Run beside `cargo test --test real_node_postgres`; stop it with Ctrl-C.
set -u
while sleep 5; do
  pid=$(pgrep -x headroom | head -1); [ -n "$pid" ] || continue
  n=$(nsenter -t "$pid" -n curl -s --max-time 3 localhost:9737/volumes \
    | jq '[.volumes[] | select(.postgres_cluster != null)] | length' 2>/dev/null)
  rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  ticks=$(awk '{s=$0; sub(/.*\) /, "", s); split(s, f, " "); print f[12] + f[13]}' "/proc/$pid/stat")
  echo "$(date +%s) $pid ${n:-?} $rss $ticks"
done
