#!/usr/bin/env bash
# Removes lab namespaces, pins and state left behind by a killed test, benchmark
# or demo. A lab records its owner's PID in /run/herald-lab/<lab>.owner; only
# labs whose owner is gone are removed, so a running lab is never touched.
set -uo pipefail
alive() { [ -f "/run/herald-lab/$1.owner" ] && kill -0 "$(cat "/run/herald-lab/$1.owner")" 2>/dev/null; }
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^hl[a-z0-9]*-(sw|client|store|n[0-9]+|b[0-9]+)$'); do
  lab="${ns%-*}"
  alive "$lab" && continue
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$ns" 2>/dev/null && echo "lab-sweep: removed stale namespace $ns"
done
for d in /sys/fs/bpf/herald/hl* /run/herald-lab/hl*; do
  [ -e "$d" ] || continue
  name="$(basename "$d")"; lab="${name%%-*}"; lab="${lab%.owner}"; lab="${lab%.sock}"
  alive "$lab" && continue
  rm -rf "$d" && echo "lab-sweep: removed stale $d"
done
exit 0
