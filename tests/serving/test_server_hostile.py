"""Hostile and broken input against the real server over TLS (`rdma-webhook serve`), plus the
security properties of the admission contract.

Every case checks the same thing: a clear 4xx (JSON `{"error": ...}`) or a well-formed
AdmissionReview answer, never a 5xx, never a decision-core exception turned into an
"internal error" deny; and after each case the server still answers and its process is alive.

Written against behaviour, not the server implementation (gunicorn today; it may change):
slow clients, idle connections, bodies over the limit with and without Content-Length, client
certificate authentication, and what reaches the log.
"""

from __future__ import annotations

import copy
import datetime as dt
import http.client
import json
import select
import shutil
import socket
import ssl
import textwrap
import threading
import time
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import conftest
import kube_objects as k
import strategies as S
from conftest import start_server, stop_server
from webhook.serving.admissions import MAX_BODY
from webhook.serving.certs import make_ca
from webhook.policy.load import load_texts

# -- helpers ------------------------------------------------------------------------------------

CRASH_WITHOUT_UID = "request could not be processed"  # webhook/serving/admissions.py, `Admissions.answer`


def check_answer(status: int, data: bytes, uid: str | None = None) -> dict[str, Any]:
    """A 4xx with a JSON error, or a 200 AdmissionReview (allowed, or denied with a 4xx status
    and a message). Never a 5xx; never a decision-core crash dressed as a deny."""
    assert status < 500, (status, data[:300])
    doc = json.loads(data)
    if status != 200:
        assert 400 <= status < 500 and isinstance(doc.get("error"), str) and doc["error"], (status, doc)
        # webhook/serving/admissions.py's answer to an exception in the decision core for a body without a uid:
        # a 400 that hides a crash, not an answer to bad input
        assert doc["error"] != CRASH_WITHOUT_UID, (status, doc)
        return doc
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview", doc
    r = doc["response"]
    if uid is not None:
        assert r["uid"] == uid
    assert isinstance(r["allowed"], bool)
    if not r["allowed"]:
        assert 400 <= r["status"]["code"] < 500 and isinstance(r["status"]["message"], str) and r["status"]["message"]
        assert "internal error" not in r["status"]["message"], r["status"]["message"]
    return doc


def check_alive(srv: conftest.Server, within: float = 15.0) -> None:
    assert srv.proc.poll() is None, f"server exited {srv.proc.returncode}"
    status, _, _ = srv.request("GET", "/healthz", conn=srv.connection(timeout=within))
    assert status == 200


def tls_socket(srv: conftest.Server, timeout: float = 10, ctx: ssl.SSLContext | None = None) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", srv.port), timeout=timeout)
    try:
        return (ctx or srv.context()).wrap_socket(raw, server_hostname="localhost")
    except BaseException:
        raw.close()
        raise


def read_response(sock: ssl.SSLSocket, deadline: float, data: bytes = b"") -> tuple[int, bytes]:
    """(status, body) of one HTTP/1.1 response with a Content-Length (`data`: what was already
    read of it); (0, b"") when the server closed without one."""
    while True:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            head = data[:head_end].decode("latin-1")
            length = next(
                (
                    int(line.split(":", 1)[1])
                    for line in head.split("\r\n")
                    if line.lower().startswith("content-length:")
                ),
                0,
            )
            if len(data) >= head_end + 4 + length:
                return int(head.split()[1]), data[head_end + 4 : head_end + 4 + length]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no complete response; got {data[:200]!r}")
        try:
            chunk = sock.recv(65536)
        except (ssl.SSLError, OSError):
            chunk = b""
        if not chunk:
            return 0, data
        data += chunk


def streamed(srv: conftest.Server, head: bytes, parts, timeout: float = 30) -> tuple[int, bytes, int]:
    """Send `head` then `parts`, stopping as soon as the server answers (it may answer and stop
    reading before the client has sent everything), then read the answer. One thread only: an
    SSL socket must not be read and written from two threads at once (OpenSSL is not safe for
    that; it crashed the interpreter here). Returns (status, body, bytes of `parts` sent)."""
    sock = tls_socket(srv, timeout=timeout)
    sent = 0
    deadline = time.monotonic() + timeout
    early = b""
    try:
        sock.settimeout(1.0)  # a server that stopped reading fills the buffers: stop sending then
        try:
            sock.sendall(head)
            for part in parts:
                early = _read_ready(sock)
                if early:
                    break  # the server answered early
                sock.sendall(part)
                sent += len(part)
        except OSError:  # includes the send timeout, a reset and a closed pipe
            pass
        sock.settimeout(timeout)
        status, body = read_response(sock, deadline, early)
    finally:
        sock.close()
    return status, body, sent


