"""The targets of a decision: who gets RDMA, who is checked without getting it, and why none
does. A target is a container that requests one of the policy's GPUs, or references the
policy's aligned GPU+NIC claim, which brings its GPUs (`find_targets`); a
container that sees GPUs another way (a DRA claim, NVIDIA_VISIBLE_DEVICES) is checked, not
mutated (`find_checked`); a pod with neither is told why in words (`why_no_target`). MPI
launchers are Targets too, found by `webhook.core.ranks`. The rules (`webhook.core.fallback`),
the mutation and the warnings all read Targets, so they live here, below all of them, and the
decision builds them here instead of reaching back and forth between modules.
"""

from __future__ import annotations

from typing import Any

from webhook.core.model import Claim, Policy
from webhook.grammar import k8s


class Target:
    """A container that gets RDMA: it asks for a GPU. (Target and Subject are plain classes, not
    dataclasses: see `webhook.core.decision.Decision`.)"""

    def __init__(self, index: int, name: str, gpus: int, env: k8s.Env, has_env_from: bool):
        self.index = index
        self.name = name
        self.gpus = gpus
        self.env = env  # the values its process will see from `env`, `$(VAR)`s expanded
        self.has_env_from = has_env_from
        # It already has this fabric's device by another name (the policy's equivalentResources,
        # or the pod claims an equivalent DRA template): the policy's devices are not added.
        self.has_fabric = False
        # An MPI launcher (`webhook.core.ranks`): the launcher families its command runs
        # (`launchers.FAMILIES`), whether it restricts Hydra's forwarding, whether its command
        # gives `mca_base_env_list`; and whether it is a target too (a launcher that is a node).
        self.families: tuple[str, ...] = ()
        self.restricts = False
        self.cmd_env_list = False
        self.exports = False  # its command gives Open MPI's -x (webhook.core.ranks._export_flags)
        self.words: list[str] | None = None  # its command + args as run (`subject.command_words`), once read
        self.is_target = False


def _gpu_amount(value: Any) -> int:
    """A GPU limit or request as a count (0 at least); -1 when it is no finite quantity ("many",
    "$GPU_PER_NODE", "inf"), which must not be read as "no GPU"."""
    if type(value) is str and value.isdecimal() and value.isascii():  # "8": the usual form
        return int(value)
    try:
        amount = k8s.parse_quantity(value)
    except ValueError:
        return -1
    if not amount.is_finite():  # the parser takes "inf" and "NaN"
        return -1
    return max(0, int(amount))  # a negative count is no GPU (the API server refuses it anyway)


def _gpu_count(container: dict[str, Any], gpu_resources: tuple[str, ...]) -> int:
    """The GPUs a container requests; -1 when a GPU value is no quantity (`_gpu_value_problem`
    says which)."""
    resources: dict[str, Any] = container.get("resources") or {}
    best = 0
    for section in ("limits", "requests"):
        values: dict[str, Any] = resources.get(section) or {}
        for res in gpu_resources:
            if res in values:
                count = _gpu_amount(values[res])
                if count < 0:
                    return -1
                best = max(best, count)
    return best


def _gpu_value_problem(container: dict[str, Any], gpu_resources: tuple[str, ...]) -> str:
    """Which GPU value of a container `_gpu_count` refused, as the malformed-pod denial names it."""
    resources: dict[str, Any] = container.get("resources") or {}
    for section in ("limits", "requests"):
        values: dict[str, Any] = resources.get(section) or {}
        for res in gpu_resources:
            if res in values and _gpu_amount(values[res]) < 0:
                return f"resources.{section}[{res!r}] is not a quantity: {values[res]!r}"
    # Unreachable: called only when _gpu_count found such a value, by the same test in the same order.
    raise AssertionError


def find_targets(pod: dict[str, Any], policy: Policy, malformed: list[str] | None = None) -> list[Target]:
    """The containers that request one of the policy's GPUs, or reference its aligned claim. A GPU value that is no quantity
    makes none a target; with `malformed` given, it is also reported there (the API server
    never sends one: it refuses such a pod before admission; `review` reads unrendered files)."""
    targets = []
    spec: dict[str, Any] = pod.get("spec") or {}
    containers: list[dict[str, Any]] = spec.get("containers") or []
    claim = policy.claim
    aligned = _aligned_entries(spec, claim) if claim is not None and claim.aligned else None
    for i, c in enumerate(containers):
        gpus = _gpu_count(c, policy.gpu_resources)
        if gpus == 0 and aligned:
            gpus = _aligned_gpus(c, aligned)
        if gpus > 0:
            targets.append(Target(i, str(c.get("name")), gpus, k8s.Env(c.get("env")), bool(c.get("envFrom"))))
        elif gpus < 0 and malformed is not None:
            malformed.append(f"spec.containers[{i}].{_gpu_value_problem(c, policy.gpu_resources)}")
    return targets


