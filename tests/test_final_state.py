"""The final-state guard (`decision.check_final`, rules device-missing, ipc-lock-missing and
enforced-env) and the policy choice, asserted field by field: written for mutants that `make
mutation` found alive (tests/MUTATION.md), where the older tests only looked at `allowed` or at a
fragment of the message."""

from __future__ import annotations

import copy

import pytest

import kube_objects as k
from test_fabrics import DRA_POLICY  # the suite's one DRA policy
from webhook import decision, k8s
from webhook.cluster import FileClusterState
from webhook.decision import Namespace
from webhook.policy import load_texts

NS = Namespace("ml-training", {"rdma-webhook.io/injection": "enabled", "team": "llm"})

POLICY = """
apiVersion: rdma-webhook.io/v1alpha1
kind: RdmaPolicy
name: pinned
description: NCCL_NET and NCCL_IB_GID_INDEX enforced
priority: 0
namespaceSelector: {}
gpuResources: [nvidia.com/gpu]
fabric: {kind: infiniband, ncclNet: [IB], hcaDevices: ["mlx5_[0-7]"]}
device: {resource: rdma/hca, count: 1, perGpu: false}
shm: {sizeLimit: 64Gi}
nccl:
  NCCL_DEBUG: WARN
  NCCL_NET: {value: IB, enforce: true}
  NCCL_IB_GID_INDEX: {value: "3", enforce: true}
  NCCL_SOCKET_IFNAME: {value: eth0, enforce: true}
"""


@pytest.fixture(scope="module")
def pinned():
    ps, errors = load_texts([("pinned.yaml", POLICY)])
    assert ps is not None, errors
    return ps


def good_pod(pinned) -> dict:
    """A pod as it arrives at /validate after our mutation."""
    d = decision.decide(k.pod([k.container("trainer"), k.container("sidecar", gpus=None)]), NS, pinned)
    assert d.outcome == decision.MUTATED, (d.denials, d.warnings)
    return d.pod


def test_a_pod_that_keeps_rdma_is_unchanged_with_its_policy_and_reason(pinned):
    pod = good_pod(pinned)
    d = decision.check_final(pod, NS, pinned)  # the default operation is CREATE
    assert d.outcome == decision.UNCHANGED and d.pod is pod and d.policy == "pinned"
    assert d.reason == "final state keeps RDMA" and d.denials == [] and d.warnings == []
    assert decision.check_final(pod, NS, pinned, operation="UPDATE").outcome == decision.SKIPPED


