"""Admissions answered by webhook/serving/worker.py's connection itself, without uvicorn's ASGI
cycle (issue 29, the served path): which requests take that path, what they are answered, and
that every other request still reaches the app as before. Driven on an event loop with the fake
transport of test_worker.py; over real TLS the same path serves every admission of
test_server.py and test_server_hostile.py."""

from __future__ import annotations

import json

import pytest
from serving.test_worker import Transport, ok_app, run_until, settle
from serving.test_worker import connect as base_connect
from webhook.serving import worker as uvworker
from webhook.serving.asgi import Front

MAX_BODY = 64


class Answers:
    """What `Admissions.answer` is to the connection: (status, JSON) for (endpoint, body)."""

    def __init__(self, fail: bool = False):
        self.seen: list[tuple[str, bytes]] = []
        self.fail = fail

    def __call__(self, endpoint: str, body: bytes) -> tuple[int, bytes]:
        if self.fail:
            raise RuntimeError("boom")
        self.seen.append((endpoint, body))
        return 200, json.dumps({"endpoint": endpoint, "size": len(body)}).encode()


class _Front:
    """What `connection_class` reads of a `Front`: its direct routes and its body limit."""

    def __init__(self, answers: Answers):
        self.direct = {"/mutate": ("mutate", answers), "/validate": ("validate", answers)}
        self.max_body = MAX_BODY


def connect(loop, answers: Answers, stopping: bool = False):
    """test_uvworker's connection with `answers` as the admissions: (class, connection,
    transport, the requests the ASGI app was called for)."""
    app_calls: list[str] = []

    async def app(scope, receive, send):
        app_calls.append(f"{scope['method']} {scope['path']}")
        await ok_app(scope, receive, send)

    cls, conn, transport = base_connect(loop, stopping=stopping, app=app, front=_Front(answers))
    return cls, conn, transport, app_calls


