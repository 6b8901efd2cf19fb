"""The HTTP routes that are not admissions, on Flask:

    GET  /healthz   the process is alive
    GET  /readyz    policies loaded and the cluster state synced (503 until then)
    GET  /metrics   Prometheus exposition

plus JSON answers for unknown paths and errors. The admissions, POST /mutate and /validate, never
come here: the ASGI front (`webhook.serving.asgi.Front`) hands them to
`webhook.serving.admissions.Admissions`, which `create_app` builds beside the Flask app and `wsgi`
carries to the front, and answers a wrong method on those paths itself.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from flask import Flask, Response
from flask.sessions import NullSession, SessionInterface
from werkzeug.exceptions import HTTPException
from werkzeug.routing import MapAdapter

from webhook.cluster.state import ClusterState
from webhook.policy.store import PolicyStore
from webhook.serving.admissions import Admissions
from webhook.telemetry import metrics

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


def create_app(store: PolicyStore, cluster: ClusterState) -> Flask:
    """The Flask app of the probes and /metrics, with the admissions of the same policies and
    cluster state in its extensions (`wsgi` hands them to the front)."""
    app = WebhookFlask("rdma_webhook", static_folder=None)  # no files are served
    app.extensions["rdma_webhook.admissions"] = Admissions(store, cluster)

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
