"""webhook/serving/worker.py in-process, with a real ServingTLS: each new connection first loads
certificate files renewed on disk into the live context (before uvloop makes its TLS session),
and the stop marks the connection class so that later connections drain. The handshakes are real
(tests/serving/test_tls.py's loopback helper)."""

from __future__ import annotations

import asyncio

from serving.test_tls import certs, client, der, handshake, rotate
from serving.test_worker import Transport
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
