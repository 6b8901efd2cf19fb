"""The gunicorn worker `serve` runs: uvicorn on uvloop with httptools, the Flask app behind
`webhook.serving.asgi.Front`, TLS from `webhook.serving.tls.ServingTLS`.

Why: gunicorn stays the master (pre-fork, preload, worker supervision, SIGTERM handling), and
each worker is one event loop thread. Against gunicorn's gevent worker it costs 0.34 instead of
0.48 ms of CPU per admission over TLS (benchmarks/README.md): uvloop's TLS and httptools'
parser are C, and no greenlet switches per request. Idle and slow clients hold a protocol
object each, not a thread.

What is ours on top of uvicorn's protocol (`Connection`):
- certificate rotation: every new connection first asks `ServingTLS.refresh()` (one stat per
  file), which loads renewed files into the live context in place before the connection's TLS
  session is made from it; connections already open keep theirs;
- graceful stop without lost requests: uvicorn closes idle keep-alive connections at once,
  which races with a client that is just sending its next request on one. Here a connection
  idle at the stop (or accepted just as it began) is closed only after DRAIN_IDLE quiet
  seconds, and a request that arrives meanwhile is answered with `Connection: close`, as
  gunicorn's own workers do;
- bounds uvicorn leaves out: a connection that never sends a request is closed after the
  keep-alive time (120 s, longer than the API server keeps an idle connection), a request line and headers must arrive within REQUEST_TIMEOUT and
  MAX_HEAD bytes (431 otherwise); the body is bounded by `Front` (10 s, 3 MiB);
- the scope of a request whose body was complete before the app ran is marked
  (`asgi.BODY_COMPLETE`), so `Front` arms no body deadline for it;
- one write per response (`_OneWrite`): the header block goes out with the body, one TLS record
  and one system call instead of two;
- admissions without the ASGI cycle: a POST to /mutate or /validate with a Content-Length within
  the body limit is answered from the parser's own callbacks (`Connection.on_message_complete`:
  the body, `Admissions.answer`, one write), with no RequestResponseCycle, task, ASGI messages or
  `Front` call. What that cycle gave an admission was bookkeeping: the answer is the same bytes
  (`Front`'s direct path calls the same function). Everything else (other paths and methods,
  chunked bodies, `Expect: 100-continue`, HTTP/1.0, a declared body over the limit, a request
  pipelined behind one still answered by the app) takes uvicorn's path.
uvicorn's own limit for a stop is set 2 s under gunicorn's `graceful_timeout`, so the worker
exits on its own and runs its exit hooks. The TLS handshake is bounded by uvloop's default
(60 s); a handshaking client holds a transport, not a thread.
"""

from __future__ import annotations

import sys

from gunicorn.arbiter import Arbiter
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import Server
from uvicorn_worker import UvicornWorker

from webhook.serving.asgi import BODY_COMPLETE, INTERNAL_ERROR, REQUEST_TIMEOUT, TOO_SLOW, Front, log as asgi_log

DRAIN_IDLE = 1.0
# The request line and headers of one request (an API server's are about 300 bytes); httptools
# itself has no limit, so a client could otherwise grow them without end.
MAX_HEAD = 64 * 1024
_TOO_LARGE_BODY = b'{"error":"request line and headers over %d bytes"}' % MAX_HEAD
_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_TOO_LARGE_BODY), _TOO_LARGE_BODY)
)


