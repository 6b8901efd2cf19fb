"""MPI launcher pods: which containers launch the ranks, and how the policy's block reaches them.

The ranks an MPI launcher starts on the workers come up through the remote shell (ssh into the
worker's sshd), from a fresh environment: the worker container's `env` is not theirs. What they
see is what the launcher forwards (`webhook.commands.launchers`, FAMILIES and FORWARDS_ALL). So
a launcher container gets the policy's NCCL block in its env as a GPU container does (enforced
values replacing the user's), and for Open MPI the block's names are added to
`OMPI_MCA_mca_base_env_list` (the user's items stay, an enforced name's `NAME=VALUE` item
becomes `NAME` so the launcher's enforced value goes out); Hydra (MPICH, Intel MPI) forwards
the whole environment by default. A launcher is recognised by the operators' labels
(`keys.MPI_JOB_ROLE`, `keys.MPI_REPLICA_TYPE`, `keys.JOBSET_REPLICATED_JOB` = `launcher`) or by
a command that runs a launcher (`text.launcher_use`). Its settings are judged as a GPU
container's (`subject.Subject.launchers`). No I/O; one text scan per container command.
"""

from __future__ import annotations

from typing import Any, Final

from webhook.commands import launchers
from webhook.commands.text import launcher_use, mentions_launcher
from webhook.core import keys
from webhook.core.subject import command_words
from webhook.core.targets import Target
from webhook.core.model import Policy
from webhook.grammar import k8s


def labelled_launcher(labels: dict[str, str]) -> bool:
    """The MPI Operator's launcher pod, or the launcher job of a Trainer MPI runtime."""
    return (
        labels.get(keys.MPI_JOB_ROLE) == keys.MPI_LAUNCHER
        or labels.get(keys.MPI_REPLICA_TYPE) == keys.MPI_LAUNCHER
        or labels.get(keys.JOBSET_REPLICATED_JOB) == keys.MPI_LAUNCHER
    )


def find_launchers(pod: dict[str, Any], labels: dict[str, str], targets: list[Target]) -> list[Target]:
    """The containers (not init containers) that launch ranks: those whose command runs a
    launcher, and in a labelled launcher pod every container (a command not read, such as
    `bash /launch.sh`, may run either family: both ways are used). A target that launches too
    (a launcher that is a node) is the same Target, marked `is_target`."""
    spec: dict[str, Any] = pod.get("spec") or {}
    containers: list[dict[str, Any]] = spec.get("containers") or []
    by_label = labelled_launcher(labels)
    out: list[Target] = []
    for i, c in enumerate(containers):
        has_command = bool(c.get("command") or c.get("args"))
        if not has_command and not by_label:
            continue
        t: Target | None = None
        for x in targets:
            if x.index == i:
                t = x
                break
        env = t.env if t is not None else k8s.Env(c.get("env"))
        families: tuple[str, ...] = ()
        restricts = False
        env_list = False
        exports = False
        words: list[str] | None = None
        if has_command:
            # as the kubelet runs it, `$(VAR)` expanded through the target's own Env (resolved
            # once, shared with the command rules); read further only when it names a launcher
            words = command_words(c, env)
            if t is not None:
                t.words = words  # the command rules read the same words (`Subject.commands`)
            text = "\0".join(words)
            if by_label or mentions_launcher(text):
                families, restricts, env_list, exports = launcher_use(text)
        if not families:
            if not by_label:
                continue
            families = ("either",)
        if t is None:
            t = Target(i, str(c.get("name")), 0, env, bool(c.get("envFrom")))
            t.words = words
        else:
            t.is_target = True
        t.families = families
        t.restricts = restricts
        t.cmd_env_list = env_list
        t.exports = exports
        out.append(t)
    return out


def user_values(container: dict[str, Any], t: Target) -> list[str]:
    """The names a launcher gives the ranks a value of its own for: `-x NAME=VALUE` in its words,
    `NAME=VALUE` items of its Open MPI env list (so that the policy's logging settings yield to
    them: core.model.EnvSetting.yields_to_env_from)."""
    out: list[str] = []
    exporting = False
    for key in ("command", "args"):
        part = container.get(key)
        for w in part if isinstance(part, list) else ():
            if isinstance(w, str):
                if exporting and "=" in w:
                    out.append(w.split("=", 1)[0])
                exporting = len(w) <= _EXPORT_FLAG_LEN and w in launchers.OMPI_EXPORT_FLAGS
    listed = t.env.get(launchers.OMPI_ENV_LIST)
    if isinstance(listed, str):
        out.extend(item.split("=", 1)[0].strip() for item in listed.split(";") if "=" in item)
    return out


