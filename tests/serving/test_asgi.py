"""webhook/serving/asgi.py, the ASGI front uvicorn serves, driven the way uvicorn drives it: a scope, a
`receive` that hands out the body in messages and a `send` that collects the answer. The front
over real TLS is tested in test_server.py and test_server_hostile.py."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from webhook.serving import asgi
from webhook.serving.asgi import BODY_COMPLETE, Front


def scope(method="POST", path="/mutate", query=b"", headers=()):
    return {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "path": path,
        "query_string": query,
        "scheme": "https",
        "server": ("127.0.0.1", 8443),
        "client": ("10.0.0.9", 51234),
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }


def drive(front, sc, messages, pause_after=None):
    """Run the front; `messages` are what receive returns in turn; after them receive waits
    forever (a client that stopped sending)."""
    sent = []
    queue = list(messages)

    async def receive():
        if queue:
            return queue.pop(0)
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    asyncio.run(front(sc, receive, send))
    return sent


def answer(sent):
    start, body = sent
    assert start["type"] == "http.response.start" and body["type"] == "http.response.body"
    return start["status"], dict(start["headers"]), body["body"]


def echo_app(seen):
    def app(environ, start_response):
        seen.append(environ)
        body = environ["wsgi.input"].read()
        status = "413 Request Entity Too Large" if body == b"big" else "200 OK"
        start_response(status, [("Content-Type", "application/json"), ("X-Len", str(len(body)))])
        return [json.dumps({"got": body.decode()}).encode()]

    return app


def test_body_in_pieces_reaches_the_app_as_one_wsgi_request():
    seen = []
    sent = drive(
        Front(echo_app(seen)),
        scope(
            query=b"timeout=10s",
            headers=[("content-type", "application/json"), ("x-forwarded-for", "a"), ("x-forwarded-for", "b")],
        ),
        [
            {"type": "http.request", "body": b'{"a":', "more_body": True},
            {"type": "http.request", "body": b"", "more_body": True},
            {"type": "http.request", "body": b"1}", "more_body": False},
        ],
    )
    status, headers, body = answer(sent)
    assert status == 200 and json.loads(body) == {"got": '{"a":1}'}
    assert headers[b"content-type"] == b"application/json" and headers[b"x-len"] == b"7"
    assert b"connection" not in headers
    env = seen[0]
    assert (env["REQUEST_METHOD"], env["PATH_INFO"], env["QUERY_STRING"]) == ("POST", "/mutate", "timeout=10s")
    assert env["CONTENT_TYPE"] == "application/json" and env["CONTENT_LENGTH"] == "7"
    assert env["HTTP_X_FORWARDED_FOR"] == "a,b" and env["REMOTE_ADDR"] == "10.0.0.9"
    assert (env["SERVER_NAME"], env["SERVER_PORT"], env["wsgi.url_scheme"]) == ("127.0.0.1", "8443", "https")


def test_declared_length_over_the_limit_is_refused_unread():
    seen = []
    sent = drive(Front(echo_app(seen), max_body=10), scope(headers=[("content-length", "11")]), [])
    status, headers, body = answer(sent)
    assert status == 413 and headers[b"connection"] == b"close" and b"over 10 bytes" in body and not seen


def test_chunked_body_over_the_limit_is_refused_as_it_arrives():
    seen = []
    sent = drive(
        Front(echo_app(seen), max_body=10),
        scope(headers=[("transfer-encoding", "chunked")]),
        [
            {"type": "http.request", "body": b"x" * 6, "more_body": True},
            {"type": "http.request", "body": b"x" * 6, "more_body": True},
        ],
    )  # then silence
    status, headers, _ = answer(sent)
    assert status == 413 and headers[b"connection"] == b"close" and not seen


def test_a_body_that_stops_arriving_gets_408():
    seen = []
    sent = drive(
        Front(echo_app(seen), timeout=0.2),
        scope(headers=[("content-length", "100")]),
        [{"type": "http.request", "body": b"x", "more_body": True}],
    )
    status, headers, body = answer(sent)
    assert status == 408 and headers[b"connection"] == b"close" and b"not received in time" in body and not seen


def test_a_client_that_disconnects_is_not_answered():
    seen = []
    sent = drive(
        Front(echo_app(seen)),
        scope(),
        [{"type": "http.request", "body": b"x", "more_body": True}, {"type": "http.disconnect"}],
    )
    assert sent == [] and not seen


def test_a_413_from_the_app_closes_the_connection():
    sent = drive(Front(echo_app([])), scope(), [{"type": "http.request", "body": b"big", "more_body": False}])
    status, headers, _ = answer(sent)
    assert status == 413 and headers[b"connection"] == b"close"


def test_other_scopes_are_ignored():
    sent = []

    async def never():
        raise AssertionError("receive called")

    async def send(message):
        sent.append(message)

    asyncio.run(Front(echo_app([]))({"type": "lifespan"}, never, send))
    assert sent == []


def test_the_body_deadline_is_armed_only_when_the_body_may_still_be_on_its_way(monkeypatch):
    armed = []
    real = asyncio.timeout

    def timeout(delay):
        armed.append(delay)
        return real(delay)

    monkeypatch.setattr(asgi.asyncio, "timeout", timeout)
    body = [{"type": "http.request", "body": b"{}", "more_body": False}]
    for complete in (True, False):
        sc = scope(headers=[("content-length", "2")])
        if complete:
            sc[BODY_COMPLETE] = True
        seen = []
        assert answer(drive(Front(echo_app(seen), timeout=7.0), sc, list(body)))[0] == 200
    assert armed == [7.0]  # only for the scope without the mark


# -- the admissions taken without Flask -------------------------------------------------------------


def _front_and_flask(cluster):
    from conftest import POLICIES
    from webhook.policy.store import PolicyStore
    from webhook.serving.app import create_app, wsgi

    store = PolicyStore(str(POLICIES))
    store.reload(force=True)
    app = wsgi(create_app(store, cluster))
    return Front(app), app


def _bodies():
    import kube_objects as k

    good = json.dumps(k.admission_review(k.pytorchjob_worker())).encode()
    return {
        "good": good,
        "empty": b"",
        "not json": b"{not json",
        "not a review": b'{"kind": "Pod"}',
        "no uid": json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}).encode(),
        "list": b"[1, 2]",
    }


def test_admissions_skip_flask_and_answer_exactly_what_admissions_answer(cluster):
    """A POST to /mutate or /validate goes straight to Admissions.answer (the WSGI app is never
    called): the answer is the one `Admissions.answer` gives for the same body, bad bodies included."""
    from webhook.serving.admissions import Admissions

    front, app = _front_and_flask(cluster)
    direct = app.admissions
    assert isinstance(direct, Admissions)
    calls = []
    front.app = lambda environ, start_response: calls.append(environ) or app(environ, start_response)
    for path, endpoint in (("/mutate", "mutate"), ("/validate", "validate")):
        for what, body in _bodies().items():
            status, headers, data = answer(
                drive(
                    front,
                    scope(path=path, headers=[("content-length", str(len(body)))]),
                    [{"type": "http.request", "body": body, "more_body": False}],
                )
            )
            own_status, own_data = direct.answer(endpoint, body)
            assert status == own_status, (path, what, status, own_status)
            if what == "good":  # the same decision; the uid and the patch are the same, the timing is not in the body
                assert json.loads(data) == json.loads(own_data), (path, what)
            else:
                assert data == own_data, (path, what, data, own_data)
            assert headers[b"content-type"] == b"application/json" and int(headers[b"content-length"]) == len(data)
    assert calls == []  # Flask never saw them
    # The probes still go through Flask.
    status, _, data = answer(
        drive(front, scope(method="GET", path="/healthz"), [{"type": "http.request", "body": b""}])
    )
    assert status == 200 and json.loads(data) == {"status": "ok"} and len(calls) == 1


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"])
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_another_method_on_an_admission_path_is_a_json_405_that_says_post_without_flask(cluster, method, path):
    """The admission paths are one door: the front answers a wrong method itself, with the
    `Allow` header HTTP asks of a 405; Flask has no route for them at all."""
    front, app = _front_and_flask(cluster)
    calls = []
    front.app = lambda environ, start_response: calls.append(environ) or app(environ, start_response)
    status, headers, data = answer(
        drive(front, scope(method=method, path=path), [{"type": "http.request", "body": b""}])
    )
    assert (status, headers[b"allow"], headers[b"content-type"]) == (405, b"POST", b"application/json")
    assert json.loads(data) == {"error": "an AdmissionReview is sent with POST"} and calls == []
    assert {rule.rule for rule in app.flask.url_map.iter_rules()} == {"/healthz", "/readyz", "/metrics"}


def test_an_error_outside_the_decision_on_the_direct_path_is_a_503_not_a_crash(cluster, caplog):
    front, _ = _front_and_flask(cluster)

    def broken(endpoint, body):
        raise RuntimeError("boom")

    front.direct = {"/mutate": ("mutate", broken)}
    with caplog.at_level(logging.ERROR, logger="rdma_webhook.serve"):
        status, headers, data = answer(drive(front, scope(), [{"type": "http.request", "body": b"{}"}]))
    assert status == 503 and json.loads(data) == {"error": "internal error"}
    [record] = [r for r in caplog.records if r.name == "rdma_webhook.serve"]  # the traceback is logged
    assert record.getMessage() == "unexpected error outside admission" and record.exc_info[0] is RuntimeError


def test_the_wsgi_environ_is_the_one_pep_3333_asks_for():
    """Every key a WSGI app may read, with its value; a scope without `server` and `client` (both
    optional in ASGI) gives empty names and port 0; the app's answer in several pieces is one body."""
    import sys

    seen = []

    def app(environ, start_response):
        seen.append(dict(environ))
        start_response("201 Created", [("Content-Type", "application/json"), ("X-Seen", "é")])
        return [b'{"a":', b"", b"1}"]

    sc = scope(method="GET", path="/readyz", query=b"v=\xe9", headers=[("x-name", "caf\xe9"), ("host", "h")])
    sc["http_version"] = "1.0"
    del sc["server"], sc["client"]
    status, headers, body = answer(drive(Front(app), sc, [{"type": "http.request", "body": b"", "more_body": False}]))
    assert (status, body) == (201, b'{"a":1}')
    assert headers == {b"content-type": b"application/json", b"x-seen": "é".encode("latin-1")}
    env = seen[0]
    assert env.pop("wsgi.input").read() == b"" and env.pop("wsgi.errors") is sys.stderr
    assert env == {
        "REQUEST_METHOD": "GET",
        "SCRIPT_NAME": "",
        "PATH_INFO": "/readyz",
        "QUERY_STRING": "v=\xe9",
        "SERVER_NAME": "",
        "SERVER_PORT": "0",
        "SERVER_PROTOCOL": "HTTP/1.0",
        "REMOTE_ADDR": "",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "https",
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "HTTP_X_NAME": "caf\xc3\xa9",  # the header's UTF-8 bytes, each a latin-1 character
        "HTTP_HOST": "h",
        "CONTENT_LENGTH": "0",
    }


