"""Where a verdict goes: the pod condition, an Event on the pod and on its training job, and the
metric. Pure: the objects are built here and sent by the verifier's cluster adapter.

The condition, `rdma-webhook.io/TransportVerified`, is written with a strategic-merge patch of
pods/status, which merges the pod's conditions by type: the kubelet's own conditions are left as
they are, and the kubelet keeps a condition type it does not own. A new container start replaces
the condition with its own verdict.

The Events are events.k8s.io/v1: one regarding the pod, one regarding the pod's controller (the
MPIJob, PyTorchJob, Job of a JobSet...: `kubectl describe` of the job shows it). A verified start
is a Normal event, anything else a Warning.
"""

from __future__ import annotations

from typing import Any

from webhook.proof.verdict import CONDITION, VERIFIED, Verdict
from webhook.verify.starts import Start

REPORTER = "rdma-webhook.io/verifier"
MAX_NOTE = 1024  # the API server refuses an Event note over 1 KiB


def summary(start: Start, verdict: Verdict) -> str:
    """One line a user can act on: the container, its policy, what was seen and why it is not
    what the policy promised."""
    expected = verdict.expected.transport or "an RDMA transport"
    seen = verdict.transport or "no network named"
    head = (
        f"container {start.container} of pod {start.pod} (policy {start.policy}): NCCL uses {seen}"
        + (f" on {', '.join(verdict.devices[:8])}" if verdict.devices else "")
        + (f", GPUDirect RDMA {'on' if verdict.gdr else 'off'}" if verdict.gdr is not None else "")
    )
    if verdict.verdict == VERIFIED:
        return f"{head}: verified against {expected}"
    reasons = ", ".join(verdict.reasons) or "Unverifiable"
    notes = "; ".join(verdict.notes)
    return f"{head}: {verdict.verdict} ({reasons}), expected {expected}" + (f": {notes}" if notes else "")


def condition_patch(start: Start, verdict: Verdict, now: str) -> dict[str, Any]:
    """The strategic-merge patch of the pod's status that sets the condition."""
    status, reason, _ = verdict.condition()
    return {
        "status": {
            "conditions": [
                {
                    "type": CONDITION,
                    "status": status,
                    "reason": reason,
                    "message": summary(start, verdict)[:MAX_NOTE],
                    "lastTransitionTime": now,
                }
            ]
        }
    }


def _event_doc(
    regarding: dict[str, Any], namespace: str, now: str, action: str, reason: str, warning: bool, note: str
) -> dict[str, Any]:
    """One events.k8s.io/v1 Event of the verifier's about `regarding`."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        # a prefix the API server validates as a name: no trailing dot (the name is at most 253)
        "metadata": {"generateName": f"{regarding['name'][:240]}-", "namespace": namespace},
        "eventTime": now,
        "reportingController": REPORTER,
        "reportingInstance": REPORTER,
        "action": action,
        "reason": reason,
        "type": "Warning" if warning else "Normal",
        "regarding": regarding,
        "note": note[:MAX_NOTE],
    }


def _event(regarding: dict[str, Any], start: Start, verdict: Verdict, now: str, evicting: bool) -> dict[str, Any]:
    _, reason, _ = verdict.condition()
    note = summary(start, verdict)
    if evicting:
        note = f"evicting the pod (policy {start.policy}: proof.onFallback fail): " + note
    verified = verdict.verdict == VERIFIED
    return _event_doc(
        regarding,
        start.namespace,
        now,
        "Evict" if evicting else "VerifyTransport",
        "TransportVerified" if verified else f"Transport{reason}",
        not verified,
        note,
    )


def events(start: Start, verdict: Verdict, now: str, evicting: bool = False) -> list[dict[str, Any]]:
    """The Events of one verdict: on the pod, and on its controller when it has one; `evicting`:
    the policy has the pod evicted for it, which the note says first."""
    pod = {"apiVersion": "v1", "kind": "Pod", "name": start.pod, "namespace": start.namespace, "uid": start.uid}
    out = [_event(pod, start, verdict, now, evicting)]
    if start.owner is not None:
        api_version, kind, name = start.owner
        owner = {"apiVersion": api_version, "kind": kind, "name": name, "namespace": start.namespace}
        event = _event(owner, start, verdict, now, evicting)
        event["related"] = pod
        out.append(event)
    return out


def eviction_refused(start: Start, error: str, now: str) -> dict[str, Any]:
    """The Warning Event on a pod whose eviction the API server refused (a PodDisruptionBudget, an
    API error): the Event before it said the pod was being evicted; this one says it still runs."""
    pod = {"apiVersion": "v1", "kind": "Pod", "name": start.pod, "namespace": start.namespace, "uid": start.uid}
    note = f"not evicted (policy {start.policy}: proof.onFallback fail): the API server refused the eviction: {error}"
    return _event_doc(pod, start.namespace, now, "Evict", "EvictionRefused", True, note)


def metric_labels(start: Start, verdict: Verdict) -> tuple[str, str, str]:
    """The labels of the verdicts counter: policy, verdict, reason (bounded: reasons are CamelCase
    names from webhook.proof.verdict, never free text)."""
    _, reason, _ = verdict.condition()
    return start.policy, verdict.verdict, reason
