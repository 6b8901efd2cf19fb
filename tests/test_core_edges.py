"""Edges of the core's small functions, asserted exactly: boundaries of NCCL's strtoll and of the
extended-resource-name rules, how a denial names an unnamed pod, the fields of an early denial,
and command words that are not all strings. Written for mutants `make mutation` found alive
(tests/MUTATION.md)."""

from __future__ import annotations

import pytest

import kube_objects as k
from webhook import decision, fallback, k8s, nccl
from webhook.decision import Namespace
from conftest import ROOT

NS = Namespace("ml-training", {"rdma-webhook.io/injection": "enabled"})
INT64_MAX = 2**63 - 1


@pytest.mark.parametrize("text,value", [
    ("0x10", 16), ("0X10", 16), ("010", 8), ("07", 7), ("0", 0), ("7", 7), ("-1", -1), ("  +3x", 3), ("x", 0),
    (str(INT64_MAX), INT64_MAX), (str(INT64_MAX + 1), None),
    (str(-INT64_MAX - 1), -INT64_MAX - 1), (str(-INT64_MAX - 2), None),
])
def test_strtoll_as_c_reads_it(text, value):
    assert nccl.strtoll(text) == value


def test_an_empty_or_unset_parameter_keeps_the_default():
    assert nccl.int_param(None, 5) == 5 and nccl.int_param("", 5) == 5 and nccl.int_param("0", 5) == 0


@pytest.mark.parametrize("name,problem", [
    ("aliyun/erdma", None), ("rdma/hca_shared_devices_a", None), ("requests.kubernetes.io/x", None),
    ("erdma", "must be <domain>/<name>, e.g. aliyun/erdma"),
    ("a/b/c", "name 'b/c' must be 1-63"),
    ("kubernetes.io/x", "the kubernetes.io domain is reserved"),
    ("foo.kubernetes.io/x", "the kubernetes.io domain is reserved"),
    ("x/" + "a" * 63, None), ("x/" + "a" * 64, "name 'aaaa"),
    ("a" * 253 + "/x", None), ("a" * 254 + "/x", "prefix"),  # a DNS subdomain: at most 253 characters
    ("Aliyun/erdma", "prefix"),
])
def test_extended_resource_names(name, problem):
    got = k8s.is_extended_resource_name(name)
    assert got == problem if problem is None else (got or "").startswith(problem), got


def test_a_denial_names_an_unnamed_pod_so():
    pod = k.pod([k.container("t", env=[{"name": "NCCL_IB_DISABLE", "value": "1"}])])
    del pod["metadata"]["generateName"]
    assert decision.pod_name(pod) == "(unnamed)"
    assert decision.pod_name({"metadata": "x"}) == "(unnamed)" and decision.pod_name(["x"]) == "(unnamed)"
    assert decision.pod_name({"metadata": {"name": "w-0", "generateName": "w-"}}) == "w-0"
    assert decision.pod_name({"metadata": {"generateName": "w-"}}) == "w-*"


def test_an_early_denial_keeps_the_pod_and_has_no_policy_or_warnings():
    pod = {"kind": "Pod", "metadata": "x"}
    d = decision.decide(pod, NS, None)
    assert d.outcome == decision.DENIED and d.pod is pod and d.policy is None and d.warnings == []
    assert [(f.rule, f.container) for f in d.denials] == [("malformed-pod", None)]
    assert d.denials[0].text() == "the request's pod is malformed: metadata must be an object [malformed-pod]"


def test_a_finding_names_its_container():
    assert fallback.Finding("r", "trainer", "m").text() == "container 'trainer': m [r]"
    assert fallback.Finding("r", None, "m").text() == "m [r]"


def test_command_words_that_are_not_all_strings_are_still_read(policies):
    c = k.container("trainer", command=["bash", "-c", "export NCCL_IB_DISABLE=1; torchrun"])
    c["command"].insert(1, 7)  # not a string: the API server would reject it, the words around still count
    d = decision.decide(k.pod([c]), NS, policies)
    assert d.outcome == decision.DENIED and any(f.rule == "command-fallback" for f in d.denials), d.denials