def _read_ready(sock: ssl.SSLSocket) -> bytes:
    """Answer bytes already there, without waiting (TLS records that carry no data, such as
    session tickets, are consumed and give b"")."""
    if not select.select([sock], [], [], 0)[0] and not sock.pending():
        return b""
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        return sock.recv(65536)
    except (ssl.SSLWantReadError, BlockingIOError):
        return b""
    finally:
        sock.settimeout(timeout)


def review_body(obj: Any, **kw) -> tuple[bytes, str]:
    rv = k.admission_review(obj, **kw)
    return json.dumps(rv).encode(), rv["request"]["uid"]


# -- unreadable, truncated, nested, wrongly typed ---------------------------------------------

_VALID, _UID = review_body(k.pytorchjob_worker(), uid="hostile-uid")
BODIES = {
    "not-json": b"this is not json",
    "truncated-review": _VALID[: len(_VALID) // 2],
    "truncated-at-1": _VALID[:1],
    "nested-100k-brackets": b"[" * 100_000 + b"]" * 100_000,
    "nested-100k-in-request": b'{"request": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "nested-100k-objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "nested-100k-in-object": _VALID.replace(
        b'"spec": {', b'"x": ' + b"[" * 100_000 + b"]" * 100_000 + b', "spec": {', 1
    ),
    "unclosed-100k": b"[" * 100_000,
    "invalid-utf8": b'{"request": {"uid": "\xff\xfe"}}',
    "lone-surrogate": b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "\\ud800"}}',
    "nul-bytes": b"\x00" * 1024,
    "bom": b"\xef\xbb\xbf" + _VALID,
    "nan": b'{"request": {"uid": NaN}}',
    "huge-number": b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "object": 1e999999}}',
    "huge-int": b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "object": '
    + b"9" * 5000
    + b"}}",
    "duplicate-keys": _VALID[:-1] + b', "request": {"uid": "second", "object": null}}',
    "null": b"null",
    "string": b'"AdmissionReview"',
    "empty-object": b"{}",
    "request-list": b'{"request": []}',
    "uid-object": b'{"request": {"uid": {"a": 1}}}',
    "object-string": b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "object": "pod"}}',
    "kind-is-list": b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
    b'{"uid": "u", "kind": [], "resource": 7, "operation": {}}}',
    "v1beta1": _VALID.replace(b"admission.k8s.io/v1", b"admission.k8s.io/v1beta1", 1),
    "long-uid": b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "'
    + b"u" * 1_000_000
    + b'"}}',
    "many-keys": b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "object": {'
    + b",".join(b'"k%d": %d' % (i, i) for i in range(100_000))
    + b"}}}",
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_unreadable_and_odd_bodies(server, name):
    status, data, headers = server.request("POST", "/mutate", BODIES[name])
    check_answer(status, data)
    assert headers["Content-Type"].startswith("application/json")
    check_alive(server)


WRONG = [None, 0, -1, 1.5, True, "", "x", [], {}, ["x"], {"a": 1}, "\x00\u202e\U0001f600", 10**30]


def _paths(node: Any, path: tuple = ()):
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, path + (i,))


def _replace(doc: Any, path: tuple, value: Any) -> Any:
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _rich_pod() -> dict[str, Any]:
    c = k.container(
        "trainer",
        gpus=4,
        env=[
            {"name": "NCCL_DEBUG", "value": "INFO"},
            {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        command=["/bin/bash", "-c"],
        args=["export NCCL_IB_DISABLE=0\ntorchrun train.py"],
        envFrom=[{"configMapRef": {"name": "x"}, "prefix": "APP_"}],
        securityContext={"capabilities": {"add": ["SYS_PTRACE"], "drop": ["ALL"]}, "runAsUser": 0},
        volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}],
        limits={"aliyun/erdma": "1", "cpu": "8"},
    )
    side = k.container("sidecar", "busybox:1.36", gpus=None)
    init = k.container("fetch", "busybox:1.36", gpus=None, command=["sh", "-c", "true"])
    return k.pod(
        [c, side],
        init_containers=[init],
        namespace="ai-training",
        name="hostile-0",
        generate_name=None,
        annotations={"rdma-webhook.io/policy": "sriov-roce", "k8s.v1.cni.cncf.io/networks": '[{"name": "other"}]'},
        volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
    )


