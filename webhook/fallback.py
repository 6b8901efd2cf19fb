"""The TCP-fallback rules: every way a pod that asked for RDMA would end up on NET/Socket anyway,
or could not get RDMA at all. One table, `RULES`; each rule has an id, a check and a fix.

A rule looks at a `Subject` (the pod as the user wrote it, the chosen policy, the namespace and
what the decision already resolved) and returns findings. Each finding says which container,
which setting, why it means TCP and what to change, because the message goes straight back to
the person who ran `kubectl apply`. Adding a rule is one function and one table entry.

Values are judged the way NCCL and Kubernetes will judge them (see `webhook.nccl` and
`webhook.k8s`): `$(VAR)` references are expanded, NCCL_IB_DISABLE is read with strtoll,
NCCL_NET case-insensitively, NCCL_IB_HCA with NCCL's own filter grammar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from webhook import commands, k8s, keys, nccl
from webhook.policy_model import Policy


@dataclass(frozen=True)
class Finding:
    rule: str
    container: str | None
    message: str

    def text(self) -> str:
        where = f"container {self.container!r}: " if self.container else ""
        return f"{where}{self.message} [{self.rule}]"


class Target:
    """A container that gets RDMA: it asks for a GPU. (Target and Subject are plain classes, not
    dataclasses: see `decision.Decision`.)"""

    def __init__(self, index: int, name: str, gpus: int, env: k8s.Env, has_env_from: bool):
        self.index = index
        self.name = name
        self.gpus = gpus
        self.env = env  # the values its process will see from `env`, `$(VAR)`s expanded
        self.has_env_from = has_env_from


class Subject:
    """What the rules look at: the pod (of the shape `decision.shape_problem` checked), the
    policy, the namespace's labels, the targets and what the decision resolved."""

    def __init__(self, pod: dict[str, Any], policy: Policy, namespace_labels: dict[str, str], targets: list[Target],
                 device_resource: str | None = None, network_problem: str | None = None):
        self.pod = pod
        self.policy = policy
        self.namespace_labels = namespace_labels
        self.targets = targets
        self.device_resource = device_resource
        self.network_problem = network_problem
        self._commands: list[tuple[dict[str, Any], str, list[tuple[str, str]]]] | None = None

    def container(self, t: Target) -> dict[str, Any]:
        spec: dict[str, Any] = self.pod["spec"]
        containers: list[dict[str, Any]] = spec["containers"]
        return containers[t.index]

    def commands(self, names: frozenset[str] | None = None) -> list[tuple[dict[str, Any], str, list[tuple[str, str]]]]:
        """(container, its command line, the settings of `names` it makes) for every container
        whose command or args make any, read as the shell and the launchers read them
        (`webhook.commands`). For the default names (SCANNED_NAMES) computed once per decision,
        for the rules and the warnings. Plain loops, no generators: this runs for every
        labelled pod, and only a command that mentions one of the names is read further."""
        wanted = SCANNED_NAMES if names is None else names
        if wanted is SCANNED_NAMES and self._commands is not None:
            return self._commands
        found: list[tuple[dict[str, Any], str, list[tuple[str, str]]]] = []
        budget: commands.Budget | None = None  # one per decision: linear whatever the scripts
        spec: dict[str, Any] = self.pod.get("spec") or {}
        for kind in ("initContainers", "containers"):
            containers: list[dict[str, Any]] = spec.get(kind) or []
            for i, c in enumerate(containers):
                if not (c.get("command") or c.get("args")):
                    continue
                # `$(VAR)` in a target expands against the env the decision resolved already
                env: k8s.Env | None = None
                if kind == "containers":
                    for t in self.targets:
                        if t.index == i:
                            env = t.env
                            break
                words = command_words(c, env)
                line = " ".join(words)
                if commands.mentions(line, wanted):
                    if env is None:
                        env = k8s.Env(c.get("env"))
                    if budget is None:
                        budget = commands.Budget()
                    settings = commands.settings(words, wanted, env, budget)
                    if settings:
                        found.append((c, line, settings))
        if wanted is SCANNED_NAMES:
            self._commands = found
        return found


def _fabric(policy: Policy) -> str:
    return f"the {policy.name} policy's {policy.fabric_kind} fabric"


# -- the judgement of single NCCL settings, shared by env and command checks --------------------

_JUDGED_MAX = 1024  # per policy; a flood of distinct values cannot grow it further


