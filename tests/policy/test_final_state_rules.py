"""The final-state rules (webhook/policy/final_state_rules.py) as a user meets them: the refusal
the API server returns when a pod's final state breaks a rule, evaluated by k8s.io/apiserver's own
CEL (the harness and the mutated pods of test_admission_policy_cel.py: each shipped policy's pod
through /mutate, then broken one way). The messages are written out here as the user must read
them (what broke, in which container, why it matters, what to do), one broken state for each kind
of rule and each wording a rule has (a device or a claim, a pinned or a templated variable, each
transport variable, hostNetwork forbidden under Multus or GKE or required, a container or several);
whether the rules refuse the same pods as the webhook: test_admission_policy_cel.py."""

from __future__ import annotations

import copy

import pytest

import kube_objects as k
from core.test_machines import ACCEL, policy_text
from conftest import POLICIES
from policy.test_admission_policy_cel import (
    _caps,
    _last,
    _objects,
    evaluate,
    failed_rules,
    mutated,
    verdicts,
    webhook_findings,
)
from webhook.core import keys
from webhook.policy import admission_policy as ap, final_state_rules
from webhook.policy.load import load_texts

AFTER = "a webhook that ran after rdma-webhook may have"
TRAINER = "rdma-webhook: container 'trainer': "
PINS = "so that a missing RDMA device fails at start instead of running on TCP [enforced-env]"
NO_DEVICE = f"so it gets no RDMA device and NCCL uses TCP; {AFTER} removed it [device-missing]"
TCPXO = [
    f"rdma-webhook: the pod's networking.gke.io/interfaces annotation no longer lists the vpc{i} network of policy "
    f"gke-tcpxo; {AFTER} removed it [gke-networks]"
    for i in range(1, 9)
]
SELECT = (
    "gives a different fabric to each machine type, and the pod's spec.nodeSelector and required node affinity "
    f"select several of them, or labels no type has ({AFTER} changed them); select one of its types: "
)
A3_MEGA = (
    "a3-mega (cloud.google.com/gke-accelerator=nvidia-h100-mega-80gb, node.kubernetes.io/instance-type=a3-megagpu-8g)"
)

