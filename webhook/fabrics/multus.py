"""The Multus networks annotation as Multus reads it, and where a policy's networks go in it.

Multus attaches the networks of `k8s.v1.cni.cncf.io/networks` in list order, after the
cluster network (eth0). An entry that asks for no interface name gets `net<i>`, i its position
counting from 1 (k8snetworkplumbingwg/multus-cni, pkg/multus/multus.go `getIfname`: the
delegate index, 0 being the cluster network), and a pod whose interface names collide never
starts. So a pod that already lists networks cannot simply get ours appended as `net1`: the
plan below reads what the pod lists (comma form `[ns/]name[@ifname]` or JSON objects with
`interface`), reuses an attachment of a policy network the pod already lists, and gives each
new attachment an explicit name no other attachment has. The NCCL variables that name an
interface (`{interface}` in a policy) then name what the pod will really have.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Network:
    """A Multus network the pod is attached to. Its device resource comes from the
    NetworkAttachmentDefinition's resourceName annotation, else from `resource`."""

    name: str
    namespace: str | None
    interface: str | None  # the interface name wanted; another is chosen when the pod has it already
    resource: str | None
    count: int
    per_gpu: bool


CLUSTER_INTERFACES = ("eth0", "lo")
ANNOTATION = "k8s.v1.cni.cncf.io/networks"


class Plan:
    """The annotation as it will be (`value`, None when the pod keeps its own), the interface of
    each policy network in policy order, every secondary interface the pod will have, what was
    added (for people) and what makes the annotation unusable (a denial). `key` is the annotation
    written (Multus's, or GKE multi-networking's: webhook.fabrics.gke), `also` annotations set
    with it when the pod has none of that name."""

    def __init__(
        self,
        value: str | None,
        interfaces: list[str],
        pod_interfaces: list[str],
        added: list[str],
        problem: str | None,
        key: str = ANNOTATION,
        also: dict[str, str] | None = None,
    ):
        self.value = value
        self.interfaces = interfaces
        self.pod_interfaces = pod_interfaces
        self.added = added
        self.problem = problem
        self.key = key
        self.also: dict[str, str] = {} if also is None else also


def parse(value: str) -> tuple[str, list[Any]] | None:
    """The annotation as (form, entries): "json" with a list of selection objects, or "csv" with
    [namespace/]name[@interface] strings. None when it is unreadable."""
    text = value.strip()
    if text.startswith("["):
        try:
            entries = json.loads(text)
        except ValueError:
            return None
        if not isinstance(entries, list):
            return None
        for e in entries:
            if not isinstance(e, dict) or not isinstance(e.get("name"), str):
                return None
        return "json", entries
    parts = [part.strip() for part in text.split(",") if part.strip()]
    for part in parts:  # Multus refuses an entry with two slashes or two @ ("failed at '/'", "failed at '@'")
        if part.count("/") > 1 or part.count("@") > 1:
            return None
    return "csv", parts


def entry_key(entry: Any, pod_ns: str) -> tuple[str, str]:
    """(namespace, name) of the NetworkAttachmentDefinition an entry selects."""
    if isinstance(entry, dict):
        return str(entry.get("namespace") or pod_ns), str(entry.get("name"))
    text: str = entry
    ref = text.split("@", 1)[0]
    ns, _, name = ref.rpartition("/")
    return ns or pod_ns, name


def interface_of(entry: Any, position: int) -> str:
    """The interface name Multus gives the entry at `position` (1-based)."""
    if isinstance(entry, dict):
        asked = entry.get("interface")
        if isinstance(asked, str) and asked:
            return asked
    else:
        text: str = entry
        if "@" in text:
            asked_csv = text.split("@", 1)[1]
            if asked_csv:
                return asked_csv
    return f"net{position}"


def free_interface(wanted: str | None, taken: set[str], prefix: str) -> str:
    """The interface name a new attachment gets: `wanted` when no attachment has it, else the
    lowest <prefix><N> none has (Multus: net<N>; GKE multi-networking: eth<N>); recorded as taken."""
    iface = wanted if wanted and wanted not in taken else ""
    free = 1
    while not iface:
        candidate = f"{prefix}{free}"
        if candidate not in taken:
            iface = candidate
        free += 1
    taken.add(iface)
    return iface


def plan(current: str | None, networks: tuple[Network, ...], pod_ns: str) -> Plan:
    """Where the policy's networks go in the pod's annotation (`current`, the value as sent;
    `decision.shape_problem` has checked that annotations are strings)."""
    form = "csv"
    entries: list[Any] = []
    if current is not None:
        parsed = parse(current)
        if parsed is None:
            return Plan(
                None,
                [],
                [],
                [],
                "annotation is neither a comma-separated list of networks nor a JSON list of "
                "network objects with a name; Multus would reject the pod. Fix the annotation",
            )
        form, entries = parsed
    names: list[str] = []
    taken: set[str] = set()  # the same names, for membership: a pod may list thousands (linear, not quadratic)
    for i, e in enumerate(entries):
        name = interface_of(e, i + 1)
        if name in taken or name in CLUSTER_INTERFACES:
            return Plan(
                None,
                [],
                names,
                [],
                f"annotation gives two attachments the interface name {name!r} (an "
                f"attachment without a name is net<position>); Multus would not start the pod. "
                f"Name the interfaces explicitly",
            )
        names.append(name)
        taken.add(name)
    keys = [entry_key(e, pod_ns) for e in entries]
    interfaces: list[str] = []
    added: list[str] = []
    new_entries: list[Any] = []
    for n in networks:
        want = (n.namespace or pod_ns, n.name)
        found = -1
        for i, k in enumerate(keys):
            if k == want:
                found = i
                break
        if found >= 0:
            interfaces.append(names[found])
            continue
        iface = free_interface(n.interface, taken, "net")
        names.append(iface)
        interfaces.append(iface)
        added.append(f"network {want[0]}/{n.name}@{iface}")
        if form == "json":
            obj: dict[str, Any] = {"name": n.name}
            if n.namespace:
                obj["namespace"] = n.namespace
            obj["interface"] = iface
            new_entries.append(obj)
        else:
            ref = f"{n.namespace}/{n.name}" if n.namespace else n.name
            new_entries.append(f"{ref}@{iface}")
    if not new_entries:
        return Plan(None, interfaces, names, added, None)
    if form == "json":
        value = json.dumps(entries + new_entries, separators=(",", ":"))
    else:
        value = ",".join(entries + new_entries)
    return Plan(value, interfaces, names, added, None)
