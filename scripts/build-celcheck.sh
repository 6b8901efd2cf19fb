#!/usr/bin/env bash
# Builds the CEL test harness tests/policy/celcheck (k8s.io/apiserver's own evaluation of
# ValidatingAdmissionPolicies) into ~/.cache/rdma-webhook-celcheck/<digest>/celcheck, once per
# version of its sources, and prints the binary's path. `make test` sets RDMA_WEBHOOK_CELCHECK
# from it (tests/policy/test_admission_policy_cel.py). RDMA_WEBHOOK_CELCHECK_CACHE moves the cache.
# Needs only the Go toolchain and the module proxy (as scripts/build-helm.sh and e2e do); the
# modules are those of benchmarks/celcost, so a machine that built one has the other's cache.
set -euo pipefail
command -v go >/dev/null || { echo "build-celcheck: go is not on PATH" >&2; exit 1; }
src="$(cd "$(dirname "$0")/.." && pwd)/tests/policy/celcheck"
# The cache key: a digest of the harness's sources, its module files and this script, and the Go
# release (a new toolchain builds a new copy).
digest=$( { cat "$0" "$src/go.mod" "$src/go.sum" "$src"/*.go; go env GOVERSION; } | sha256sum | cut -c1-16)
out="${RDMA_WEBHOOK_CELCHECK_CACHE:-$HOME/.cache/rdma-webhook-celcheck}/$digest"
if [[ -x "$out/celcheck" ]]; then
    echo "$out/celcheck"
    exit 0
fi
mkdir -p "$out"
tmp=$(mktemp "$out/celcheck.partial.XXXXXX")
trap 'rm -f "$tmp"' EXIT
start=$(date +%s)
echo "build-celcheck: building the CEL harness into $out (first time: a minute or two)" >&2
(cd "$src" && GOFLAGS=-buildvcs=false CGO_ENABLED=0 go build -trimpath -o "$tmp" .) >&2
mv "$tmp" "$out/celcheck"
echo "build-celcheck: built in $(( $(date +%s) - start )) s" >&2
echo "$out/celcheck"
