#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and etcd from their Go modules at pinned versions
# into a cache folder outside git, and reuses each one when present. Prints the folder holding them.
# kube-controller-manager is run by the local stack with only its garbage collector (owner
# references are honoured as in a cluster); it is built in a folder of its own, so adding it never
# rebuilds a cached kube-apiserver or etcd.
#
# With `--node` it also builds what a single-node cluster adds (src/localstack/cluster.ts):
# kube-scheduler, kube-proxy and the kubelet, from the same k8s.io/kubernetes release, each in its
# own folder and cached the same way, and the sandbox's `pause` binary (gcc, static).
#
# kube-apiserver: k8s.io/kubernetes has `replace k8s.io/X => ./staging/src/k8s.io/X` lines that a
# module consumer cannot use, so a wrapper go.mod replaces each staging module with its published
# v0.MINOR.PATCH release. etcd: go.etcd.io/etcd/server/v3 has the etcd main package at its root.
#
# When KUBEBUILDER_ASSETS is set (envtest convention), its binaries are used and nothing is built
# (envtest ships no kube-controller-manager: the local stack then runs without a garbage collector).
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE="${METAL_CACHE:-$HOME/.cache/metal-operator-ts}"
OUT="$CACHE/control-plane/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  for b in kube-apiserver etcd; do
    [[ -x "$KUBEBUILDER_ASSETS/$b" ]] || { echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no $b" >&2; exit 1; }
  done
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

mkdir -p "$OUT"
log() { echo "[build-control-plane] $*" >&2; }

# build_kube <component>: k8s.io/kubernetes/cmd/<component> into $OUT/<component>.
build_kube() {
  local component=$1
  local dir="$CACHE/src/$component-$KUBE_VERSION"
  local staging="v0.${KUBE_VERSION#v1.}"
  mkdir -p "$dir"
  log "$component $KUBE_VERSION (staging modules at $staging) in $dir"
  local modinfo
  modinfo=$(cd "$dir" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION")
  local gomod
  gomod=$(printf '%s' "$modinfo" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  {
    echo "module local/$component-build"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    # Every `k8s.io/X => ./staging/src/k8s.io/X` of upstream's go.mod becomes `k8s.io/X => k8s.io/X vSTAGING`.
    grep -oE 'k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" \
      | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}' | sort -u
  } > "$dir/go.mod"
  cat > "$dir/tools.go" <<GO
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/$component"
GO
  (cd "$dir" && GOFLAGS=-mod=mod go mod tidy >&2)
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
  ld+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)"
  ld+=" -X k8s.io/component-base/version.gitTreeState=clean"
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$OUT/$component.tmp" "k8s.io/kubernetes/cmd/$component" >&2)
  mv "$OUT/$component.tmp" "$OUT/$component"
}

build_etcd() {
  local dir="$CACHE/src/etcd-$ETCD_VERSION"
  mkdir -p "$dir"
  log "etcd $ETCD_VERSION in $dir"
  cat > "$dir/go.mod" <<GOMOD
module local/etcd-build

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
  cat > "$dir/tools.go" <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  (cd "$dir" && GOFLAGS=-mod=mod go mod tidy >&2)
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3 >&2)
  mv "$OUT/etcd.tmp" "$OUT/etcd"
}

[[ -x "$OUT/etcd" ]] || build_etcd
[[ -x "$OUT/kube-apiserver" ]] || build_kube kube-apiserver
[[ -x "$OUT/kube-controller-manager" ]] || build_kube kube-controller-manager
# The pod sandbox's `pause` process, from the same release's source (build/pause/linux/pause.c in
# the k8s.io/kubernetes module), linked statically so that an image of that one file runs.
build_pause() {
  local src
  src=$(cd "$CACHE/src/kube-apiserver-$KUBE_VERSION" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  log "pause from $src"
  gcc -Os -static -DVERSION="$KUBE_VERSION" -o "$OUT/pause.tmp" "$src" >&2
  strip "$OUT/pause.tmp"
  mv "$OUT/pause.tmp" "$OUT/pause"
}

if [[ "${1:-}" == "--node" ]]; then
  for c in kube-scheduler kube-proxy kubelet; do
    [[ -x "$OUT/$c" ]] || build_kube "$c"
  done
  [[ -x "$OUT/pause" ]] || build_pause
fi
echo "$OUT"
