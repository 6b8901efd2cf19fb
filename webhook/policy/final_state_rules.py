"""The final-state rules of one RDMA policy: what must still hold of a pod once every mutating
webhook has run, each as a CEL condition and the message of its denial.

`rules` composes them, one builder per kind of rule, in the order of the webhook's own
final-state rules; `webhook.policy.admission_policy` makes them a ValidatingAdmissionPolicy.
"""

from __future__ import annotations

from typing import NamedTuple

from webhook.core import keys
from webhook.core.model import Policy
from webhook.fabrics import gke
from webhook.policy.cel import (
    above_zero,
    capability,
    cel_list,
    cel_str,
    env_set_and,
    env_unset_or,
    has_section,
    last_value,
    positive,
    re_escape,
    references_claim,
)

# NCCL_IB_DISABLE as NCCL reads it (strtoll base 0, `webhook.grammar.nccl.int_param`): non-zero
# when the number's first non-zero digit comes before it ends. (A number past int64 is 0 to
# NCCL; this calls it non-zero: the one place the CEL is stricter than the webhook.)
IB_DISABLED_RE = r"^[ \t\n\v\f\r]*[+-]?(0[xX][0-9a-fA-F]*[1-9a-fA-F]|0[0-7]*[1-7]|[1-9])"

# What a rule's condition is about: every container of the targets, every container the
# transport's env checks judge, or the pod.
TARGETS, CHECKED, POD = "targets", "checked", "pod"
# The rules' ids in the order `_rules` makes them (the order of the webhook's final-state rules).
KINDS = (
    "device-missing",
    "ipc-lock-missing",
    "ipc-lock-dropped",
    "enforced-env",
    "env-fallback",
    "shm",
    "host-network",
    "multus-networks",
    "gke-networks",
    "fabric-mismatch",
    "sidecar-missing",
)


class Rule(NamedTuple):
    """One final-state rule: its id, the CEL condition that must hold, why and what to do, what
    the condition is over (TARGETS, CHECKED or POD), and whether it reads the container's env
    names `n` (`with_names`)."""

    name: str
    condition: str
    message: str
    over: str = TARGETS
    names: bool = False


def _fallback_checks(policy: Policy) -> list[tuple[str, str, str]]:
    """(variable, CEL that its last value (`last_value`) is fine, why) for the transport's variables whose
    judgement a CEL expression makes exactly (`webhook.fabrics.transports`)."""
    out: list[tuple[str, str, str]] = []
    for name in policy.watched:
        if name in policy.warned:
            continue
        if name == "NCCL_IB_DISABLE":
            out.append(
                (
                    name,
                    f"!{last_value(name)}.matches({cel_str(IB_DISABLED_RE)})",
                    "NCCL_IB_DISABLE is non-zero, which turns NCCL's IB/RoCE transport off, so NCCL runs on TCP sockets; "
                    "a webhook that ran after rdma-webhook may have set it",
                )
            )
        elif name == "NCCL_NET":
            out.append(
                (
                    name,
                    f"{last_value(name)}.lowerAscii() in {cel_list(n.casefold() for n in policy.nccl_nets)}",
                    f"NCCL_NET names a transport that policy {policy.name} does not provide ({'/'.join(policy.nccl_nets)}), "
                    f"so NCCL uses TCP; a webhook that ran after rdma-webhook may have set it",
                )
            )
        elif name == "NCCL_NET_PLUGIN" and policy.fabric.net_plugins:
            paths = cel_str(
                "^.*/(" + "|".join(re_escape(n) for n in policy.fabric.net_plugins) + ")$"
            )  # a path to a listed library
            out.append(
                (
                    name,
                    f"({last_value(name)} in {cel_list(policy.fabric.net_plugins)} || {last_value(name)}.matches({paths}))",
                    f"NCCL_NET_PLUGIN does not load the fabric's plugin ({'/'.join(policy.fabric.net_plugins)}), which "
                    f"leaves NCCL its built-in transports (TCP sockets here)",
                )
            )
    return out


