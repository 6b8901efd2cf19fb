"""The ResourceClaimTemplate of an aligned claim: each GPU in a pair with a NIC on its PCIe root.

Why pairs: a claim's `constraints` with `matchAttribute: resource.kubernetes.io/pcieRoot` ask the
scheduler for devices that share that attribute's value. One constraint over all the GPUs and
NICs of an 8-GPU node would ask for one PCIe root for all of them, which no server has; a
constraint per GPU/NIC pair asks for what NCCL wants, each GPU's traffic through the NIC beside
it (GPUDirect RDMA without a hop across the CPU interconnect). The attribute is standard from
Kubernetes 1.34 (resource.k8s.io/v1 GA) and published by NVIDIA's GPU DRA driver, DRANET and
the SR-IOV DRA driver. Device-plugin GPUs (`nvidia.com/gpu` in limits) cannot take part: the
device plugin allocates them outside DRA, so there is nothing to constrain.

Sources: Kubernetes documentation, "Dynamic Resource Allocation" (DeviceConstraint,
matchAttribute), https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/;
"Standard Device Attributes for Dynamic Resource Allocation" (resource.kubernetes.io/pcieRoot),
https://kubernetes.io/docs/reference/node/dra-standard-device-attributes/; the Go package
k8s.io/dynamic-resource-allocation/deviceattribute, v0.34 (the attribute's first release),
https://pkg.go.dev/k8s.io/dynamic-resource-allocation/deviceattribute.
"""

from __future__ import annotations

from typing import Any

# claim.alignment: the standard DRA device attributes GPU and NIC drivers publish alike
# (Kubernetes, "Standard Device Attributes for Dynamic Resource Allocation").
ALIGNMENT_ATTRIBUTES = {"pcieRoot": "resource.kubernetes.io/pcieRoot", "numaNode": "resource.kubernetes.io/numaNode"}

PCIE_ROOT = ALIGNMENT_ATTRIBUTES["pcieRoot"]
MIN_KUBERNETES = "1.34"  # resource.k8s.io/v1 and the standard pcieRoot attribute


def aligned_template(
    name: str, gpus: int, gpu_class: str, nic_class: str, namespace: str | None = None, attribute: str = PCIE_ROOT
) -> dict[str, Any]:
    """A ResourceClaimTemplate claiming `gpus` GPUs of `gpu_class`, each with one NIC of
    `nic_class` with the same `attribute` (the PCIe root, or the NUMA node)."""
    requests: list[dict[str, Any]] = []
    constraints: list[dict[str, Any]] = []
    for i in range(gpus):
        requests.append(
            {"name": f"gpu-{i}", "exactly": {"deviceClassName": gpu_class, "allocationMode": "ExactCount", "count": 1}}
        )
        requests.append(
            {"name": f"nic-{i}", "exactly": {"deviceClassName": nic_class, "allocationMode": "ExactCount", "count": 1}}
        )
        constraints.append({"requests": [f"gpu-{i}", f"nic-{i}"], "matchAttribute": attribute})
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": {"spec": {"devices": {"requests": requests, "constraints": constraints}}},
    }
