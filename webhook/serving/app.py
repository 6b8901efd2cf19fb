"""The HTTP adapter: Flask routes around the decision.

    POST /mutate    AdmissionReview in, AdmissionReview out (decision -> JSON patch)
    POST /validate  final-state guard for pods, apply-time check of workloads' pod templates
    GET  /healthz   the process is alive
    GET  /readyz    policies loaded and the cluster state synced (503 until then)
    GET  /metrics   Prometheus exposition

Nothing here decides anything; it reads the body (bounded), asks `webhook.admission.review`, and records
the metrics and one JSON log line per admission (`webhook.serving.batch`). No request may end in a 500: an unexpected
error while deciding is answered with a deny that says so, and logged with its traceback.

The two admission routes are one function of the body (`Admissions.answer`), which Flask's
routes call and which `webhook.serving.asgi.Front` calls directly for a POST to /mutate or
/validate: Flask's request cycle (the request and response objects, the contexts, routing,
the response's headers) cost about a third of the instructions of an admission through the
server (benchmarks/README.md, "The admission path without Flask's request cycle"), and an
admission needs none of it. Everything else (the probes, /metrics, wrong methods, unknown
paths, errors) still goes through Flask.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from flask import Flask, Response, request
from flask.sessions import NullSession, SessionInterface
from werkzeug.exceptions import HTTPException
from werkzeug.routing import MapAdapter

from webhook.telemetry import metrics
from webhook.admission import review
from webhook.serving.batch import Batch
from webhook.cluster.state import ClusterState
from webhook.core.decision import pod_name
from webhook.policy.store import PolicyStore

MAX_BODY = 3 * 1024 * 1024  # etcd stores objects up to 1.5 MiB; a review carries one object

log = logging.getLogger("rdma_webhook.admission")

_JSON = "application/json"


def _json(doc: Any, status: int = 200) -> Response:
    metrics.child(metrics.RESPONSES, str(status)).inc()
    return _response(doc, status)


def _response(doc: Any, status: int) -> Response:
    # direct_passthrough: the body is one bytes object, handed to the server as it is (werkzeug
    # would otherwise wrap it in an encoding generator and a closing iterator)
    return Response(orjson.dumps(doc), status=status, content_type=_JSON, direct_passthrough=True)


class _NoSessions(SessionInterface):
    """The webhook keeps no session: every request gets the one shared, read-only NullSession,
    where Flask's default cookie interface would look for a secret key and build a new one."""

    _none = NullSession()

    def open_session(self, app: Flask, request: Any) -> NullSession:
        return self._none

    def save_session(self, app: Flask, session: Any, response: Any) -> None:
        pass


class WebhookFlask(Flask):
    """Flask, through two of its documented extension points, without the per-request work a
    webhook has no use for (measured with callgrind over the request mix: 54K of the ~430K
    instructions Flask's request cycle costs per request, benchmarks/README.md):

    - sessions: `_NoSessions` (no cookie, no secret key, no session object per request);
    - the URL adapter: bound from the WSGI environ as it is. Flask's default also normalises the
      Host header (lower case, IDNA through Python's codec, a trusted-hosts check), which only
      matters for host or subdomain matching and for absolute redirect URLs; this app has five
      fixed routes on one host and never redirects, and the Host header is left to the server.
    """

    session_interface = _NoSessions()

    def create_url_adapter(self, request: Any) -> MapAdapter | None:
        if request is None:
            return super().create_url_adapter(None)
        env = request.environ
        path = env.get("PATH_INFO") or "/"
        if not path.isascii():  # PEP 3333 strings carry bytes as latin-1; the rules are UTF-8
            path = path.encode("latin-1", "replace").decode("utf-8", "replace")
        return MapAdapter(
            self.url_map,
            env.get("HTTP_HOST") or env.get("SERVER_NAME", ""),
            env.get("SCRIPT_NAME") or "/",
            self.url_map.default_subdomain or "",
            env.get("wsgi.url_scheme", "https"),
            path,
            env.get("REQUEST_METHOD", "GET"),
            env.get("QUERY_STRING", ""),
        )


def claims_of(cluster: Any) -> Any:
    """The cluster's DRA lookups (webhook.core.claims.Claims), None when it does not track them."""
    lookup = getattr(cluster, "claims", None)
    return lookup() if lookup is not None else None


class Admissions:
    """/mutate and /validate as one function of the request body, with the metrics and log line
    of each admission: what Flask's routes and the ASGI front's direct path both call."""

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


def create_app(store: PolicyStore, cluster: ClusterState) -> Flask:
    app = WebhookFlask("rdma_webhook")
    admissions = app.extensions["rdma_webhook.admissions"] = Admissions(store, cluster)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

    def admit(endpoint: str) -> Response:
        # The body straight from the server's stream (werkzeug's wrapper reads it in chunks and
        # costs ~5% of an admission); chunked: one byte past the limit, to know it is over.
        length = request.content_length
        if length is None:
            body: bytes | None = request.environ["wsgi.input"].read(MAX_BODY + 1)
        elif length <= MAX_BODY:
            body = request.environ["wsgi.input"].read(length) if length else b""
        else:
            body = None  # refused unread
        status, data = admissions.answer(endpoint, body)
        return Response(data, status=status, content_type=_JSON, direct_passthrough=True)

    @app.post("/mutate")
    def mutate() -> Response:
        return admit("mutate")

    @app.post("/validate")
    def validate() -> Response:
        return admit("validate")

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        problems = []
        if store.current is None:
            problems.append("no valid policies loaded" + (f": {store.last_errors[0]}" if store.last_errors else ""))
        if not cluster.ready():
            reason = getattr(cluster, "not_ready_reason", None)
            problems.append((reason() if reason else None) or "cluster state not synced yet")
        if problems:
            return _json({"status": "not ready", "problems": problems}, 503)
        body: dict[str, Any] = {"status": "ready", "policies": sorted(store.current.by_name)}
        check = getattr(cluster, "admission_policy_check", None)
        if check is not None and check.problems:  # reported, never a reason to leave the Service
            body["warnings"] = list(check.problems)
        return _json(body)

    @app.get("/metrics")
    def metrics_page() -> Response:
        data, content_type = metrics.exposition()
        return Response(data, mimetype=content_type.split(";")[0], content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        return _json({"error": exc.description or exc.name}, exc.code or 400)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error outside admission")
        return _json({"error": "internal error"}, 503)

    return app


def wsgi(app: Flask):
    """The WSGI callable the server runs: the Flask app, its answer handed over as one bytes
    item. Every answer here is a small JSON document; a one-item list lets the server send it
    in one write with its length known (Flask's own answer is an iterator, which a WSGI server
    must iterate in Python: a fifth of a request's time on the Rust server measured in
    benchmarks/README.md)."""

    def call(environ, start_response):
        chunks = app(environ, start_response)
        try:
            return [b"".join(chunks)]
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    call.flask = app  # type: ignore[attr-defined]  # for the worker's one application context (webhook.serving.worker)
    call.admissions = app.extensions.get("rdma_webhook.admissions")  # type: ignore[attr-defined]  # for asgi.Front
    return call


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
