"""The final-state guard (`decision.check_final`, rules device-missing, ipc-lock-missing and
enforced-env) and the policy choice, asserted field by field: written for mutants that `make
mutation` found alive (mutation/MUTATION.md), where the older tests only looked at `allowed` or at a
fragment of the message."""

from __future__ import annotations

import copy

import pytest

import kube_objects as k
from conftest import ROOT
from fabrics.test_transports import DRA_POLICY, IB, ML, dra_policies, respond  # DRA_POLICY: the suite's one DRA policy
from webhook.core import decision, fallback, keys
from webhook.grammar import k8s
from webhook.cluster.state import FileClusterState
from webhook.core.decision import Namespace
from webhook.core.subject import Subject
from webhook.core.targets import Target
from webhook.policy.load import load_texts

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
    nad = {
        "metadata": {
            "name": "rdma-network",
            "namespace": "ai-training",
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "example.com/rdma_vf"},
        }
    }
    cluster = FileClusterState([ns], [nad])
    mutated = decision.decide(
        k.pod([k.container("trainer")], namespace="ai-training"), ns, policies, cluster.attachments()
    )
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
        (
            "device-missing",
            "trainer",
            "resources.limits has no rdma/hca, so the container gets no RDMA device and NCCL "
            "uses TCP; a webhook that ran after rdma-webhook may have removed it",
        ),
        (
            "ipc-lock-missing",
            "trainer",
            "securityContext.capabilities.add lacks IPC_LOCK, which RDMA needs to pin memory",
        ),
        (
            "enforced-env",
            "trainer",
            "NCCL_NET is unset, but policy pinned pins it to 'IB' so that a missing RDMA device "
            "fails at start instead of running on TCP",
        ),
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
        text = POLICY.replace("name: pinned", f"name: {name}").replace(
            "namespaceSelector: {}", f"namespaceSelector: {selector}"
        )
        return f"{name}.yaml", text

    # "a-broad" would win on the name; "b-narrow" has two requirements to its one
    ps, errors = load_texts(
        [
            policy("a-broad", "{matchLabels: {team: llm}}"),
            policy("b-narrow", "{matchLabels: {team: llm}, matchExpressions: [{key: team, operator: Exists}]}"),
        ]
    )
    assert ps is not None, errors
    assert decision.decide(k.pod([k.container("t")]), NS, ps).policy == "b-narrow"
    assert k8s.selector_size({"matchLabels": {"a": "1"}, "matchExpressions": [{}, {}]}) == 3
    assert k8s.selector_size(None) == 0


@pytest.mark.parametrize(
    "operator,labels,matches",
    [
        ("Exists", {"team": "llm"}, True),
        ("Exists", {}, False),
        ("DoesNotExist", {"team": "llm"}, False),
        ("DoesNotExist", {}, True),
    ],
)
def test_exists_operators(operator, labels, matches):
    assert k8s.compile_selector({"matchExpressions": [{"key": "team", "operator": operator}]})(labels) is matches


def test_env_lookup_of_a_missing_name_names_it():
    env = k8s.Env([{"name": "NCCL_NET", "value": "IB"}])
    with pytest.raises(KeyError, match="NCCL_DEBUG"):
        env["NCCL_DEBUG"]


def test_the_guard_keeps_the_warnings_of_a_pod_it_passes(pinned):
    pod = _with_env(good_pod(pinned), "NCCL_DEBUG", "INFO")
    d = decision.check_final(pod, NS, pinned)
    assert d.outcome == decision.UNCHANGED and d.warnings == [
        "trainer: NCCL_DEBUG=INFO logs heavily; use WARN outside debugging"
    ]


