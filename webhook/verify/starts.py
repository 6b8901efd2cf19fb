"""Which container starts of a pod the verifier reads: one read per start, never two.

A start is a container of a pod the webhook mutated (it carries the applied-policy label) that
runs NCCL: a container the mutation gave NCCL settings to (the GPU containers, an MPI launcher,
whose log holds its ranks' lines), seen running or terminated with a container ID. The
container ID is what makes a start: a restarted container has a new one and is read again, a
pod update that changes nothing else is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.core import keys


@dataclass(frozen=True)
class Start:
    """One container start to read: where it is, whose policy it was admitted under, and its ID."""

    namespace: str
    pod: str
    uid: str
    container: str
    container_id: str
    policy: str
    node: str
    owner: tuple[str, str, str] | None  # the pod's controller: (apiVersion, kind, name)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.uid, self.container, self.container_id


def _runs_nccl(container: Any) -> bool:
    """A container the mutation gave NCCL settings: an env entry named NCCL_* (the block is only
    ever written into the containers it targets)."""
    env = container.get("env") if isinstance(container, dict) else None
    return isinstance(env, list) and any(
        isinstance(e, dict) and str(e.get("name", "")).startswith("NCCL_") for e in env
    )


def _controller(meta: dict[str, Any]) -> tuple[str, str, str] | None:
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") and ref.get("name"):
            return str(ref.get("apiVersion") or ""), str(ref["kind"]), str(ref["name"])
    return None


def starts(pod: Any) -> list[Start]:
    """The container starts of `pod` to read now (each container of it that runs NCCL and has
    started); none for a pod without the applied-policy label."""
    if not isinstance(pod, dict):
        return []
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    policy = labels.get(keys.APPLIED_POLICY_LABEL)
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    if not policy or not meta.get("name") or not meta.get("uid"):
        return []
    wanted = {c.get("name") for c in spec.get("containers") or () if isinstance(c, dict) and _runs_nccl(c)}
    out = []
    for cs in status.get("containerStatuses") or ():
        if not isinstance(cs, dict) or cs.get("name") not in wanted or not cs.get("containerID"):
            continue
        state = cs.get("state") if isinstance(cs.get("state"), dict) else {}
        if "running" not in state and "terminated" not in state:
            continue
        out.append(
            Start(
                str(meta.get("namespace") or ""),
                str(meta["name"]),
                str(meta["uid"]),
                str(cs["name"]),
                str(cs["containerID"]),
                str(policy),
                str(spec.get("nodeName") or ""),
                _controller(meta),
            )
        )
    return out
