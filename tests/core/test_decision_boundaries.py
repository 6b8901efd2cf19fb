"""Edges of the core's small functions, asserted exactly: boundaries of NCCL's strtoll and of the
extended-resource-name rules, how a denial names an unnamed pod, the fields of an early denial,
and command words that are not all strings. Written for mutants `make mutation` found alive
(mutation/MUTATION.md)."""

from __future__ import annotations

import pytest

import kube_objects as k
from webhook.core import decision, fallback, pod_warnings, subject
from webhook.grammar import k8s, nccl
from webhook.core.decision import Namespace
from conftest import ROOT

NS = Namespace("ml-training", {"rdma-webhook.io/injection": "enabled"})
INT64_MAX = 2**63 - 1


@pytest.mark.parametrize(
    "text,value",
    [
        ("0x10", 16),
        ("0X10", 16),
        ("010", 8),
        ("07", 7),
        ("0", 0),
        ("7", 7),
        ("-1", -1),
        ("  +3x", 3),
        ("x", 0),
        (str(INT64_MAX), INT64_MAX),
        (str(INT64_MAX + 1), None),
        (str(-INT64_MAX - 1), -INT64_MAX - 1),
        (str(-INT64_MAX - 2), None),
    ],
)
def test_strtoll_as_c_reads_it(text, value):
    assert nccl.strtoll(text) == value


def test_an_empty_or_unset_parameter_keeps_the_default():
    assert nccl.int_param(None, 5) == 5 and nccl.int_param("", 5) == 5 and nccl.int_param("0", 5) == 0


@pytest.mark.parametrize(
    "name,problem",
    [
        ("aliyun/erdma", None),
        ("rdma/hca_shared_devices_a", None),
        ("requests.kubernetes.io/x", None),
        ("erdma", "must be <domain>/<name>, e.g. aliyun/erdma"),
        ("a/b/c", "name 'b/c' must be 1-63"),
        ("kubernetes.io/x", "the kubernetes.io domain is reserved"),
        ("foo.kubernetes.io/x", "the kubernetes.io domain is reserved"),
        ("x/" + "a" * 63, None),
        ("x/" + "a" * 64, "name 'aaaa"),
        ("a" * 253 + "/x", None),
        ("a" * 254 + "/x", "prefix"),  # a DNS subdomain: at most 253 characters
        ("Aliyun/erdma", "prefix"),
    ],
)
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
    assert subject.Finding("r", "trainer", "m").text() == "container 'trainer': m [r]"
    assert subject.Finding("r", None, "m").text() == "m [r]"


def test_command_words_that_are_not_all_strings_are_still_read(policies):
    c = k.container("trainer", command=["bash", "-c", "export NCCL_IB_DISABLE=1; torchrun"])
    c["command"].insert(1, 7)  # not a string: the API server would reject it, the words around still count
    d = decision.decide(k.pod([c]), NS, policies)
    assert d.outcome == decision.DENIED and any(f.rule == "command-fallback" for f in d.denials), d.denials


@pytest.mark.parametrize(
    "text,expanded",
    [
        ("$(X)$(Y)", "12"),  # the `$` right after a reference starts the next one
        ("$a$(X)", "$a1"),  # a `$` that starts nothing does not swallow what follows
        ("$()$(X)", "$()1"),  # an empty reference ends at its own `)`
        ("$(X", "$(X"),
        ("$$(X)", "$(X)"),
        ("$(Z)", "$(Z)"),
    ],
)
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
    assert [(e.get("namespace"), e["name"]) for e in entries][:1] == [("elsewhere", "rdma-network")] and len(
        entries
    ) == 2