def test_check_final_passes_the_attachments_on(policies):
    """The sriov-roce policy takes its device resource from the NetworkAttachmentDefinition (here
    another one than the policy's own fallback): the guard must read the attachments it is given."""
    ns = Namespace("ai-training", {"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "sriov-roce"})
    nad = {"metadata": {"name": "rdma-network", "namespace": "ai-training",
                        "annotations": {"k8s.v1.cni.cncf.io/resourceName": "example.com/rdma_vf"}}}
    cluster = FileClusterState([ns], [nad])
    mutated = decision.decide(k.pod([k.container("trainer")], namespace="ai-training"), ns, policies, cluster.attachments())
    assert mutated.outcome == decision.MUTATED and mutated.policy == "sriov-roce", mutated.denials
    assert "example.com/rdma_vf" in mutated.pod["spec"]["containers"][0]["resources"]["limits"]
    assert decision.check_final(mutated.pod, ns, policies, cluster.attachments()).outcome == decision.UNCHANGED


def test_each_missing_piece_is_named_with_its_container(pinned):
    pod = good_pod(pinned)
    trainer = pod["spec"]["containers"][0]
    del trainer["resources"]["limits"]["rdma/hca"]
    trainer["securityContext"]["capabilities"]["add"] = []
    trainer["env"] = [e for e in trainer["env"] if e["name"] != "NCCL_NET"]
    d = decision.check_final(pod, NS, pinned)
    assert d.outcome == decision.DENIED
    found = {(f.rule, f.container, f.message) for f in d.denials}
    assert found == {
        ("device-missing", "trainer", "resources.limits has no rdma/hca, so the container gets no RDMA device and NCCL "
                                      "uses TCP; a webhook that ran after rdma-webhook may have removed it"),
        ("ipc-lock-missing", "trainer", "securityContext.capabilities.add lacks IPC_LOCK, which RDMA needs to pin memory"),
        ("enforced-env", "trainer", "NCCL_NET is unset, but policy pinned pins it to 'IB' so that a missing RDMA device "
                                    "fails at start instead of running on TCP"),
    }


def test_a_privileged_container_needs_no_ipc_lock(pinned):
    pod = good_pod(pinned)
    trainer = pod["spec"]["containers"][0]
    trainer["securityContext"] = {"privileged": True}
    assert decision.check_final(pod, NS, pinned).outcome == decision.UNCHANGED
    trainer["securityContext"] = {"privileged": False}
    assert [f.rule for f in decision.check_final(pod, NS, pinned).denials] == ["ipc-lock-missing"]


def _with_env(pod: dict, name: str, value: str) -> dict:
    pod = copy.deepcopy(pod)
    for e in pod["spec"]["containers"][0]["env"]:
        if e["name"] == name:
            e["value"] = value
    return pod


def test_enforced_values_compare_as_nccl_reads_them(pinned):
    pod = good_pod(pinned)
    # NCCL_NET names a plugin case-insensitively: "ib" is the pinned IB
    assert decision.check_final(_with_env(pod, "NCCL_NET", "ib"), NS, pinned).outcome == decision.UNCHANGED
    # any other enforced variable must be the very value
    d = decision.check_final(_with_env(pod, "NCCL_IB_GID_INDEX", "03"), NS, pinned)
    assert [(f.rule, f.message.split(",")[0]) for f in d.denials] == [("enforced-env", "NCCL_IB_GID_INDEX is '03'")]
    # only NCCL_NET compares without case: an interface name is the very name
    d = decision.check_final(_with_env(pod, "NCCL_SOCKET_IFNAME", "ETH0"), NS, pinned)
    assert [f.message.split(",")[0] for f in d.denials] == ["NCCL_SOCKET_IFNAME is 'ETH0'"]
    # every enforced variable is checked, not only the first after an unenforced one
    d = decision.check_final(_with_env(pod, "NCCL_NET", "Socket"), NS, pinned)
    assert [f.message.split(",")[0] for f in d.denials if f.rule == "enforced-env"] == ["NCCL_NET is 'Socket'"]


def test_a_selector_with_more_requirements_wins_a_priority_tie():
    def policy(name: str, selector: str) -> tuple[str, str]:
        text = POLICY.replace("name: pinned", f"name: {name}").replace("namespaceSelector: {}", f"namespaceSelector: {selector}")
        return f"{name}.yaml", text

    # "a-broad" would win on the name; "b-narrow" has two requirements to its one
    ps, errors = load_texts([policy("a-broad", "{matchLabels: {team: llm}}"),
                             policy("b-narrow", "{matchLabels: {team: llm}, matchExpressions: [{key: team, operator: Exists}]}")])
    assert ps is not None, errors
    assert decision.decide(k.pod([k.container("t")]), NS, ps).policy == "b-narrow"
    assert k8s.selector_size({"matchLabels": {"a": "1"}, "matchExpressions": [{}, {}]}) == 3
    assert k8s.selector_size(None) == 0


@pytest.mark.parametrize("operator,labels,matches", [
    ("Exists", {"team": "llm"}, True), ("Exists", {}, False),
    ("DoesNotExist", {"team": "llm"}, False), ("DoesNotExist", {}, True),
])
def test_exists_operators(operator, labels, matches):
    assert k8s.compile_selector({"matchExpressions": [{"key": "team", "operator": operator}]})(labels) is matches


def test_env_lookup_of_a_missing_name_names_it():
    env = k8s.Env([{"name": "NCCL_NET", "value": "IB"}])
    with pytest.raises(KeyError, match="NCCL_DEBUG"):
        env["NCCL_DEBUG"]


def test_the_guard_keeps_the_warnings_of_a_pod_it_passes(pinned):
    pod = _with_env(good_pod(pinned), "NCCL_DEBUG", "INFO")
    d = decision.check_final(pod, NS, pinned)
    assert d.outcome == decision.UNCHANGED and d.warnings == ["trainer: NCCL_DEBUG=INFO logs heavily; use WARN outside debugging"]


def test_enforced_values_replace_what_the_user_set_and_say_so(pinned):
    c = k.container("trainer", env=[{"name": "NCCL_NET", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
                                    {"name": "NCCL_IB_GID_INDEX", "value": "1"}, {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}])
    d = decision.decide(k.pod([c]), NS, pinned)
    assert d.outcome == decision.MUTATED, d.denials
    env = d.pod["spec"]["containers"][0]["env"]
    assert env[:3] == [{"name": "NCCL_NET", "value": "IB"}, {"name": "NCCL_IB_GID_INDEX", "value": "3"},
                       {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}]
    assert d.warnings[1:] == ["trainer: NCCL_NET is enforced by policy pinned: a valueFrom source replaced by 'IB'",
                              "trainer: NCCL_IB_GID_INDEX is enforced by policy pinned: '1' replaced by '3'"]
    assert d.notes[0] == "trainer: rdma/hca: 1, 3 NCCL variables, IPC_LOCK"


def test_a_device_the_user_already_asked_for_is_not_a_note(pinned):
    c = k.container("trainer", limits={"rdma/hca": "2"}, requests={"rdma/hca": "2"})
    d = decision.decide(k.pod([c]), NS, pinned)
    assert d.outcome == decision.MUTATED and not d.notes[0].startswith("trainer: rdma/hca"), d.notes
    assert d.pod["spec"]["containers"][0]["resources"]["limits"]["rdma/hca"] == "2"


@pytest.mark.parametrize("mount_path", [5, None, "/dev/shmX", "/dev/shm-old"])
def test_mounts_that_are_not_dev_shm_are_left_alone(pinned, mount_path):
    c = k.container("trainer")
    c["volumeMounts"] = [{"name": "other", "mountPath": mount_path}]
    d = decision.decide(k.pod([c], volumes=[{"name": "other", "emptyDir": {}}], automount=False), NS, pinned)
    assert d.outcome == decision.MUTATED, d.denials
    mounts = d.pod["spec"]["containers"][0]["volumeMounts"]
    assert mounts[0]["mountPath"] == mount_path and [m["mountPath"] for m in mounts[1:]] == ["/dev/shm"], mounts



def test_final_state_names_each_container_that_lost_the_dra_claim():
    """device-missing for a claim: a container whose resources.claims no longer names the pod's
    claim is named (the others, and a container that still names it, are not)."""
    ps, errors = load_texts([("dranet.yaml", DRA_POLICY)])
    assert ps is not None, errors
    d = decision.decide(k.pod([k.container("a"), k.container("b"), k.container("c")]), NS, ps)
    assert d.outcome == decision.MUTATED, (d.denials, d.warnings)
    pod = d.pod
    assert [c["resources"]["claims"] for c in pod["spec"]["containers"]] == [[{"name": "rdma-nic"}]] * 3
    assert decision.check_final(pod, NS, ps).outcome == decision.UNCHANGED
    a, b, c = pod["spec"]["containers"]
    del a["resources"]["claims"]
    b["resources"]["claims"] = ["rdma-nic", {"name": "other"}]  # not a claim reference of the pod's claim
    f = decision.check_final(pod, NS, ps)
    assert f.outcome == decision.DENIED and f.policy == "dranet"
    msg = ("resources.claims does not reference the pod's 'rdma-nic' claim, so the container gets no RDMA NIC "
           "and NCCL uses TCP")
    assert [(x.rule, x.container, x.message) for x in f.denials] == [("device-missing", "a", msg), ("device-missing", "b", msg)]


@pytest.mark.parametrize("pod_claims,container_claims,note", [
    ([], [], "a: DRA claim rdma-nic, 1 NCCL variables, IPC_LOCK"),
    ([{"name": "rdma-nic", "resourceClaimTemplateName": "rdma-nic-template"}], [], "a: DRA claim rdma-nic"),
    ([], [{"name": "rdma-nic"}], "a: DRA claim rdma-nic"),
    ([{"name": "rdma-nic", "resourceClaimTemplateName": "rdma-nic-template"}], [{"name": "rdma-nic"}], None),
])
def test_the_dra_claim_is_added_where_missing_and_noted_only_then(pod_claims, container_claims, note):
    """mutation.add_claim: the pod's claim and the container's reference are each added when
    missing, beside another claim of the pod (a GPU claim), and the note says so only when
    something was added."""
    ps, errors = load_texts([("dranet.yaml", DRA_POLICY)])
    assert ps is not None, errors
    gpu = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
    env = [] if note and "NCCL" in note else [{"name": "NCCL_NET", "value": "IB"}]
    sc = {} if note and "IPC_LOCK" in note else {"capabilities": {"add": ["IPC_LOCK"]}}
    c = k.container("a", resources={"limits": {"nvidia.com/gpu": "1"}, "claims": [{"name": "gpu"}, *container_claims]},
                    env=env, securityContext=sc)
    d = decision.decide(k.pod([c], resourceClaims=[gpu, *pod_claims]), NS, ps)
    assert d.outcome == decision.MUTATED, (d.denials, d.warnings)
    assert d.pod["spec"]["resourceClaims"] == [gpu, {"name": "rdma-nic", "resourceClaimTemplateName": "rdma-nic-template"}]
    assert d.pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}, {"name": "rdma-nic"}]
    assert [n for n in d.notes if n.startswith("a:")] == ([note] if note else [])
