#!/usr/bin/env bash
# Mutation testing for one source folder or file against its unit tests only
# (mapping in stryker.config.mjs). Measurement, not a CI gate: slow by nature.
#   npm run mutation -- src/core            (or src/core/trigger.ts, src/controlplane/ipam, src/store/etcd)
#   MUTATION_TESTS="test/core/trigger.test.ts" npm run mutation -- src/core/trigger.ts
# Runs at the lowest CPU priority (process and autogroup) with one test process; incremental: a rerun
# only tests mutants whose code or covering tests changed (reports/mutation/).
set -euo pipefail
cd "$(dirname "$0")/.."
scope="${1:?usage: scripts/mutation.sh <src folder or file> [extra stryker args]}"
shift
[ -e "$scope" ] || { echo "mutation: no such path: $scope" >&2; exit 2; }
mkdir -p reports/mutation
# `nice` alone ranks this run only within its own autogroup: with autogroups
# (sched(7), "The autogroup feature") the kernel first shares the CPU between
# sessions, so a nice-19 Stryker still took a full session's share from every
# other session on the machine. The run therefore gets a session (an autogroup)
# of its own, and that autogroup gets nice 19 too; Ctrl-C / TERM still stop it
# (forwarded to the new session's process group).
if [ -z "${MUTATION_OWN_SESSION:-}" ] && command -v setsid >/dev/null; then
  MUTATION_OWN_SESSION=1 setsid bash "$0" "$scope" "$@" &
  child=$!
  trap 'kill -TERM -- "-$child" 2>/dev/null || kill -TERM "$child" 2>/dev/null' INT TERM
  while :; do
    rc=0
    wait "$child" || rc=$?
    kill -0 "$child" 2>/dev/null || exit "$rc"
  done
fi
echo 19 2>/dev/null >/proc/self/autogroup || true
echo "mutation: $(cat /proc/self/autogroup 2>/dev/null || echo 'no autogroup'), process nice 19" >&2
MUTATION_SCOPE="$scope" exec nice -n 19 npx stryker run stryker.config.mjs --concurrency 1 "$@"