def test_fallback_messages_name_what_the_fabric_offers():
    from webhook.policy.load import load_texts

    text = (
        (ROOT / "policies" / "erdma.yaml")
        .read_text()
        .replace("ncclNet: [IB]", "ncclNet: [IB, Custom]")
        .replace('hcaDevices: ["erdma_[0-3]"]', 'hcaDevices: ["erdma_0", "erdma_1", "erdma_2"]')
    )
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
    from webhook.cluster.state import FileClusterState
    from webhook.policy.load import load_texts

    ps, errors = load_texts([("p.yaml", RAILS)])
    assert ps is not None, errors
    ns = Namespace("ml-training", {"rdma-webhook.io/injection": "enabled"})
    pod = k.pod([k.container("trainer")])
    nads = [{"metadata": {"name": n, "namespace": "ml-training"}} for n in ("rail-a", "rail-b")]
    cases = [
        (
            None,
            "the tworails policy takes its device resource from NetworkAttachmentDefinition ml-training/{}, "
            "which cannot be looked up here",
        ),
        (
            FileClusterState([ns], []).attachments(),
            "NetworkAttachmentDefinition ml-training/{} does not exist, so Multus cannot attach the RDMA network and NCCL "
            "would use TCP; ask the platform team to create it in 'ml-training'",
        ),
        (
            FileClusterState([ns], nads).attachments(),
            "NetworkAttachmentDefinition ml-training/{} names no device resource (k8s.v1.cni.cncf.io/resourceName) and "
            "the tworails policy gives none: the pod would get an interface without an RDMA device",
        ),
    ]
    for attachments, message in cases:
        d = decision.decide(pod, ns, ps, attachments)
        assert d.outcome == decision.DENIED
        assert [(f.rule, f.container, f.message) for f in d.denials] == [
            ("network-attachment", None, message.format(n)) for n in ("rail-a", "rail-b")
        ]
    # without cluster state, a network that names its resource gives the device
    ps, errors = load_texts(
        [
            (
                "p.yaml",
                RAILS.replace("net1, count: 1", "net1, resource: example.com/rail_a, count: 1").replace(
                    "net2, count: 1", "net2, resource: example.com/rail_b, count: 1"
                ),
            )
        ]
    )
    assert ps is not None, errors
    d = decision.decide(pod, ns, ps)
    assert d.outcome == decision.MUTATED, d.denials
    limits = d.pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["example.com/rail_a"] == "1" and limits["example.com/rail_b"] == "1"


@pytest.mark.parametrize(
    "value,secondary,keeps",
    [
        ("eth0", [], True),
        ("=eth0", [], True),
        ("lo", [], True),
        ("et", [], True),  # NCCL's prefix match
        ("", [], True),
        ("^eth0,lo", [], True),  # nothing chosen, or an exclusion list: something is left
        ("nosuch", [], False),
        ("=eth", [], False),
        ("net1", [], False),
        ("net1", ["net1"], True),
        ("=net2", ["net1", "net2"], True),
        ("net3", ["net1", "net2"], False),
    ],
)
def test_socket_ifname_keeps_an_interface_of_the_pod(value, secondary, keeps):
    """pod_warnings._ifname_matches: whether NCCL_SOCKET_IFNAME names eth0, lo or one of the pod's
    secondary interfaces; asked twice, the remembered answer is the same."""
    pod_warnings._IFNAME_SEEN.clear()
    assert pod_warnings._ifname_matches(value, secondary) is keeps
    assert pod_warnings._ifname_matches(value, secondary) is keeps


def test_the_remembered_ifname_answer_is_per_interface_list_not_per_joined_text():
    """Interfaces "x" and "y" are not one interface "x,y" (a Multus annotation may name one so):
    the answer remembered for the first list is not the answer for the second."""
    pod_warnings._IFNAME_SEEN.clear()
    assert pod_warnings._ifname_matches("=x", ["x", "y"]) is True
    assert pod_warnings._ifname_matches("=x", ["x,y"]) is False
    assert pod_warnings._ifname_matches("=x,y", ["x,y"]) is False  # NCCL splits the value at commas too
    pod_warnings._IFNAME_SEEN.clear()
    assert pod_warnings._ifname_matches("=x", ["x,y"]) is False


def test_a_pod_with_thousands_of_interface_names_is_answered_and_not_remembered():
    pod_warnings._IFNAME_SEEN.clear()
    names = [""] * 5000 + ["net1"]
    assert pod_warnings._ifname_matches("=net1", names) is True
    assert pod_warnings._IFNAME_SEEN == {}


def test_a_dropped_ipc_lock_is_named_with_its_container_and_the_fix(policies):
    pod = k.pod([k.container("trainer", securityContext={"capabilities": {"drop": ["IPC_LOCK"]}})])
    d = decision.decide(pod, NS, policies)
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        (
            "ipc-lock-dropped",
            "trainer",
            "securityContext.capabilities.drop lists IPC_LOCK, which RDMA needs to pin memory (ibv_reg_mr fails and NCCL "
            "falls back to TCP); remove IPC_LOCK from drop (dropping ALL is fine)",
        )
    ]


