#!/usr/bin/env bash
# Installs everything herald needs on a fresh Debian 12 machine (as root) and builds it.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  clang llvm libbpf-dev libbpf1 bpftool   # build and load the eBPF datapath
  iproute2 ethtool                        # tc, netns, links
  iputils-arping iputils-ping tcpdump python3-scapy    # tests, benchmarks and the demo's client
  netsniff-ng                             # trafgen: the ARP flood in bench/wire-filter and bench/failover/spurious
  stress-ng                               # bench/failover/spurious: both cores saturated
  ndisc6                                  # ndisc6: IPv6 neighbour discovery from the client (NDP tests)
  nftables                                # bench/policy: the interval-set peer of the policy datapath
  etcd-server keepalived bird2 gobgpd     # coordination store, the peers we measure against, a second BGP implementation
  frr                                     # FRR (zebra + bgpd) as the upstream router of the three-node BGP lab
  wrk nftables                            # bench/lb: load generator, the nftables DNAT peer
  chromium                                # the cluster view's browser tests (playwright-core drives it)
  ca-certificates curl gcc
  openssl                                 # certificates of the test kube-apiserver
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Debian's etcd package starts a system etcd on the default ports; herald's tests
# and demo run their own on other ports, so the packaged service is not needed.
if systemctl is-active --quiet etcd 2>/dev/null; then systemctl disable --now etcd >/dev/null 2>&1 || true; fi
# Likewise gobgpd: the BGP lab runs its own in a namespace.
if systemctl is-active --quiet gobgpd 2>/dev/null; then systemctl disable --now gobgpd >/dev/null 2>&1 || true; fi
# And FRR: the lab runs zebra and bgpd in a namespace as the frr user.
if systemctl is-active --quiet frr 2>/dev/null; then systemctl disable --now frr >/dev/null 2>&1 || true; fi

if ! command -v node >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "setup: Node.js 20 or newer is required" >&2
  exit 1
fi
if [ package-lock.json -nt node_modules/.package-lock.json ] || [ ! -d node_modules ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
npm run --silent build
# The Kubernetes tests run a real kube-apiserver and etcd, built from their Go
# modules (Go >= 1.24 and the Go module proxy); cached outside the clone.
if ! command -v go >/dev/null; then
  echo "setup: Go 1.24 or newer is required to build kube-apiserver for the Kubernetes tests" >&2
  exit 1
fi
bash scripts/build-kube.sh
echo "setup: ready"