def _device_condition(policy: Policy) -> tuple[str, str] | None:
    """(CEL that a target has the fabric's device, what it lacks) or None when the policy's
    device is not a fixed resource (a host fabric; a network's device, named by its
    NetworkAttachmentDefinition, which CEL cannot read)."""
    parts: list[str] = []
    wants: list[str] = []
    if policy.devices:
        resources = [d.resource for d in policy.devices]
        parts.append(f"({has_section('limits')} && {' && '.join(above_zero('limits', r) for r in resources)})")
        wants.append(" and ".join(resources) + " in resources.limits")
    if policy.claim is not None:
        made = references_claim(policy.claim)  # of any GPU count, when aligned
        parts.append(f"(has(object.spec.resourceClaims) && has(c.resources) && has(c.resources.claims) && {made})")
        wants.append(f"a resources.claims entry for the pod's {policy.claim.template} claim")
    if not parts:
        return None
    equivalent = list(policy.equivalent_resources)
    if equivalent:
        parts.append(f"{positive('limits', equivalent)} || {positive('requests', equivalent)}")
    return " || ".join(parts), " or ".join(wants)


def rules(policy: Policy) -> list[Rule]:
    """The final-state rules of one policy, in the order of the webhook's final-state rules (of a
    policy with machine types, those of its own sections: `by_type` gives each type's)."""
    return _rules(policy)


def by_type(policy: Policy) -> list[tuple[tuple[str, ...], Policy, list[Rule]]]:
    """A policy with machine types (webhook.core.machines): (the types, one type's Policy, their
    rules) for each set of types whose rules and GPUs are the same, in the order of the types."""
    assert policy.machines is not None
    out: list[tuple[tuple[str, ...], Policy, list[Rule]]] = []
    every = sorted({g.name for t in policy.machines.types for g in t.policy.gke_networks})
    for t in policy.machines.types:
        found = _rules(t.policy)
        theirs = [n for n in every if n not in {g.name for g in t.policy.gke_networks}]
        if theirs:  # before the sidecar, as KINDS orders them
            at = len(found) - (found[-1].name == "sidecar-missing")
            found.insert(at, _other_types_networks(t.policy, t.name, theirs))
        for i, (names, p, same) in enumerate(out):
            if same == found and p.gpu_resources == t.policy.gpu_resources:
                out[i] = ((*names, t.name), p, same)
                break
        else:
            out.append(((t.name,), t.policy, found))
    return out


def _rules(policy: Policy) -> list[Rule]:
    return [
        *_device_rules(policy),
        *_ipc_lock_rules(policy),
        *_enforced_env_rules(policy),
        *_fallback_rules(policy),
        *_shm_rules(policy),
        *_host_network_rules(policy),
        *_multus_rules(policy),
        *_gke_rules(policy),
        *_sidecar_rules(policy),
    ]


def _device_rules(policy: Policy) -> list[Rule]:
    """device-missing: the fabric's device (resource, claim or an equivalent) on each target."""
    out: list[Rule] = []
    device = _device_condition(policy)
    if device is not None:
        condition, wants = device
        out.append(
            Rule(
                "device-missing",
                condition,
                f"lacks {wants}, so it gets no RDMA device and NCCL uses TCP; a webhook that ran after "
                f"rdma-webhook may have removed it",
            )
        )
    return out


def _ipc_lock_rules(policy: Policy) -> list[Rule]:
    """ipc-lock-missing, ipc-lock-dropped: IPC_LOCK still added to each target (or it privileged), and not dropped."""
    out: list[Rule] = []
    privileged = "(has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged)"
    out.append(
        Rule(
            "ipc-lock-missing",
            f"{privileged} || {capability('add')}",
            "securityContext.capabilities.add lacks IPC_LOCK, which RDMA needs to pin memory",
        )
    )
    out.append(
        Rule(
            "ipc-lock-dropped",
            f"!{capability('drop')}",
            "securityContext.capabilities.drop lists IPC_LOCK, which RDMA needs to pin memory (ibv_reg_mr fails "
            "and NCCL falls back to TCP)",
        )
    )
    return out