@pytest.mark.parametrize(
    "line,note",
    [
        ("/usr/bin/mpirun -x NCCL_NET=Socket ./train", " (mpirun -x exports it to every rank)"),
        (
            "/opt/openmpi/bin/mpirun --mca mca_base_env_list NCCL_NET=Socket ./train",
            " (mpirun exports it to every rank)",
        ),
        (
            "mpiexec -genv NCCL_NET Socket -x ./train",
            " (mpiexec exports it to every rank)",
        ),  # -x is Open MPI's mpirun flag
        ("NCCL_NET=Socket python train.py", ""),
    ],
)
def test_the_launcher_that_exports_a_setting_is_named(line, note):
    assert fallback._launcher_note(line) == note


@pytest.mark.parametrize(
    "field,value,problem",
    [
        ("resources", [], "resources must be an object"),
        ("securityContext", "root", "securityContext must be an object"),
        ("env", {}, "env must be a list"),
        ("envFrom", "x", "envFrom must be a list"),
        ("volumeMounts", {}, "volumeMounts must be a list"),
        ("command", "sh", "command must be a list"),
        ("args", "-x", "args must be a list"),
        ("resources", {"limits": []}, "resources.limits must be an object"),
        ("resources", {"requests": "1"}, "resources.requests must be an object"),
        ("resources", {"claims": {"name": "x"}}, "resources.claims must be a list"),
        ("securityContext", {"capabilities": []}, "securityContext.capabilities must hold add/drop lists"),
        (
            "securityContext",
            {"capabilities": {"add": "IPC_LOCK"}},
            "securityContext.capabilities must hold add/drop lists",
        ),
        ("securityContext", {"capabilities": {"drop": "ALL"}}, "securityContext.capabilities must hold add/drop lists"),
    ],
)
def test_each_malformed_container_field_is_named(policies, field, value, problem):
    """decision._container_shape_problem: the field a malformed container gets wrong, exactly."""
    pod = k.pod([k.container("trainer")])
    pod["spec"]["containers"][0][field] = value
    d = decision.decide(pod, NS, policies)
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        ("malformed-pod", None, f"the request's pod is malformed: spec.containers[0].{problem}")
    ]


# -- the decision's answers, field by field (decision._assess and its steps, decide, Decision) ------------------

NOT_ENABLED = Namespace("default", {"kubernetes.io/metadata.name": "default"})
NO_GPU = (
    "no container requests a GPU (nvidia.com/gpu) or runs an MPI launcher, so none gets RDMA (a pod "
    "without GPUs); left unchanged"
)
DEBUG_INFO = "{}: NCCL_DEBUG=INFO logs heavily; use WARN outside debugging"
IB_DISABLED = (
    "NCCL_IB_DISABLE='1' turns NCCL's IB/RoCE transport off, so NCCL runs on TCP sockets (NET/Socket); "
    "remove it or set it to 0"
)
COMMAND_DEBUG = "{}: the command sets NCCL_DEBUG={}, which logs heavily; use WARN outside debugging"


def answer(d):
    """Every field of a Decision but the pod."""
    return (
        d.outcome,
        d.policy,
        [(f.rule, f.container, f.message) for f in d.denials],
        d.warnings,
        d.notes,
        d.reason,
        d.templates,
    )


