"""The Open MPI + sshd test image of the node's MPI tests (e2e/test_node_mpi.py), from Debian's
packages, no registry: mmdebstrap writes a bookworm root filesystem (minbase, plus openmpi-bin,
openssh-server and what they depend on: Open MPI 4.1, OpenSSH 9.2, bash and dash as shells), that
tar becomes the one layer of an OCI archive (device nodes left out, /run/sshd added), and the node
imports it with `ctr images import` (Node.import_image).

Configured for what an MPIJob's pods do (the MPI Operator's launcher runs `mpirun`, which starts
the ranks through ssh into the workers' `sshd -De`, as root here, with the key pair of a Secret
mounted at /root/.ssh):
- sshd: no PAM (pam_loginuid cannot write a container's loginuid), StrictModes off (a Secret
  volume's folder is not the 0700 /root/.ssh sshd wants), host keys made at build time;
- ssh: no host key checking (pods' addresses are new every run).

Cached under a key of this file (the recipe is here): `openmpi-sshd-<key>.oci.tar` beside the
webhook image's archive (~/.cache/rdma-webhook-image/, RDMA_WEBHOOK_IMAGE_CACHE moves it); the
image is named `e2e.local/openmpi-sshd:<key>`. Delete the archive to take newer Debian packages.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from e2e.node import oci_layout

SUITE = "bookworm"
PACKAGES = ["openmpi-bin", "openssh-server"]
HOOKS = [
    'printf "%s\\n" "UsePAM no" "StrictModes no" "PermitRootLogin prohibit-password" '
    '> "$1/etc/ssh/sshd_config.d/e2e.conf"',
    'printf "%s\\n" "Host *" "    StrictHostKeyChecking no" "    UserKnownHostsFile /dev/null" "    LogLevel ERROR" '
    '> "$1/etc/ssh/ssh_config.d/e2e.conf"',
    'chroot "$1" ssh-keygen -A',
]
CONFIG = {
    "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    "Cmd": ["/usr/sbin/sshd", "-De"],
    "WorkingDir": "/root",
}
NAME = "e2e.local/openmpi-sshd"


class ImageError(RuntimeError):
    pass


def key() -> str:
    """A digest of the recipe (this file)."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def image_name() -> str:
    return f"{NAME}:{key()}"


def cache_dir() -> Path:
    return Path(os.environ.get("RDMA_WEBHOOK_IMAGE_CACHE") or Path.home() / ".cache" / "rdma-webhook-image")


def archive() -> Path:
    """The OCI archive of the image (built once per key, then reused)."""
    cache = cache_dir()
    out = cache / f"openmpi-sshd-{key()}.oci.tar"
    if out.is_file():
        return out
    if shutil.which("mmdebstrap") is None:
        raise ImageError(
            "mmdebstrap is not installed (apt-get install mmdebstrap; .ci/run does): "
            "the Open MPI + sshd test image is made from Debian's packages with it"
        )
    cache.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="openmpi-sshd-", dir=cache) as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        argv = [
            "mmdebstrap",
            "--variant=minbase",
            "--format=tar",
            "--include=" + ",".join(PACKAGES),
            *[f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "locale", "info")],
            *[f"--customize-hook={h}" for h in HOOKS],
            SUITE,
            str(rootfs),
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0 or not rootfs.is_file():
            raise ImageError(f"mmdebstrap failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        layer = Path(tmp) / "layer.tar"
        container_layer(rootfs, layer)
        rootfs.unlink()
        partial = Path(tmp) / "image.oci.tar"
        oci_archive_of_layer(image_name(), layer, CONFIG, partial)
        for old in cache.glob("openmpi-sshd-*.oci.tar"):  # one archive: the current recipe's
            old.unlink()
        os.replace(partial, out)
    print(f"image {image_name()}: built in {time.monotonic() - started:.0f}s, {out.stat().st_size / 1e6:.0f} MB")
    return out


def container_layer(rootfs: Path, out: Path) -> None:
    """mmdebstrap's tar as a container layer: without device nodes (the runtime makes /dev), with
    the privilege separation folder sshd needs (/run/sshd: mmdebstrap empties /run)."""
    with tarfile.open(rootfs) as src, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for member in src:
            name = member.name[2:] if member.name.startswith("./") else member.name
            if member.ischr() or member.isblk() or member.isfifo() or name == "dev" or name.startswith("dev/"):
                continue
            if not name or name == ".":
                continue
            member.name = name
            if member.islnk() and member.linkname.startswith("./"):
                member.linkname = member.linkname[2:]
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
        for folder in ("dev", "run", "run/sshd"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            dst.addfile(info)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def oci_archive_of_layer(name: str, layer: Path, config: dict, out: Path) -> Path:
    """An OCI image layout in a tar (what `ctr images import` reads) with one uncompressed layer,
    the file `layer`; `name` is the image's name."""
    digest = "sha256:" + _sha256(layer)
    descriptor = {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest, "size": layer.stat().st_size}
    return oci_layout(name, config, descriptor, digest, out, layer_file=layer)
