"""webhook/serving/worker.py's connection on a real loopback socket, served by uvicorn's own
`Server.startup` (the listener a gunicorn worker hands it) in front of the real `Front`, on an event
loop whose clock the test moves: the bounds (head size, head and body deadlines, keep-alive) are
crossed by moving the clock, never by sleeping. Every answer is read as the client reads it, bytes
off the socket, and compared whole: status line, headers and body.

The admissions are a stand-in for `Admissions` (its `PATHS` and `answer`), so that an admission the
connection answers itself and one that takes uvicorn's path through `Front` (same function) can be
compared byte for byte."""

from __future__ import annotations

import asyncio
import json
import logging
import select
import socket

import pytest
from uvicorn.config import Config

from webhook.serving import worker as uvworker
from webhook.serving.asgi import REQUEST_TIMEOUT, Front

KEEP_ALIVE = 120.0  # what serve's gunicorn options give the worker
MAX_BODY = 3 * 1024 * 1024  # Front's body limit, which the connection's own admissions take


class ClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock stands still until the test moves it (`Wire.advance`)."""

    def __init__(self):
        super().__init__()
        self.now = 1000.0

    def time(self) -> float:
        return self.now


class Admissions:
    """What `Front` and the connection take of `webhook.serving.admissions.Admissions`: the paths
    and `answer(endpoint, body) -> (status, JSON)`; the answer echoes what it was given."""

    PATHS = {"/mutate": "mutate", "/validate": "validate"}

    def __init__(self):
        self.seen: list[tuple[str, bytes]] = []
        self.status = 200
        self.fail = False

    def answer(self, endpoint: str, body: bytes) -> tuple[int, bytes]:
        if self.fail:
            raise RuntimeError("the cluster cache failed")
        self.seen.append((endpoint, body))
        return self.status, json.dumps({"endpoint": endpoint, "size": len(body)}).encode()


class Wsgi:
    """The Flask side as `Front` sees it (`webhook.serving.app.wsgi`): every other request, 200 "ok"."""

    def __init__(self):
        self.admissions = Admissions()
        self.paths: list[str] = []

    def __call__(self, environ, start_response):
        self.paths.append(environ["REQUEST_METHOD"] + " " + environ["PATH_INFO"])
        environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]


class Client:
    def __init__(self, wire: Wire):
        self.wire = wire
        self.sock = socket.create_connection(wire.address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each piece goes out at once
        self.sock.setblocking(False)
        self.got = bytearray()
        self.eof = False
        wire.settle()

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self.sock.send(view) :]
            except BlockingIOError:  # the server's buffers are full: let it read
                self.wire.settle()
        self.wire.settle()

    def _read(self) -> None:
        while not self.eof:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                return
            except ConnectionResetError:
                data = b""
            self.got += data
            self.eof = not data

    def answers(self) -> list[tuple[bytes, list[bytes], bytes]]:
        """(status line, header lines, body) of each whole answer received so far."""
        self._read()
        found, rest = [], bytes(self.got)
        while b"\r\n\r\n" in rest:
            head, _, rest = rest.partition(b"\r\n\r\n")
            status, *lines = head.split(b"\r\n")
            size = next(int(line.split(b": ")[1]) for line in lines if line.lower().startswith(b"content-length:"))
            found.append((status, lines, rest[:size]))
            rest = rest[size:]
        return found

    def closed(self) -> bool:
        """Whether the server closed the connection (everything it sent read)."""
        self._read()
        return self.eof


class Wire:
    def __init__(self):
        self.loop = ClockLoop()
        self.errors: list[dict] = []
        self.loop.set_exception_handler(lambda _, context: self.errors.append(context))
        self.wsgi = Wsgi()
        self.front = Front(self.wsgi)
        self.cls = uvworker.connection_class(None, self.front)
        # the worker's uvicorn settings (Worker.CONFIG_KWARGS) and serve's keep-alive
        self.config = Config(
            app=self.front,
            http=self.cls,
            lifespan="off",
            access_log=False,
            server_header=False,
            proxy_headers=False,
            timeout_keep_alive=KEEP_ALIVE,
        )
        self.config.load()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        self.server = uvworker._Server(config=self.config)
        self.server.lifespan = self.config.lifespan_class(self.config)
        self.run(self.server.startup(sockets=[self.listener]))
        self.run(self.server.on_tick(0))  # the default headers uvicorn's main loop sets: the date
        self.clients: list[Client] = []

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def settle(self) -> None:
        """Let the loop read everything sent to the server and answer it, without moving the clock."""
        for _ in range(10_000):
            for _ in range(30):
                self.run(asyncio.sleep(0))
            sockets = [c.transport.get_extra_info("socket") for c in self.server.server_state.connections]
            if not select.select([s.fileno() for s in sockets if s is not None and s.fileno() >= 0], [], [], 0)[0]:
                return

    def advance(self, seconds: float) -> None:
        self.loop.now += seconds
        self.settle()

    def client(self) -> Client:
        client = Client(self)
        self.clients.append(client)
        return client

    def date(self) -> bytes:
        [(name, value)] = self.server.server_state.default_headers
        assert name == b"date"
        return b"date: " + value

    def close(self) -> None:
        for client in self.clients:
            client.sock.close()
        self.settle()  # every connection_lost runs
        for server in self.server.servers:
            server.close()
        self.listener.close()
        self.settle()
        self.loop.close()


@pytest.fixture
def wire():
    wire = Wire()
    yield wire
    wire.close()
    assert wire.errors == []  # no callback of a connection raised (the loop's exception handler)


def post(path: bytes, body: bytes = b'{"request":{}}', *headers: bytes) -> bytes:
    lines = [b"POST " + path + b" HTTP/1.1", b"Host: webhook.svc:443", b"Content-Type: application/json"]
    return b"\r\n".join([*lines, b"Content-Length: %d" % len(body), *headers]) + b"\r\n\r\n" + body


def chunked(path: bytes, body: bytes) -> bytes:
    """The same admission with a chunked body: uvicorn's path, through Front."""
    head = b"POST " + path + b" HTTP/1.1\r\nHost: webhook.svc:443\r\nContent-Type: application/json\r\n"
    return head + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def json_answer(wire: Wire, status: bytes, body: bytes, close: bool = False) -> tuple[bytes, list[bytes], bytes]:
    lines = [wire.date(), b"content-type: application/json", b"content-length: %d" % len(body)]
    return status, lines + ([b"connection: close"] if close else []), body


