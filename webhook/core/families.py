"""Which fabric a pod already brings: its container resources by device family, its DRA claims
by DeviceClass (webhook.core.claims). What the pod brings of the policy's own fabric stands (no
second device, network or claim); what it brings of another fabric is a `fabric-mismatch`
denial naming the policy that fits; anything else changes nothing.

What counts as the pod's NIC never depends on which other policies are loaded: a DRA claim of an
RDMA NIC class (a fixed table in webhook.core.claims, the cluster's DeviceClasses read against it,
the policy's own `dra`), the host's /dev/infiniband mounted into a host-network pod, a device
resource of the pod's own Multus network (with or without its NetworkAttachmentDefinition; a
missing one is a warning: Multus would fail the pod).

Families (webhook.fabrics.transports): every `rdma/<name>` is the RDMA shared device plugin's; a
resource a NetworkAttachmentDefinition of the pod's Multus networks names in its resourceName
annotation is a network device (an SR-IOV VF or a host device); a policy belongs to the families
of its own devices. Equivalence and mismatch follow from the family, not from a list of names.

Cost: a pod whose resources are all known kinds (its GPU, cpu, memory, the policy's devices)
reads one dict entry per resource (`PolicySet.resource_kinds`); the pod's networks are read only
when one of its resources could be a network device (and its Multus list, when NADs are tracked,
for the missing ones), its claims only when it has any, its volumes only when it is on the host
network.
"""

from __future__ import annotations

from typing import Any

from webhook.core import claims as dra
from webhook.core import keys
from webhook.core.subject import Finding
from webhook.core.targets import Target
from webhook.core.model import RESOURCE_CANDIDATE, RESOURCE_EQUIVALENT, RESOURCE_FOREIGN, Device, Policy, PolicySet
from webhook.fabrics import gke, multus
from webhook.fabrics.transports import NETWORK_DEVICE, NETWORK_DEVICE_PREFIXES, RDMA_SHARED, SHARED_DEVICE_PREFIX


class Brought:
    """What `check` found the pod brings of the policy's fabric: `entry`, the spec.resourceClaims
    entry the targets reference (the pod's own NIC claim, or the policy's claim name), `own_claim`
    whether that entry is the pod's; `own_network` whether the pod attaches its fabric's network
    itself (the policy's networks are then not added) and the interfaces of those networks."""

    def __init__(self, entry: str | None):
        self.entry = entry
        self.own_claim = False
        self.own_network = False
        self.interfaces: list[str] = []
        self.unknown: list[str] = []  # the claims whose requests are not known here (no template or claim of that name)
        self.warnings: list[str] = []  # what the pod brings that will fail it (a missing NAD)
        self.foreign_nic = False  # a claim of an RDMA NIC the policy does not take as its own (denied)


def fitting(candidates: list[Policy], policy: Policy, namespace_labels: dict[str, str]) -> str:
    """How to fix a pod that brings another fabric's device or claim: another machine type of its
    own policy that provides it, else another policy that provides it in this namespace; never
    the policy the pod is already under (a type's Policy is not the policy as loaded, which the
    indexes hold: compared by name)."""
    for other in candidates:
        if other.name == policy.name and other.machines is not None:
            return (
                f"another machine type of policy {policy.name} has it: select that type with spec.nodeSelector or "
                f"a required node affinity ({other.machines.names()}), or remove it"
            )
    for other in candidates:
        if other.name != policy.name and other.allows_namespace(namespace_labels):
            return f"select policy {other.name} with the annotation {keys.POD_POLICY}: {other.name}"
    return "no policy of this namespace provides it; remove it, or ask the platform team for a policy of that fabric"


def _mine(policy: Policy) -> str:
    if policy.gke_networks:
        return "the GKE networks " + ", ".join(g.name for g in policy.gke_networks)
    if policy.own_resources:
        return ", ".join(policy.own_resources)
    if policy.claim is not None:
        return f"a DRA claim ({policy.claim.template})"
    if policy.dra is not None:
        return dra.label(policy)
    return "the host's devices"


