"""Every fabric of the shipped policy library, on pods shaped like the public examples of that
fabric (written here, modelled on NVIDIA network-operator's RDMA test pod, the EKS EFA
MPIJob/nccl-tests samples, OCI's OKE host-network NCCL test, eight-rail PyTorchJobs and a DRA
NIC claim), through the decision and through the served webhook over TLS with the patch
applied by jsonpatch; plus the Multus naming property: whatever networks a pod lists, the
patched pod's interface names are unique and NCCL is told an interface the pod has.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import textwrap

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kube_objects as k
from conftest import CLI, ROOT
from webhook.core import keys
from webhook.admission import review
from webhook.cluster.state import FileClusterState
from webhook.policy.load import load_dir, load_texts

STATE = FileClusterState.from_file(str(ROOT / "examples" / "cluster-state.yaml"))
RAILS, IB, EKS, OKE, ML = (
    STATE.namespace(n) for n in ("llm-rails", "ib-training", "eks-training", "oke-training", "ml-training")
)


def respond(pod, ns, policies, state=STATE):
    body = k.body(k.admission_review(pod, namespace=ns.name))
    status, doc, decision, _ = review.handle(body, policies, state.namespace, state.attachments())
    assert status == 200
    resp = doc["response"]
    patched = copy.deepcopy(pod)
    if "patch" in resp:
        patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
    return resp, patched, decision


def mutated(pod, ns, policies, state=STATE):
    resp, out, d = respond(pod, ns, policies, state)
    assert resp["allowed"], resp.get("status")
    again, same, _ = respond(out, ns, policies, state)
    assert again["allowed"] and "patch" not in again and same == out, "a second pass must change nothing"
    return resp, out


def env_of(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def interfaces(annotation: str) -> list[str]:
    """Interface names as Multus gives them (explicit, else net<position>), read independently."""
    text = annotation.strip()
    if text.startswith("["):
        return [e.get("interface") or f"net{i + 1}" for i, e in enumerate(json.loads(text))]
    parts = [p.strip() for p in text.split(",") if p.strip()]
    return [p.split("@", 1)[1] if "@" in p else f"net{i + 1}" for i, p in enumerate(parts)]


# -- NVIDIA network-operator: RDMA shared device plugin, a pod that brings its own network ------


def rdma_test_pod(**kw):
    """network-operator's RDMA test pod: a macvlan/IPoIB network of its own and the shared device."""
    c = k.container(
        "rdma-test",
        image="mellanox/rping-test",
        limits={"rdma/rdma_shared_device_a": "1"},
        securityContext={"capabilities": {"add": ["IPC_LOCK"]}},
        **kw,
    )
    return k.pod([c], namespace="ib-training", annotations={keys.MULTUS_NETWORKS: "rdma-net-ipam"})


def test_shared_device_pod_keeps_its_network_and_gets_no_second_device(policies):
    resp, out = mutated(rdma_test_pod(), IB, policies)
    c = out["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}
    assert out["metadata"]["annotations"][keys.MULTUS_NETWORKS] == "rdma-net-ipam"  # no network of ours
    assert env_of(c)["NCCL_NET"] == "IB" and env_of(c)["NCCL_IB_HCA"] == "mlx5"
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]


def test_equivalent_resource_counts_as_the_device(policies):
    pod = k.pod([k.container("t", limits={"rdma/ib": "1"})], namespace="ib-training")
    resp, out = mutated(pod, IB, policies)
    assert "rdma/rdma_shared_device_a" not in out["spec"]["containers"][0]["resources"]["limits"]


