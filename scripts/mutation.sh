#!/usr/bin/env bash
# Mutation testing for one source folder or file against its unit tests only
# (mapping in stryker.config.mjs). Measurement, not a CI gate: slow by nature.
#   npm run mutation -- src/core            (or src/core/trigger.ts, src/controlplane/ipam, src/store/etcd)
#   MUTATION_TESTS="test/core/trigger.test.ts" npm run mutation -- src/core/trigger.ts
# Runs at the lowest CPU priority with one test process; incremental: a rerun
# only tests mutants whose code or covering tests changed (reports/mutation/).
set -euo pipefail
cd "$(dirname "$0")/.."
scope="${1:?usage: scripts/mutation.sh <src folder or file> [extra stryker args]}"
shift
[ -e "$scope" ] || { echo "mutation: no such path: $scope" >&2; exit 2; }
mkdir -p reports/mutation
MUTATION_SCOPE="$scope" exec nice -n 19 npx stryker run stryker.config.mjs --concurrency 1 "$@"