# (case, the broken final state, the messages of the validations that refuse it, in order)
REFUSALS = [
    ("erdma", "device removed", [f"{TRAINER}lacks aliyun/erdma in resources.limits, {NO_DEVICE}"]),
    (
        "roce-dranet-aligned",
        "the aligned claim's reference back to a GPU request",
        [f"{TRAINER}lacks a resources.claims entry for the pod's gpu-nic-aligned-{{gpus}} claim, {NO_DEVICE}"],
    ),
    (
        "coreweave-ib",
        "IPC_LOCK not added",
        [
            f"{TRAINER}securityContext.capabilities.add lacks IPC_LOCK, which RDMA needs to pin memory [ipc-lock-missing]"
        ],
    ),
    (
        "coreweave-ib",
        "ALL and cap_ipc_lock dropped",
        [
            f"{TRAINER}securityContext.capabilities.drop lists IPC_LOCK, which RDMA needs to pin memory (ibv_reg_mr "
            "fails and NCCL falls back to TCP) [ipc-lock-dropped]"
        ],
    ),
    (
        "coreweave-ib",
        "/dev/shm on disk",
        [
            f"{TRAINER}/dev/shm is no longer the memory-backed emptyDir rdma-webhook mounted there; NCCL and "
            "DataLoader workers need shared memory in RAM [shm]"
        ],
    ),
    (
        "erdma",
        "NCCL_NET='changed' last",
        [
            f"{TRAINER}NCCL_NET is missing or changed, but policy erdma pins it to 'IB' {PINS}",
            f"{TRAINER}NCCL_NET names a transport that policy erdma does not provide (IB), so NCCL uses TCP; "
            f"{AFTER} set it [env-fallback]",
        ],
    ),
    (
        "efa",
        "FI_PROVIDER='changed' last",
        [f"{TRAINER}FI_PROVIDER is missing or changed, but policy efa pins it to 'efa' {PINS}"],
    ),
    (
        "gke-tcpxo",
        "NCCL_FASTRAK_IFNAME='' last",
        [
            f"{TRAINER}NCCL_FASTRAK_IFNAME is missing or changed, but policy gke-tcpxo pins it to set (to "
            f"'{{interfaces}}' with the pod's interface names) {PINS}"
        ],
    ),
    (
        "coreweave-ib",
        "NCCL_IB_DISABLE=' +07' last",
        [
            f"{TRAINER}NCCL_IB_DISABLE is non-zero, which turns NCCL's IB/RoCE transport off, so NCCL runs on TCP "
            f"sockets; {AFTER} set it [env-fallback]"
        ],
    ),
    (
        "efa",
        "NCCL_NET=Socket last",
        [
            f"{TRAINER}NCCL_NET is missing or changed, but policy efa pins it to 'AWS Libfabric' {PINS}",
            f"{TRAINER}NCCL_NET names a transport that policy efa does not provide (Libfabric/AWS Libfabric/OFI), so "
            f"NCCL uses TCP; {AFTER} set it [env-fallback]",
        ],
    ),
    (
        "efa",
        "NCCL_NET_PLUGIN=none in a container that sees the GPUs",
        [
            "rdma-webhook: one of the containers 'trainer', 'profiler': NCCL_NET_PLUGIN does not load the fabric's "
            "plugin (ofi/aws-ofi), which leaves NCCL its built-in transports (TCP sockets here) [env-fallback]"
        ],
    ),
    (
        "sriov-roce",
        "hostNetwork set",
        [
            "rdma-webhook: hostNetwork: true, but policy sriov-roce attaches its fabric through the pod's own "
            "interfaces (Multus does not attach networks to host-network pods); remove hostNetwork [host-network]"
        ],
    ),
    (
        "gke-tcpxo",
        "hostNetwork set",
        [
            "rdma-webhook: hostNetwork: true, but policy gke-tcpxo attaches its fabric through the pod's own "
            "interfaces (GKE does not attach networks to host-network pods); remove hostNetwork [host-network]"
        ],
    ),
    (
        "oke-roce-host",
        "hostNetwork removed",
        [
            "rdma-webhook: policy oke-roce-host reaches its fabric through the host's interfaces and the pod no "
            "longer has hostNetwork: true, so NCCL finds no RDMA device and uses TCP [host-network]"
        ],
    ),
    (
        "sriov-roce",
        "networks annotation removed",
        [
            "rdma-webhook: the pod's k8s.v1.cni.cncf.io/networks annotation no longer lists the rdma-network network "
            f"of policy sriov-roce; {AFTER} removed it [multus-networks]"
        ],
    ),
    ("gke-tcpxo", "GKE interfaces annotation removed", TCPXO),
    (
        "gke-gib",
        "nodeSelector of a4x",
        [
            "rdma-webhook: the pod's networking.gke.io/interfaces annotation lists a GKE network of another machine "
            "type of policy gke-gib (rdma-4, rdma-5, rdma-6, rdma-7), which the nodes of its type a4x do not have; "
            "select that type with spec.nodeSelector, or remove the network [fabric-mismatch]"
        ],
    ),
    (
        "gke-tcpxo",
        "sidecar removed",
        [
            "rdma-webhook: no container of the pod runs the tcpxo-daemon sidecar (an image of tcpgpudmarxd) that "
            "policy gke-tcpxo's fabric needs beside the GPU containers [sidecar-missing]"
        ],
    ),
    (
        "gke-tcpxo",
        "nodeSelector cloud.google.com/gke-accelerator=nvidia-l4 (no type's)",
        [f"rdma-webhook: policy gke-tcpxo {SELECT}{A3_MEGA} [machine-type]"],
    ),
]


