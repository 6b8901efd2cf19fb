"""Dynamic Resource Allocation: which of a pod's `spec.resourceClaims` are RDMA NICs, and of
which policy's fabric.

A pod claims devices through entries of `spec.resourceClaims`, each naming a ResourceClaim
(`resourceClaimName`) or a ResourceClaimTemplate (`resourceClaimTemplateName`). Neither says
what the devices are: the claim's (or the template's) requests name a DeviceClass
(`deviceClassName`, in `exactly` or in each `firstAvailable` subrequest from resource.k8s.io/v1
on; at the request itself in v1beta1), and may add CEL selectors; the DeviceClass selects its
devices with CEL, usually `device.driver == "<driver>"` and attributes. A policy names its
fabric's NICs (`dra`: `Dra` in webhook.core.model) by class name, by driver, and optionally by
CEL text that narrows the driver's classes (DRANET publishes every interface of a node, RDMA or
not, under one driver; an RDMA class adds a selector on its `rdma` attribute).

The decision never calls the API server: the classes, templates and claims come from the
cluster state's caches (webhook.cluster), through the `Claims` lookups, each value made once
when the object is listed or watched (`device_class_value`, `template_value`, `claim_value`).
Source: Kubernetes documentation, "Dynamic Resource Allocation" and "DRA API objects",
https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/ and the
resource.k8s.io/v1 API reference (DeviceClassSpec.selectors, DeviceRequest.exactly,
DeviceRequest.firstAvailable, ExactDeviceRequest.deviceClassName).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from webhook.core.model import Policy, PolicySet

_DRIVER = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")


class DeviceClassInfo:
    """What a decision reads of a DeviceClass: the drivers its CEL selectors name and the CEL text."""

    def __init__(self, name: str, drivers: tuple[str, ...], cel: str):
        self.name = name
        self.drivers = drivers
        self.cel = cel

    def __repr__(self) -> str:
        return f"DeviceClassInfo({self.name!r}, {self.drivers!r})"


class ClaimRequest:
    """One request (or subrequest) of a ResourceClaim or a template: its DeviceClass, the drivers
    its own CEL selectors name, and that CEL text."""

    def __init__(self, device_class: str, drivers: tuple[str, ...], cel: str):
        self.device_class = device_class
        self.drivers = drivers
        self.cel = cel

    def __repr__(self) -> str:
        return f"ClaimRequest({self.device_class!r}, {self.drivers!r})"


class Claims(Protocol):
    """The cluster's DeviceClasses, ResourceClaimTemplates and ResourceClaims, as the decision
    reads them (None: not known to exist)."""

    def device_class(self, name: str) -> DeviceClassInfo | None: ...

    def claim_template(self, namespace: str, name: str) -> tuple[ClaimRequest, ...] | None: ...

    def resource_claim(self, namespace: str, name: str) -> tuple[ClaimRequest, ...] | None: ...

    def lists_all(self) -> bool:
        """Whether these are all the cluster's objects (a template not here does not exist), or
        only some given (`review` without a cluster state: one not here is only not known)."""
        ...


def _cel(selectors: Any) -> str:
    parts: list[str] = []
    if isinstance(selectors, list):
        for s in selectors:
            cel = s.get("cel") if isinstance(s, dict) else None
            expr = cel.get("expression") if isinstance(cel, dict) else None
            if isinstance(expr, str):
                parts.append(expr)
    return "\n".join(parts)


def drivers_in(cel: str) -> tuple[str, ...]:
    """The drivers a CEL text requires with `device.driver == "..."`."""
    return tuple(dict.fromkeys(_DRIVER.findall(cel))) if "device.driver" in cel else ()


def device_class_value(obj: Any) -> DeviceClassInfo:
    """A DeviceClass object (as listed or watched, or from a file) as the decision reads it."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    spec = obj.get("spec") if isinstance(obj, dict) else None
    name = str(meta.get("name") or "") if isinstance(meta, dict) else ""
    cel = _cel(spec.get("selectors")) if isinstance(spec, dict) else ""
    return DeviceClassInfo(name, drivers_in(cel), cel)


def _request(device_class: Any, selectors: Any, out: list[ClaimRequest]) -> None:
    if isinstance(device_class, str) and device_class:
        cel = _cel(selectors)
        out.append(ClaimRequest(device_class, drivers_in(cel), cel))


