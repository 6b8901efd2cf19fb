"""GKE multi-networking: the second network mechanism beside Multus.

On GKE a pod is attached to additional networks (GKE `Network` objects backed by a
`GKENetworkParamSet`, e.g. the RDMA networks of an A3 Ultra or A4 node pool, or the eight
GPUDirect-TCPXO VPCs of an A3 Mega node pool) by two pod annotations that GKE reads, not by
Multus:

- `networking.gke.io/interfaces`: a JSON list of `{"interfaceName": "ethN", "network": NAME}`
  objects, the pod network being `{"interfaceName": "eth0", "network": "default"}`;
- `networking.gke.io/default-interface`: the interface of the default route (`eth0`).

(Google Cloud, "Set up multi-network support for Pods",
https://cloud.google.com/kubernetes-engine/docs/how-to/setup-multinetwork-support-for-pods; the
pods of "Maximize GPU network bandwidth in Standard mode clusters",
https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx, and of
GoogleCloudPlatform/container-engine-accelerators gpudirect-rdma/nccl-test.yaml.)

Interface names are explicit here (no `net<i>` default as in Multus), and a pod whose list gives
two entries one name, or one network two interfaces, is not started as asked. So, as for Multus
(`webhook.fabrics.multus`), the plan below reads what the pod lists, keeps every entry of it in
its order (merged, never clobbered), reuses the interface of a policy network the pod already
lists, and gives each network it adds the interface the policy wants, or the lowest free `ethN`
when the pod has that one. The result is a `multus.Plan` whose `key` is this annotation, so the
mutation, the `{interface}`/`{interfaces}` values of the NCCL block and the NCCL_SOCKET_IFNAME
check read it as they read a Multus plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from webhook.fabrics.multus import Plan, free_interface

INTERFACES: Final = "networking.gke.io/interfaces"
DEFAULT_INTERFACE: Final = "networking.gke.io/default-interface"
DEFAULT_NETWORK: Final = "default"  # the pod network, always eth0
POD_INTERFACE: Final = "eth0"


@dataclass(frozen=True)
class GkeNetwork:
    """A GKE Network a policy attaches (by name) and the interface name it wants for it."""

    name: str
    interface: str | None


def parse(value: str) -> list[dict[str, Any]] | None:
    """The annotation's entries, or None when GKE could not read it (not a JSON list of objects
    each with a string `interfaceName` and `network`)."""
    try:
        entries = json.loads(value)
    except ValueError:
        return None
    if not isinstance(entries, list):
        return None
    for e in entries:
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("interfaceName"), str)
            or not isinstance(e.get("network"), str)
        ):
            return None
    return entries


def networks_of(value: str | None) -> list[str]:
    """The networks the annotation lists besides the pod network (empty when it is unreadable)."""
    if not value:
        return []
    entries = parse(value)
    out: list[str] = []
    for e in entries or ():
        name: str = e["network"]
        if name != DEFAULT_NETWORK and name not in out:
            out.append(name)
    return out


_UNREADABLE: Final = (
    "is not a JSON list of objects with a string interfaceName and network; GKE would not attach "
    "the pod's networks. Fix the annotation"
)


def plan(current: str | None, networks: tuple[GkeNetwork, ...]) -> Plan:
    """Where the policy's GKE networks go in the pod's `networking.gke.io/interfaces` annotation
    (`current`, as sent)."""
    entries: list[dict[str, Any]] = []
    if current is not None:
        parsed = parse(current)
        if parsed is None:
            return Plan(None, [], [], [], _UNREADABLE, INTERFACES)
        entries = parsed
    names: list[str] = []  # every interface the pod will have besides eth0
    taken: set[str] = set()
    by_network: dict[str, str] = {}
    for e in entries:
        iface: str = e["interfaceName"]
        network: str = e["network"]
        if iface in taken:
            return Plan(
                None,
                [],
                names,
                [],
                f"gives two entries the interface name {iface!r}; GKE would not start the pod "
                f"as asked. Give each network its own interface",
                INTERFACES,
            )
        if network in by_network:
            return Plan(
                None,
                [],
                names,
                [],
                f"attaches the network {network!r} twice ({by_network[network]} and {iface}); list each network once",
                INTERFACES,
            )
        taken.add(iface)
        by_network[network] = iface
        if iface != POD_INTERFACE:
            names.append(iface)
    interfaces: list[str] = []
    added: list[str] = []
    new_entries: list[dict[str, Any]] = []
    if not entries and networks:  # GKE's form lists the pod network first
        new_entries.append({"interfaceName": POD_INTERFACE, "network": DEFAULT_NETWORK})
        taken.add(POD_INTERFACE)
    for n in networks:
        found = by_network.get(n.name)
        if found is not None:
            interfaces.append(found)
            continue
        iface = free_interface(n.interface, taken, "eth")
        names.append(iface)
        interfaces.append(iface)
        added.append(f"GKE network {n.name}@{iface}")
        new_entries.append({"interfaceName": iface, "network": n.name})
    if not added:
        return Plan(None, interfaces, names, added, None, INTERFACES)
    value = json.dumps(entries + new_entries, separators=(",", ":"))
    return Plan(value, interfaces, names, added, None, INTERFACES, {DEFAULT_INTERFACE: POD_INTERFACE})
