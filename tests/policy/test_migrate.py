"""webhook.policy.migrate: a v1alpha1 policy as the v1alpha2 document that means the same, and
the v1alpha1 name of a field an error points at."""

from __future__ import annotations

import copy

import pytest

from webhook.policy.migrate import migrate_v1alpha1, v1alpha1_field

V1 = {
    "apiVersion": "rdma-webhook.io/v1alpha1",
    "kind": "RdmaPolicy",
    "name": "old",
    "description": "SR-IOV",
    "priority": 3,
    "namespaceSelector": {"matchLabels": {"team": "ml"}},
    "fabric": {"kind": "sriov", "ncclNet": ["IB"], "hcaDevices": ["mlx5_[0-3]"]},
    "device": {"resource": "openshift.io/mellanoxrdma", "count": 2, "perGpu": True},
    "network": {"name": "rdma-network", "namespace": "infra", "interface": "net1"},
    "shm": {"sizeLimit": "16Gi"},
    "nccl": {"NCCL_NET": {"value": "IB", "enforce": True}, "NCCL_SOCKET_IFNAME": "net1"},
    "workloadValidation": "Warn",
}


def test_a_network_policy_keeps_its_device_as_the_networks_resource():
    doc = copy.deepcopy(V1)
    out = migrate_v1alpha1(doc)
    assert out == {
        "apiVersion": "rdma-webhook.io/v1alpha2",
        "kind": "RdmaPolicy",
        "name": "old",
        "description": "SR-IOV",
        "priority": 3,
        "namespaceSelector": {"matchLabels": {"team": "ml"}},
        "shm": {"sizeLimit": "16Gi"},
        "workloadValidation": "Warn",
        "fabric": {"kind": "sriov", "transport": "ib-verbs", "ncclNet": ["IB"], "hcaDevices": ["mlx5_[0-3]"]},
        "networks": [
            {
                "name": "rdma-network",
                "namespace": "infra",
                "interface": "net1",
                "resource": "openshift.io/mellanoxrdma",
                "count": 2,
                "perGpu": True,
            }
        ],
        "hostNetwork": "Forbidden",
        "nccl": {"NCCL_NET": {"value": "IB", "enforce": True}, "NCCL_SOCKET_IFNAME": "{interface}"},
    }
    # `policy migrate` prints the keys in this order: the file's own, then what was migrated
    assert list(out) == [
        "apiVersion",
        "kind",
        "name",
        "description",
        "priority",
        "namespaceSelector",
        "shm",
        "workloadValidation",
        "fabric",
        "networks",
        "hostNetwork",
        "nccl",
    ]
    assert doc == V1  # the document read is left as it was
    out["networks"][0]["name"] = "x"
    out["fabric"]["ncclNet"].append("y")
    out["nccl"]["Z"] = "1"
    assert doc == V1


def test_a_network_without_a_device_resource_takes_the_nads():
    doc = copy.deepcopy(V1)
    doc["device"] = {}
    out = migrate_v1alpha1(doc)
    assert out["networks"] == [{"name": "rdma-network", "namespace": "infra", "interface": "net1"}]
    assert "devices" not in out
    del doc["device"]
    assert migrate_v1alpha1(doc)["networks"] == out["networks"]


def test_a_device_policy_is_one_device_and_keeps_its_host_network_mode_open():
    doc = copy.deepcopy(V1)
    del doc["network"]
    out = migrate_v1alpha1(doc)
    assert out["devices"] == [{"resource": "openshift.io/mellanoxrdma", "count": 2, "perGpu": True}]
    assert "networks" not in out and "hostNetwork" not in out
    assert out["nccl"]["NCCL_SOCKET_IFNAME"] == "net1"  # no network: no interface to stand for
    doc["device"] = {"resource": "rdma/hca"}
    assert migrate_v1alpha1(doc)["devices"] == [{"resource": "rdma/hca"}]
    doc["device"] = {"count": 1}
    assert "devices" not in migrate_v1alpha1(doc)


def test_only_the_networks_own_interface_becomes_the_template():
    doc = copy.deepcopy(V1)
    doc["nccl"] = {"NCCL_SOCKET_IFNAME": "eth0"}
    assert migrate_v1alpha1(doc)["nccl"] == {"NCCL_SOCKET_IFNAME": "eth0"}
    doc["network"] = {"name": "rdma-network"}
    doc["nccl"] = {"NCCL_SOCKET_IFNAME": "net1", "NCCL_IB_HCA": "net1"}
    assert migrate_v1alpha1(doc)["nccl"] == {"NCCL_SOCKET_IFNAME": "net1", "NCCL_IB_HCA": "net1"}
    doc["network"] = {"name": "rdma-network", "interface": "net1"}
    assert migrate_v1alpha1(doc)["nccl"] == {"NCCL_SOCKET_IFNAME": "{interface}", "NCCL_IB_HCA": "net1"}


@pytest.mark.parametrize(
    "v2,v1",
    [
        (None, None),
        ("devices[0].resource", "device.resource"),
        ("devices[0].count", "device.count"),
        ("networks[0].resource", "device.resource"),
        ("networks[0].count", "device.count"),
        ("networks[0].perGpu", "device.perGpu"),
        ("networks[0].interface", "network.interface"),
        ("networks[0].name", "network.name"),
        ("networks[0]", "networks[0]"),
        ("devices", "devices"),
        ("nccl.NCCL_NET", "nccl.NCCL_NET"),
        ("shm.devices[0].x", "shm.devices[0].x"),
    ],
)
def test_a_v1alpha2_field_is_named_as_the_v1alpha1_file_has_it(v2, v1):
    assert v1alpha1_field(v2) == v1
