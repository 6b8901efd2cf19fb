"""The AdmissionReviews the benchmarks send: a realistic mix built with tests/kube_objects.py.

Pods as training operators make them, padded the way real ones are (more env, volumes, labels,
annotations), so bodies land between 5 and 20 KB. The mix per 20 requests:

    8  pytorchjob-worker  PyTorchJob worker, erdma policy           -> mutated
    4  mpijob-worker      MPIJob worker, erdma policy                -> mutated
    3  denied             PyTorchJob worker with NCCL_IB_DISABLE=1   -> denied (403 in the review)
    3  untouched          ordinary pod without the inject label      -> allowed, no patch
    2  lws-sriov          LeaderWorkerSet worker, sriov-roce + Multus -> mutated
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests import kube_objects as k

ROOT = Path(__file__).resolve().parent.parent


def _pad(pod: dict[str, Any], n_env: int = 30, n_vols: int = 4, n_labels: int = 8, n_ann: int = 6) -> dict[str, Any]:
    """Grow a pod the way production ones grow: app env, config volumes, team labels, annotations."""
    meta = pod["metadata"]
    labels = meta.setdefault("labels", {})
    for i in range(n_labels):
        labels[f"team.example.com/label-{i}"] = f"value-{i}-{'x' * 12}"
    ann = meta.setdefault("annotations", {})
    for i in range(n_ann):
        ann[f"example.com/annotation-{i}"] = f"some operator state {i} " + "y" * 60
    spec = pod["spec"]
    vols = spec.setdefault("volumes", [])
    for c in spec["containers"]:
        env = c.setdefault("env", [])
        for i in range(n_env):
            env.append({"name": f"APP_SETTING_{i:02d}", "value": f"/opt/app/config/setting-{i}/" + "v" * 24})
        env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}})
        mounts = c.setdefault("volumeMounts", [])
        for i in range(n_vols):
            mounts.append({"name": f"config-{i}", "mountPath": f"/etc/app/config-{i}", "readOnly": True})
    for i in range(n_vols):
        vols.append({"name": f"config-{i}", "configMap": {"name": f"trainer-config-{i}", "defaultMode": 420}})
    spec.setdefault("nodeSelector", {"node.kubernetes.io/instance-type": "ecs.ebmgn8i.32xlarge"})
    spec.setdefault(
        "affinity",
        {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {
                                "matchLabels": {"training.kubeflow.org/job-name": meta.get("name", "job")}
                            },
                        },
                    }
                ]
            }
        },
    )
    meta["ownerReferences"] = [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": "llama-finetune",
            "uid": "8c0f7a52-0000-4000-8000-00000000beef",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return pod


def shapes() -> dict[str, dict[str, Any]]:
    """One pod per shape, padded."""
    return {
        "pytorchjob-worker": _pad(k.pytorchjob_worker(gpus=8)),
        "mpijob-worker": _pad(k.mpijob_worker(), n_env=50, n_vols=8),
        "denied": _pad(k.pytorchjob_worker(env=[{"name": "NCCL_IB_DISABLE", "value": "1"}])),
        "untouched": _pad(
            k.pod([k.container("web", "nginx:1.27", gpus=None)], inject=False, namespace="default"), n_env=20
        ),
        "lws-sriov": _pad(k.lws_worker(), n_env=80, n_vols=10, n_labels=20),
        # an MPIJob launcher (no GPU, mpirun -x ...): it gets the block and the Open MPI env list
        # (issue 24); measured per shape, not part of MIX, so the mix stays comparable with before
        "mpijob-launcher": _pad(k.mpijob_launcher(), n_env=20, n_vols=4),
        # the 4.5 KB review of the issue's reference figures (no padding)
        "pytorchjob-worker-plain": k.pytorchjob_worker(),
        # a JobSet worker on GKE A4X (cluster-toolkit's examples/gke-a4x/nccl-jobset-example.yaml selects
        # nvidia-gb200 by nodeSelector) under the policy with machine types, `gke`, and the same pod under
        # gke-gib, which has none: what choosing the machine type costs (issue 42); not part of MIX
        "gke-a4x-typed": _a4x_worker("gke"),
        "gke-a4x-untyped": _a4x_worker("gke-gib"),
    }


def _a4x_worker(policy: str) -> dict[str, Any]:
    pod = k.jobset_worker(nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-gb200"})
    pod["metadata"]["annotations"]["rdma-webhook.io/policy"] = policy
    trainer = pod["spec"]["containers"][0]
    trainer["resources"] = {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}
    trainer["volumeMounts"].append({"name": "gib", "mountPath": "/usr/local/gib"})  # the example's gIB mount
    pod["spec"]["volumes"].append({"name": "gib", "hostPath": {"path": "/home/kubernetes/bin/gib", "type": ""}})
    return _pad(pod, n_env=30, n_vols=4)


MIX = [("pytorchjob-worker", 8), ("mpijob-worker", 4), ("denied", 3), ("untouched", 3), ("lws-sriov", 2)]


def bodies() -> dict[str, bytes]:
    return {name: json.dumps(k.admission_review(pod, uid=f"bench-{name}")).encode() for name, pod in shapes().items()}


def mix() -> list[tuple[str, bytes]]:
    """The request sequence a load generator cycles through (20 entries, interleaved)."""
    b = bodies()
    seq: list[tuple[str, bytes]] = []
    counts = dict(MIX)
    while any(counts.values()):
        for name, _ in MIX:
            if counts[name]:
                seq.append((name, b[name]))
                counts[name] -= 1
    return seq


if __name__ == "__main__":
    for name, body in bodies().items():
        print(f"{name:26s} {len(body):6d} bytes")