@pytest.mark.parametrize("path", ["/\u20ac", "/caf\u00e9", "/m\u00fctate"])
def test_a_percent_encoded_utf8_path_is_a_json_404_not_a_crash(cluster, path):
    """uvicorn hands ASGI the path percent-decoded as UTF-8 (`GET /%E2%82%AC` is `/€`); the
    WSGI environ carries its bytes as latin-1 characters (PEP 3333), so Flask routes it: a JSON
    404 like any unknown path. Before, `€` (no latin-1 character) made werkzeug raise out of the
    front, a 500 from the server."""
    front, _ = _front_and_flask(cluster)
    status, headers, data = answer(
        drive(front, scope(method="GET", path=path), [{"type": "http.request", "body": b""}])
    )
    assert (status, headers[b"content-type"], json.loads(data)) == (
        404,
        b"application/json",
        json.loads(answer(drive(front, scope(method="GET", path="/nowhere"), [{"type": "http.request"}]))[2]),
    )


def test_the_body_limit_is_exact_declared_or_sent(caplog):
    """A body of exactly max_body bytes is read, declared or sent in pieces; one byte more is
    refused with the JSON 413 that names the limit, and the connection closed."""
    limit = 10
    for declared in (True, False):
        headers = [("content-length", str(limit))] if declared else [("transfer-encoding", "chunked")]
        seen = []
        status, _, body = answer(
            drive(
                Front(echo_app(seen), max_body=limit),
                scope(headers=headers),
                [
                    {"type": "http.request", "body": b"x" * 4, "more_body": True},
                    {"type": "http.request", "body": b"x" * 6, "more_body": False},
                ],
            )
        )
        assert (status, json.loads(body)) == (200, {"got": "x" * limit}), declared
    for headers, pieces in (([("content-length", str(limit + 1))], []), ([], [b"x" * 5, b"x" * 6])):
        sent = drive(
            Front(echo_app([]), max_body=limit),
            scope(headers=headers),
            [{"type": "http.request", "body": p, "more_body": True} for p in pieces],
        )
        assert answer(sent) == (
            413,
            {b"content-type": b"application/json", b"connection": b"close"},
            b'{"error":"request body over 10 bytes"}',
        )