def post(path: bytes, body: bytes = b'{"a":1}', *headers: bytes, version: bytes = b"1.1") -> bytes:
    lines = [
        b"POST " + path + b" HTTP/" + version,
        b"Host: x",
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(body),
        *headers,
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def responses(out: bytes) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    """(status line, headers, body) of each response written, in order."""
    found = []
    rest = bytes(out)
    while rest:
        head, _, rest = rest.partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        headers = {k.lower(): v for k, v in (line.split(b": ", 1) for line in lines)}
        size = int(headers[b"content-length"])
        found.append((status, headers, rest[:size]))
        rest = rest[size:]
    return found


@pytest.fixture
def loop():
    import asyncio

    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_an_admission_is_answered_by_the_admission_function_in_one_write_and_kept_alive(loop):
    answers = Answers()
    _, conn, transport, app_calls = connect(loop, answers)
    writes = []
    transport.write = lambda data: writes.append(bytes(data)) or Transport.write(transport, data)
    conn.data_received(post(b"/mutate?timeout=10s", b'{"request":{}}'))  # the API server's own query
    assert answers.seen == [("mutate", b'{"request":{}}')] and app_calls == []
    assert len(writes) == 1  # answered inside the read, one write: no task, no later loop pass
    [(status, headers, body)] = responses(transport.out)
    assert status == b"HTTP/1.1 200 OK" and headers[b"content-type"] == b"application/json"
    assert json.loads(body) == {"endpoint": "mutate", "size": 14}
    assert b"connection" not in headers and not transport.closed
    conn.data_received(post(b"/validate"))  # the same connection serves the next one
    assert [e for e, _ in answers.seen] == ["mutate", "validate"] and len(responses(transport.out)) == 2


def test_pipelined_admissions_and_a_body_split_over_reads_are_answered_in_order(loop):
    answers = Answers()
    _, conn, transport, _ = connect(loop, answers)
    first, second = post(b"/mutate", b'{"n":1}'), post(b"/validate", b'{"n":22}')
    conn.data_received(first + second[:-3])  # the second's body not complete yet
    assert [e for e, _ in answers.seen] == ["mutate"]
    conn.data_received(second[-3:])
    assert answers.seen == [("mutate", b'{"n":1}'), ("validate", b'{"n":22}')]
    assert [json.loads(b)["endpoint"] for _, _, b in responses(transport.out)] == ["mutate", "validate"]


def test_a_body_that_stops_arriving_gets_408_and_the_connection_closed(loop, monkeypatch):
    monkeypatch.setattr(uvworker, "REQUEST_TIMEOUT", 0.05)
    answers = Answers()
    _, conn, transport, _ = connect(loop, answers)
    conn.data_received(post(b"/mutate", b'{"request":{}}')[:-4])
    assert transport.out == b"" and not transport.closed  # the loop has not run: the bound is armed, not passed
    run_until(loop, lambda: transport.closed)
    [(status, headers, body)] = responses(transport.out)
    assert status.startswith(b"HTTP/1.1 408 ") and headers[b"connection"] == b"close"
    assert json.loads(body) == {"error": "request body not received in time"} and answers.seen == []


def test_a_body_completed_within_the_bound_is_not_cut_later(loop, monkeypatch):
    monkeypatch.setattr(uvworker, "REQUEST_TIMEOUT", 0.05)
    answers = Answers()
    _, conn, transport, _ = connect(loop, answers)
    request = post(b"/mutate")
    conn.data_received(request[:-2])
    conn.data_received(request[-2:])
    settle(loop, 0.2)  # past the bound: the timer was cancelled with the answer
    assert len(responses(transport.out)) == 1 and not transport.closed


@pytest.mark.parametrize("extra, version", [((b"Connection: close",), b"1.1")])
def test_a_client_that_closes_gets_connection_close(loop, extra, version):
    _, conn, transport, _ = connect(loop, Answers())
    conn.data_received(post(b"/mutate", b"{}", *extra, version=version))
    [(_, headers, _)] = responses(transport.out)
    assert headers[b"connection"] == b"close" and transport.closed


def test_during_the_stop_an_admission_is_answered_with_close_even_one_being_read(loop):
    cls, conn, transport, _ = connect(loop, Answers())
    request = post(b"/mutate")
    conn.data_received(request[:-2])
    cls.stopping = True
    conn.shutdown()  # the body is on its way: not closed under it
    assert not transport.closed
    conn.data_received(request[-2:])
    [(status, headers, _)] = responses(transport.out)
    assert status == b"HTTP/1.1 200 OK" and headers[b"connection"] == b"close" and transport.closed


def test_an_answer_that_raises_is_a_503_not_a_lost_connection(loop):
    _, conn, transport, _ = connect(loop, Answers(fail=True))
    conn.data_received(post(b"/mutate"))
    [(status, _, body)] = responses(transport.out)
    assert status.startswith(b"HTTP/1.1 503 ") and json.loads(body) == {"error": "internal error"}
    assert not transport.closed


@pytest.mark.parametrize(
    "request_bytes, reason",
    [
        (b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "chunked"),
        (post(b"/mutate", b"{}", b"Expect: 100-continue"), "expects 100-continue"),
        (post(b"/mutate", b"{}", version=b"1.0"), "HTTP/1.0"),
        (post(b"/mutate", b"x" * (MAX_BODY + 1)), "declared over the body limit"),
        # what `curl --http2` sends over cleartext: once upgraded, the bytes after the head are not HTTP/1.1
        (
            post(
                b"/mutate", b"{}", b"Connection: Upgrade, HTTP2-Settings", b"Upgrade: h2c", b"HTTP2-Settings: AAMAAABk"
            ),
            "asks for an upgrade",
        ),
        (b"POST /mutate HTTP/1.1\r\nHost: x\r\n\r\n", "no Content-Length"),
        (b"GET /mutate HTTP/1.1\r\nHost: x\r\n\r\n", "not a POST"),
        (post(b"/healthz"), "another path"),
        (post(b"/mutatex"), "a longer path"),
    ],
)
def test_every_other_request_takes_the_asgi_path(loop, request_bytes, reason):
    answers = Answers()
    _, conn, transport, app_calls = connect(loop, answers)
    conn.data_received(request_bytes)
    run_until(loop, lambda: b"\r\n\r\nok" in transport.out)
    assert answers.seen == [] and len(app_calls) == 1, reason


def test_a_body_of_exactly_the_limit_is_answered_by_the_connection(loop):
    answers = Answers()
    _, conn, transport, app_calls = connect(loop, answers)
    conn.data_received(post(b"/validate", b"x" * MAX_BODY))
    assert answers.seen == [("validate", b"x" * MAX_BODY)] and app_calls == []
    [(status, _, body)] = responses(transport.out)
    assert status == b"HTTP/1.1 200 OK" and json.loads(body) == {"endpoint": "validate", "size": MAX_BODY}


def test_an_admission_behind_one_the_app_still_answers_waits_its_turn(loop):
    """A request pipelined behind one the ASGI app is answering is not answered before it."""
    answers = Answers()
    _, conn, transport, app_calls = connect(loop, answers)
    conn.data_received(post(b"/healthz") + post(b"/mutate"))
    run_until(loop, lambda: transport.out.count(b"HTTP/1.1 200 OK") == 2)
    assert app_calls == ["POST /healthz", "POST /mutate"] and answers.seen == []  # both by the app, in order


def test_without_a_front_every_request_takes_the_asgi_path(loop):
    assert uvworker.connection_class(None).direct == {}
    front = Front(lambda environ, start_response: [b""])  # no admissions: nothing direct
    assert uvworker.connection_class(None, front).direct == {}
