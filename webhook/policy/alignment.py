"""Whether a cluster's devices can satisfy a policy's aligned claim: `policy lint --cluster-state`.

An aligned claim (`claim: {aligned: true, alignment: pcieRoot | numaNode}`,
`webhook.policy.claim_template`) asks the scheduler for each GPU with a NIC that has the same
value of one device attribute. Whether any node can give that is a fact of its ResourceSlices:
on GB200 and GB300 the ConnectX NICs hang off the Grace CPU's PCIe, not a PCIe switch shared with a
GPU (kubernetes-sigs/dra-driver-nvidia-gpu#1123), so no NIC has a GPU's pcieRoot and every pod
of a pcieRoot-aligned policy stays Pending there; a NUMA alignment, or none, fits those nodes.

`check` reads the ResourceSlices (resource.k8s.io v1: `spec.devices[].attributes`; v1beta1:
`spec.devices[].basic.attributes`) and the DeviceClasses of a cluster-state file and says, per
aligned policy and node, how many GPUs have a NIC of the policy's fabric with their value of the
attribute: none is an error naming the nodes, fewer than the node's GPUs a warning (pods asking
for more GPUs than that cannot be placed there).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from webhook.core.model import Policy, PolicySet

GPU_DRIVERS = ("gpu.nvidia.com",)  # NVIDIA's GPU DRA driver, the aligned claim's GPU class
_DRIVER_IN_CEL = re.compile(r"device\.driver\s*==\s*[\"']([^\"']+)[\"']")


def objects_of(docs: Iterable[Any]) -> list[Mapping[str, Any]]:
    """The Kubernetes objects of YAML documents, `*List` items flattened."""
    out: list[Mapping[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        if isinstance(doc.get("kind"), str) and doc["kind"].endswith("List") and isinstance(doc.get("items"), list):
            out.extend(objects_of(doc["items"]))
        else:
            out.append(doc)
    return out


def _attributes(device: Mapping[str, Any]) -> dict[str, Any]:
    attrs = device.get("attributes")
    if not isinstance(attrs, dict) and isinstance(device.get("basic"), dict):
        attrs = device["basic"].get("attributes")
    out: dict[str, Any] = {}
    for key, value in (attrs or {}).items() if isinstance(attrs, dict) else ():
        if isinstance(value, dict) and value:
            out[str(key)] = next(iter(value.values()))  # {"string": ...} / {"int": ...} / {"bool": ...}
    return out


def _value(attrs: dict[str, Any], attribute: str, driver: str) -> Any:
    """The device's value of a standard attribute (qualified, or as a driver publishes it unqualified)."""
    if attribute in attrs:
        return attrs[attribute]
    short = attribute.rsplit("/", 1)[-1]
    return attrs.get(short, attrs.get(f"{driver}/{short}"))


def _nic_drivers(policy: Policy, objects: list[Mapping[str, Any]]) -> set[str]:
    """The DRA drivers of the policy's NICs: its dra.drivers and those its DeviceClasses' CEL names."""
    if policy.dra is None:
        return set()
    drivers = set(policy.dra.drivers)
    for obj in objects:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        if obj.get("kind") == "DeviceClass" and meta.get("name") in policy.dra.classes:
            drivers.update(_DRIVER_IN_CEL.findall(str(obj.get("spec"))))
    return drivers


def _is_nic(attrs: dict[str, Any], policy: Policy) -> bool:
    """A device of the fabric: with `dra.selectors` (DRANET's `rdma`), one with such an attribute set."""
    if policy.dra is None or not policy.dra.selectors:
        return True
    return any(s in key and value is True for key, value in attrs.items() for s in policy.dra.selectors)


def _nodes(
    objects: list[Mapping[str, Any]], policy: Policy, nic_drivers: set[str]
) -> dict[str, tuple[list[Any], list[Any]]]:
    """Per node: (the GPUs' values of the attribute, the NICs' values)."""
    nodes: dict[str, tuple[list[Any], list[Any]]] = {}
    for obj in objects:
        spec = obj.get("spec")
        if obj.get("kind") != "ResourceSlice" or not isinstance(spec, dict):
            continue
        driver = str(spec.get("driver"))
        if driver not in nic_drivers and driver not in GPU_DRIVERS:
            continue
        pool = spec.get("pool") if isinstance(spec.get("pool"), dict) else {}
        node = str(spec.get("nodeName") or pool.get("name") or "(no node)")
        gpus, nics = nodes.setdefault(node, ([], []))
        for device in spec.get("devices") or ():
            if not isinstance(device, dict):
                continue
            attrs = _attributes(device)
            value = _value(attrs, policy.claim.attribute if policy.claim else "", driver)
            if driver in GPU_DRIVERS:
                gpus.append(value)
            elif _is_nic(attrs, policy):
                nics.append(value)
    return nodes


def check(policies: PolicySet, objects: list[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """(errors, warnings): the aligned policies whose claim no node, or only some GPUs, can satisfy."""
    errors: list[str] = []
    warnings: list[str] = []
    for policy in policies.ranked():
        claim = policy.claim
        if claim is None or not claim.aligned:
            continue
        short = claim.attribute.rsplit("/", 1)[-1]
        nodes = _nodes(objects, policy, _nic_drivers(policy, objects))
        none: list[str] = []
        for node, (gpus, nics) in sorted(nodes.items()):
            if not gpus:
                continue
            free = [v for v in nics if v is not None]
            paired = 0
            for value in gpus:
                if value is not None and value in free:
                    free.remove(value)
                    paired += 1
            if paired == 0:
                none.append(f"{node} ({len(gpus)} GPUs, {len(nics)} NICs)")
            elif paired < len(gpus):
                warnings.append(
                    f"policy {policy.name!r}: node {node}: only {paired} of its {len(gpus)} GPUs have a NIC with "
                    f"their {claim.attribute}: a pod asking for more GPUs than that cannot be placed there"
                )
        if none:
            errors.append(
                f"policy {policy.name!r}: claim.alignment {short}: on {', '.join(none)} no GPU has a NIC with its "
                f"{claim.attribute}, so every pod of the policy would stay Pending there; set claim.alignment: "
                f"numaNode if the NICs share the GPUs' NUMA node, or use a policy without an aligned claim"
            )
        elif not nodes:
            warnings.append(
                f"policy {policy.name!r}: the cluster state has no ResourceSlice of its GPUs or NICs: "
                f"its alignment ({short}) could not be checked"
            )
    return errors, warnings