def test_other_fabric_device_is_denied_naming_the_policy_that_fits(policies):
    pod = rdma_test_pod()
    pod["metadata"]["namespace"] = "ml-training"  # erdma by default there
    resp, _, d = respond(pod, ML, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["fabric-mismatch"]
    msg = resp["status"]["message"]
    assert "requests rdma/rdma_shared_device_a" in msg and "policy erdma provides aliyun/erdma" in msg
    assert f"select policy ib-shared with the annotation {keys.POD_POLICY}: ib-shared" in msg


# -- AWS EFA ------------------------------------------------------------------------------------


def efa_worker(env=None, efa="32"):
    """An EKS nccl-tests MPIJob worker on p5.48xlarge: 8 GPUs, 32 EFA devices, hugepages."""
    c = k.container(
        "worker",
        image="public.ecr.aws/hpc-cloud/nccl-tests:latest",
        env=env,
        limits={"vpc.amazonaws.com/efa": efa, "hugepages-2Mi": "5120Mi", "memory": "32000Mi"},
        command=["/usr/sbin/sshd", "-De"],
    )
    return k.pod(
        [c],
        namespace="eks-training",
        generate_name="nccl-tests-efa-worker-",
        labels={"training.kubeflow.org/job-role": "worker"},
    )


def test_efa_worker_keeps_its_32_devices_and_gets_libfabric_pinned(policies):
    resp, out = mutated(efa_worker(), EKS, policies)
    c = out["spec"]["containers"][0]
    assert c["resources"]["limits"]["vpc.amazonaws.com/efa"] == "32"  # the user's count stays
    env = env_of(c)
    assert env["FI_PROVIDER"] == "efa" and env["NCCL_NET"] == "AWS Libfabric" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert "NCCL_IB_HCA" not in env


def test_efa_device_added_per_gpu():
    c = k.container("worker", gpus=4)
    ps, errors = load_dir(ROOT / "policies")
    resp, out = mutated(k.pod([c], namespace="eks-training"), EKS, ps)
    assert out["spec"]["containers"][0]["resources"]["limits"]["vpc.amazonaws.com/efa"] == "16"


@pytest.mark.parametrize(
    "name,value,rule",
    [
        ("FI_PROVIDER", "tcp", "env-fallback"),
        ("FI_PROVIDER", "sockets", "env-fallback"),
        ("FI_PROVIDER", "^efa", "env-fallback"),
        ("NCCL_NET_PLUGIN", "none", "env-fallback"),
        ("NCCL_NET", "Socket", "env-fallback"),
        ("NCCL_NET", "IB", "env-fallback"),
    ],
)
def test_efa_fallback_signatures_deny(policies, name, value, rule):
    resp, _, d = respond(efa_worker(env=[{"name": name, "value": value}]), EKS, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == [rule], resp
    assert f"{name}={value!r}" in resp["status"]["message"]


@pytest.mark.parametrize(
    "name,value",
    [
        ("FI_PROVIDER", "efa"),
        ("FI_PROVIDER", "efa,shm"),
        ("FI_PROVIDER", "^tcp"),
        ("NCCL_NET", "ofi"),
        ("NCCL_NET", "libfabric"),
        ("NCCL_NET_PLUGIN", "ofi"),
        ("NCCL_IB_DISABLE", "1"),
    ],
)  # no IB transport on EFA to turn off
def test_efa_settings_that_keep_rdma_pass(policies, name, value):
    resp, out, d = respond(efa_worker(env=[{"name": name, "value": value}]), EKS, policies)
    assert resp["allowed"], resp.get("status")


def test_efa_device_rdma_off_is_a_warning_not_a_denial(policies):
    resp, out = mutated(efa_worker(env=[{"name": "FI_EFA_USE_DEVICE_RDMA", "value": "0"}]), EKS, policies)
    assert env_of(out["spec"]["containers"][0])["FI_EFA_USE_DEVICE_RDMA"] == "0"
    assert any("FI_EFA_USE_DEVICE_RDMA='0'" in w for w in resp["warnings"])


def test_efa_pod_under_erdma_policy_is_denied_naming_efa(policies):
    pod = efa_worker()
    pod["metadata"]["annotations"] = {keys.POD_POLICY: "erdma"}
    resp, _, _ = respond(pod, EKS, policies)
    assert not resp["allowed"]
    assert "requests vpc.amazonaws.com/efa" in resp["status"]["message"]
    assert f"select policy efa with the annotation {keys.POD_POLICY}: efa" in resp["status"]["message"]


# -- OCI OKE: RoCE through the host network ----------------------------------------------------


def oke_worker(host_network=True, privileged=True, mount=True):
    c = k.container(
        "mpi-worker",
        image="iad.ocir.io/hpc/nccl-tests:cuda-13",
        command=["/bin/bash", "-c", "sshd -D -p 2222"],
        securityContext={"privileged": True, "capabilities": {"add": ["IPC_LOCK"]}} if privileged else {},
        volumeMounts=([{"name": "devinf", "mountPath": "/dev/infiniband"}] if mount else [])
        + [{"name": "shm", "mountPath": "/dev/shm"}],
    )
    extra = {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"} if host_network else {}
    pod = k.pod(
        [c],
        namespace="oke-training",
        volumes=[
            {"name": "devinf", "hostPath": {"path": "/dev/infiniband"}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}},
        ],
        **extra,
    )
    if host_network:
        pod["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"
    return pod


def test_oke_host_network_worker_gets_the_nccl_block_and_no_device(policies):
    resp, out = mutated(oke_worker(), OKE, policies)
    c = out["spec"]["containers"][0]
    assert set(c["resources"]["limits"]) == {"nvidia.com/gpu"}
    env = env_of(c)
    assert (
        env["NCCL_NET"] == "IB" and env["NCCL_IB_HCA"].startswith("=mlx5_0,mlx5_1,mlx5_3") and env["NCCL_IB_TC"] == "41"
    )
    assert out["spec"]["hostNetwork"] is True and "hostPath" not in json.dumps(
        [v for v in out["spec"]["volumes"] if v not in oke_worker()["spec"]["volumes"]]
    )


def test_oke_without_host_network_denied(policies):
    resp, _, d = respond(oke_worker(host_network=False), OKE, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["host-network"]
    assert "set hostNetwork: true" in resp["status"]["message"]


def test_oke_without_host_devices_denied(policies):
    resp, _, d = respond(oke_worker(privileged=False, mount=False), OKE, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["host-rdma-devices"]
    resp, _, _ = respond(oke_worker(privileged=False, mount=True), OKE, policies)  # the mount alone is enough
    assert resp["allowed"], resp.get("status")


@pytest.mark.parametrize(
    "security,path,allowed",
    [
        ({"privileged": True}, None, True),  # privileged alone sees the host's devices
        ({"privileged": False}, None, False),
        ({"privileged": "true"}, None, False),  # only the boolean counts
        ({}, "/dev/infiniband/", True),
        ({}, "/dev/infinibandX", False),
        ({}, "/dev/infiniband ", False),
    ],
)
def test_host_devices_are_seen_privileged_or_through_the_mount(policies, security, path, allowed):
    pod = oke_worker(privileged=False, mount=False)
    c = pod["spec"]["containers"][0]
    c["securityContext"] = {**security, "capabilities": {"add": ["IPC_LOCK"]}}
    if path is not None:
        c["volumeMounts"].insert(0, {"name": "devinf", "mountPath": path})
    resp, _, d = respond(pod, OKE, policies)
    assert resp["allowed"] is allowed, resp.get("status")
    assert [(f.rule, f.container) for f in d.denials] == ([] if allowed else [("host-rdma-devices", "mpi-worker")])


# -- eight rails through Multus -----------------------------------------------------------------


def rails_worker(annotation=None):
    pod = k.pytorchjob_worker()
    pod["metadata"]["namespace"] = "llm-rails"
    if annotation is not None:
        pod["metadata"].setdefault("annotations", {})[keys.MULTUS_NETWORKS] = annotation
    for c in pod["spec"]["containers"]:
        c["env"] = [e for e in c.get("env", []) if e["name"] != "NCCL_SOCKET_IFNAME"]
    return pod


def test_eight_rails_each_with_its_network_and_device(policies):
    resp, out = mutated(rails_worker(), RAILS, policies)
    ann = out["metadata"]["annotations"][keys.MULTUS_NETWORKS]
    assert ann == ",".join(f"rdma-rail-{i}@net{i + 1}" for i in range(8))
    limits = out["spec"]["containers"][0]["resources"]["limits"]
    assert all(limits[f"nvidia.com/rdma_rail_{i}"] == "1" for i in range(8))
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net1"


@pytest.mark.parametrize(
    "existing,first",
    [
        ("macvlan-conf", "net2"),
        (",".join(f"roce-{i}" for i in range(16)), "net17"),  # an OCI/CoreWeave job's sixteen unnamed networks
        ("rdma-rail-0@ib0", "ib0"),  # a rail the pod lists already is reused with its name
        ('[{"name":"macvlan-conf","interface":"net1"},{"name":"other","interface":"net3"}]', "net2"),
    ],
)
def test_rails_never_collide_with_what_the_pod_lists(policies, existing, first):
    resp, out = mutated(rails_worker(existing), RAILS, policies)
    names = interfaces(out["metadata"]["annotations"][keys.MULTUS_NETWORKS])
    assert len(names) == len(set(names)) and len(names) == len(interfaces(existing)) + 8 - (
        1 if "rail-0" in existing else 0
    )
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == first


# -- DRA --------------------------------------------------------------------------------------

DRA_POLICY = textwrap.dedent("""\
    apiVersion: rdma-webhook.io/v1alpha2
    kind: RdmaPolicy
    name: dranet
    description: a RoCE NIC per pod claimed through DRA
    namespaceSelector: {}
    fabric: {kind: roce, transport: ib-verbs, ncclNet: [IB], hcaDevices: ["mlx5_[0-7]"]}
    claim: {name: rdma-nic, template: rdma-nic-template, equivalentTemplates: [rdma-nic-x8]}
    shm: {sizeLimit: 64Gi}
    nccl:
      NCCL_NET: {value: IB, enforce: true}
    """)


def dra_policies():
    texts = [(str(p), p.read_text()) for p in sorted((ROOT / "policies").glob("*.yaml"))] + [
        ("dranet.yaml", DRA_POLICY)
    ]
    ps, errors = load_texts(texts)
    assert errors == []
    return ps


def test_dra_claim_added_to_pod_and_targets():
    pod = k.pod([k.container("trainer"), k.container("sidecar", gpus=None)], annotations={keys.POD_POLICY: "dranet"})
    resp, out = mutated(pod, ML, dra_policies())
    assert out["spec"]["resourceClaims"] == [{"name": "rdma-nic", "resourceClaimTemplateName": "rdma-nic-template"}]
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": "rdma-nic"}]
    assert "claims" not in out["spec"]["containers"][1]["resources"]


def test_dra_existing_claim_of_the_fabric_reused():
    pod = k.pod(
        [k.container("trainer", resources={"limits": {"nvidia.com/gpu": "8"}, "claims": [{"name": "nic"}]})],
        annotations={keys.POD_POLICY: "dranet"},
        resourceClaims=[{"name": "nic", "resourceClaimTemplateName": "rdma-nic-x8"}],
    )
    resp, out = mutated(pod, ML, dra_policies())
    assert out["spec"]["resourceClaims"] == [{"name": "nic", "resourceClaimTemplateName": "rdma-nic-x8"}]
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": "nic"}]


def test_dra_claim_under_device_plugin_policy_denied():
    pod = k.pod(
        [k.container("trainer")], resourceClaims=[{"name": "nic", "resourceClaimTemplateName": "rdma-nic-template"}]
    )
    resp, _, d = respond(pod, ML, dra_policies())
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["fabric-mismatch"]
    assert "select policy dranet" in resp["status"]["message"]


# -- /dev/shm and interfaces ------------------------------------------------------------------


def test_host_dev_shm_is_memory_and_not_warned(policies):
    c = k.container("trainer", volumeMounts=[{"name": "host-shm", "mountPath": "/dev/shm"}])
    pod = k.pod([c], volumes=[{"name": "host-shm", "hostPath": {"path": "/dev/shm", "type": "Directory"}}])
    resp, out = mutated(pod, ML, policies)
    assert not any("/dev/shm" in w for w in resp.get("warnings", []))
    assert [m["mountPath"] for m in out["spec"]["containers"][0]["volumeMounts"]].count("/dev/shm") == 1


def test_socket_ifname_naming_a_missing_interface_is_warned(policies):
    pod = k.pod([k.container("trainer", env=[{"name": "NCCL_SOCKET_IFNAME", "value": "net1"}])])
    resp, _ = mutated(pod, ML, policies)  # erdma: no Multus network, so no net1
    assert any("NCCL_SOCKET_IFNAME='net1' names no interface" in w for w in resp["warnings"])
    pod = k.pod([k.container("trainer", env=[{"name": "NCCL_SOCKET_IFNAME", "value": "eth"}])])
    resp, _ = mutated(pod, ML, policies)
    assert not any("NCCL_SOCKET_IFNAME" in w for w in resp.get("warnings", []))


# -- the Multus naming property ----------------------------------------------------------------

_NAME = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
_IFACE = st.one_of(st.none(), st.from_regex(r"(net[0-9]{1,2}|ib[0-9])", fullmatch=True))
_ENTRY = st.tuples(_NAME, _IFACE)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(_ENTRY, max_size=12), as_json=st.booleans())
def test_any_existing_list_gives_unique_interfaces_and_a_real_socket_ifname(policies, entries, as_json):
    seen: list[str] = []
    for i, (_, iface) in enumerate(entries):  # only lists Multus itself would accept
        name = iface or f"net{i + 1}"
        if name in seen:
            return
        seen.append(name)
    if as_json:
        value = json.dumps([{"name": n, **({"interface": i} if i else {})} for n, i in entries])
    else:
        value = ",".join(f"{n}@{i}" if i else n for n, i in entries)
    for ns in (RAILS, STATE.namespace("ai-training")):
        pod = rails_worker(value if entries else None)
        pod["metadata"]["namespace"] = ns.name
        resp, out = mutated(pod, ns, policies)
        names = interfaces(out["metadata"]["annotations"][keys.MULTUS_NETWORKS])
        assert len(names) == len(set(names)) and "eth0" not in names
        assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] in names


# -- v1alpha1 files keep working; `policy migrate` ---------------------------------------------

V1 = textwrap.dedent("""\
    apiVersion: rdma-webhook.io/v1alpha1
    kind: RdmaPolicy
    name: old-sriov
    description: a v1alpha1 file as written before v1alpha2
    namespaceSelector: {}
    fabric: {kind: sriov, ncclNet: [IB], hcaDevices: ["mlx5_[0-7]"]}
    network: {name: rdma-network, interface: net1}
    device: {resource: openshift.io/mellanoxrdma, count: 1}
    shm: {sizeLimit: 64Gi}
    nccl:
      NCCL_NET: {value: IB, enforce: true}
      NCCL_SOCKET_IFNAME: net1
    """)


def test_v1alpha1_loads_and_migrates_to_the_same_decisions(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(V1)
    proc = subprocess.run(CLI + ["policy", "migrate", str(old)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "apiVersion: rdma-webhook.io/v1alpha2" in proc.stdout and "{interface}" in proc.stdout
    v1, errors = load_texts([("old.yaml", V1)])
    v2, errors2 = load_texts([("new.yaml", proc.stdout)])
    assert errors == [] and errors2 == []
    ai = STATE.namespace("ai-training")
    for existing in (None, "macvlan-conf", "rdma-network@rdma0"):
        ann = {keys.POD_POLICY: "old-sriov", **({keys.MULTUS_NETWORKS: existing} if existing else {})}
        pod = k.pod([k.container("t")], namespace="ai-training", annotations=ann)
        assert respond(pod, ai, v1)[1] == respond(pod, ai, v2)[1]


@pytest.mark.parametrize(
    "doc,error",
    [
        (
            "fabric: {kind: x, ncclNet: [IB], hcaDevices: [mlx5]}\n",
            "gives no device resource, Multus network or DRA claim",
        ),
        (
            "fabric: {kind: x, ncclNet: [IB], hcaDevices: [mlx5]}\nhostNetwork: Required\nnetworks: [{name: n}]\n",
            "Multus attaches no networks to host-network pods",
        ),
        (
            "fabric: {kind: x, transport: libfabric, ncclNet: [OFI]}\ndevices: [{resource: vpc.amazonaws.com/efa}]\n",
            "fabric.providers: required",
        ),
        (
            "fabric: {kind: x, transport: libfabric, ncclNet: [OFI], providers: [efa]}\ndevices: [{resource: vpc.amazonaws.com/efa}]\nnccl2: {}\n",
            "unknown field",
        ),
        (
            "fabric: {kind: x, transport: libfabric, ncclNet: [OFI], providers: [efa]}\ndevices: [{resource: a.io/x}]\nnccl:\n  FI_PROVIDER: tcp\n",
            "FI_PROVIDER='tcp' keeps none",
        ),
        (
            "fabric: {kind: x, ncclNet: [IB], hcaDevices: [mlx5]}\ndevices: [{resource: a.io/x}]\nnccl:\n  NCCL_SOCKET_IFNAME: '{interface}'\n",
            "has no networks",
        ),
    ],
)
def test_lint_of_the_fabric_model(doc, error):
    head = "apiVersion: rdma-webhook.io/v1alpha2\nkind: RdmaPolicy\nname: p\ndescription: d\nnamespaceSelector: {}\nshm: {sizeLimit: 1Gi}\n"
    text = head + doc + ("" if "nccl:" in doc or "nccl2" in doc else "nccl: {NCCL_DEBUG: WARN}\n")
    if "nccl2" in doc:
        text += "nccl: {NCCL_DEBUG: WARN}\n"
    ps, errors = load_texts([("p.yaml", text)])
    assert ps is None and any(error in str(e) for e in errors), errors


def test_host_network_and_claim_policies_without_devices_lint():
    head = (
        "apiVersion: rdma-webhook.io/v1alpha2\nkind: RdmaPolicy\nname: p\ndescription: d\nnamespaceSelector: {}\n"
        "shm: {sizeLimit: 1Gi}\nnccl: {NCCL_DEBUG: WARN}\n"
    )
    fab = "fabric: {kind: x, ncclNet: [IB], hcaDevices: [mlx5]}\n"
    for extra in ("hostNetwork: Required\n", "claim: {name: nic, template: nic-template}\n"):
        ps, errors = load_texts([("p.yaml", head + fab + extra)])
        assert errors == [], errors


# -- through the served webhook over TLS --------------------------------------------------------


@pytest.mark.parametrize(
    "make,ns,check",
    [
        (
            rdma_test_pod,
            "ib-training",
            lambda out, r: out["spec"]["containers"][0]["resources"]["limits"].get("rdma/rdma_shared_device_a") == "1",
        ),
        (efa_worker, "eks-training", lambda out, r: env_of(out["spec"]["containers"][0])["FI_PROVIDER"] == "efa"),
        (oke_worker, "oke-training", lambda out, r: env_of(out["spec"]["containers"][0])["NCCL_IB_TC"] == "41"),
        (
            lambda: rails_worker("macvlan-conf"),
            "llm-rails",
            lambda out, r: (
                env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net2"
                and interfaces(out["metadata"]["annotations"][keys.MULTUS_NETWORKS])[1:]
                == [f"net{i}" for i in range(2, 10)]
            ),
        ),
    ],
)
def test_served_fabrics(server, make, ns, check):
    pod = make()
    r = server.review(k.admission_review(pod, namespace=ns))["response"]
    assert r["allowed"], r
    out = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(r["patch"])))
    assert check(out, r)


def test_served_fabric_mismatch(server):
    pod = efa_worker()
    pod["metadata"]["annotations"] = {keys.POD_POLICY: "erdma"}
    r = server.review(k.admission_review(pod, namespace="eks-training"))["response"]
    assert not r["allowed"] and r["status"]["code"] == 403
    assert "select policy efa" in r["status"]["message"] and "[fabric-mismatch]" in r["status"]["message"]


# -- who is checked: every container that can run NCCL (issue 16, point 4) ----------------------


@pytest.mark.parametrize(
    "extra",
    [
        {
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "NCCL_IB_DISABLE", "value": "1"}],
            "securityContext": {"privileged": True},
        },
        {"env": [{"name": "NCCL_NET", "value": "Socket"}], "resources": {"claims": [{"name": "gpus"}]}},
    ],
)
def test_containers_that_see_gpus_without_requesting_one_are_checked(policies, extra):
    bench = k.container("nccl-bench", gpus=None, **{k_: v for k_, v in extra.items() if k_ != "resources"})
    if "resources" in extra:
        bench["resources"] = extra["resources"]
    claims = (
        {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpu-template"}]}
        if "resources" in extra
        else {}
    )
    pod = k.pod([bench], **claims)
    resp, _, d = respond(pod, ML, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["env-fallback"], resp
    assert "container 'nccl-bench'" in resp["status"]["message"]


@pytest.mark.parametrize("value", ["void", "none", ""])
def test_nvidia_visible_devices_void_or_none_sees_no_gpu(policies, value):
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}, {"name": "NCCL_IB_DISABLE", "value": "1"}]
    resp, _, d = respond(k.pod([k.container("cpu-only", gpus=None, env=env)]), ML, policies)
    assert resp["allowed"] and d.outcome == "unchanged"


def test_runtime_gpu_container_beside_a_target_is_checked_not_mutated(policies):
    side = k.container("side", gpus=None, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1"}])
    pod = k.pod([k.container("trainer"), side])
    resp, out = mutated(pod, ML, policies)
    assert out["spec"]["containers"][1] == pod["spec"]["containers"][1]  # checked, nothing added
    assert env_of(out["spec"]["containers"][0])["NCCL_NET"] == "IB"
    side["env"].append({"name": "NCCL_NET", "value": "Socket"})
    resp, _, d = respond(k.pod([k.container("trainer"), side]), ML, policies)
    assert not resp["allowed"] and [f.container for f in d.denials] == ["side"]


# -- a transport's own variables in commands: read for the policy's names ------------------------


@pytest.mark.parametrize(
    "script,denied",
    [
        ("mpirun -np 16 -x FI_PROVIDER=tcp -x NCCL_DEBUG=WARN /opt/nccl-tests/build/all_reduce_perf -b 8 -e 2G", True),
        ("export FI_PROVIDER=sockets; torchrun train.py", True),
        ("export NCCL_NET_PLUGIN=none && python train.py", True),
        ("# export FI_PROVIDER=tcp\nmpirun -x FI_PROVIDER=efa all_reduce_perf", False),
        ("echo 'never FI_PROVIDER=tcp'; torchrun train.py", False),
    ],
)
def test_efa_command_settings_are_judged_by_the_libfabric_table(policies, script, denied):
    pod = efa_worker()
    pod["spec"]["containers"][0]["command"] = ["bash", "-c", script]
    resp, _, d = respond(pod, EKS, policies)
    assert resp["allowed"] is not denied, resp
    if denied:
        assert [f.rule for f in d.denials] == ["command-fallback"]


def test_fi_provider_in_an_ib_verbs_command_is_not_a_fallback(policies):
    pod = k.pod([k.container("t", command=["bash", "-c", "export FI_PROVIDER=tcp; torchrun train.py"])])
    resp, _, _ = respond(pod, ML, policies)  # erdma: libfabric is not its transport
    assert resp["allowed"], resp.get("status")


def test_served_dra_claim(tmp_path):
    """A DRA policy next to the shipped ones, served: the claim lands in the pod as stored. The
    cluster state lists its ResourceClaimTemplate (a state file lists all the cluster's DRA
    objects: without it the pod would stay Pending, and is denied with `claim-template`)."""
    from conftest import CLUSTER_STATE, POLICIES, start_server, stop_server

    pol = tmp_path / "policies"
    pol.mkdir()
    for p in POLICIES.glob("*.yaml"):
        (pol / p.name).write_text(p.read_text())
    (pol / "dranet.yaml").write_text(DRA_POLICY)
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "rdma-nic-template", "namespace": "ml-training"},
        "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "rdma"}}]}}},
    }
    state = tmp_path / "state.yaml"
    state.write_text(CLUSTER_STATE.read_text() + "\n---\n" + json.dumps(template) + "\n")
    srv = start_server(tmp_path, extra_args=["--cluster-state", str(state)])
    try:
        pod = k.pod([k.container("trainer")], annotations={keys.POD_POLICY: "dranet"})
        r = srv.review(k.admission_review(pod, namespace="ml-training"))["response"]
        assert r["allowed"], r
        out = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(r["patch"])))
        assert out["spec"]["resourceClaims"] == [{"name": "rdma-nic", "resourceClaimTemplateName": "rdma-nic-template"}]
        assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": "rdma-nic"}]
    finally:
        stop_server(srv)