@pytest.mark.parametrize(
    "case,expected",
    [
        ("update", ("skipped", None, [], [], [], "operation UPDATE, only CREATE is considered", [])),
        ("unlabelled", ("skipped", None, [], [], [], "pod does not carry rdma-webhook.io/inject=true", [])),
        (
            "namespace-not-enabled",
            ("skipped", None, [], [], [], "namespace 'default' does not carry rdma-webhook.io/injection=enabled", []),
        ),
        (
            "namespace-unknown",
            (
                "denied",
                None,
                [
                    (
                        "namespace-unknown",
                        None,
                        "the pod's namespace is unknown to the webhook, so its opt-in cannot be checked; retry in a moment",
                    )
                ],
                [],
                [],
                "",
                [],
            ),
        ),
        (
            "no-policies",
            (
                "denied",
                None,
                [
                    (
                        "no-policy",
                        None,
                        "the webhook has no valid policies loaded; ask the platform team to check `rdma-webhook policy lint`",
                    )
                ],
                [],
                [],
                "",
                [],
            ),
        ),
        (
            "gpu-not-a-quantity",
            (
                "denied",
                None,
                [
                    (
                        "malformed-pod",
                        None,
                        "the request's pod is malformed: spec.containers[0].resources.limits['nvidia.com/gpu'] is not a quantity: "
                        "'$GPUS'",
                    )
                ],
                [],
                [],
                "",
                [],
            ),
        ),
    ],
)
def test_an_early_answer_keeps_the_pod_as_sent_and_says_why(policies, case, expected):
    """Before a policy applies, each answer carries the pod as sent, no policy, no warnings or notes,
    and its reason or denial word for word."""
    pod = k.pod(
        [k.container("trainer")],
        inject=case != "unlabelled",
        namespace="default" if case == "namespace-not-enabled" else "ml-training",
    )
    ns, ps, operation = NS, policies, "CREATE"
    if case == "update":
        operation = "UPDATE"
    elif case == "namespace-not-enabled":
        ns = NOT_ENABLED
    elif case == "namespace-unknown":
        ns = None
    elif case == "no-policies":
        ps = None
    elif case == "gpu-not-a-quantity":
        pod["spec"]["containers"][0]["resources"] = {
            "limits": {"nvidia.com/gpu": "$GPUS"},
            "requests": {"nvidia.com/gpu": "$GPUS"},
        }
    d = decision.decide(pod, ns, ps, operation=operation)
    assert d.pod is pod and answer(d) == expected


def cpu_pod(*exports):
    """A labelled pod without a GPU or a launcher whose script exports the given settings."""
    script = "".join(f"export {e}\n" for e in exports) + "python prepare.py"
    return k.pod([k.container("prep", gpus=None, command=["bash", "-c"], args=[script])])


def launcher(*exports):
    """An MPIJob launcher (no GPU) whose mpirun exports the given settings."""
    args = ["-np", "16"] + [w for e in exports for w in ("-x", e)] + ["python", "train.py"]
    return k.mpijob_launcher(args=args)


def test_a_pod_without_a_gpu_container_is_answered_with_its_policy_and_warnings(policies):
    pod = cpu_pod("NCCL_DEBUG=INFO", "NCCL_SOCKET_IFNAME=net1")
    d = decision.decide(pod, NS, policies)
    assert d.pod is pod and answer(d) == (
        "unchanged",
        "erdma",
        [],
        [NO_GPU, COMMAND_DEBUG.format("prep", "INFO")],
        [],
        NO_GPU[: -len("; left unchanged")],
        [],
    )
    # an MPI launcher gets the block its ranks need (tests/core/test_ranks.py), with the same warnings
    d = decision.decide(launcher("NCCL_DEBUG=INFO", "NCCL_SOCKET_IFNAME=net1"), NS, policies)
    assert d.outcome == "mutated" and d.warnings == [COMMAND_DEBUG.format("launcher", "INFO")]
    pod = launcher("NCCL_DEBUG=INFO", "NCCL_IB_DISABLE=1")
    d = decision.decide(pod, NS, policies)
    assert d.pod is pod and answer(d) == (
        "denied",
        "erdma",
        [("command-fallback", "launcher", IB_DISABLED + " in the command (mpirun -x exports it to every rank)")],
        [COMMAND_DEBUG.format("launcher", "INFO")],
        [],
        "",
        [],
    )


@pytest.mark.parametrize(
    "exports,warned",
    [
        (["NCCL_DEBUG=TRACE"], "TRACE"),
        (["NCCL_DEBUG=WARN"], None),
        (["NCCL_NET=IB", "NCCL_DEBUG=info"], "info"),
        (["NCCL_NET=IB"], None),
    ],
)
def test_a_command_that_sets_verbose_nccl_logging_is_warned_about(policies, exports, warned):
    d = decision.decide(cpu_pod(*exports), NS, policies)
    assert d.outcome == "unchanged" and d.warnings == [NO_GPU] + (
        [COMMAND_DEBUG.format("prep", warned)] if warned else []
    )
    d = decision.decide(launcher(*exports), NS, policies)
    assert d.outcome == "mutated" and d.warnings == ([COMMAND_DEBUG.format("launcher", warned)] if warned else [])


