#!/usr/bin/env bash
# Builds Helm from the Go module proxy into ~/.cache/rdma-webhook-helm/<version>/bin/helm (once per
# version) and prints the binary's path. `make test` (tests/deploy/test_chart.py) and `make e2e`
# (e2e/test_helm.py) use it; no Helm on PATH is needed. RDMA_WEBHOOK_HELM_CACHE moves the cache.
# Needs only the Go toolchain (the same one e2e/build-controlplane.sh uses).
set -euo pipefail
HELM_VERSION=v3.22.0  # pinned; a change of version builds a new copy beside the old one
command -v go >/dev/null || { echo "build-helm: go is not on PATH" >&2; exit 1; }
K8S_MINOR=37      # the Kubernetes minor of Helm's client-go (v0.37.x): its default capabilities
# The cache key names the release and a digest of this script (so a change of flags rebuilds).
digest=$(sha256sum "$0" | cut -c1-12)
out="${RDMA_WEBHOOK_HELM_CACHE:-$HOME/.cache/rdma-webhook-helm}/helm-$HELM_VERSION-$digest"
if [[ -x "$out/bin/helm" ]]; then
    echo "$out/bin/helm"
    exit 0
fi
tmp="$out/bin.partial"
rm -rf "$tmp" && mkdir -p "$tmp"
start=$(date +%s)
echo "build-helm: building Helm $HELM_VERSION into $out (first time: a few minutes)" >&2
# Stamped as Helm's own Makefile does: its version (else `helm version` says v3.x-dev) and the
# Kubernetes version that `helm template` and `helm lint` assume without a cluster (else 1.20,
# which the chart's kubeVersion refuses).
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$K8S_MINOR"
done
GOBIN="$tmp" GOFLAGS=-buildvcs=false CGO_ENABLED=0 go install -trimpath -ldflags "$ldflags" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
rm -rf "$out/bin" && mv "$tmp" "$out/bin"
echo "build-helm: built in $(( $(date +%s) - start )) s" >&2
echo "$out/bin/helm"
