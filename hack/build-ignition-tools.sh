#!/usr/bin/env bash
# Builds hack/ignition-tools (the Butane translator and Ignition validator of
# github.com/coreos/ignition/v2, pinned in hack/ignition-tools/go.mod) into a cache folder outside
# git, keyed by the hash of the program's sources, and reuses it when present. Prints the binary's
# path; also points $CACHE/bin/ignition-tools at it (the manager's default --ignition-tools).
set -euo pipefail
cd "$(dirname "$0")/ignition-tools"
CACHE="${METAL_CACHE:-$HOME/.cache/metal-operator-ts}"
key=$(cat go.mod go.sum main.go | sha256sum | cut -c1-16)
OUT="$CACHE/ignition-tools/$key"
if [[ ! -x "$OUT/ignition-tools" ]]; then
  echo "[build-ignition-tools] building into $OUT" >&2
  mkdir -p "$OUT"
  CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$OUT/ignition-tools.tmp" . >&2
  mv "$OUT/ignition-tools.tmp" "$OUT/ignition-tools"
fi
mkdir -p "$CACHE/bin"
ln -sfn "$OUT/ignition-tools" "$CACHE/bin/ignition-tools"
echo "$OUT/ignition-tools"