def judge_setting(name: str, value: str, policy: Policy) -> str | None:
    """Why NCCL setting name=value sends this pod to TCP (or leaves it without RDMA), or None.
    Remembered per policy (`Policy.judged`): the pods of a job repeat the same few settings."""
    judged = policy.judged
    key = (name, value)
    if key in judged:
        return judged[key]
    why = _judge(name, value, policy)
    if len(judged) >= _JUDGED_MAX:
        judged.clear()
    judged[key] = why
    return why


def _judge(name: str, value: str, policy: Policy) -> str | None:
    if name == "NCCL_IB_DISABLE" and nccl.ib_disabled(value):
        return (f"NCCL_IB_DISABLE={value!r} turns NCCL's IB/RoCE transport off, so NCCL runs on TCP sockets "
                f"(NET/Socket); remove it or set it to 0")
    if name == "NCCL_NET" and not nccl.net_selected(value, policy.nccl_nets):
        if value.casefold() == "socket":
            why = "forces NCCL's TCP socket transport (NET/Socket)"
        else:
            why = f"names a transport that {_fabric(policy)} does not provide ({'/'.join(policy.nccl_nets)})"
        return f"NCCL_NET={value!r} {why}; remove it and let the policy set NCCL_NET={policy.nccl_nets[0]}"
    if name == "NCCL_IB_HCA" and not nccl.hca_selected_devices(value, policy.hca_devices):
        sample = ", ".join(policy.hca_devices[:2])
        return (f"NCCL_IB_HCA={value!r} selects none of {_fabric(policy)}'s devices ({sample}, ...), so NCCL "
                f"finds no RDMA device and uses TCP; remove it or name those devices")
    return None


WATCHED = ("NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA")
_SCANNED = WATCHED + ("NCCL_DEBUG",)  # NCCL_DEBUG only for a warning