def _enforced_env_rules(policy: Policy) -> list[Rule]:
    """enforced-env: each enforced NCCL variable of the policy still has its value."""
    out: list[Rule] = []
    for setting in policy.env:
        if not setting.enforce:
            continue
        if setting.templated:  # the value names the pod's interfaces: present, not compared
            same = env_set_and(setting.name, f"{last_value(setting.name)} != ''")
            want = f"set (to {setting.value!r} with the pod's interface names)"
        elif setting.name == "NCCL_NET":
            same = env_set_and(
                setting.name, f"{last_value(setting.name)}.lowerAscii() == {cel_str(setting.value.casefold())}"
            )
            want = f"{setting.value!r}"
        else:
            same = env_set_and(setting.name, f"{last_value(setting.name)} == {cel_str(setting.value)}")
            want = f"{setting.value!r}"
        out.append(
            Rule(
                "enforced-env",
                same,
                f"{setting.name} is missing or changed, but policy {policy.name} pins it to {want} so that a "
                f"missing RDMA device fails at start instead of running on TCP",
                names=True,
            )
        )
    return out


def _fallback_rules(policy: Policy) -> list[Rule]:
    """env-fallback: no later env entry turns the transport off (`_fallback_checks`)."""
    out: list[Rule] = []
    for name, fine, why in _fallback_checks(policy):
        out.append(Rule("env-fallback", env_unset_or(name, fine), why, over=CHECKED, names=True))
    return out


def _shm_rules(policy: Policy) -> list[Rule]:
    """shm: the /dev/shm the mutation mounted is still a memory-backed emptyDir."""
    out: list[Rule] = []
    # The first mount at /dev/shm (`ms[0]`), bound once: each of our volumes of its name (none when
    # a later webhook swapped in a volume of its own) is still a memory-backed emptyDir.
    shm = (
        "has(c.volumeMounts) && [c.volumeMounts.filter(m, m.mountPath == '/dev/shm' || m.mountPath == '/dev/shm/')]"
        ".all(ms, size(ms) > 0 && (!has(object.spec.volumes) || object.spec.volumes.all(v, "
        "!v.name.startsWith('rdma-webhook-dshm') || v.name != ms[0].name || (has(v.emptyDir) && has(v.emptyDir.medium) && "
        "v.emptyDir.medium == 'Memory'))))"
    )
    out.append(
        Rule(
            "shm",
            shm,
            "/dev/shm is no longer the memory-backed emptyDir rdma-webhook mounted there; NCCL and "
            "DataLoader workers need shared memory in RAM",
        )
    )
    return out


def _host_network_rules(policy: Policy) -> list[Rule]:
    """host-network: hostNetwork as the policy wants it (nothing when it allows either)."""
    out: list[Rule] = []
    host = "(has(object.spec.hostNetwork) && object.spec.hostNetwork)"
    if policy.host_network == "Forbidden":
        mechanism = "GKE" if policy.gke_networks else "Multus"
        out.append(
            Rule(
                "host-network",
                f"!{host}",
                f"hostNetwork: true, but policy {policy.name} attaches its fabric through the pod's own "
                f"interfaces ({mechanism} does not attach networks to host-network pods); remove hostNetwork",
                over=POD,
            )
        )
    elif policy.host_network == "Required":
        out.append(
            Rule(
                "host-network",
                host,
                f"policy {policy.name} reaches its fabric through the host's interfaces and the pod no "
                f"longer has hostNetwork: true, so NCCL finds no RDMA device and uses TCP",
                over=POD,
            )
        )
    return out


