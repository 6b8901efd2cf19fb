"""The container image (`make image`, issue 26): built from the Containerfile on a Debian base made
from Debian's packages (no container registry), started with podman exactly as shipped (its
ENTRYPOINT and CMD: `serve` on 0.0.0.0:8443 with the catalogue baked into the image), a mounted
serving certificate, a read-only root filesystem with /tmp as tmpfs and no capabilities, as the
Deployment runs it, and talked to over TLS: /readyz, and an AdmissionReview on /mutate answered
with the patch the decision core makes. The process runs as UID 65532 and the image holds no
compiler.

The image is cached under a key of its inputs: the podman image `rdma-webhook:e2e-<key>` and an
OCI archive of it in ~/.cache/rdma-webhook-image/ (RDMA_WEBHOOK_IMAGE_CACHE moves it). The
container finds the API server through a kubeconfig holding a token of deploy/'s ServiceAccount,
on the host network (the control plane listens on 127.0.0.1 only).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import jsonpatch
import pytest
import yaml

from e2e import cluster as c
from e2e.conftest import OPT_IN, gpu_pod, make_namespace, unique

INPUTS = [
    "Containerfile",
    ".containerignore",
    "scripts/build-image.sh",
    "scripts/build-base-image.sh",
    "pyproject.toml",
    "setup.py",
    "README.md",
]
PODMAN = ["podman", "--runtime", os.environ.get("RDMA_WEBHOOK_OCI_RUNTIME", "runc")]
ULIMITS = os.environ.get("RDMA_WEBHOOK_ULIMITS", "--ulimit nofile=16384:16384 --ulimit nproc=32768:32768").split()
PORT = 8443  # the shipped CMD's


def image_key() -> str:
    """A digest of everything the build reads (the build context as .containerignore leaves it)."""
    h = hashlib.sha256()
    files = [c.ROOT / f for f in INPUTS]
    files += sorted(
        p
        for p in (c.ROOT / "webhook").rglob("*")
        if p.is_file() and p.suffix in (".py", ".json", ".yaml") and "__pycache__" not in p.parts
    )
    files += sorted((c.ROOT / "policies").glob("*.yaml"))
    for f in files:
        h.update(str(f.relative_to(c.ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def podman(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"podman {' '.join(args)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()


def image_cache() -> Path:
    return Path(os.environ.get("RDMA_WEBHOOK_IMAGE_CACHE") or Path.home() / ".cache" / "rdma-webhook-image")


def build_image() -> str:
    """The image of the current inputs in podman (built, or loaded from the cache), by name; its
    OCI archive is in image_cache() once built here (the node imports that into containerd)."""
    for tool in ("podman", "mmdebstrap", "runc"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"{tool} is not installed (apt-get install podman mmdebstrap runc; .ci/run does)", pytrace=False
            )
    key = image_key()
    name = f"localhost/rdma-webhook:e2e-{key}"
    cache = image_cache()
    archive = cache / f"rdma-webhook-{key}.oci.tar"
    if podman("image", "exists", name, check=False).returncode == 0:
        print(f"image {name}: reused")
    elif archive.exists():
        started = time.monotonic()
        podman("load", "-i", str(archive))
        print(f"image {name}: loaded from {archive} in {time.monotonic() - started:.0f}s")
    else:
        started = time.monotonic()
        proc = subprocess.run(
            ["bash", str(c.ROOT / "scripts" / "build-image.sh")],
            capture_output=True,
            text=True,
            timeout=3600,
            env={**os.environ, "IMAGE": name, "IMAGE_BASE": "debian"},
        )
        assert proc.returncode == 0, f"make image failed:\n{proc.stderr[-5000:]}"
        print(f"image {name}: built in {time.monotonic() - started:.0f}s")
        cache.mkdir(parents=True, exist_ok=True)
        for old in cache.glob("rdma-webhook-*.oci.tar"):  # one archive: the current inputs'
            old.unlink()
        podman("save", "--format", "oci-archive", "-o", f"{archive}.partial", name)
        os.replace(f"{archive}.partial", archive)
    size = int(podman("image", "inspect", "--format", "{{.Size}}", name).stdout.strip())
    print(f"image {name}: {size / 1e6:.0f} MB")
    return name


def test_image_holds_no_compiler_and_its_compiled_core(image):
    proc = podman(
        "run",
        "--rm",
        *ULIMITS,
        "--network=none",
        "--entrypoint",
        "/bin/sh",
        image,
        "-c",
        "for c in gcc cc c++ g++ clang tcc x86_64-linux-gnu-gcc-12; do command -v $c && exit 1; done; "
        "ls /usr/lib/gcc 2>/dev/null | grep . && exit 1; "
        "python3 -c 'import importlib, webhook, webhook.cli; [importlib.import_module(\"webhook.\" + m) for m in webhook.COMPILED_MODULES]; "
        "print(webhook.compiled() == list(webhook.COMPILED_MODULES), "
        "len(webhook.COMPILED_MODULES))'",
        check=False,
    )
    assert proc.returncode == 0, f"a compiler in the image, or the check failed:\n{proc.stdout}{proc.stderr}"
    same, count = proc.stdout.split()
    assert same == "True" and int(count) > 0, proc.stdout
    user = podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip()
    assert user == "65532:65532"


def _kubeconfig(cp, path: Path) -> Path:
    """deploy/'s ServiceAccount token, with the cluster CA inside (nothing else to mount)."""
    sa = c.service_account_kubeconfig(cp, "rdma-webhook", "rdma-webhook", path.with_suffix(".tmp"))
    doc = yaml.safe_load(sa.read_text())
    sa.unlink()
    cluster = doc["clusters"][0]["cluster"]
    cluster["certificate-authority-data"] = base64.b64encode(
        Path(cluster.pop("certificate-authority")).read_bytes()
    ).decode()
    path.write_text(yaml.safe_dump(doc))
    return path


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _request(ctx, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"https://127.0.0.1:{PORT}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _uids(pid: int) -> dict[int, list[str]]:
    """The real, effective, saved and filesystem UIDs of `pid` and its children (gunicorn's workers)."""
    out = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        proc_pid, ppid = int(fields["Pid"]), int(fields["PPid"])
        if proc_pid == pid or ppid == pid:
            out[proc_pid] = fields["Uid"].split()
    return out


def test_started_image_answers_over_tls_as_uid_65532(cp, hook, image, tmp_path):
    if not _port_free(PORT):
        pytest.fail(f"port {PORT} (the image's shipped --port) is in use on this machine", pytrace=False)
    certs = tmp_path / "tls"
    c.write_certs(certs, "rdma-webhook", "rdma-webhook", ips=["127.0.0.1"])  # e2e.cluster's import: no module path here
    kube = tmp_path / "kube"
    kube.mkdir()
    _kubeconfig(cp, kube / "config")
    # the chosen policy mounted as an install mounts its ConfigMap (the image enforces none itself)
    chosen = tmp_path / "policies"
    chosen.mkdir()
    shutil.copy(c.ROOT / "policies" / "ib-shared.yaml", chosen / "ib-shared.yaml")
    # as the Deployment's Secret and fsGroup make them: readable by the webhook's group only
    for folder in (certs, kube, chosen):
        for f in [folder, *folder.iterdir()]:
            os.chown(f, 65532, 65532)
            f.chmod(0o750 if f.is_dir() else 0o440)
    name = f"rdma-webhook-e2e-{uuid.uuid4().hex[:8]}"
    run = podman(
        "run",
        "--detach",
        "--name",
        name,
        *ULIMITS,
        "--network=host",
        "--read-only",
        "--tmpfs",
        "/tmp:rw,size=64m,mode=1777",
        "--cap-drop=ALL",
        "--security-opt",
        "no-new-privileges",
        "--volume",
        f"{certs}:/etc/rdma-webhook/tls:ro",
        "--volume",
        f"{kube}:/etc/rdma-webhook/kube:ro",
        "--volume",
        f"{chosen}:/etc/rdma-webhook/policies:ro",
        "--env",
        "KUBECONFIG=/etc/rdma-webhook/kube/config",
        image,
    )
    container = run.stdout.strip()
    pid = int(podman("inspect", "--format", "{{.State.Pid}}", container).stdout.strip())
    try:
        ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))

        def ready():
            state = podman("inspect", "--format", "{{.State.Status}}", container).stdout.strip()
            if state != "running":
                raise AssertionError(
                    f"container {state}:\n{podman('logs', container, check=False).stdout[-3000:]}"
                    f"{podman('logs', container, check=False).stderr[-3000:]}"
                )
            return _request(ctx, "GET", "/readyz")[0] == 200

        try:
            c.wait_for("the container's /readyz", ready, 120, interval=0.5)
        except AssertionError:
            raise
        except Exception:
            logs = podman("logs", container, check=False)
            raise AssertionError(f"not ready; container log:\n{logs.stdout[-3000:]}{logs.stderr[-3000:]}")

        uids = _uids(pid)
        assert len(uids) >= 2, uids  # the gunicorn master and its workers
        assert all(u == ["65532"] * 4 for u in uids.values()), uids

        ns = make_namespace(cp, unique("e2e-image"), {**OPT_IN, "rdma-webhook.io/policy": "ib-shared"})
        c.wait_for("the namespace in the container's cache", lambda: _mutated(ctx, ns), 30, interval=0.5)
        response = _mutated(ctx, ns)
        assert response["allowed"] is True
        pod = jsonpatch.apply_patch(gpu_pod("trainer", ns), json.loads(base64.b64decode(response["patch"])))
        assert pod["metadata"]["annotations"]["rdma-webhook.io/applied-policy"] == "ib-shared"
        assert pod["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
        assert (
            pod["spec"]["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] == 1
            or pod["spec"]["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
        )
        # the admission is in the container's log, one JSON line
        logs = podman("logs", container).stdout + podman("logs", container).stderr
        assert '"msg": "admission"' in logs or '"msg":"admission"' in logs, logs[-2000:]
    finally:
        podman("stop", "--time", "30", container, check=False)
        podman("rm", "--force", container, check=False)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the container's process is gone


def _mutated(ctx, ns: str) -> dict | None:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns,
            "operation": "CREATE",
            "userInfo": {"username": "e2e"},
            "object": gpu_pod("trainer", ns),
            "dryRun": False,
        },
    }
    status, body = _request(ctx, "POST", "/mutate", review)
    assert status == 200, body[:500]
    response = json.loads(body)["response"]
    return response if response.get("patch") else None