def test_an_admission_answered_by_the_connection_is_the_answer_front_gives(wire):
    """The same admission, once answered by the connection itself and once (chunked) through
    uvicorn's cycle and Front: the same status line, headers (uvicorn's date first) and body."""
    client = wire.client()
    body = b'{"kind":"AdmissionReview","request":{"uid":"u1"}}'
    client.send(post(b"/mutate?timeout=10s", body))
    client.send(chunked(b"/mutate", body))
    expected = json_answer(wire, b"HTTP/1.1 200 OK", b'{"endpoint": "mutate", "size": %d}' % len(body))
    assert client.answers() == [expected, expected] and not client.closed()
    assert wire.wsgi.admissions.seen == [("mutate", body)] * 2 and wire.wsgi.paths == []


def test_an_admission_cut_anywhere_is_answered_once_and_whole(wire):
    """The API server's request split into two reads at every byte, on one kept-alive connection:
    each is answered once, the same, with the body it sent."""
    client = wire.client()
    body = b'{"kind":"AdmissionReview","request":{"uid":"u2"}}'
    request = post(b"/validate?timeout=10s", body)
    for cut in range(1, len(request)):
        client.send(request[:cut])
        client.send(request[cut:])
    expected = json_answer(wire, b"HTTP/1.1 200 OK", b'{"endpoint": "validate", "size": %d}' % len(body))
    assert client.answers() == [expected] * (len(request) - 1) and not client.closed()
    assert wire.wsgi.admissions.seen == [("validate", body)] * (len(request) - 1)


