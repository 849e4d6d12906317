#!/usr/bin/env bash
# Builds the helm CLI from its official Go module helm.sh/helm/v3 at a pinned version into a cache
# folder outside git, and reuses it when present. Prints the binary's path
# ($CACHE/bin/helm-<version>). Used by test/config/helm-chart.test.ts (lint, template) and the
# in-cluster test (install); HELM_VERSION picks another release.
#
# Same pattern as hack/build-control-plane.sh: a wrapper module requiring helm.sh/helm/v3 at the
# pinned version (`go mod tidy` resolves its dependencies as that release's go.mod pins them), then
# `go build helm.sh/helm/v3/cmd/helm` with the version stamped in as upstream's Makefile does.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${METAL_CACHE:-$HOME/.cache/metal-operator-ts}"
OUT="$CACHE/bin/helm-$HELM_VERSION"
log() { echo "[build-helm] $*" >&2; }

if [[ ! -x "$OUT" ]]; then
  dir="$CACHE/src/helm-$HELM_VERSION"
  mkdir -p "$dir" "$CACHE/bin"
  log "helm $HELM_VERSION in $dir"
  (cd "$dir" && GOFLAGS=-mod=mod go mod download "helm.sh/helm/v3@$HELM_VERSION" >&2)
  cat > "$dir/go.mod" <<GOMOD
module local/helm-build

go 1.24

require helm.sh/helm/v3 $HELM_VERSION
GOMOD
  cat > "$dir/tools.go" <<'GO'
//go:build tools

package tools

import _ "helm.sh/helm/v3/cmd/helm"
GO
  (cd "$dir" && GOFLAGS=-mod=mod go mod tidy >&2)
  # `helm version` reports the pinned release (internal/version's variables, as upstream's Makefile sets them).
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$OUT.tmp" helm.sh/helm/v3/cmd/helm >&2)
  mv "$OUT.tmp" "$OUT"
fi
echo "$OUT"