@pytest.mark.parametrize("text,expanded", [
    ("$(X)$(Y)", "12"),        # the `$` right after a reference starts the next one
    ("$a$(X)", "$a1"),         # a `$` that starts nothing does not swallow what follows
    ("$()$(X)", "$()1"),       # an empty reference ends at its own `)`
    ("$(X", "$(X"), ("$$(X)", "$(X)"), ("$(Z)", "$(Z)"),
])
def test_variable_references_expand_as_kubernetes_does(text, expanded):
    assert k8s.expand(text, {"X": "1", "Y": "2"}) == expanded


def test_a_network_of_the_same_name_in_another_namespace_is_not_ours(policies, cluster):
    """Multus JSON entries name their namespace; the policy's network in the pod's namespace is
    added beside one of the same name elsewhere."""
    import json

    ns = cluster.namespace("ai-training")
    other = json.dumps([{"name": "rdma-network", "namespace": "elsewhere"}])
    pod = k.pod([k.container("trainer")], namespace="ai-training", annotations={"k8s.v1.cni.cncf.io/networks": other})
    d = decision.decide(pod, ns, policies, cluster.attachments())
    assert d.outcome == decision.MUTATED, d.denials
    entries = json.loads(d.pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])
    assert [(e.get("namespace"), e["name"]) for e in entries][:1] == [("elsewhere", "rdma-network")] and len(entries) == 2


def test_fallback_messages_name_what_the_fabric_offers():
    from webhook.policy import load_texts

    text = (ROOT / "policies" / "erdma.yaml").read_text().replace("ncclNet: [IB]", "ncclNet: [IB, Custom]").replace(
        'hcaDevices: ["erdma_[0-3]"]', 'hcaDevices: ["erdma_0", "erdma_1", "erdma_2"]')
    ps, errors = load_texts([("erdma.yaml", text)])
    assert ps is not None, errors
    policy = ps.by_name["erdma"]
    assert "does not provide (IB/Custom)" in fallback.judge_setting("NCCL_NET", "Other", policy)[1]
    assert "devices (erdma_0, erdma_1, ...)" in fallback.judge_setting("NCCL_IB_HCA", "mlx5", policy)[1]


RAILS = """
apiVersion: rdma-webhook.io/v1alpha2
kind: RdmaPolicy
name: tworails
description: two rails, the device resource from each NetworkAttachmentDefinition
namespaceSelector: {}
gpuResources: [nvidia.com/gpu]
fabric: {kind: roce, transport: ib-verbs, ncclNet: [IB], hcaDevices: ["mlx5_[0-7]"]}
networks:
  - {name: rail-a, interface: net1, count: 1}
  - {name: rail-b, interface: net2, count: 1}
shm: {sizeLimit: 64Gi}
nccl:
  NCCL_NET: {value: IB, enforce: true}
"""


def test_every_network_without_a_device_resource_is_named():
    """decision._network_devices: each network whose device resource cannot be known is its own
    finding (not only the first), for the three reasons: no cluster state, no
    NetworkAttachmentDefinition, one without a resourceName."""
    from webhook.cluster import FileClusterState
    from webhook.policy import load_texts

    ps, errors = load_texts([("p.yaml", RAILS)])
    assert ps is not None, errors
    ns = Namespace("ml-training", {"rdma-webhook.io/injection": "enabled"})
    pod = k.pod([k.container("trainer")])
    nads = [{"metadata": {"name": n, "namespace": "ml-training"}} for n in ("rail-a", "rail-b")]
    cases = [
        (None, "the tworails policy takes its device resource from NetworkAttachmentDefinition ml-training/{}, "
               "which cannot be looked up here"),
        (FileClusterState([ns], []).attachments(),
         "NetworkAttachmentDefinition ml-training/{} does not exist, so Multus cannot attach the RDMA network and NCCL "
         "would use TCP; ask the platform team to create it in 'ml-training'"),
        (FileClusterState([ns], nads).attachments(),
         "NetworkAttachmentDefinition ml-training/{} names no device resource (k8s.v1.cni.cncf.io/resourceName) and "
         "the tworails policy gives none: the pod would get an interface without an RDMA device"),
    ]
    for attachments, message in cases:
        d = decision.decide(pod, ns, ps, attachments)
        assert d.outcome == decision.DENIED
        assert [(f.rule, f.container, f.message) for f in d.denials] == [
            ("network-attachment", None, message.format(n)) for n in ("rail-a", "rail-b")]
    # without cluster state, a network that names its resource gives the device
    ps, errors = load_texts([("p.yaml", RAILS.replace("net1, count: 1", "net1, resource: example.com/rail_a, count: 1")
                                               .replace("net2, count: 1", "net2, resource: example.com/rail_b, count: 1"))])
    assert ps is not None, errors
    d = decision.decide(pod, ns, ps)
    assert d.outcome == decision.MUTATED, d.denials
    limits = d.pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["example.com/rail_a"] == "1" and limits["example.com/rail_b"] == "1"


