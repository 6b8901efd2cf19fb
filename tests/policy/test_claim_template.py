"""webhook.policy.claim_template: the ResourceClaimTemplate of an aligned claim, each GPU in a
pair with one NIC that shares its attribute (the PCIe root unless told)."""

from __future__ import annotations

from webhook.policy.claim_template import ALIGNMENT_ATTRIBUTES, MIN_KUBERNETES, PCIE_ROOT, aligned_template


def test_two_gpus_each_paired_with_a_nic_on_its_pcie_root():
    assert aligned_template("gpu-nic-aligned-2", 2, "gpu.nvidia.com", "dranet") == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-nic-aligned-2"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu-0",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                        },
                        {
                            "name": "nic-0",
                            "exactly": {"deviceClassName": "dranet", "allocationMode": "ExactCount", "count": 1},
                        },
                        {
                            "name": "gpu-1",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                        },
                        {
                            "name": "nic-1",
                            "exactly": {"deviceClassName": "dranet", "allocationMode": "ExactCount", "count": 1},
                        },
                    ],
                    "constraints": [
                        {"requests": ["gpu-0", "nic-0"], "matchAttribute": "resource.kubernetes.io/pcieRoot"},
                        {"requests": ["gpu-1", "nic-1"], "matchAttribute": "resource.kubernetes.io/pcieRoot"},
                    ],
                }
            }
        },
    }


def test_a_namespace_and_another_attribute():
    t = aligned_template("t", 1, "g", "n", namespace="team-a", attribute=ALIGNMENT_ATTRIBUTES["numaNode"])
    assert t["metadata"] == {"name": "t", "namespace": "team-a"}
    assert t["spec"]["spec"]["devices"]["constraints"] == [
        {"requests": ["gpu-0", "nic-0"], "matchAttribute": "resource.kubernetes.io/numaNode"}
    ]
    assert aligned_template("t", 1, "g", "n", namespace="")["metadata"] == {"name": "t"}


def test_eight_gpus_are_eight_pairs_in_order():
    devices = aligned_template("t", 8, "g", "n")["spec"]["spec"]["devices"]
    assert [r["name"] for r in devices["requests"]] == [f"{k}-{i}" for i in range(8) for k in ("gpu", "nic")]
    assert [c["requests"] for c in devices["constraints"]] == [[f"gpu-{i}", f"nic-{i}"] for i in range(8)]


def test_the_attributes_and_the_kubernetes_version_are_the_standard_ones():
    assert PCIE_ROOT == ALIGNMENT_ATTRIBUTES["pcieRoot"] == "resource.kubernetes.io/pcieRoot"
    assert ALIGNMENT_ATTRIBUTES == {
        "pcieRoot": "resource.kubernetes.io/pcieRoot",
        "numaNode": "resource.kubernetes.io/numaNode",
    }
    assert MIN_KUBERNETES == "1.34"
