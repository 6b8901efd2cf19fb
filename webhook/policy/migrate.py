"""v1alpha1 policies read as v1alpha2: the document that means the same, and the v1alpha1 name of
a field an error points at (so that the author reads their own file's words)."""

from __future__ import annotations

from typing import Any

from webhook.policy.schema import API_VERSION


def migrate_v1alpha1(doc: dict[str, Any]) -> dict[str, Any]:
    """A valid v1alpha1 policy as the v1alpha2 document that means the same (`policy migrate`
    prints it; the loader compiles v1alpha1 files through it). The one device and the one
    network become a list of one; a network keeps the device as its fallback resource (as
    v1alpha1 did when the NetworkAttachmentDefinition names none); an NCCL_SOCKET_IFNAME equal to
    the network's interface becomes `{interface}`, the name the pod will really have."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key in ("device", "network", "fabric", "nccl"):
            continue
        out[key] = value
    out["apiVersion"] = API_VERSION
    fabric = doc["fabric"]
    out["fabric"] = {
        "kind": fabric["kind"],
        "transport": "ib-verbs",
        "ncclNet": list(fabric["ncclNet"]),
        "hcaDevices": list(fabric["hcaDevices"]),
    }
    device = doc.get("device") or {}
    network = doc.get("network")
    amount = {k: device[k] for k in ("count", "perGpu") if k in device}
    if network is not None:
        net = dict(network)
        if device.get("resource"):
            net["resource"] = device["resource"]
        net.update(amount)
        out["networks"] = [net]
        out["hostNetwork"] = "Forbidden"
    elif device.get("resource"):
        out["devices"] = [{"resource": device["resource"], **amount}]
    nccl_block = dict(doc["nccl"])
    iface = (network or {}).get("interface")
    if iface and nccl_block.get("NCCL_SOCKET_IFNAME") == iface:
        nccl_block["NCCL_SOCKET_IFNAME"] = "{interface}"
    out["nccl"] = nccl_block
    return out


def v1alpha1_field(field: str | None) -> str | None:
    """A v1alpha2 field path of a migrated v1alpha1 policy, as the v1alpha1 file names it."""
    if field is None:
        return None
    for v2, v1 in (
        ("devices[0].", "device."),
        ("networks[0].resource", "device.resource"),
        ("networks[0].count", "device.count"),
        ("networks[0].perGpu", "device.perGpu"),
        ("networks[0].", "network."),
    ):
        if field.startswith(v2):
            return v1 + field[len(v2) :]
    return field
