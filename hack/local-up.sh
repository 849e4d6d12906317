#!/usr/bin/env bash
# README command 1: installs what is missing (Debian packages, node_modules, the Go-built control
# plane, VM boot artefacts), then `metalctl local up` with 2 QEMU servers: control plane, manager,
# virtual BMC with VMs booting through iPXE, discovery, an example claim followed until Booted.
# Extra arguments go to `metalctl local up` (e.g. --servers 3, --backend sim).
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/install-packages.sh
bash hack/ensure-node-deps.sh
bash hack/build-control-plane.sh >/dev/null
bash hack/build-ignition-tools.sh >/dev/null
exec node dist/src/cmd/metalctl.js local up --servers 2 --backend qemu "$@"
