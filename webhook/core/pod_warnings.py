"""The warnings of a pod the rules let through: what will work but deserves a word to the person
who applied it (a verbose NCCL_DEBUG, a setting that costs RDMA a feature, an interface name
the pod will not have, a plugin folder not mounted, a script that could not be read, IPC_LOCK
out of a non-root process's reach). Warnings never change the outcome, so they sit apart from
the rules that deny (`webhook.core.fallback`) and from the steps of the decision that call them.
"""

from __future__ import annotations

from typing import Any, Final

from webhook.core import fallback
from webhook.core.model import PluginMount
from webhook.core.subject import Subject
from webhook.fabrics.transports import WARN
from webhook.grammar import nccl


_ENV_FROM: Final = (
    "envFrom values cannot be checked for NCCL settings; the policy's env entries take precedence over them"
)
_IFNAME_SEEN: Final[dict[tuple[str, tuple[str, ...]], bool]] = {}


def _ifname_matches(value: str, secondary: list[str]) -> bool:
    """Whether NCCL_SOCKET_IFNAME=value keeps an interface of the pod (NCCL's prefix/`=`exact
    grammar, as for NCCL_IB_HCA; an exclusion list `^...` always leaves one). Remembered: the
    pods of a job repeat one value and one set of interfaces. The interfaces are kept as a tuple,
    not joined: a Multus annotation may name an interface "x,y", which is not "x" and "y"."""
    names = tuple(secondary)
    key = (value, names)
    known = _IFNAME_SEEN.get(key)
    if known is not None:
        return known
    flt = nccl.parse_hca(value)
    found = flt.exclude or not flt.entries
    if not found:
        for name in ("eth0", "lo", *secondary):
            if nccl.hca_selects(flt, name):
                found = True
                break
    if len(value) + len(names) + sum([len(n) for n in names]) <= 512:  # not a hostile pod's thousands of names
        if len(_IFNAME_SEEN) >= 1024:
            _IFNAME_SEEN.clear()
        _IFNAME_SEEN[key] = found
    return found


def _sees_plugin(spec: dict[str, Any], container: dict[str, Any], m: PluginMount) -> bool:
    """Whether the container sees the host's `m.host_dir` at `m.mount_path`: a hostPath volume
    mounted there, or a folder above both (/home/kubernetes/bin/nvidia at /usr/local/nvidia
    shows lib64 at /usr/local/nvidia/lib64)."""
    mounts: list[Any] = container.get("volumeMounts") or []
    volumes: list[Any] = spec.get("volumes") or []
    for vm in mounts:
        if not isinstance(vm, dict):
            continue
        path, name = vm.get("mountPath"), vm.get("name")
        if not isinstance(path, str) or not isinstance(name, str):
            continue
        path = path.rstrip("/") or "/"
        if m.mount_path != path and not m.mount_path.startswith(path.rstrip("/") + "/"):
            continue
        for v in volumes:
            if not isinstance(v, dict) or v.get("name") != name:
                continue
            hp = v.get("hostPath")
            host = hp.get("path") if isinstance(hp, dict) else None
            if not isinstance(host, str):
                continue
            sub = vm.get("subPath")
            if isinstance(sub, str) and sub:
                host = host.rstrip("/") + "/" + sub.strip("/")
            if (
                host.rstrip("/") + m.mount_path[len(path) :] if path != "/" else host.rstrip("/") + m.mount_path
            ) == m.host_dir:
                return True
    return False


def warnings_for(pod: dict[str, Any], subject: Subject) -> list[str]:
    """The warnings of `pod` under the subject's policy, in the order people read them: commands,
    unread scripts, claims and launchers first, then each target's."""
    out: list[str] = []
    spec: dict[str, Any] = pod.get("spec") or {}
    on_host = spec.get("hostNetwork") is True  # the host's interfaces: not known here
    secondary: list[str] = subject.networks.pod_interfaces if subject.networks is not None else []
    found = spec.get("securityContext")
    pod_sc: dict[str, Any] = found if isinstance(found, dict) else {}
    for c, _, settings in subject.commands():
        for name, value in settings:
            if name == "NCCL_DEBUG" and nccl.debug_verbose(value):
                out.append(
                    f"{c.get('name')}: the command sets NCCL_DEBUG={value}, which logs heavily; use WARN outside debugging"
                )
                break
    for container, path, cm in subject.unread:
        out.append(
            f"{container}: the script {path} comes from ConfigMap {repr(cm)}, which is not at hand here, so its NCCL "
            f"settings were not read; check it with `rdma-webhook review` given the ConfigMap and the workload"
        )
    if subject.own_claim and subject.targets and subject.policy.claim is not None and subject.policy.claim.aligned:
        out.append(
            f"policy {subject.policy.name} claims each GPU with a NIC on its PCIe root, but this pod brings its own NIC claim "
            f"{subject.claim_entry!r} and device-plugin GPUs: not aligned; leave out the claim to get the policy's"
        )
    out.extend(
        f"{t.name}: {_ENV_FROM}" for t in subject.launchers if t.has_env_from and not t.is_target
    )  # env of every rank
    for t in subject.targets:
        debug = t.env.get("NCCL_DEBUG")
        if nccl.debug_verbose(debug) and not nccl.debug_subsys_light(t.env.get("NCCL_DEBUG_SUBSYS")):
            out.append(f"{t.name}: NCCL_DEBUG={debug} logs heavily; use WARN outside debugging")
        if t.has_env_from:
            out.append(f"{t.name}: {_ENV_FROM}")
        unknown = [n for n in subject.policy.watched if t.env.unknown(n)]
        if unknown:
            out.append(f"{t.name}: {', '.join(unknown)} come from valueFrom and cannot be checked")
        for var in subject.policy.warned:
            setting = t.env.get(var)
            if setting is not None:
                judged = fallback.judge_setting(var, setting, subject.policy)
                if judged is not None and judged[0] == WARN:
                    out.append(f"{t.name}: {judged[1]}")
        ifname = t.env.get("NCCL_SOCKET_IFNAME")
        if ifname is not None and not on_host and not _ifname_matches(ifname, secondary):
            have = ", ".join(["eth0", *secondary])
            out.append(
                f"{t.name}: NCCL_SOCKET_IFNAME={repr(ifname)} names no interface the pod will have ({have}), so NCCL's "
                f"bootstrap cannot start; remove it or name one of those"
            )
        for m in subject.policy.plugin_mounts:
            if not _sees_plugin(spec, subject.container(t), m):
                out.append(
                    f"{t.name}: does not mount the host's {m.host_dir} at {m.mount_path}, where the nodes of policy "
                    f"{subject.policy.name} install its NCCL plugin ({'/'.join(subject.policy.nccl_nets)}); unless the "
                    f"image brings the plugin there, NCCL cannot open it: add a hostPath volume of {m.host_dir} "
                    f"mounted at {m.mount_path}"
                )
        sc: dict[str, Any] = subject.container(t).get("securityContext") or {}
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True
        user = sc.get("runAsUser", pod_sc.get("runAsUser"))
        if non_root or (isinstance(user, int) and user != 0):
            out.append(
                f"{t.name}: runs as non-root, so the added IPC_LOCK stays out of its effective capabilities; "
                f"raise the memlock limit or grant the capability in the image"
            )
    return out