def _resolved(resource: str, devices: list[Device]) -> bool:
    for d in devices:
        if d.resource == resource:
            return True
    return False


def _network_resources(pod: dict[str, Any], namespace: str, attachments: Any) -> dict[str, str]:
    """resource -> interface for the pod's Multus networks whose NetworkAttachmentDefinition names
    a device resource. Without attachments (nothing to look up) each network stands for any
    resource named as the SR-IOV operators name them, keyed "" (webhook.fabrics.transports)."""
    meta: dict[str, Any] = pod.get("metadata") or {}
    annotations: dict[str, str] = meta.get("annotations") or {}
    value = annotations.get(keys.MULTUS_NETWORKS)
    out: dict[str, str] = {}
    parsed = multus.parse(value) if value else None
    if parsed is None:
        return out
    for i, e in enumerate(parsed[1]):
        iface = multus.interface_of(e, i + 1)
        if attachments is None:
            out.setdefault("", iface)
            continue
        ns, name = multus.entry_key(e, namespace)
        nad = attachments.attachment(ns, name)
        if nad is None:  # said by `_missing_attachments`; its device is read as without attachments
            out.setdefault("", iface)
            continue
        resource = ((nad.get("metadata") or {}).get("annotations") or {}).get(keys.NAD_RESOURCE_NAME)
        if isinstance(resource, str) and resource:
            out.setdefault(resource, iface)
    return out


def network_devices(policy: Policy, pod_ns: str, attachments: Any, problems: list[Finding]) -> list[Device]:
    """The device resource behind each of the policy's networks: the NetworkAttachmentDefinition's
    resourceName annotation when the cluster state has it, else the network's `resource`."""
    out: list[Device] = []
    for n in policy.networks:
        net_ns = n.namespace or pod_ns
        resource: str | None  # set on every path that reaches network_device
        if attachments is None:  # cluster state not known (offline review without a state file)
            if n.resource is None:
                problems.append(
                    Finding(
                        "network-attachment",
                        None,
                        f"the {policy.name} policy takes its device resource from NetworkAttachmentDefinition "
                        f"{net_ns}/{n.name}, which cannot be looked up here",
                    )
                )
                continue
            resource = n.resource
        else:
            nad = attachments.attachment(net_ns, n.name)
            if nad is None:
                problems.append(
                    Finding(
                        "network-attachment",
                        None,
                        f"NetworkAttachmentDefinition {net_ns}/{n.name} does not exist, so Multus cannot attach "
                        f"the RDMA network and NCCL would use TCP; ask the platform team to create it in {net_ns!r}",
                    )
                )
                continue
            resource = ((nad.get("metadata") or {}).get("annotations") or {}).get(keys.NAD_RESOURCE_NAME) or n.resource
            if not resource:
                problems.append(
                    Finding(
                        "network-attachment",
                        None,
                        f"NetworkAttachmentDefinition {net_ns}/{n.name} names no device resource "
                        f"({keys.NAD_RESOURCE_NAME}) and the {policy.name} policy gives none: the pod would get an "
                        f"interface without an RDMA device",
                    )
                )
                continue
        out.append(policy.network_device(n, resource))
    return out


def check(
    pod: dict[str, Any],
    policy: Policy,
    policies: PolicySet,
    namespace: str,
    namespace_labels: dict[str, str],
    targets: list[Target],
    devices: list[Device],
    problems: list[Finding],
    attachments: Any,
    claims: dra.Claims | None,
) -> Brought:
    """Mark targets that already have this fabric's device, deny another fabric's device or NIC
    claim, and say what the pod brings (`Brought`)."""
    spec: dict[str, Any] = pod.get("spec") or {}
    brought = Brought(policy.claim.name if policy.claim is not None else None)
    _check_resources(
        pod, policy, policies, namespace, namespace_labels, targets, devices, problems, attachments, brought
    )
    if policies.by_gke_network:
        meta: dict[str, Any] = pod.get("metadata") or {}
        annotations: dict[str, str] = meta.get("annotations") or {}
        listed = annotations.get(gke.INTERFACES)
        if listed is not None:
            _check_gke(listed, policy, policies, namespace_labels, problems)
    entries: list[dict[str, Any]] = spec.get("resourceClaims") or []
    if entries:
        _check_claims(entries, policy, policies, namespace, namespace_labels, targets, problems, claims, brought)
    _check_policy_claim(policy, namespace, targets, problems, claims, brought)
    if spec.get("hostNetwork") is True:
        _host_devices(spec, targets)
    if attachments is not None:
        _missing_attachments(pod, policy, namespace, attachments, brought)
    return brought