def test_the_gpu_resources_a_pod_could_request_are_all_named():
    from webhook.policy.load import load_texts

    text = (
        (ROOT / "policies" / "erdma.yaml")
        .read_text()
        .replace("gpuResources: [nvidia.com/gpu]", "gpuResources: [nvidia.com/gpu, amd.com/gpu]")
    )
    ps, errors = load_texts([("erdma.yaml", text)])
    assert ps is not None, errors
    d = decision.decide(cpu_pod(), NS, ps)
    assert d.warnings == [
        "no container requests a GPU (nvidia.com/gpu/amd.com/gpu) or runs an MPI launcher, so none gets RDMA (a pod "
        "without GPUs); left unchanged"
    ]


def test_a_denied_gpu_pod_keeps_its_warnings(policies):
    pod = k.pod(
        [
            k.container(
                "trainer", env=[{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_IB_DISABLE", "value": "1"}]
            )
        ]
    )
    d = decision.decide(pod, NS, policies)
    assert d.pod is pod and answer(d) == (
        "denied",
        "erdma",
        [("env-fallback", "trainer", IB_DISABLED + " in env")],
        [DEBUG_INFO.format("trainer")],
        [],
        "",
        [],
    )


def test_an_injected_pod_is_answered_unchanged_with_its_warnings(policies):
    pod = k.pod([k.container("trainer", env=[{"name": "NCCL_DEBUG", "value": "INFO"}])])
    first = decision.decide(pod, NS, policies)
    assert first.outcome == "mutated" and first.reason == "" and first.notes
    again = first.pod
    d = decision.decide(again, NS, policies)
    assert d.pod is again and answer(d) == (
        "unchanged",
        "erdma",
        [],
        [DEBUG_INFO.format("trainer")],
        [],
        "already injected",
        [],
    )


NON_ROOT = (
    "trainer: runs as non-root, so the added IPC_LOCK stays out of its effective capabilities; raise the memlock "
    "limit or grant the capability in the image"
)


@pytest.mark.parametrize(
    "container_sc,pod_sc,warned",
    [
        ({}, {}, False),
        ({"runAsNonRoot": True}, {}, True),
        ({}, {"runAsNonRoot": True}, True),
        ({"runAsNonRoot": False}, {"runAsNonRoot": True}, False),  # the container's own setting wins
        ({"runAsNonRoot": False}, {}, False),
        ({"runAsUser": 1000}, {}, True),
        ({}, {"runAsUser": 1000}, True),
        ({"runAsUser": 1}, {}, True),
        ({"runAsUser": 0}, {"runAsUser": 1000}, False),
        ({"runAsUser": 0}, {}, False),
    ],
)
def test_a_container_that_runs_as_non_root_is_warned_about(policies, container_sc, pod_sc, warned):
    """pod_warnings.warnings_for: the container's securityContext, else the pod's, decides whether the
    added IPC_LOCK stays out of the effective capabilities."""
    extra = {"securityContext": container_sc} if container_sc else {}
    pod = k.pod([k.container("trainer", **extra)])
    pod["spec"]["securityContext"] = pod_sc
    d = decision.decide(pod, NS, policies)
    assert d.outcome == "mutated" and [w for w in d.warnings if "non-root" in w] == ([NON_ROOT] if warned else [])


def ifname_warning(value, have):
    return (
        f"trainer: NCCL_SOCKET_IFNAME={value!r} names no interface the pod will have ({have}), so NCCL's bootstrap "
        f"cannot start; remove it or name one of those"
    )


def test_socket_ifname_is_checked_against_the_interfaces_the_pod_will_have(policies, cluster):
    """pod_warnings.warnings_for: eth0 and the Multus interfaces the pod will have (the policy's network,
    or the pod's own network under a policy without one); a host-network pod's interfaces are the
    host's and are not known."""

    def warnings(pod, namespace, value):
        pod["spec"]["containers"][0]["env"] = [{"name": "NCCL_SOCKET_IFNAME", "value": value}]
        d = decision.decide(pod, cluster.namespace(namespace), policies, cluster.attachments())
        assert d.outcome == "mutated", d.denials
        return [w for w in d.warnings if "NCCL_SOCKET_IFNAME" in w]

    assert warnings(k.pod([k.container("trainer")]), "ml-training", "bond0") == [ifname_warning("bond0", "eth0")]
    sriov = k.pod([k.container("trainer")], namespace="ai-training")
    assert warnings(sriov, "ai-training", "net9") == [ifname_warning("net9", "eth0, net1")]
    assert warnings(sriov, "ai-training", "net1") == []
    own_network = k.pod(
        [k.container("trainer", limits={"rdma/rdma_shared_device_a": "1"})],
        namespace="ib-training",
        annotations={"k8s.v1.cni.cncf.io/networks": "rdma-net-ipam"},
    )
    assert warnings(own_network, "ib-training", "net1") == []
    assert warnings(own_network, "ib-training", "net2") == [ifname_warning("net2", "eth0, net1")]
    on_host = k.pod(
        [k.container("trainer", securityContext={"privileged": True})],
        namespace="oke-training",
        hostNetwork=True,
        dnsPolicy="ClusterFirstWithHostNet",
    )
    assert warnings(on_host, "oke-training", "bond0") == []


def test_variables_set_from_valuefrom_are_named_together(policies):
    source = {"configMapKeyRef": {"name": "nccl", "key": "x"}}
    pod = k.pod(
        [
            k.container(
                "trainer",
                env=[{"name": "NCCL_IB_HCA", "valueFrom": source}, {"name": "NCCL_IB_DISABLE", "valueFrom": source}],
            )
        ]
    )
    d = decision.decide(pod, NS, policies)
    assert d.outcome == "mutated"
    assert [w for w in d.warnings if "valueFrom" in w] == [
        "trainer: NCCL_IB_DISABLE, NCCL_IB_HCA come from valueFrom and cannot be checked"
    ]


@pytest.mark.parametrize(
    "change,problem",
    [
        (lambda pod: ["not", "a", "pod"], "the object is not a JSON object"),
        (lambda pod: {**pod, "spec": "x"}, "spec must be an object"),
        (
            lambda pod: pod["metadata"].update(annotations={"team": 7}),
            "metadata.annotations must map strings to strings",
        ),
        (lambda pod: pod["spec"].update(initContainers={}), "spec.initContainers must be a list of objects"),
        (lambda pod: pod["spec"].update(volumes=["dshm"]), "spec.volumes must be a list of objects"),
        (lambda pod: pod["spec"].update(resourceClaims="rdma"), "spec.resourceClaims must be a list of objects"),
        (
            lambda pod: pod["spec"].update(initContainers=[{"name": "fetch", "image": "busybox", "env": {"A": "1"}}]),
            "spec.initContainers[0].env must be a list",
        ),
    ],
)
def test_each_malformed_pod_field_is_named(policies, change, problem):
    """decision.shape_problem: the field a malformed pod gets wrong, exactly."""
    pod = k.pod([k.container("trainer")])
    pod = change(pod) or pod
    d = decision.decide(pod, NS, policies)
    assert d.pod is pod and answer(d) == (
        "denied",
        None,
        [("malformed-pod", None, f"the request's pod is malformed: {problem}")],
        [],
        [],
        "",
        [],
    )


def test_a_container_without_gpus_is_not_judged_by_its_nccl_env(policies):
    """targets._sees_gpus_otherwise: a sidecar that requests no GPU, references no claim and has
    no NVIDIA_VISIBLE_DEVICES runs no NCCL; settings it shares with the trainer are not judged."""
    shared = [{"name": "LOG_LEVEL", "value": "info"}, {"name": "NCCL_IB_DISABLE", "value": "1"}]
    sidecar = k.container("log-shipper", "fluent/fluent-bit:3.0", gpus=None, env=shared)
    d = decision.decide(k.pod([k.container("trainer"), sidecar]), NS, policies)
    assert d.outcome == "mutated" and d.denials == []
    sidecar["env"] = shared + [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    d = decision.decide(k.pod([k.container("trainer"), sidecar]), NS, policies)
    assert [(f.rule, f.container) for f in d.denials] == [("env-fallback", "log-shipper")]


# -- another fabric's device or claim (families.check, fitting) ---------------------------

DRA = """
apiVersion: rdma-webhook.io/v1alpha2
kind: RdmaPolicy
name: {name}
description: a NIC per pod claimed through DRA
namespaceSelector: {selector}
fabric: {{kind: roce, transport: ib-verbs, ncclNet: [IB], hcaDevices: ["mlx5_[0-7]"]}}
claim: {{name: {entry}, template: {template}, equivalentTemplates: [{template}-x8]}}
shm: {{sizeLimit: 64Gi}}
nccl:
  NCCL_NET: {{value: IB, enforce: true}}
"""


def dra_set():
    """Two DRA policies: roce-nic for every opted-in namespace, ib-nic only where `fabric: ib`."""
    from webhook.policy.load import load_texts

    ps, errors = load_texts(
        [
            ("roce.yaml", DRA.format(name="roce-nic", selector="{}", entry="rdma-nic", template="roce-nic-template")),
            (
                "ib.yaml",
                DRA.format(
                    name="ib-nic", selector="{matchLabels: {fabric: ib}}", entry="ib-nic", template="ib-nic-template"
                ),
            ),
        ]
    )
    assert ps is not None, errors
    return ps


def test_another_fabrics_claim_names_the_policy_of_this_namespace_that_provides_it():
    ps = dra_set()
    claims = [{"name": "ib", "resourceClaimTemplateName": "ib-nic-template"}]
    pod = k.pod([k.container("trainer")], annotations={"rdma-webhook.io/policy": "roce-nic"}, resourceClaims=claims)
    ib_ns = Namespace("ml-training", {**NS.labels, "fabric": "ib"})
    d = decision.decide(pod, ib_ns, ps)
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        (
            "fabric-mismatch",
            None,
            "this pod claims ib-nic-template, another fabric's RDMA NIC; policy roce-nic provides a DRA claim (roce-nic-template); "
            "select policy ib-nic with the annotation rdma-webhook.io/policy: ib-nic",
        )
    ]
    d = decision.decide(pod, NS, ps)  # ib-nic does not serve this namespace
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        (
            "fabric-mismatch",
            None,
            "this pod claims ib-nic-template, another fabric's RDMA NIC; policy roce-nic provides a DRA claim (roce-nic-template); "
            "no policy of this namespace provides it; remove it, or ask the platform team for a policy of that fabric",
        )
    ]


def test_a_claim_entry_that_names_no_claim_is_passed_over():
    """An entry in the pre-1.31 `source` form (as `review` may read it from a file) names neither
    field; the entries after it are still read."""
    ps = dra_set()
    claims = [
        {"name": "old", "source": {"resourceClaimTemplateName": "scratch"}},
        {"name": "ib", "resourceClaimTemplateName": "ib-nic-template"},
    ]
    pod = k.pod([k.container("trainer")], annotations={"rdma-webhook.io/policy": "roce-nic"}, resourceClaims=claims)
    d = decision.decide(pod, NS, ps)
    assert [(f.rule, f.container) for f in d.denials] == [("fabric-mismatch", None)]
    assert d.denials[0].message.startswith("this pod claims ib-nic-template, another fabric's RDMA NIC")


def test_the_pods_own_entry_for_an_equivalent_claim_is_what_the_targets_reference():
    ps = dra_set()
    claims = [{"name": "nic", "resourceClaimTemplateName": "roce-nic-template-x8"}]
    pod = k.pod([k.container("trainer")], annotations={"rdma-webhook.io/policy": "roce-nic"}, resourceClaims=claims)
    d = decision.decide(pod, NS, ps)
    assert d.outcome == "mutated", d.denials
    assert d.pod["spec"]["resourceClaims"] == claims
    assert d.pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "nic"}]


