"""AdmissionReview in and out: the envelope around a decision.

`handle(body, ...)` takes the raw HTTP body and returns (HTTP status, response bytes, Decision or
None). Every body that carries a request uid gets a well-formed `admission.k8s.io/v1` answer,
a deny with the reason when the request itself is unusable; only a body without a uid (not JSON,
not an AdmissionReview) gets HTTP 400, since there is nothing to answer it with.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson

from webhook.core import patch
from webhook.core.decision import DENIED, MUTATED, Attachments, Decision, Namespace, check_final, decide, pod_name
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

    def __init__(self, uid: str, operation: str, namespace: str, obj: Any, kind: str, group: str,
                 resource: str, sub_resource: str, dry_run: bool):
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
    if not isinstance(review, dict):
        raise BadReview("request body is not a JSON object (expected an AdmissionReview)")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("AdmissionReview request has no uid")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise EnvelopeError(uid, f"expected apiVersion {API_VERSION} kind AdmissionReview, got "
                                 f"apiVersion {review.get('apiVersion')!r} kind {review.get('kind')!r}")
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
    ns_name = req.namespace
    if not ns_name and isinstance(req.obj, dict) and isinstance(req.obj.get("metadata"), dict):
        ns_name = str(req.obj["metadata"].get("namespace") or "")
    return namespace_of(ns_name) if ns_name else None


def review_request(req: Request, policies: PolicySet | None, namespace_of: NamespaceLookup,
                   attachments: Attachments | None, config_maps: Any = None, claims: Claims | None = None) -> Decision | None:
    """The decision for a parsed request; None when the request is not about a pod at all.
    `config_maps`: the ConfigMaps at hand (`webhook.core.scripts.ConfigMaps`): none when served,
    those of its input in `rdma-webhook review`. `claims`: the DRA objects known."""
    if not _is_pod(req):
        return None
    return decide(req.obj, _namespace(req, namespace_of), policies, attachments, req.operation, config_maps, claims)


Handled = tuple[int, dict[str, Any], Decision | None, Request | None]


def _other_operation(req: Request) -> Handled | None:
    """Any operation other than CREATE (UPDATE, DELETE, CONNECT) is allowed untouched, whatever
    its object (a DELETE's is null), before any other check: a webhook that routes DELETE by
    mistake must never stop a pod or a job from being deleted."""
    if req.operation == "CREATE":
        return None
    decision = Decision("skipped", req.obj, reason=f"operation {req.operation or '(none)'}: only CREATE is considered")
    return 200, response(req.uid, decision), decision, req


def _parsed(body: bytes) -> Request | Handled:
    try:
        return parse(body)
    except BadReview as bad:
        return 400, {"error": str(bad)}, None, None
    except EnvelopeError as wrong:  # a name of its own: mypyc types an except variable once
        return 200, response(wrong.uid, None, message=wrong.message), None, None


def handle(body: bytes, policies: PolicySet | None, namespace_of: NamespaceLookup,
           attachments: Attachments | None, config_maps: Any = None, claims: Claims | None = None) -> Handled:
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


def validate_request(req: Request, policies: PolicySet | None, namespace_of: NamespaceLookup,
                     attachments: Attachments | None, runtimes: Any = None,
                     config_maps: Any = None, claims: Claims | None = None) -> tuple[Decision | None, str | None]:
    """(decision, deny message) for /validate: the final-state guard for a pod, the template
    check for a workload, (None, None) for anything else. `runtimes` looks up Kubeflow Trainer
    runtimes for TrainJobs (webhook.kinds.trainer.Runtimes; None: not tracked)."""
    from webhook.kinds import workloads
    from webhook.kinds.verdict import check_workload

    if _is_pod(req):
        return check_final(req.obj, _namespace(req, namespace_of), policies, attachments, req.operation, config_maps,
                           claims), None
    obj = req.obj if isinstance(req.obj, dict) else {}
    group = req.group if req.kind else workloads.group_of(obj.get("apiVersion"))
    kind = req.kind or str(obj.get("kind") or "")
    if group == "" and kind == "List" and isinstance(obj.get("items"), list) and not req.sub_resource:
        return _validate_list(req, obj["items"], policies, namespace_of, attachments, runtimes, config_maps, claims)
    if not workloads.is_workload(group, kind) or req.sub_resource:
        return None, None
    verdict = check_workload(req.obj, group, kind, _namespace(req, namespace_of), policies, attachments, runtimes,
                             config_maps=config_maps, claims=claims)
    # A validating webhook never patches: a workload whose pods will be mutated is allowed as is,
    # with the summary of what they will get among its warnings.
    outcome, reason = verdict.outcome, "" if verdict.results else (
        verdict.unresolved[0] if verdict.unresolved else "no template carries the pod opt-in label")
    if outcome == MUTATED:
        outcome, reason = "unchanged", "pods will be mutated"
    decision = Decision(outcome, req.obj, verdict.policy, verdict.denials(), verdict.warnings(), reason=reason,
                        templates=verdict.results)
    return decision, (verdict.message() if not verdict.allowed else None)


def _validate_list(req: Request, items: list[Any], policies: PolicySet | None, namespace_of: NamespaceLookup,
                   attachments: Attachments | None, runtimes: Any, config_maps: Any,
                   claims: Claims | None = None) -> tuple[Decision | None, str | None]:
    """A `v1` List (what `kubectl get -o yaml` and `kubectl kustomize` print, sent by a caller,
    never by the API server): every workload and pod in it, judged with the ConfigMaps it holds
    (scripts run from ConfigMap volumes), one answer naming each object. A pod is judged as its
    CREATE would be: by /mutate's decision, as a workload's template is (a manifest's pod has not
    been mutated yet; a stored one is left as it is by the decision, which is idempotent)."""
    from webhook.core.subject import Finding
    from webhook.core.scripts import ConfigMapStore, is_config_map
    from webhook.kinds import workloads
    from webhook.kinds.verdict import check_workload

    store = ConfigMapStore(config_maps)
    for item in items:
        if is_config_map(item):
            store.add(item, req.namespace or "default")
    denials: list[Finding] = []
    warnings: list[str] = []
    messages: list[str] = []
    results: list[Any] = []
    policies_used: list[str] = []
    checked = False
    for item in items:
        if not isinstance(item, dict):
            continue
        group, kind = workloads.group_of(item.get("apiVersion")), str(item.get("kind") or "")
        found_meta = item.get("metadata")
        meta: dict[str, Any] = found_meta if isinstance(found_meta, dict) else {}
        ns_name = str(meta.get("namespace") or req.namespace or "")
        ns = namespace_of(ns_name) if ns_name else None
        label = f"{kind} {meta.get('name') or meta.get('generateName') or '(unnamed)'}"
        if group == "" and kind == "Pod":
            d = decide(item, ns, policies, attachments, "CREATE", store, claims)
            found, said, allowed, used = d.denials, d.warnings, d.outcome != DENIED, d.policy
        elif workloads.is_workload(group, kind):
            verdict = check_workload(item, group, kind, ns, policies, attachments, runtimes, config_maps=store, claims=claims)
            found, said, allowed, used = verdict.denials(), verdict.warnings(), verdict.allowed, verdict.policy
            results.extend(verdict.results)
        else:
            continue
        checked = True
        for f in found:
            denials.append(Finding(f.rule, f.container, f"{label}: {f.message}"))
        for w in said:
            warnings.append(f"{label}: {w}")
        if not allowed:
            messages.append(f"{label}: " + "; ".join(f.text() for f in found))
        if used and used not in policies_used:
            policies_used.append(used)
    if not checked:
        return None, None
    outcome = DENIED if messages else "unchanged"
    decision = Decision(outcome, req.obj, ",".join(policies_used) or None, denials, warnings,
                        reason="" if messages else "every object of the list passes", templates=results)
    return decision, ("rdma-webhook: " + "; ".join(messages)) if messages else None


def handle_validate(body: bytes, policies: PolicySet | None, namespace_of: NamespaceLookup,
                    attachments: Attachments | None, runtimes: Any = None, config_maps: Any = None,
                    claims: Claims | None = None) -> Handled:
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
