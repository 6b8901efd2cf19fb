"""Machine types (webhook/core/machines.py): the fabric of the type the pod's own node selection
names, the policy's documented choice when it names none, a clear denial when it names an unknown
or more than one type; every patch applied to the pod as sent, and a second pass changes nothing."""

from __future__ import annotations

import copy
import json

import pytest

import kube_objects as k
from core.test_decision import mutate_twice, respond
from webhook.core import keys, machines
from webhook.core.decision import Namespace, check_final, decide
from webhook.fabrics import gke
from webhook.policy.load import load_texts

ACCEL = "cloud.google.com/gke-accelerator"
ITYPE = "node.kubernetes.io/instance-type"


def policy_text(when: str = "Default", default: str | None = "eight") -> str:
    """Two machine types of one GKE RDMA fabric: eight NICs (the policy's own) and four."""
    head = "" if default is None else f"  default: {default}\n"
    return f"""
apiVersion: rdma-webhook.io/v1alpha2
kind: RdmaPolicy
name: two-types
description: test
namespaceSelector: {{}}
fabric: {{kind: gke-rdma, transport: gib, ncclNet: [gIB], hcaDevices: ["mlx5_[0-7]"]}}
gkeNetworks: [{", ".join(f"{{name: rdma-{i}, interface: eth{i + 2}}}" for i in range(8))}]
shm: {{perGpu: 8Gi}}
nccl:
  NCCL_NET: {{value: gIB, enforce: true}}
machineTypes:
{head}  whenUnselected: {when}
  types:
    - name: eight
      nodeLabels: {{{ACCEL}: [nvidia-h200-141gb, nvidia-b200], {ITYPE}: a4-highgpu-8g}}
    - name: four
      nodeLabels: {{{ACCEL}: nvidia-gb200, {ITYPE}: a4x-highgpu-4g}}
      fabric: {{hcaDevices: ["mlx5_[0-3]"]}}
      gkeNetworks: [{", ".join(f"{{name: rdma-{i}, interface: eth{i + 2}}}" for i in range(4))}]
"""


def policies_of(text: str):
    ps, errors = load_texts([("two-types.yaml", text)])
    assert ps is not None, [str(e) for e in errors]
    return ps


NS = Namespace("ml", {"kubernetes.io/metadata.name": "ml", keys.NS_INJECTION: "enabled", keys.NS_POLICY: "two-types"})


def pod(node_selector=None, affinity=None, gpus=4):
    """A worker as a JobSet controller sends it (generateName, token volume, defaults)."""
    extra = {}
    if node_selector is not None:
        extra["nodeSelector"] = node_selector
    if affinity is not None:
        extra["affinity"] = affinity
    return k.pod([k.container("worker", gpus=gpus)], namespace="ml", generate_name="train-worker-0-0-", **extra)


def required(*terms):
    return {"nodeAffinity": {machines.AFFINITY_KEY: {"nodeSelectorTerms": list(terms)}}}


def expr(key, *values, op="In"):
    return {"key": key, "operator": op, "values": list(values)}


def networks(p):
    value = ((p.get("metadata") or {}).get("annotations") or {}).get(gke.INTERFACES)
    return [e["network"] for e in json.loads(value)] if value else []


FOUR = ["default"] + [f"rdma-{i}" for i in range(4)]
EIGHT = ["default"] + [f"rdma-{i}" for i in range(8)]


@pytest.mark.parametrize(
    "selection, want",
    [
        ({"node_selector": {ACCEL: "nvidia-gb200"}}, FOUR),
        ({"node_selector": {ITYPE: "a4x-highgpu-4g", "kubernetes.io/arch": "arm64"}}, FOUR),
        ({"node_selector": {ACCEL: "nvidia-b200"}}, EIGHT),
        ({"affinity": required({"matchExpressions": [expr(ACCEL, "nvidia-gb200")]})}, FOUR),
        # two terms (ORed), both of the four-NIC type
        (
            {
                "affinity": required(
                    {"matchExpressions": [expr(ACCEL, "nvidia-gb200")]},
                    {"matchExpressions": [expr(ITYPE, "a4x-highgpu-4g")]},
                )
            },
            FOUR,
        ),
        # a value list within one type; an unrelated NotIn does not narrow
        (
            {
                "affinity": required(
                    {
                        "matchExpressions": [
                            expr(ACCEL, "nvidia-h200-141gb", "nvidia-b200"),
                            expr(ITYPE, "x", op="NotIn"),
                        ]
                    }
                )
            },
            EIGHT,
        ),
        # nodeSelector and affinity agreeing
        (
            {
                "node_selector": {ACCEL: "nvidia-gb200"},
                "affinity": required({"matchExpressions": [expr(ITYPE, "a4x-highgpu-4g")]}),
            },
            FOUR,
        ),
    ],
)
def test_the_pods_selection_chooses_the_fabric(selection, want):
    ps = policies_of(policy_text())
    p = pod(**selection)
    _, out, d = mutate_twice(p, NS, ps)
    assert d.outcome == "mutated" and d.policy == "two-types"
    assert networks(out) == want
    assert out["spec"].get("affinity") == p["spec"].get("affinity")  # nothing added: the pod chose
    # the stored pod passes the final-state guard of its type
    assert check_final(out, NS, ps).allowed


def test_a_pod_naming_no_type_gets_the_default():
    ps = policies_of(policy_text("Default"))
    _, out, d = mutate_twice(pod(), NS, ps)
    assert networks(out) == EIGHT and "affinity" not in out["spec"]