def _rule_env(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    for t in s.targets:
        for name in WATCHED:
            value = t.env.get(name)
            if value is not None:
                why = judge_setting(name, value, s.policy)
                if why:
                    out.append(Finding("env-fallback", t.name, why + " in env"))
    return out


# The names a command is read for by default (`Subject.commands`, `command_settings`): the
# watched ones and NCCL_DEBUG. How a command is read: `webhook.commands`.
SCANNED_NAMES: frozenset[str] = frozenset(_SCANNED)


def command_settings(text: str, names: frozenset[str] = SCANNED_NAMES, env: k8s.Lookup | None = None) -> list[tuple[str, str]]:
    """The settings of `names` a shell script makes for the processes it starts, in order."""
    return commands.settings(text, names, env)


def command_words(container: dict[str, Any], env: k8s.Lookup | None = None) -> list[str]:
    """command + args as the kubelet runs them: `$(VAR)` expanded from the container's env
    (`env`, when the caller has it already)."""
    words = [*(container.get("command") or ()), *(container.get("args") or ())]
    if not k8s.all_str(words):
        words = [w for w in words if isinstance(w, str)]
    if "$(" in "\0".join(words):  # "\0" between words: only a `$(` within one word counts
        if env is None:
            env = k8s.Env(container.get("env"))
        words = [k8s.expand(w, env) if "$" in w else w for w in words]
    return words


def _launcher_note(line: str) -> str:
    """Which MPI launcher of the command line passes the setting to every rank, if any."""
    for word in line.split():
        base = word.rsplit("/", 1)[-1]
        if base in commands.LAUNCHERS:
            flag = " -x" if base == "mpirun" and " -x " in line else ""
            return f" ({base}{flag} exports it to every rank)"
    return ""


def _rule_command(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    for c, line, settings in s.commands():
        for name, value in settings:
            why = judge_setting(name, value, s.policy)
            if why:
                out.append(Finding("command-fallback", c.get("name"), why + f" in the command{_launcher_note(line)}"))
    return out


def _drops_ipc_lock(container: dict[str, Any]) -> bool:
    sc: dict[str, Any] = container.get("securityContext") or {}
    caps: dict[str, Any] = sc.get("capabilities") or {}
    return k8s.has_capability(caps.get("drop"), keys.IPC_LOCK)


def _rule_ipc_lock_dropped(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    for t in s.targets:
        if _drops_ipc_lock(s.container(t)):
            out.append(Finding("ipc-lock-dropped", t.name,
                               "securityContext.capabilities.drop lists IPC_LOCK, which RDMA needs to pin memory "
                               "(ibv_reg_mr fails and NCCL falls back to TCP); remove IPC_LOCK from drop "
                               "(dropping ALL is fine)"))
    return out


def _rule_host_network(s: Subject) -> list[Finding]:
    if not s.policy.network_name or (s.pod.get("spec") or {}).get("hostNetwork") is not True:
        return []
    return [Finding("host-network", None,
                    f"hostNetwork: true, but the {s.policy.name} policy attaches the Multus network "
                    f"{s.policy.network_name!r} and Multus does not attach networks to host-network pods; "
                    f"remove hostNetwork")]


def _rule_pod_security(s: Subject) -> list[Finding]:
    level = s.namespace_labels.get(keys.PSA_ENFORCE)
    if level not in ("baseline", "restricted"):
        return []
    return [Finding("pod-security", None,
                    f"the namespace enforces the {level!r} Pod Security Standard, which rejects the IPC_LOCK "
                    f"capability RDMA needs; ask the platform team for a namespace at the 'privileged' level "
                    f"(label {keys.PSA_ENFORCE}) or run the job elsewhere")]


def _rule_device_zero(s: Subject) -> list[Finding]:
    res = s.device_resource
    if not res:
        return []
    out: list[Finding] = []
    for t in s.targets:
        resources: dict[str, Any] = s.container(t).get("resources") or {}
        for section in ("limits", "requests"):
            values: dict[str, Any] = resources.get(section) or {}
            value = values.get(res)
            if value is not None and str(value).strip() in ("0", "0.0", "0m", "-0"):
                out.append(Finding("device-zero", t.name,
                                   f"resources.{section} sets {res}: {value!r}, an explicit zero, so the container gets no "
                                   f"RDMA device and NCCL uses TCP; remove it and the policy adds the right count"))
                break
    return out


def _rule_network(s: Subject) -> list[Finding]:
    return [Finding("network-attachment", None, s.network_problem)] if s.network_problem else []


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    check: Callable[[Subject], list[Finding]]


RULES: tuple[Rule, ...] = (
    Rule("env-fallback", "a GPU container's env disables IB, forces NCCL_NET off the fabric, or filters out every RDMA device", _rule_env),
    Rule("command-fallback", "the same settings made in the command or args of any container (export, env, mpirun -x, os.environ)", _rule_command),
    Rule("ipc-lock-dropped", "a GPU container drops IPC_LOCK explicitly", _rule_ipc_lock_dropped),
    Rule("host-network", "hostNetwork on a policy that needs a Multus network", _rule_host_network),
    Rule("pod-security", "the namespace enforces the baseline or restricted Pod Security Standard", _rule_pod_security),
    Rule("device-zero", "a GPU container sets the RDMA device resource to zero", _rule_device_zero),
    Rule("network-attachment", "the policy's network has no NetworkAttachmentDefinition, or it names no device resource", _rule_network),
)


# The final-state guard (`/validate` on pods, after every mutating webhook ran) also checks that
# what the mutation adds is really there: another webhook may have run after ours.

def _rule_device_missing(s: Subject) -> list[Finding]:
    res = s.device_resource
    if not res:
        return []
    out: list[Finding] = []
    for t in s.targets:
        value = ((s.container(t).get("resources") or {}).get("limits") or {}).get(res)
        if value is None:
            out.append(Finding("device-missing", t.name,
                               f"resources.limits has no {res}, so the container gets no RDMA device and NCCL uses TCP; "
                               f"a webhook that ran after rdma-webhook may have removed it"))
    return out


def _rule_ipc_lock_missing(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    for t in s.targets:
        sc = s.container(t).get("securityContext") or {}
        adds = (sc.get("capabilities") or {}).get("add")
        if sc.get("privileged") is not True and not k8s.has_capability(adds, keys.IPC_LOCK):
            out.append(Finding("ipc-lock-missing", t.name,
                               "securityContext.capabilities.add lacks IPC_LOCK, which RDMA needs to pin memory"))
    return out


def _rule_enforced_env(s: Subject) -> list[Finding]:
    out: list[Finding] = []
    for t in s.targets:
        for setting in s.policy.env:
            if not setting.enforce:
                continue
            value = t.env.get(setting.name)
            same = value is not None and (nccl.net_selected(value, (setting.value,)) if setting.name == "NCCL_NET" else value == setting.value)
            if not same:
                now = "unset" if value is None else repr(value)
                out.append(Finding("enforced-env", t.name,
                                   f"{setting.name} is {now}, but policy {s.policy.name} pins it to {setting.value!r} so that a "
                                   f"missing RDMA device fails at start instead of running on TCP"))
    return out


FINAL_RULES: tuple[Rule, ...] = (
    Rule("device-missing", "a GPU container has no RDMA device resource in its limits", _rule_device_missing),
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
