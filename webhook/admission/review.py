"""AdmissionReview in and out: the envelope around a decision.

`handle(body, ...)` takes the raw HTTP body and returns (HTTP status, response bytes, Decision or
None). Every body that carries a request uid gets a well-formed `admission.k8s.io/v1` answer,
a deny with the reason when the request itself is unusable; only a body without a uid (not JSON,
not an AdmissionReview) gets HTTP 400, since there is nothing to answer it with.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson

from webhook.admission.judge import Expanded, judge, judge_list, judge_pod
from webhook.core import patch
from webhook.core.decision import DENIED, MUTATED, Attachments, Decision, Namespace, pod_name
from webhook.core.claims import Claims
from webhook.core.model import PolicySet

API_VERSION = "admission.k8s.io/v1"
MAX_WARNING = 256  # the API server truncates longer warnings; kubectl shows each on a line
MAX_WARNINGS = 20


class BadReview(Exception):
    """A body that cannot be answered with an AdmissionReview: HTTP 400 with this message."""


class Request:
    """The fields of an AdmissionReview request that the webhook reads. A plain class, not a
    dataclass: compiled, a dataclass keeps the `__init__` the dataclasses module generates at
    import, which runs as interpreted bytecode on every request (about 4K instructions)."""

    def __init__(
        self,
        uid: str,
        operation: str,
        namespace: str,
        obj: Any,
        kind: str,
        group: str,
        resource: str,
        sub_resource: str,
        dry_run: bool,
    ):
        self.uid = uid
        self.operation = operation
        self.namespace = namespace
        self.obj = obj
        self.kind = kind
        self.group = group
        self.resource = resource
        self.sub_resource = sub_resource
        self.dry_run = dry_run


def parse(body: bytes) -> Request:
    """The AdmissionReview request in `body`; BadReview when there is no usable uid."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"request body is not valid JSON: {exc}") from None
    return request_of(review)


def request_of(review: Any) -> Request:
    """The request of an AdmissionReview already read (an HTTP body's, or one `rdma-webhook
    review` read from a file); BadReview when there is no usable uid."""
    if not isinstance(review, dict):
        raise BadReview("request body is not a JSON object (expected an AdmissionReview)")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("AdmissionReview request has no uid")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise EnvelopeError(
            uid,
            f"expected apiVersion {API_VERSION} kind AdmissionReview, got "
            f"apiVersion {review.get('apiVersion')!r} kind {review.get('kind')!r}",
        )
    kind = request.get("kind")
    if not isinstance(kind, dict):
        kind = {}
    resource = request.get("resource")
    if not isinstance(resource, dict):
        resource = {}
    return Request(
        uid=uid,
        operation=str(request.get("operation") or ""),
        namespace=str(request.get("namespace") or ""),
        obj=request.get("object"),
        kind=str(kind.get("kind") or ""),
        group=str(kind.get("group") or ""),
        resource=str(resource.get("resource") or ""),
        sub_resource=str(request.get("subResource") or ""),
        dry_run=request.get("dryRun") is True,
    )


class EnvelopeError(Exception):
    """A review with a uid that is still wrong: answered with a deny saying what is wrong."""

    def __init__(self, uid: str, message: str):
        super().__init__(message)
        self.uid, self.message = uid, message


