#!/usr/bin/env bash
# Removes lab namespaces and pins left behind by a killed test or demo run.
# Only names the lab creates (hl<tag><hex>-<host>) are touched, and only when
# no process of a lab still runs.
set -uo pipefail
if pgrep -f 'node.*--test' >/dev/null 2>&1 && [ "${1:-}" != "--force" ]; then
  exit 0 # another test run may own them
fi
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^hl[a-z0-9]*-(sw|client|store|n[0-9]+)$'); do
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$ns" 2>/dev/null && echo "lab-sweep: removed stale namespace $ns"
done
for d in /sys/fs/bpf/herald/hl* /run/herald-lab/hl*; do
  [ -e "$d" ] && rm -rf "$d" && echo "lab-sweep: removed stale pins $d"
done
exit 0
