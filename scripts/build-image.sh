#!/usr/bin/env bash
# `make image`: builds the OCI image from the Containerfile with podman and prints its name.
#   IMAGE_BASE=debian (default)  the base made from Debian's packages (scripts/build-base-image.sh):
#                                needs no container registry, only Debian's and PyPI
#   IMAGE_BASE=official          the Containerfile's default ARG, the official Python image (a
#                                registry must be reachable)
#   IMAGE=name:tag               the image's name (default rdma-webhook:0.1.0)
# podman runs with runc (crun refuses cgroup v1 hybrid hosts such as containers in containers)
# and lowered ulimits (a runtime without CAP_SYS_RESOURCE cannot set podman's defaults);
# RDMA_WEBHOOK_OCI_RUNTIME and RDMA_WEBHOOK_ULIMITS override them.
set -euo pipefail
cd "$(dirname "$0")/.."
image=${IMAGE:-rdma-webhook:0.1.0}
runtime=${RDMA_WEBHOOK_OCI_RUNTIME:-runc}
read -r -a ulimits <<< "${RDMA_WEBHOOK_ULIMITS:---ulimit nofile=16384:16384 --ulimit nproc=32768:32768}"
args=()
case "${IMAGE_BASE:-debian}" in
    debian) args+=(--build-arg "PYTHON_IMAGE=$(bash scripts/build-base-image.sh)") ;;
    official) ;;
    *) echo "build-image: IMAGE_BASE is debian or official" >&2; exit 2 ;;
esac
# The host's CA bundle, for pip in the build stage where PyPI is reached through a TLS-inspecting
# proxy (mounted read-only into the RUN steps, not copied into any layer).
ca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
if [[ -r "$ca" ]]; then
    args+=(--volume "$(readlink -f "$ca"):/run/build-ca.crt:ro" --build-arg BUILD_CA_BUNDLE=/run/build-ca.crt)
fi
start=$(date +%s)
# --network=host: the build stage fetches gcc from Debian and the wheels from PyPI.
podman --runtime "$runtime" build --network=host "${ulimits[@]}" "${args[@]}" \
    -t "$image" -f Containerfile . >&2
echo "build-image: $image built in $(( $(date +%s) - start )) s, $(podman image inspect --format '{{.Size}}' "$image") bytes" >&2
echo "$image"