def test_a_413_from_the_admissions_closes_the_connection_as_front_does(wire):
    """An answer of 413 means a body may be left unread: it must not be parsed as a request."""
    wire.wsgi.admissions.status = 413
    direct, through_front = wire.client(), wire.client()
    direct.send(post(b"/validate", b"{}"))
    through_front.send(chunked(b"/validate", b"{}"))
    expected = json_answer(wire, b"HTTP/1.1 413 Request Entity Too Large", b'{"endpoint": "validate", "size": 2}', True)
    assert direct.answers() == [expected] == through_front.answers()
    assert direct.closed() and through_front.closed()


def test_an_admission_that_raises_is_logged_and_answered_as_front_does(wire, caplog):
    wire.wsgi.admissions.fail = True
    direct, through_front = wire.client(), wire.client()
    with caplog.at_level(logging.ERROR, "rdma_webhook.serve"):
        direct.send(post(b"/mutate"))
        through_front.send(chunked(b"/mutate", b"{}"))
    expected = json_answer(wire, b"HTTP/1.1 503 Service Unavailable", b'{"error":"internal error"}')
    assert direct.answers() == [expected] == through_front.answers()
    assert not direct.closed() and not through_front.closed()  # the next admission may well succeed
    direct_line, front_line = [(r.name, r.getMessage(), r.exc_info[1].args) for r in caplog.records]
    assert direct_line == front_line and front_line[2] == ("the cluster cache failed",)


def test_every_admission_counts_towards_the_workers_max_requests(wire):
    """gunicorn's max_requests is uvicorn's limit_max_requests, read from the requests counted:
    the connection's own answers count as uvicorn's do (one each)."""
    client = wire.client()
    for _ in range(3):
        client.send(post(b"/mutate"))
    client.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert len(client.answers()) == 4 and wire.wsgi.paths == ["GET /healthz"]
    assert wire.server.server_state.total_requests == 4
    wire.config.limit_max_requests, wire.config.limit_max_requests_jitter = 4, 0
    del wire.server.limit_max_requests  # uvicorn reads the limit once, at its first tick
    assert wire.run(wire.server.on_tick(1)) is True  # the worker stops now, not later


def test_a_connection_idle_after_an_admission_is_closed_after_the_keep_alive_time(wire):
    client = wire.client()
    client.send(post(b"/mutate"))
    assert len(client.answers()) == 1
    wire.advance(KEEP_ALIVE - 1)
    assert not client.closed()
    client.send(post(b"/validate"))  # a request within the time: the idle time starts again
    wire.advance(KEEP_ALIVE - 1)
    assert not client.closed() and len(client.answers()) == 2
    wire.advance(2)
    assert client.closed() and len(client.answers()) == 2  # closed without a word


TOO_SLOW = b'{"error":"request body not received in time"}'


def test_each_admissions_body_bound_counts_from_its_own_first_read(wire):
    """A body that stops arriving is cut REQUEST_TIMEOUT after the read that began it; the bound of
    an admission answered before (its body in three reads) is gone with its answer."""
    client = wire.client()
    first = post(b"/mutate", b'{"request":{"uid":"a"}}')
    for piece in (first[:-10], first[-10:-5], first[-5:]):
        client.send(piece)
        wire.advance(1)
    second = post(b"/validate", b'{"request":{"uid":"b"}}')
    wire.advance(4)
    client.send(second[:-3])
    wire.advance(REQUEST_TIMEOUT - 1)  # past every bound the first admission's reads could have left
    assert len(client.answers()) == 1 and not client.closed()
    client.send(second[-3:])
    assert len(client.answers()) == 2
    third = post(b"/mutate", b'{"request":{"uid":"c"}}')
    wire.advance(30)
    client.send(third[:-1])
    wire.advance(REQUEST_TIMEOUT - 0.5)
    assert len(client.answers()) == 2 and not client.closed()
    wire.advance(1)
    assert client.answers()[2] == json_answer(wire, b"HTTP/1.1 408 Request Timeout", TOO_SLOW, close=True)
    assert client.closed() and [e for e, _ in wire.wsgi.admissions.seen] == ["mutate", "validate"]


