"""webhook/serving/worker.py's connection, driven on an event loop with a fake transport: the bounds
and the gentle stop it adds to uvicorn's protocol. Over real TLS the same code serves every test
in test_server.py, test_server_hostile.py and test_server_soak.py; here the timers are shortened so that the
cases that take 120 s in production (an idle connection) take milliseconds."""

from __future__ import annotations

import asyncio

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from webhook.serving import worker as uvworker
from webhook.serving.asgi import BODY_COMPLETE

REQUEST = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class Transport:
    def __init__(self):
        self.out = bytearray()
        self.closed = False

    def write(self, data):
        assert not self.closed, "write after close"
        self.out += data

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 8443), "peername": ("10.0.0.9", 50000)}.get(name, default)

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


async def ok_app(scope, receive, send):
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def connect(loop, keep_alive=75.0, stopping=False, app=ok_app, front=None):
    """A worker connection on `loop` over a fake transport; `front`: what the worker's `Front`
    gives the connection (the admissions it answers itself), None for none."""
    cls = uvworker.connection_class(None, front) if front is not None else uvworker.connection_class(None)
    cls.stopping = stopping
    config = Config(app=app, http=cls, lifespan="off", loop="asyncio", timeout_keep_alive=keep_alive)
    config.load()
    conn = cls(config=config, server_state=ServerState(), app_state={}, _loop=loop)
    transport = Transport()
    conn.connection_made(transport)
    return cls, conn, transport


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def settle(loop, seconds):
    loop.run_until_complete(asyncio.sleep(seconds))


def test_a_connection_that_never_sends_a_request_is_closed_after_the_keep_alive_time(loop):
    _, _, transport = connect(loop, keep_alive=0.05)
    settle(loop, 0.2)
    assert transport.closed and transport.out == b""


def test_a_request_is_answered_in_one_write_and_the_connection_kept(loop):
    _, conn, transport = connect(loop)
    conn.data_received(REQUEST)
    settle(loop, 0.05)
    assert transport.out.startswith(b"HTTP/1.1 200 OK\r\n") and transport.out.endswith(b"\r\n\r\nok")
    assert b"connection: close" not in transport.out and not transport.closed