def _multus_rules(policy: Policy) -> list[Rule]:
    """multus-networks: each of the policy's Multus networks still in the pod's networks annotation."""
    out: list[Rule] = []
    for network in policy.networks:
        name = network.name
        csv = rf"(^|,)\s*([^,/@]*/)?{re_escape(name)}(@[^,]*)?\s*(,|$)"
        js = rf"\"name\"\s*:\s*\"{re_escape(name)}\""
        ann = f"object.metadata.annotations[{cel_str(keys.MULTUS_NETWORKS)}]"
        present = (
            f"has(object.metadata.annotations) && {cel_str(keys.MULTUS_NETWORKS)} in object.metadata.annotations && "
            f"({ann}.matches({cel_str(csv)}) || {ann}.matches({cel_str(js)}))"
        )
        out.append(
            Rule(
                "multus-networks",
                present,
                f"the pod's {keys.MULTUS_NETWORKS} annotation no longer lists the {name} network of policy "
                f"{policy.name}; a webhook that ran after rdma-webhook may have removed it",
                over=POD,
            )
        )
    return out


def _gke_rules(policy: Policy) -> list[Rule]:
    """gke-networks: each of the policy's GKE networks still in the pod's interfaces annotation.
    A policy that also takes a DRA claim of the same NICs (`dra`: gke-gib, gke's gIB types) adds
    none to a pod that claims them, so a pod with claims is not held to them (CEL cannot read a
    claim's DeviceClass; a GPU container with a claim that is no NIC, whose networks a later
    webhook removed, goes unseen: docs/admission-policy.md)."""
    out: list[Rule] = []
    for g in policy.gke_networks:  # GKE multi-networking's JSON list (webhook.fabrics.gke)
        present = " && ".join(_gke_listed(re_escape(g.name)))
        if policy.dra is not None:
            present = f"({present}) || (has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)"
        out.append(
            Rule(
                "gke-networks",
                present,
                f"the pod's {gke.INTERFACES} annotation no longer lists the {g.name} network of policy "
                f"{policy.name}; a webhook that ran after rdma-webhook may have removed it",
                over=POD,
            )
        )
    return out


def _gke_listed(network: str) -> tuple[str, str, str]:
    """CEL, in the order they must be tested: the pod has annotations, it has GKE's interfaces
    annotation, and that annotation (GKE multi-networking's JSON list, webhook.fabrics.gke) lists a
    network whose name matches `network` (an RE2 pattern)."""
    listed = r"\"network\"\s*:\s*\"" + network + r"\""
    return (
        "has(object.metadata.annotations)",
        f"{cel_str(gke.INTERFACES)} in object.metadata.annotations",
        f"object.metadata.annotations[{cel_str(gke.INTERFACES)}].matches({cel_str(listed)})",
    )


def _other_types_networks(policy: Policy, machine: str, theirs: list[str]) -> Rule:
    """fabric-mismatch: a pod on machine type `machine` lists none of the GKE networks only the
    policy's other types have (`theirs`): those NICs do not exist on its nodes (the webhook's
    fabric-mismatch on another fabric's GKE networks)."""
    annotations, annotated, listed = _gke_listed("(" + "|".join(re_escape(n) for n in theirs) + ")")
    absent = f"!{annotations} || !({annotated}) || !{listed}"
    return Rule(
        "fabric-mismatch",
        absent,
        f"the pod's {gke.INTERFACES} annotation lists a GKE network of another machine type of policy "
        f"{policy.name} ({', '.join(theirs)}), which the nodes of its type {machine} do not have; select that "
        f"type with spec.nodeSelector, or remove the network",
        over=POD,
    )


def _sidecar_rules(policy: Policy) -> list[Rule]:
    """sidecar-missing: a container of the pod still runs the fabric's sidecar."""
    out: list[Rule] = []
    if policy.sidecar is not None:
        image = cel_str(policy.sidecar.image)
        runs = (
            f"object.spec.containers.exists(c, has(c.image) && c.image.contains({image})) || "
            f"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.image) && "
            f"c.image.contains({image}) && has(c.restartPolicy) && c.restartPolicy == 'Always'))"
        )
        out.append(
            Rule(
                "sidecar-missing",
                runs,
                f"no container of the pod runs the {policy.sidecar.name} sidecar (an image of "
                f"{policy.sidecar.image}) that policy {policy.name}'s fabric needs beside the GPU containers",
                over=POD,
            )
        )
    return out
