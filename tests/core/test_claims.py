"""DRA NIC claims and device families (issue 27 items 1 and 4) on pods shaped like the public
examples, written here and modelled on them: kubernetes-sigs/dranet (an RDMA DeviceClass of the
dra.net driver; AKS GB300 and EKS EFA examples that claim a GPU and a NIC in one template), GKE's
managed DRANET class mrdma.google.com, k8snetworkplumbingwg/dra-driver-sriov (a VF claimed through
sriovnetwork.k8snetworkplumbingwg.io beside its Multus network), AKS ND-series InfiniBand
(rdma/shared_ib), an OpenShift SR-IOV legacy VF and an NVIDIA network-operator host device, each
with its own Multus network.

For each: the policy that fits admits it and adds no second NIC (no device-plugin resource, no
network, no claim); no policy at all adds a second NIC; a policy of another fabric denies it with
fabric-mismatch and names the policy that fits. A claim of a GPU or an IMEX channel changes
nothing. Pods go through `review.handle` (the served path) and the JSON patch is applied to the
pod as sent.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess

import jsonpatch
import pytest
import yaml

import kube_objects as k
from conftest import CLI, ROOT
from webhook.admission import review
from webhook.cluster.state import ClaimStore, FileClusterState
from webhook.core import claims as dra
from webhook.core.decision import Namespace
from webhook.core.model import PolicySet
from webhook.policy.load import load_dir, load_texts

NS = "ml-training"
LABELS = {"kubernetes.io/metadata.name": NS, "rdma-webhook.io/injection": "enabled"}
NAMESPACE = Namespace(NS, LABELS)
DEVICE_CLASS, TEMPLATE, CLAIM = "DeviceClass", "ResourceClaimTemplate", "ResourceClaim"
NETWORKS = "k8s.v1.cni.cncf.io/networks"

# GKE's managed DRANET installs its RDMA class itself; the shipped gke and gke-gib name it with
# NCCL pinned to gIB; a cluster that runs plain NCCL over those NICs writes a policy like this one.
GKE_POLICY = """\
apiVersion: rdma-webhook.io/v1alpha2
kind: RdmaPolicy
name: gke-mrdma
description: GKE managed DRANET RDMA NICs (test policy)
namespaceSelector: {}
fabric: {kind: gke-roce, transport: ib-verbs, ncclNet: [IB, gIB], hcaDevices: ["mlx5_[0-15]"]}
dra: {deviceClasses: [mrdma.google.com]}
hostNetwork: Forbidden
shm: {perGpu: 8Gi}
nccl: {NCCL_DEBUG: WARN}
"""


def _policies() -> PolicySet:
    shipped, errors = load_dir(str(ROOT / "policies"))
    assert shipped is not None, errors
    texts = [(str(p), p.read_text()) for p in sorted((ROOT / "policies").glob("*.yaml"))]
    ps, errors = load_texts(texts + [("gke.yaml", GKE_POLICY)])
    assert ps is not None, errors
    return ps


PS = _policies()


def obj(kind: str, name: str, spec: dict, namespace: str | None = NS, **meta) -> dict:
    group = "k8s.cni.cncf.io/v1" if kind == "NetworkAttachmentDefinition" else "resource.k8s.io/v1"
    m = {"name": name, **({"namespace": namespace} if namespace and kind != DEVICE_CLASS else {}), **meta}
    return {"apiVersion": group, "kind": kind, "metadata": m, "spec": spec}


def device_class(name: str, *cel: str) -> dict:
    return obj(DEVICE_CLASS, name, {"selectors": [{"cel": {"expression": e}} for e in cel]}, namespace=None)


def request(name: str, cls: str, count: int | None = None, cel: str | None = None) -> dict:
    exactly: dict = {"deviceClassName": cls}
    if count:
        exactly["count"] = count
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {"name": name, "exactly": exactly}


def template(name: str, *requests: dict) -> dict:
    return obj(TEMPLATE, name, {"spec": {"devices": {"requests": list(requests)}}})


def nad(name: str, resource: str) -> dict:
    return obj(
        "NetworkAttachmentDefinition",
        name,
        {"config": json.dumps({"cniVersion": "1.0.0", "name": name, "type": "sriov"})},
        annotations={"k8s.v1.cni.cncf.io/resourceName": resource},
    )


GPU_CLASS = device_class("gpu.nvidia.com", 'device.driver == "gpu.nvidia.com"')
DRANET_CLASS = device_class("dranet", 'device.driver == "dra.net"')
OBJECTS = [
    GPU_CLASS,
    DRANET_CLASS,
    device_class("rdma", 'device.driver == "dra.net"', 'device.attributes["dra.net"].rdma'),
    device_class("dranet.net", 'device.driver == "dra.net"'),
    device_class(
        "efa.networking.k8s.aws",
        "device.driver == \"dra.net\" &&\ndevice.attributes[\"dra.net\"].pciDevice == 'Elastic Fabric Adapter (EFA)'\n",
    ),
    device_class("mrdma.google.com"),
    device_class("sriovnetwork.k8snetworkplumbingwg.io", "device.driver == 'sriovnetwork.k8snetworkplumbingwg.io'"),
    device_class("compute-domain-default-channel.nvidia.com", 'device.driver == "compute-domain.nvidia.com"'),
    template("rdma-nics", request("nic", "dranet", 2, 'device.attributes["dra.net"].rdma == true')),
    template(
        "rdma-net-template",
        request("rdma-net-interface", "rdma", cel='device.attributes["dra.net"].ifName == "gpu4rdma0"'),
    ),
    template("plain-nic", request("nic", "dranet", 1, 'device.attributes["dra.net"].ifName == "eth1"')),
    template(
        "all-mrdma",
        {
            "name": "mrdma",
            "exactly": {"deviceClassName": "mrdma.google.com", "allocationMode": "ExactCount", "count": 8},
        },
    ),
    template(
        "1nic-aligned",
        request("gpu", "gpu.nvidia.com", 1, 'device.attributes["resource.kubernetes.io"].pciBusID == "0008:06:00.0"'),
        request("nic", "dranet.net", 1, 'device.attributes["dra.net"]["rdmaDevice"] == "mlx5_0"'),
    ),
    template("gpu-efa-aligned", request("gpu", "gpu.nvidia.com", 1), request("efa", "efa.networking.k8s.aws", 1)),
    template("efa-32", request("efa", "efa.networking.k8s.aws", 32)),
    obj(CLAIM, "shared-efa", {"devices": {"requests": [request("efa", "efa.networking.k8s.aws", 4)]}}),
    template("vf-claim", request("vf", "sriovnetwork.k8snetworkplumbingwg.io")),
    template("imex-channel", request("channel", "compute-domain-default-channel.nvidia.com")),
    template("single-gpu", request("gpu", "gpu.nvidia.com", 1)),
]
NADS = [
    nad("rdma-network", "openshift.io/mellanoxrdma"),
    nad("vf-test1", "sriov_nic_1"),
    nad("sriov-legacy", "openshift.io/sriovlegacy"),
    nad("hostdev-net", "nvidia.com/hostdev"),
]
STATE = FileClusterState([NAMESPACE], NADS, [], OBJECTS)


def claim_ref(name: str, template_name: str | None = None, claim: str | None = None) -> dict:
    return {
        "name": name,
        **({"resourceClaimTemplateName": template_name} if template_name else {"resourceClaimName": claim}),
    }


def worker(
    name: str = "trainer", *, gpus: int | None = 8, claims: list[str] | None = None, limits=None, **extra
) -> dict:
    c = k.container(name, gpus=gpus, limits=limits, **extra)
    if claims:
        c["resources"]["claims"] = [{"name": n} for n in claims]
    return c


def pod_of(containers, resource_claims=None, annotations=None, **kw) -> dict:
    extra = {"resourceClaims": resource_claims} if resource_claims else {}
    return k.pod(containers, namespace=NS, annotations=annotations, **extra, **kw)


# Each example: the pod, the policy that fits, the policies that take it as theirs too (the same
# family; roce-dranet-aligned and gb200-roce claim the same DRANET NICs as roce-dranet, gke-gib and
# gke's gIB machine types take DRANET's and GKE managed DRANET's RDMA NICs instead of their GKE networks), and whether the fitting
# policy mutates it (a pod whose GPUs come by claim is checked, not mutated).
EXAMPLES = {
    # kubernetes-sigs/dranet: an RDMA claim from the plain dra.net class narrowed by the request
    "dranet-rdma-request": (
        lambda: pod_of([worker(claims=["rdma"])], [claim_ref("rdma", "rdma-nics")], generate_name="llama-worker-"),
        "roce-dranet",
        {"roce-dranet-aligned", "gb200-roce", "gke-gib", "gke"},
        True,
    ),
    # the dranet rdma-perftest StatefulSet: a class that selects RDMA devices; its container does
    # not reference the claim, so the webhook adds the reference
    "dranet-rdma-class": (
        lambda: pod_of(
            [worker("perftest")],
            [claim_ref("rdma-net-interface", "rdma-net-template")],
            name="rdma-perftest-0",
            generate_name=None,
        ),
        "roce-dranet",
        {"roce-dranet-aligned", "gb200-roce", "gke-gib", "gke"},
        True,
    ),
    # GKE managed DRANET: eight RDMA NICs of mrdma.google.com
    "gke-mrdma": (
        lambda: pod_of([worker(claims=["rdma"])], [claim_ref("rdma", "all-mrdma")], generate_name="jobset-worker-0-"),
        "gke-mrdma",
        {"gke-gib", "gke"},
        True,
    ),
    # dranet's AKS GB300 example: GPU and NIC in one claim, no nvidia.com/gpu resource
    "aks-gb300-dranet": (
        lambda: pod_of(
            [worker("nccl", gpus=None, claims=["gpu-nic"])],
            [claim_ref("gpu-nic", "1nic-aligned")],
            generate_name="nccl-test-worker-",
        ),
        "roce-dranet",
        {"roce-dranet-aligned", "gb200-roce", "gke-gib", "gke"},
        False,
    ),
    # EKS through the EFA DRA driver: GPU and EFA aligned in one claim (dranet's gpu-efa example)
    "eks-efa-dra-aligned": (
        lambda: pod_of(
            [worker("nccl", gpus=None, claims=["gpu-efa"])],
            [claim_ref("gpu-efa", "gpu-efa-aligned")],
            generate_name="nccl-tests-worker-",
        ),
        "efa-dra",
        set(),
        False,
    ),
    # EKS: GPUs by device plugin, 32 EFA interfaces by template, and a shared ResourceClaim by name
    "eks-efa-dra-template": (
        lambda: pod_of([worker(claims=["efa"])], [claim_ref("efa", "efa-32")], generate_name="pytorch-worker-"),
        "efa-dra",
        set(),
        True,
    ),
    "eks-efa-dra-claim": (
        lambda: pod_of(
            [worker(claims=["efa"])], [claim_ref("efa", claim="shared-efa")], generate_name="pytorch-worker-"
        ),
        "efa-dra",
        set(),
        True,
    ),
    # k8snetworkplumbingwg/dra-driver-sriov: a VF claim beside its Multus network
    "sriov-dra": (
        lambda: pod_of(
            [worker(gpus=1, claims=["sriov"])],
            [claim_ref("sriov", "vf-claim")],
            annotations={NETWORKS: "vf-test1"},
            generate_name="pod0-5d8f7c9b4-",
        ),
        "sriov-roce",
        set(),
        True,
    ),
    # AKS ND-series InfiniBand: the RDMA shared device plugin's rdma/shared_ib
    "aks-nd-shared-ib": (
        lambda: pod_of([worker(limits={"rdma/shared_ib": "1"})], generate_name="pytorch-worker-"),
        "nd-infiniband",
        {"ib-shared", "coreweave-ib"},  # every rdma/<name> is the RDMA shared device plugin's family
        True,
    ),
    # OpenShift SR-IOV: a legacy VF and the network whose NAD names it
    "sriov-legacy-vf": (
        lambda: pod_of(
            [worker(limits={"openshift.io/sriovlegacy": "1"})],
            annotations={NETWORKS: "sriov-legacy"},
            generate_name="pytorch-worker-",
        ),
        "sriov-roce",
        {"sriov-roce-8rail"},
        True,
    ),
    # NVIDIA network-operator host device: the whole NIC, attached with the host-device CNI
    "host-device": (
        lambda: pod_of(
            [worker(limits={"nvidia.com/hostdev": "1"})],
            annotations={NETWORKS: json.dumps([{"name": "hostdev-net", "interface": "hostdev0"}])},
            generate_name="pytorch-worker-",
        ),
        "sriov-roce",
        {"sriov-roce-8rail"},
        True,
    ),
}

NIC_RESOURCES = (
    "rdma/",
    "vpc.amazonaws.com/efa",
    "aliyun/erdma",
    "openshift.io/",
    "nvidia.com/hostdev",
    "nvidia.com/rdma",
)


def respond(pod, policy: str | None, policies: PolicySet = PS, state=STATE, claims="state"):
    pod = copy.deepcopy(pod)
    if policy is not None:
        pod["metadata"].setdefault("annotations", {})["rdma-webhook.io/policy"] = policy
    body = k.body(k.admission_review(pod, namespace=NS))
    lookups = state.claims() if claims == "state" else claims
    status, doc, decision, _ = review.handle(body, policies, state.namespace, state.attachments(), claims=lookups)
    assert status == 200
    resp = doc["response"]
    out = (
        jsonpatch.apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
        if "patch" in resp
        else copy.deepcopy(pod)
    )
    return resp, out, decision


def nics(pod) -> list:
    """Every NIC the pod has: NIC resources per container, its networks, its claims."""
    out: list = []
    for c in pod["spec"]["containers"]:
        for section in ("limits", "requests"):
            out.extend(
                (c["name"], section, r, v)
                for r, v in (c["resources"].get(section) or {}).items()
                if r.startswith(NIC_RESOURCES)
            )
    out.append(("networks", (pod["metadata"].get("annotations") or {}).get(NETWORKS)))
    out.append(("claims", json.dumps(pod["spec"].get("resourceClaims"), sort_keys=True)))
    return out


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_the_fitting_policy_admits_it_and_adds_no_second_nic(example):
    make, fitting, _, mutates = EXAMPLES[example]
    pod = make()
    resp, out, d = respond(pod, fitting)
    assert resp["allowed"], (resp.get("status"), d.denials)
    assert d.outcome == ("mutated" if mutates else "unchanged"), (d.outcome, d.reason, d.warnings)
    assert nics(out) == nics(pod)
    if mutates:  # the rest of the policy is there: IPC_LOCK, /dev/shm, the block; and every target references the claim
        for c in out["spec"]["containers"]:
            assert "IPC_LOCK" in c["securityContext"]["capabilities"]["add"]
            assert any(e["name"] == "NCCL_DEBUG" for e in c["env"])
            for entry in pod["spec"].get("resourceClaims") or ():
                assert {"name": entry["name"]} in c["resources"]["claims"], c["resources"]
        assert any(v.get("emptyDir", {}).get("medium") == "Memory" for v in out["spec"]["volumes"])
    again, same, _ = respond(out, fitting)
    assert again["allowed"] and "patch" not in again and same["spec"] == out["spec"], "a second pass changes nothing"


@pytest.mark.parametrize("example", sorted(EXAMPLES))
@pytest.mark.parametrize("policy", sorted(PS.by_name))
def test_no_policy_gives_it_a_second_nic_and_another_fabric_names_the_fitting_one(example, policy):
    make, fitting, same_family, _ = EXAMPLES[example]
    pod = make()
    resp, out, d = respond(pod, policy)
    if resp["allowed"]:
        assert nics(out) == nics(pod), (policy, d.outcome)
    if policy == fitting or policy in same_family:
        assert resp["allowed"], (policy, [f.message for f in d.denials])
        return
    mismatch = [f for f in d.denials if f.rule == "fabric-mismatch"]
    assert not resp["allowed"] and len(mismatch) == 1, (policy, d.outcome, [f.message for f in d.denials])
    assert "another fabric's" in mismatch[0].message
    named = mismatch[0].message.rsplit("select policy ", 1)[1].split(" ")[0]
    assert named in {fitting, *same_family}, mismatch[0].message


def test_the_rdma_perftest_container_gets_the_claim_reference_added():
    make, fitting, _, _ = EXAMPLES["dranet-rdma-class"]
    pod = make()
    assert "claims" not in pod["spec"]["containers"][0]["resources"]
    resp, out, d = respond(pod, fitting)
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": "rdma-net-interface"}]
    assert "perftest: DRA claim rdma-net-interface" in " ".join(d.notes), d.notes


def test_an_own_network_names_the_interface_nccl_is_told():
    """The host device's network is the pod's own (hostdev0): NCCL_SOCKET_IFNAME follows it and
    sriov-roce's rdma-network is not added."""
    resp, out, _ = respond(EXAMPLES["host-device"][0](), "sriov-roce")
    env = {e["name"]: e.get("value") for e in out["spec"]["containers"][0]["env"]}
    assert env["NCCL_SOCKET_IFNAME"] == "hostdev0" and env["NCCL_NET"] == "IB"
    resp, out, _ = respond(EXAMPLES["sriov-dra"][0](), "sriov-roce")  # a claimed VF: its interface is not known here
    assert "NCCL_SOCKET_IFNAME" not in {e["name"] for e in out["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("policy", ["ib-shared", "efa", "erdma", "sriov-roce"])
def test_a_claim_that_is_no_nic_changes_nothing(policy):
    """An IMEX channel (a ComputeDomain) and a GPU claimed beside the device-plugin GPUs: the
    policy's NIC is added as for any pod."""
    claims = [claim_ref("imex", "imex-channel"), claim_ref("gpu", "single-gpu")]
    pod = pod_of([worker(claims=["imex", "gpu"])], claims, generate_name="pytorch-worker-")
    plain = pod_of([worker()], generate_name="pytorch-worker-")
    resp, out, d = respond(pod, policy)
    resp_plain, out_plain, _ = respond(plain, policy)
    assert resp["allowed"] and d.outcome == "mutated", d.denials
    added = [n for n in nics(out) if n not in nics(pod)]
    assert added and added == [n for n in nics(out_plain) if n not in nics(plain)]


def test_a_dranet_claim_without_rdma_is_no_nic_and_a_dra_policy_wants_one():
    """A plain dra.net interface (no rdma in its CEL) is not roce-dranet's NIC: the pod claims no
    NIC of that fabric, which the DRA-only policy cannot add, so it is denied and told how."""
    pod = pod_of([worker(claims=["nic"])], [claim_ref("nic", "plain-nic")], generate_name="pytorch-worker-")
    resp, _, d = respond(pod, "roce-dranet")
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["device-missing"]
    assert "claims no NIC of the roce fabric" in d.denials[0].message and "DeviceClass" in d.denials[0].message
    resp, _, d = respond(pod, "ib-shared")  # and under another fabric it is nothing: the policy's device is added
    assert resp["allowed"] and d.outcome == "mutated"


def test_a_claim_unknown_here_is_not_taken_for_a_nic_nor_for_none():
    """Without the template (review with no DRA objects) the claim may or may not be the NIC:
    under the DRA-only policy the pod is not admitted as if it had one (its NCCL block pinned to a
    NIC it may lack), nor told it claims none: the denial names what is not known. Under a policy
    that adds its own device, that device is added (issue 42, "checks that depend on the input")."""
    make, fitting, _, _ = EXAMPLES["dranet-rdma-request"]
    pod = make()
    resp, out, d = respond(pod, fitting, claims=ClaimStore(complete=False))
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["claim-unknown"], d.denials
    assert "'rdma' (ResourceClaimTemplate ml-training/rdma-nics), not known here" in d.denials[0].message
    resp, out, d = respond(pod, "ib-shared", claims=None)  # not known: the device-plugin policy adds its own
    assert resp["allowed"] and ("trainer", "limits", "rdma/rdma_shared_device_a", "1") in nics(out)


def test_a_class_a_policy_names_wins_over_a_driver_match():
    """efa.networking.k8s.aws is a dra.net class too; a request that also mentions rdma stays EFA's."""
    req = dra.ClaimRequest("efa.networking.k8s.aws", (), 'device.attributes["dra.net"].rdma == true')
    assert [p.name for p in dra.nic_policies(req, PS, STATE.claims())] == ["efa-dra"]
    req = dra.ClaimRequest("rdma", (), "")
    # the DRA-only policies first, then gke and gke-gib, which take the claim instead of their networks
    assert [p.name for p in dra.nic_policies(req, PS, STATE.claims())] == [
        "roce-dranet",
        "roce-dranet-aligned",
        "gb200-roce",
        "gke",
        "gke-gib",
    ]
    assert dra.nic_policies(dra.ClaimRequest("dranet", (), ""), PS, STATE.claims()) == []  # dra.net without rdma
    assert dra.nic_policies(dra.ClaimRequest("gpu.nvidia.com", (), ""), PS, STATE.claims()) == []


def test_values_read_from_objects():
    [rdma] = [o for o in OBJECTS if o["kind"] == DEVICE_CLASS and o["metadata"]["name"] == "rdma"]
    info = dra.device_class_value(rdma)
    assert info.drivers == ("dra.net",) and 'attributes["dra.net"].rdma' in info.cel
    reqs = dra.template_value(
        template(
            "t",
            {
                "name": "x",
                "firstAvailable": [
                    {"name": "a", "deviceClassName": "rdma"},
                    {"name": "b", "deviceClassName": "efa.networking.k8s.aws"},
                ],
            },
        )
    )
    assert [r.device_class for r in reqs] == ["rdma", "efa.networking.k8s.aws"]
    v1beta1 = obj(
        TEMPLATE,
        "old",
        {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "n",
                            "deviceClassName": "dranet",
                            "selectors": [{"cel": {"expression": "device.driver == 'dra.net'"}}],
                        }
                    ]
                }
            }
        },
    )
    assert [(r.device_class, r.drivers) for r in dra.template_value(v1beta1)] == [("dranet", ("dra.net",))]
    for bad in (None, {}, {"spec": None}, {"spec": {"spec": {"devices": {"requests": [None, "x", {"exactly": 3}]}}}}):
        assert dra.template_value(bad) == ()
    assert dra.device_class_value({"metadata": {"name": "x"}, "spec": {"selectors": "no"}}).drivers == ()