def test_a_slow_request_head_is_cut(loop, monkeypatch):
    monkeypatch.setattr(uvworker, "REQUEST_TIMEOUT", 0.05)
    _, conn, transport = connect(loop)
    conn.data_received(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
    settle(loop, 0.2)
    assert transport.closed and transport.out == b""


HEAD_LIMIT = 64 * 1024  # what the README promises: 431 for a request head over 64 KiB


def _head(loop, size: int):
    """A request head of about `size` bytes (headers of 1 KiB), then the end of the head."""
    _, conn, transport = connect(loop)
    conn.data_received(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n")
    filler = b"X-Fill: " + b"a" * 1014 + b"\r\n"
    for _ in range(size // len(filler)):
        if transport.closed:
            break
        conn.data_received(filler)
    if not transport.closed:
        conn.data_received(b"\r\n{}")
    settle(loop, 0.05)
    return transport


def test_an_oversized_request_head_gets_431(loop):
    """Sizes from the promise, not from uvworker.MAX_HEAD: raising the limit must fail this."""
    transport = _head(loop, HEAD_LIMIT + 2048)
    assert transport.closed and transport.out.startswith(b"HTTP/1.1 431 ")
    transport = _head(loop, HEAD_LIMIT - 4096)  # under the limit: served
    assert transport.out.startswith(b"HTTP/1.1 200 OK") and not transport.closed


def run_until(loop, check, limit: float = 30.0) -> None:
    """Run the loop until `check()` holds (a loaded machine may take long; the limit is a hang)."""

    async def wait():
        while not check():
            await asyncio.sleep(0.01)

    loop.run_until_complete(asyncio.wait_for(wait(), limit))


def test_stop_answers_the_next_request_with_close_and_closes_idle_connections_after_a_pause(loop, monkeypatch):
    # DRAIN_IDLE is the pause the idle connection gets; the busy connection's request must be
    # answered and closed within it, which takes milliseconds: 2 s hold on a loaded machine.
    monkeypatch.setattr(uvworker, "DRAIN_IDLE", 2.0)
    cls, busy, busy_t = connect(loop)
    _, idle, idle_t = connect(loop)
    for conn in (busy, idle):
        conn.data_received(REQUEST)
    run_until(loop, lambda: busy_t.out.count(b"HTTP/1.1 200 OK") == 1 and idle_t.out.count(b"HTTP/1.1 200 OK") == 1)
    cls.stopping = True  # what _Server.shutdown does before uvicorn calls shutdown() on each
    stopped = loop.time()
    for conn in (busy, idle):
        conn.shutdown()
    assert not busy_t.closed and not idle_t.closed  # not at once: a request may be on its way
    busy.data_received(REQUEST)  # it was: answered, with Connection: close, then closed
    run_until(loop, lambda: busy_t.closed)
    assert busy_t.out.count(b"HTTP/1.1 200 OK") == 2 and busy_t.out.rstrip(b"ok").endswith(b"connection: close\r\n\r\n")
    if loop.time() - stopped < uvworker.DRAIN_IDLE:  # else the machine stalled past the pause: nothing to tell
        assert not idle_t.closed
    run_until(loop, lambda: idle_t.closed)
    assert loop.time() - stopped >= uvworker.DRAIN_IDLE - 0.01  # not before the pause
    assert idle_t.out.count(b"HTTP/1.1 200 OK") == 1


def test_a_connection_accepted_during_the_stop_is_drained_too(loop, monkeypatch):
    monkeypatch.setattr(uvworker, "DRAIN_IDLE", 0.05)
    _, _, transport = connect(loop, stopping=True)
    start = loop.time()
    run_until(loop, lambda: transport.closed)
    assert loop.time() - start >= 0.04


def test_the_scope_says_whether_the_body_was_complete_before_the_app_ran(loop):
    seen = []

    async def app(scope, receive, send):
        seen.append(scope.get(BODY_COMPLETE, False))
        await ok_app(scope, receive, send)

    _, conn, transport = connect(loop, app=app)
    conn.data_received(REQUEST)  # head and body in one read: Front needs no deadline
    settle(loop, 0.05)
    head, body = REQUEST[:-1], REQUEST[-1:]
    conn.data_received(head)  # the body's last byte still missing when the app starts
    settle(loop, 0.05)
    conn.data_received(body)
    settle(loop, 0.05)
    assert seen == [True, False] and transport.out.count(b"HTTP/1.1 200 OK") == 2


_PROBE = """
import sys

import flask

from webhook.serving import server as serve
from webhook.serving.app import wsgi
from webhook.serving.tls import ServingTLS

app = flask.Flask("probe")


@app.get("/probe")
def probe():
    flask.g.n = flask.g.get("n", 0) + 1
    return str(flask.g.n)


tls = ServingTLS(sys.argv[2], sys.argv[3])
serve._Server(wsgi(app), serve.gunicorn_options(host="127.0.0.1", port=int(sys.argv[1]), workers=1, tls=tls)).run()
"""


def test_the_worker_serves_every_request_in_one_application_context(tmp_path):
    """Over TLS through gunicorn and uvloop: the application context the worker pushes before its
    server starts is the one each request's task sees (a per-request context would start `g`
    empty every time)."""
    import http.client
    import ssl
    import subprocess
    import sys
    import time

    from conftest import ROOT, free_port
    from webhook.serving.certs import write_certs

    write_certs(tmp_path, "probe", "probe", dns=["localhost"], ips=["127.0.0.1"])
    (tmp_path / "probe.py").write_text(_PROBE)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "probe.py"), str(port), str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")],
        cwd=str(ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    try:
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=5)
            try:
                for _ in range(2 if seen else 1):  # a kept-alive connection and fresh ones
                    conn.request("GET", "/probe")
                    seen.append(conn.getresponse().read().decode())
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.1)
            finally:
                conn.close()
        assert seen == ["1", "2", "3"]
    finally:
        proc.terminate()
        proc.wait(30)


# The API server's webhook client keeps an idle connection for 90 s (net/http's Transport
# IdleConnTimeout in k8s.io/apiserver's webhook client). A server that closes it first races a
# request the API server just sent on it; the API server does not resend a POST, and the
# admission fails (a rejected pod under failurePolicy Fail).
API_SERVER_IDLE_S = 90


def test_idle_connections_outlive_the_api_servers_own_idle_timeout():
    from gunicorn.config import Config as GunicornConfig
    from gunicorn.glogging import Logger

    from webhook.serving.server import gunicorn_options

    tls = type("T", (), {"cert_file": None, "key_file": None})()
    cfg = GunicornConfig()
    for key, value in gunicorn_options(host="127.0.0.1", port=1, workers=1, tls=tls).items():
        cfg.set(key, value)
    worker = uvworker.Worker(0, 0, [], None, 30, cfg, Logger(cfg))
    assert worker.config.timeout_keep_alive > API_SERVER_IDLE_S
