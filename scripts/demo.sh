#!/usr/bin/env bash
# Installs everything, builds, and runs the demo in a throw-away lab (root needed):
# a client, three nodes, etcd and three herald agents; the owner's agent is
# killed and the measured failover gap and the new owner are printed.
# `bash scripts/demo.sh single` runs the single-node demo instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/lab-sweep.sh
if [ "${1:-}" = "single" ]; then exec node --import tsx lab/demo/single-node.ts; fi
exec node --import tsx lab/demo/ha.ts
