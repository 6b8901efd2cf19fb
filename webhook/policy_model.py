"""A loaded policy as the admission path reads it: `Policy` (one fabric's settings, computed at
load), `EnvSetting` (one NCCL variable of its block) and `PolicySet` (the policies, indexed by
name and by namespace labels).

`webhook.policy` builds these from the YAML files; this module only holds them. It is compiled
with the rest of the decision core (mypyc) so that the decision reads a policy's fields as C
struct members: as plain Python dataclasses, every field the decision read (the policy's name,
its NCCL block item by item, its fabric) was a generic attribute lookup through the instance
dict, about a twentieth of a typical decision (benchmarks/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Mapping



@dataclass(frozen=True)
class EnvSetting:
    name: str
    value: str
    enforce: bool


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
    fabric_kind: str
    nccl_nets: tuple[str, ...]
    hca_devices: tuple[str, ...]
    device_resource: str | None
    device_count: int
    device_per_gpu: bool
    network_name: str | None
    network_namespace: str | None
    network_interface: str | None
    shm_fixed: int | None
    shm_per_gpu: int | None
    shm_max: int | None
    env: tuple[EnvSetting, ...]
    workload_validation: str
    allows_namespace: Any = field(repr=False, compare=False)  # Selector over namespace labels
    # Judgements of NCCL settings under this policy, (name, value) -> reason or None, filled by
    # webhook.fallback.judge_setting: the pods of a job repeat the same few settings. Kept here
    # so they go away with the policy when a reload replaces it.
    judged: dict[tuple[str, str], str | None] = field(default_factory=dict, repr=False, compare=False)

    def device_count_for(self, gpus: int) -> int:
        return self.device_count * gpus if self.device_per_gpu else self.device_count

    def shm_bytes_for(self, gpus: int) -> int:
        if self.shm_fixed is not None:
            return self.shm_fixed
        size = (self.shm_per_gpu or 0) * max(gpus, 1)
        return min(size, self.shm_max) if self.shm_max else size


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