def test_enforced_values_replace_what_the_user_set_and_say_so(pinned):
    c = k.container(
        "trainer",
        env=[
            {"name": "NCCL_NET", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
            {"name": "NCCL_IB_GID_INDEX", "value": "1"},
            {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
        ],
    )
    d = decision.decide(k.pod([c]), NS, pinned)
    assert d.outcome == decision.MUTATED, d.denials
    env = d.pod["spec"]["containers"][0]["env"]
    assert env[:3] == [
        {"name": "NCCL_NET", "value": "IB"},
        {"name": "NCCL_IB_GID_INDEX", "value": "3"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
    ]
    assert d.warnings[1:] == [
        "trainer: NCCL_NET is enforced by policy pinned: a valueFrom source replaced by 'IB'",
        "trainer: NCCL_IB_GID_INDEX is enforced by policy pinned: '1' replaced by '3'",
    ]
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
    msg = (
        "resources.claims does not reference the pod's 'rdma-nic' claim, so the container gets no RDMA NIC "
        "and NCCL uses TCP"
    )
    assert [(x.rule, x.container, x.message) for x in f.denials] == [
        ("device-missing", "a", msg),
        ("device-missing", "b", msg),
    ]


@pytest.mark.parametrize(
    "pod_claims,container_claims,note",
    [
        ([], [], "a: DRA claim rdma-nic, 1 NCCL variables, IPC_LOCK"),
        ([{"name": "rdma-nic", "resourceClaimTemplateName": "rdma-nic-template"}], [], "a: DRA claim rdma-nic"),
        ([], [{"name": "rdma-nic"}], "a: DRA claim rdma-nic"),
        ([{"name": "rdma-nic", "resourceClaimTemplateName": "rdma-nic-template"}], [{"name": "rdma-nic"}], None),
    ],
)
def test_the_dra_claim_is_added_where_missing_and_noted_only_then(pod_claims, container_claims, note):
    """mutation.add_claim: the pod's claim and the container's reference are each added when
    missing, beside another claim of the pod (a GPU claim), and the note says so only when
    something was added."""
    ps, errors = load_texts([("dranet.yaml", DRA_POLICY)])
    assert ps is not None, errors
    gpu = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
    env = [] if note and "NCCL" in note else [{"name": "NCCL_NET", "value": "IB"}]
    sc = {} if note and "IPC_LOCK" in note else {"capabilities": {"add": ["IPC_LOCK"]}}
    c = k.container(
        "a",
        resources={"limits": {"nvidia.com/gpu": "1"}, "claims": [{"name": "gpu"}, *container_claims]},
        env=env,
        securityContext=sc,
    )
    d = decision.decide(k.pod([c], resourceClaims=[gpu, *pod_claims]), NS, ps)
    assert d.outcome == decision.MUTATED, (d.denials, d.warnings)
    assert d.pod["spec"]["resourceClaims"] == [
        gpu,
        {"name": "rdma-nic", "resourceClaimTemplateName": "rdma-nic-template"},
    ]
    assert d.pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}, {"name": "rdma-nic"}]
    assert [n for n in d.notes if n.startswith("a:")] == ([note] if note else [])


# -- what the mutation adds, asserted on the mutated pod ------------------------------------------


def _shm_volume(size: str, name: str = "rdma-webhook-dshm") -> dict:
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def test_shm_size_counts_the_gpus_of_every_target(policies):
    """erdma asks 8Gi of /dev/shm per GPU: one volume for the pod, sized for 2 + 4 GPUs."""
    pod = k.pod([k.container("a", gpus=2), k.container("b", gpus=4), k.container("log", gpus=None)], automount=False)
    d = decision.decide(pod, ML, policies)
    assert d.outcome == decision.MUTATED and d.policy == "erdma", d.denials
    assert d.pod["spec"]["volumes"] == [_shm_volume("48Gi")]
    assert [c.get("volumeMounts") for c in d.pod["spec"]["containers"]] == [
        [{"name": "rdma-webhook-dshm", "mountPath": "/dev/shm"}]
    ] * 2 + [None]


NOT_MEMORY = "/dev/shm is not a memory-backed emptyDir; NCCL and DataLoader need shared memory in RAM"


def test_each_target_without_a_dev_shm_mount_gets_one_whatever_the_targets_before_it_mount():
    """The node's own /dev/shm (a trailing slash too) is memory; a look-alike host path and a disk
    emptyDir are warned about; a target that mounts nothing there still gets the pod's volume."""
    ps, errors = load_texts([("pinned.yaml", POLICY)])
    assert ps is not None, errors

    def shm_at(name: str) -> list:
        return [{"name": name, "mountPath": "/dev/shm"}]

    containers = [
        k.container("host", volumeMounts=shm_at("node-shm")),
        k.container("lookalike", volumeMounts=shm_at("node-shmx")),
        k.container("disk", volumeMounts=shm_at("disk-shm")),
        k.container("plain"),
    ]
    volumes = [
        {"name": "disk-shm", "emptyDir": {}},
        {"name": "node-shm", "hostPath": {"path": "/dev/shm/", "type": "Directory"}},
        {"name": "node-shmx", "hostPath": {"path": "/dev/shmX"}},
        {"name": "data", "emptyDir": {}},
    ]
    d = decision.decide(k.pod(containers, volumes=volumes, automount=False), NS, ps)
    assert d.outcome == decision.MUTATED, d.denials
    assert d.warnings == [f"lookalike: {NOT_MEMORY}", f"disk: {NOT_MEMORY}"]
    assert d.pod["spec"]["volumes"] == volumes + [_shm_volume("64Gi")]
    assert [c["volumeMounts"] for c in d.pod["spec"]["containers"]] == [
        shm_at("node-shm"),
        shm_at("node-shmx"),
        shm_at("disk-shm"),
        shm_at("rdma-webhook-dshm"),
    ]


@pytest.mark.parametrize(
    "size,warning",
    [
        ("64Gi", None),
        ("128Gi", None),
        ("68719476736", None),
        ("lots", None),
        ("32Gi", "trainer: /dev/shm sizeLimit 32Gi is smaller than the 64Gi policy erdma asks for"),
    ],
)
def test_a_memory_dev_shm_is_kept_and_warned_about_only_when_smaller_than_the_policy_asks(policies, size, warning):
    c = k.container("trainer", volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}])
    pod = k.pod([c], volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}], automount=False)
    d = decision.decide(pod, ML, policies)
    assert d.outcome == decision.MUTATED and d.policy == "erdma", d.denials
    assert d.warnings == ([warning] if warning else [])
    assert d.pod["spec"]["volumes"] == pod["spec"]["volumes"]
    assert d.pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]


