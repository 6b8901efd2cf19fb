"""A loaded policy as the admission path reads it: `Policy` (one fabric's settings, computed at
load), `EnvSetting` (one NCCL variable of its block) and `PolicySet` (the policies, indexed by
name and by namespace labels).

`webhook.policy.compiler` builds these from the YAML files; this module only holds them. It is compiled
with the rest of the decision core (mypyc) so that the decision reads a policy's fields as C
struct members: as plain Python dataclasses, every field the decision read (the policy's name,
its NCCL block item by item, its fabric) was a generic attribute lookup through the instance
dict, about a twentieth of a typical decision (benchmarks/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final, Iterable, Mapping

from webhook.fabrics.gke import GkeNetwork
from webhook.fabrics.multus import Network
from webhook.fabrics.transports import (
    NETWORK_DEVICE,
    RDMA_SHARED,
    SHARED_DEVICE_PREFIX,
    WELL_KNOWN_RDMA,
    NETWORK_DEVICE_PREFIXES,
    Fabric,
    Signature,
)


@dataclass(frozen=True)
class EnvSetting:
    name: str
    value: str
    enforce: bool
    templated: bool = False  # the value names the pod's Multus interfaces: {interface}, {interfaces}
    # Logging only (NCCL_DEBUG, NCCL_DEBUG_SUBSYS, not enforced): a user's own wins wherever it is
    # set, so the setting is not added to a container with envFrom (its value would override
    # theirs) and, with `only_with`, not where the user sets that variable (env or command): the
    # policy's NCCL_DEBUG_SUBSYS goes with the policy's NCCL_DEBUG, never with the user's.
    yields_to_env_from: bool = False
    only_with: str | None = None

    def render(self, interfaces: list[str]) -> str:
        """The value as this pod gets it: `{interfaces}` is every policy network's interface
        name as the pod will really have it (comma separated), `{interface}` the first."""
        if not self.templated:
            return self.value
        first = interfaces[0] if interfaces else ""
        return self.value.replace("{interfaces}", ",".join(interfaces)).replace("{interface}", first)


@dataclass(frozen=True)
class Device:
    """A device-plugin resource every target container gets (one rail, or the fabric's NIC)."""

    resource: str
    count: int
    per_gpu: bool

    def count_for(self, gpus: int) -> int:
        return self.count * gpus if self.per_gpu else self.count


@dataclass(frozen=True)
class Claim:
    """A NIC claimed through Dynamic Resource Allocation: the pod-level `spec.resourceClaims`
    entry `name` made from the ResourceClaimTemplate `template`, referenced by every target's
    `resources.claims`. `equivalent` templates are claims of the same fabric the pod may bring."""

    name: str
    template: str
    equivalent: tuple[str, ...]
    # The template claims the GPUs too, each with a NIC under the same PCIe root (`aligned`): the
    # target's device-plugin GPU request is taken out, and `{gpus}` in `template` is its count.
    aligned: bool = False
    # What "under the same ..." means for an aligned claim: the DRA device attribute GPU and NIC
    # share (`claim.alignment`: pcieRoot, or numaNode where NICs sit on no GPU's PCIe root).
    attribute: str = "resource.kubernetes.io/pcieRoot"

    def template_for(self, gpus: int) -> str:
        """The template a target of `gpus` GPUs gets."""
        return self.template.replace(GPUS_FIELD, str(gpus)) if self.aligned else self.template

    def made_from(self, template: str) -> bool:
        """`template` is this claim's (for some GPU count, when aligned) or an equivalent one."""
        return self.gpus_in(template) is not None

    def gpus_in(self, template: str) -> int | None:
        """The GPUs a pod-level claim made from `template` brings, when `template` is this claim's
        (`made_from`): the count an aligned template's name carries in place of `{gpus}`, 1 when the
        name does not say (this claim's own name, an equivalent, a count too long to be one); None
        when `template` is not this claim's."""
        count = ""
        if self.aligned and GPUS_FIELD in self.template:
            head, _, tail = self.template.partition(GPUS_FIELD)
            if len(template) > len(head) + len(tail) and template.startswith(head) and template.endswith(tail):
                count = template[len(head) : len(template) - len(tail)]
        if not count.isdigit():
            if template != self.template and template not in self.equivalent:
                return None
            return 1
        return int(count) if count.isascii() and len(count) < 7 else 1


GPUS_FIELD: Final = "{gpus}"  # in an aligned claim's template name: the target's GPU count


@dataclass(frozen=True)
class Dra:
    """The DeviceClasses that are a policy's fabric's NICs (webhook.core.claims): by name, by the
    driver their CEL selectors name (`device.driver == "..."`), narrowed, when `selectors` is not
    empty, to classes or requests whose CEL contains one of those texts."""

    classes: frozenset[str]
    drivers: frozenset[str]
    selectors: tuple[str, ...]


@dataclass(frozen=True)
class PluginMount:
    """A net plugin a fabric's nodes install on the host (GKE: gIB under /home/kubernetes/bin/gib,
    the TCPXO plugin under /home/kubernetes/bin/nvidia/lib64): a GPU container sees it when it
    mounts `host_dir` (or a folder above it) at `mount_path` (or the folder above it likewise).
    Checked, never added: the webhook adds no hostPath volume."""

    host_dir: str
    mount_path: str


@dataclass(frozen=True)
class Sidecar:
    """A container the fabric needs beside the GPU containers (GPUDirect-TCPXO's receive-datapath
    manager, `tcpxo-daemon`): known by a text its image contains."""

    name: str
    image: str


@dataclass(frozen=True)
class Proof:
    """What a policy's optional `proof` section says NCCL's own log must show (webhook.proof): each
    field None where the section leaves it to be derived from the fabric. Read only by the log
    reader and the verifier, never by the admission path."""

    transport: str | None = None  # ib-verbs | libfabric | gib | fastrak | tcpx
    devices: tuple[str, ...] | None = None  # NIC names NCCL may use (ranges expanded)
    gdr: bool | None = None  # GPUDirect RDMA expected on every rank
    rails: int | None = None  # NICs each rank must use, at least
    on_fallback: str = "report"  # report | fail: what the verifier does on a fallback


@dataclass(frozen=True)
class Policy:
    """A validated policy with everything the admission path needs precomputed."""

    name: str
    description: str
    source: str
    priority: int
    selector_spec: Mapping[str, Any]
    selector_size: int
    gpu_resources: tuple[str, ...]
    fabric: Fabric  # kind, transport and what its signatures compare with
    signatures: tuple[Signature, ...]  # the transport's fallback table (webhook.fabrics.transports)
    watched: tuple[str, ...]  # the variables those signatures judge
    warned: tuple[str, ...]  # those of them whose signature only warns
    scanned: frozenset[str]  # what a container's command is read for: `watched` and NCCL_DEBUG
    devices: tuple[Device, ...]
    networks: tuple[Network, ...]
    claim: Claim | None
    equivalent_resources: tuple[str, ...]  # requests that already give a container this fabric's device
    dra: Dra | None  # the DeviceClasses of this fabric's NICs
    families: frozenset[str]  # the device families (RDMA_SHARED, NETWORK_DEVICE) this fabric's devices belong to
    host_network: str  # Forbidden | Allowed | Required
    own_resources: tuple[str, ...]  # the devices' resources and the networks' fallback resources
    # own_resources and gpu_resources: requests that say nothing of another fabric, skipped in
    # one set lookup by the fabric check of every labelled pod
    expected_resources: frozenset[str]
    network_resources: frozenset[str]  # the networks' fallback resources, of a NETWORK_DEVICE policy
    shm_fixed: int | None
    shm_per_gpu: int | None
    shm_max: int | None
    env: tuple[EnvSetting, ...]
    workload_validation: str
    allows_namespace: Any = field(repr=False, compare=False)  # Selector over namespace labels
    # Judgements of settings under this policy, (name, value) -> (severity, reason) or None,
    # filled by webhook.core.fallback.judge_setting: the pods of a job repeat the same few settings.
    # Kept here so they go away with the policy when a reload replaces it.
    judged: dict[tuple[str, str], tuple[str, str] | None] = field(default_factory=dict, repr=False, compare=False)
    resolved: dict[tuple[str, str, str], Device] = field(default_factory=dict, repr=False, compare=False)
    # GKE multi-networking (webhook.fabrics.gke): the networks the pod is attached to by the
    # networking.gke.io/interfaces annotation (a policy has these or Multus `networks`, not both);
    # the host-installed plugin a GPU container must mount; the sidecar the fabric needs.
    gke_networks: tuple[GkeNetwork, ...] = ()
    plugin_mounts: tuple[PluginMount, ...] = ()
    sidecar: Sidecar | None = None
    # The `proof` section (webhook.proof.expectation derives what it leaves out from the fabric).
    proof: Proof | None = None
    # Machine types (webhook.core.machines): the fabric as it is on each kind of node, chosen from
    # the pod's node selection. `machines` is on the policy as loaded; each type's own Policy has
    # `machine` (its name) and, when it is what a pod naming no type gets with a node affinity
    # added, `pin` (the node label expression that affinity requires).
    machines: Machines | None = None
    machine: str = ""
    pin: tuple[str, tuple[str, ...]] | None = None

    @property
    def fabric_kind(self) -> str:
        return self.fabric.kind

    @property
    def nccl_nets(self) -> tuple[str, ...]:
        return self.fabric.nccl_nets

    @property
    def hca_devices(self) -> tuple[str, ...]:
        return self.fabric.hca_devices

    def network_device(self, network: Network, resource: str) -> Device:
        """The Device of `network` when its resource is `resource`, made once per pair: the
        decision asks for the same few on every pod (a dataclass built per request runs the
        interpreted __init__ the dataclasses module generated)."""
        key = (network.namespace or "", network.name, resource)
        found = self.resolved.get(key)
        if found is None:
            found = Device(resource, network.count, network.per_gpu)
            if len(self.resolved) < 256:
                self.resolved[key] = found
        return found

    def summary(self) -> str:
        """One line for people: fabric, transport and what a target gets."""
        parts = [f"{self.fabric.kind} over {self.fabric.transport}"]
        if self.devices:
            parts.append(", ".join(f"{d.resource} x{d.count}{'/GPU' if d.per_gpu else ''}" for d in self.devices))
        if self.networks:
            parts.append("networks " + ", ".join(n.name for n in self.networks))
        if self.gke_networks:
            parts.append("GKE networks " + ", ".join(n.name for n in self.gke_networks))
        if self.sidecar is not None:
            parts.append(f"sidecar {self.sidecar.name}")
        if self.claim is not None:
            parts.append(f"{'aligned GPU+NIC ' if self.claim.aligned else ''}DRA claim {self.claim.template}")
        if self.dra is not None:
            named = [f"class {c}" for c in sorted(self.dra.classes)] + [f"driver {d}" for d in sorted(self.dra.drivers)]
            parts.append("DRA NICs " + ", ".join(named))
        if self.host_network != "Forbidden":
            parts.append(f"hostNetwork {self.host_network}")
        return "; ".join(parts)

    def host_fabric(self) -> bool:
        """No device plugin, network, claim or DRA class: the RDMA devices come from the host."""
        return (
            not self.devices and not self.networks and self.claim is None and self.dra is None and not self.gke_networks
        )

    def shm_bytes_for(self, gpus: int) -> int:
        if self.shm_fixed is not None:
            return self.shm_fixed
        size = (self.shm_per_gpu or 0) * max(gpus, 1)
        return min(size, self.shm_max) if self.shm_max else size


@dataclass(frozen=True)
class MachineType:
    """One machine type of a policy: the node labels that are it (key, values) and the policy as
    it is on those nodes (its own NICs, networks, HCAs, plugin, NCCL block and sidecar)."""

    name: str
    labels: tuple[tuple[str, tuple[str, ...]], ...]
    policy: Policy


@dataclass(frozen=True)
class Machines:
    """A policy's machine types, compiled at load: `by_label` maps a node label key and value to
    the names of the types that have it; `unselected` is what a pod naming no type gets: its
    `default` type's policy (`pinned` when the webhook also adds a required node affinity on that
    type's label, `add_affinity`), or a denial when there is no default."""

    types: tuple[MachineType, ...]
    by_name: Mapping[str, MachineType] = field(compare=False)
    by_label: Mapping[str, Mapping[str, frozenset[str]]] = field(compare=False)
    default: MachineType | None
    add_affinity: bool
    unselected: Policy | None  # the default's policy, pinned when add_affinity

    def names(self) -> str:
        """The types and their labels, for messages."""
        parts = []
        for t in self.types:
            labels = ", ".join(k + "=" + "|".join(v) for k, v in t.labels)
            parts.append(f"{t.name} ({labels})")
        return "; ".join(parts)


# What a container's resource is to a policy (`PolicySet.resource_kind`): nothing to its fabric
# (cpu, its GPUs, its own devices), this fabric's device by another name (equivalentResources),
# or another fabric's RDMA device.
RESOURCE_PLAIN: Final = 0
RESOURCE_EQUIVALENT: Final = 1
RESOURCE_FOREIGN: Final = 2
# An extended resource none of the above: a network device (SR-IOV VF, host device) when a Multus
# network of the pod names it (webhook.core.families), else nothing to the fabric.
RESOURCE_CANDIDATE: Final = 3


def _index(index: dict[str, list[Policy]], key: str, policy: Policy) -> None:
    found = index.setdefault(key, [])
    if not any(f is policy for f in found):
        found.append(policy)


def _kinds_key(policy: Policy) -> str:
    return policy.name if not policy.machine else f"{policy.name}/{policy.machine}"


class PolicySet:
    """The loaded policies, indexed for the two questions the admission path asks: the policy of
    this name, and the policy that applies to a namespace with these labels."""

    def __init__(self, policies: Iterable[Policy]):
        self.by_name: dict[str, Policy] = {p.name: p for p in policies}
        # Precedence for namespaces that name no policy: higher priority first, then the more
        # specific selector (more requirements), then the name, so the choice never depends on
        # file order.
        self._ranked = sorted(self.by_name.values(), key=lambda p: (-p.priority, -p.selector_size, p.name))
        self._auto = lru_cache(maxsize=4096)(self._auto_uncached)
        # Which policies provide a device resource or a claim template: a pod that brings one
        # of another fabric is denied with the name of the policy that fits it.
        self.by_resource: dict[str, list[Policy]] = {}
        self.by_claim_template: dict[str, list[Policy]] = {}
        # Which policies' fabric a DRA DeviceClass (by name, by driver) or a device family is.
        self.by_device_class: dict[str, list[Policy]] = {}
        self.by_driver: dict[str, list[Policy]] = {}
        self.by_family: dict[str, list[Policy]] = {}
        # Which policies attach a GKE network (webhook.fabrics.gke): a pod that lists one of another
        # policy's is denied with the name of the policy that fits it.
        self.by_gke_network: dict[str, list[Policy]] = {}
        for base in self._ranked:
            # a policy with machine types is indexed by what any of its types has
            for p in (base, *(t.policy for t in base.machines.types)) if base.machines is not None else (base,):
                for g in p.gke_networks:
                    _index(self.by_gke_network, g.name, base)
                if p.dra is not None:
                    for cls in sorted(p.dra.classes):
                        _index(self.by_device_class, cls, base)
                    for driver in sorted(p.dra.drivers):
                        _index(self.by_driver, driver, base)
                for family in sorted(p.families):
                    _index(self.by_family, family, base)
                for res in (*p.own_resources, *p.equivalent_resources):
                    _index(self.by_resource, res, base)
                if p.claim is not None:
                    for template in (p.claim.template, *p.claim.equivalent):
                        _index(self.by_claim_template, template, base)

        # resource_kind's answers, per policy and machine type (their resources differ)
        self._kinds: dict[str, dict[str, int]] = {_kinds_key(p): {} for p in self._ranked}
        for base in self._ranked:
            for t in base.machines.types if base.machines is not None else ():
                self._kinds[_kinds_key(t.policy)] = {}

    def ranked(self) -> list[Policy]:
        """The policies in precedence order (priority, selector size, name)."""
        return self._ranked

    def is_rdma_resource(self, resource: str) -> bool:
        """Whether a container resource is an RDMA device by name alone: one a loaded policy gives,
        any `rdma/<name>` (the RDMA shared device plugin), or a fixed-name RDMA device plugin's
        resource (webhook.fabrics.transports.WELL_KNOWN_RDMA). Network devices (SR-IOV VFs, host
        devices) are known by the Multus network that names them: webhook.core.families."""
        return resource in self.by_resource or resource in WELL_KNOWN_RDMA or resource.startswith(SHARED_DEVICE_PREFIX)

    def resource_kinds(self, policy: Policy) -> dict[str, int]:
        """What each container resource a pod under `policy` requested was found to be
        (RESOURCE_PLAIN, RESOURCE_EQUIVALENT, RESOURCE_FOREIGN), filled by `resource_kind`:
        every pod asks about the same few (cpu, memory, its GPU and device), so a decision reads
        one dict entry per resource."""
        kinds = self._kinds.get(_kinds_key(policy))
        if kinds is None:  # a policy of another set: judged, not kept
            return {}
        return kinds

    def resource_kind(self, policy: Policy, resource: str, kinds: dict[str, int]) -> int:
        if resource in policy.network_resources:
            kind = RESOURCE_CANDIDATE  # its network's device: the pod may attach that network itself
        elif resource in policy.expected_resources:
            kind = RESOURCE_PLAIN  # its GPUs and own devices
        elif resource in policy.equivalent_resources:
            kind = RESOURCE_EQUIVALENT
        elif resource.startswith(SHARED_DEVICE_PREFIX):
            # every rdma/<name> is the RDMA shared device plugin: this fabric's when it is of that family
            kind = RESOURCE_EQUIVALENT if RDMA_SHARED in policy.families else RESOURCE_FOREIGN
        elif self.is_rdma_resource(resource):
            kind = RESOURCE_FOREIGN
        elif "/" in resource and (
            self.by_family.get(NETWORK_DEVICE)
            or NETWORK_DEVICE in policy.families
            or resource.startswith(NETWORK_DEVICE_PREFIXES)
        ):
            kind = RESOURCE_CANDIDATE
        else:
            kind = RESOURCE_PLAIN
        if len(kinds) >= 1024:  # a hostile stream of distinct names stays bounded
            kinds.clear()
        kinds[resource] = kind
        return kind

    def __len__(self) -> int:
        return len(self.by_name)

    def get(self, name: str) -> Policy | None:
        return self.by_name.get(name)

    def for_namespace(self, labels: Mapping[str, str]) -> Policy | None:
        """The highest-precedence policy whose namespace selector matches `labels`."""
        return self._auto(tuple(sorted(labels.items())))

    def _auto_uncached(self, items: tuple[tuple[str, str], ...]) -> Policy | None:
        labels = dict(items)
        for policy in self._ranked:
            if policy.allows_namespace(labels):
                return policy
        return None