def _aligned_entries(spec: dict[str, Any], claim: Claim) -> dict[str, int]:
    """The pod's spec.resourceClaims entries made from the policy's aligned GPU+NIC claim (its
    template for some GPU count, or an equivalent), by name, with the GPUs each brings (1 when
    the name does not say). A container that references one gets its GPUs from it: a target,
    as the container whose nvidia.com/gpu request the mutation turned into that reference (the
    final state, a reinvocation) or one the user wrote so. Only for an aligned claim: other
    policies pay one attribute test."""
    entries: list[Any] = spec.get("resourceClaims") or []
    out: dict[str, int] = {}
    for e in entries:
        template = (e.get("resourceClaimTemplateName") or e.get("resourceClaimName")) if isinstance(e, dict) else None
        gpus = claim.gpus_in(template) if isinstance(template, str) else None
        if gpus is not None:
            out[str(e.get("name"))] = gpus
    return out


def _aligned_gpus(c: dict[str, Any], aligned: dict[str, int]) -> int:
    """The GPUs a container gets from the aligned claims it references (`_aligned_entries`)."""
    resources: dict[str, Any] = c.get("resources") or {}
    refs: list[Any] = resources.get("claims") or []
    gpus = 0
    for r in refs:
        if isinstance(r, dict):
            gpus += aligned.get(str(r.get("name")), 0)
    return gpus


_NO_GPUS = ("", "void", "none")


def _sees_gpus_otherwise(c: dict[str, Any]) -> bool:
    """A container that runs NCCL on GPUs without requesting one by resource: it references a
    DRA claim (GPUs allocated through Dynamic Resource Allocation), or the NVIDIA container
    runtime gives it GPUs through NVIDIA_VISIBLE_DEVICES (`all` or a list; `void`/`none` give
    none), the pattern of privileged vendor benchmarks."""
    resources: dict[str, Any] = c.get("resources") or {}
    if resources.get("claims"):
        return True
    env: list[Any] = c.get("env") or []
    for e in env:
        if isinstance(e, dict) and e.get("name") == "NVIDIA_VISIBLE_DEVICES":
            value = e.get("value")
            return isinstance(value, str) and value.strip().lower() not in _NO_GPUS
    return False


def why_no_target(pod: dict[str, Any], policy: Policy, others: list[Target]) -> str:
    """Why no container of a labelled pod gets RDMA under `policy`, as people read it: its GPUs
    come from a DRA claim or the container runtime (checked, not mutated), it requests another
    vendor's GPU, or it has no GPU at all and runs no MPI launcher (a CPU pod)."""
    gpu = "/".join(policy.gpu_resources)
    spec: dict[str, Any] = pod.get("spec") or {}
    containers: list[dict[str, Any]] = spec.get("containers") or []
    for t in others:
        c = containers[t.index]
        resources: dict[str, Any] = c.get("resources") or {}
        how = "a DRA claim (resources.claims)" if resources.get("claims") else "NVIDIA_VISIBLE_DEVICES"
        return (
            f"container {t.name!r} sees GPUs through {how}, not by requesting {gpu}, so policy {policy.name} "
            f"adds nothing to it (its NCCL settings are still checked)"
        )
    zero = ""
    for c in containers:
        resources = c.get("resources") or {}
        for section in ("limits", "requests"):
            values: dict[str, Any] = resources.get(section) or {}
            for res in values:
                if not (
                    res.endswith("/gpu")
                    or ".gpu" in res
                    or res.startswith("gpu.")  # gpu.intel.com/i915
                    or res.endswith("/gpus")
                    or "/gpu." in res  # nvidia.com/gpu.shared: the device plugin's time-sliced GPUs, renamed
                    or "/mig-" in res  # nvidia.com/mig-1g.10gb: a MIG slice (the plugin's mixed strategy)
                ):
                    continue
                if _gpu_amount(values[res]) == 0:  # `nvidia.com/gpu: 0` is no GPU, of any policy
                    zero = zero or f"container {str(c.get('name'))!r} requests {res}: {values[res]!r}, which is no GPU"
                    continue
                return (
                    f"container {str(c.get('name'))!r} requests {res}, not a GPU of policy {policy.name} "
                    f"({gpu}), so it gets no RDMA device"
                )
    if zero:
        return f"{zero}, and no container runs an MPI launcher, so none gets RDMA (a pod without GPUs)"
    return f"no container requests a GPU ({gpu}) or runs an MPI launcher, so none gets RDMA (a pod without GPUs)"


def find_checked(pod: dict[str, Any], targets: list[Target]) -> list[Target]:
    """The containers besides the targets whose NCCL settings are checked: those that see GPUs
    another way (`_sees_gpus_otherwise`). They are checked, not mutated: the policy's devices
    and block go to containers that request a GPU."""
    spec: dict[str, Any] = pod.get("spec") or {}
    containers: list[dict[str, Any]] = spec.get("containers") or []
    out: list[Target] = []
    taken = [t.index for t in targets]
    for i, c in enumerate(containers):
        if i not in taken and _sees_gpus_otherwise(c):
            out.append(Target(i, str(c.get("name")), 0, k8s.Env(c.get("env")), bool(c.get("envFrom"))))
    return out