def test_a_device_of_another_fabric_names_every_resource_the_policy_gives(policies, cluster):
    pod = k.pod([k.container("trainer", limits={"aliyun/erdma": "1"})], namespace="llm-rails")
    d = decision.decide(pod, cluster.namespace("llm-rails"), policies, cluster.attachments())
    rails = ", ".join(f"nvidia.com/rdma_rail_{i}" for i in range(8))
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        (
            "fabric-mismatch",
            "trainer",
            f"this pod requests aliyun/erdma, another fabric's RDMA device; policy sriov-roce-8rail provides {rails}; "
            f"select policy erdma with the annotation rdma-webhook.io/policy: erdma",
        )
    ]


def test_a_device_the_policys_network_resolves_to_is_not_another_fabrics(policies):
    """The NetworkAttachmentDefinition names the device resource: when that is a resource another
    policy owns, a pod that already requests it has this policy's device, not a foreign one."""
    from webhook.cluster.state import FileClusterState

    ai = Namespace("ai-training", {"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "sriov-roce"})
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": "rdma-network",
            "namespace": "ai-training",
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "rdma/rdma_shared_device_a"},
        },
    }
    pod = k.pod([k.container("trainer", limits={"rdma/rdma_shared_device_a": "2"})], namespace="ai-training")
    d = decision.decide(pod, ai, policies, FileClusterState([ai], [nad]))
    assert d.outcome == "mutated" and d.denials == []
    assert d.pod["spec"]["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] == "2"


def test_a_workload_decision_carries_one_result_per_pod_template(policies, cluster):
    import json
    from webhook.admission import review

    template = {
        "metadata": {"labels": {"rdma-webhook.io/inject": "true"}},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example/trainer:v1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ]
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml-training"},
        "spec": {"template": template},
    }
    rv = k.admission_review(job, kind="Job", resource="jobs")
    rv["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    _, _, d, _ = review.handle_validate(json.dumps(rv).encode(), policies, cluster.namespace, cluster.attachments())
    assert [(t.path, t.decision.outcome) for t in d.templates] == [("spec.template", "mutated")]


@pytest.mark.parametrize(
    "limit,request_,named",
    [
        ("8", "$GPUS", "requests['nvidia.com/gpu'] is not a quantity: '$GPUS'"),
        ("0", "many", "requests['nvidia.com/gpu'] is not a quantity: 'many'"),
        ("many", "8", "limits['nvidia.com/gpu'] is not a quantity: 'many'"),
    ],
)
def test_the_gpu_value_that_is_no_quantity_is_the_one_named(policies, limit, request_, named):
    """targets._gpu_value_problem: of a container's GPU values (as `review` may read them from an
    unrendered file), the one that is no quantity, not a valid one before it."""
    pod = k.pod([k.container("trainer")])
    pod["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": limit},
        "requests": {"nvidia.com/gpu": request_},
    }
    d = decision.decide(pod, NS, policies)
    assert [(f.rule, f.message) for f in d.denials] == [
        ("malformed-pod", f"the request's pod is malformed: spec.containers[0].resources.{named}")
    ]


