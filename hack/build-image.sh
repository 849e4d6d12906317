#!/usr/bin/env bash
# Builds the operator image from the repository's Dockerfile with buildah, on a machine that
# reaches no remote base-image registry, and prints its name (localhost/metal-operator:<hash>).
#
# The Dockerfile's base images are build arguments (GO_IMAGE, NODE_IMAGE; defaults golang and
# node on Debian bookworm for builds elsewhere). Here they are made locally, once, and kept in
# containers-storage:
#   localhost/metal-base/debian:bookworm  debootstrap --variant=minbase from the Debian mirror apt
#                                         is configured with (read from /etc/apt at run time);
#   localhost/metal-base/node:20          that root file system plus this machine's Node.js 20
#                                         (its node binary and npm): the same Node as the host;
#   localhost/metal-base/golang:host      that root file system plus this machine's Go (/usr/local/go).
# The image's own layers are then what the Dockerfile says: npm ci, tsc, the ignition tools.
# The tag is a hash of every input file, so an unchanged tree reuses the image (no rebuild).
#
# Usage: hack/build-image.sh [--archive FILE]   (--archive also writes an oci-archive of it)
#        hack/build-image.sh --pause BINARY [--archive FILE]
#          the pod sandbox image instead: that one static binary (hack/build-control-plane.sh
#          --node builds it from the Kubernetes release's pause.c) as localhost/metal-base/pause
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${METAL_CACHE:-$HOME/.cache/metal-operator-ts}"
log() { echo "[build-image] $*" >&2; }
archive=""
pause=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --archive) archive="$2"; shift 2 ;;
    --pause) pause="$2"; shift 2 ;;
    *) log "unknown argument $1"; exit 2 ;;
  esac
done

for p in buildah debootstrap; do
  command -v "$p" >/dev/null || { log "missing $p: run hack/install-packages.sh"; exit 1; }
done
exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }

debian_mirror() {
  # The first deb URI of the main Debian suite apt uses here (deb822 or one-line format).
  local u
  u=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
  [[ -n "$u" ]] || u=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
  [[ -n "$u" ]] || { log "no Debian mirror configured for apt"; exit 1; }
  echo "$u"
}

base_debian() {
  local img=localhost/metal-base/debian:bookworm
  exists "$img" && return
  local root="$CACHE/image/rootfs-bookworm"
  if [[ ! -f "$root.done" ]]; then
    log "debootstrap bookworm (minbase) into $root"
    rm -rf "$root"
    mkdir -p "$root"
    debootstrap --variant=minbase --include=ca-certificates bookworm "$root" "$(debian_mirror)" >&2
    # Like Docker's debian:bookworm-slim: no apt lists, no caches.
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
    touch "$root.done"
  fi
  local c
  c=$(buildah from scratch)
  buildah copy "$c" "$root" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$c"
  buildah commit --rm "$c" "$img" >&2
}

base_node() {
  local img=localhost/metal-base/node:20
  exists "$img" && return
  local v
  v=$(node --version)
  [[ "$v" == v20.* ]] || { log "this machine's Node is $v, the image wants 20"; exit 1; }
  local c
  c=$(buildah from localhost/metal-base/debian:bookworm)
  # The node binary and the npm this machine runs (npm may be newer than the nodejs package's).
  local npm
  npm=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
  tar -cf - "$(readlink -f "$(command -v node)")" "$npm" "$(command -v npm)" "$(command -v npx)" 2>/dev/null \
    | buildah run "$c" -- tar -xf - -C /
  buildah config --env NODE_VERSION="${v#v}" --cmd node "$c"
  buildah commit --rm "$c" "$img" >&2
}

base_golang() {
  local img=localhost/metal-base/golang:host
  exists "$img" && return
  local c
  c=$(buildah from localhost/metal-base/debian:bookworm)
  buildah copy "$c" /usr/local/go /usr/local/go >/dev/null
  buildah config --env GOPATH=/go --env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
  buildah commit --rm "$c" "$img" >&2
}

write_archive() {
  [[ -n "$archive" ]] || return 0
  rm -f "$archive"
  buildah push "$1" "oci-archive:$archive:$1" >&2
}

if [[ -n "$pause" ]]; then
  image="localhost/metal-base/pause:$(sha256sum "$pause" | cut -c1-12)"
  if ! exists "$image"; then
    c=$(buildah from scratch)
    buildah copy "$c" "$pause" /pause >/dev/null
    buildah config --entrypoint '["/pause"]' --user 65535:65535 "$c"
    buildah commit --rm "$c" "$image" >&2
  fi
  write_archive "$image"
  echo "$image"
  exit 0
fi

inputs=(Dockerfile package.json package-lock.json tsconfig.json src test bench hack/ignition-tools)
hash=$( (find "${inputs[@]}" hack/*.ts hack/house -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-12)
image="localhost/metal-operator:$hash"
if ! exists "$image"; then
  base_debian
  base_node
  base_golang
  log "building $image from Dockerfile"
  mkdir -p "$HOME/go/pkg/mod" "$HOME/.cache/go-build"
  # chroot isolation: RUN steps need no runc or network namespace; they use this machine's network
  # (the npm registry and the Go module proxy) and its Go module and build caches. They also use
  # this machine's trust store (where a site's TLS proxy adds its CA) with an npmrc naming it:
  # mounted for the build steps only, so the image keeps Debian's own certificates.
  npmrc=$(mktemp)
  trap 'rm -f "$npmrc"' EXIT
  mounts=(-v "$HOME/go/pkg/mod:/go/pkg/mod" -v "$HOME/.cache/go-build:/root/.cache/go-build")
  if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    echo "cafile=/etc/ssl/certs/ca-certificates.crt" > "$npmrc"
    mounts+=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro -v "$npmrc:/root/.npmrc:ro")
  fi
  buildah bud --isolation chroot --pull-never --layers \
    --build-arg GO_IMAGE=localhost/metal-base/golang:host \
    --build-arg NODE_IMAGE=localhost/metal-base/node:20 \
    "${mounts[@]}" -t "$image" -f Dockerfile . >&2
fi
write_archive "$image"
echo "$image"
