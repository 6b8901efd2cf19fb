"""What a policy adds to a pod: device resources, the NCCL block, /dev/shm, IPC_LOCK, the Multus
networks or GKE multi-networking interfaces, and the status annotations.

Every function edits the pod copy in place and only adds what is missing, so running them on
their own output changes nothing: the patch of a second pass is empty by construction. They
return short notes (for warnings and `--explain`); they never decide to deny, which is
`webhook.core.fallback`'s job, and never add privileged mode, host namespaces or hostPath.
"""

from __future__ import annotations

from typing import Any

from webhook.grammar import k8s
from webhook.core import keys, machines, ranks
from webhook.core.subject import Subject
from webhook.core.targets import Target
from webhook.core.model import Policy

SHM_VOLUME = "rdma-webhook-dshm"


def private_copy(pod: dict[str, Any], targets: list[Target]) -> dict[str, Any]:
    """A copy of `pod` that `apply` may edit without touching the original: new dicts and lists
    for everything `apply` writes into (the pod, metadata, annotations, spec, the volumes and
    containers lists, and in each target container the paths of `_container_copy`); every
    other subtree is shared. Shared subtrees are the same objects in both, so the patch diff
    skips them by identity instead of comparing or copying the whole pod. A new write in
    `apply` outside these paths must be added here: otherwise it would change the pod as sent
    too, and the patch would miss it (tests/core/test_decision.py checks, for every decision it
    makes, that the pod as sent is unchanged)."""
    copy = dict(pod)
    meta = copy.get("metadata")
    if isinstance(meta, dict):
        meta = copy["metadata"] = dict(meta)
        if isinstance(meta.get("annotations"), dict):
            meta["annotations"] = dict(meta["annotations"])
    spec = copy["spec"] = dict(copy["spec"])
    for key in ("volumes", "resourceClaims"):
        if isinstance(spec.get(key), list):
            spec[key] = list(spec[key])
    containers = spec["containers"] = list(spec["containers"])
    for t in targets:
        containers[t.index] = _container_copy(containers[t.index])
    return copy


def _container_copy(container: dict[str, Any]) -> dict[str, Any]:
    """New dicts and lists along every path `apply` writes into in a target container (resources
    limits/requests, env, securityContext.capabilities.add, volumeMounts); items and the rest
    are shared. `add_env` replaces an env item rather than editing it, so items may be shared."""
    c = dict(container)
    if isinstance(c.get("resources"), dict):
        res = c["resources"] = dict(c["resources"])
        for section in ("limits", "requests"):
            if isinstance(res.get(section), dict):
                res[section] = dict(res[section])
        if isinstance(res.get("claims"), list):
            res["claims"] = list(res["claims"])
    for key in ("env", "volumeMounts"):
        if isinstance(c.get(key), list):
            c[key] = list(c[key])
    if isinstance(c.get("securityContext"), dict):
        sc = c["securityContext"] = dict(c["securityContext"])
        if isinstance(sc.get("capabilities"), dict):
            caps = sc["capabilities"] = dict(sc["capabilities"])
            if isinstance(caps.get("add"), list):
                caps["add"] = list(caps["add"])
    return c


