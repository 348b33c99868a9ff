#!/usr/bin/env bash
# Builds the real kube-apiserver (from the Go module k8s.io/kubernetes at a pinned release),
# a current etcd (from its Go module) and helm (from helm.sh/helm/v3) for herald's Kubernetes tests. The binaries are cached
# OUTSIDE the clone, keyed by version, so a rerun is instant:
#   $HERALD_KUBE_CACHE/kube-apiserver-<ver>, $HERALD_KUBE_CACHE/etcd-<ver>
# Only the Go module proxy is needed. Runs niced and with GOFLAGS=-p=1 so a shared machine
# stays usable. Prints the build time of each binary.
set -euo pipefail
KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${HELM_VERSION:-v3.19.5}"
CACHE="${HERALD_KUBE_CACHE:-/var/cache/herald-test}"
mkdir -p "$CACHE"
export GOFLAGS="${GOFLAGS_BUILD:--p=1} -buildvcs=false -trimpath"
export CGO_ENABLED=0
export GOTOOLCHAIN=local

build_etcd() {
  local out="$CACHE/etcd-$ETCD_VERSION"
  [ -x "$out" ] && { echo "build-kube: etcd $ETCD_VERSION cached at $out"; return; }
  local dir; dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' RETURN
  local t0=$SECONDS
  (
    cd "$dir"
    cat > go.mod <<MOD
module herald.test/etcdbuild
go 1.24
require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
    go mod download go.etcd.io/etcd/server/v3
    go get go.etcd.io/etcd/server/v3@"$ETCD_VERSION"
    nice -n 15 go build -o "$out.tmp" go.etcd.io/etcd/server/v3
  )
  mv "$out.tmp" "$out"
  echo "build-kube: etcd $ETCD_VERSION built in $((SECONDS - t0)) s -> $out"
}

build_apiserver() {
  local out="$CACHE/kube-apiserver-$KUBE_VERSION"
  [ -x "$out" ] && { echo "build-kube: kube-apiserver $KUBE_VERSION cached at $out"; return; }
  local staging="v0.${KUBE_VERSION#v1.}"
  local dir; dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' RETURN
  local t0=$SECONDS
  (
    cd "$dir"
    # k8s.io/kubernetes' own go.mod maps every staging module to ./staging/src/...;
    # map each to its published release instead, as projects importing Kubernetes do.
    local kmod
    kmod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    {
      echo "module herald.test/kubebuild"
      echo "go 1.24"
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$kmod" | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
    } > go.mod
    echo "build-kube: $(grep -c '^replace' go.mod) staging modules mapped to $staging"
    go mod tidy -e >/dev/null 2>&1 || true
    go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION"
    # The version the binary reports (otherwise v0.0.0-master).
    local v="k8s.io/component-base/version" minor="${KUBE_VERSION#v1.}"
    minor="${minor%%.*}"
    nice -n 15 go build -ldflags "-X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor" -o "$out.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  )
  mv "$out.tmp" "$out"
  echo "build-kube: kube-apiserver $KUBE_VERSION built in $((SECONDS - t0)) s -> $out"
}

# helm (no Debian package): from its Go module, to render and lint deploy/helm/herald in the tests.
build_helm() {
  local out="$CACHE/helm-$HELM_VERSION"
  [ -x "$out" ] && { echo "build-kube: helm $HELM_VERSION cached at $out"; return; }
  local dir; dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' RETURN
  local t0=$SECONDS
  GOBIN="$dir" nice -n 15 go install -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mv "$dir/helm" "$out"
  echo "build-kube: helm $HELM_VERSION built in $((SECONDS - t0)) s -> $out"
}

case "${1:-all}" in
  etcd) build_etcd ;;
  apiserver) build_apiserver ;;
  helm) build_helm ;;
  all) build_etcd; build_apiserver; build_helm ;;
esac