def test_wrong_types_everywhere(server):
    """Every node of a rich review replaced, one at a time, by values of every JSON type: each
    answer is a 4xx or a well-formed AdmissionReview, and no decision-core exception."""
    rv = k.admission_review(_rich_pod(), uid="typed")
    paths = [p for p in _paths(rv) if p and p != ("request", "uid")]
    conn = server.connection()
    n = 0
    try:
        for path in paths:
            for wrong in WRONG:
                status, data, _ = server.request(
                    "POST", "/mutate", json.dumps(_replace(rv, path, wrong)).encode(), conn=conn
                )
                doc = check_answer(status, data)
                if status == 200 and path[:1] == ("request",):
                    assert doc["response"]["uid"] == "typed", path
                n += 1
    finally:
        conn.close()
    assert n > 500
    check_alive(server)


def test_unicode_and_control_characters(server):
    weird = [
        "\x00",
        "\x1b[31mred",
        "line\nbreak\r\n",
        "\u202eevil\u202c",
        "\U0001f600",
        "日本語",
        "\ufeff",
        "\\",
        '"quoted"',
        "\ud7ff",
        "$(X)",
        "\t",
    ]
    env = [{"name": f"V{i}", "value": w} for i, w in enumerate(weird)] + [{"name": "NCCL_NET", "value": "I\u0299"}]
    c = k.container(
        "trainer", env=env, command=["/bin/sh", "-c", "echo " + " ".join(weird) + "\nexport NCCL_DEBUG=INFO\u00a0"]
    )
    cases = [
        k.pod([c]),
        k.pod([k.container("trainer")], name="pod-\u202e\n\x00", generate_name=None),
        k.pod([k.container("tr\u0430iner")], labels={"rdma-webhook.io/inject": "true", "x\ny": "\x00"}),
        k.pod(
            [k.container("trainer")],
            annotations={"rdma-webhook.io/policy": "erdma\x00", "k8s.v1.cni.cncf.io/networks": "rdma\u2028network"},
        ),
        k.pod([k.container("trainer")], namespace="ml-training\n{\"level\":\"error\"}"),
    ]
    for pod in cases:
        body, uid = review_body(pod)
        status, data, _ = server.request("POST", "/mutate", body)
        check_answer(status, data, uid)
        check_alive(server)
    # a control character in a value never breaks the one-JSON-object-per-line log
    for line in server.log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("{"):
            json.loads(line)


def test_pathological_variable_references_are_answered_within_the_api_server_timeout(server):
    """`$(` repeated to near the body limit, in a command argument and in an NCCL variable's
    value: both are `$(VAR)`-expanded, and the answer comes within the client's 10 s (the API
    server's webhook timeout). The expansion used to be a regex split that, from every `$(`,
    scanned ahead for a `)`: quadratic, 443 s of a worker's CPU for 400 KB of `$(` (measured)."""
    junk = "$(" * 400_000
    c = k.container(
        "trainer",
        gpus=8,
        env=[{"name": "NCCL_DEBUG", "value": junk + "$(A" * 1000 + ")"}],
        command=["torchrun", junk, "$(NCCL_DEBUG)"],
    )
    body, uid = review_body(k.pod([c]))
    assert 1_500_000 < len(body) < MAX_BODY
    status, data, _ = server.request("POST", "/mutate", body)
    doc = check_answer(status, data, uid)
    assert status == 200 and doc["response"]["allowed"] is True, doc
    check_alive(server)


# -- bodies over the limit ------------------------------------------------------------------------

_HEAD = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"


def test_oversized_content_length_variants(server):
    """Content-Length one over the limit: 413 before the body is sent. Malformed lengths, and
    Content-Length with Transfer-Encoding (the request smuggling shape): 400 from the HTTP parser
    (httptools refuses both; RFC 9112 6.1 lets a server reject the pair), answered, not just closed."""
    status, body, sent = streamed(
        server, _HEAD + b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1), iter([b"{" * 1024]), timeout=15
    )
    assert status == 413 and sent <= 1024, (status, body)
    for bad in (b"-1", b"abc", b"1, 2", b"99999999999999999999999"):
        status, body, _ = streamed(server, _HEAD + b"Content-Length: " + bad + b"\r\n\r\n", iter([b"{}"]), timeout=15)
        assert status == 400, (bad, status, body)
        check_alive(server)
    status, body, _ = streamed(
        server,
        _HEAD + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
        iter([b"2\r\n{}\r\n0\r\n\r\n"]),
        timeout=15,
    )
    assert status == 400, (status, body)
    check_alive(server)


def _chunks(total: int, size: int = 64 * 1024, fill: bytes = b" "):
    sent = 0
    while sent < total:
        n = min(size, total - sent)
        yield b"%x\r\n" % n + fill * n + b"\r\n"
        sent += n
    yield b"0\r\n\r\n"


