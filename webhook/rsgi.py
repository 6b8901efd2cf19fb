"""granian's RSGI interface in front of the WSGI app (the `granian-rsgi` serving candidate).

Why: under granian's WSGI interface the app reads the body itself, in one of the worker's few
Python threads, and granian has no body read timeout (emmett-framework/granian#728, closed as
won't fix): a client trickling its body holds that thread, and 4 of them stop every admission.
Here each worker has one Python thread running an event loop; the body is awaited from the Rust
core, bounded by `REQUEST_TIMEOUT` and `MAX_BODY`, so a slow client holds only a coroutine. Once
the body is complete, the Flask app runs on the loop thread: the decision never waits on I/O,
so nothing else would have run in the meantime anyway.

What is handed to the app is a plain WSGI environ with the body in a BytesIO; the answer goes
back in one `response_bytes` call. A body over the limit or too slow is answered here (413,
408) and the connection is closed. Needs Python 3.11 or newer (`asyncio.timeout`).

Not production-ready (benchmarks/README.md): granian reads the certificate once per worker, so a
rotation needs a worker respawn, which `serve` does not do.
"""

from __future__ import annotations

import asyncio
import io
import sys
from typing import Any, Callable

from webhook.app import MAX_BODY
from webhook.worker import REQUEST_TIMEOUT

_CLOSE = [("content-type", "application/json"), ("connection", "close")]
_SPECIAL = {"content-type": "CONTENT_TYPE", "content-length": "CONTENT_LENGTH"}


class Front:
    """The RSGI application granian calls; `wsgi_app` is what `webhook.app.wsgi` returns."""

    def __init__(self, wsgi_app: Callable[..., Any], timeout: float = REQUEST_TIMEOUT, max_body: int = MAX_BODY):
        self.app, self.timeout, self.max_body = wsgi_app, timeout, max_body

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._body(scope, proto)
        except TimeoutError:
            proto.response_bytes(408, _CLOSE, b'{"error":"request body not received in time"}')
            return
        if body is None:
            proto.response_bytes(413, _CLOSE, b'{"error":"request body over %d bytes"}' % self.max_body)
            return
        status, headers, data = self._call(scope, body)
        proto.response_bytes(status, headers, data)

    async def _body(self, scope: Any, proto: Any) -> bytes | None:
        """The whole body, or None when it is over the limit (a declared length is checked
        before anything is read; a chunked body as it arrives)."""
        length = scope.headers.get("content-length")
        if length is not None and length.isdigit():
            if int(length) > self.max_body:
                return None
            return await proto()
        chunks, size = [], 0
        async for chunk in proto:
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    def _call(self, scope: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        server_host, _, server_port = scope.server.rpartition(":")
        environ = {
            "REQUEST_METHOD": scope.method, "SCRIPT_NAME": "", "PATH_INFO": scope.path,
            "QUERY_STRING": scope.query_string, "SERVER_NAME": server_host, "SERVER_PORT": server_port,
            "SERVER_PROTOCOL": f"HTTP/{scope.http_version}", "REMOTE_ADDR": scope.client.rpartition(":")[0],
            "wsgi.version": (1, 0), "wsgi.url_scheme": scope.scheme, "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr, "wsgi.multithread": False, "wsgi.multiprocess": True, "wsgi.run_once": False,
        }
        for name, value in scope.headers.items():
            key = _SPECIAL.get(name) or "HTTP_" + name.upper().replace("-", "_")
            environ[key] = f"{environ[key]},{value}" if key in environ else value
        if "CONTENT_LENGTH" not in environ:
            environ["CONTENT_LENGTH"] = str(len(body))
        answer: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            answer[:] = [int(status[:3]), headers]

        data = b"".join(self.app(environ, start_response))
        return answer[0], answer[1], data