def _host_devices(spec: dict[str, Any], targets: list[Target]) -> None:
    """A host-network pod whose containers mount the host's /dev/infiniband (hostPath) has the
    node's RDMA devices, whichever fabric the node has (SGLang's RoCE LeaderWorkerSets): a
    target that mounts them gets no device of the policy on top."""
    found: list[str] = []
    volumes: list[dict[str, Any]] = spec.get("volumes") or []
    for v in volumes:
        host = v.get("hostPath")
        path = host.get("path") if isinstance(host, dict) else None
        if isinstance(path, str) and path.rstrip("/") in HOST_RDMA_PATHS:
            found.append(str(v.get("name")))
    if not found:
        return
    containers: list[dict[str, Any]] = spec.get("containers") or []
    for t in targets:
        mounts: list[Any] = containers[t.index].get("volumeMounts") or []
        for m in mounts:
            if isinstance(m, dict) and m.get("name") in found:
                t.has_fabric = True
                break


# The host's RDMA device files (the uverbs and rdma_cm nodes of every HCA): mounted from the host,
# they are the node's NICs (Linux rdma-core, Documentation/infiniband/user_verbs.rst).
HOST_RDMA_PATHS: tuple[str, ...] = ("/dev/infiniband", "/dev")


def _missing_attachments(
    pod: dict[str, Any], policy: Policy, namespace: str, attachments: Any, brought: Brought
) -> None:
    """Each Multus network the pod lists itself whose NetworkAttachmentDefinition the cluster
    does not have: Multus fails such a pod's sandbox, so it never starts (said, not hidden; a
    policy network's is said by `network_devices` unless the pod brings its own)."""
    meta: dict[str, Any] = pod.get("metadata") or {}
    annotations: dict[str, str] = meta.get("annotations") or {}
    value = annotations.get(keys.MULTUS_NETWORKS)
    parsed = multus.parse(value) if value else None
    if parsed is None:
        return
    mine = [] if brought.own_network else [(n.namespace or namespace, n.name) for n in policy.networks]
    for e in parsed[1]:
        ns, name = multus.entry_key(e, namespace)
        if (ns, name) in mine or attachments.attachment(ns, name) is not None:
            continue
        brought.warnings.append(
            f"the pod lists the Multus network {ns}/{name} ({keys.MULTUS_NETWORKS}), which has no "
            f"NetworkAttachmentDefinition: Multus would fail the pod's sandbox and it would not start; "
            f"create it in {ns!r} or remove the network"
        )