def forward(
    container: dict[str, Any], t: Target, policy: Policy, warnings: list[str], skipped: list[str] | None = None
) -> str | None:
    """Make the launcher forward the policy's block (already in `container`'s env) to every
    rank. Returns a note when the env list was written."""
    # a logging setting add_env left out (the user's own won: `skipped`) is not forwarded
    names = [s.name for s in policy.env if s.name not in skipped] if skipped else [s.name for s in policy.env]
    if not names:
        return None
    note: str | None = None
    openmpi = "openmpi" in t.families or "either" in t.families
    hydra = "hydra" in t.families or "either" in t.families
    if openmpi and t.cmd_env_list:
        warnings.append(
            f"{t.name}: the command's --mca {launchers.MCA_ENV_LIST} replaces {launchers.OMPI_ENV_LIST}, so Open MPI "
            f"forwards the policy's {', '.join(names)} only where the command names them: add -x NAME for each"
        )
    elif openmpi and t.exports and t.env.index(launchers.OMPI_ENV_LIST) is None:
        # (a user who sets the env list and -x runs Open MPI 5, which takes both: the list is extended)
        note = _export_flags(container, t, names, warnings)
    elif openmpi:
        env: list[Any] = container.get("env") or []
        i = t.env.index(launchers.OMPI_ENV_LIST)
        current = ""
        if i is not None:
            item: dict[str, Any] = env[i]
            if item.get("valueFrom") is not None:
                warnings.append(
                    f"{t.name}: {launchers.OMPI_ENV_LIST} comes from valueFrom, so the policy's {', '.join(names)} "
                    f"cannot be added to it; Open MPI forwards them only if it names them"
                )
                return None
            value = item.get("value")
            current = value if isinstance(value, str) else ""
        enforced = [s.name for s in policy.env if s.enforce]
        items: list[str] = []
        listed: list[str] = []
        for part in current.split(";"):
            part = part.strip()
            if not part:
                continue
            name = part.split("=", 1)[0]
            if name in listed:
                continue
            if name in enforced:
                part = name  # the launcher's env holds the enforced value: that one goes out
            listed.append(name)
            items.append(part)
        for name in names:
            if name not in listed:
                items.append(name)
        joined = ";".join(items)
        if joined != current:
            if i is None:
                env = container["env"]  # add_env made the list
                env.append({"name": launchers.OMPI_ENV_LIST, "value": joined})
            else:
                env[i] = {"name": launchers.OMPI_ENV_LIST, "value": joined}
            note = launchers.OMPI_ENV_LIST
    if hydra and t.restricts:
        warnings.append(
            f"{t.name}: the command's -genvnone/-genvlist keeps the launcher's environment from the ranks of MPICH and "
            f"Intel MPI, so the policy's {', '.join(names)} reach them only if listed: add them to -genvlist"
        )
    return note


_EXPORT_FLAG_LEN: Final = max(len(flag) for flag in launchers.OMPI_EXPORT_FLAGS)


def _export_flags(container: dict[str, Any], t: Target, names: list[str], warnings: list[str]) -> str | None:
    """The command gives `-x`, so the launcher is Open MPI, and Open MPI 4 refuses `-x` together
    with `mca_base_env_list`: the block's names the command does not export yet go out as
    `-x NAME` flags right after the launcher's name (each forwards the launcher env's value,
    which holds the block; a user's `-x NAME=VALUE` of an enforced name with another value is
    denied by the launcher-enforced rule). Only where the launcher is a word of `command` or
    `args`: in a script the flags cannot be placed safely, and a warning says what to add."""
    # one pass over command + args in the order run: where the launcher stands, then the names
    # its export flags already forward (a flag's value is the next word)
    where_key = ""
    where_i = -1
    listed: set[str] = set()
    exporting = False  # the word before was an export flag
    for key in ("command", "args"):
        part = container.get(key)
        if not isinstance(part, list):
            continue
        for i, w in enumerate(part):
            if not isinstance(w, str):
                continue
            if where_i < 0:
                if launchers.FAMILIES.get(w.rsplit("/", 1)[-1]) in ("openmpi", "either"):
                    where_key, where_i = key, i
                continue
            if exporting:
                eq = w.find("=")
                listed.add(w[:eq] if eq >= 0 else w)
            # (the length screens out most words before their first hash)
            exporting = len(w) <= _EXPORT_FLAG_LEN and w in launchers.OMPI_EXPORT_FLAGS
    if where_i < 0:
        warnings.append(
            f"{t.name}: the command's script runs an Open MPI launcher with -x, which Open MPI 4 refuses together with "
            f"{launchers.OMPI_ENV_LIST}, so the policy's {', '.join(names)} reach the ranks only where the "
            f"script names them: add -x NAME for each"
        )
        return None
    missing = [name for name in names if name not in listed]
    if not missing:
        return None
    container[where_key] = edited = list(container[where_key])  # a new list: the pod as sent keeps its own
    flags: list[str] = []
    for name in missing:
        flags.append("-x")
        flags.append(name)
    edited[where_i + 1 : where_i + 1] = flags
    return "-x " + " -x ".join(missing)