# -- the policy format -----------------------------------------------------------------------------

BASE = """\
apiVersion: rdma-webhook.io/v1alpha2
kind: RdmaPolicy
name: p
description: d
namespaceSelector: {}
fabric: {kind: roce, transport: ib-verbs, ncclNet: [IB], hcaDevices: [mlx5_0]}
shm: {perGpu: 8Gi}
nccl: {NCCL_DEBUG: WARN}
"""


@pytest.mark.parametrize(
    "dra_block,message",
    [
        ("dra: {}", "should be non-empty"),
        ("dra: {selectors: [rdma]}", "give deviceClasses or drivers"),
        ("dra: {drivers: [dra.net], selectors: [rdma], deviceClases: [x]}", "did you mean 'deviceClasses'"),
        ("dra: {deviceClasses: [Bad_Class]}", "is not a valid DeviceClass name"),
        ("dra: {drivers: ['not a driver']}", "is not a valid DRA driver name"),
        ("deviceFamilies: [sriov]", "is not one of"),
    ],
)
def test_bad_dra_fields_are_named(dra_block, message):
    ps, errors = load_texts([("p.yaml", BASE + dra_block + "\n")])
    assert ps is None and any(message in str(e) for e in errors), [str(e) for e in errors]


def test_families_are_derived_or_declared():
    assert PS.get("ib-shared").families == {"rdma-shared-device"} and PS.get("nd-infiniband").families == {
        "rdma-shared-device"
    }
    assert PS.get("sriov-roce").families == {"network-device"} and PS.get("efa").families == set()
    ps, errors = load_texts(
        [("p.yaml", BASE + "devices: [{resource: example.com/nic}]\ndeviceFamilies: [rdma-shared-device]\n")]
    )
    assert ps is not None, errors
    pod = pod_of([worker(limits={"rdma/any_name": "1"})], generate_name="w-")
    resp, out, d = respond(pod, "p", policies=ps)
    assert resp["allowed"] and ("trainer", "limits", "example.com/nic", "1") not in nics(out)  # rdma/any_name stands