def _dict_at(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """parent[key] as a dict, created (or replacing a null) when missing."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


def _list_at(parent: dict[str, Any], key: str) -> list[Any]:
    value = parent.get(key)
    if not isinstance(value, list):
        value = []
        parent[key] = value
    return value


def add_device(container: dict[str, Any], resource: str, count: int) -> str | None:
    """The RDMA device in limits and requests (extended resources need both equal). A positive
    value the user set stays, in either: a request without a limit gets its own value as the limit,
    not the policy's count; zero is denied before we get here."""
    resources = _dict_at(container, "resources")
    limits = _dict_at(resources, "limits")
    requests = _dict_at(resources, "requests")
    changed = False
    if resource not in limits:
        limits[resource] = requests[resource] if resource in requests else str(count)
        changed = True
    if resource not in requests:
        requests[resource] = limits[resource]
        changed = True
    return f"{resource}: {limits[resource]}" if changed else None


def add_env(
    container: dict[str, Any],
    target: Target,
    policy: Policy,
    interfaces: list[str],
    warnings: list[str],
    commanded: list[str] | None = None,
    skipped: list[str] | None = None,
) -> int:
    """The policy's NCCL block: added where the container does not set a variable; enforced
    variables replace a different user value (with a warning). A value naming the pod's Multus
    interfaces gets the names the pod will really have (`interfaces`, see webhook.fabrics.multus).
    Logging settings yield to the user's (EnvSetting.yields_to_env_from, only_with; `commanded`:
    the names the container's command sets), and are listed in `skipped` then (a launcher does not
    forward them). Returns how many variables were added or replaced."""
    env = _list_at(container, "env")
    added = 0
    for setting in policy.env:
        if setting.templated and not interfaces:
            continue  # the pod's own network or NIC claim: its interface names are not known here
        value = setting.render(interfaces) if setting.templated else setting.value
        i = target.env.index(setting.name)  # into the same list (the copy shares its items)
        if i is None:
            if setting.yields_to_env_from and (target.has_env_from or _user_sets(setting.only_with, target, commanded)):
                if skipped is not None:
                    skipped.append(setting.name)
                continue  # the user's own logging wins (an envFrom value would be overridden by ours)
            env.append({"name": setting.name, "value": value})
            added += 1
            continue
        if not setting.enforce:
            continue  # the user's value stands
        item = env[i]
        same = item.get("valueFrom") is None and (  # NCCL compares NCCL_NET case-insensitively: ib is IB
            item.get("value") == value
            or (
                setting.name == "NCCL_NET"
                and isinstance(item.get("value"), str)
                and item["value"].casefold() == value.casefold()
            )
        )
        if not same:
            before = "a valueFrom source" if item.get("valueFrom") is not None else repr(item.get("value"))
            env[i] = {"name": setting.name, "value": value}
            added += 1
            warnings.append(
                f"{target.name}: {setting.name} is enforced by policy {policy.name}: {before} replaced by {repr(value)}"
            )
    return added


def _user_sets(name: str | None, target: Target, commanded: list[str] | None) -> bool:
    return name is not None and (target.env.index(name) is not None or (commanded is not None and name in commanded))


def _commanded(subject: Subject, name: str) -> list[str] | None:
    """The NCCL names the command of container `name` sets (read once per decision)."""
    for c, _, settings in subject.commands():
        if c.get("name") == name:
            return [n for n, _ in settings]
    return None


def _is_memory_empty_dir(volume: dict[str, Any]) -> bool:
    ed = volume.get("emptyDir")
    return isinstance(ed, dict) and ed.get("medium") == "Memory"


def _is_host_shm(volume: dict[str, Any]) -> bool:
    """A hostPath of the node's /dev/shm: the node's own tmpfs, memory like a Memory emptyDir
    (shared with the node and without a pod-level size limit, which the policy cannot check)."""
    hp = volume.get("hostPath")
    path = hp.get("path") if isinstance(hp, dict) else None
    return isinstance(path, str) and path.rstrip("/") == keys.SHM_PATH


def _shm_mount(mounts: list[Any]) -> dict[str, Any] | None:
    """The first mount at /dev/shm (with or without a trailing slash)."""
    for m in mounts:
        if isinstance(m, dict):
            path = m.get("mountPath")
            if isinstance(path, str) and path.startswith(keys.SHM_PATH) and path.rstrip("/") == keys.SHM_PATH:
                return m
    return None


def _volume(volumes: list[Any], name: str) -> dict[str, Any] | None:
    """The volume named `name`; the last of several, as a name -> volume map built from the list
    would hold. A scan: a pod has a handful of volumes and one or two names are asked."""
    i = len(volumes)
    while i > 0:
        i -= 1
        v = volumes[i]
        if isinstance(v, dict):
            found = v.get("name")
            if isinstance(found, str) and found == name:
                return v
    return None


def add_shm(pod: dict[str, Any], targets: list[Target], policy: Policy, warnings: list[str]) -> str | None:
    """A memory-backed emptyDir at /dev/shm for every target container that mounts nothing there.
    One pod volume serves them all; its size counts every GPU of the pod's target containers."""
    spec: dict[str, Any] = pod["spec"]
    containers: list[dict[str, Any]] = spec["containers"]
    gpus = 0
    for t in targets:
        gpus += t.gpus
    size = policy.shm_bytes_for(gpus)
    found = spec.get("volumes")
    volumes: list[Any] = found if isinstance(found, list) else []
    need_mount: list[dict[str, Any]] = []
    for t in targets:
        c = containers[t.index]
        mounts = c.get("volumeMounts")
        existing = _shm_mount(mounts) if isinstance(mounts, list) else None
        if existing is None:
            need_mount.append(c)
            continue
        mount_name = existing.get("name")
        vol = _volume(volumes, mount_name) if isinstance(mount_name, str) else None
        if vol is not None and _is_host_shm(vol):
            continue
        if vol is None or not _is_memory_empty_dir(vol):
            warnings.append(
                f"{t.name}: /dev/shm is not a memory-backed emptyDir; NCCL and DataLoader need shared memory in RAM"
            )
            continue
        limit = vol["emptyDir"].get("sizeLimit")
        if limit is not None:
            try:
                have = int(k8s.parse_quantity(limit))
            except ValueError:
                have = None
            if have is not None and have < size:
                warnings.append(
                    f"{t.name}: /dev/shm sizeLimit {limit} is smaller than the {k8s.format_bytes(size)} policy {policy.name} asks for"
                )
    if not need_mount:
        return None
    name = SHM_VOLUME
    n = 1
    same = _volume(volumes, name)
    while same is not None and not _is_memory_empty_dir(same):
        name = f"{SHM_VOLUME}-{n}"
        n += 1
        same = _volume(volumes, name)
    text = k8s.format_bytes(size)
    if same is None:
        _list_at(spec, "volumes").append({"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": text}})
    for c in need_mount:
        _list_at(c, "volumeMounts").append({"name": name, "mountPath": keys.SHM_PATH})
    return f"/dev/shm: memory-backed emptyDir {text}"


