"""`rdma-webhook status`: the verifier's verdicts as people ask for them, per job.

From the pods the webhook mutated (the applied-policy label) and the opted-in namespaces, both
listed from the live cluster: each namespace's jobs (a pod's controller, or the pod itself when it
has none), the policy they were admitted under, and their pods' TransportVerified conditions
counted (True, False, Unknown, not yet read) with the reasons of those not True. A job is `False`
when any pod is, `Unknown` when any pod is Unknown and none False, `True` when every pod is,
`pending` while some pod has no verdict yet. Pure: the listing is the CLI's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from webhook.core import keys
from webhook.proof.verdict import CONDITION


@dataclass
class Job:
    namespace: str
    kind: str
    name: str
    policies: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"True": 0, "False": 0, "Unknown": 0, "pending": 0})
    reasons: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        for state in ("False", "Unknown", "pending"):
            if self.counts[state]:
                return state
        return "True"

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "kind": self.kind,
            "name": self.name,
            "policies": self.policies,
            "verdict": self.verdict,
            "pods": dict(self.counts),
            "reasons": self.reasons,
        }


def _condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    for c in status.get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == CONDITION:
            return c
    return None


def jobs(pods: Iterable[Any], opted_in: set[str] | None = None) -> list[Job]:
    """The jobs of `pods`, sorted by namespace, kind and name; only namespaces of `opted_in` when given."""
    found: dict[tuple[str, str, str], Job] = {}
    for pod in pods:
        if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
            continue
        meta = pod["metadata"]
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        policy = labels.get(keys.APPLIED_POLICY_LABEL)
        namespace = str(meta.get("namespace") or "")
        if not policy or (opted_in is not None and namespace not in opted_in):
            continue
        owner = next(
            (r for r in meta.get("ownerReferences") or () if isinstance(r, dict) and r.get("controller")), None
        )
        kind, name = (str(owner.get("kind")), str(owner.get("name"))) if owner else ("Pod", str(meta.get("name")))
        job = found.setdefault((namespace, kind, name), Job(namespace, kind, name))
        if policy not in job.policies:
            job.policies.append(str(policy))
        condition = _condition(pod)
        state = str(condition.get("status")) if condition else "pending"
        job.counts[state if state in job.counts else "Unknown"] += 1
        if condition and state != "True":
            reason = str(condition.get("reason") or "")
            if reason and reason not in job.reasons:
                job.reasons.append(reason)
    return [found[k] for k in sorted(found)]


def table(found: list[Job]) -> str:
    """The jobs as `kubectl get` prints objects: one line each under a header."""
    rows = [("NAMESPACE", "KIND", "NAME", "POLICY", "VERDICT", "TRUE", "FALSE", "UNKNOWN", "PENDING", "REASONS")]
    for j in found:
        c = j.counts
        rows.append(
            (
                j.namespace,
                j.kind,
                j.name,
                ",".join(j.policies),
                j.verdict,
                str(c["True"]),
                str(c["False"]),
                str(c["Unknown"]),
                str(c["pending"]),
                ",".join(j.reasons) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows) + "\n"