def test_oversized_chunked_body_is_refused_with_413(server):
    review, uid = review_body(k.pod([k.container("trainer")]))
    head = _HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    # a valid review padded with whitespace past the limit: must be refused, not decided on
    # 32 MiB more than the limit: far more than loopback socket buffers hold (a few MiB), so a
    # client that could send it all would show that the server kept reading.
    extra = 32 * 1024 * 1024
    status, body, sent = streamed(
        server, head, iter([b"%x\r\n" % len(review) + review + b"\r\n", *_chunks(MAX_BODY + extra)])
    )
    check_alive(server)
    assert status == 413, (status, body[:200])
    assert sent < MAX_BODY + extra // 2, f"the server read {sent} bytes of the oversized body"


def test_chunked_body_under_the_limit_is_answered(server):
    review, uid = review_body(k.pytorchjob_worker())
    status, body, _ = streamed(
        server,
        _HEAD + b"Transfer-Encoding: chunked\r\n\r\n",
        iter([b"%x\r\n" % len(review) + review + b"\r\n0\r\n\r\n"]),
    )
    doc = check_answer(status, body, uid)
    assert doc["response"]["allowed"] and "patch" in doc["response"]


# -- slow and idle clients ------------------------------------------------------------------------


@pytest.fixture
def own_server(tmp_path):
    srv = start_server(tmp_path)
    yield srv
    stop_server(srv)


# How long a probe may take while hostile clients hold connections. A server they starve answers
# only when the server cuts them (10 s, webhook.serving.asgi.REQUEST_TIMEOUT) or never (idle
# connections); an unloaded probe takes milliseconds. 6 s sits between, with room for a loaded
# 2-core machine on one side and the starved case on the other.
PROBE_BUDGET = 6.0


def _probe(srv: conftest.Server, budget: float = PROBE_BUDGET) -> float:
    """One review over a fresh connection; its round-trip time (raises past `budget`)."""
    body, uid = review_body(k.pytorchjob_worker())
    start = time.monotonic()
    status, data, _ = srv.request("POST", "/mutate", body, conn=srv.connection(timeout=budget))
    check_answer(status, data, uid)
    return time.monotonic() - start


SLOW_CLIENTS = 12  # more than the 2 workers x 4 threads the server runs today


def test_slow_clients_do_not_starve_others(own_server):
    """While SLOW_CLIENTS trickle a request body one byte a second, other clients are served
    within PROBE_BUDGET each; the trickling requests are cut within webhook.serving.asgi.REQUEST_TIMEOUT (10 s;
    the API server gives up on a webhook call after timeoutSeconds <= 10 anyway) plus a margin."""
    srv = own_server
    stop = threading.Event()
    ended: dict[int, float] = {}
    start = time.monotonic()

    def trickle(i: int) -> None:
        try:
            sock = tls_socket(srv, timeout=5)
        except OSError:
            ended[i] = -1.0  # could not even connect: counted below
            return
        try:
            sock.sendall(_HEAD + b"Content-Length: 100000\r\n\r\n")
            sock.settimeout(1.0)
            while not stop.is_set() and time.monotonic() - start < 36:
                sock.sendall(b" ")
                try:
                    if sock.recv(1024) == b"":
                        break  # the server closed it
                    break  # the server answered (e.g. 408)
                except (TimeoutError, socket.timeout, ssl.SSLWantReadError):
                    continue
        except OSError:
            pass
        finally:
            ended[i] = time.monotonic() - start
            sock.close()

    threads = [threading.Thread(target=trickle, args=(i,), daemon=True) for i in range(SLOW_CLIENTS)]
    for th in threads:
        th.start()
    try:
        time.sleep(1.0)
        worst = 0.0
        while time.monotonic() - start < 12:
            worst = max(worst, _probe(srv))
            time.sleep(0.5)
        assert worst < PROBE_BUDGET
        for th in threads:
            th.join(40)
        assert all(0 <= t < 25 for t in ended.values()), f"slow clients not cut within 25 s: {ended}"
    finally:
        stop.set()
        for th in threads:
            th.join(5)
    check_alive(srv)