def requests_value(claim_spec: Any) -> tuple[ClaimRequest, ...]:
    """The requests of a ResourceClaimSpec (v1: `exactly` or `firstAvailable`; v1beta1: the
    request itself)."""
    devices = claim_spec.get("devices") if isinstance(claim_spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    out: list[ClaimRequest] = []
    for r in requests if isinstance(requests, list) else ():
        if not isinstance(r, dict):
            continue
        exactly = r.get("exactly")
        if isinstance(exactly, dict):
            _request(exactly.get("deviceClassName"), exactly.get("selectors"), out)
        for sub in r.get("firstAvailable") or ():
            if isinstance(sub, dict):
                _request(sub.get("deviceClassName"), sub.get("selectors"), out)
        _request(r.get("deviceClassName"), r.get("selectors"), out)
    return tuple(out)


def template_value(obj: Any) -> tuple[ClaimRequest, ...]:
    """A ResourceClaimTemplate's requests (its spec.spec is a ResourceClaimSpec)."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return requests_value(spec.get("spec") if isinstance(spec, dict) else None)


def claim_value(obj: Any) -> tuple[ClaimRequest, ...]:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return requests_value(spec)


def _selected(p: Policy, req: ClaimRequest, info: DeviceClassInfo | None) -> bool:
    dra = p.dra
    if dra is None:
        return False
    if not dra.selectors:
        return True
    for text in dra.selectors:
        if text in req.cel or (info is not None and text in info.cel):
            return True
    return False


# RDMA NICs by DRA, whatever policies are loaded: what counts as a pod's NIC is this fixed table,
# the cluster state's DeviceClasses (their drivers, read against the table) and the policy's own
# `dra` (`is_nic`). Never the other loaded policies: a claim is a NIC, or not, under any of them.
# - DeviceClasses that select only RDMA NICs, by name: GKE managed DRANET's `mrdma.google.com`
#   (Google Cloud, "Allocate network resources using GKE managed DRANET": a template of that class
#   claims the node's RDMA NICs; GoogleCloudPlatform/cluster-toolkit and container-engine-accelerators
#   examples), the aws-dranet chart's EFA class `efa.networking.k8s.aws` (Amazon EKS User Guide,
#   "Manage EFA devices on Amazon EKS").
# - Drivers whose RDMA devices a CEL text names (driver, text the class's or request's CEL contains):
#   DRANET publishes every interface of a node under `dra.net`, its RDMA ones with the `rdma` and
#   `rdmaDevice` attributes and EFA's by its PCI device name (kubernetes-sigs/dranet, README and
#   examples/); every device of the SR-IOV network DRA driver is a VF, the pod's NIC
#   (k8snetworkplumbingwg/dra-driver-sriov, its DeviceClass sriovnetwork.k8snetworkplumbingwg.io).
NIC_CLASSES: frozenset[str] = frozenset(
    {"mrdma.google.com", "efa.networking.k8s.aws", "sriovnetwork.k8snetworkplumbingwg.io"}
)
NIC_DRIVERS: dict[str, tuple[str, ...]] = {
    "dra.net": ("rdma", "Elastic Fabric Adapter"),
    "sriovnetwork.k8snetworkplumbingwg.io": (),  # every device a VF: no text needed
}


def _table_nic(req: ClaimRequest, info: DeviceClassInfo | None) -> bool:
    if req.device_class in NIC_CLASSES:
        return True
    for driver in (*req.drivers, *(info.drivers if info is not None else ())):
        texts = NIC_DRIVERS.get(driver)
        if texts is None:
            continue
        if not texts:
            return True
        for text in texts:
            if text in req.cel or (info is not None and text in info.cel):
                return True
    return False


def policy_nic(policy: Policy, req: ClaimRequest, info: DeviceClassInfo | None) -> bool:
    """`req` claims a NIC of `policy`'s own fabric: a class its `dra` names, or one of a driver it
    names (narrowed by its selectors)."""
    d = policy.dra
    if d is None:
        return False
    if req.device_class in d.classes:
        return True
    if not d.drivers:
        return False
    for driver in (*req.drivers, *(info.drivers if info is not None else ())):
        if driver in d.drivers and _selected(policy, req, info):
            return True
    return False


def is_nic(req: ClaimRequest, policy: Policy, info: DeviceClassInfo | None) -> bool:
    """`req` claims an RDMA NIC: by the fixed table (`NIC_CLASSES`, `NIC_DRIVERS`, read on the
    request's CEL and its DeviceClass as the cluster state lists it) or by the policy's `dra`."""
    return _table_nic(req, info) or policy_nic(policy, req, info)


def nic_policies(req: ClaimRequest, policies: PolicySet, claims: Claims | None) -> list[Policy]:
    """The loaded policies whose fabric's NIC `req` claims: the advice of a `fabric-mismatch`,
    never whether it is a NIC (`is_nic`)."""
    by_name = policies.by_device_class.get(req.device_class)
    if by_name:  # a class a policy names is that policy's, whatever its driver
        return by_name
    found: list[Policy] = []
    if policies.by_driver:
        info = claims.device_class(req.device_class) if claims is not None else None
        for driver in (*req.drivers, *(info.drivers if info is not None else ())):
            for p in policies.by_driver.get(driver) or ():
                if p not in found and _selected(p, req, info):
                    found.append(p)
    # first the policies whose NICs come only by DRA: one that takes a claim instead of its GKE
    # networks (gke-gib) fits a generic DRANET claim less than the DRANET policy does
    found.sort(key=lambda p: bool(p.gke_networks or p.devices or p.networks))
    return found


def requests_of(entry: dict[str, Any], namespace: str, claims: Claims | None) -> tuple[ClaimRequest, ...] | None:
    """The requests behind one `spec.resourceClaims` entry; None when they are not known."""
    if claims is None:
        return None
    template = entry.get("resourceClaimTemplateName")
    if isinstance(template, str):
        return claims.claim_template(namespace, template)
    name = entry.get("resourceClaimName")
    if isinstance(name, str):
        return claims.resource_claim(namespace, name)
    return None


def label(policy: Policy) -> str:
    """What a policy's DRA NICs are, for people."""
    dra = policy.dra
    if dra is None:
        return ""
    parts = []
    if dra.classes:
        parts.append("DeviceClass " + "/".join(sorted(dra.classes)))
    if dra.drivers:
        parts.append("driver " + "/".join(sorted(dra.drivers)))
    return "NICs claimed through DRA (" + ", ".join(parts) + ")"
