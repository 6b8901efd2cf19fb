"""webhook/rsgi.py, the RSGI front of the granian-rsgi candidate, driven the way granian drives it:
a scope and a protocol object, awaited on an event loop. The real app answers; what is checked
is what reaches the protocol's `response_bytes`. (The whole server under granian is exercised by
`RDMA_WEBHOOK_SERVER=granian-rsgi pytest tests/test_server.py tests/test_hostile.py`; granian is
a benchmark extra, not installed for the test suite.)"""

from __future__ import annotations

import asyncio
import base64
import json

import jsonpatch
import pytest

import kube_objects as k
from webhook.app import create_app, wsgi
from webhook.cluster import FileClusterState
from webhook.policy_store import PolicyStore
from webhook.rsgi import Front


class Headers(dict):
    """granian's RSGIHeaders: lower-case names, get/items."""


class Scope:
    proto, http_version, scheme = "http", "1.1", "https"
    server, client, query_string = "127.0.0.1:8443", "10.0.0.7:51234", ""

    def __init__(self, method: str, path: str, headers: dict[str, str]):
        self.method, self.path, self.headers = method, path, Headers(headers)


class Proto:
    """The body arrives in `chunks`, each after `delay` seconds; the answer is recorded."""

    def __init__(self, chunks: list[bytes], delay: float = 0.0):
        self.chunks, self.delay, self.answer = chunks, delay, None

    async def __call__(self) -> bytes:
        return b"".join([c async for c in self])

    async def __aiter__(self):
        for c in self.chunks:
            if self.delay:
                await asyncio.sleep(self.delay)
            yield c

    def response_bytes(self, status, headers, body):
        assert self.answer is None, "answered twice"
        self.answer = (status, dict(headers), body)


@pytest.fixture(scope="module")
def front():
    store = PolicyStore("policies")
    store.reload(force=True)
    cluster = FileClusterState.from_file("examples/cluster-state.yaml")
    return Front(wsgi(create_app(store, cluster)), timeout=0.5, max_body=64 * 1024)


def serve(front: Front, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
          chunks: list[bytes] | None = None, delay: float = 0.0):
    proto = Proto(chunks if chunks is not None else [body], delay)
    asyncio.run(front.__rsgi__(Scope(method, path, headers or {}), proto))
    return proto.answer


def test_mutate_answers_with_a_patch_that_applies(front):
    pod = k.pytorchjob_worker()
    body = json.dumps(k.admission_review(pod)).encode()
    status, headers, data = serve(front, "POST", "/mutate", body,
                                  {"content-type": "application/json", "content-length": str(len(body))})
    assert status == 200 and headers["Content-Type"] == "application/json"
    resp = json.loads(data)["response"]
    assert resp["allowed"] is True
    mutated = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
    assert "aliyun/erdma" in mutated["spec"]["containers"][0]["resources"]["limits"]


def test_chunked_body_without_length_is_read_whole(front):
    body = json.dumps(k.admission_review(k.pod([k.container("web", gpus=None)], inject=False))).encode()
    status, _, data = serve(front, "POST", "/mutate", chunks=[body[:100], body[100:]], headers={"content-type": "application/json"})
    assert status == 200 and json.loads(data)["response"]["allowed"] is True


def test_declared_length_over_the_limit_is_refused_unread(front):
    proto_chunks: list[bytes] = []  # nothing may be read
    status, headers, data = serve(front, "POST", "/mutate", chunks=proto_chunks, headers={"content-length": str(10**9)})
    assert status == 413 and headers["connection"] == "close" and b"over" in data


def test_chunked_body_over_the_limit_is_refused(front):
    status, headers, _ = serve(front, "POST", "/mutate", chunks=[b"x" * 40_000, b"x" * 40_000])
    assert status == 413 and headers["connection"] == "close"


def test_slow_body_is_cut_at_the_deadline(front):
    loop = asyncio.new_event_loop()
    try:
        proto = Proto([b"{", b"}"] * 10, delay=0.2)  # 4 s of body against a 0.5 s deadline
        t0 = loop.time()
        loop.run_until_complete(front.__rsgi__(Scope("POST", "/mutate", {"content-length": "20"}), proto))
        elapsed = loop.time() - t0
    finally:
        loop.close()
    status, headers, _ = proto.answer
    assert status == 408 and headers["connection"] == "close"
    assert elapsed < 2.0


def test_bad_json_and_unknown_route_keep_their_answers(front):
    status, _, data = serve(front, "POST", "/mutate", b"not json", {"content-length": "8"})
    assert status == 400 and "not valid JSON" in json.loads(data)["error"]
    status, _, _ = serve(front, "GET", "/nowhere")
    assert status == 404
    status, _, data = serve(front, "GET", "/readyz")
    assert status == 200 and json.loads(data)["status"] == "ready"


def test_websocket_scope_is_ignored(front):
    proto = Proto([])
    scope = Scope("GET", "/", {})
    scope.proto = "ws"
    asyncio.run(front.__rsgi__(scope, proto))
    assert proto.answer is None
