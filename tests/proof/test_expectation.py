"""What proof looks like per policy: derived from each shipped policy's fabric, overridden by the
`proof` section, which the schema checks and the loader compiles."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from webhook.policy.compiler import compile_policy
from webhook.policy.load import default_policies_dir, load_dir
from webhook.proof.expectation import ANY_RDMA, expectation, transport_of

POLICIES = Path(default_policies_dir())


@pytest.fixture(scope="module")
def catalogue():
    loaded, errors = load_dir(POLICIES)
    assert loaded is not None, errors
    return loaded


def doc(name: str) -> dict:
    return yaml.safe_load((POLICIES / f"{name}.yaml").read_text())


def test_derived_from_every_shipped_policy(catalogue):
    rails = {"gke": 8, "gke-gib": 8, "gke-tcpxo": 8, "sriov-roce-8rail": 8, "sriov-roce": 1}
    for policy in catalogue.ranked():
        exp = expectation(policy)
        transport = policy.fabric.transport
        assert (exp.policy, exp.transport, exp.on_fallback) == (policy.name, transport, "report")
        if transport in ("ib-verbs", "gib"):
            assert exp.devices == policy.fabric.hca_devices and exp.devices
        else:
            assert exp.devices is None
        assert exp.providers == policy.fabric.providers
        assert exp.gdr is (None if transport == "fastrak" else True), policy.name
        assert exp.rails == rails.get(policy.name), policy.name


def test_no_policy_expects_any_rdma_transport():
    assert expectation(None) is ANY_RDMA
    assert (ANY_RDMA.transport, ANY_RDMA.devices, ANY_RDMA.gdr, ANY_RDMA.rails) == (None, None, None, None)


def test_proof_section_overrides_each_part():
    d = doc("gke-tcpxo")
    d["proof"] = {"transport": "tcpx", "devices": ["eth[1-4]"], "gdr": False, "rails": 4, "onFallback": "fail"}
    policy, errors = compile_policy(d, "gke-tcpxo.yaml")
    assert errors == [] and policy is not None
    exp = expectation(policy)
    assert exp.transport == "tcpx"
    assert exp.devices == ("eth1", "eth2", "eth3", "eth4")
    assert (exp.gdr, exp.rails, exp.on_fallback) == (False, 4, "fail")


def test_proof_section_left_out_parts_stay_derived():
    d = doc("sriov-roce-8rail")
    d["proof"] = {"rails": 4}
    policy, errors = compile_policy(d, "x.yaml")
    assert errors == []
    exp = expectation(policy)
    assert (exp.rails, exp.transport, exp.gdr, exp.on_fallback) == (4, "ib-verbs", True, "report")
    assert exp.devices == policy.fabric.hca_devices


@pytest.mark.parametrize(
    "proof",
    [{"onFallback": "kill"}, {"transport": "socket"}, {"rails": 0}, {"gdr": "yes"}, {"devices": []}, {"unknown": 1}],
)
def test_schema_refuses_a_bad_proof_section(proof):
    d = copy.deepcopy(doc("ib-shared"))
    d["proof"] = proof
    policy, errors = compile_policy(d, "x.yaml")
    assert policy is None and any("proof" in str(e) for e in errors), errors


def test_gdr_off_in_the_policy_block_is_not_expected():
    d = doc("roce-dranet")
    d["nccl"]["NCCL_NET_GDR_LEVEL"] = "LOC"
    policy, errors = compile_policy(d, "x.yaml")
    assert errors == [] and expectation(policy).gdr is False
    d = doc("efa")
    d["nccl"]["FI_EFA_USE_DEVICE_RDMA"] = "0"
    policy, errors = compile_policy(d, "x.yaml")
    assert errors == [] and expectation(policy).gdr is False


def test_network_names_to_transports():
    assert transport_of("IB") == transport_of("IBext") == transport_of("IBext_v8") == "ib-verbs"
    assert transport_of("AWS Libfabric") == transport_of("Libfabric") == transport_of("OFI") == "libfabric"
    assert transport_of("gIB") == "gib" and transport_of("FasTrak") == "fastrak"
    assert transport_of("GPUDirectTCPX_v7") == "tcpx"
    assert transport_of("Socket") == transport_of("FastSocket") == "socket"
    assert transport_of("Sock") == "sock"  # unknown: its own name (the verdict calls it unverifiable)


@pytest.mark.parametrize(
    "policy, device, ok",
    [
        ("coreweave-ib", "ibp0", True),  # CoreWeave's HCAs, named by the node (ibp*)
        ("coreweave-ib", "mlx5_0", False),
        ("gb200-roce", "rocep139s0f0_dma", True),  # ConnectX-8's names on GB200/GB300
        ("erdma", "rocep26s0", True),  # eRDMA under the controller's OFED driver
        ("erdma", "erdma_2", True),
        ("erdma", "erdma_4", False),  # beyond the four NICs an instance has
        ("erdma", "mlx5_0", False),
    ],
)
def test_a_device_family_matches_by_its_stem(catalogue, policy, device, ok):
    assert expectation(catalogue.get(policy)).device_ok(device) is ok