# -- offline: the cluster-state file and review's input -------------------------------------------


def test_cluster_state_file_and_review_input_read_dra_objects(tmp_path):
    make, fitting, _, _ = EXAMPLES["eks-efa-dra-template"]
    pod = make()
    pod["metadata"]["annotations"] = {"rdma-webhook.io/policy": "efa"}
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": LABELS}}
    objs = [o for o in OBJECTS if o["metadata"]["name"] in ("efa.networking.k8s.aws", "efa-32")]
    state = tmp_path / "state.yaml"
    state.write_text(yaml.safe_dump_all([ns, *objs]))
    loaded = FileClusterState.from_file(str(state))
    assert loaded.claims().claim_template(NS, "efa-32")[0].device_class == "efa.networking.k8s.aws"
    assert loaded.claims().device_class("efa.networking.k8s.aws").drivers == ("dra.net",)

    def review_of(*paths, state_file=None):
        args = ["review", "--policies", str(ROOT / "policies"), "--output", "json"]
        args += ["--cluster-state", state_file] if state_file else []
        out = subprocess.run([*CLI, *args, *paths], capture_output=True, text=True, cwd=ROOT)
        return out, [json.loads(line) for line in out.stdout.splitlines() if line.strip()]

    pods = tmp_path / "pod.yaml"
    pods.write_text(yaml.safe_dump(pod))
    out, records = review_of(str(pods), state_file=str(state))  # the objects from --cluster-state
    assert out.returncode == 1, out.stderr
    [rec] = [r for r in records if r["kind"] == "Pod"]
    assert rec["outcome"] == "denied" and "select policy efa-dra" in " ".join(rec["messages"]), rec
    both = tmp_path / "both.yaml"  # the objects in the input, beside the pod
    both.write_text(yaml.safe_dump_all([ns, *objs, pod]))
    out, records = review_of(str(both))
    [rec] = [r for r in records if r["kind"] == "Pod"]
    assert rec["outcome"] == "denied" and "select policy efa-dra" in " ".join(rec["messages"]), rec
    assert {r["kind"]: r["outcome"] for r in records if r["kind"] != "Pod"} == {
        "Namespace": "not-checked",
        "DeviceClass": "not-checked",
        "ResourceClaimTemplate": "not-checked",
    }
    pod["metadata"]["annotations"] = {"rdma-webhook.io/policy": "efa-dra"}
    both.write_text(yaml.safe_dump_all([ns, *objs, pod]))
    out, records = review_of(str(both))
    assert out.returncode == 0, out.stdout + out.stderr


# -- a policy that adds a claim: its template must exist ------------------------------------------

CLAIM_POLICY = BASE.replace("name: p\n", "name: claimer\n") + "claim: {name: rdma-nic, template: rdma-nic-template}\n"


def test_an_added_claim_whose_template_does_not_exist_is_denied_clearly():
    ps, errors = load_texts([("c.yaml", CLAIM_POLICY)])
    assert ps is not None, errors
    pod = pod_of([worker()], generate_name="pytorch-worker-")
    resp, _, d = respond(pod, "claimer", policies=ps)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["claim-template"], d.denials
    assert f"ResourceClaimTemplate {NS}/rdma-nic-template, which does not exist" in d.denials[0].message
    store = ClaimStore([template("rdma-nic-template", request("nic", "rdma"))])
    resp, out, d = respond(pod, "claimer", policies=ps, claims=store)
    assert resp["allowed"] and out["spec"]["resourceClaims"] == [
        {"name": "rdma-nic", "resourceClaimTemplateName": "rdma-nic-template"}
    ]
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": "rdma-nic"}]
    resp, out, d = respond(pod, "claimer", policies=ps, claims=None)  # DRA objects not tracked: not judged
    assert resp["allowed"] and d.outcome == "mutated"
