"""The gunicorn worker `serve` runs: gevent, one greenlet per connection, with deadlines.

Why gevent rather than gunicorn's thread worker: a thread worker gives every open connection a
thread from a small pool, so a handful of clients that connect and send nothing, or trickle a
body a byte at a time, leave no thread for the API server (tests/test_hostile.py showed 8 such
clients making the webhook unreachable). A greenlet per connection costs a few kilobytes, so
idle and slow clients wait on their own. It is also lighter per request (benchmarks/README.md).

What bounds each connection:
- the TLS handshake must finish within HANDSHAKE_TIMEOUT (the server wraps sockets without
  handshaking, see `webhook.tls`, so the handshake runs here, under a timer);
- a request line and headers must arrive within gunicorn's `keepalive` (its own timer);
- reading the body, deciding and answering must finish within REQUEST_TIMEOUT, after which the
  connection is closed: the API server has given up by then anyway (timeoutSeconds <= 10);
- an answer given before the body was read (413) closes the connection instead of letting
  gunicorn read the rest of the body to reuse it (`close_after_response`).
"""

from __future__ import annotations

import ssl

import gevent
from gunicorn.workers.ggevent import GeventWorker

HANDSHAKE_TIMEOUT = 5.0
REQUEST_TIMEOUT = 10.0

_serving: dict[object, object] = {}  # greenlet -> the gunicorn request it is answering


def close_after_response() -> None:
    """Ask the worker to close this connection once the current answer is sent (the app calls
    it when it refuses a body it has not read). Does nothing outside this worker."""
    req = _serving.get(gevent.getcurrent())
    if req is not None:
        req.must_close = True


class Worker(GeventWorker):
    def run(self):
        # gunicorn asks the listening socket for its address for every request; during a
        # graceful stop the listener is already closed while connections accepted just before
        # are still being served, and that call would fail and drop them unanswered. Ask once
        # (here, after gevent's patching replaced the worker's sockets).
        self._listeners = {id(s): _NamedListener(s) for s in self.sockets}
        super().run()

    def handle(self, listener, client, addr):
        listener = self._listeners.get(id(listener), listener)
        if isinstance(client, ssl.SSLSocket):
            try:
                with gevent.Timeout(HANDSHAKE_TIMEOUT):
                    client.do_handshake()
            except (gevent.Timeout, OSError):  # ssl.SSLError is an OSError
                _close(client)
                return
        super().handle(listener, client, addr)

    def handle_request(self, listener_name, req, sock, addr):
        deadline = gevent.Timeout(REQUEST_TIMEOUT)
        deadline.start()
        me = gevent.getcurrent()
        _serving[me] = req
        out = _OneWrite(sock)
        try:
            return super().handle_request(listener_name, req, out, addr)
        except gevent.Timeout as exc:
            if exc is not deadline:
                raise
            self.log.warning("request from %s not done within %.0f s; connection closed", addr, REQUEST_TIMEOUT)
            _close(sock)
            raise StopIteration() from None
        finally:
            out.flush()
            deadline.close()
            _serving.pop(me, None)


class _OneWrite:
    """The client socket as gunicorn's response sees it, for one request: gunicorn sends the
    header block and the body in two writes, each its own TLS record and system call (a sixth of
    a worker's time under load went to `SSLSocket.send`, benchmarks/hotpath.py). The header
    block, always the first write of a response, is held and sent with the first body bytes;
    `flush()` sends whatever is still held (a response without a body, an error answer) when
    the request is done. Everything else goes straight to the socket."""

    __slots__ = ("_sock", "_held", "_first")

    def __init__(self, sock):
        self._sock, self._held, self._first = sock, None, True

    def sendall(self, data) -> None:
        if self._first:
            self._first, self._held = False, bytes(data)
            return
        if self._held is not None:
            data, self._held = self._held + data, None
        self._sock.sendall(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            try:
                self._sock.sendall(held)
            except OSError:  # the connection is gone; gunicorn has dealt with it
                pass

    def __getattr__(self, name):
        return getattr(self._sock, name)


class _NamedListener:
    """A listening socket whose address is read once, while it is open."""

    def __init__(self, sock):
        self._sock, self._name = sock, sock.getsockname()

    def getsockname(self):
        return self._name

    def __getattr__(self, name):
        return getattr(self._sock, name)


def _close(sock) -> None:
    try:
        sock.close()
    except OSError:
        pass
