"""The one door to an admission: /mutate and /validate as one function of the request body
(`Admissions.answer`), with the metrics and the log line of each admission.

The ASGI front (`webhook.serving.asgi.Front.direct`) routes a POST to either path here, and the
worker's connection (`webhook.serving.worker`) takes the same route from that table without the
ASGI cycle; nothing else reaches the decision. Flask (`webhook.serving.app`) serves the probes and
/metrics only: its request cycle cost about a third of an admission's instructions
(benchmarks/README.md, "The admission path without Flask's request cycle"), and an admission
needs none of it.

Nothing here decides anything; it bounds the body, asks `webhook.admission.review`, and records
the metrics and one JSON log line per admission (`webhook.serving.batch`). No request may end in a
500: an unexpected error while deciding is answered with a deny that says so, and logged with
its traceback.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from webhook.admission import review
from webhook.cluster.state import ClusterState
from webhook.core.decision import pod_name
from webhook.policy.store import PolicyStore
from webhook.serving.batch import Batch
from webhook.telemetry import metrics

MAX_BODY = 3 * 1024 * 1024  # etcd stores objects up to 1.5 MiB; a review carries one object

log = logging.getLogger("rdma_webhook.admission")


def claims_of(cluster: Any) -> Any:
    """The cluster's DRA lookups (webhook.core.claims.Claims), None when it does not track them."""
    lookup = getattr(cluster, "claims", None)
    return lookup() if lookup is not None else None


class Admissions:
    """/mutate and /validate as one function of the request body, with the metrics and log line
    of each admission; `PATHS` is the routing table the ASGI front and the worker take it by."""

    PATHS = {"/mutate": "mutate", "/validate": "validate"}

    def __init__(self, store: PolicyStore, cluster: ClusterState):
        self.store, self.cluster = store, cluster
        self.batch = Batch()  # the metrics and log line of each admission, written once per loop pass

    def namespace_of(self, name: str):
        return self.cluster.namespace(name)

    def answer(self, endpoint: str, body: bytes | None) -> tuple[int, bytes]:
        """(HTTP status, JSON body) for a review sent to `endpoint` ("mutate" or "validate");
        `body` None or over MAX_BODY: refused (413)."""
        start = time.perf_counter()
        if body is None or len(body) > MAX_BODY:
            metrics.child(metrics.ADMISSIONS, endpoint, "error", "").inc()
            metrics.child(metrics.RESPONSES, "413").inc()
            return 413, orjson.dumps({"error": f"request body over {MAX_BODY} bytes"})
        cluster = self.cluster
        try:
            if endpoint == "mutate":
                status, doc, decision, req = review.handle(
                    body, self.store.current, self.namespace_of, cluster.attachments(), claims=claims_of(cluster)
                )
            else:
                status, doc, decision, req = review.handle_validate(
                    body,
                    self.store.current,
                    self.namespace_of,
                    cluster.attachments(),
                    cluster.runtimes(),
                    claims=claims_of(cluster),
                )
        except Exception as exc:  # a bug must not become a 500: deny (fail closed) and say so
            log.exception("internal error while deciding")
            uid = _uid_of(body)
            if uid is None:
                status, doc, decision, req = 400, {"error": "request could not be processed"}, None, None
            else:
                status, doc, decision, req = (
                    200,
                    review.response(
                        uid,
                        None,
                        message=f"internal error while deciding ({type(exc).__name__}); the pod was not admitted",
                    ),
                    None,
                    None,
                )
        elapsed = time.perf_counter() - start
        outcome = (
            decision.outcome
            if decision
            else ("error" if status != 200 or not doc.get("response", {}).get("allowed") else "skipped")
        )
        policy = (decision.policy or "") if decision else ""
        self.batch.record(
            endpoint, outcome, policy, status, elapsed, _log_fields(endpoint, req, decision, doc, outcome, elapsed)
        )
        return status, orjson.dumps(doc)


def _uid_of(body: bytes) -> str | None:
    try:
        uid = orjson.loads(body)["request"]["uid"]
    except Exception:
        return None
    return uid if isinstance(uid, str) and uid else None


def _log_fields(endpoint, req, decision, doc, outcome, elapsed) -> dict[str, Any]:
    """What one admission log line says: no pod spec, no env values, no tokens."""
    fields: dict[str, Any] = {"endpoint": endpoint, "outcome": outcome, "ms": round(elapsed * 1000, 3)}
    if req is not None:
        fields["uid"] = req.uid
        fields["namespace"] = req.namespace
        fields["operation"] = req.operation
        if isinstance(req.obj, dict):
            fields["pod"] = pod_name(req.obj)
    if decision is not None:
        fields["policy"] = decision.policy
        if decision.denials:
            fields["reasons"] = [f.rule for f in decision.denials]
        if decision.reason:
            fields["why"] = decision.reason
    elif "error" in doc:
        fields["error"] = doc["error"]
    elif "response" in doc and doc["response"].get("status"):
        fields["error"] = doc["response"]["status"].get("message")
    return fields
