"""Operations against the real API server: every manifest of deploy/ validated server-side,
certificate rotation while the API server keeps calling, and the webhook down.

This module stops and restarts the session's webhook: it runs last (see ORDER in conftest.py)."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import threading
import time

import pytest

from e2e import cluster as c
from e2e.conftest import create, gpu_pod, make_namespace, pod_path, unique
from webhook.serving.certs import write_certs


@pytest.mark.parametrize("target", ["deploy", "deploy/overlays/self-managed", "deploy/monitoring"])
def test_deploy_manifests_pass_server_side_dry_run(cp, hook, workdir, target):
    args = []
    if target.endswith("self-managed"):
        # what the README has users run first, in a copy of deploy/: nothing written into the
        # checkout (a CA and keys left there would be what the next `kubectl apply -k` installs)
        copy = workdir / "deploy-self-managed" / "deploy"
        if not copy.exists():
            shutil.copytree(c.ROOT / "deploy", copy, ignore=shutil.ignore_patterns("certs"))
            write_certs(copy / "overlays" / "self-managed" / "certs", "rdma-webhook", "rdma-webhook")
        target = str(copy / "overlays" / "self-managed")
    rendered = c.render_deploy(cp, target)
    assert rendered
    proc = cp.kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        *args,
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rendered}),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("(server dry run)") == len(rendered), proc.stdout
    # the rdma-webhook namespace enforces the restricted Pod Security Standard: the Deployment's
    # pod template must satisfy it (the API server warns about workloads that would not)
    assert "PodSecurity" not in proc.stderr, proc.stderr


def _served_serial(port: int, cafile) -> int:
    ctx = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    from cryptography import x509

    return x509.load_der_x509_certificate(der).serial_number


def test_certificate_rotation_while_the_api_server_calls(cp, hook, namespace):
    before = _served_serial(hook.port, hook.certs / "ca.crt")
    failures: list[str] = []
    done = threading.Event()
    count = [0]

    def keep_creating():
        while not done.is_set():
            proc = create(cp, gpu_pod(unique("rot"), namespace), "--dry-run=server")
            count[0] += 1
            if proc.returncode != 0:
                failures.append(proc.stderr)

    worker = threading.Thread(target=keep_creating)
    worker.start()
    try:
        time.sleep(2)
        write_certs(hook.certs, "rdma-webhook", "rdma-webhook", ips=["127.0.0.1"], reuse_ca=True)  # same caBundle
        c.wait_for(
            "the renewed certificate served",
            lambda: _served_serial(hook.port, hook.certs / "ca.crt") != before,
            90,
            interval=0.5,
        )
        time.sleep(3)
    finally:
        done.set()
        worker.join(60)
    assert count[0] >= 3
    assert failures == [], failures[:2]


def test_webhook_down(cp, hook, namespace):
    """failurePolicy Fail: labelled pods in opted-in namespaces are refused while no replica
    answers; every other pod is still created; back up, labelled pods are admitted again."""
    other = make_namespace(cp, unique("e2e-other"))
    hook.stop()
    try:
        proc = create(cp, gpu_pod("refused", namespace))
        assert proc.returncode != 0
        assert 'failed calling webhook "pods.mutate.rdma-webhook.io"' in proc.stderr, proc.stderr
        unlabelled = create(cp, gpu_pod("unlabelled", namespace, labels={"app": "x"}))
        assert unlabelled.returncode == 0, unlabelled.stderr
        elsewhere = create(cp, gpu_pod("elsewhere", other))
        assert elsewhere.returncode == 0, elsewhere.stderr
        # the workload check fails open (failurePolicy Ignore): a Job is still accepted
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "during-outage", "namespace": namespace},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.example/x:1"}]}
                },
            },
        }
        proc = cp.kubectl("create", "-f", "-", input=json.dumps(job))
        assert proc.returncode == 0, proc.stderr
    finally:
        hook.start()
    proc = create(cp, gpu_pod("after", namespace))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(cp.request("GET", pod_path(namespace, "after"))[1])
    assert got["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
