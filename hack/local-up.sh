#!/usr/bin/env bash
# README command 1 (for now): builds what is missing, starts a local control plane (etcd +
# kube-apiserver on loopback), installs the CRDs and the example objects of config/samples/, prints
# `kubectl get` of them, and keeps the control plane running until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -x hack/install-packages.sh ]]; then bash hack/install-packages.sh; fi
bash hack/ensure-node-deps.sh
bash hack/build-control-plane.sh >/dev/null
exec node dist/hack/local-up.js "$@"
