"""webhook/serving/worker.py in-process, with a real ServingTLS: each new connection first loads
certificate files renewed on disk into the live context (before uvloop makes its TLS session),
and the stop marks the connection class so that later connections drain. The handshakes are real
(tests/serving/test_tls.py's loopback helper)."""

from __future__ import annotations

import asyncio

import pytest

from serving.test_tls import certs, client, der, handshake, rotate
from serving.test_worker import Transport
from serving.test_worker_serve import run_worker
from uvicorn.config import Config
from uvicorn.server import ServerState

from webhook.serving import worker as uvworker
from webhook.serving.tls import ServingTLS


def test_a_new_connection_serves_the_certificate_renewed_on_disk(tmp_path):
    served_dir, fresh = tmp_path / "served", tmp_path / "fresh"
    files = certs(served_dir)
    new = certs(fresh, "fresh")
    tls = ServingTLS(files["tls.crt"], files["tls.key"])
    cls = uvworker.connection_class(tls)
    assert cls.tls is tls and issubclass(cls, uvworker.Connection)
    rotate(served_dir, fresh)
    assert handshake(tls.context, client(files["ca.crt"]))[2] != der(new["tls.crt"])  # not yet
    loop = asyncio.new_event_loop()
    try:
        config = Config(app=None, http=cls, lifespan="off", loop="asyncio")
        config.load()
        conn = cls(config=config, server_state=ServerState(), app_state={}, _loop=loop)
        conn.connection_made(Transport())
        assert handshake(tls.context, client(new["ca.crt"]))[2] == der(new["tls.crt"])
        conn.connection_lost(None)
    finally:
        loop.close()


def test_the_stop_marks_the_connection_class_so_later_connections_drain():
    cls = uvworker.connection_class(None)
    config = Config(app=None, http=cls, lifespan="off", loop="asyncio")
    config.load()
    server = uvworker._Server(config=config)
    # what startup leaves for a server with no listening socket of its own, lifespan off
    server.servers, server.lifespan = [], config.lifespan_class(config)
    assert cls.stopping is False
    asyncio.run(server.shutdown())
    assert cls.stopping is True and uvworker.Connection.stopping is False  # this worker's class only


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # uvicorn's own context from the files, replaced
def test_the_worker_serves_admissions_and_probes_over_its_live_tls_context(tmp_path, cluster):
    """`Worker._serve` in this process, with `serve`'s gunicorn settings, on a loopback socket:
    an admission (the connection's own path) and a probe (through the front and Flask, in the
    worker's application context) over the ServingTLS context, then the worker stops by itself
    after gunicorn's max_requests (2) and returns."""
    import http.client
    import json
    import ssl

    from gunicorn.config import Config as GunicornConfig

    import kube_objects as k
    from conftest import POLICIES
    from webhook.policy.store import PolicyStore
    from webhook.serving import server as serve
    from webhook.serving.app import create_app, wsgi

    files = certs(tmp_path)
    tls = ServingTLS(files["tls.crt"], files["tls.key"])
    store = PolicyStore(str(POLICIES))
    store.reload(force=True)
    cfg = GunicornConfig()
    for name, value in serve.gunicorn_options(host="127.0.0.1", port=0, workers=1, tls=tls).items():
        if name not in ("bind", "logger_class", "errorlog"):
            cfg.set(name, value)
    cfg.set("max_requests", 2)
    answers = []

    def client_side(port: int) -> None:
        ctx = ssl.create_default_context(cafile=files["ca.crt"])
        conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=20)
        try:
            pod = k.pod([k.container("trainer", command=["torchrun", "train.py"])], namespace="ib-training")
            conn.request("POST", "/mutate", body=k.body(k.admission_review(pod, uid="uid-worker")))
            r = conn.getresponse()
            answers.append((r.status, json.loads(r.read())["response"]["allowed"]))
            conn.request("GET", "/healthz")
            r = conn.getresponse()
            answers.append((r.status, json.loads(r.read())))
            answers.append(conn.sock.getpeercert(binary_form=True) == der(files["tls.crt"]))
        finally:
            conn.close()

    worker, listener = run_worker(cfg, wsgi(create_app(store, cluster)), client_side)
    listener.close()
    assert answers == [(200, True), (200, {"status": "ok"}), True]
    assert worker.config.http.tls is tls and set(worker.config.http.direct) == {b"/mutate", b"/validate"}
    assert worker.config.ssl is tls.context and worker.config.timeout_graceful_shutdown == 18