def test_oversized_request_head_is_refused_with_431(server):
    """Request line and headers over webhook.serving.worker.MAX_HEAD (64 KiB; httptools has no limit
    of its own): 431 and the connection closed, and the server keeps serving."""
    from webhook.serving.worker import MAX_HEAD

    head = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n"
    head += b"".join(b"X-Fill-%03d: %s\r\n" % (i, b"a" * 1000) for i in range(MAX_HEAD // 1000 + 4))
    with tls_socket(server) as s:
        s.sendall(head)  # never finished: no blank line
        status, body = read_response(s, time.monotonic() + 10)
        assert status == 431 and b"over 65536 bytes" in body, (status, body[:200])
        s.settimeout(5)
        assert s.recv(1) == b""  # closed
    check_alive(server)


def test_slow_request_head_is_cut(server):
    """A request line and headers trickled a line a second are cut within
    webhook.serving.asgi.REQUEST_TIMEOUT (10 s) of their first byte, plus a margin."""
    start = time.monotonic()
    with tls_socket(server) as s:
        s.sendall(b"POST /mutate HTTP/1.1\r\n")
        s.settimeout(1.0)
        closed = None
        while time.monotonic() - start < 30:
            try:
                s.sendall(b"X-Slow: 1\r\n")
                if s.recv(1024) == b"":
                    closed = time.monotonic() - start
                    break
            except (TimeoutError, socket.timeout, ssl.SSLWantReadError):
                continue
            except OSError:
                closed = time.monotonic() - start
                break
    assert closed is not None and 9 <= closed < 25, closed  # 10 s, never before; late on a loaded machine
    check_alive(server)


IDLE = 200


def test_many_idle_connections_do_not_block_others(own_server):
    """IDLE TLS connections (handshake done, nothing sent) and as many raw TCP ones stay open
    while normal requests keep being answered within PROBE_BUDGET each."""
    srv = own_server
    idle: list[socket.socket] = []
    try:
        for _ in range(IDLE // 2):
            idle.append(socket.create_connection(("127.0.0.1", srv.port), timeout=5))
        for _ in range(IDLE):
            idle.append(tls_socket(srv, timeout=PROBE_BUDGET))
            if len(idle) % 25 == 0:
                _probe(srv)
        for _ in range(10):
            assert _probe(srv) < PROBE_BUDGET
            time.sleep(0.2)
    finally:
        for s in idle:
            s.close()
    check_alive(srv)


def test_idle_keepalive_connections_do_not_block_others(own_server):
    """Connections that made a request and stay open (the API server's keep-alive pool) do
    not hold the server: 100 of them open, new clients are served promptly."""
    srv = own_server
    conns = []
    try:
        for _ in range(100):
            c = srv.connection(timeout=5)
            assert srv.request("GET", "/healthz", conn=c)[0] == 200
            conns.append(c)
        for _ in range(5):
            assert _probe(srv) < PROBE_BUDGET
        # and the kept-alive ones still work
        for c in conns[:10]:
            assert srv.request("GET", "/healthz", conn=c)[0] == 200
    finally:
        for c in conns:
            c.close()
    check_alive(srv)


# -- client certificate authentication ------------------------------------------------------------


def _client_cert(ca: x509.Certificate, ca_key, name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


@pytest.fixture(scope="module")
def mtls(tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("mtls")
    ca, ca_key = make_ca("apiserver client CA")
    other, other_key = make_ca("some other CA")
    (tmp / "client-ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files = {}
    for label, (issuer, issuer_key) in {"good": (ca, ca_key), "other": (other, other_key)}.items():
        crt, key = _client_cert(issuer, issuer_key, f"kube-apiserver-{label}")
        (tmp / f"{label}.crt").write_bytes(crt)
        (tmp / f"{label}.key").write_bytes(key)
        files[label] = (str(tmp / f"{label}.crt"), str(tmp / f"{label}.key"))
    # start_server polls /readyz with Server.context(): give that context the good client cert
    original = conftest.Server.context

    def with_cert(self):
        ctx = original(self)
        ctx.load_cert_chain(*files["good"])
        return ctx

    conftest.Server.context = with_cert
    try:
        srv = start_server(tmp, extra_args=["--client-ca", str(tmp / "client-ca.crt")])
    finally:
        conftest.Server.context = original
    yield srv, files, original
    stop_server(srv)


def _mtls_request(srv, ctx: ssl.SSLContext) -> int:
    with tls_socket(srv, ctx=ctx) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        status, _ = read_response(s, time.monotonic() + 10)
        return status


def test_client_certificate_required(mtls):
    srv, files, plain_context = mtls
    # no client certificate: the handshake fails (under TLS 1.3 the server's alert arrives on
    # the first read, so the failure may surface there instead of in wrap_socket)
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        status = _mtls_request(srv, plain_context(srv))
        if status == 0:
            raise ssl.SSLError("closed without an answer")
    # a certificate from another CA: refused the same way
    ctx = plain_context(srv)
    ctx.load_cert_chain(*files["other"])
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        status = _mtls_request(srv, ctx)
        if status == 0:
            raise ssl.SSLError("closed without an answer")
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = plain_context(srv)
        ctx.load_cert_chain(*files["other"])
        ctx.minimum_version = ctx.maximum_version = version
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            if _mtls_request(srv, ctx) == 0:
                raise ssl.SSLError("closed without an answer")
    # the right CA: served
    ctx = plain_context(srv)
    ctx.load_cert_chain(*files["good"])
    assert _mtls_request(srv, ctx) == 200
    body, uid = review_body(k.pytorchjob_worker())
    conn = http.client.HTTPSConnection("localhost", srv.port, context=ctx, timeout=10)
    try:
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        doc = check_answer(resp.status, resp.read(), uid)
    finally:
        conn.close()
    assert doc["response"]["allowed"] and "patch" in doc["response"]
    assert srv.proc.poll() is None


# -- security: policy scoping, opt-in, logs --------------------------------------------------------

RESTRICTED_POLICY = textwrap.dedent("""\
    apiVersion: rdma-webhook.io/v1alpha1
    kind: RdmaPolicy
    name: llm-only
    description: only for namespaces labelled team=llm
    priority: 0
    namespaceSelector: {matchLabels: {team: llm}}
    fabric: {kind: erdma, ncclNet: [IB], hcaDevices: ["erdma_[0-1]"]}
    device: {resource: aliyun/erdma, count: 1}
    shm: {sizeLimit: 16Gi}
    nccl:
      NCCL_NET: {value: IB, enforce: true}
""")


@pytest.fixture(scope="module")
def sec_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("security")
    pol = tmp / "policies"
    shutil.copytree(S.ROOT / "policies", pol)
    (pol / "llm-only.yaml").write_text(RESTRICTED_POLICY)
    state = tmp / "cluster-state.yaml"
    state.write_text(
        (S.ROOT / "examples" / "cluster-state.yaml").read_text().rstrip() + "\n" + S._EXTRA_STATE.strip("\n") + "\n"
    )
    srv = start_server(tmp, extra_args=["--cluster-state", str(state)])
    yield srv
    stop_server(srv)


def test_policy_the_namespace_may_not_use_is_denied(sec_server):
    pod = k.pod([k.container("trainer")], annotations={"rdma-webhook.io/policy": "llm-only"})
    r = sec_server.review(k.admission_review(pod))["response"]
    assert r["allowed"] is False and r["status"]["code"] == 403
    assert (
        "'llm-only'" in r["status"]["message"]
        and "may not be used in namespace 'ml-training'" in r["status"]["message"]
    )
    assert "[no-policy]" in r["status"]["message"] and "patch" not in r
    # a namespace label naming it does not help either
    pod = k.pod([k.container("trainer")], namespace="bad-default")
    r = sec_server.review(k.admission_review(pod))["response"]
    assert r["allowed"] is False and "[no-policy]" in r["status"]["message"]


@pytest.mark.parametrize("namespace", ["default", "opted-out", "kube-system"])
def test_pod_label_without_namespace_opt_in_changes_nothing(sec_server, namespace):
    """The pod label alone (with a policy annotation, a fallback setting, hostNetwork) never
    mutates or denies in a namespace without the opt-in label; an unknown namespace is denied
    (fail closed: its opt-in cannot be checked) rather than mutated."""
    c = k.container("trainer", env=[{"name": "NCCL_IB_DISABLE", "value": "1"}])
    pod = k.pod([c], namespace=namespace, annotations={"rdma-webhook.io/policy": "erdma"}, hostNetwork=True)
    r = sec_server.review(k.admission_review(pod))["response"]
    if namespace == "kube-system":  # not in the cluster state
        assert r["allowed"] is False and "[namespace-unknown]" in r["status"]["message"] and "patch" not in r
    else:
        assert r["allowed"] is True and "patch" not in r and "status" not in r


def test_no_secrets_or_pod_specs_in_logs(sec_server):
    marker = S.SECRET_MARKER
    jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJl"
    secret_env = [
        {"name": "API_TOKEN", "value": marker},
        {"name": "HF_TOKEN", "value": jwt},
        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": marker}}},
    ]
    volumes = [
        {
            "name": "sa-token",
            "projected": {"sources": [{"serviceAccountToken": {"audience": marker, "path": "token"}}]},
        },
        {"name": "creds", "secret": {"secretName": "creds-" + marker.lower()}},
    ]
    mounts = [{"name": "sa-token", "mountPath": "/var/run/secrets/tokens"}, {"name": "creds", "mountPath": "/creds"}]
    pods = [
        k.pod(
            [k.container("trainer", env=secret_env, volumeMounts=mounts, command=["sh", "-c", f"echo {marker}"])],
            volumes=volumes,
        ),
        # denied: the deny message quotes the offending value back to the user, never to the log
        k.pod([k.container("trainer", env=secret_env + [{"name": "NCCL_NET", "value": marker}])]),
        k.pod(
            [
                k.container(
                    "trainer",
                    env=[{"name": "NCCL_IB_HCA", "value": marker}],
                    command=["mpirun", "-x", f"NCCL_IB_DISABLE={marker}"],
                )
            ],
            namespace="ai-training",
        ),
        k.pod([k.container("trainer", env=secret_env)], annotations={"rdma-webhook.io/policy": marker.lower()}),
        # malformed pod and envelope errors
        {
            "kind": "Pod",
            "metadata": {"labels": {"rdma-webhook.io/inject": "true"}},
            "spec": {"containers": {"x": marker}},
        },
    ]
    answers = []
    for pod in pods:
        answers.append(sec_server.review(k.admission_review(pod))["response"])
    rv = k.admission_review(pods[0])
    rv["apiVersion"] = "admission.k8s.io/v0"  # envelope error: the log names the apiVersion, not the pod
    sec_server.request("POST", "/mutate", json.dumps(rv).encode())
    sec_server.request("POST", "/mutate", json.dumps(rv).encode()[:-10])  # truncated: 400
    assert any(marker in (a.get("status") or {}).get("message", "") for a in answers), "the user sees the value"
    time.sleep(0.5)
    log = sec_server.log.read_text(encoding="utf-8", errors="replace")
    assert '"outcome":"denied"' in log.replace(" ", "") and '"outcome":"mutated"' in log.replace(" ", "")
    for needle in (
        marker,
        marker.lower(),
        jwt,
        "serviceAccountToken",
        "kube-api-access",
        "secretKeyRef",
        '"containers"',
        '"env"',
        '"spec"',
        "nvcr.io",
        "terminationMessagePath",
    ):
        assert needle not in log, f"{needle!r} appears in the server log at the default level"


# -- broken policy files (what tests/policy/test_load.py does not cover) --------------------------------

_GOOD = RESTRICTED_POLICY.replace("llm-only", "p").replace("{matchLabels: {team: llm}}", "{}")


@pytest.mark.parametrize(
    "mutate,expect",
    [
        (lambda t: t.replace("priority: 0", "priority: high"), "field priority"),
        (lambda t: t.replace("priority: 0", "priority: 0\ngpuResources: nvidia.com/gpu"), "field gpuResources"),
        (
            lambda t: t.replace("priority: 0", "priority: 0\ngpuResources: [nvidia.com/gpu, GPU]"),
            "field gpuResources[1]: 'GPU' is not a valid extended resource name",
        ),
        (lambda t: t.replace("priority: 0", "priority: 0\ngpuResources: [kubernetes.io/gpu]"), "field gpuResources[0]"),
        (
            lambda t: t.replace("fabric: {kind: erdma, ncclNet: [IB], hcaDevices: [\"erdma_[0-1]\"]}", "fabric: erdma"),
            "field fabric",
        ),
        (lambda t: t.replace("nccl:\n  NCCL_NET: {value: IB, enforce: true}", "nccl: [NCCL_NET=IB]"), "field nccl"),
        (
            lambda t: t.replace("NCCL_NET: {value: IB, enforce: true}", "NCCL_NET: {value: IB, enforce: yes please}"),
            "field nccl.NCCL_NET",
        ),
        (lambda t: t.replace("NCCL_NET: {value: IB, enforce: true}", "NCCL_NET: 1"), "field nccl.NCCL_NET"),
        (
            lambda t: t.replace(
                "NCCL_NET: {value: IB, enforce: true}", "NCCL_NET: {value: IB, enforce: true}\n  1NCCL_X: a"
            ),
            "field nccl.1NCCL_X: not a valid environment variable name",
        ),
        (
            lambda t: t.replace(
                "NCCL_NET: {value: IB, enforce: true}", "NCCL_NET: {value: IB, enforce: true}\n  'NCCL X': a"
            ),
            "field nccl.NCCL X: not a valid environment variable name",
        ),
        (
            lambda t: t.replace(
                "NCCL_NET: {value: IB, enforce: true}", "NCCL_NET: {value: IB, enforce: true}\n  NCCL_IB_DISABLE: '0x1'"
            ),
            "field nccl.NCCL_IB_DISABLE",
        ),
        (
            lambda t: t.replace("shm: {sizeLimit: 16Gi}", "shm: {perGpu: 8GB}"),
            "field shm.perGpu: '8GB' is not a Kubernetes quantity",
        ),
        (
            lambda t: t.replace("shm: {sizeLimit: 16Gi}", "shm: {perGpu: 8Gi, max: lots}"),
            "field shm.max: 'lots' is not a Kubernetes quantity",
        ),
        (lambda t: t.replace("shm: {sizeLimit: 16Gi}", "shm: {sizeLimit: 1.5}"), "field shm.sizeLimit"),
        (
            lambda t: t.replace("shm: {sizeLimit: 16Gi}", "shm: {sizeLimit: 500m}"),
            "field shm.sizeLimit: '500m' must be a positive whole number of bytes",
        ),
        (lambda t: t.replace("shm: {sizeLimit: 16Gi}", "shm: {sizeLimit: [16Gi]}"), "field shm.sizeLimit"),
        (
            lambda t: t.replace(
                "device: {resource: aliyun/erdma, count: 1}", "device: {resource: aliyun/erdma, count: 1, extra: 2}"
            ),
            "field device.extra: unknown field 'extra'",
        ),
        (
            lambda t: t.replace(
                "device: {resource: aliyun/erdma, count: 1}", "device: {resource: 'aliyun/er dma', count: 1}"
            ),
            "field device.resource",
        ),
        (
            lambda t: t.replace(
                "device: {resource: aliyun/erdma, count: 1}",
                "device: {resource: aliyun/erdma, count: 1}\nnetwork: {name: RDMA_net}",
            ),
            "field network.name",
        ),
        (
            lambda t: t.replace(
                "device: {resource: aliyun/erdma, count: 1}",
                "device: {resource: aliyun/erdma, count: 1}\nnetwork: {name: n, interface: a-very-long-interface-name}",
            ),
            "field network.interface",
        ),
        (lambda t: t.replace("priority: 0", "priority: 0\npriority: 5"), "found duplicate key 'priority'"),
        (
            lambda t: t.replace(
                "NCCL_NET: {value: IB, enforce: true}", "NCCL_NET: {value: IB, enforce: true}\n  NCCL_NET: Socket"
            ),
            "found duplicate key 'NCCL_NET'",
        ),
        (
            lambda t: t.replace(
                "priority: 0", "priority: 0\nspec: {containers: [{securityContext: {privileged: true}}]}"
            ),
            "field spec.containers[0].securityContext.privileged",
        ),
        (lambda t: t.replace("priority: 0", "priority: 0\nhostIPC: true"), "field hostIPC: policies may not ask"),
        (lambda t: "- " + t.replace("\n", "\n  "), "each YAML document must be a policy mapping"),
        (lambda t: t + "\t: tab", "not valid YAML"),
    ],
)
def test_broken_policy_rejected_with_file_policy_and_field(mutate, expect):
    text = mutate(_GOOD)
    policies, errors = load_texts([("team/broken.yaml", text)])
    assert policies is None
    messages = [str(e) for e in errors]
    assert any(expect in m for m in messages), messages
    assert all(m.startswith("team/broken.yaml") for m in messages), messages


def test_duplicate_policy_names_in_one_file_and_alias_bomb():
    policies, errors = load_texts([("a.yaml", _GOOD + "---\n" + _GOOD)])
    assert policies is None and [str(e) for e in errors] == [
        "a.yaml: policy 'p': field name: duplicate policy name, also defined in a.yaml"
    ]
    # a YAML alias bomb (9^12 nodes when expanded) is rejected quickly, not walked
    bomb = "x0: &a0 [q, q, q, q, q, q, q, q, q]\n" + "".join(
        f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 12)
    )
    text = _GOOD + "extra:\n" + "".join("  " + line + "\n" for line in bomb.splitlines())
    start = time.monotonic()
    policies, errors = load_texts([("bomb.yaml", text)])
    assert policies is None and time.monotonic() - start < 30  # walked, 2.8e11 nodes would take hours
    assert any("field extra: unknown field 'extra'" in str(e) for e in errors)


def test_refused_chunked_body_closes_the_connection(server):
    """After a 413 for a body it did not read, the server closes the connection instead of
    reading (draining) the rest to reuse it: a client still sending sees the connection end."""
    review, _ = review_body(k.pod([k.container("trainer")]))
    sock = tls_socket(server, timeout=10)
    try:
        sock.sendall(_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(review) + review + b"\r\n")
        chunk = b"%x\r\n" % 65536 + b" " * 65536 + b"\r\n"
        for _ in range(MAX_BODY // 65536 + 2):
            sock.sendall(chunk)
        status, _ = read_response(sock, time.monotonic() + 10)
        assert status == 413
        closed = False
        deadline = time.monotonic() + 20
        sock.settimeout(0.2)
        while time.monotonic() < deadline and not closed:
            try:
                sock.sendall(chunk)
                if sock.recv(1024) == b"":
                    closed = True
            except (TimeoutError, socket.timeout, ssl.SSLWantReadError):
                continue
            except OSError:
                closed = True
        assert closed, "the server kept the connection open to drain the refused body"
    finally:
        sock.close()
    check_alive(server)