@pytest.mark.parametrize(
    "existing,name,added",
    [
        ([{"name": "rdma-webhook-dshm", "emptyDir": {}}], "rdma-webhook-dshm-1", True),
        (
            [
                {"name": "rdma-webhook-dshm", "emptyDir": {}},
                {"name": "rdma-webhook-dshm-1", "configMap": {"name": "c"}},
            ],
            "rdma-webhook-dshm-2",
            True,
        ),
        (
            [{"name": "rdma-webhook-dshm", "emptyDir": {}}, _shm_volume("64Gi", "rdma-webhook-dshm-1")],
            "rdma-webhook-dshm-1",
            False,
        ),
        ([_shm_volume("64Gi")], "rdma-webhook-dshm", False),
    ],
)
def test_the_shm_volume_takes_the_first_name_free_or_holding_a_memory_volume(existing, name, added):
    ps, errors = load_texts([("pinned.yaml", POLICY)])
    assert ps is not None, errors
    d = decision.decide(k.pod([k.container("trainer")], volumes=existing, automount=False), NS, ps)
    assert d.outcome == decision.MUTATED, d.denials
    assert d.pod["spec"]["volumes"] == existing + ([_shm_volume("64Gi", name)] if added else [])
    assert d.pod["spec"]["containers"][0]["volumeMounts"] == [{"name": name, "mountPath": "/dev/shm"}]


def test_a_device_requested_without_a_limit_gets_its_limit_and_a_note(pinned):
    """The API server rejects an extended resource without a limit only after the webhooks ran."""
    c = k.container("trainer", requests={"rdma/hca": "1"})
    d = decision.decide(k.pod([c]), NS, pinned)
    assert d.outcome == decision.MUTATED, d.denials
    res = d.pod["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"nvidia.com/gpu": "8", "rdma/hca": "1"} and res["requests"] == {
        "nvidia.com/gpu": "8",
        "rdma/hca": "1",
    }
    assert d.notes[0] == "trainer: rdma/hca: 1, 4 NCCL variables, IPC_LOCK"