def _check_resources(
    pod: dict[str, Any],
    policy: Policy,
    policies: PolicySet,
    namespace: str,
    namespace_labels: dict[str, str],
    targets: list[Target],
    devices: list[Device],
    problems: list[Finding],
    attachments: Any,
    brought: Brought,
) -> None:
    """The targets' container resources by family: the policy's fabric by another name marks the
    target (`has_fabric`), a network device of the pod's own network of this fabric is brought,
    another fabric's device is a `fabric-mismatch`."""
    kinds = policies.resource_kinds(policy)
    spec: dict[str, Any] = pod.get("spec") or {}
    containers: list[dict[str, Any]] = spec.get("containers") or []
    networks: dict[str, str] | None = None
    for t in targets:
        resources: dict[str, Any] = containers[t.index].get("resources") or {}
        seen: list[str] = []
        for section in ("limits", "requests"):
            values: dict[str, Any] = resources.get(section) or {}
            for res in values:
                kind = kinds.get(res)
                if kind is None:
                    kind = policies.resource_kind(policy, res, kinds)
                if kind == RESOURCE_EQUIVALENT:
                    t.has_fabric = True
                    continue
                if kind == RESOURCE_FOREIGN and res.startswith(SHARED_DEVICE_PREFIX):
                    family = RDMA_SHARED
                elif kind == RESOURCE_CANDIDATE or kind == RESOURCE_FOREIGN:
                    if networks is None:
                        networks = _network_resources(pod, namespace, attachments)
                    iface = networks.get(res)
                    if (
                        iface is None
                        and "" in networks
                        and res.startswith(NETWORK_DEVICE_PREFIXES)
                        and (attachments is None or res not in policy.network_resources)
                    ):  # a network not looked up, or without its NAD: the pod's VF by its name
                        iface = networks[""]
                    if iface is None:
                        if kind == RESOURCE_CANDIDATE:
                            continue  # no network of the pod names it: nothing to the fabric
                        family = ""
                    elif NETWORK_DEVICE in policy.families:
                        t.has_fabric = True
                        brought.own_network = True
                        if iface not in brought.interfaces:
                            brought.interfaces.append(iface)
                        continue
                    else:
                        family = NETWORK_DEVICE
                else:
                    continue
                if res in seen or _resolved(res, devices):
                    continue
                seen.append(res)
                candidates = list(policies.by_resource.get(res) or ())
                for p in policies.by_family.get(family) or () if family else ():
                    if p not in candidates:
                        candidates.append(p)
                what = "network device (its Multus network names it)" if family == NETWORK_DEVICE else "RDMA device"
                problems.append(
                    Finding(
                        "fabric-mismatch",
                        t.name,
                        f"this pod requests {res}, another fabric's {what}; policy {policy.name} provides "
                        f"{_mine(policy)}; {fitting(candidates, policy, namespace_labels)}",
                    )
                )


def _check_policy_claim(
    policy: Policy,
    namespace: str,
    targets: list[Target],
    problems: list[Finding],
    claims: dra.Claims | None,
    brought: Brought,
) -> None:
    """The policy's own DRA claim, when the targets take it: one container only for an aligned
    claim, its ResourceClaimTemplate present; and a DRA-only fabric's pod must claim a NIC."""
    own = policy.claim
    if own is not None and own.aligned and brought.entry == own.name and len(targets) > 1:
        problems.append(
            Finding(
                "claim-aligned",
                None,
                f"policy {policy.name} claims each GPU together with a NIC on its PCIe root, for one container; "
                f"this pod has {len(targets)} GPU containers ({', '.join(t.name for t in targets)}): "
                f"put the GPUs in one container, or run the pod under a policy without aligned claims",
            )
        )
    elif own is not None and brought.entry == own.name and claims is not None and claims.lists_all() and targets:
        template = own.template_for(targets[0].gpus)
        if claims.claim_template(namespace, template) is None:
            problems.append(
                Finding(
                    "claim-template",
                    None,
                    f"policy {policy.name} adds the DRA claim {own.name!r} from ResourceClaimTemplate "
                    f"{namespace}/{template}, which does not exist, so the pod would stay Pending; "
                    f"ask the platform team to create it in {namespace!r}"
                    + (
                        f" (`rdma-webhook policy claim-template {policy.name} --gpus {targets[0].gpus}` writes it)"
                        if own.aligned
                        else ""
                    ),
                )
            )
    if (
        policy.dra is None
        or brought.own_claim
        or policy.claim is not None
        or policy.devices
        or policy.networks
        or policy.gke_networks
        or brought.foreign_nic  # it claims a NIC, another fabric's: said as that, not as none
        or not targets
    ):
        return
    if brought.unknown:  # its only claims are not known: not taken for a NIC, not taken for none
        complete = claims is not None and claims.lists_all()
        where = "the cluster does not have it" if complete else "the cluster's DRA objects are not given here"
        problems.append(
            Finding(
                "claim-unknown",
                None,
                f"the pod claims {', '.join(brought.unknown)}, not known here ({where}), and policy {policy.name} "
                f"gets its NICs only through DRA ({dra.label(policy)}): whether the pod has an RDMA NIC cannot be "
                f"told, and without one NCCL would find no RDMA device; create the template or claim (a pod whose "
                f"claim does not exist stays Pending), or give it to the check",
            )
        )
        return
    problems.append(
        Finding(
            "device-missing",
            None,
            f"the pod claims no NIC of the {policy.fabric.kind} fabric, and policy {policy.name} gets its "
            f"NICs only through DRA ({dra.label(policy)}): NCCL would find no RDMA device and use TCP; "
            f"add a spec.resourceClaims entry whose ResourceClaimTemplate requests that DeviceClass",
        )
    )