@pytest.mark.parametrize("case,what,messages", REFUSALS, ids=[f"{c}: {w}" for c, w, _ in REFUSALS])
def test_the_api_server_refuses_with_the_rules_words(case, what, messages):
    """The API server denies the broken pod with the failing validations' messages, the first
    one in its answer after the policy's and binding's names."""
    _, pods, rows = verdicts(case)
    whats = [w for w, _ in pods]
    assert what in whats, (case, whats)
    row = rows[whats.index(what)]
    assert [v["message"] for v in row["validations"] if not v["passed"]] == messages
    assert row["denied"] and row["status"] == (
        f"ValidatingAdmissionPolicy 'rdma-webhook-final-state-{case}' with binding "
        f"'rdma-webhook-final-state-{case}' denied request: {messages[0]}"
    )


def test_machine_types_with_the_same_rules_are_checked_as_one(tmp_path):
    """Two machine types that differ only in their nodes' labels and NICs' names (no rule reads
    them): one entry of `by_type` for both, and a pod on either type, lacking IPC_LOCK, is refused
    by it; with IPC_LOCK (and the rest /mutate would give it) it is not refused for IPC_LOCK."""
    four = "      gkeNetworks: [" + ", ".join(f"{{name: rdma-{i}, interface: eth{i + 2}}}" for i in range(4)) + "]\n"
    text = policy_text()
    assert four in text
    policies, errors = load_texts([("two-types.yaml", text.replace(four, ""))])
    assert policies is not None, errors
    policy = policies.by_name["two-types"]
    assert [names for names, _, _ in final_state_rules.by_type(policy)] == [("eight", "four")]
    pods = []
    for accelerator in ("nvidia-b200", "nvidia-gb200"):
        for caps in ({}, {"add": ["IPC_LOCK"]}):
            c = k.container("trainer", gpus=4, securityContext={"capabilities": caps})
            pod = k.pod([c], namespace="ml", generate_name="w-", nodeSelector={ACCEL: accelerator})
            pod["metadata"].setdefault("labels", {})[keys.APPLIED_POLICY_LABEL] = "two-types"
            pods.append(pod)
    objects = [d for d in ap.objects(policies) if d["metadata"]["labels"][ap.POLICY_LABEL] == "two-types"]
    rows = evaluate(objects, pods, tmp_path)
    assert all(r["validations"][0]["passed"] for r in rows)  # machine-type: each pod names one type
    lacking = [
        any(not v["passed"] and v["message"].endswith("[ipc-lock-missing]") for v in r["validations"]) for r in rows
    ]
    assert lacking == [True, False, True, False]


def test_a_privileged_container_needs_no_ipc_lock(tmp_path):
    """erdma: a privileged target without IPC_LOCK in its capabilities holds every capability:
    not refused for IPC_LOCK, as the webhook does not; unprivileged, it is."""
    ns, good = mutated("erdma")
    pods = []
    for privileged in (True, False):
        pod = copy.deepcopy(good)
        _caps(pod).pop("add")
        pod["spec"]["containers"][0]["securityContext"]["privileged"] = privileged
        pods.append(pod)
    rows = evaluate(_objects("erdma"), pods, tmp_path)
    assert ["ipc-lock-missing" in failed_rules(r) for r in rows] == [False, True]
    assert ["ipc-lock-missing" in webhook_findings(p, ns) for p in pods] == [False, True]


