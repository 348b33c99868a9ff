#!/usr/bin/env bash
# Installs everything, builds, and runs the demo in a throw-away lab (root needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/lab-sweep.sh
exec node dist/demo/single-node.js
