#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kube-controller-manager from the Go modules under e2e/
# into ~/.cache/rdma-webhook-e2e/<key>/bin and prints that directory. The key names the
# Kubernetes and etcd releases and a digest of the go.mod/go.sum files, so a later run (or a
# change of release) reuses or rebuilds exactly what changed. Only the Go toolchain and the
# Go module proxy are needed. RDMA_WEBHOOK_E2E_CACHE moves the cache.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
command -v go >/dev/null || { echo "build-controlplane: go is not on PATH (Go >= 1.26 needed)" >&2; exit 1; }
version() { awk -v m="$1" '$1 == m {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$2"; }
k8s=$(version k8s.io/kubernetes "$here/controlplane/go.mod")
etcd=$(version go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")
digest=$(cat "$0" "$here"/controlplane/go.{mod,sum} "$here"/etcd/go.{mod,sum} \
         "$here"/controlplane/cmd/*/main.go "$here"/etcd/cmd/*/main.go | sha256sum | cut -c1-12)
out="${RDMA_WEBHOOK_E2E_CACHE:-$HOME/.cache/rdma-webhook-e2e}/k8s-$k8s-etcd-$etcd-$digest"
if [[ -x "$out/bin/kube-apiserver" && -x "$out/bin/kube-controller-manager" && -x "$out/bin/etcd" ]]; then
    echo "$out/bin"
    exit 0
fi
mkdir -p "$out"
tmp="$out/bin.partial"
rm -rf "$tmp" && mkdir -p "$tmp"
start=$(date +%s)
echo "build-controlplane: building Kubernetes $k8s and etcd $etcd into $out (first time: many minutes)" >&2
# The release's version stamped as its own build does (else /version says v0.0.0-master).
minor=${k8s#v1.}; minor=${minor%%.*}
stamp="-X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1"
stamp+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
(cd "$here/etcd" && go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$tmp/etcd" ./cmd/etcd) >&2
(cd "$here/controlplane" && go build -trimpath -buildvcs=false -ldflags "-s -w $stamp" -o "$tmp/" \
    ./cmd/kube-apiserver ./cmd/kube-controller-manager) >&2
rm -rf "$out/bin" && mv "$tmp" "$out/bin"
echo "build-controlplane: built in $(( $(date +%s) - start )) s" >&2
echo "$out/bin"
