#!/usr/bin/env bash
# `make e2e`: build (or reuse) etcd, kube-apiserver and kube-controller-manager, then run the
# end-to-end suite, which starts them, the webhook and everything else it needs on loopback and
# stops each process it started. Arguments go to pytest (e.g. -k reinvocation).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${E2E_PYTHON:-.venv/bin/python}"
start=$(date +%s)
bin_dir=$(bash e2e/build-controlplane.sh)
echo "e2e: control-plane binaries in $bin_dir (ready after $(( $(date +%s) - start )) s)"
if ! command -v kubectl >/dev/null; then
    echo "e2e: kubectl is not on PATH; the suite needs it (kubectl >= 1.27)" >&2
    exit 1
fi
# A bound on the whole run: SIGTERM reaches pytest, whose fixtures stop every process started.
RDMA_WEBHOOK_E2E_BIN="$bin_dir" timeout --signal=TERM --kill-after=60 "${RDMA_WEBHOOK_E2E_TIMEOUT:-2400}" \
    "$PY" -m pytest e2e -p no:cacheprovider -o testpaths=e2e -ra "$@"