def _check_gke(
    listed: str, policy: Policy, policies: PolicySet, namespace_labels: dict[str, str], problems: list[Finding]
) -> None:
    """The GKE networks the pod's networking.gke.io/interfaces lists that another policy attaches
    and this one does not: another fabric's NICs (one finding for them all)."""
    mine = [g.name for g in policy.gke_networks]
    foreign: list[str] = []
    candidates: list[Policy] = []
    for network in gke.networks_of(listed):
        if network in mine:
            continue
        others = policies.by_gke_network.get(network)
        if others:
            foreign.append(network)
            for p in others:
                if p not in candidates:
                    candidates.append(p)
    if foreign:
        names = ", ".join(repr(n) for n in foreign)
        problems.append(
            Finding(
                "fabric-mismatch",
                None,
                f"this pod attaches the GKE network(s) {names} ({gke.INTERFACES}), another fabric's NICs; "
                f"policy {policy.name} provides {_mine(policy)}; {fitting(candidates, policy, namespace_labels)}",
            )
        )


def _check_claims(
    entries: list[dict[str, Any]],
    policy: Policy,
    policies: PolicySet,
    namespace: str,
    namespace_labels: dict[str, str],
    targets: list[Target],
    problems: list[Finding],
    claims: dra.Claims | None,
    brought: Brought,
) -> None:
    own = policy.claim
    for c in entries:
        template = c.get("resourceClaimTemplateName") or c.get("resourceClaimName")
        if not isinstance(template, str):
            continue
        name = str(c.get("name"))
        if own is not None and own.made_from(template):
            brought.entry = name  # the policy's claim, or one it takes for it: referenced, not doubled
            continue
        requests = dra.requests_of(c, namespace, claims)
        if requests is None:  # not known here: the policies' template names are all there is
            kind = "ResourceClaimTemplate" if c.get("resourceClaimTemplateName") else "ResourceClaim"
            brought.unknown.append(f"{name!r} ({kind} {namespace}/{template})")
            others = policies.by_claim_template.get(template)
            if others:
                problems.append(
                    Finding(
                        "fabric-mismatch",
                        None,
                        f"this pod claims {template}, another fabric's RDMA NIC; policy {policy.name} provides "
                        f"{_mine(policy)}; {fitting(others, policy, namespace_labels)}",
                    )
                )
            continue
        info_of = claims.device_class if claims is not None else None
        for req in requests:
            info = info_of(req.device_class) if info_of is not None else None
            if dra.policy_nic(policy, req, info):
                _own(brought, name, targets)
                break
            if not dra.is_nic(req, policy, info):
                continue  # a GPU, an IMEX channel: not a NIC
            brought.foreign_nic = True
            fits = dra.nic_policies(req, policies, claims)
            problems.append(
                Finding(
                    "fabric-mismatch",
                    None,
                    f"this pod claims {name!r} (DeviceClass {req.device_class}), another fabric's RDMA NIC; "
                    f"policy {policy.name} provides {_mine(policy)}; {fitting(fits, policy, namespace_labels)}",
                )
            )
            break


def _own(brought: Brought, name: str, targets: list[Target]) -> None:
    """The pod brings the NIC claim `name` of the policy's fabric: it stands for the policy's
    devices, networks and claim; the targets reference it (the mutation adds the reference)."""
    if brought.own_claim:
        return
    brought.entry = name
    brought.own_claim = True
    brought.own_network = True
    for t in targets:
        t.has_fabric = True
