"""The ASGI front that uvicorn serves: the body is awaited, bounded, then the Flask (WSGI) app
runs inline on the event loop.

Why not an ASGI-to-WSGI adapter from a library (a2wsgi, asgiref): they hand every request to a
thread pool, and the thread hop costs more than the decision itself. Here the app runs on the
loop thread: the decision never waits on I/O, so nothing else could have run meanwhile anyway,
and one thread per worker means no GIL contention.

What bounds a request here: the whole body must arrive within REQUEST_TIMEOUT (the API server
gives up after timeoutSeconds <= 10 anyway; a client trickling its body holds one coroutine,
not a thread, and is answered 408) and may not exceed MAX_BODY (a declared length is checked
before anything is read, a chunked body as it arrives; 413). Both answers close the connection,
as does any 413 the app itself gives, so an unread body is never parsed as the next request.
The deadline is only armed when there is something to wait for: when the server marks the scope
with BODY_COMPLETE (webhook.serving.worker does once httptools has parsed the end of the request, the
usual case: the API server sends a review in one go), the body is read without one, which saves
a Timeout and a timer per admission.
The answer goes out as one `http.response.start` and one `http.response.body`, which uvicorn
writes to the transport together.

A POST to /mutate or /validate goes straight to `Admissions.answer`
(webhook.serving.admissions), the one door to an admission; another method on those paths is a
JSON 405 with `Allow: POST`, answered here. Flask, which serves everything else, has no admission
route: its request cycle cost about a third of an admission's instructions.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
from typing import Any, Callable

from webhook.serving.admissions import MAX_BODY

REQUEST_TIMEOUT = 10.0
# A scope key a server sets when the whole request body has been received before the app runs.
BODY_COMPLETE = "rdma_webhook.body_complete"

log = logging.getLogger("rdma_webhook.serve")

_JSON = (b"content-type", b"application/json")
# The bodies of a body deadline passed and of an unexpected error; the worker's own admissions
# (webhook.serving.worker) answer the same.
TOO_SLOW = b'{"error":"request body not received in time"}'
INTERNAL_ERROR = b'{"error":"internal error"}'
_CLOSE = (b"connection", b"close")
_ALLOW_POST = (b"allow", b"POST")
NOT_POST = b'{"error":"an AdmissionReview is sent with POST"}'
_SPECIAL = {b"content-type": "CONTENT_TYPE", b"content-length": "CONTENT_LENGTH"}


class TooLarge(Exception):
    pass


class Gone(Exception):
    """The client disconnected before its body was complete: nobody to answer."""


class Front:
    """The ASGI application uvicorn calls; `wsgi_app` is what `webhook.serving.app.wsgi` returns."""

    def __init__(self, wsgi_app: Callable[..., Any], timeout: float = REQUEST_TIMEOUT, max_body: int = MAX_BODY):
        self.app, self.timeout, self.max_body = wsgi_app, timeout, max_body
        admissions = getattr(wsgi_app, "admissions", None)  # webhook.serving.admissions.Admissions
        # path -> (endpoint, the function answering it): the admissions taken without Flask
        self.direct: dict[str, tuple[str, Callable[[str, bytes], tuple[int, bytes]]]] = (
            {path: (endpoint, admissions.answer) for path, endpoint in admissions.PATHS.items()}
            if admissions is not None
            else {}
        )

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":  # lifespan is off; websockets are refused by uvicorn itself
            return
        try:
            if scope.get(BODY_COMPLETE):  # nothing left to wait for: receive() returns at once
                body = await self._body(scope, receive)
            else:
                async with asyncio.timeout(self.timeout):
                    body = await self._body(scope, receive)
        except TimeoutError:
            await _answer(send, 408, [_JSON, _CLOSE], TOO_SLOW)
            return
        except TooLarge:
            await _answer(send, 413, [_JSON, _CLOSE], b'{"error":"request body over %d bytes"}' % self.max_body)
            return
        except Gone:
            return
        direct = self.direct.get(scope["path"])
        if direct is not None and scope["method"] != "POST":
            await _answer(send, 405, [_JSON, _ALLOW_POST], NOT_POST)
            return
        if direct is not None:
            try:
                status, data = direct[1](direct[0], body)
            except Exception:  # what Flask's error handler would answer: never a 500
                log.exception("unexpected error outside admission")
                status, data = 503, INTERNAL_ERROR
            headers = [_JSON, (b"content-length", b"%d" % len(data))]
            if status == 413:  # an unread body must not be parsed as the next request
                headers.append(_CLOSE)
            await _answer(send, status, headers, data)
            return
        status, headers, data = self._call(scope, body)
        await _answer(send, status, headers, data)

    async def _body(self, scope: dict, receive: Callable) -> bytes:
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body:
                raise TooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # http.disconnect
                raise Gone
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > self.max_body:
                    raise TooLarge
                chunks.append(chunk)
            if not message.get("more_body"):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _call(self, scope: dict, body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        server = scope.get("server") or ("", 0)
        client = scope.get("client") or ("", 0)
        environ: dict[str, Any] = {
            "REQUEST_METHOD": scope["method"],
            "SCRIPT_NAME": "",
            # ASGI's path is text (uvicorn percent-decodes it as UTF-8); WSGI's carries its bytes as
            # latin-1 characters (PEP 3333), which werkzeug encodes back: `/€` must not reach it as is
            "PATH_INFO": scope["path"].encode("utf-8", "replace").decode("latin-1"),
            "QUERY_STRING": scope["query_string"].decode("latin-1"),
            "SERVER_NAME": server[0],
            "SERVER_PORT": str(server[1]),
            "SERVER_PROTOCOL": "HTTP/" + scope["http_version"],
            "REMOTE_ADDR": client[0],
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": scope["scheme"],
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": False,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        for name, value in scope["headers"]:
            key = _SPECIAL.get(name) or "HTTP_" + name.decode("latin-1").upper().replace("-", "_")
            text = value.decode("latin-1")
            environ[key] = f"{environ[key]},{text}" if key in environ else text
        environ["CONTENT_LENGTH"] = str(len(body))  # the body as read, whatever was declared
        answer: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            answer[:] = [int(status[:3]), headers]

        data = b"".join(self.app(environ, start_response))
        status, headers = answer
        encoded = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        if status == 413:
            encoded.append(_CLOSE)
        return status, encoded, data


async def _answer(send: Callable, status: int, headers: list[tuple[bytes, bytes]], data: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
