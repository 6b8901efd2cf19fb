"""The pod a shipped policy's mutation leaves, built from the policy's own settings (what it adds),
not from the generator's CEL: what e2e/test_admission_policy_rules.py sends to the real API
server (admitted whole, denied with each piece undone) and what benchmarks/celcost.py evaluates
the generated ValidatingAdmissionPolicies on. A helper of both, so that the benchmark imports no
test module."""

from __future__ import annotations

import json
from typing import Any

from webhook.core import keys
from webhook.core.model import GPUS_FIELD, Policy
from webhook.fabrics import gke

SHM = "rdma-webhook-dshm"


def complete_pod(policy: Policy, name: str, namespace: str) -> dict[str, Any]:
    """A GPU pod as `policy`'s mutation leaves it: its devices (or its DRA claim), IPC_LOCK, the
    enforced variables, a memory-backed /dev/shm, hostNetwork as required, its networks and its
    sidecar; labelled with the applied policy, as /mutate labels it."""
    limits = {policy.gpu_resources[0]: "1", **{d.resource: "1" for d in policy.devices}}
    env = [{"name": s.name, "value": "net1" if s.templated else s.value} for s in policy.env if s.enforce]
    trainer: dict[str, Any] = {
        "name": "trainer",
        "image": "registry.example/trainer:1",
        "resources": {"limits": limits},
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "volumeMounts": [{"name": SHM, "mountPath": "/dev/shm"}],
    }
    if env:
        trainer["env"] = env
    spec: dict[str, Any] = {"containers": [trainer], "volumes": [{"name": SHM, "emptyDir": {"medium": "Memory"}}]}
    if policy.claim is not None:
        spec["resourceClaims"] = [
            {"name": "rdma", "resourceClaimTemplateName": policy.claim.template.replace(GPUS_FIELD, "1")}
        ]
        trainer["resources"]["claims"] = [{"name": "rdma"}]
    if policy.host_network == "Required":
        spec["hostNetwork"] = True
    if policy.sidecar is not None:
        spec["containers"].append({"name": "fabric-sidecar", "image": policy.sidecar.image + ":1"})
    annotations: dict[str, str] = {}
    if policy.networks:
        annotations[keys.MULTUS_NETWORKS] = ",".join(n.name for n in policy.networks)
    if policy.gke_networks:
        annotations[gke.INTERFACES] = json.dumps(
            [{"interfaceName": "eth0", "network": "default"}]
            + [{"interfaceName": f"eth{i + 1}", "network": g.name} for i, g in enumerate(policy.gke_networks)]
        )
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {keys.APPLIED_POLICY_LABEL: policy.name}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