@pytest.mark.parametrize("value,secondary,keeps", [
    ("eth0", [], True), ("=eth0", [], True), ("lo", [], True), ("et", [], True),  # NCCL's prefix match
    ("", [], True), ("^eth0,lo", [], True),  # nothing chosen, or an exclusion list: something is left
    ("nosuch", [], False), ("=eth", [], False), ("net1", [], False),
    ("net1", ["net1"], True), ("=net2", ["net1", "net2"], True), ("net3", ["net1", "net2"], False),
])
def test_socket_ifname_keeps_an_interface_of_the_pod(value, secondary, keeps):
    """decision._ifname_matches: whether NCCL_SOCKET_IFNAME names eth0, lo or one of the pod's
    secondary interfaces; asked twice, the remembered answer is the same."""
    decision._IFNAME_SEEN.clear()
    assert decision._ifname_matches(value, secondary) is keeps
    assert decision._ifname_matches(value, secondary) is keeps


def test_a_dropped_ipc_lock_is_named_with_its_container_and_the_fix(policies):
    pod = k.pod([k.container("trainer", securityContext={"capabilities": {"drop": ["IPC_LOCK"]}})])
    d = decision.decide(pod, NS, policies)
    assert [(f.rule, f.container, f.message) for f in d.denials] == [(
        "ipc-lock-dropped", "trainer",
        "securityContext.capabilities.drop lists IPC_LOCK, which RDMA needs to pin memory (ibv_reg_mr fails and NCCL "
        "falls back to TCP); remove IPC_LOCK from drop (dropping ALL is fine)")]


@pytest.mark.parametrize("line,note", [
    ("/usr/bin/mpirun -x NCCL_NET=Socket ./train", " (mpirun -x exports it to every rank)"),
    ("/opt/openmpi/bin/mpirun --mca mca_base_env_list NCCL_NET=Socket ./train", " (mpirun exports it to every rank)"),
    ("mpiexec -genv NCCL_NET Socket -x ./train", " (mpiexec exports it to every rank)"),  # -x is Open MPI's mpirun flag
    ("NCCL_NET=Socket python train.py", ""),
])
def test_the_launcher_that_exports_a_setting_is_named(line, note):
    assert fallback._launcher_note(line) == note


@pytest.mark.parametrize("field,value,problem", [
    ("resources", [], "resources must be an object"),
    ("securityContext", "root", "securityContext must be an object"),
    ("env", {}, "env must be a list"), ("envFrom", "x", "envFrom must be a list"),
    ("volumeMounts", {}, "volumeMounts must be a list"), ("command", "sh", "command must be a list"),
    ("args", "-x", "args must be a list"),
    ("resources", {"limits": []}, "resources.limits must be an object"),
    ("resources", {"requests": "1"}, "resources.requests must be an object"),
    ("resources", {"claims": {"name": "x"}}, "resources.claims must be a list"),
    ("securityContext", {"capabilities": []}, "securityContext.capabilities must hold add/drop lists"),
    ("securityContext", {"capabilities": {"add": "IPC_LOCK"}}, "securityContext.capabilities must hold add/drop lists"),
    ("securityContext", {"capabilities": {"drop": "ALL"}}, "securityContext.capabilities must hold add/drop lists"),
])
def test_each_malformed_container_field_is_named(policies, field, value, problem):
    """decision._container_shape_problem: the field a malformed container gets wrong, exactly."""
    pod = k.pod([k.container("trainer")])
    pod["spec"]["containers"][0][field] = value
    d = decision.decide(pod, NS, policies)
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        ("malformed-pod", None, f"the request's pod is malformed: spec.containers[0].{problem}")]