class Connection(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with the certificate check, the bounds, one write per response
    and the gentle stop."""

    tls = None  # the worker's ServingTLS, set on the subclass `connection_class` makes
    stopping = False  # set on that subclass when the worker begins to stop (`_Server.shutdown`)
    # path -> (endpoint, answer(endpoint, body) -> (status, JSON bytes)): `Front.direct`, set by
    # `connection_class`; and the body limit those answers have (`Front.max_body`)
    direct: dict = {}
    max_body = 0
    _in_head = False  # between the first byte of a request and the end of its headers
    _head_bytes = 0
    _head_deadline = None
    _admission = None  # (endpoint, answer, body chunks) of a direct admission being read
    _body_deadline = None

    def __init__(self, *args, **kwargs):
        if self.tls is not None:
            self.tls.refresh()  # before uvloop makes this connection's TLS session from the context
        super().__init__(*args, **kwargs)

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # uvicorn arms its idle timer only after a response: a client that connects and never
        # sends a request is closed after the same keep-alive time
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)
        if self.stopping:  # accepted just as the stop began, after uvicorn told the others
            self.shutdown()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._admission is not None and self._body_deadline is None and not self.transport.is_closing():
            # a direct admission's body is still coming: the same bound Front gives one
            self._body_deadline = self.loop.call_later(REQUEST_TIMEOUT, self._body_too_slow)
        if self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD:
                self.transport.write(_TOO_LARGE)
                self.transport.close()
            elif self._head_deadline is None:  # armed only for a head split over several reads
                self._head_deadline = self.loop.call_later(REQUEST_TIMEOUT, self._head_too_slow)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0

    def _head_too_slow(self) -> None:
        if self._in_head and not self.transport.is_closing():
            self.transport.close()

    def shutdown(self) -> None:
        if self._admission is not None:  # being read: answered with Connection: close (`stopping`)
            return
        if self.cycle is None or self.cycle.response_complete:
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(DRAIN_IDLE, self.timeout_keep_alive_handler)
        else:
            self.cycle.keep_alive = False

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None
        if self.direct and self._take_directly():
            return
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:  # the cycle made for this request
            out = cycle.transport = _OneWrite(self.transport)
            done = cycle.on_response

            def on_response() -> None:  # the response is complete: whatever is held goes out
                out.flush()
                done()

            cycle.on_response = on_response
            if self.stopping:
                cycle.keep_alive = False

    def _take_directly(self) -> bool:
        """Whether this request is an admission answered here (see the module docstring); if so,
        its body is gathered by `on_body` and answered by `on_message_complete`."""
        parser = self.parser
        if parser.get_method() != b"POST" or parser.get_http_version() != "1.1" or self.expect_100_continue:
            return False
        if self.pipeline or not (self.cycle is None or self.cycle.response_complete):
            return False  # behind a request the app is still answering: keep the order uvicorn keeps
        route = self.direct.get(self.url.partition(b"?")[0])
        if route is None:
            return False
        length = None
        for name, value in self.headers:
            if name == b"content-length":
                length = value
            elif name in (b"transfer-encoding", b"upgrade"):
                return False
        if length is None or not length.isdigit() or int(length) > self.max_body:
            return False  # chunked, absent or over the limit: Front's bounds and answers
        self._admission = (route[0], route[1], [])
        return True

    def on_body(self, body: bytes) -> None:
        if self._admission is not None:
            self._admission[2].append(body)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        admission = self._admission
        if admission is None:
            super().on_message_complete()
            self.scope[BODY_COMPLETE] = True  # `Front` need not arm its body deadline
            return
        self._end_admission()
        endpoint, answer, chunks = admission
        try:
            status, data = answer(endpoint, chunks[0] if len(chunks) == 1 else b"".join(chunks))
        except Exception:  # what Front answers: never a 500
            asgi_log.exception("unexpected error outside admission")
            status, data = 503, INTERNAL_ERROR
        self._respond(status, data, keep=not self.stopping and status != 413 and self.parser.should_keep_alive())

    def _respond(self, status: int, data: bytes, keep: bool) -> None:
        """A direct admission's answer (JSON) in one write; the connection then waits for the next
        request as after uvicorn's own responses (`on_response_complete`), or is closed."""
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\n" % len(data))
        if not keep:
            head.append(b"connection: close\r\n")
        head += [b"\r\n", data]
        self.transport.write(b"".join(head))
        self.server_state.total_requests += 1
        if not keep:
            self.transport.close()
        elif not self.transport.is_closing():
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def _end_admission(self) -> None:
        """No direct admission is being read any more: its body deadline goes."""
        self._admission = None
        if self._body_deadline is not None:
            self._body_deadline.cancel()
            self._body_deadline = None

    def _body_too_slow(self) -> None:
        self._body_deadline = None
        if self._admission is not None and not self.transport.is_closing():
            self._admission = None
            self._respond(408, TOO_SLOW, keep=False)

    def connection_lost(self, exc) -> None:
        self._end_admission()
        super().connection_lost(exc)


class _OneWrite:
    """The transport as one request's response cycle sees it. uvicorn writes a response's header
    block and its body in two `write` calls, and uvloop's TLS layer makes each its own TLS record
    and system call (9% of a worker's samples under load, benchmarks/hotpath.py). The header
    block is held and sent with the body (or alone when the response is complete without one); an
    interim `100 Continue` goes straight out."""

    __slots__ = ("_transport", "_held", "_first")

    def __init__(self, transport):
        self._transport, self._held, self._first = transport, None, True

    def write(self, data: bytes) -> None:
        if self._first and not data.startswith(b"HTTP/1.1 100 "):
            self._first, self._held = False, data  # the header block: the first write of a response
            return
        if self._held is not None:
            data, self._held = self._held + data, None
        self._transport.write(data)

    def flush(self) -> None:
        """Send what is held (the header block of a response without a body, as for HEAD)."""
        if self._held is not None:
            self._transport.write(self._held)
            self._held = None

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name):
        return getattr(self._transport, name)


def connection_class(tls, front: Front | None = None) -> type[Connection]:
    """The connection class of one worker: its TLS, and the admissions `front` answers without
    Flask, which the connection then answers without the ASGI cycle."""
    attrs = {"tls": tls}
    if front is not None:
        attrs.update(
            direct={path.encode("latin-1"): route for path, route in front.direct.items()}, max_body=front.max_body
        )
    return type("TLSConnection", (Connection,), attrs)


class _Server(Server):
    async def shutdown(self, sockets=None) -> None:
        self.config.http_protocol_class.stopping = True
        await super().shutdown(sockets)


class Worker(UvicornWorker):
    # proxy_headers off: the API server connects directly, and X-Forwarded-* must not be believed
    CONFIG_KWARGS = {
        "loop": "uvloop",
        "http": "httptools",
        "lifespan": "off",
        "access_log": False,
        "server_header": False,
        "proxy_headers": False,
    }

    async def _serve(self) -> None:
        # gunicorn's `ssl_context` setting is how `serve` hands over its ServingTLS; the context
        # uvicorn builds itself from gunicorn's certfile/keyfile is replaced by its live one.
        tls = self.cfg.ssl_context(self.cfg, None) if self.cfg.is_ssl else None
        flask_app = getattr(self.wsgi, "flask", None)  # set by webhook.serving.app.wsgi
        if flask_app is not None:
            # One application context for the worker's life, pushed before the server starts:
            # every connection and request task copies the context from here, and Flask pushes
            # an application context per request only when none of its app is current. Saves
            # the context, its `g`, two signals and a URL adapter per request (27K instructions
            # of 1,143K); the app keeps no per-request state in `g` and has no appcontext
            # teardown functions.
            flask_app.app_context().push()
        front = self.config.app = Front(self.wsgi)
        self.config.http = connection_class(tls, front)
        self.config.timeout_graceful_shutdown = max(1, self.cfg.graceful_timeout - 2)
        self.config.load()
        if tls is not None:
            self.config.ssl = tls.context
        server = _Server(config=self.config)
        self._install_sigquit_handler()
        await server.serve(sockets=self.sockets)
        if not server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)
