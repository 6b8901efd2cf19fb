#!/usr/bin/env bash
# A minimal Debian base image with Python, made from Debian's packages only (no container
# registry): mmdebstrap writes a root filesystem (minbase: dpkg, apt, coreutils; plus python3 and
# python3-venv, which bring no compiler), `podman import` turns it into an image. Prints its name,
# localhost/rdma-webhook-base:<suite>-<digest>, for `podman build --build-arg PYTHON_IMAGE=...`.
# The tarball is cached in ~/.cache/rdma-webhook-image/ (RDMA_WEBHOOK_IMAGE_CACHE moves it) under
# a key of the suite and this script: delete it to take newer Debian packages.
set -euo pipefail
SUITE=${DEBIAN_SUITE:-bookworm}   # bookworm: Python 3.11, what the official default base has
PACKAGES=python3,python3-venv
for tool in mmdebstrap podman; do
    command -v "$tool" >/dev/null || { echo "build-base-image: $tool missing (apt-get install mmdebstrap podman)" >&2; exit 1; }
done
digest=$(cat "$0" | sha256sum | cut -c1-12)
cache="${RDMA_WEBHOOK_IMAGE_CACHE:-$HOME/.cache/rdma-webhook-image}"
tarball="$cache/base-$SUITE-$digest.tar"
name="localhost/rdma-webhook-base:$SUITE-$digest"
if ! podman image exists "$name"; then
    if [[ ! -s "$tarball" ]]; then
        mkdir -p "$cache"
        start=$(date +%s)
        echo "build-base-image: mmdebstrap $SUITE with $PACKAGES (first time: a few minutes)" >&2
        # No documentation, manual pages or translations: nothing at run time reads them.
        mmdebstrap --variant=minbase --format=tar --include="$PACKAGES" \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
            "$SUITE" "$tarball.partial" >&2
        mv "$tarball.partial" "$tarball"
        echo "build-base-image: root filesystem in $(( $(date +%s) - start )) s" >&2
    fi
    podman import --change 'CMD ["/usr/bin/python3"]' "$tarball" "$name" >&2
fi
echo "$name"
