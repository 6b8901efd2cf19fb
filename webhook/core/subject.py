"""What the TCP-fallback rules look at and what they return: a `Subject` (the pod as the user
wrote it, the chosen policy, the namespace, the targets and what the decision resolved) and the
`Finding`s a rule makes of it. The subject also reads the containers' commands, once per
decision, as the shell and the MPI launchers read them (`Subject.commands`, `command_words`):
the rules (`webhook.core.fallback`), the warnings (`webhook.core.pod_warnings`) and the launcher
search (`webhook.core.ranks`) all read them, so the reading sits here, below all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.commands import reader
from webhook.commands.text import mentions
from webhook.core import scripts
from webhook.core.model import Device, Policy, PolicySet
from webhook.core.targets import Target
from webhook.fabrics import multus
from webhook.fabrics.transports import TRANSPORTS
from webhook.grammar import k8s


@dataclass(frozen=True)
class Finding:
    rule: str
    container: str | None
    message: str

    def text(self) -> str:
        where = f"container {repr(self.container)}: " if self.container else ""
        return f"{where}{self.message} [{self.rule}]"


class Subject:
    """What the rules look at: the pod (of the shape `decision.shape_problem` checked), the
    policy, the namespace's labels, the targets and what the decision resolved."""

    def __init__(
        self,
        pod: dict[str, Any],
        policy: Policy,
        namespace_labels: dict[str, str],
        targets: list[Target],
        devices: list[Device] | None = None,
        problems: list[Finding] | None = None,
        networks: multus.Plan | None = None,
        claim_entry: str | None = None,
    ):
        self.pod = pod
        self.policy = policy
        self.namespace_labels = namespace_labels
        self.targets = targets
        # The device resources every target gets: the policy's rails and each network's
        # resource as its NetworkAttachmentDefinition names it.
        self.devices: list[Device] = [] if devices is None else devices
        self.problems: list[Finding] = [] if problems is None else problems  # found while resolving
        self.networks = networks  # the Multus annotation as it will be, and the interface names
        self.claim_entry = claim_entry  # the spec.resourceClaims entry the targets reference
        self.own_claim = False  # that entry is the pod's own NIC claim (webhook.core.families)
        # Containers that see GPUs without requesting one (a DRA claim, NVIDIA_VISIBLE_DEVICES):
        # their settings are checked like the targets', nothing is added to them.
        self.others: list[Target] = []
        # MPI launcher containers (`webhook.core.ranks`): what their env holds and forwards
        # reaches every rank, so their settings are judged as a GPU container's, GPU or not.
        self.launchers: list[Target] = []
        self._commands: list[tuple[dict[str, Any], str, list[tuple[str, str]]]] | None = None
        # Scripts from ConfigMap volumes (`webhook.core.scripts`): the ConfigMaps handed in (None:
        # none at hand, as at admission), the namespace they are looked up in; what the reading
        # found in each script file (name, value) -> (path, ConfigMap), and the scripts that
        # could not be read (container, path, ConfigMap), once each.
        self.policies: PolicySet | None = None  # every policy loaded: which one a setting of another fabric fits
        self.config_maps: scripts.ConfigMaps | None = None
        self.namespace = ""
        self.origins: dict[int, dict[tuple[str, str], tuple[str, str]]] = {}
        self.unread: list[tuple[str, str, str]] = []

    def _read(self, i: int) -> Target | None:
        """The target or launcher that is container `i`: its Env (and words) already read."""
        for t in self.targets:
            if t.index == i:
                return t
        for t in self.launchers:
            if t.index == i:
                return t
        return None

    def container(self, t: Target) -> dict[str, Any]:
        spec: dict[str, Any] = self.pod["spec"]
        containers: list[dict[str, Any]] = spec["containers"]
        return containers[t.index]

    def commands(self) -> list[tuple[dict[str, Any], str, list[tuple[str, str]]]]:
        """(container, its command line, the settings of the policy's `scanned` names it makes)
        for every container whose command or args make any, read as the shell and the launchers
        read them (`webhook.commands.reader`). Computed once per decision, for the rules and the
        warnings. Plain loops, no generators: this runs for every labelled pod, and only a
        command that mentions one of the names is read further."""
        if self._commands is not None:
            return self._commands
        wanted = self.policy.scanned
        found: list[tuple[dict[str, Any], str, list[tuple[str, str]]]] = []
        budget: reader.Budget | None = None  # one per decision: linear whatever the scripts
        spec: dict[str, Any] = self.pod.get("spec") or {}
        volumes: scripts.PodVolumes | None = None  # the ConfigMap volumes, found when first needed
        for kind in ("initContainers", "containers"):
            containers: list[dict[str, Any]] = spec.get(kind) or []
            for i, c in enumerate(containers):
                if not (c.get("command") or c.get("args")):
                    continue
                # `$(VAR)` in a target or a launcher expands against the env the decision resolved
                # already; a launcher's words were read once by `ranks.find_launchers`
                t = self._read(i) if kind == "containers" else None
                env: k8s.Env | None = t.env if t is not None else None
                words = t.words if t is not None else None
                if words is None:
                    words = command_words(c, env)
                line = " ".join(words)
                named = mentions(line, wanted)
                files: scripts.MountedFiles | None = None
                if named or scripts.may_name_a_mount(c, line):  # most commands name no mounted path
                    if volumes is None:
                        volumes = scripts.PodVolumes(spec)
                    files = scripts.MountedFiles(c, volumes, self.namespace, self.config_maps)
                if named or (files is not None and files.mentioned(line)):
                    if env is None:
                        env = k8s.Env(c.get("env"))
                    if budget is None:
                        budget = reader.Budget()
                    reading = reader.read(words, wanted, env, budget, files)
                    settings = reading.found
                    if files is not None:
                        for pair, path in reading.origins.items():
                            origin = files.lookup(path)
                            self.origins.setdefault(id(c), {})[pair] = (path, origin[1] if origin is not None else "")
                        for path, cm in reading.unread:
                            if not any(u[1] == path and u[2] == cm for u in self.unread):
                                self.unread.append((str(c.get("name")), path, cm))
                    if settings:
                        found.append((c, line, settings))
        self._commands = found
        return found


# Every variable a transport's table judges, and NCCL_DEBUG (for a warning): what a command is
# read for when no policy narrows it. A decision reads each command for its policy's
# `Policy.scanned`. How a command is read: `webhook.commands.reader`.
_SCANNED = tuple(sorted({sig.variable for table in TRANSPORTS.values() for sig in table} | {"NCCL_DEBUG"}))
# The names a command is read for by default (`command_settings`; a decision reads its policy's): the
# watched ones and NCCL_DEBUG. How a command is read: `webhook.commands.reader`.
SCANNED_NAMES: frozenset[str] = frozenset(_SCANNED)


def command_settings(
    text: str, names: frozenset[str] = SCANNED_NAMES, env: k8s.Lookup | None = None
) -> list[tuple[str, str]]:
    """The settings of `names` a shell script makes for the processes it starts, in order."""
    return reader.settings(text, names, env)


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