def test_another_fabrics_claim_names_every_resource_the_policy_gives(cluster):
    from webhook.policy.load import load_texts

    texts = [(str(p), p.read_text()) for p in sorted((ROOT / "policies").glob("*.yaml"))]
    ps, errors = load_texts(
        texts
        + [("roce.yaml", DRA.format(name="roce-nic", selector="{}", entry="rdma-nic", template="roce-nic-template"))]
    )
    assert ps is not None, errors
    claims = [{"name": "nic", "resourceClaimTemplateName": "roce-nic-template"}]
    pod = k.pod([k.container("trainer")], namespace="llm-rails", resourceClaims=claims)
    d = decision.decide(pod, cluster.namespace("llm-rails"), ps, cluster.attachments())
    rails = ", ".join(f"nvidia.com/rdma_rail_{i}" for i in range(8))
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        (
            "fabric-mismatch",
            None,
            f"this pod claims roce-nic-template, another fabric's RDMA NIC; policy sriov-roce-8rail provides {rails}; "
            f"select policy roce-nic with the annotation rdma-webhook.io/policy: roce-nic",
        )
    ]


def test_a_namespace_label_names_a_policy_only_where_its_selector_allows_the_namespace():
    from webhook.policy.load import load_texts

    text = (
        (ROOT / "policies" / "erdma.yaml")
        .read_text()
        .replace("namespaceSelector: {}", "namespaceSelector: {matchLabels: {tier: gold}}")
    )
    ps, errors = load_texts([("erdma.yaml", text)])
    assert ps is not None, errors
    pod = k.pod([k.container("trainer")])
    labels = {**NS.labels, "rdma-webhook.io/policy": "erdma"}
    d = decision.decide(pod, Namespace("ml-training", {**labels, "tier": "gold"}), ps)
    assert d.outcome == "mutated" and d.policy == "erdma", d.denials
    d = decision.decide(pod, Namespace("ml-training", labels), ps)
    assert [(f.rule, f.message) for f in d.denials] == [
        (
            "no-policy",
            "namespace 'ml-training' label rdma-webhook.io/policy names policy 'erdma', whose namespaceSelector "
            "does not allow this namespace",
        )
    ]
