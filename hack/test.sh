#!/usr/bin/env bash
# The README's test command (`npm test`), also what CI runs: installs what is missing (Debian
# packages, node_modules, the Go-built control plane, VM artefacts), checks lint, formatting, CRD
# drift and the Prometheus rules (promtool), then runs unit, integration and end-to-end tests against one real control plane.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
if [[ -x hack/install-packages.sh ]]; then bash hack/install-packages.sh; fi
bash hack/ensure-node-deps.sh
echo "[test] control plane binaries: $(bash hack/build-control-plane.sh)"
echo "[test] ignition tools: $(bash hack/build-ignition-tools.sh)"
# The pinned helm CLI (helm.sh/helm/v3), for test/config/helm-chart.test.ts and the in-cluster Helm install.
echo "[test] helm: $(bash hack/build-helm.sh)"
npx biome check .
node dist/hack/generate-crds.js --check
# The alerting and recording rules shipped in config/prometheus/ (Debian package `prometheus`).
promtool check rules config/prometheus/rules.yaml
promtool test rules config/prometheus/rules.test.yaml
echo "[test] setup took $(( $(date +%s) - t0 )) s"
node dist/test/harness/run-tests.js --concurrency "${TEST_CONCURRENCY:-2}" ${TEST_FILES:-$(find dist/test -name '*.test.js' | sort)}
