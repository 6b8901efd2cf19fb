"""The webhook installed on the node as users install it: the chart (charts/rdma-webhook), its
Deployment's pods started by the kubelet from the image `make image` builds (e2e/test_image.py's
build, imported into containerd, no registry), ready (their /readyz needs the cluster state
synced through the API server, which they reach at the `kubernetes` Service's address), and called
by the API server through the chart's Service (endpoint routing) with the chart's caBundle.

Runs after e2e/test_node.py (LAST in conftest.py); if the node cannot start, it fails."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from e2e import cluster as c
from e2e.conftest import INJECT, OPT_IN, create, gpu_pod, make_namespace, pod_path, stored, unique
from e2e.node import SHELL_IMAGE, TOLERATION

CHART = c.ROOT / "charts" / "rdma-webhook"
RELEASE = NAMESPACE = "chart-node"
FULLNAME = f"{RELEASE}-rdma-webhook"
SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=webhook"


@pytest.fixture(scope="module")
def webhook_image(node, workdir) -> str:
    from e2e.test_image import build_image, image_cache, podman

    name = build_image()
    archive = image_cache() / f"rdma-webhook-{name.rsplit('e2e-', 1)[1]}.oci.tar"
    if not archive.exists():  # the podman image was reused: write its archive here
        archive = Path(workdir) / "rdma-webhook.oci.tar"
        podman("save", "--format", "oci-archive", "-o", str(archive), name, timeout=600)
    started = time.monotonic()
    node.import_image(archive)
    assert name in node.ctr("images", "ls", "-q").stdout.split()
    print(f"image {name} imported into containerd in {time.monotonic() - started:.1f}s")
    return name


@pytest.fixture(scope="module")
def chart(cp, node, workdir, webhook_image):
    node.start_service_routing()
    proc = subprocess.run(["bash", str(c.ROOT / "scripts" / "build-helm.sh")], capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    binary = proc.stdout.strip().splitlines()[-1]
    home = Path(workdir) / "helm-node-home"
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data"), "KUBECONFIG": str(cp.admin_kubeconfig)}

    def helm(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([binary, *args], capture_output=True, text=True, timeout=400, env=env)

    repository, tag = webhook_image.rsplit(":", 1)
    started = time.monotonic()
    proc = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
                "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
                "--set", "image.pullPolicy=Never", "--set", "policies.enabled={erdma}",
                *[a for k, v in TOLERATION.items() for a in ("--set", f"tolerations[0].{k}={v}")],
                "--wait", "--timeout", "240s")
    if proc.returncode != 0:
        pods = cp.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout
        events = cp.kubectl("get", "events", "-n", NAMESPACE).stdout
        logs = cp.kubectl("logs", "-n", NAMESPACE, "-l", SELECTOR, "--tail", "30", "--prefix").stdout
        pytest.fail(f"helm install:\n{proc.stdout}\n{proc.stderr}\n{pods}\n{events[-4000:]}\n{logs[-4000:]}",
                    pytrace=False)
    print(f"chart installed, its Deployment available, in {time.monotonic() - started:.1f}s")
    try:
        yield helm
    finally:
        helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "120s")


def chart_admissions(cp, namespace: str) -> list[dict]:
    """The admission log lines the chart's pods wrote for `namespace`, as dicts (plus `from`, the
    pod that wrote it)."""
    logs = cp.kubectl("logs", "-n", NAMESPACE, "-l", SELECTOR, "--tail", "-1", "--prefix").stdout
    found = []
    for line in logs.splitlines():
        prefix, brace, rest = line.partition("{")
        try:
            doc = json.loads(brace + rest)
        except ValueError:
            continue
        if doc.get("msg") == "admission" and doc.get("namespace") == namespace:
            found.append({**doc, "from": prefix.strip()})
    return found


def test_chart_pods_run_from_the_image_and_are_ready(cp, node, chart, webhook_image):
    pods = stored(cp, f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={SELECTOR.replace(',', '%2C')}")["items"]
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]  # the chart's replicaCount
    for pod in pods:
        assert pod["spec"]["nodeName"] == node.name
        status = pod["status"]
        assert status["phase"] == "Running", status
        assert {x["type"]: x["status"] for x in status["conditions"]}["Ready"] == "True", status["conditions"]
        ctr = status["containerStatuses"][0]
        assert ctr["image"].endswith(webhook_image.split("/", 1)[1]), ctr["image"]
        assert ctr["restartCount"] == 0, ctr


def test_the_api_server_calls_the_chart_through_its_service(cp, node, chart):
    """A labelled pod in an opted-in namespace: the chart's webhook configuration names the
    Service and the chart's caBundle; the chart's pods log its admission, and it starts."""
    config = stored(cp, f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{FULLNAME}")
    client = config["webhooks"][0]["clientConfig"]
    assert client["service"]["namespace"] == NAMESPACE and "url" not in client, client
    assert client["caBundle"]
    ns = make_namespace(cp, unique("chart"), OPT_IN)
    name = unique("trainer")
    pod = gpu_pod(name, ns, labels=INJECT, gpus=1, image=SHELL_IMAGE, imagePullPolicy="Never",
                  command=["sh", "-c", "exec sleep 3600"])
    pod["spec"].update(terminationGracePeriodSeconds=1, tolerations=[TOLERATION])
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    got = stored(cp, pod_path(ns, name))
    assert got["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
    lines = c.wait_for("the chart's pods logging the admission", lambda: [
        x for x in chart_admissions(cp, ns) if x.get("pod") == name and x.get("endpoint") == "mutate"], 30)
    assert lines[0]["outcome"] == "mutated" and lines[0]["policy"] == "erdma", lines
    node.wait_pod(ns, name)