def test_a_slow_head_is_cut_on_every_request_of_a_connection(wire):
    """The head deadline is armed again for the next request once one head came in pieces."""
    client = wire.client()
    request = post(b"/mutate")
    client.send(request[:20])
    wire.advance(1)
    client.send(request[20:])
    assert len(client.answers()) == 1
    client.send(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
    wire.advance(REQUEST_TIMEOUT - 0.5)
    assert not client.closed()
    wire.advance(1)
    assert client.closed() and len(client.answers()) == 1  # closed without an answer


MAX_HEAD = 64 * 1024  # the README's promise: a request line and headers of up to 64 KiB are read
TOO_LARGE = b'{"error":"request line and headers over 65536 bytes"}'


def _head_of(size: int) -> bytes:
    """A request line and headers of exactly `size` bytes, without the empty line that ends them."""
    start = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nX-Fill: "
    return start + b"a" * (size - len(start) - 2) + b"\r\n"


def test_a_request_head_of_exactly_64_kib_is_read_and_one_byte_more_gets_431(wire):
    client = wire.client()
    client.send(_head_of(MAX_HEAD))  # all of it read while the head is incomplete
    assert client.answers() == [] and not client.closed()
    client.send(b"\r\n{}")
    assert [status for status, _, _ in client.answers()] == [b"HTTP/1.1 200 OK"]

    client = wire.client()
    client.send(_head_of(MAX_HEAD + 1))
    too_large = (b"HTTP/1.1 431 Request Header Fields Too Large", [], TOO_LARGE)
    lines = [b"content-type: application/json", b"content-length: %d" % len(TOO_LARGE), b"connection: close"]
    assert client.answers() == [(too_large[0], lines, TOO_LARGE)] and client.closed()
    assert wire.wsgi.admissions.seen == [("mutate", b"{}")]


def test_a_body_far_over_64_kib_is_not_counted_as_head(wire):
    """The head limit counts the head only: a 1 MiB body (within Front's 3 MiB) sent after it is read."""
    client = wire.client()
    body = b'{"request":{"object":{"data":"' + b"x" * (1 << 20) + b'"}}}'
    request = post(b"/other", body)
    head_end = request.index(b"\r\n\r\n") + 4
    client.send(request[:head_end])
    for i in range(head_end, len(request), 256 * 1024):
        client.send(request[i : i + 256 * 1024])
    assert [status for status, _, _ in client.answers()] == [b"HTTP/1.1 200 OK"] and not client.closed()
    assert wire.wsgi.paths == ["POST /other"]


def test_a_request_with_both_content_length_and_transfer_encoding_is_refused_with_400(wire):
    """Request smuggling's classic shape (RFC 9112 6.1): refused by the parser before any route."""
    client = wire.client()
    client.send(
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    )
    [(status, lines, _)] = client.answers()
    assert status == b"HTTP/1.1 400 Bad Request" and b"connection: close" in lines and client.closed()
    assert wire.wsgi.admissions.seen == [] and wire.wsgi.paths == []


def test_the_stop_lets_a_request_in_flight_finish_then_closes_its_connection(wire):
    """`_Server.shutdown` while the app still answers a request: the listener closes at once, the
    answer goes out whole with `connection: close`, and the connection is closed after it."""
    release = asyncio.Event()
    front = wire.config.app

    async def slow_app(scope, receive, send):
        await release.wait()
        await front(scope, receive, send)

    wire.config.app = wire.config.loaded_app = slow_app
    client = wire.client()
    client.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    stop = wire.loop.create_task(wire.server.shutdown(sockets=[wire.listener]))
    wire.advance(0.2)
    assert wire.cls.stopping and wire.listener.fileno() == -1  # no new connection is taken
    assert client.answers() == [] and not client.closed()
    release.set()
    wire.settle()
    [(status, lines, body)] = client.answers()
    assert (status, body) == (b"HTTP/1.1 200 OK", b"ok") and lines[-1] == b"connection: close" and client.closed()
    for _ in range(10):
        wire.advance(0.1)
    assert stop.done() and stop.exception() is None
