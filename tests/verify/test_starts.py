"""webhook/verify/starts.py: which container starts of a stored pod the verifier reads. The pods are
the webhook's own: an API-server-shaped pod, mutated by /mutate's decision (its patch applied),
then given the status a kubelet writes (containerStatuses with container IDs)."""

from __future__ import annotations

import base64
import copy
import json

import jsonpatch

import kube_objects as k
from conftest import CLUSTER_STATE, POLICIES
from webhook.admission import review
from webhook.cluster.state import FileClusterState
from webhook.policy.load import load_dir
from webhook.verify.starts import starts

STATE = FileClusterState.from_file(str(CLUSTER_STATE))
PS, _ = load_dir(POLICIES)
IB = "ib-training"  # opted in, policy ib-shared (examples/cluster-state.yaml)


def admitted(pod: dict) -> dict:
    """The pod as the API server stores it after the webhook's patch, with a name and uid."""
    status, doc, decision, _ = review.handle(k.body(k.admission_review(pod)), PS, STATE.namespace, STATE.attachments())
    resp = doc["response"]
    assert status == 200 and resp["allowed"], resp
    out = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
    out["metadata"].setdefault("name", out["metadata"].get("generateName", "p-") + "x7k2q")
    out["metadata"]["uid"] = "0b1c2d3e-0000-4000-8000-00000000000" + str(len(out["metadata"]["name"]) % 10)
    out["spec"]["nodeName"] = "gpu-node-1"
    return out


def running(pod: dict, *names: str, restarts: int = 0) -> dict:
    """The pod with the kubelet's status: each named container running under a container ID."""
    pod = copy.deepcopy(pod)
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": name,
                "ready": True,
                "restartCount": restarts,
                "image": "nvcr.io/nvidia/pytorch:25.11-py3",
                "imageID": "",
                "containerID": f"containerd://{name}-{restarts:02d}" + "a" * 40,
                "started": True,
                "state": {"running": {"startedAt": "2026-12-07T16:00:00Z"}},
            }
            for name in names
        ],
    }
    return pod


def trainer() -> dict:
    return k.pod(
        [
            k.container("trainer", command=["torchrun", "--nproc_per_node=8", "train.py"]),
            k.container("log-shipper", image="fluent/fluent-bit:3.2", gpus=None),
        ],
        namespace=IB,
        labels={"training.kubeflow.org/job-name": "llama"},
    )


def test_the_containers_given_the_nccl_block_are_read_once_started():
    pod = admitted(trainer())
    assert pod["metadata"]["labels"]["rdma-webhook.io/applied-policy"] == "ib-shared"
    assert starts(pod) == []  # not started yet: no status
    found = starts(running(pod, "trainer", "log-shipper"))
    assert [(s.container, s.policy, s.node) for s in found] == [("trainer", "ib-shared", "gpu-node-1")]
    assert found[0].pod == pod["metadata"]["name"] and found[0].namespace == IB


def test_a_restart_is_a_new_start_and_a_repeated_status_is_not():
    pod = admitted(trainer())
    first = starts(running(pod, "trainer"))[0]
    assert starts(running(pod, "trainer"))[0].key == first.key
    again = starts(running(pod, "trainer", restarts=1))[0]
    assert again.key != first.key and again.key[:2] == first.key[:2]


def test_a_waiting_container_or_one_without_an_id_is_not_read_yet():
    pod = running(admitted(trainer()), "trainer")
    waiting = copy.deepcopy(pod)
    waiting["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    assert starts(waiting) == []
    no_id = copy.deepcopy(pod)
    del no_id["status"]["containerStatuses"][0]["containerID"]
    assert starts(no_id) == []
    done = copy.deepcopy(pod)
    done["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    assert [s.container for s in starts(done)] == ["trainer"]


def test_a_pod_the_webhook_did_not_mutate_is_never_read():
    pod = running(admitted(trainer()), "trainer")
    del pod["metadata"]["labels"]["rdma-webhook.io/applied-policy"]
    assert starts(pod) == []
    for garbage in (None, [], "pod", {"metadata": "x"}, {"metadata": {"labels": ["a"]}}, {"status": 3}):
        assert starts(garbage) == []


def test_the_controller_of_the_pod_is_where_its_job_events_go():
    pod = running(admitted(trainer()), "trainer")
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-a-controller", "uid": "u0"},
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama", "uid": "u1", "controller": True},
    ]
    assert starts(pod)[0].owner == ("kubeflow.org/v1", "PyTorchJob", "llama")