def test_an_equivalent_device_resource_stands_for_the_device(tmp_path):
    """ib-shared: a target whose rdma/rdma_shared_device_a is replaced by one of the policy's
    equivalent resources (in limits, and in requests as the API server defaults them) still has
    its device; without any, it lacks it (device-missing), as the webhook says."""
    ns, good = mutated("ib-shared")
    pods = []
    for resource in ("rdma/ib", "rdma/rdma_shared_device_b", None):
        pod = copy.deepcopy(good)
        res = pod["spec"]["containers"][0]["resources"]
        for section in ("limits", "requests"):
            res.get(section, {}).pop("rdma/rdma_shared_device_a", None)
            if resource is not None:
                res.setdefault(section, {})[resource] = "1"
        pods.append(pod)
    rows = evaluate(_objects("ib-shared"), pods, tmp_path)
    assert ["device-missing" in failed_rules(r) for r in rows] == [False, False, True]
    assert ["device-missing" in webhook_findings(p, ns) for p in pods] == [False, False, True]


def test_an_enforced_variable_after_free_ones_is_held(tmp_path):
    """A policy that pins a variable written after variables it does not pin: the pin still
    holds (a pod without it is refused with that variable's words)."""
    text = (POLICIES / "erdma.yaml").read_text()
    assert "  NCCL_NET_PLUGIN: none\n" in text
    policies, errors = load_texts(
        [
            (
                "erdma.yaml",
                text.replace(
                    "  NCCL_NET_PLUGIN: none\n", "  NCCL_NET_PLUGIN: none\n  NCCL_IB_TC: {value: '41', enforce: true}\n"
                ),
            )
        ]
    )
    assert policies is not None, errors
    _, good = mutated("erdma")
    objects = [d for d in ap.objects(policies) if d["metadata"]["labels"][ap.POLICY_LABEL] == "erdma"]
    (row,) = evaluate(objects, [good], tmp_path)
    assert [v["message"] for v in row["validations"] if not v["passed"]] == [
        f"{TRAINER}NCCL_IB_TC is missing or changed, but policy erdma pins it to '41' {PINS}"
    ]


def test_a_plugin_path_may_end_in_any_of_the_fabrics_plugins(tmp_path):
    """efa's NCCL_NET_PLUGIN may name either of its plugins (ofi, aws-ofi), by name or by a path
    ending in one: those are admitted, a path ending in another name is refused, as the webhook
    decides."""
    ns, good = mutated("efa")
    values = ["aws-ofi", "/opt/amazon/ofi-nccl/aws-ofi", "/opt/amazon/ofi-nccl/ofi", "/opt/amazon/ofi-nccl/aws-ofi2"]
    pods = []
    for value in values:
        pod = copy.deepcopy(good)
        _last("NCCL_NET_PLUGIN", value)(pod)
        pods.append(pod)
    rows = evaluate(_objects("efa"), pods, tmp_path)
    refused = [v for v, row in zip(values, rows) if "env-fallback" in failed_rules(row)]
    webhook = [v for v, pod in zip(values, pods) if "env-fallback" in webhook_findings(pod, ns)]
    assert refused == webhook == values[3:]


def test_a_policy_of_two_devices_wants_both(tmp_path):
    """A policy whose targets get two device resources: a target lacking one of them (the other
    kept) is refused, in words naming both."""
    text = (POLICIES / "erdma.yaml").read_text()
    one = "  - resource: aliyun/erdma\n    count: 1\n"
    assert one in text
    policies, errors = load_texts(
        [("erdma.yaml", text.replace(one, one + "  - resource: example.com/rdma-b\n    count: 1\n"))]
    )
    assert policies is not None, errors
    _, good = mutated("erdma")
    both, one_only = copy.deepcopy(good), copy.deepcopy(good)
    both["spec"]["containers"][0]["resources"]["limits"]["example.com/rdma-b"] = "1"
    objects = [d for d in ap.objects(policies) if d["metadata"]["labels"][ap.POLICY_LABEL] == "erdma"]
    rows = evaluate(objects, [both, one_only], tmp_path)
    assert [[v["message"] for v in r["validations"] if not v["passed"]] for r in rows] == [
        [],
        [f"{TRAINER}lacks aliyun/erdma and example.com/rdma-b in resources.limits, {NO_DEVICE}"],
    ]
