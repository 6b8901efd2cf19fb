"""The decision end to end in-process: every mutation, every deny rule, every warning, with the
returned JSON patch applied to the object sent and a second pass checked to be a no-op."""

from __future__ import annotations

import base64
import copy
import json

import jsonpatch
import pytest

import kube_objects as k
from webhook.core import keys
from webhook.admission import review
from webhook.cluster.state import FileClusterState
from webhook.core.decision import Namespace, decide

ML = Namespace("ml-training", {"kubernetes.io/metadata.name": "ml-training", keys.NS_INJECTION: "enabled"})
AI = Namespace(
    "ai-training",
    {"kubernetes.io/metadata.name": "ai-training", keys.NS_INJECTION: "enabled", keys.NS_POLICY: "sriov-roce"},
)
NAD = {
    "apiVersion": "k8s.cni.cncf.io/v1",
    "kind": "NetworkAttachmentDefinition",
    "metadata": {
        "name": "rdma-network",
        "namespace": "ai-training",
        "annotations": {keys.NAD_RESOURCE_NAME: "example.com/rdma_vf"},
    },
}


def respond(pod, ns, policies, attachments=None):
    """Run the decision through the AdmissionReview envelope; return (response, patched pod)."""
    namespaces = {n.name: n for n in (ML, AI, ns) if n}
    body = k.body(k.admission_review(pod, namespace=ns.name if ns else "nowhere"))
    code, doc, decision, _ = review.handle(body, policies, namespaces.get, attachments)
    assert code == 200
    before = copy.deepcopy(pod)
    decide(pod, ns, policies, attachments)  # the same decision on the caller's own object
    assert pod == before, "the decision changed the pod it was given"
    resp = doc["response"]
    patched = copy.deepcopy(pod)
    if "patch" in resp:
        assert resp["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(resp["patch"]))
        patched = jsonpatch.apply_patch(pod, ops)  # must apply to exactly the object sent
        assert patched == decision.pod
    return resp, patched, decision


def mutate_twice(pod, ns, policies, attachments=None):
    resp, patched, decision = respond(pod, ns, policies, attachments)
    assert resp["allowed"], resp
    again, same, d2 = respond(patched, ns, policies, attachments)
    assert again["allowed"] and "patch" not in again, "second pass must give no patch"
    assert same == patched
    return resp, patched, decision


def env_of(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def test_pytorchjob_worker_gets_everything(policies):
    pod = k.pytorchjob_worker()
    resp, out, d = mutate_twice(pod, ML, policies)
    c = out["spec"]["containers"][0]
    assert c["resources"]["limits"]["aliyun/erdma"] == "1" and c["resources"]["requests"]["aliyun/erdma"] == "1"
    env = env_of(c)
    assert env["NCCL_NET"] == "IB" and env["NCCL_IB_HCA"] == "erdma,rocep" and env["NCCL_IB_GID_INDEX"] == "1"
    # the user's explicit values win where the policy does not enforce
    assert env["NCCL_SOCKET_IFNAME"] == "net1" and env["NCCL_DEBUG"] == "INFO" and env["NCCL_IB_DISABLE"] == "0"
    names = [e["name"] for e in c["env"]]
    assert len(names) == len(set(names)), "no variable twice"
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert "privileged" not in c["securityContext"]
    shm = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    vol = next(v for v in out["spec"]["volumes"] if v["name"] == shm[0]["name"])
    assert vol["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}  # 4 GPUs x 8Gi
    # the token volume and its mount are untouched
    assert out["spec"]["volumes"][0] == pod["spec"]["volumes"][0]
    ann = out["metadata"]["annotations"]
    assert ann[keys.STATUS] == "injected" and ann[keys.APPLIED_POLICY] == "erdma"
    # the same name as a label (the generated ValidatingAdmissionPolicy selects by it), the
    # user's labels kept
    assert out["metadata"]["labels"] == {**pod["metadata"]["labels"], keys.APPLIED_POLICY_LABEL: "erdma"}
    assert any("NCCL_DEBUG=INFO" in w for w in resp["warnings"])
    # nothing outside metadata.annotations and the container/volumes changed
    assert (
        out["spec"]["tolerations"] == pod["spec"]["tolerations"] and out["metadata"]["name"] == pod["metadata"]["name"]
    )


def test_pod_without_volumes_or_annotations_gets_parents_added(policies):
    """automountServiceAccountToken: false means no spec.volumes at all; no annotations either."""
    pod = k.pod([k.container("trainer", gpus=8)], automount=False)
    assert "volumes" not in pod["spec"] and "annotations" not in pod["metadata"]
    resp, out, d = mutate_twice(pod, ML, policies)
    ops = json.loads(base64.b64decode(resp["patch"]))
    paths = {op["path"] for op in ops}
    assert "/spec/volumes" in paths and "/metadata/annotations" in paths
    assert out["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "64Gi"


def test_annotation_keys_are_escaped_when_annotations_exist(policies):
    pod = k.pod([k.container("trainer")], annotations={"team": "vision"})
    resp, out, d = mutate_twice(pod, ML, policies)
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert {"op": "add", "path": "/metadata/annotations/rdma-webhook.io~1status", "value": "injected"} in ops


def test_non_target_containers_and_init_containers_untouched(policies):
    sidecar = k.container("log-shipper", "fluent/fluent-bit:3.0", gpus=None)
    init = k.container("fetch-data", "busybox:1.36", gpus=None, command=["sh", "-c", "cp -r /src /data"])
    pod = k.pod([k.container("trainer", gpus=2), sidecar], init_containers=[init])
    resp, out, d = mutate_twice(pod, ML, policies)
    assert out["spec"]["containers"][1] == pod["spec"]["containers"][1]
    assert out["spec"]["initContainers"] == pod["spec"]["initContainers"]
    assert "aliyun/erdma" in out["spec"]["containers"][0]["resources"]["limits"]


def test_user_device_count_kept_and_zero_denied(policies):
    pod = k.pod([k.container("trainer", limits={"aliyun/erdma": "2"})])
    resp, out, d = mutate_twice(pod, ML, policies)
    assert out["spec"]["containers"][0]["resources"]["limits"]["aliyun/erdma"] == "2"
    pod = k.pod([k.container("trainer", limits={"aliyun/erdma": "0"})])
    resp, out, d = respond(pod, ML, policies)
    assert not resp["allowed"] and resp["status"]["code"] == 403
    assert "[device-zero]" in resp["status"]["message"] and "'trainer'" in resp["status"]["message"]


def test_existing_shm_kept_with_warnings(policies):
    pod = k.pod(
        [k.container("trainer", volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}])],
        volumes=[{"name": "shm", "emptyDir": {}}],
    )
    resp, out, d = mutate_twice(pod, ML, policies)
    assert [v for v in out["spec"]["volumes"] if "emptyDir" in v] == [{"name": "shm", "emptyDir": {}}]
    assert any("not a memory-backed" in w for w in resp["warnings"])
    pod = k.pod(
        [k.container("trainer", volumeMounts=[{"name": "shm", "mountPath": "/dev/shm/"}])],
        volumes=[{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
    )
    resp, out, d = mutate_twice(pod, ML, policies)
    assert any("smaller than the 64Gi" in w for w in resp["warnings"])


def test_ipc_lock_added_once(policies):
    pod = k.pod([k.container("trainer", securityContext={"capabilities": {"add": ["SYS_PTRACE"], "drop": ["ALL"]}})])
    resp, out, d = mutate_twice(pod, ML, policies)
    caps = out["spec"]["containers"][0]["securityContext"]["capabilities"]
    assert caps == {"add": ["SYS_PTRACE", "IPC_LOCK"], "drop": ["ALL"]}
    pod = k.pod([k.container("trainer", securityContext={"capabilities": {"add": ["CAP_IPC_LOCK"]}})])
    resp, out, d = mutate_twice(pod, ML, policies)
    assert out["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["CAP_IPC_LOCK"]


def test_enforced_variable_replaces_user_value_with_warning(policies):
    # NCCL compares NCCL_NET case-insensitively (strcasecmp): `ib` is IB, kept without a word
    pod = k.pod([k.container("trainer", env=[{"name": "NCCL_NET", "value": "ib"}])])
    resp, out, d = mutate_twice(pod, ML, policies)
    assert env_of(out["spec"]["containers"][0])["NCCL_NET"] == "ib"
    assert not any("NCCL_NET" in w for w in resp.get("warnings", []))
    # a value the webhook cannot see is replaced, with a warning
    source = {"configMapKeyRef": {"name": "nccl", "key": "net"}}
    pod = k.pod([k.container("trainer", env=[{"name": "NCCL_NET", "valueFrom": source}])])
    resp, out, d = mutate_twice(pod, ML, policies)
    assert env_of(out["spec"]["containers"][0])["NCCL_NET"] == "IB"
    assert any(
        "NCCL_NET is enforced by policy erdma: a valueFrom source replaced by 'IB'" in w for w in resp["warnings"]
    )


def test_multi_rail_device_count_follows_gpus(policies):
    from webhook.policy.load import load_texts

    text = (
        open("policies/erdma.yaml")
        .read()
        .replace("name: erdma", "name: rails")
        .replace("perGpu: false", "perGpu: true")
    )
    ps, errors = load_texts([("rails.yaml", text)])
    assert errors == []
    resp, out, d = mutate_twice(k.pod([k.container("trainer", gpus=4)]), ML, ps)
    assert out["spec"]["containers"][0]["resources"]["limits"]["aliyun/erdma"] == "4"


# -- SR-IOV with Multus -------------------------------------------------------------------------


def test_sriov_adds_network_and_resource_from_attachment(policies):
    state = FileClusterState([AI], [NAD])
    pod = k.pod([k.container("trainer")], namespace="ai-training")
    resp, out, d = mutate_twice(pod, AI, policies, state)
    assert out["metadata"]["annotations"][keys.MULTUS_NETWORKS] == "rdma-network@net1"
    c = out["spec"]["containers"][0]
    assert c["resources"]["limits"]["example.com/rdma_vf"] == "1"
    assert "openshift.io/mellanoxrdma" not in c["resources"]["limits"]
    assert env_of(c)["NCCL_SOCKET_IFNAME"] == "net1"


# Multus names an attachment without an interface net<position> and refuses a duplicate name, so
# the policy's network never takes a name an existing attachment has, and NCCL_SOCKET_IFNAME
# names the interface the pod really gets.
@pytest.mark.parametrize(
    "existing,expected,ifname",
    [
        ("other-net", "other-net,rdma-network@net2", "net2"),
        ("other-net, ai-training/rdma-network", "other-net, ai-training/rdma-network", "net2"),
        ("rdma-network@net1", "rdma-network@net1", "net1"),
        ("rdma-network@rdma0", "rdma-network@rdma0", "rdma0"),
        ("other-net@net1", "other-net@net1,rdma-network@net2", "net2"),
        ('[{"name":"other-net"}]', '[{"name":"other-net"},{"name":"rdma-network","interface":"net2"}]', "net2"),
        (
            '[{"name":"other-net","interface":"net2"}]',
            '[{"name":"other-net","interface":"net2"},{"name":"rdma-network","interface":"net1"}]',
            "net1",
        ),
        (
            '[{"name":"rdma-network","namespace":"ai-training"}]',
            '[{"name":"rdma-network","namespace":"ai-training"}]',
            "net1",
        ),
    ],
)
def test_multus_annotation_merge(policies, existing, expected, ifname):
    state = FileClusterState([AI], [NAD])
    pod = k.pod([k.container("trainer")], namespace="ai-training", annotations={keys.MULTUS_NETWORKS: existing})
    resp, out, d = mutate_twice(pod, AI, policies, state)
    assert out["metadata"]["annotations"][keys.MULTUS_NETWORKS] == expected
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == ifname


def test_multus_duplicate_interface_names_denied(policies):
    state = FileClusterState([AI], [NAD])
    pod = k.pod([k.container("trainer")], namespace="ai-training", annotations={keys.MULTUS_NETWORKS: "a,b@net1"})
    d = decide(pod, AI, policies, state)
    assert d.outcome == "denied" and [f.rule for f in d.denials] == ["multus-annotation"]
    assert "'net1'" in d.denials[0].message


def test_seed_lws_worker_keeps_hand_written_lines(policies):
    state = FileClusterState([AI], [NAD])
    pod = k.lws_worker()
    resp, out, d = mutate_twice(pod, AI, policies, state)
    c = out["spec"]["containers"][0]
    # the user's own resource stays; the attachment's is added beside it
    assert c["resources"]["limits"]["openshift.io/mellanoxrdma"] == "1"
    assert c["resources"]["limits"]["example.com/rdma_vf"] == "1"
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert [v["name"] for v in out["spec"]["volumes"] if "emptyDir" in v] == ["dshm"]
    assert out["metadata"]["annotations"][keys.MULTUS_NETWORKS] == "rdma-network"


def test_missing_attachment_and_attachment_without_resource_denied(policies):
    pod = k.pod([k.container("trainer")], namespace="ai-training")
    resp, _, _ = respond(pod, AI, policies, FileClusterState([AI], []))
    assert (
        not resp["allowed"]
        and "NetworkAttachmentDefinition ai-training/rdma-network does not exist" in resp["status"]["message"]
    )
    from webhook.policy.load import load_texts

    text = open("policies/sriov-roce.yaml").read().replace("    resource: openshift.io/mellanoxrdma\n", "")
    assert "mellanoxrdma" not in text.split("networks:")[1].split("shm:")[0]
    ps, errors = load_texts([("s.yaml", text)])
    assert errors == []
    bare = copy.deepcopy(NAD)
    del bare["metadata"]["annotations"]
    resp, _, _ = respond(pod, AI, ps, FileClusterState([AI], [bare]))
    assert not resp["allowed"] and "names no device resource" in resp["status"]["message"]


def test_host_network_denied_with_multus(policies):
    pod = k.pod([k.container("trainer")], namespace="ai-training", hostNetwork=True)
    resp, _, _ = respond(pod, AI, policies, FileClusterState([AI], [NAD]))
    assert not resp["allowed"] and "[host-network]" in resp["status"]["message"]


def test_bad_json_network_annotation_denied(policies):
    pod = k.pod([k.container("trainer")], namespace="ai-training", annotations={keys.MULTUS_NETWORKS: "[{oops"})
    resp, _, _ = respond(pod, AI, policies, FileClusterState([AI], [NAD]))
    assert not resp["allowed"] and "nor a JSON list of network objects" in resp["status"]["message"]
    assert "[multus-annotation]" in resp["status"]["message"]


# -- who is considered, and which policy -------------------------------------------------------


def test_unlabelled_pod_and_other_values_skipped(policies):
    for labels in ({}, {keys.POD_INJECT: "yes"}, {keys.POD_INJECT: "True"}):
        pod = k.pod([k.container("trainer")], inject=False, labels=labels)
        resp, out, d = respond(pod, ML, policies)
        assert resp["allowed"] and "patch" not in resp and d.outcome == "skipped"


def test_namespace_without_opt_in_changes_nothing(policies):
    plain = Namespace("default", {"kubernetes.io/metadata.name": "default"})
    pod = k.pod([k.container("trainer")], namespace="default", annotations={keys.POD_POLICY: "erdma"})
    resp, out, d = respond(pod, plain, policies)
    assert resp["allowed"] and "patch" not in resp and d.outcome == "skipped"


def test_only_create_is_considered(policies):
    pod = k.pod([k.container("trainer")])
    code, doc, d, _ = review.handle(
        k.body(k.admission_review(pod, operation="UPDATE")), policies, {"ml-training": ML}.get, None
    )
    assert doc["response"]["allowed"] and "patch" not in doc["response"]


def test_unknown_namespace_denied_for_labelled_pod(policies):
    pod = k.pod([k.container("trainer")], namespace="ghost")
    code, doc, d, _ = review.handle(k.body(k.admission_review(pod)), policies, lambda n: None, None)
    assert not doc["response"]["allowed"] and "[namespace-unknown]" in doc["response"]["status"]["message"]


def test_policy_choice(policies):
    # pod annotation beats namespace label
    pod = k.pod([k.container("trainer")], namespace="ai-training", annotations={keys.POD_POLICY: "erdma"})
    resp, out, d = mutate_twice(pod, AI, policies, FileClusterState([AI], [NAD]))
    assert d.policy == "erdma"
    # namespace label beats the selector default
    pod = k.pod([k.container("trainer")], namespace="ai-training")
    resp, out, d = mutate_twice(pod, AI, policies, FileClusterState([AI], [NAD]))
    assert d.policy == "sriov-roce"
    # otherwise the highest-priority matching policy
    resp, out, d = mutate_twice(k.pod([k.container("trainer")]), ML, policies)
    assert d.policy == "erdma"


def test_unknown_or_forbidden_policy_denied(policies):
    pod = k.pod([k.container("trainer")], annotations={keys.POD_POLICY: "fast-please"})
    resp, _, _ = respond(pod, ML, policies)
    assert (
        not resp["allowed"]
        and "names no policy (known: coreweave-ib, efa, efa-dra, erdma, gb200-roce, gke, gke-gib, gke-tcpxo, "
        "ib-shared, nd-infiniband, oke-roce-host, roce-dranet, roce-dranet-aligned, sriov-roce, sriov-roce-8rail)"
        in resp["status"]["message"]
    )
    from webhook.policy.load import load_texts

    text = (
        open("policies/erdma.yaml")
        .read()
        .replace("namespaceSelector: {}", "namespaceSelector: {matchLabels: {tier: gold}}")
    )
    ps, _ = load_texts([("e.yaml", text)])
    pod = k.pod([k.container("trainer")], annotations={keys.POD_POLICY: "erdma"})
    resp, _, _ = respond(pod, ML, ps)
    assert not resp["allowed"] and "may not be used in namespace 'ml-training'" in resp["status"]["message"]
    # no annotation, no label, no selector match: deny, never a silent pass
    resp, _, _ = respond(k.pod([k.container("trainer")]), ML, ps)
    assert not resp["allowed"] and "no policy applies" in resp["status"]["message"]
    assert keys.POD_POLICY in resp["status"]["message"]


def test_no_gpu_container_allowed_unchanged_with_warning(policies):
    """A labelled pod with neither a GPU nor an MPI launcher (an MPI launcher gets the block its
    ranks need: tests/core/test_ranks.py)."""
    pod = k.pod([k.container("data-prep", gpus=None, command=["python"], args=["prepare.py"])])
    resp, out, d = respond(pod, ML, policies)
    assert resp["allowed"] and "patch" not in resp
    assert any("no container requests a GPU" in w for w in resp["warnings"])


# -- the TCP-fallback rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "env,fragment",
    [
        ([{"name": "NCCL_IB_DISABLE", "value": "1"}], "NCCL_IB_DISABLE='1' turns NCCL's IB/RoCE transport off"),
        ([{"name": "NCCL_IB_DISABLE", "value": "0x1"}], "NCCL_IB_DISABLE='0x1'"),
        ([{"name": "NCCL_IB_DISABLE", "value": "-1"}], "NCCL_IB_DISABLE='-1'"),
        ([{"name": "NCCL_NET", "value": "socket"}], "NCCL_NET='socket' forces NCCL's TCP socket transport"),
        (
            [{"name": "NCCL_NET", "value": "AWS Libfabric"}],
            "names a transport that the erdma policy's erdma fabric does not provide",
        ),
        ([{"name": "NCCL_IB_HCA", "value": "mlx5"}], "NCCL_IB_HCA='mlx5' selects none of"),
        ([{"name": "NCCL_IB_HCA", "value": "^erdma,rocep"}], "NCCL_IB_HCA='^erdma,rocep' selects none of"),
        ([{"name": "NCCL_IB_HCA", "value": "=erdma"}], "NCCL_IB_HCA='=erdma' selects none of"),
        ([{"name": "MODE", "value": "Socket"}, {"name": "NCCL_NET", "value": "$(MODE)"}], "NCCL_NET='Socket'"),
    ],
)
def test_env_fallback_denied(policies, env, fragment):
    resp, _, d = respond(k.pod([k.container("trainer", env=env)]), ML, policies)
    assert not resp["allowed"] and resp["status"]["code"] == 403
    msg = resp["status"]["message"]
    assert fragment in msg and "container 'trainer'" in msg and "[env-fallback]" in msg


@pytest.mark.parametrize(
    "env",
    [
        [{"name": "NCCL_IB_DISABLE", "value": "0"}],
        [{"name": "NCCL_IB_DISABLE", "value": "no"}],
        [{"name": "NCCL_NET", "value": "ib"}],
        [{"name": "NCCL_IB_HCA", "value": "erdma_0:1"}],
        [{"name": "NCCL_IB_HCA", "value": "^mlx5"}],
        [{"name": "NCCL_NET", "value": "$$(MODE)"}, {"name": "NCCL_NET", "value": "IB"}],
        [{"name": "NCCL_NET_GDR_LEVEL", "value": "SYS"}],
    ],
)
def test_env_that_keeps_rdma_allowed(policies, env):
    resp, out, d = mutate_twice(k.pod([k.container("trainer", env=env)]), ML, policies)


@pytest.mark.parametrize(
    "command,args",
    [
        (["/bin/bash", "-c"], ["export NCCL_IB_DISABLE=1\ntorchrun train.py"]),
        (["sh", "-c", "NCCL_NET=Socket torchrun train.py"], None),
        (["env", "NCCL_NET=Socket", "python", "train.py"], None),
        (["bash", "-c", 'export NCCL_NET="socket" && python train.py'], None),
        (["python", "-c", "import os; os.environ['NCCL_IB_DISABLE'] = '1'; import train"], None),
        (["torchrun"], ["--nproc_per_node=8", "--no-python", "bash", "-c", "NCCL_IB_HCA=mlx5_0 python train.py"]),
        (["sh", "-c", "NCCL_NET=$(TRANSPORT) torchrun train.py"], None),  # kubelet expands $(TRANSPORT)
    ],
)
def test_command_fallback_denied(policies, command, args):
    pod = k.pod([k.container("trainer", command=command, args=args, env=[{"name": "TRANSPORT", "value": "Socket"}])])
    resp, _, _ = respond(pod, ML, policies)
    assert not resp["allowed"] and "[command-fallback]" in resp["status"]["message"]


def test_mpirun_in_launcher_denied(policies):
    pod = k.mpijob_launcher(
        args=["-np", "16", "-x", "NCCL_IB_DISABLE=1", "-x", "NCCL_DEBUG=INFO", "python", "train.py"]
    )
    resp, _, _ = respond(pod, ML, policies)
    assert not resp["allowed"]
    msg = resp["status"]["message"]
    assert "container 'launcher'" in msg and "mpirun -x exports it to every rank" in msg


@pytest.mark.parametrize(
    "text",
    [
        "export NCCL_NET_GDR_LEVEL=SYS",
        "MY_NCCL_NET=Socket run",
        "export NCCL_IB_DISABLE=$FLAG",
        "NCCL_IB_DISABLE=0 torchrun",
        "echo NCCL_NET=IB",
        "echo NCCL_NET=Socket",
        "torchrun train.py NCCL_IB_HCA=mlx5_0",
    ],
)  # an argument of a program sets nothing
def test_commands_that_keep_rdma_allowed(policies, text):
    mutate_twice(k.pod([k.container("trainer", command=["bash", "-c", text])]), ML, policies)


def test_ipc_lock_drop_denied_but_drop_all_fine(policies):
    pod = k.pod([k.container("trainer", securityContext={"capabilities": {"drop": ["IPC_LOCK"]}})])
    resp, _, _ = respond(pod, ML, policies)
    assert not resp["allowed"] and "[ipc-lock-dropped]" in resp["status"]["message"]
    mutate_twice(k.pod([k.container("trainer", securityContext={"capabilities": {"drop": ["ALL"]}})]), ML, policies)


@pytest.mark.parametrize("level,denied", [("baseline", True), ("restricted", True), ("privileged", False)])
def test_pod_security_levels(policies, level, denied):
    ns = Namespace("psa", {keys.NS_INJECTION: "enabled", keys.PSA_ENFORCE: level})
    resp, _, _ = respond(k.pod([k.container("trainer")], namespace="psa"), ns, policies)
    assert resp["allowed"] is not denied
    if denied:
        assert "[pod-security]" in resp["status"]["message"] and level in resp["status"]["message"]


def test_every_reason_reported(policies):
    c = k.container(
        "trainer",
        env=[{"name": "NCCL_IB_DISABLE", "value": "1"}, {"name": "NCCL_IB_HCA", "value": "mlx5"}],
        command=["bash", "-c", "export NCCL_NET=Socket; python t.py"],
        securityContext={"capabilities": {"drop": ["IPC_LOCK"]}},
        limits={"aliyun/erdma": "0"},
    )
    ns = Namespace("psa", {keys.NS_INJECTION: "enabled", keys.PSA_ENFORCE: "baseline"})
    resp, _, d = respond(k.pod([c], namespace="psa"), ns, policies)
    rules = {f.rule for f in d.denials}
    assert rules == {"env-fallback", "command-fallback", "ipc-lock-dropped", "pod-security", "device-zero"}
    assert len(d.denials) == 6
    for f in d.denials:
        assert f"[{f.rule}]" in resp["status"]["message"]


# -- warnings -----------------------------------------------------------------------------------


def test_warnings(policies):
    c = k.container(
        "trainer",
        env=[
            {"name": "NCCL_DEBUG", "value": "TRACE"},
            {"name": "NCCL_IB_HCA", "valueFrom": {"configMapKeyRef": {"name": "n", "key": "hca"}}},
        ],
        envFrom=[{"prefix": "NCCL_", "configMapRef": {"name": "nccl-tuning"}}],
        securityContext={"runAsNonRoot": True, "runAsUser": 1000},
    )
    resp, out, d = mutate_twice(k.pod([c]), ML, policies)
    text = "\n".join(resp["warnings"])
    assert "NCCL_DEBUG=TRACE" in text and "envFrom" in text and "NCCL_IB_HCA come from valueFrom" in text
    assert "non-root" in text
    assert all(len(w) <= 256 for w in resp["warnings"])


def test_pod_level_run_as_user_warns(policies):
    resp, _, _ = mutate_twice(k.pod([k.container("trainer")], securityContext={"runAsUser": 1000}), ML, policies)
    assert any("non-root" in w for w in resp["warnings"])


def test_decision_does_not_modify_its_input(policies):
    pod = k.pytorchjob_worker()
    before = copy.deepcopy(pod)
    decide(pod, ML, policies)
    assert pod == before


# -- operator pod shapes ------------------------------------------------------------------------


@pytest.mark.parametrize("make", [k.pytorchjob_worker, k.mpijob_worker, k.jobset_worker])
def test_operator_pod_shapes(policies, make):
    pod = make()
    resp, out, d = mutate_twice(pod, ML, policies)
    assert d.outcome == "mutated" and d.policy == "erdma"
    # operator-set labels and env are kept; the webhook adds its own label only
    assert out["metadata"]["labels"] == {**pod["metadata"]["labels"], keys.APPLIED_POLICY_LABEL: "erdma"}
    c0, o0 = pod["spec"]["containers"][0], out["spec"]["containers"][0]
    assert o0["env"][: len(c0.get("env", []))] == c0.get("env", [])


@pytest.mark.parametrize(
    "text, settings",
    [
        ("export NCCL_NET=Socket", [("NCCL_NET", "Socket")]),
        ('export NCCL_NET=Soc"ket"', [("NCCL_NET", "Socket")]),  # the shell joins quoted parts of a word
        ("export NCCL_NET=So'ck'et", [("NCCL_NET", "Socket")]),
        ("NCCL_IB_DISABLE=\\1 torchrun", [("NCCL_IB_DISABLE", "1")]),  # a backslash escapes the next character
        ("export NCCL_NET='Socket'", [("NCCL_NET", "Socket")]),
        ('export NCCL_NET=So"ck', [("NCCL_NET", 'So"ck')]),  # unbalanced: kept as written
        ("export NCCL_IB_DISABLE=$FLAG", []),
        ("echo hello", []),
    ],
)
def test_command_settings_read_words_as_the_shell_does(text, settings):
    from webhook.core.subject import command_settings

    # what the process started after the assignment sees
    assert list(command_settings(text + "\ntorchrun train.py")) == settings