def test_a_device_request_without_a_limit_keeps_its_own_count(pinned):
    """Request and limit of an extended resource must be equal: a user's request of 2 gets a limit
    of 2, not the policy's 1 (which the API server would refuse after the webhooks ran)."""
    c = k.container("trainer", requests={"rdma/hca": "2"})
    d = decision.decide(k.pod([c]), NS, pinned)
    assert d.outcome == decision.MUTATED, d.denials
    res = d.pod["spec"]["containers"][0]["resources"]
    assert res["limits"]["rdma/hca"] == "2" and res["requests"]["rdma/hca"] == "2"
    assert d.notes[0].startswith("trainer: rdma/hca: 2, ")


def test_a_variable_the_user_set_keeps_its_value_and_the_rest_of_the_block_is_added(pinned):
    c = k.container(
        "trainer",
        env=[{"name": "NCCL_DEBUG", "value": "INFO"}],
        securityContext={"capabilities": {"add": ["IPC_LOCK"]}},
    )
    d = decision.decide(k.pod([c]), NS, pinned)
    assert d.outcome == decision.MUTATED, d.denials
    assert d.pod["spec"]["containers"][0]["env"] == [
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "NCCL_NET", "value": "IB"},
        {"name": "NCCL_IB_GID_INDEX", "value": "3"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
    ]
    assert d.notes[0] == "trainer: rdma/hca: 1, 3 NCCL variables"  # IPC_LOCK was there already
    assert d.pod["spec"]["containers"][0]["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}


def test_an_enforced_value_differing_in_case_or_beside_a_value_from_is_replaced(pinned):
    """Only NCCL_NET compares without case; an entry with both a value and a valueFrom (which the
    API server would reject after the webhooks) is a valueFrom source, replaced by the value alone."""
    secret = {"secretKeyRef": {"name": "nccl", "key": "gid"}}
    c = k.container(
        "trainer",
        env=[
            {"name": "NCCL_NET", "value": "ib"},
            {"name": "NCCL_SOCKET_IFNAME", "value": "ETH0"},
            {"name": "NCCL_IB_GID_INDEX", "value": "3", "valueFrom": secret},
        ],
    )
    d = decision.decide(k.pod([c]), NS, pinned)
    assert d.outcome == decision.MUTATED, d.denials
    assert d.pod["spec"]["containers"][0]["env"] == [
        {"name": "NCCL_NET", "value": "ib"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
        {"name": "NCCL_IB_GID_INDEX", "value": "3"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
    ]
    assert [w for w in d.warnings if "enforced" in w] == [
        "trainer: NCCL_IB_GID_INDEX is enforced by policy pinned: a valueFrom source replaced by '3'",
        "trainer: NCCL_SOCKET_IFNAME is enforced by policy pinned: 'ETH0' replaced by 'eth0'",
    ]


@pytest.mark.parametrize(
    "drop,restored",
    [
        ([keys.STATUS], {keys.STATUS: keys.STATUS_INJECTED}),
        ([keys.APPLIED_POLICY], {keys.APPLIED_POLICY: "pinned"}),
        ([keys.STATUS, keys.APPLIED_POLICY], {keys.STATUS: keys.STATUS_INJECTED, keys.APPLIED_POLICY: "pinned"}),
    ],
)
def test_a_mutated_pod_that_lost_its_status_annotations_gets_them_back(pinned, drop, restored):
    pod = good_pod(pinned)
    annotations = pod["metadata"]["annotations"]
    for key in drop:
        del annotations[key]
    d = decision.decide(pod, NS, pinned)
    assert d.outcome == decision.MUTATED and d.notes == [], d.notes
    assert d.pod["metadata"]["annotations"] == {**annotations, **restored}


def test_a_mutated_pod_that_lost_its_policy_label_gets_it_back(pinned):
    pod = good_pod(pinned)
    assert pod["metadata"]["labels"][keys.APPLIED_POLICY_LABEL] == "pinned"
    del pod["metadata"]["labels"][keys.APPLIED_POLICY_LABEL]
    d = decision.decide(pod, NS, pinned)
    assert d.outcome == decision.MUTATED and d.notes == [], d.notes
    assert d.pod["metadata"]["labels"][keys.APPLIED_POLICY_LABEL] == "pinned"
    assert decision.decide(d.pod, NS, pinned).outcome == decision.UNCHANGED


def test_a_pod_applied_by_another_policy_name_is_relabelled(pinned):
    pod = good_pod(pinned)
    pod["metadata"]["annotations"][keys.APPLIED_POLICY] = "old-name"
    d = decision.decide(pod, NS, pinned)
    assert d.outcome == decision.MUTATED and d.notes == []
    assert d.pod["metadata"]["annotations"][keys.APPLIED_POLICY] == "pinned"
    assert d.pod["metadata"]["labels"][keys.APPLIED_POLICY_LABEL] == "pinned"
    assert decision.decide(d.pod, NS, pinned).outcome == decision.UNCHANGED


def test_a_claim_added_beside_the_pods_own_is_in_the_patch_and_not_in_the_pod_as_sent():
    gpu = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
    c = k.container("trainer", resources={"limits": {"nvidia.com/gpu": "1"}, "claims": [{"name": "gpu"}]})
    pod = k.pod([c], annotations={keys.POD_POLICY: "dranet"}, resourceClaims=[gpu])
    sent = copy.deepcopy(pod)
    resp, patched, d = respond(pod, ML, dra_policies())
    assert resp["allowed"] and d.policy == "dranet" and pod == sent
    assert patched["spec"]["resourceClaims"] == [
        gpu,
        {"name": "rdma-nic", "resourceClaimTemplateName": "rdma-nic-template"},
    ]
    assert patched["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}, {"name": "rdma-nic"}]


# -- the rules around a container that has the fabric already ------------------------------------


def test_device_missing_reads_every_target_after_one_that_has_the_fabric(policies):
    """ib-shared counts rdma/ib as its device: the first container keeps it and gets nothing, the
    second gets the policy's device; the guard still checks the second when it lost it."""
    pod = k.pod([k.container("keeps", limits={"rdma/ib": "1"}), k.container("gets")], namespace="ib-training")
    d = decision.decide(pod, IB, policies)
    assert d.outcome == decision.MUTATED and d.policy == "ib-shared", d.denials
    assert "rdma/rdma_shared_device_a" in d.pod["spec"]["containers"][1]["resources"]["limits"]
    assert decision.check_final(d.pod, IB, policies).outcome == decision.UNCHANGED
    del d.pod["spec"]["containers"][1]["resources"]["limits"]["rdma/rdma_shared_device_a"]
    f = decision.check_final(d.pod, IB, policies)
    assert [(x.rule, x.container, x.message) for x in f.denials] == [
        (
            "device-missing",
            "gets",
            (
                "resources.limits has no rdma/rdma_shared_device_a, so the container gets no RDMA device and NCCL uses TCP; "
                "a webhook that ran after rdma-webhook may have removed it"
            ),
        )
    ]


def test_a_zero_device_is_named_with_its_section_after_a_target_that_has_the_fabric(policies):
    zero = {"rdma/rdma_shared_device_a": "0"}
    pod = k.pod(
        [
            k.container("keeps", limits={"rdma/ib": "1"}),
            k.container("limited", limits=zero),
            k.container("requested", requests=zero),
        ],
        namespace="ib-training",
    )
    d = decision.decide(pod, IB, policies)

    def why(section: str) -> str:
        return (
            f"resources.{section} sets rdma/rdma_shared_device_a: '0', an explicit zero, so the container gets no "
            f"RDMA device and NCCL uses TCP; remove it and the policy adds the right count"
        )

    assert d.outcome == decision.DENIED
    assert [(x.rule, x.container, x.message) for x in d.denials] == [
        ("device-zero", "limited", why("limits")),
        ("device-zero", "requested", why("requests")),
    ]


def test_an_env_fallback_is_named_with_its_container_and_where_it_was_set(policies):
    pod = k.pod([k.container("trainer", env=[{"name": "NCCL_IB_DISABLE", "value": "1"}])])
    d = decision.decide(pod, ML, policies)
    assert [(x.rule, x.container, x.message) for x in d.denials] == [
        (
            "env-fallback",
            "trainer",
            (
                "NCCL_IB_DISABLE='1' turns NCCL's IB/RoCE transport off, so NCCL runs on TCP sockets (NET/Socket); remove it "
                "or set it to 0 in env"
            ),
        )
    ]


def test_the_rules_run_on_a_subject_built_with_only_its_targets(pinned):
    """fallback.findings on a Subject given no devices, problems or networks: the table rules, and
    the final-state rules only when asked for."""
    policy = pinned.by_name["pinned"]
    c = k.container("trainer", env=[{"name": "NCCL_NET", "value": "Socket"}])
    pod = k.pod([c])
    c = pod["spec"]["containers"][0]
    subject = Subject(pod, policy, NS.labels, [Target(0, "trainer", 8, k8s.Env(c["env"]), False)])
    assert subject.devices == [] and subject.problems == [] and subject.others == []
    table = [
        (
            "env-fallback",
            "trainer",
            "NCCL_NET='Socket' forces NCCL's TCP socket transport (NET/Socket); remove it "
            "and let the policy set NCCL_NET=IB in env",
        )
    ]
    assert [(x.rule, x.container, x.message) for x in fallback.findings(subject)] == table
    final = [(x.rule, x.container) for x in fallback.findings(subject, final=True)]
    assert final == [
        ("env-fallback", "trainer"),
        ("ipc-lock-missing", "trainer"),
        ("enforced-env", "trainer"),
        ("enforced-env", "trainer"),
        ("enforced-env", "trainer"),
    ]


def test_an_enforced_interface_is_compared_with_the_name_multus_gives_the_network():
    """NCCL_SOCKET_IFNAME enforced as "{interface}": the pod lists a net1 of its own, so the
    policy's network becomes net2, which the guard expects (not the template, not net1)."""
    text = (
        (ROOT / "policies" / "sriov-roce.yaml")
        .read_text()
        .replace('NCCL_SOCKET_IFNAME: "{interface}"', 'NCCL_SOCKET_IFNAME: {value: "{interface}", enforce: true}')
    )
    ps, errors = load_texts([("sriov-roce.yaml", text)])
    assert ps is not None, errors
    ns = Namespace("ai-training", {"rdma-webhook.io/injection": "enabled"})
    nad = {
        "metadata": {
            "name": "rdma-network",
            "namespace": "ai-training",
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "openshift.io/mellanoxrdma"},
        }
    }
    cluster = FileClusterState([ns], [nad])
    pod = k.pod([k.container("trainer")], namespace="ai-training", annotations={keys.MULTUS_NETWORKS: "storage@net1"})
    d = decision.decide(pod, ns, ps, cluster.attachments())
    assert d.outcome == decision.MUTATED, d.denials
    assert {"name": "NCCL_SOCKET_IFNAME", "value": "net2"} in d.pod["spec"]["containers"][0]["env"]
    assert decision.check_final(d.pod, ns, ps, cluster.attachments()).outcome == decision.UNCHANGED
    for e in d.pod["spec"]["containers"][0]["env"]:
        if e["name"] == "NCCL_SOCKET_IFNAME":
            e["value"] = "net1"
    f = decision.check_final(d.pod, ns, ps, cluster.attachments())
    assert [(x.rule, x.message) for x in f.denials] == [
        (
            "enforced-env",
            (
                "NCCL_SOCKET_IFNAME is 'net1', but policy sriov-roce pins it to 'net2' so that a missing RDMA device fails at "
                "start instead of running on TCP"
            ),
        )
    ]