def test_a_pod_listing_a_hundred_thousand_networks_is_answered(server):
    """The Multus plan is linear in what the pod lists: a hostile annotation near the body limit
    (100,000 attachments, 1.3 MB) is read within the client's timeout, by a worker that then
    goes on serving."""
    ann = ",".join(f"n{i}" for i in range(100_000))
    pod = rails_worker(ann)
    conn = server.connection(timeout=60)
    r = server.review(k.admission_review(pod, namespace="llm-rails"), conn=conn)["response"]
    assert r["allowed"], r.get("status")
    out = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(r["patch"])))
    assert interfaces(out["metadata"]["annotations"][keys.MULTUS_NETWORKS])[-8:] == [
        f"net{i}" for i in range(100_001, 100_009)
    ]
    r = server.review(k.admission_review(rails_worker(), namespace="llm-rails"))["response"]
    assert r["allowed"]


def test_fabric_mismatch_says_what_the_policy_provides():
    """webhook.core.families.check's message for a host-fabric and a DRA policy, a device in requests
    only or in limits only, and a claim named through resourceClaimName."""
    ps = dra_policies()
    pod = oke_worker()
    pod["spec"]["containers"][0]["resources"].setdefault("requests", {})["rdma/hca"] = "1"
    _, _, d = respond(pod, OKE, ps)
    other = "no policy of this namespace provides it; remove it, or ask the platform team for a policy of that fabric"
    # every rdma/<name> is the RDMA shared device plugin's: ib-shared's family, named as the fix
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        (
            "fabric-mismatch",
            "mpi-worker",
            "this pod requests rdma/hca, another fabric's RDMA device; policy oke-roce-host provides the host's devices; "
            "select policy ib-shared with the annotation rdma-webhook.io/policy: ib-shared",
        )
    ]
    pod = k.pod(
        [k.container("trainer", resources={"limits": {"nvidia.com/gpu": "1", "rdma/hca": "1"}})],
        annotations={keys.POD_POLICY: "dranet"},
    )
    pod["spec"]["containers"][0]["resources"].get("requests", {}).pop("rdma/hca", None)
    _, _, d = respond(pod, ML, ps)
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        (
            "fabric-mismatch",
            "trainer",
            "this pod requests rdma/hca, another fabric's RDMA device; policy dranet provides a DRA claim (rdma-nic-template); "
            "select policy ib-shared with the annotation rdma-webhook.io/policy: ib-shared",
        )
    ]
    # without a policy of the RDMA shared device plugin's family, nothing fits
    from webhook.core.model import PolicySet

    alone = PolicySet([p for p in ps.by_name.values() if not p.name.endswith(("ib-shared", "infiniband", "-ib"))])
    _, _, d = respond(pod, ML, alone)
    assert [f.message for f in d.denials] == [
        f"this pod requests rdma/hca, another fabric's RDMA device; policy dranet provides a DRA claim (rdma-nic-template); {other}"
    ]
    pod = k.pod([k.container("trainer")], resourceClaims=[{"name": "x", "resourceClaimName": "rdma-nic-template"}])
    _, _, d = respond(pod, ML, ps)
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        (
            "fabric-mismatch",
            None,
            "this pod claims rdma-nic-template, another fabric's RDMA NIC; policy erdma provides aliyun/erdma; "
            "select policy dranet with the annotation rdma-webhook.io/policy: dranet",
        )
    ]


