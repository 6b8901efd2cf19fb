"""Machine types against the real API server and node (issue 42): the shipped gke-gib policy has
two machine types (A3 Ultra/A4: eight RDMA networks; A4X: four), chosen from the pod's own node
selection. What the API server stores is the proof: a pod selecting each type is stored with that
type's networks and nothing of the other's; a pod selecting none is stored with the eight
networks and the required node affinity the policy documents (docs/policies.md, "Machine types"),
merged into its own terms; and on the node, labelled as an A4 node, the scheduler places that
pod there and the kubelet starts it, while a pod that selects A4X stays Pending: no such node.

The node starts in this file (it is in conftest.LAST), so its pods tolerate the node's taint."""

from __future__ import annotations

import json

import pytest

from e2e import cluster as c
from e2e.conftest import INJECT, OPT_IN, create, env_of, gpu_pod, make_namespace, pod_path, stored, unique
from e2e.node import SHELL_IMAGE, TOLERATION

pytestmark = pytest.mark.usefixtures("hook")

ACCEL = "cloud.google.com/gke-accelerator"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PINNED = {"key": ACCEL, "operator": "In", "values": ["nvidia-h200-141gb", "nvidia-b200"]}
GIB = {"rdma-webhook.io/policy": "gke-gib"}


@pytest.fixture(scope="module")
def gib_namespace(cp, hook):
    return make_namespace(cp, unique("machines"), {**OPT_IN, **GIB})


def networks(pod: dict) -> list[str]:
    value = pod["metadata"]["annotations"]["networking.gke.io/interfaces"]
    return [e["network"] for e in json.loads(value)]


def terms(pod: dict) -> list[dict]:
    return pod["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]


def runnable(name: str, namespace: str, **spec) -> dict:
    """A labelled 2-GPU pod the node can start (its image imported, the node's taint tolerated)."""
    pod = gpu_pod(name, namespace, labels=INJECT, image=SHELL_IMAGE, imagePullPolicy="Never")
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", "exec sleep 3600"]
    pod["spec"].update(terminationGracePeriodSeconds=1, tolerations=[TOLERATION], **spec)
    return pod


def test_a_pod_selecting_each_type_is_stored_with_that_types_fabric(cp, gib_namespace):
    four = gpu_pod("a4x", gib_namespace)
    four["spec"]["nodeSelector"] = {ACCEL: "nvidia-gb200"}
    eight = gpu_pod("a4", gib_namespace)
    eight["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a4-highgpu-8g"]}
    ]}]}}}  # fmt: skip
    for pod in (four, eight):
        proc = create(cp, pod)
        assert proc.returncode == 0, proc.stderr
    got_four = stored(cp, pod_path(gib_namespace, "a4x"))
    assert networks(got_four) == ["default", "rdma-0", "rdma-1", "rdma-2", "rdma-3"]
    assert got_four["spec"]["nodeSelector"] == {ACCEL: "nvidia-gb200"} and "affinity" not in got_four["spec"]
    assert env_of(got_four["spec"]["containers"][0])["NCCL_NET"] == "gIB"
    got_eight = stored(cp, pod_path(gib_namespace, "a4"))
    assert networks(got_eight) == ["default"] + [f"rdma-{i}" for i in range(8)]
    assert got_eight["spec"]["affinity"] == eight["spec"]["affinity"]  # it chose: nothing added


def test_a_pod_selecting_no_type_is_stored_pinned_to_the_default_type(cp, gib_namespace):
    pod = gpu_pod("unselected", gib_namespace)
    pod["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]},
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]},
    ]}}}  # fmt: skip
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    got = stored(cp, pod_path(gib_namespace, "unselected"))
    assert networks(got) == ["default"] + [f"rdma-{i}" for i in range(8)]
    assert terms(got) == [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [z]}, PINNED]}
        for z in ("zone-a", "zone-b")
    ]


def test_a_pod_selecting_an_unknown_type_is_refused_naming_the_types(cp, gib_namespace):
    pod = gpu_pod("a3mega", gib_namespace)
    pod["spec"]["nodeSelector"] = {ACCEL: "nvidia-h100-mega-80gb"}
    proc = create(cp, pod)
    assert proc.returncode != 0
    assert "[machine-type]" in proc.stderr and "a4x (cloud.google.com/gke-accelerator=nvidia-gb200" in proc.stderr
    assert "rdma-webhook.io/policy: gke or rdma-webhook.io/policy: gke-tcpxo" in proc.stderr


def test_on_the_node_the_pinned_pod_lands_where_its_fabric_is_and_another_type_waits(cp, hook, node):
    namespace = make_namespace(cp, unique("machines-node"), {**OPT_IN, **GIB})
    proc = cp.kubectl("label", "node", node.name, f"{ACCEL}=nvidia-b200", "--overwrite")
    assert proc.returncode == 0, proc.stderr
    try:
        pinned = runnable("pinned", namespace)
        assert create(cp, pinned).returncode == 0
        running = node.wait_pod(namespace, "pinned", ("Running",))
        assert running["spec"]["nodeName"] == node.name
        assert terms(running) == [{"matchExpressions": [PINNED]}]
        assert networks(running) == ["default"] + [f"rdma-{i}" for i in range(8)]

        elsewhere = runnable("a4x", namespace, nodeSelector={ACCEL: "nvidia-gb200"})
        assert create(cp, elsewhere).returncode == 0
        got = stored(cp, pod_path(namespace, "a4x"))
        assert networks(got) == ["default", "rdma-0", "rdma-1", "rdma-2", "rdma-3"]
        # the scheduler finds no A4X node: Unschedulable, Pending, on no node

        def unschedulable():
            got = stored(cp, pod_path(namespace, "a4x"))
            conditions = got.get("status", {}).get("conditions") or []
            if any(x["type"] == "PodScheduled" and x.get("reason") == "Unschedulable" for x in conditions):
                return got
            return None

        got = c.wait_for("pod a4x Unschedulable", unschedulable, 60, interval=0.5)
        assert got["status"]["phase"] == "Pending" and not got["spec"].get("nodeName"), got["status"]
    finally:
        cp.kubectl("delete", "pod", "--all", "-n", namespace, "--wait=false")
        cp.kubectl("label", "node", node.name, f"{ACCEL}-")