def test_a_message_without_a_body_key_is_an_empty_body():
    """ASGI lets `body` and `more_body` be left out of http.request: an empty body, complete."""
    seen = []
    status, _, body = answer(drive(Front(echo_app(seen)), scope(method="GET"), [{"type": "http.request"}]))
    assert (status, json.loads(body)) == (200, {"got": ""}) and seen[0]["CONTENT_LENGTH"] == "0"


def test_an_admission_over_the_admissions_limit_closes_the_connection(cluster):
    """A front whose own limit is above the admissions' (MAX_BODY): the admissions refuse the
    body with their 413, and the front closes the connection after it (the body is unread for
    the next request); their 200 keeps it."""
    from webhook.serving.admissions import MAX_BODY

    front, _ = _front_and_flask(cluster)
    front.max_body = MAX_BODY + 10
    big = b" " * (MAX_BODY + 1)
    status, headers, data = answer(drive(front, scope(), [{"type": "http.request", "body": big}]))
    assert (status, json.loads(data)) == (413, {"error": f"request body over {MAX_BODY} bytes"})
    assert headers == {
        b"content-type": b"application/json",
        b"content-length": b"%d" % len(data),
        b"connection": b"close",
    }
    body = _bodies()["good"]
    status, headers, data = answer(drive(front, scope(), [{"type": "http.request", "body": body}]))
    assert status == 200 and headers == {b"content-type": b"application/json", b"content-length": b"%d" % len(data)}