# -- the fabric rules' exact findings ---------------------------------------------------------------


def test_a_container_that_cannot_see_the_host_devices_is_named_with_the_fix(policies):
    pod = oke_worker(privileged=False, mount=False)
    pod["spec"]["containers"].insert(
        0, copy.deepcopy(pod["spec"]["containers"][0]) | {"name": "seen", "securityContext": {"privileged": True}}
    )
    _, _, d = respond(pod, OKE, policies)
    assert [(f.rule, f.container, f.message) for f in d.denials] == [
        (
            "host-rdma-devices",
            "mpi-worker",
            (
                "the oke-roce-host policy's RDMA devices come from the host without a device plugin, and this container "
                "neither mounts /dev/infiniband nor runs privileged, so NCCL finds no RDMA device and uses TCP; mount the "
                "host's /dev/infiniband (hostPath) into it"
            ),
        )
    ]


def _host_network_denial(policies, ns, text=None):
    if text is not None:
        ps, errors = load_texts([("p.yaml", text)])
        assert ps is not None, errors
        policies = ps
    pod = k.pod([k.container("trainer")], namespace=ns.name, hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    _, _, d = respond(pod, ns, policies)
    return [(f.rule, f.container, f.message) for f in d.denials if f.rule == "host-network"]


def test_host_network_under_a_policy_of_multus_networks_names_them(policies):
    assert _host_network_denial(policies, RAILS) == [
        (
            "host-network",
            None,
            (
                "hostNetwork: true, but the sriov-roce-8rail policy attaches the Multus network(s) 'rdma-rail-0', 'rdma-rail-1', 'rdma-rail-2', "
                "'rdma-rail-3', 'rdma-rail-4', 'rdma-rail-5', 'rdma-rail-6', 'rdma-rail-7' and Multus does not attach networks to host-network pods; "
                "remove hostNetwork"
            ),
        )
    ]


def test_host_network_under_a_policy_that_forbids_it_without_networks_says_why():
    text = (
        (ROOT / "policies" / "erdma.yaml")
        .read_text()
        .replace("priority: 10\n", "priority: 10\nhostNetwork: Forbidden\n")
    )
    assert _host_network_denial(None, ML, text) == [
        (
            "host-network",
            None,
            (
                "hostNetwork: true, but the erdma policy does not reach its fabric through the host's interfaces; remove hostNetwork"
            ),
        )
    ]
