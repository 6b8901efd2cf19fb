"""`Worker._serve` of webhook/serving/worker.py in this process, without TLS (gunicorn without
certfile), on a loopback socket: the one application context the worker pushes before its server
starts is the one every request sees, a WSGI callable without a Flask app is served too, uvicorn's
limit for a stop follows gunicorn's graceful_timeout, and the listening socket is closed when the
worker stops. (Over TLS, with serve's own settings: test_worker_tls.py; through gunicorn's arbiter
in a process of its own: test_worker.py.)"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable

import flask
from gunicorn.config import Config as GunicornConfig
from gunicorn.glogging import Logger

from webhook.serving import worker as uvworker
from webhook.serving.app import wsgi


def run_worker(cfg: GunicornConfig, app, client_side: Callable[[int], None]) -> tuple[uvworker.Worker, socket.socket]:
    """Run a worker for `app` with `cfg` on a loopback listener, in this process, until it stops by
    itself (gunicorn's max_requests), while `client_side(port)` runs in a thread: the worker (its
    heartbeat file closed) and the listener, as the worker left it."""
    listener = socket.create_server(("127.0.0.1", 0))
    worker = uvworker.Worker(0, 0, [listener], None, 30, cfg, Logger(cfg))
    worker.wsgi = app
    th = threading.Thread(target=client_side, args=(listener.getsockname()[1],), daemon=True)
    th.start()
    try:
        worker.run()
    finally:
        th.join(20)
        worker.tmp.close()
    return worker, listener


def serve(app, connections: list[int], graceful_timeout: int = 20):
    """Run a worker for `app` until gunicorn's max_requests stops it, while a client sends GET
    /probe on each connection as many times as `connections` says: (the bodies, the worker, whether
    the listening socket was closed when the worker returned)."""
    cfg = GunicornConfig()
    cfg.set("max_requests", sum(connections))
    cfg.set("graceful_timeout", graceful_timeout)
    seen: list[str] = []

    def client_side(port: int) -> None:
        for requests in connections:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            try:
                for _ in range(requests):
                    conn.request("GET", "/probe")
                    seen.append(conn.getresponse().read().decode())
            finally:
                conn.close()

    worker, listener = run_worker(cfg, app, client_side)
    listener_closed = listener.fileno() == -1
    listener.close()
    return seen, worker, listener_closed


def test_a_plain_http_worker_serves_every_request_in_its_one_application_context():
    app = flask.Flask("probe")

    @app.get("/probe")
    def probe():
        flask.g.n = flask.g.get("n", 0) + 1  # a per-request context would start `g` empty each time
        return str(flask.g.n)

    seen, worker, listener_closed = serve(wsgi(app), [2, 1], graceful_timeout=3)  # a kept-alive connection, a fresh one
    assert seen == ["1", "2", "3"]
    assert listener_closed  # the worker's copy of the listening socket goes with it
    assert worker.config.ssl is None and worker.config.http.tls is None
    assert worker.config.timeout_graceful_shutdown == 1  # never 0 (no time at all) for a short graceful_timeout


def test_a_worker_serves_a_wsgi_callable_that_has_no_flask_app():
    def hello(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return [b"hello"]

    seen, worker, _ = serve(hello, [1])
    assert seen == ["hello"] and worker.config.http.direct == {}  # no admissions: none answered by the connection
