"""Fixtures of the end-to-end suite: one control plane and one webhook for the whole session.

`make e2e` runs this. The binaries come from RDMA_WEBHOOK_E2E_BIN, else e2e/build-controlplane.sh
(which reuses its cache). Logs of every process are in the session's work folder, printed at the
start and, on a failure, tailed at the end.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import cluster as c
from e2e.second_webhook import SecondWebhook

HERE = Path(__file__).resolve().parent
INJECT = {"rdma-webhook.io/inject": "true"}
OPT_IN = {"rdma-webhook.io/injection": "enabled"}


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    path = Path(os.environ.get("RDMA_WEBHOOK_E2E_WORKDIR") or tmp_path_factory.mktemp("cluster"))
    path.mkdir(parents=True, exist_ok=True)
    print(f"\ne2e work folder (process logs): {path}")
    return path


@pytest.fixture(scope="session")
def cp(workdir) -> Any:
    c.install_signal_handlers()
    bin_dir = Path(os.environ.get("RDMA_WEBHOOK_E2E_BIN") or c.build_binaries())
    plane = c.ControlPlane(bin_dir, workdir)
    started = time.monotonic()
    plane.start()
    print(f"control plane up in {time.monotonic() - started:.1f}s")
    try:
        plane.apply(yaml.safe_load_all((HERE / "crds.yaml").read_text()))
        for crd in yaml.safe_load_all((HERE / "crds.yaml").read_text()):
            if crd:
                plane.kubectl(
                    "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}", check=True
                )
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def deploy_docs(cp) -> list[dict]:
    return c.render_deploy(cp)


@pytest.fixture(scope="session")
def hook(cp, workdir, deploy_docs) -> c.Webhook:
    started = time.monotonic()
    wh = c.install_webhook(cp, workdir, deploy_docs)
    print(f"webhook ready and registered in {time.monotonic() - started:.1f}s")
    try:
        yield wh
    finally:
        wh.stop()


@pytest.fixture(scope="session")
def node(cp, workdir):
    """One node (e2e/node.py: kube-scheduler, kubelet, containerd) joined to the session's control
    plane, started by the first test that asks for it (the node's tests run last: see ORDER).
    A node that cannot start here fails those tests; they are never skipped."""
    from e2e.node import Node

    started = time.monotonic()
    n = Node(cp, workdir)
    n.start()
    steps = ", ".join(f"{k.replace('start_', '')} {v:.1f}s" for k, v in n.timings.items())
    print(f"node {n.name} Ready in {time.monotonic() - started:.1f}s ({steps}); bridge {n.bridge} {n.subnet}")
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture(scope="session")
def second(cp, workdir, hook):
    sw = SecondWebhook(workdir)
    cp.apply([sw.configuration()])
    try:
        yield sw
    finally:
        cp.kubectl("delete", "mutatingwebhookconfiguration", "zz-e2e-second", "--ignore-not-found")
        sw.stop()


def pytest_sessionfinish(session, exitstatus):
    if exitstatus not in (0, 5):
        folder = os.environ.get("RDMA_WEBHOOK_E2E_WORKDIR")
        for proc in list(c._RUNNING.values()):
            print(f"\n---- last lines of {proc.log} ----\n{proc.tail(40)}")
        if folder:
            print(f"(logs kept in {folder})")


# --- helpers the tests share ---------------------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def make_namespace(cp, name: str, labels: dict[str, str] | None = None) -> str:
    cp.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}])
    # the ServiceAccount admission plugin refuses pods until the `default` ServiceAccount exists
    c.wait_for(
        f"ServiceAccount default in {name}", lambda: cp.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 60
    )
    return name


@pytest.fixture
def namespace(cp, hook, request):
    """A fresh opted-in namespace (labels can be extended with @pytest.mark.ns_labels)."""
    marker = request.node.get_closest_marker("ns_labels")
    labels = {**OPT_IN, **(marker.args[0] if marker else {})}
    return make_namespace(cp, unique("e2e"), labels)


def gpu_pod(
    name: str,
    namespace: str,
    labels: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    gpus: int = 2,
    annotations: dict[str, str] | None = None,
    **container: Any,
) -> dict:
    ctr: dict[str, Any] = {
        "name": "pytorch",
        "image": "registry.example/trainer:1",
        "command": ["torchrun", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }
    if env:
        ctr["env"] = [{"name": k, "value": v} for k, v in env.items()]
    ctr.update(container)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(INJECT if labels is None else labels)}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [ctr]}}


def create(cp, obj: dict, *args: str):
    """`kubectl create -f -` of one object: the CompletedProcess (stderr has kubectl's messages)."""
    return cp.kubectl("create", "-f", "-", "-o", "json", *args, input=json.dumps(obj))


def stored(cp, kind_path: str) -> dict:
    status, data = cp.request("GET", kind_path)
    assert status == 200, f"GET {kind_path}: HTTP {status} {data[:300]!r}"
    return json.loads(data)


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def env_of(container: dict) -> dict[str, str]:
    names = [e["name"] for e in container.get("env") or []]
    assert len(names) == len(set(names)), f"duplicate env names in {container['name']}: {names}"
    return {e["name"]: e.get("value") for e in container.get("env") or []}


ORDER = ["test_pods.py", "test_controllers.py", "test_cluster_state.py", "test_operations.py"]
LAST = [
    "test_node.py",
    "test_node_mpi.py",
    "test_node_chart.py",
    "test_machine_types.py",
    "test_node_verify.py",
    "test_node_verify_policy.py",
]


def pytest_collection_modifyitems(session, config, items):
    """Run the files in this order whatever their names: test_operations.py stops and restarts
    the session's webhook, and test_cluster_state.py restarts the API server. The files of LAST
    come after all others: they start the node, after which pods are scheduled and started, where
    every other test has them stay Pending."""

    def rank(item):
        name = item.path.name
        if name in LAST:
            return len(ORDER) + 1 + LAST.index(name)
        return ORDER.index(name) if name in ORDER else len(ORDER)

    items.sort(key=rank)  # stable: the order inside a file is kept
