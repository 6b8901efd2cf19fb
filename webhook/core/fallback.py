"""The TCP-fallback rules: every way a pod that asked for RDMA would end up on NET/Socket anyway,
or could not get RDMA at all. One table, `RULES`; each rule has an id, a check and a fix.

A rule looks at a `Subject` (the pod as the user wrote it, the chosen policy, the namespace and
what the decision already resolved) and returns findings. Each finding says which container,
which setting, why it means TCP and what to change, because the message goes straight back to
the person who ran `kubectl apply`. Adding a rule is one function and one table entry. The
Subject and Finding themselves, and the reading of commands the rules share with the warnings,
are `webhook.core.subject`'s.

Values are judged the way NCCL and Kubernetes will judge them (see `webhook.grammar.nccl` and
`webhook.grammar.k8s`): `$(VAR)` references are expanded, NCCL_IB_DISABLE is read with strtoll,
NCCL_NET case-insensitively, NCCL_IB_HCA with NCCL's own filter grammar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from webhook.commands import launchers, reader
from webhook.grammar import k8s, nccl
from webhook.core import keys
from webhook.core.model import Policy
from webhook.core.subject import Finding, Subject
from webhook.fabrics.transports import DENY


# -- the judgement of single settings, shared by env and command checks ---------------------

_JUDGED_MAX = 1024  # per policy; a flood of distinct values cannot grow it further


def judge_setting(name: str, value: str, policy: Policy) -> tuple[str, str] | None:
    """(severity, why) when setting name=value sends this pod to TCP (`transports.DENY`) or costs
    RDMA a feature (`transports.WARN`) on the policy's transport, else None. Remembered per
    policy (`Policy.judged`): the pods of a job repeat the same few settings."""
    judged = policy.judged
    key = (name, value)
    if key in judged:
        return judged[key]
    why: tuple[str, str] | None = None
    for sig in policy.signatures:
        if sig.variable == name:
            found = sig.judge(value, policy.fabric)
            if found:
                why = (sig.severity, found)
                break
    if len(judged) >= _JUDGED_MAX:
        judged.clear()
    judged[key] = why
    return why


def _fitting_net(s: Subject, name: str, value: str) -> str:
    """For a denied NCCL_NET that another loaded policy's fabric runs on (gIB, FasTrak, the EFA
    plugin under an IB policy): the policy to select. Only on the denial path."""
    if name != "NCCL_NET" or s.policies is None:
        return ""
    for p in s.policies.ranked():
        if p.name != s.policy.name and p.allows_namespace(s.namespace_labels) and judge_setting(name, value, p) is None:
            return (
                f"; NCCL_NET={value!r} is the network of the {p.name} policy's {p.fabric.kind} fabric: select that policy "
                f"with the annotation {keys.POD_POLICY}: {p.name}"
            )
    return ""


def _rule_env(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    checked = s.targets + s.others if s.others else s.targets
    if s.launchers:
        checked = checked + [t for t in s.launchers if not t.is_target]
    for t in checked:
        for name in s.policy.watched:
            value = t.env.get(name)
            if value is not None:
                why = judge_setting(name, value, s.policy)
                if why is not None and why[0] == DENY:
                    out.append(Finding("env-fallback", t.name, why[1] + " in env" + _fitting_net(s, name, value)))
    for t in s.launchers:  # what Open MPI's env list forwards to every rank
        listed = t.env.get(launchers.OMPI_ENV_LIST)
        if listed is not None and "=" in listed:
            for name, value in reader.settings(
                ["mpirun", "--mca", launchers.MCA_ENV_LIST, listed], s.policy.scanned, t.env
            ):
                why = judge_setting(name, value, s.policy)
                if why is not None and why[0] == DENY:
                    out.append(
                        Finding(
                            "env-fallback",
                            t.name,
                            why[1] + f" in env {launchers.OMPI_ENV_LIST} (Open MPI forwards it to every rank)",
                        )
                    )
    return out


def _rule_launcher_enforced(s: Subject) -> list[Finding]:
    """A launcher's command that gives the ranks another value of an enforced variable: the
    command's value (`-x NAME=VALUE`, `-genv`, an `export` before the launcher) reaches every
    rank over the policy's, so the policy's cannot win there as it does in env."""
    out: list[Finding] = []
    if not s.launchers:
        return out
    containers = [s.container(t) for t in s.launchers]
    for c, line, settings in s.commands():
        if not any(c is x for x in containers):
            continue
        for name, value in settings:
            for e in s.policy.env:
                if (
                    e.enforce
                    and e.name == name
                    and not e.templated
                    and value != e.value
                    and not (name == "NCCL_NET" and value.casefold() == e.value.casefold())
                ):
                    why = judge_setting(name, value, s.policy)
                    if why is None or why[0] != DENY:  # a fallback value is command-fallback's
                        out.append(
                            Finding(
                                "launcher-enforced",
                                c.get("name"),
                                f"the launcher's command gives every rank {name}={repr(value)}, but policy {s.policy.name} "
                                f"enforces {name}={repr(e.value)} and forwards it from the launcher's env; remove it from the command",
                            )
                        )
    return out


def _launcher_note(line: str) -> str:
    """Which MPI launcher of the command line passes the setting to every rank, if any."""
    for word in line.split():
        base = word.rsplit("/", 1)[-1]
        row = launchers.ROWS.get(base)
        if row is not None:
            flag = f" {row.noted}" if row.noted and f" {row.noted} " in line else ""
            return f" ({base}{flag} exports it to every rank)"
    return ""


def _rule_command(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    for c, line, settings in s.commands():
        for name, value in settings:
            why = judge_setting(name, value, s.policy)
            if why is not None and why[0] == DENY:
                origin = s.origins.get(id(c), {}).get((name, value))
                where = (
                    f" in the script {origin[0]} (ConfigMap {repr(origin[1])}) that the command runs"
                    if origin is not None
                    else f" in the command{_launcher_note(line)}"
                )
                out.append(Finding("command-fallback", c.get("name"), why[1] + where + _fitting_net(s, name, value)))
    return out


def _drops_ipc_lock(container: dict[str, Any]) -> bool:
    sc: dict[str, Any] = container.get("securityContext") or {}
    caps: dict[str, Any] = sc.get("capabilities") or {}
    return k8s.has_capability(caps.get("drop"), keys.IPC_LOCK)


def _rule_ipc_lock_dropped(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    for t in s.targets:
        if _drops_ipc_lock(s.container(t)):
            out.append(
                Finding(
                    "ipc-lock-dropped",
                    t.name,
                    "securityContext.capabilities.drop lists IPC_LOCK, which RDMA needs to pin memory "
                    "(ibv_reg_mr fails and NCCL falls back to TCP); remove IPC_LOCK from drop "
                    "(dropping ALL is fine)",
                )
            )
    return out


def _rule_host_network(s: Subject) -> list[Finding]:
    mode = s.policy.host_network
    on_host = (s.pod.get("spec") or {}).get("hostNetwork") is True
    if mode == "Forbidden" and on_host:
        if s.policy.gke_networks:
            names = ", ".join(repr(n.name) for n in s.policy.gke_networks)
            why = f"attaches the GKE network(s) {names} and GKE attaches no additional networks to host-network pods"
        elif s.policy.networks:
            names = ", ".join(repr(n.name) for n in s.policy.networks)
            why = f"attaches the Multus network(s) {names} and Multus does not attach networks to host-network pods"
        else:
            why = "does not reach its fabric through the host's interfaces"
        return [
            Finding(
                "host-network", None, f"hostNetwork: true, but the {s.policy.name} policy {why}; remove hostNetwork"
            )
        ]
    if mode == "Required" and not on_host:
        return [
            Finding(
                "host-network",
                None,
                f"the {s.policy.name} policy's {s.policy.fabric.kind} fabric is reached through the host's "
                f"interfaces, and without hostNetwork: true the pod sees only its own eth0, so NCCL finds no "
                f"RDMA device and uses TCP; set hostNetwork: true (and dnsPolicy: ClusterFirstWithHostNet)",
            )
        ]
    return []


def _host_devices_visible(container: dict[str, Any]) -> bool:
    sc: dict[str, Any] = container.get("securityContext") or {}
    if sc.get("privileged") is True:
        return True
    mounts: list[Any] = container.get("volumeMounts") or []
    for m in mounts:
        if isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == "/dev/infiniband":
            return True
    return False


def _rule_host_devices(s: Subject) -> list[Finding]:
    """A fabric with no device plugin, network or claim: the RDMA devices are the host's, and a
    container only sees /dev/infiniband when it is privileged or mounts it (the webhook never
    adds either)."""
    if not s.policy.host_fabric():
        return []
    out: list[Finding] = []
    for t in s.targets:
        if not _host_devices_visible(s.container(t)):
            out.append(
                Finding(
                    "host-rdma-devices",
                    t.name,
                    f"the {s.policy.name} policy's RDMA devices come from the host without a device plugin, "
                    f"and this container neither mounts /dev/infiniband nor runs privileged, so NCCL finds no "
                    f"RDMA device and uses TCP; mount the host's /dev/infiniband (hostPath) into it",
                )
            )
    return out


def _rule_sidecar(s: Subject) -> list[Finding]:
    """A fabric that needs a sidecar beside the GPU containers (GPUDirect-TCPXO's tcpxo-daemon):
    some container, or a native sidecar (an init container restarted Always), runs its image."""
    need = s.policy.sidecar
    if need is None or not s.targets:
        return []
    spec: dict[str, Any] = s.pod.get("spec") or {}
    for kind in ("containers", "initContainers"):
        containers: list[dict[str, Any]] = spec.get(kind) or []
        for c in containers:
            image = c.get("image")
            if (
                isinstance(image, str)
                and need.image in image
                and (kind == "containers" or c.get("restartPolicy") == "Always")
            ):
                return []
    return [
        Finding(
            "sidecar-missing",
            None,
            f"the {s.policy.name} policy's {s.policy.fabric.kind} fabric needs the {need.name} sidecar (an image of "
            f"{need.image}) beside the GPU containers, and no container of the pod runs it, so the "
            f"{'/'.join(s.policy.nccl_nets)} plugin cannot move data and NCCL does not run on the fabric; add the "
            f"{need.name} container",
        )
    ]


def _rule_pod_security(s: Subject) -> list[Finding]:
    level = s.namespace_labels.get(keys.PSA_ENFORCE)
    if level not in ("baseline", "restricted"):
        return []
    return [
        Finding(
            "pod-security",
            None,
            f"the namespace enforces the {level!r} Pod Security Standard, which rejects the IPC_LOCK "
            f"capability RDMA needs; ask the platform team for a namespace at the 'privileged' level "
            f"(label {keys.PSA_ENFORCE}) or run the job elsewhere",
        )
    ]


_ZERO = ("0", "0.0", "0m", "-0")


def _rule_device_zero(s: Subject) -> list[Finding]:
    if not s.devices:
        return []
    out: list[Finding] = []
    for t in s.targets:
        if t.has_fabric:
            continue
        resources: dict[str, Any] = s.container(t).get("resources") or {}
        for d in s.devices:
            res = d.resource
            for section in ("limits", "requests"):
                values: dict[str, Any] = resources.get(section) or {}
                value = values.get(res)
                if value is not None and str(value).strip() in _ZERO:
                    out.append(
                        Finding(
                            "device-zero",
                            t.name,
                            f"resources.{section} sets {res}: {value!r}, an explicit zero, so the container gets no "
                            f"RDMA device and NCCL uses TCP; remove it and the policy adds the right count",
                        )
                    )
                    break
    return out


def _rule_problems(s: Subject) -> list[Finding]:
    return s.problems


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    check: Callable[[Subject], list[Finding]]


RULES: tuple[Rule, ...] = (
    Rule(
        "env-fallback",
        "the env of a container that can run NCCL (a GPU by resource, by DRA claim or through NVIDIA_VISIBLE_DEVICES) "
        "makes a fallback setting of the policy's transport",
        _rule_env,
    ),
    Rule(
        "command-fallback",
        "the same settings made in the command or args of any container, read as the shell and the MPI launchers read them "
        "(webhook/commands/reader.py)",
        _rule_command,
    ),
    Rule(
        "launcher-enforced",
        "an MPI launcher's command gives the ranks another value of a variable the policy enforces",
        _rule_launcher_enforced,
    ),
    Rule("ipc-lock-dropped", "a GPU container drops IPC_LOCK explicitly", _rule_ipc_lock_dropped),
    Rule(
        "host-network",
        "hostNetwork on a policy whose fabric is not the host's (Multus networks), or none on one that requires it",
        _rule_host_network,
    ),
    Rule(
        "host-rdma-devices",
        "a host-network fabric's GPU container that cannot see the host's /dev/infiniband",
        _rule_host_devices,
    ),
    Rule(
        "sidecar-missing",
        "a pod with a GPU container lacks the sidecar its fabric needs (GPUDirect-TCPXO's tcpxo-daemon)",
        _rule_sidecar,
    ),
    Rule("pod-security", "the namespace enforces the baseline or restricted Pod Security Standard", _rule_pod_security),
    Rule("device-zero", "a GPU container sets an RDMA device resource to zero", _rule_device_zero),
    Rule(
        "resolved",
        "found while resolving the fabric for this pod: a missing NetworkAttachmentDefinition or one "
        "without a device resource (network-attachment), an unreadable or conflicting Multus annotation "
        "(multus-annotation) or GKE interfaces annotation (gke-annotation), another fabric's device, claim or GKE "
        "network (fabric-mismatch)",
        _rule_problems,
    ),
)


# The final-state guard (`/validate` on pods, after every mutating webhook ran) also checks that
# what the mutation adds is really there: another webhook may have run after ours.


def _rule_device_missing(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    for t in s.targets:
        if t.has_fabric:
            continue
        limits = (s.container(t).get("resources") or {}).get("limits") or {}
        for d in s.devices:
            if limits.get(d.resource) is None:
                out.append(
                    Finding(
                        "device-missing",
                        t.name,
                        f"resources.limits has no {d.resource}, so the container gets no RDMA device and NCCL uses "
                        f"TCP; a webhook that ran after rdma-webhook may have removed it",
                    )
                )
        entry = s.claim_entry
        if entry is not None and not t.has_fabric:
            claims = (s.container(t).get("resources") or {}).get("claims") or []
            if not any(isinstance(c, dict) and c.get("name") == entry for c in claims):
                out.append(
                    Finding(
                        "device-missing",
                        t.name,
                        f"resources.claims does not reference the pod's {entry!r} claim, so the container "
                        f"gets no RDMA NIC and NCCL uses TCP",
                    )
                )
    return out


def _rule_ipc_lock_missing(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    for t in s.targets:
        sc = s.container(t).get("securityContext") or {}
        adds = (sc.get("capabilities") or {}).get("add")
        if sc.get("privileged") is not True and not k8s.has_capability(adds, keys.IPC_LOCK):
            out.append(
                Finding(
                    "ipc-lock-missing",
                    t.name,
                    "securityContext.capabilities.add lacks IPC_LOCK, which RDMA needs to pin memory",
                )
            )
    return out


def _rule_enforced_env(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    for t in s.targets:
        for setting in s.policy.env:
            if not setting.enforce or (setting.templated and s.networks is not None and not s.networks.interfaces):
                continue
            value = t.env.get(setting.name)
            want = setting.render(s.networks.interfaces) if s.networks is not None else setting.value
            same = value is not None and (
                nccl.net_selected(value, (want,)) if setting.name == "NCCL_NET" else value == want
            )
            if not same:
                now = "unset" if value is None else repr(value)
                out.append(
                    Finding(
                        "enforced-env",
                        t.name,
                        f"{setting.name} is {now}, but policy {s.policy.name} pins it to {want!r} so that a "
                        f"missing RDMA device fails at start instead of running on TCP",
                    )
                )
    return out


FINAL_RULES: tuple[Rule, ...] = (
    Rule(
        "device-missing",
        "a GPU container lacks one of the policy's RDMA device resources in its limits, or its DRA claim",
        _rule_device_missing,
    ),
    Rule("ipc-lock-missing", "a GPU container lacks IPC_LOCK", _rule_ipc_lock_missing),
    Rule("enforced-env", "an enforced NCCL variable (NCCL_NET above all) is missing or changed", _rule_enforced_env),
)

_BY_ID = {r.id: r for r in RULES + FINAL_RULES}


def rule(rule_id: str) -> Rule:
    return _BY_ID[rule_id]


def findings(subject: Subject, final: bool = False) -> list[Finding]:
    """Every finding of every rule, in table order (with the final-state rules when `final`)."""
    out: list[Finding] = []
    for r in RULES + FINAL_RULES if final else RULES:
        out.extend(r.check(subject))
    return out
