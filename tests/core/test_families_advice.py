"""The advice of a fabric-mismatch (webhook/core/families.py `fitting`) and of a denied NCCL_NET
(webhook/core/fallback.py `_fitting_net`) never names the policy the pod is already under: a pod
of one machine type of a policy is judged by that type's Policy, while the policies' indexes hold
the policy as loaded, so an identity test took the pod's own policy for another one ("select
policy gke" to a pod under gke). It names the policy's other machine type instead, or another
policy, or none.

The pods: a GKE worker modelled on GoogleCloudPlatform/cluster-toolkit
examples/gke-a4x/nccl-jobset-example.yaml (the networking.gke.io/interfaces annotation listing
rdma-0..rdma-3 at eth2..eth5, nodeSelector cloud.google.com/gke-accelerator) and on
GoogleCloudPlatform/container-engine-accelerators gpudirect-tcpx/nccl-test-latest.yaml (A3 High,
nvidia-h100-80gb), sent as the API server sends them, the patch (if any) applied."""

from __future__ import annotations

import json

import pytest

import kube_objects as k
from conftest import POLICIES
from core.test_decision import respond
from webhook.core import keys
from webhook.core.decision import Namespace
from webhook.core.model import PolicySet
from webhook.fabrics import gke
from webhook.policy.load import load_dir

SHIPPED, _ = load_dir(POLICIES)
assert SHIPPED is not None
ACCEL = "cloud.google.com/gke-accelerator"


def _only(*names: str) -> PolicySet:
    return PolicySet([SHIPPED.by_name[n] for n in names])


def _ns(policy: str) -> Namespace:
    name = "ml-training"
    return Namespace(name, {"kubernetes.io/metadata.name": name, keys.NS_INJECTION: "enabled", keys.NS_POLICY: policy})


def worker(accelerator: str, rdma: int, env: list[dict[str, str]] | None = None) -> dict:
    """A JobSet worker selecting `accelerator`'s nodes and listing GKE networks rdma-0.. itself."""
    interfaces = [{"interfaceName": "eth0", "network": "default"}] + [
        {"interfaceName": f"eth{i + 2}", "network": f"rdma-{i}"} for i in range(rdma)
    ]
    annotations = {gke.DEFAULT_INTERFACE: "eth0", gke.INTERFACES: json.dumps(interfaces)} if rdma else None
    return k.pod(
        [
            k.container(
                "nccl-test", "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.0.6", gpus=4, env=env
            )
        ],
        namespace="ml-training",
        generate_name="nccl-test-w-0-",
        annotations=annotations,
        nodeSelector={ACCEL: accelerator},
    )


def _denial(resp: dict, rule: str) -> str:
    assert not resp["allowed"], resp
    message = resp["status"]["message"]
    assert f"[{rule}]" in message, message
    return message


@pytest.mark.parametrize("loaded", [("gke",), ("gke", "gke-gib"), ("gke", "gke-gib", "gke-tcpxo")])
def test_another_types_networks_name_that_type_not_the_policy_the_pod_is_under(loaded):
    """A4X (four RDMA NICs) listing A3 Ultra's eight: rdma-4..rdma-7 are another machine type's
    of gke, the policy the pod is under; the advice says so, whatever else is loaded."""
    resp, _, decision = respond(worker("nvidia-gb200", 8), _ns("gke"), _only(*loaded))
    message = _denial(resp, "fabric-mismatch")
    assert decision.policy == "gke"
    assert "select policy gke " not in message and "select policy gke-gib" not in message, message
    assert "another machine type of policy gke has it" in message and "a3-ultra-a4 (" in message, message


def test_another_policys_networks_name_that_policy():
    """Under gke-tcpxo (A3 Mega's vpc networks only), A4X's rdma networks are gke-gib's or gke's:
    the advice names one of them, never gke-tcpxo."""
    resp, _, _ = respond(worker("nvidia-h100-mega-80gb", 4), _ns("gke-tcpxo"), _only("gke-gib", "gke-tcpxo"))
    message = _denial(resp, "fabric-mismatch")
    assert "select policy gke-gib with the annotation" in message and "select policy gke-tcpxo" not in message


def test_a_denied_nccl_net_of_the_pods_own_policy_names_no_policy():
    """A3 High's pod (TCPX) setting gIB's NCCL_NET: gIB is the network of gke's other types, not
    of another policy; the env-fallback denial does not tell it to select gke, which it is under."""
    pod = worker("nvidia-h100-80gb", 0, env=[{"name": "NCCL_NET", "value": "gIB"}])
    resp, _, decision = respond(pod, _ns("gke"), _only("gke"))
    message = _denial(resp, "env-fallback")
    assert decision.policy == "gke" and "select that policy" not in message, message
    # with gke-gib loaded too, the advice names gke-gib
    resp, _, _ = respond(pod, _ns("gke"), _only("gke", "gke-gib"))
    message = _denial(resp, "env-fallback")
    assert f"{keys.POD_POLICY}: gke-gib" in message and f"{keys.POD_POLICY}: gke " not in message, message
