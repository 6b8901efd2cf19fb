#!/usr/bin/env bash
# Builds, from the Go modules under e2e/, into ~/.cache/rdma-webhook-e2e/<key>/bin, and prints
# that directory:
#   the control plane   etcd, kube-apiserver, kube-controller-manager
#   the node            kube-scheduler, kubelet, kube-proxy (e2e/controlplane, the same release),
#                       a fake device plugin (e2e/controlplane/cmd/fake-device-plugin),
#                       containerd 2, its runc shim and ctr (e2e/containerd), and the sandbox's
#                       pause program (e2e/containerd/cmd/pause, packed into an image by e2e/node.py)
# runc and the CNI plugins are Debian's (.ci/run installs them). The key names the Kubernetes,
# etcd and containerd releases and a digest of the go.mod/go.sum files and main packages, so a
# later run (or a change of release) reuses or rebuilds exactly what changed. Only the Go
# toolchain and the Go module proxy are needed. RDMA_WEBHOOK_E2E_CACHE moves the cache.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
command -v go >/dev/null || { echo "build-controlplane: go is not on PATH (Go >= 1.26 needed)" >&2; exit 1; }
version() { awk -v m="$1" '$1 == m {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$2"; }
k8s=$(version k8s.io/kubernetes "$here/controlplane/go.mod")
etcd=$(version go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")
containerd=$(version github.com/containerd/containerd/v2 "$here/containerd/go.mod")
digest=$(cat "$0" "$here"/{controlplane,etcd,containerd}/go.{mod,sum} \
         "$here"/{controlplane,etcd,containerd}/cmd/*/main.go | sha256sum | cut -c1-12)
out="${RDMA_WEBHOOK_E2E_CACHE:-$HOME/.cache/rdma-webhook-e2e}/k8s-$k8s-etcd-$etcd-containerd-$containerd-$digest"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy fake-device-plugin
          containerd containerd-shim-runc-v2 ctr pause)
complete() { for b in "${binaries[@]}"; do [[ -x "$1/$b" ]] || return 1; done; }
if complete "$out/bin"; then
    echo "$out/bin"
    exit 0
fi
mkdir -p "$out"
tmp="$out/bin.partial"
rm -rf "$tmp" && mkdir -p "$tmp"
start=$(date +%s)
echo "build-controlplane: building Kubernetes $k8s, etcd $etcd and containerd $containerd into $out (first time: many minutes)" >&2
# The release's version stamped as its own build does (else /version says v0.0.0-master).
minor=${k8s#v1.}; minor=${minor%%.*}
stamp="-X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1"
stamp+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
(cd "$here/etcd" && go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$tmp/etcd" ./cmd/etcd) >&2
(cd "$here/controlplane" && go build -trimpath -buildvcs=false -ldflags "-s -w $stamp" -o "$tmp/" \
    ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubelet ./cmd/kube-proxy \
    ./cmd/fake-device-plugin) >&2
# Static (no cgo): containerd then leaves out the btrfs snapshotter, which the node does not use.
# Its version stamped as its release build does (the node reports containerd://$containerd).
(cd "$here/containerd" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd" -o "$tmp/" \
    ./cmd/containerd ./cmd/containerd-shim-runc-v2 ./cmd/ctr ./cmd/pause) >&2
complete "$tmp" || { echo "build-controlplane: a binary is missing from $tmp" >&2; exit 1; }
rm -rf "$out/bin" && mv "$tmp" "$out/bin"
echo "build-controlplane: built in $(( $(date +%s) - start )) s" >&2
echo "$out/bin"