def _cut(warning: str) -> str:
    """A warning over the API server's length, cut at the last space that fits (never mid-word)."""
    head = warning[: MAX_WARNING - 4]
    space = head.rfind(" ")
    return (head[:space] if space > MAX_WARNING // 2 else head).rstrip(" ,;:") + " ..."


def _warnings(items: list[str]) -> list[str]:
    out = [w if len(w) <= MAX_WARNING else _cut(w) for w in items[:MAX_WARNINGS]]
    if len(items) > MAX_WARNINGS:
        out.append(f"... and {len(items) - MAX_WARNINGS} more warnings")
    return out


def deny_message(decision: Decision, obj: Any) -> str:
    name = pod_name(obj)
    policy = f" (policy {decision.policy})" if decision.policy else ""
    reasons = "; ".join(f.text() for f in decision.denials)
    return f"rdma-webhook denied pod {name}{policy}: {reasons}"


def response(uid: str, decision: Decision | None, obj: Any = None, message: str | None = None) -> dict[str, Any]:
    """The AdmissionReview answer for a decision (or, without one, a deny with `message`; with
    one, `message` replaces the pod-worded deny message)."""
    resp: dict[str, Any] = {"uid": uid}
    if decision is None:
        resp["allowed"] = False
        resp["status"] = {"code": 400, "reason": "BadRequest", "message": f"rdma-webhook: {message}"}
    elif decision.outcome == DENIED:
        resp["allowed"] = False
        resp["status"] = {"code": 403, "reason": "Forbidden", "message": message or deny_message(decision, obj)}
    else:
        resp["allowed"] = True
        if decision.outcome == MUTATED:
            ops = patch.make(obj, decision.pod)
            if ops:
                resp["patchType"] = "JSONPatch"
                resp["patch"] = patch.encode(ops)
    if decision is not None and decision.warnings:
        resp["warnings"] = _warnings(decision.warnings)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": resp}


NamespaceLookup = Callable[[str], Namespace | None]


def _is_pod(req: Request) -> bool:
    """The request is about a pod: by its kind or resource, or, in a hand-written review that
    names neither (the API server always sends both), by its object's own kind, so that a Job
    sent that way is judged as a Job, not refused as a malformed pod."""
    if req.sub_resource:
        return False
    if req.kind or req.resource:
        return (req.resource or "pods") == "pods" and (req.kind or "Pod") == "Pod"
    obj = req.obj
    return not isinstance(obj, dict) or obj.get("kind") in (None, "", "Pod")


def _namespace(req: Request, namespace_of: NamespaceLookup) -> Namespace | None:
    return object_namespace(req.namespace, req.obj, namespace_of)


def object_namespace(ns_name: str, obj: Any, namespace_of: NamespaceLookup) -> Namespace | None:
    """The namespace an object is judged in: the request's, else (a cluster-scoped object, a
    hand-written review) the one its metadata names; None for neither."""
    if not ns_name and isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        ns_name = str(obj["metadata"].get("namespace") or "")
    return namespace_of(ns_name) if ns_name else None


def review_request(
    req: Request,
    policies: PolicySet | None,
    namespace_of: NamespaceLookup,
    attachments: Attachments | None,
    config_maps: Any = None,
    claims: Claims | None = None,
) -> Decision | None:
    """The decision for a parsed request; None when the request is not about a pod at all.
    `config_maps`: the ConfigMaps at hand (`webhook.core.scripts.ConfigMaps`): none when served,
    those of its input in `rdma-webhook review`. `claims`: the DRA objects known."""
    if not _is_pod(req):
        return None
    return judge_pod(req.obj, _namespace(req, namespace_of), policies, attachments, req.operation, config_maps, claims)


Handled = tuple[int, dict[str, Any], Decision | None, Request | None]


def _other_operation(req: Request) -> Handled | None:
    """Any operation other than CREATE (UPDATE, DELETE, CONNECT) is allowed untouched, whatever
    its object (a DELETE's is null), before any other check: a webhook that routes DELETE by
    mistake must never stop a pod or a job from being deleted."""
    if req.operation == "CREATE":
        return None
    decision = _skipped_operation(req)
    return 200, response(req.uid, decision), decision, req


def _skipped_operation(req: Request) -> Decision:
    return Decision("skipped", req.obj, reason=f"operation {req.operation or '(none)'}: only CREATE is considered")


def _parsed(body: bytes) -> Request | Handled:
    try:
        return parse(body)
    except BadReview as bad:
        return 400, {"error": str(bad)}, None, None
    except EnvelopeError as wrong:  # a name of its own: mypyc types an except variable once
        return 200, response(wrong.uid, None, message=wrong.message), None, None


def handle(
    body: bytes,
    policies: PolicySet | None,
    namespace_of: NamespaceLookup,
    attachments: Attachments | None,
    config_maps: Any = None,
    claims: Claims | None = None,
) -> Handled:
    """(HTTP status, response document, decision, request) for one /mutate body."""
    req = _parsed(body)
    if not isinstance(req, Request):
        return req
    other = _other_operation(req)
    if other is not None:
        return other
    decision = review_request(req, policies, namespace_of, attachments, config_maps, claims)
    if decision is None:
        return 200, response(req.uid, Decision("skipped", req.obj, reason="not a pod")), None, req
    return 200, response(req.uid, decision, req.obj), decision, req


def validate_request(
    req: Request,
    policies: PolicySet | None,
    namespace_of: NamespaceLookup,
    attachments: Attachments | None,
    runtimes: Any = None,
    config_maps: Any = None,
    claims: Claims | None = None,
    expanded: Expanded | None = None,
) -> tuple[Decision | None, str | None]:
    """(decision, deny message) for /validate: the final-state guard for a pod, the template
    check for a workload, (None, None) for anything else. `runtimes` looks up Kubeflow Trainer
    runtimes for TrainJobs (webhook.kinds.trainer.Runtimes; None: not tracked). `expanded`: a
    workload's templates, when the caller has expanded them (webhook.admission.judge)."""
    from webhook.kinds import workloads

    obj = req.obj if isinstance(req.obj, dict) else {}
    if _is_pod(req):
        group, kind = "", "Pod"
    elif req.sub_resource:
        return None, None
    else:
        group = req.group if req.kind else workloads.group_of(obj.get("apiVersion"))
        kind = req.kind or str(obj.get("kind") or "")
        if group == "" and kind == "List" and isinstance(obj.get("items"), list):
            return judge_list(
                req.obj, obj["items"], req.namespace, namespace_of, policies, attachments, runtimes, config_maps, claims
            )
    judged = judge(
        req.obj,
        group,
        kind,
        _namespace(req, namespace_of),
        policies,
        attachments,
        runtimes,
        config_maps,
        claims,
        final=True,
        expanded=expanded,
    )
    return judged if judged is not None else (None, None)


def judge_request(
    req: Request,
    validating: bool,
    policies: PolicySet | None,
    namespace_of: NamespaceLookup,
    attachments: Attachments | None,
    runtimes: Any = None,
    config_maps: Any = None,
    claims: Claims | None = None,
    expanded: Expanded | None = None,
) -> tuple[Decision | None, Decision, str | None]:
    """What `handle` (or, `validating`, `handle_validate`) decides on a parsed request, without
    the answer: (the decision they return, None when not judged; the one they answer with; the
    deny message). For `rdma-webhook review`, which builds the answer only when it prints it."""
    if req.operation != "CREATE":
        skipped = _skipped_operation(req)
        return skipped, skipped, None
    if not validating:
        decision = review_request(req, policies, namespace_of, attachments, config_maps, claims)
        return decision, decision if decision is not None else Decision("skipped", req.obj, reason="not a pod"), None
    found, message = validate_request(req, policies, namespace_of, attachments, runtimes, config_maps, claims, expanded)
    return found, found if found is not None else Decision("skipped", req.obj, reason="not a pod or workload"), message


def handle_validate(
    body: bytes,
    policies: PolicySet | None,
    namespace_of: NamespaceLookup,
    attachments: Attachments | None,
    runtimes: Any = None,
    config_maps: Any = None,
    claims: Claims | None = None,
) -> Handled:
    """(HTTP status, response document, decision, request) for one /validate body. Never a
    patch: a validating webhook only allows, denies and warns."""
    req = _parsed(body)
    if not isinstance(req, Request):
        return req
    other = _other_operation(req)
    if other is not None:
        return other
    decision, message = validate_request(req, policies, namespace_of, attachments, runtimes, config_maps, claims)
    if decision is None:
        return 200, response(req.uid, Decision("skipped", req.obj, reason="not a pod or workload")), None, req
    return 200, response(req.uid, decision, req.obj, message), decision, req