def test_a_pod_naming_no_type_is_pinned_to_the_default_with_a_required_affinity():
    ps = policies_of(policy_text("RequireNodeAffinity"))
    p = pod()
    _, out, d = mutate_twice(p, NS, ps)
    assert networks(out) == EIGHT
    want = expr(ACCEL, "nvidia-h200-141gb", "nvidia-b200")
    assert out["spec"]["affinity"] == required({"matchExpressions": [want]})
    assert any("required node affinity" in n for n in d.notes)
    # stored as patched, the pod now names the type: the same fabric, nothing more to add
    again = decide(out, NS, ps)
    assert again.outcome == "unchanged" and check_final(out, NS, ps).allowed


def test_the_added_affinity_is_merged_into_every_term():
    """A pod with its own required terms (of no machine type) keeps them; each gets the expression."""
    ps = policies_of(policy_text("RequireNodeAffinity"))
    own = {
        "nodeAffinity": {
            machines.AFFINITY_KEY: {
                "nodeSelectorTerms": [
                    {"matchExpressions": [expr("topology.kubernetes.io/zone", "us-central1-a")]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [expr("pool", "a")]}}
            ],
        },
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    p = pod(affinity=own)
    sent = copy.deepcopy(p)
    _, out, _ = mutate_twice(p, NS, ps)
    assert p == sent  # the pod as sent is untouched
    want = expr(ACCEL, "nvidia-h200-141gb", "nvidia-b200")
    terms = out["spec"]["affinity"]["nodeAffinity"][machines.AFFINITY_KEY]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [expr("topology.kubernetes.io/zone", "us-central1-a"), want]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}], "matchExpressions": [want]},
    ]
    assert out["spec"]["affinity"]["podAffinity"] == own["podAffinity"]
    assert (
        out["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        == (own["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"])
    )


@pytest.mark.parametrize(
    "selection, why",
    [
        ({"node_selector": {ACCEL: "nvidia-l4"}}, f"its nodeSelector {ACCEL}=nvidia-l4 is a node of none"),
        (
            {"node_selector": {ACCEL: "nvidia-gb200", ITYPE: "a4-highgpu-8g"}},
            "its nodeSelector names labels of different machine types",
        ),
        (
            {"affinity": required({"matchExpressions": [expr(ACCEL, "nvidia-gb200", "nvidia-b200")]})},
            "it may land on machine types eight, four",
        ),
        (
            {
                "affinity": required(
                    {"matchExpressions": [expr(ACCEL, "nvidia-gb200")]}, {"matchExpressions": [expr("zone", "a")]}
                )
            },
            "some of its required nodeSelectorTerms name a machine type and others none",
        ),
        (
            {
                "node_selector": {ACCEL: "nvidia-gb200"},
                "affinity": required({"matchExpressions": [expr(ITYPE, "a4-highgpu-8g")]}),
            },
            "its nodeSelector and its required node affinity select different machine types",
        ),
        (
            {"affinity": required({"matchExpressions": [expr(ITYPE, "n2-standard-8")]})},
            f"asks for {ITYPE} in n2-standard-8, a node of none",
        ),
    ],
)
def test_unknown_or_contradictory_selections_are_denied_naming_the_types(selection, why):
    ps = policies_of(policy_text())
    p = pod(**selection)
    resp, out, d = respond(p, NS, ps)
    assert not resp["allowed"] and out == p
    assert [f.rule for f in d.denials] == ["machine-type"] and d.policy == "two-types"
    message = d.denials[0].message
    assert why in message, message
    assert f"eight ({ACCEL}=nvidia-h200-141gb|nvidia-b200, {ITYPE}=a4-highgpu-8g)" in message
    assert f"four ({ACCEL}=nvidia-gb200, {ITYPE}=a4x-highgpu-4g)" in message


def test_deny_mode_refuses_a_pod_naming_no_type():
    ps = policies_of(policy_text("Deny", default=None))
    resp, _, d = respond(pod(), NS, ps)
    assert not resp["allowed"] and "it names no machine type" in d.denials[0].message
    assert respond(pod(node_selector={ACCEL: "nvidia-gb200"}), NS, ps)[0]["allowed"]


@pytest.mark.parametrize(
    "affinity",
    [
        "x",
        {"nodeAffinity": None},
        {"nodeAffinity": {machines.AFFINITY_KEY: {"nodeSelectorTerms": "x"}}},
        required("x", {"matchExpressions": "x"}, {"matchExpressions": ["x", {"key": ACCEL, "operator": "In"}]}),
    ],
)
def test_malformed_affinity_names_no_type_and_never_raises(affinity):
    ps = policies_of(policy_text())
    p = pod()
    p["spec"]["affinity"] = affinity
    d = decide(p, NS, ps)
    assert d.outcome in ("mutated", "denied")
    assert machines.choose(p, ps.get("two-types"))[0] is ps.get("two-types").machines.unselected


def test_a_policy_without_machine_types_is_returned_as_is(policies):
    erdma = policies.get("erdma")
    assert erdma.machines is None
    assert machines.choose(pod(node_selector={ACCEL: "nvidia-gb200"}), erdma) == (erdma, "")


def test_each_type_is_a_whole_policy_with_its_own_caches():
    ps = policies_of(policy_text("RequireNodeAffinity"))
    base = ps.get("two-types")
    eight, four = (t.policy for t in base.machines.types)
    assert eight.machine == "eight" and four.machine == "four" and base.machine == ""
    assert four.fabric.hca_devices == tuple(f"mlx5_{i}" for i in range(4))
    assert base.machines.unselected.pin == (ACCEL, ("nvidia-h200-141gb", "nvidia-b200"))
    assert eight.pin is None and four.judged is not eight.judged
    # indexed by what any of its types has
    assert ps.by_gke_network["rdma-7"] == [base] and ps.by_gke_network["rdma-0"] == [base]