def add_ipc_lock(container: dict[str, Any]) -> bool:
    """IPC_LOCK in capabilities.add (never twice, never `privileged`)."""
    caps = _dict_at(_dict_at(container, "securityContext"), "capabilities")
    add = _list_at(caps, "add")
    if k8s.has_capability(add, keys.IPC_LOCK):
        return False
    add.append(keys.IPC_LOCK)
    return True


def add_claim(pod: dict[str, Any], container: dict[str, Any], policy: Policy, entry: str, gpus: int) -> bool:
    """The DRA NIC claim the container references: the policy's (the pod-level
    `spec.resourceClaims` entry added unless the pod has one of this fabric already, then `entry`
    is its name) or the one the pod brings; the container's reference to it. An aligned claim
    brings the container's `gpus` GPUs too, so its device-plugin GPU request is taken out."""
    claim = policy.claim
    spec: dict[str, Any] = pod["spec"]
    changed = False
    if claim is not None and entry == claim.name:
        claims = _list_at(spec, "resourceClaims")
        if not any(isinstance(c, dict) and c.get("name") == entry for c in claims):
            claims.append({"name": claim.name, "resourceClaimTemplateName": claim.template_for(gpus)})
            changed = True
        if claim.aligned:
            resources: dict[str, Any] = container.get("resources") or {}
            for section in ("limits", "requests"):
                values: dict[str, Any] = resources.get(section) or {}
                for res in policy.gpu_resources:
                    if res in values:
                        del values[res]
                        changed = True
                if section in resources and not values:
                    del resources[section]
    refs = _list_at(_dict_at(container, "resources"), "claims")
    if not any(isinstance(r, dict) and r.get("name") == entry for r in refs):
        refs.append({"name": entry})
        changed = True
    return changed


def apply(pod: dict[str, Any], subject: Subject, warnings: list[str]) -> list[str]:
    """Apply the whole policy to `pod` (a private copy). Returns what was added, for people."""
    policy = subject.policy
    notes: list[str] = []
    spec: dict[str, Any] = pod["spec"]
    containers: list[dict[str, Any]] = spec["containers"]
    plan = subject.networks
    interfaces: list[str] = plan.interfaces if plan is not None else []
    skipped: dict[int, list[str]] = {}  # per container: the logging settings left to the user's own
    for t in subject.targets:
        c = containers[t.index]
        what = []
        if not t.has_fabric:
            for d in subject.devices:
                dev = add_device(c, d.resource, d.count_for(t.gpus))
                if dev:
                    what.append(dev)
        entry = subject.claim_entry
        if entry is not None and (not t.has_fabric or subject.own_claim) and add_claim(pod, c, policy, entry, t.gpus):
            what.append(f"DRA claim {entry}")
        variables = add_env(
            c, t, policy, interfaces, warnings, _commanded(subject, t.name), skipped.setdefault(t.index, [])
        )
        if variables:
            what.append(f"{variables} NCCL variables")
        if add_ipc_lock(c):
            what.append("IPC_LOCK")
        if what:
            notes.append(f"{t.name}: " + ", ".join(what))
    for t in subject.launchers:  # the ranks see what the launcher forwards (webhook.core.ranks)
        c = containers[t.index]
        what = []
        if not t.is_target:
            own = [*(_commanded(subject, t.name) or ()), *ranks.user_values(c, t)]
            variables = add_env(c, t, policy, interfaces, warnings, own, skipped.setdefault(t.index, []))
            if variables:
                what.append(f"{variables} NCCL variables")
        forwarded = ranks.forward(c, t, policy, warnings, skipped.get(t.index))
        if forwarded:
            what.append(forwarded)
        if what:
            notes.append(f"{t.name}: " + " + ".join(what))
    if not subject.targets:  # a launcher alone: the block only, no device, /dev/shm or network
        plan = None
    shm = add_shm(pod, subject.targets, policy, warnings) if subject.targets else None
    if shm:
        notes.append(shm)
    if policy.pin is not None and subject.targets:  # the default machine type's nodes (webhook.core.machines)
        pinned = machines.pin_affinity(pod, policy.pin)
        if pinned:
            notes.append(pinned)
    if plan is not None and plan.value is not None:  # Multus's annotation, or GKE multi-networking's
        written = _dict_at(_dict_at(pod, "metadata"), "annotations")
        written[plan.key] = plan.value
        for key, value in plan.also.items():
            if key not in written:
                written[key] = value
        notes.extend(plan.added)
    meta = _dict_at(pod, "metadata")
    annotations = _dict_at(meta, "annotations")
    if (
        notes
        or annotations.get(keys.STATUS) != keys.STATUS_INJECTED
        or annotations.get(keys.APPLIED_POLICY) != policy.name
    ):
        annotations[keys.STATUS] = keys.STATUS_INJECTED
        annotations[keys.APPLIED_POLICY] = policy.name
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        meta["labels"] = {keys.APPLIED_POLICY_LABEL: policy.name}
    elif labels.get(keys.APPLIED_POLICY_LABEL) != policy.name:  # a new dict: the pod as sent keeps its own
        meta["labels"] = {**labels, keys.APPLIED_POLICY_LABEL: policy.name}
    return notes
