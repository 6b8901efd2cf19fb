"""webhook.policy.sections: each section of a (schema-valid) policy document compiled into the
Policy the decision reads, and what a schema cannot check, each problem with its field. Every
test loads its own documents (mutation/MUTATION.md)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from webhook.fabrics import transports
from webhook.policy.sections import compile_sections

ROOT = Path(__file__).resolve().parent.parent.parent


def shipped(name: str) -> dict:
    doc = yaml.safe_load((ROOT / "policies" / f"{name}.yaml").read_text())
    doc.pop("machineTypes", None)  # the machine types are webhook.policy.machines' part
    return doc


def compiled(doc: dict):
    policy, errors = compile_sections(doc, "p.yaml", doc.get("name"))
    assert errors == [], [str(e) for e in errors]
    return policy


def problems(doc: dict) -> list[str]:
    policy, errors = compile_sections(doc, "p.yaml", doc.get("name"))
    assert policy is None and errors
    return [str(e) for e in errors]


def erdma(**changes) -> dict:
    doc = shipped("erdma")
    doc.update(copy.deepcopy(changes))
    return doc


def sriov(**changes) -> dict:
    doc = shipped("sriov-roce")
    doc.update(copy.deepcopy(changes))
    return doc


# -- the Policy of a shipped document -----------------------------------------------------------------


def test_a_device_policy_compiles_to_what_the_decision_reads():
    doc = erdma(description="  eRDMA  \n", gpuResources=["nvidia.com/gpu", "amd.com/gpu"])
    p = compiled(doc)
    assert p.name == "erdma" and p.source == "p.yaml" and p.description == "eRDMA"
    assert p.priority == 10 and p.gpu_resources == ("nvidia.com/gpu", "amd.com/gpu")
    assert [(d.resource, d.count, d.per_gpu) for d in p.devices] == [("aliyun/erdma", 1, False)]
    assert p.networks == () and p.gke_networks == () and p.claim is None and p.dra is None
    assert p.own_resources == ("aliyun/erdma",)
    assert p.expected_resources == frozenset({"aliyun/erdma", "nvidia.com/gpu", "amd.com/gpu"})
    assert p.network_resources == frozenset() and p.families == frozenset()
    assert p.host_network == "Allowed" and p.workload_validation == "Deny"
    assert p.fabric.kind == "erdma" and p.fabric.transport == "ib-verbs" and p.fabric.policy == "erdma"
    assert p.fabric.hca_devices == ("erdma_0", "erdma_1", "erdma_2", "erdma_3", "rocep*")
    assert p.signatures == transports.signatures("ib-verbs")
    assert p.watched == tuple(s.variable for s in p.signatures)
    assert p.watched == ("NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA") and p.warned == ()
    assert p.scanned == frozenset([*p.watched, "NCCL_DEBUG"])
    assert p.plugin_mounts == () and p.sidecar is None and p.proof is None
    assert p.allows_namespace({}) and p.selector_size == 0


def test_without_gpu_resources_the_nvidia_gpu_is_the_gpu():
    doc = erdma()
    doc.pop("gpuResources", None)
    assert compiled(doc).gpu_resources == ("nvidia.com/gpu",)
    doc.pop("priority")
    assert compiled(doc).priority == 0


def test_the_selector_and_workload_validation_are_compiled():
    selector = {"matchLabels": {"team": "ml"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]}
    p = compiled(erdma(namespaceSelector=selector, workloadValidation="Warn"))
    assert p.selector_spec == selector and p.selector_size == 2 and p.workload_validation == "Warn"
    assert p.allows_namespace({"team": "ml", "tier": "x"}) and not p.allows_namespace({"team": "ml"})


def test_a_network_policy_compiles_its_networks_and_families():
    p = compiled(sriov())
    assert [(n.name, n.namespace, n.interface, n.resource, n.count, n.per_gpu) for n in p.networks] == [
        ("rdma-network", None, "net1", "openshift.io/mellanoxrdma", 1, False)
    ]
    assert p.families == frozenset({transports.NETWORK_DEVICE})
    assert p.network_resources == frozenset({"openshift.io/mellanoxrdma"})
    assert p.own_resources == ("openshift.io/mellanoxrdma",)
    assert p.host_network == "Forbidden"
    assert p.dra.classes == frozenset({"sriovnetwork.k8snetworkplumbingwg.io"})
    assert p.dra.drivers == frozenset({"sriovnetwork.k8snetworkplumbingwg.io"}) and p.dra.selectors == ()


def test_a_network_in_a_namespace_with_its_own_count():
    nets = [{"name": "rdma", "namespace": "infra", "interface": "net2", "count": 2, "perGpu": True}]
    p = compiled(sriov(networks=nets))
    assert [(n.name, n.namespace, n.interface, n.resource, n.count, n.per_gpu) for n in p.networks] == [
        ("rdma", "infra", "net2", None, 2, True)
    ]
    # a network with no resource of its own: none is expected or owned
    assert p.own_resources == () and p.network_resources == frozenset()


def test_device_families_as_given_or_derived():
    assert compiled(erdma(devices=[{"resource": "rdma/hca"}])).families == frozenset({transports.RDMA_SHARED})
    given = compiled(erdma(deviceFamilies=[transports.NETWORK_DEVICE]))
    assert given.families == frozenset({transports.NETWORK_DEVICE})
    assert compiled(erdma(deviceFamilies=[])).families == frozenset()
    both = sriov(devices=[{"resource": "rdma/hca"}])
    assert compiled(both).families == frozenset({transports.RDMA_SHARED, transports.NETWORK_DEVICE})
    # a network's resource is a network device only in that family
    p = compiled(sriov(deviceFamilies=[transports.RDMA_SHARED]))
    assert p.network_resources == frozenset()


def test_devices_default_to_one_not_per_gpu_and_keep_their_order():
    devices = [{"resource": "example.com/rail-b", "count": 2, "perGpu": True}, {"resource": "example.com/rail-a"}]
    p = compiled(erdma(devices=devices))
    assert [(d.resource, d.count, d.per_gpu) for d in p.devices] == [
        ("example.com/rail-b", 2, True),
        ("example.com/rail-a", 1, False),
    ]
    assert p.own_resources == ("example.com/rail-b", "example.com/rail-a")


def test_equivalent_resources_are_kept_in_order():
    p = compiled(erdma(equivalentResources=["example.com/b", "example.com/a"]))
    assert p.equivalent_resources == ("example.com/b", "example.com/a")
    assert compiled(erdma()).equivalent_resources == ()


def test_plugin_mounts_sidecar_and_gke_networks():
    p = compiled(shipped("gke-tcpxo"))
    assert [(g.name, g.interface) for g in p.gke_networks] == [(f"vpc{i}", f"eth{i}") for i in range(1, 9)]
    assert [(m.host_dir, m.mount_path) for m in p.plugin_mounts] == [
        ("/home/kubernetes/bin/nvidia/lib64", "/usr/local/nvidia/lib64")
    ]
    assert (p.sidecar.name, p.sidecar.image) == ("tcpxo-daemon", "tcpgpudmarxd")
    assert p.host_network == "Forbidden" and p.families == frozenset() and p.networks == ()
    mounts = [
        {"hostDir": "/opt/plugin/", "mountPath": "/"},
        {"hostDir": "/", "mountPath": "/usr/lib///"},
        {"hostDir": "/opt/X", "mountPath": "/usr/X/"},
    ]
    p = compiled(erdma(pluginMounts=mounts))
    assert [(m.host_dir, m.mount_path) for m in p.plugin_mounts] == [
        ("/opt/plugin", "/"),
        ("/", "/usr/lib"),
        ("/opt/X", "/usr/X"),
    ]
    assert compiled(erdma(sidecar=None)).sidecar is None


def test_gke_networks_without_their_own_interface_mode_default_to_forbidden():
    doc = shipped("gke-tcpxo")
    doc.pop("hostNetwork")
    doc["gkeNetworks"] = [{"name": "vpc1"}]
    p = compiled(doc)
    assert p.host_network == "Forbidden" and [(g.name, g.interface) for g in p.gke_networks] == [("vpc1", None)]


def test_the_proof_section_with_device_ranges_expanded():
    doc = erdma(proof={"transport": "ib-verbs", "devices": ["mlx5_[2-4]", "ibp0"], "gdr": True, "rails": 2})
    proof = compiled(doc).proof
    assert proof.transport == "ib-verbs" and proof.devices == ("mlx5_2", "mlx5_3", "mlx5_4", "ibp0")
    assert proof.gdr is True and proof.rails == 2 and proof.on_fallback == "report"
    proof = compiled(erdma(proof={"onFallback": "fail"})).proof
    assert (proof.transport, proof.devices, proof.gdr, proof.rails, proof.on_fallback) == (
        None,
        None,
        None,
        None,
        "fail",
    )
    assert compiled(erdma(proof={"devices": []})).proof.devices is None


def test_hca_device_ranges_expand_only_at_the_end_of_a_name():
    fabric = {"kind": "roce", "ncclNet": ["IB"], "hcaDevices": ["mlx5_[0-2]", "ib[1-1]", "x[3-1]", "a[0-1]b", "ibp"]}
    p = compiled(erdma(fabric=fabric, nccl={"NCCL_NET": "IB"}))
    assert p.fabric.hca_devices == ("mlx5_0", "mlx5_1", "mlx5_2", "ib1", "a[0-1]b", "ibp")
    assert p.fabric.transport == "ib-verbs"  # the default transport
    assert p.fabric.providers == () and p.fabric.net_plugins == ()


def test_a_libfabric_fabric_keeps_its_providers_and_plugins():
    p = compiled(shipped("efa"))
    assert p.fabric.providers == ("efa",) and p.fabric.net_plugins == ("ofi", "aws-ofi")
    assert p.fabric.nccl_nets == ("Libfabric", "AWS Libfabric", "OFI") and p.fabric.hca_devices == ()
    assert p.signatures == transports.signatures("libfabric")
    assert p.watched == ("FI_PROVIDER", "NCCL_NET_PLUGIN", "NCCL_NET", "FI_EFA_USE_DEVICE_RDMA")
    assert p.warned == ("FI_EFA_USE_DEVICE_RDMA",)
    assert p.scanned == frozenset([*p.watched, "NCCL_DEBUG"])


# -- shm -------------------------------------------------------------------------------------------------


def test_shm_sizes_in_bytes():
    p = compiled(erdma(shm={"sizeLimit": "16Gi"}))
    assert (p.shm_fixed, p.shm_per_gpu, p.shm_max) == (16 * 2**30, None, None)
    p = compiled(erdma(shm={"perGpu": "8Gi", "max": 1000}))
    assert (p.shm_fixed, p.shm_per_gpu, p.shm_max) == (None, 8 * 2**30, 1000)
    p = compiled(erdma(shm={"perGpu": "1.5Ki"}))
    assert p.shm_per_gpu == 1536 and p.shm_max is None


@pytest.mark.parametrize(
    "shm,expect",
    [
        (
            {},
            "p.yaml: policy 'erdma': field shm: give exactly one of sizeLimit (fixed) or perGpu (with an optional max)",
        ),
        (
            {"sizeLimit": "1Gi", "perGpu": "1Gi"},
            "p.yaml: policy 'erdma': field shm: give exactly one of sizeLimit (fixed) or perGpu (with an optional max)",
        ),
        ({"sizeLimit": "1Gi", "max": "2Gi"}, "p.yaml: policy 'erdma': field shm.max: only meaningful with shm.perGpu"),
        (
            {"sizeLimit": "lots"},
            "p.yaml: policy 'erdma': field shm.sizeLimit: 'lots' is not a Kubernetes quantity (e.g. 64Gi)",
        ),
        ({"sizeLimit": 0}, "p.yaml: policy 'erdma': field shm.sizeLimit: 0 must be a positive whole number of bytes"),
        (
            {"perGpu": "-1Gi"},
            "p.yaml: policy 'erdma': field shm.perGpu: '-1Gi' must be a positive whole number of bytes",
        ),
        (
            {"perGpu": "1Gi", "max": "0.5"},
            "p.yaml: policy 'erdma': field shm.max: '0.5' must be a positive whole number of bytes",
        ),
    ],
)
def test_shm_problems(shm, expect):
    assert problems(erdma(shm=shm)) == [expect]


def test_one_byte_of_shm_is_a_size():
    assert compiled(erdma(shm={"sizeLimit": 1})).shm_fixed == 1


# -- names and resources -------------------------------------------------------------------------------


def test_the_policy_name_must_be_a_dns_label():
    assert problems(erdma(name="Bad_Name")) == [
        "p.yaml: policy 'Bad_Name': field name: must be a DNS-1123 label (lowercase letters, digits and '-')"
    ]


def test_every_resource_list_checks_its_names_with_their_index():
    found = problems(
        erdma(
            gpuResources=["nvidia.com/gpu", "gpu"],
            devices=[{"resource": "aliyun/erdma"}, {"resource": "kubernetes.io/x"}],
            equivalentResources=["example.com/ok", "bad name"],
        )
    )
    assert [e.split(": ")[2] for e in found] == [
        "field gpuResources[1]",
        "field devices[1].resource",
        "field equivalentResources[1]",
    ]
    assert found[0].startswith(
        "p.yaml: policy 'erdma': field gpuResources[1]: 'gpu' is not a valid extended resource name: "
    )


def test_a_device_resource_listed_twice():
    devices = [{"resource": "aliyun/erdma"}, {"resource": "aliyun/erdma", "count": 2}]
    assert problems(erdma(devices=devices)) == [
        "p.yaml: policy 'erdma': field devices: a resource is listed twice; give each rail its own resource"
    ]


def test_network_names_namespaces_resources_and_interfaces():
    nets = [
        {"name": "Bad", "interface": "net1"},
        {"name": "ok", "namespace": "Bad_NS", "interface": "net1"},
        {"name": "ok2", "interface": "eth0", "resource": "bad"},
        {"name": "ok3", "interface": "lo"},
    ]
    found = problems(sriov(networks=nets))
    assert found == [
        "p.yaml: policy 'sriov-roce': field networks[0].name: 'Bad' is not a valid NetworkAttachmentDefinition name",
        "p.yaml: policy 'sriov-roce': field networks[1].namespace: 'Bad_NS' is not a valid namespace name",
        "p.yaml: policy 'sriov-roce': field networks[1].interface: 'net1' is taken (by another network, or eth0/lo of the pod network)",
        found[3],
        "p.yaml: policy 'sriov-roce': field networks[2].interface: 'eth0' is taken (by another network, or eth0/lo of the pod network)",
        "p.yaml: policy 'sriov-roce': field networks[3].interface: 'lo' is taken (by another network, or eth0/lo of the pod network)",
    ]
    assert found[3].startswith("p.yaml: policy 'sriov-roce': field networks[2].resource: 'bad' is not a valid")


def test_a_network_listed_twice_is_one_per_namespace():
    twice = [{"name": "rdma", "interface": "net1"}, {"name": "rdma", "interface": "net2"}]
    assert problems(sriov(networks=twice)) == ["p.yaml: policy 'sriov-roce': field networks: a network is listed twice"]
    other_ns = [{"name": "rdma", "interface": "net1"}, {"name": "rdma", "namespace": "infra", "interface": "net2"}]
    assert len(compiled(sriov(networks=other_ns)).networks) == 2
    # networks without interfaces may be several
    plain = compiled(sriov(networks=[{"name": "a"}, {"name": "b"}])).networks
    assert [(n.name, n.interface, n.count, n.per_gpu) for n in plain] == [("a", None, 1, False), ("b", None, 1, False)]


def test_gke_network_names_interfaces_and_multus_together():
    doc = shipped("gke-tcpxo")
    doc["gkeNetworks"] = [
        {"name": "default", "interface": "eth1"},
        {"name": "Bad", "interface": "eth1"},
        {"name": "vpc3", "interface": "eth0"},
        {"name": "vpc3", "interface": "lo"},
    ]
    found = problems(doc)
    taken = "is taken (by another network, or eth0/lo of the pod network)"
    assert found == [
        "p.yaml: policy 'gke-tcpxo': field gkeNetworks[0].name: 'default' is not the name of a GKE Network besides the pod network 'default'",
        "p.yaml: policy 'gke-tcpxo': field gkeNetworks[1].name: 'Bad' is not the name of a GKE Network besides the pod network 'default'",
        f"p.yaml: policy 'gke-tcpxo': field gkeNetworks[1].interface: 'eth1' {taken}",
        f"p.yaml: policy 'gke-tcpxo': field gkeNetworks[2].interface: 'eth0' {taken}",
        f"p.yaml: policy 'gke-tcpxo': field gkeNetworks[3].interface: 'lo' {taken}",
        "p.yaml: policy 'gke-tcpxo': field gkeNetworks: a network is listed twice",
    ]
    doc = shipped("gke-tcpxo")
    doc["networks"] = [{"name": "rdma", "interface": "net1"}]
    assert problems(doc) == [
        "p.yaml: policy 'gke-tcpxo': field gkeNetworks: a pod is attached by Multus (networks) or by GKE "
        "multi-networking (gkeNetworks), not both: give one of them"
    ]


def test_gke_networks_without_interfaces_may_be_several():
    doc = shipped("gke-tcpxo")
    doc["gkeNetworks"] = [{"name": "vpc1"}, {"name": "vpc2"}]
    doc["nccl"] = {"NCCL_NET": {"value": "FasTrak", "enforce": True}}
    assert len(compiled(doc).gke_networks) == 2


# -- the DRA claim and classes ------------------------------------------------------------------------------


def test_the_claim_is_compiled_with_its_alignment_attribute():
    p = compiled(shipped("roce-dranet-aligned"))
    c = p.claim
    assert (c.name, c.template, c.equivalent, c.aligned) == ("gpus-and-nics", "gpu-nic-aligned-{gpus}", (), True)
    assert c.attribute == "resource.kubernetes.io/pcieRoot"
    doc = shipped("roce-dranet-aligned")
    doc["claim"] = {**doc["claim"], "alignment": "numaNode", "equivalentTemplates": ["a", "b"]}
    c = compiled(doc).claim
    assert c.attribute == "resource.kubernetes.io/numaNode" and c.equivalent == ("a", "b")
    assert p.dra.drivers == frozenset({"dra.net"}) and p.dra.selectors == ("rdma",) and p.dra.classes == frozenset()
    doc["claim"] = {"name": "nics", "template": "nic-template"}
    c = compiled(doc).claim
    assert c.aligned is False and c.equivalent == ()


def test_claim_problems():
    doc = shipped("roce-dranet-aligned")
    doc["claim"] = {
        "name": "Bad",
        "template": "nics-{gpus}",
        "equivalentTemplates": ["ok", "x-{gpus}", "Bad_T"],
        "alignment": "numaNode",
    }
    assert problems(doc) == [
        "p.yaml: policy 'roce-dranet-aligned': field claim.name: 'Bad' must be a DNS-1123 label (the pod's resourceClaims entry)",
        "p.yaml: policy 'roce-dranet-aligned': field claim.template: 'nics-{gpus}': {gpus} (the GPU count) is for the template of an aligned claim",
        "p.yaml: policy 'roce-dranet-aligned': field claim.equivalentTemplates[1]: 'x-{gpus}': "
        "{gpus} (the GPU count) is for the template of an aligned claim",
        "p.yaml: policy 'roce-dranet-aligned': field claim.equivalentTemplates[2]: 'Bad_T' is not a valid ResourceClaimTemplate name",
        "p.yaml: policy 'roce-dranet-aligned': field claim.alignment: only meaningful with claim.aligned: true",
    ]
    # an aligned claim: {gpus} in its template only, and the template with the count must be a name
    doc["claim"] = {"name": "c", "template": "T-{gpus}", "aligned": True, "equivalentTemplates": ["e-{gpus}"]}
    assert problems(doc) == [
        "p.yaml: policy 'roce-dranet-aligned': field claim.template: 'T-{gpus}' is not a valid ResourceClaimTemplate name",
        "p.yaml: policy 'roce-dranet-aligned': field claim.equivalentTemplates[0]: 'e-{gpus}': "
        "{gpus} (the GPU count) is for the template of an aligned claim",
    ]
    doc["claim"] = {"name": "c", "template": "t-{gpus}", "aligned": False}
    assert len(problems(doc)) == 1
    doc["claim"] = {"name": "c", "template": "t-{gpus}", "aligned": True, "alignment": "pcieRoot"}
    assert compiled(doc).claim.template == "t-{gpus}"


def test_dra_problems():
    doc = sriov()
    doc["dra"] = {"deviceClasses": ["ok.example", "Bad_Class"], "drivers": ["dra.net", "Bad Driver"]}
    assert problems(doc) == [
        "p.yaml: policy 'sriov-roce': field dra.deviceClasses[1]: 'Bad_Class' is not a valid DeviceClass name",
        "p.yaml: policy 'sriov-roce': field dra.drivers[1]: 'Bad Driver' is not a valid DRA driver name (a DNS subdomain)",
    ]
    doc["dra"] = {"deviceClasses": ["c"], "selectors": ["rdma"]}
    assert problems(doc) == [
        "p.yaml: policy 'sriov-roce': field dra.selectors: narrows the classes of dra.drivers, and there are none: add drivers"
    ]
    doc["dra"] = {"selectors": []}
    assert problems(doc) == [
        "p.yaml: policy 'sriov-roce': field dra: give deviceClasses or drivers: the DeviceClasses that are this fabric's NICs"
    ]
    doc["dra"] = {"drivers": ["dra.net"], "selectors": ["a", "b"]}
    dra = compiled(doc).dra
    assert dra.classes == frozenset() and dra.selectors == ("a", "b")
    doc["dra"] = {"deviceClasses": ["c"], "selectors": []}
    assert compiled(doc).dra.classes == frozenset({"c"})


# -- hostNetwork and the fabric's way in ------------------------------------------------------------------------


def test_host_network_modes():
    assert compiled(erdma(hostNetwork="Required")).host_network == "Required"
    assert compiled(erdma(hostNetwork="Forbidden")).host_network == "Forbidden"
    doc = erdma()
    doc.pop("hostNetwork", None)
    assert compiled(doc).host_network == "Allowed"
    assert problems(sriov(hostNetwork="Required")) == [
        "p.yaml: policy 'sriov-roce': field hostNetwork: Required with Multus networks: Multus attaches no networks to host-network pods"
    ]
    gke = shipped("gke-tcpxo")
    gke["hostNetwork"] = "Required"
    assert problems(gke) == [
        "p.yaml: policy 'gke-tcpxo': field hostNetwork: Required with gkeNetworks: GKE attaches no additional networks to host-network pods"
    ]


NO_WAY = (
    "field devices: the policy gives no device resource, Multus network or DRA claim and names no DRA "
    "DeviceClass: give one, or set hostNetwork: Required for a fabric reached through the host's interfaces"
)


def test_a_policy_must_give_some_way_to_its_fabric():
    doc = erdma()
    doc.pop("devices")
    assert problems(doc) == [f"p.yaml: policy 'erdma': {NO_WAY}"]
    assert compiled({**doc, "hostNetwork": "Required"}).devices == ()
    assert compiled({**doc, "networks": [{"name": "n"}], "hostNetwork": "Forbidden"}).networks
    gke = shipped("gke-tcpxo")
    assert compiled(gke).devices == ()
    claim = shipped("roce-dranet-aligned")
    claim.pop("dra")
    assert compiled(claim).claim is not None
    dra = shipped("efa-dra")
    assert compiled(dra).claim is None and compiled(dra).devices == ()


# -- the fabric -------------------------------------------------------------------------------------------------


def test_socket_is_no_rdma_fabric_in_any_case():
    fabric = {"kind": "roce", "ncclNet": ["IB", "SOCKET"], "hcaDevices": ["mlx5"]}
    assert problems(erdma(fabric=fabric, nccl={"NCCL_IB_HCA": "mlx5"})) == [
        "p.yaml: policy 'erdma': field fabric.ncclNet: 'Socket' is NCCL's TCP transport, not an RDMA fabric"
    ]


def test_the_fields_a_transport_reads_are_required_and_the_others_refused():
    assert problems(erdma(fabric={"kind": "roce", "ncclNet": ["IB"]}, nccl={"NCCL_NET": "IB"})) == [
        "p.yaml: policy 'erdma': field fabric.hcaDevices: required for the ib-verbs transport (the device names NCCL_IB_HCA must keep)"
    ]
    efa = shipped("efa")
    efa["fabric"] = {k: v for k, v in efa["fabric"].items() if k != "providers"}
    efa["fabric"]["hcaDevices"] = ["mlx5"]
    efa["nccl"] = {"NCCL_NET": "OFI"}
    assert problems(efa) == [
        "p.yaml: policy 'efa': field fabric.providers: required for the libfabric transport (the FI_PROVIDER values that are RDMA, e.g. efa)",
        "p.yaml: policy 'efa': field fabric.hcaDevices: not read by the libfabric transport",
    ]
    fabric = {"kind": "roce", "ncclNet": ["IB"], "hcaDevices": ["mlx5"], "providers": ["efa"]}
    assert problems(erdma(fabric=fabric, nccl={"NCCL_NET": "IB"})) == [
        "p.yaml: policy 'erdma': field fabric.providers: not read by the ib-verbs transport"
    ]


# -- the NCCL block ----------------------------------------------------------------------------------------------


def test_the_nccl_block_compiles_in_order_with_logging_yielding():
    nccl = {
        "NCCL_NET": {"value": "IB", "enforce": True},
        "NCCL_IB_HCA": "erdma",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": {"value": "INIT,NET"},
        "NCCL_IB_GID_INDEX": {"value": "1", "enforce": False},
    }
    env = compiled(erdma(nccl=nccl)).env
    assert [(e.name, e.value, e.enforce, e.templated, e.yields_to_env_from, e.only_with) for e in env] == [
        ("NCCL_NET", "IB", True, False, False, None),
        ("NCCL_IB_HCA", "erdma", False, False, False, None),
        ("NCCL_DEBUG", "INFO", False, False, True, None),
        ("NCCL_DEBUG_SUBSYS", "INIT,NET", False, False, True, "NCCL_DEBUG"),
        ("NCCL_IB_GID_INDEX", "1", False, False, False, None),
    ]
    enforced = {
        "NCCL_DEBUG": {"value": "WARN", "enforce": True},
        "NCCL_DEBUG_SUBSYS": {"value": "NET", "enforce": True},
    }
    env = compiled(erdma(nccl=enforced)).env
    assert [(e.name, e.yields_to_env_from, e.only_with) for e in env] == [
        ("NCCL_DEBUG", False, None),
        ("NCCL_DEBUG_SUBSYS", False, None),
    ]


def test_interface_templates_need_networks():
    found = problems(erdma(nccl={"NCCL_SOCKET_IFNAME": "{interface}", "NCCL_X": "a{interfaces}"}))
    message = "{interface}/{interfaces} name the policy's Multus or GKE interfaces, and it has no networks"
    assert found == [
        f"p.yaml: policy 'erdma': field nccl.NCCL_SOCKET_IFNAME: {message}",
        f"p.yaml: policy 'erdma': field nccl.NCCL_X: {message}",
    ]
    env = compiled(sriov()).env
    assert [e.name for e in env if e.templated] == ["NCCL_SOCKET_IFNAME"]
    gke = compiled(shipped("gke-tcpxo")).env
    assert [e.name for e in gke if e.templated] == ["NCCL_FASTRAK_IFNAME"]


def test_nccl_names_must_be_environment_variable_names():
    found = problems(erdma(nccl={"NCCL-IB-HCA": "erdma", "1X": "y", "NCCL_NET": "IB"}))
    assert found == [
        "p.yaml: policy 'erdma': field nccl.NCCL-IB-HCA: not a valid environment variable name",
        "p.yaml: policy 'erdma': field nccl.1X: not a valid environment variable name",
    ]


def test_entries_the_schema_refuses_are_left_to_it():
    # a compiled document is valid by the schema; entries that are not are skipped, never a crash
    policy, errors = compile_sections(
        erdma(nccl={"A": 3, "NCCL_NET": "IB", "B": {"enforce": True}, "C": {"value": 1}}), "p.yaml", "erdma"
    )
    assert errors == [] and [e.name for e in policy.env] == ["NCCL_NET"]


def test_a_value_that_sends_nccl_to_tcp_names_its_effect():
    found = problems(erdma(nccl={"NCCL_NET": "Socket"}))
    assert len(found) == 1
    (error,) = found
    assert error.startswith("p.yaml: policy 'erdma': field nccl.NCCL_NET: NCCL_NET='Socket' forces NCCL's TCP socket")
    assert error.endswith(
        ": this policy would put it into every pod it injects; give NCCL_NET a value that keeps the erdma "
        "fabric on RDMA, or leave it out of the nccl block"
    )
    assert "; " not in error.split(": this policy")[0]
    # a warned variable is no error in the policy's own block
    efa = shipped("efa")
    efa["nccl"] = {**efa["nccl"], "FI_EFA_USE_DEVICE_RDMA": "0"}
    assert compiled(efa).env[2].name == "FI_EFA_USE_DEVICE_RDMA"


def test_a_templated_value_is_not_judged():
    # `{interface}` is the pod's interface, known only per pod: not judged at load
    p = compiled(sriov(nccl={"NCCL_NET": "IB", "NCCL_IB_HCA": "{interface}"}))
    assert [(e.name, e.templated) for e in p.env] == [("NCCL_NET", False), ("NCCL_IB_HCA", True)]


def test_every_denied_value_of_the_block_is_reported_with_its_effect_only():
    found = problems(erdma(nccl={"NCCL_IB_HCA": "mlx5", "NCCL_IB_DISABLE": "1"}))
    assert found == [
        "p.yaml: policy 'erdma': field nccl.NCCL_IB_HCA: NCCL_IB_HCA='mlx5' selects none of the erdma policy's "
        "erdma fabric's devices (erdma_0, erdma_1, ...), so NCCL finds no RDMA device and uses TCP: this policy "
        "would put it into every pod it injects; give NCCL_IB_HCA a value that keeps the erdma fabric on RDMA, "
        "or leave it out of the nccl block",
        "p.yaml: policy 'erdma': field nccl.NCCL_IB_DISABLE: NCCL_IB_DISABLE='1' turns NCCL's IB/RoCE transport "
        "off, so NCCL runs on TCP sockets (NET/Socket): this policy would put it into every pod it injects; give "
        "NCCL_IB_DISABLE a value that keeps the erdma fabric on RDMA, or leave it out of the nccl block",
    ]


def test_the_problems_of_every_section_are_reported_together():
    doc = erdma(
        name="Bad_Name",
        devices=[{"resource": "bad"}],
        shm={"sizeLimit": "x"},
        nccl={"NCCL-X": "1"},
    )
    found = problems(doc)
    assert [e.split(": ")[2] for e in found] == [
        "field name",
        "field devices[0].resource",
        "field shm.sizeLimit",
        "field nccl.NCCL-X",
    ]
