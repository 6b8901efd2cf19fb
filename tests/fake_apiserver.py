"""A local stand-in for the Kubernetes API server, for the few calls `ApiClusterState` makes.

Plain HTTP on 127.0.0.1 (an ephemeral port), one thread per connection:

    GET /api/v1/namespaces                                   list
    GET /api/v1/namespaces?watch=true&resourceVersion=N      watch (chunked JSON lines)
    GET /api/v1/namespaces/{name}                            get (404 Status when missing)
    GET /apis/k8s.cni.cncf.io/v1/network-attachment-definitions            list
    GET /apis/k8s.cni.cncf.io/v1/network-attachment-definitions?watch=true watch
    GET /apis/trainer.kubeflow.org/v1alpha1/{trainingruntimes,clustertrainingruntimes}  list, watch
        (404 unless `trainer` is set: a cluster without Kubeflow Trainer)

Lists honour `limit` and `continue` as the real server does: the first page takes a snapshot at
the current resourceVersion (items in key order), every later page is served from that snapshot
with the same resourceVersion, `metadata.continue` and `remainingItemCount` until the last page;
a continue token from before a `compact()` gets 410 Expired, as etcd's compaction makes it.
`page_hook(kind, n)` (test-side) runs after the n-th list request of that kind is answered, to
change the cluster between pages. `continues[kind]` counts the pages asked for with a continue token.
With `watch_cache` set, a list asking for resourceVersion "0" is answered whole, as the real
watch cache answers it; `list_versions[kind]` records the resourceVersion each list asked for
(None: not given), and `list_errors[kind]` fails the next lists with the statuses it holds.

Objects share one global resourceVersion, as in etcd. Every change is appended to an event log;
a watch sends the log entries after its resourceVersion, then waits for more. Test-side controls:
`put_*`/`delete_*` (change an object and push the event to open watches), `bookmark()`,
`compact()` (a watch from an older resourceVersion gets 410 Gone, as an ERROR event or as an HTTP
410 depending on `gone_as`), `drop_watches()` (close open watches without the final chunk),
`pause_watches()` (new watches get 503 until resumed), `lists_gate`/`gets_gate` (clear one to
hold list/get requests) and `count(...)` (requests per kind).

What it is still for. The real kube-apiserver runs in the end-to-end suite (e2e/, `make e2e`):
list+watch over TLS with the ServiceAccount token and the RBAC of deploy/, /readyz waiting on the
cache sync, NetworkAttachmentDefinition and namespace changes reaching decisions, the relist after
an etcd compaction and an apiserver restart are all checked there. This stand-in remains for the
faults a real server cannot be made to produce on demand, at a chosen moment:

- a 410 Gone at a chosen moment (`compact()`), delivered as an ERROR event or as an HTTP 410 as
  the test chooses (`gone_as`);
- bookmarks sent when the test says (`bookmark()`), not at the server's own pace;
- a watch cut mid-stream without the final chunk (`drop_watches()`);
- watches refused with 503 for as long as the test wants (`pause_watches()`);
- lists and gets held open (`lists_gate`/`gets_gate`), for the read timeouts and the coalescing of
  direct namespace reads;
- exact request counts per kind (`count(...)`), for how many GETs a storm of pods causes;
- paging at any page size, a change between two pages (`page_hook`) and a continue token expired
  by a compaction at a chosen page (the real server's 500-object pages need 500 objects a page).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
import re
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

NS, NAD, TR, CTR = "namespaces", "nads", "trainingruntimes", "clustertrainingruntimes"
NAD_PREFIX = "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions"
TRAINER_PREFIX = "/apis/trainer.kubeflow.org/v1alpha1/"
_NS_ITEM = re.compile(r"^/api/v1/namespaces/([^/]+)$")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeApiServer:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.rv = 100
        self.compacted = 0  # a watch from a resourceVersion below this gets 410 Gone
        self.objects: dict[str, dict[Any, dict[str, Any]]] = {NS: {}, NAD: {}, TR: {}, CTR: {}}
        self.log: dict[str, list[tuple[int, str, dict[str, Any]]]] = {NS: [], NAD: [], TR: [], CTR: []}
        self.trainer = False  # serve the Trainer runtime kinds (else 404, as without the CRDs)
        self.requests: collections.Counter[str] = collections.Counter()
        self.gone_as = "event"  # or "http"
        self.lists_gate = threading.Event()  # clear it to hold list requests until it is set again
        self.gets_gate = threading.Event()  # the same for GET of one namespace
        self.lists_gate.set()
        self.gets_gate.set()
        self._drop_generation = 0
        self._paused = False
        self._closed = False
        self._snapshots: dict[str, tuple[int, list[dict[str, Any]]]] = {}  # continue token id -> (rv, items)
        self.page_hook: Any = None  # page_hook(kind, n) after the n-th list request of kind is answered
        self.continues: collections.Counter[str] = collections.Counter()
        # As a server with a watch cache for the kind: a list asking for resourceVersion "0" is
        # answered whole, whatever its limit (the real cache does not page). Off: the server pages
        # every list, as one started with --watch-cache=false does.
        self.watch_cache = False
        self.list_versions: collections.defaultdict[str, list[str | None]] = collections.defaultdict(list)
        self.list_errors: collections.defaultdict[str, list[int]] = collections.defaultdict(list)
        self._open_watches = 0
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-apiserver", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> "FakeApiServer":
        self._thread.start()
        return self

    def close(self) -> None:
        self.lists_gate.set()
        self.gets_gate.set()
        with self.cond:
            self._closed = True
            self.cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    # --- test-side controls -------------------------------------------------------------------

    def _change(self, kind: str, key: Any, obj: dict[str, Any] | None) -> None:
        """Store `obj` under `key` (ADDED or MODIFIED), or delete `key` when `obj` is None."""
        with self.cond:
            self.rv += 1
            if obj is None:
                event, obj = "DELETED", self.objects[kind].pop(key)
            else:
                event = "MODIFIED" if key in self.objects[kind] else "ADDED"
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            if event != "DELETED":
                self.objects[kind][key] = obj
            self.log[kind].append((self.rv, event, obj))
            self.cond.notify_all()

    def put_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        obj = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "labels": {"kubernetes.io/metadata.name": name, **(labels or {})},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        self._change(NS, name, obj)

    def delete_namespace(self, name: str) -> None:
        self._change(NS, name, None)

    def put_nad(self, namespace: str, name: str, annotations: dict[str, str] | None = None) -> None:
        obj = {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
            "spec": {"config": '{"cniVersion": "0.3.1", "type": "sriov"}'},
        }
        self._change(NAD, (namespace, name), obj)

    def delete_nad(self, namespace: str, name: str) -> None:
        self._change(NAD, (namespace, name), None)

    def put_runtime(self, obj: dict[str, Any]) -> None:
        """Store a TrainingRuntime or ClusterTrainingRuntime (by its kind)."""
        meta = obj["metadata"]
        kind = CTR if obj["kind"] == "ClusterTrainingRuntime" else TR
        self._change(kind, meta["name"] if kind == CTR else (meta["namespace"], meta["name"]), obj)

    def delete_runtime(self, kind: str, name: str, namespace: str = "") -> None:
        self._change(
            CTR if kind == "ClusterTrainingRuntime" else TR, name if not namespace else (namespace, name), None
        )

    def bookmark(self) -> None:
        """A BOOKMARK at the current resourceVersion on every kind's open watches."""
        with self.cond:
            for kind in (NS, NAD):
                self.log[kind].append(
                    (self.rv, "BOOKMARK", {"kind": "Bookmark", "metadata": {"resourceVersion": str(self.rv)}})
                )
            self.cond.notify_all()

    def compact(self) -> None:
        """Forget history: watches from any resourceVersion before now get 410 Gone."""
        with self.cond:
            self.rv += 1
            self.compacted = self.rv

    def drop_watches(self) -> None:
        """Close every open watch abruptly (no terminating chunk), like a broken connection."""
        with self.cond:
            self._drop_generation += 1
            self.cond.notify_all()

    @contextlib.contextmanager
    def pause_watches(self) -> Iterator[None]:
        """Open watches are dropped and new ones answered 503 inside the block."""
        with self.cond:
            self._paused = True
        self.drop_watches()
        try:
            yield
        finally:
            with self.cond:
                self._paused = False

    def count(self, prefix: str = "") -> int:
        """Requests whose kind ("list namespaces", "watch nads", "get namespaces/x") starts with prefix."""
        with self.cond:
            return sum(n for k, n in self.requests.items() if k.startswith(prefix))

    def open_watches(self) -> int:
        with self.cond:
            return self._open_watches

    # --- serving ------------------------------------------------------------------------------

    def _list_doc(self, kind: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) of one list request: the whole list, or one page of a snapshot."""
        limit = int((query.get("limit") or ["0"])[0] or 0)
        token = (query.get("continue") or [""])[0]
        version = (query.get("resourceVersion") or [None])[0]
        with self.cond:
            if token and version:
                return 400, _status(400, "BadRequest", "specifying resource version is not allowed when using continue")
            if not token:
                self.list_versions[kind].append(version)  # what each list's first request asked for
                if self.list_errors[kind]:  # test-side: fail the next first requests with these statuses
                    status = self.list_errors[kind].pop(0)
                    return status, _status(
                        status, "Timeout" if status == 504 else "Expired", f"list refused with {status}"
                    )
                if self.watch_cache and version == "0":
                    limit = 0
            if token:
                self.continues[kind] += 1
                snap_id, _, offset_text = token.partition(":")
                snapshot = self._snapshots.get(snap_id)
                if snapshot is None or not offset_text.isdigit():
                    return 400, _status(400, "BadRequest", f"invalid continue token {token!r}")
                rv, items = snapshot
                if rv < self.compacted:
                    return 410, _status(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a "
                        "consistent list result. You can start a new list without "
                        "the continue parameter.",
                    )
                offset = int(offset_text)
            else:
                rv = self.rv
                items = [copy.deepcopy(o) for _, o in sorted(self.objects[kind].items(), key=lambda kv: str(kv[0]))]
                offset, snap_id = 0, f"{kind}-{rv}-{len(self._snapshots)}"
            page = items[offset : offset + limit] if limit > 0 else items[offset:]
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if limit > 0 and offset + limit < len(items):
                self._snapshots[snap_id] = (rv, items)
                meta["continue"] = f"{snap_id}:{offset + limit}"
                meta["remainingItemCount"] = len(items) - offset - limit
        list_kind = {
            NS: "NamespaceList",
            NAD: "NetworkAttachmentDefinitionList",
            TR: "TrainingRuntimeList",
            CTR: "ClusterTrainingRuntimeList",
        }[kind]
        api_version = {NS: "v1", NAD: "k8s.cni.cncf.io/v1"}.get(kind, "trainer.kubeflow.org/v1alpha1")
        return 200, {"kind": list_kind, "apiVersion": api_version, "metadata": meta, "items": page}

    def _watch(self, handler: "BaseHTTPRequestHandler", kind: str, query: dict[str, list[str]]) -> None:
        since = int((query.get("resourceVersion") or ["0"])[0] or 0)
        timeout = float((query.get("timeoutSeconds") or ["300"])[0])
        with self.cond:
            paused, generation = self._paused, self._drop_generation
            gone = (
                _status(410, "Expired", f"too old resource version: {since} ({self.compacted})")
                if since < self.compacted
                else None
            )
            pos = next((i for i, e in enumerate(self.log[kind]) if e[0] > since), len(self.log[kind]))
        if paused:
            return handler.send_json(503, _status(503, "ServiceUnavailable", "paused by the test"))
        if gone and self.gone_as == "http":
            return handler.send_json(410, gone)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        if gone:
            handler.send_chunk({"type": "ERROR", "object": gone})
            return handler.end_chunks()
        deadline = time.monotonic() + timeout
        with self.cond:
            self._open_watches += 1
        try:
            while True:
                with self.cond:
                    while (
                        pos >= len(self.log[kind])
                        and generation == self._drop_generation
                        and not self._closed
                        and time.monotonic() < deadline
                        and not handler.client_gone()
                    ):
                        self.cond.wait(0.05)
                    if generation != self._drop_generation or self._closed or handler.client_gone():
                        return handler.abort()
                    pending = self.log[kind][pos:]
                    pos = len(self.log[kind])
                for _, event, obj in pending:
                    handler.send_chunk({"type": event, "object": obj})
                if time.monotonic() >= deadline:
                    return handler.end_chunks()
        except OSError:  # the client went away
            return None
        finally:
            with self.cond:
                self._open_watches -= 1


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client that went away is not news
            super().handle_error(request, client_address)


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet handler that answers with one JSON document (also the chart test's stand-in's)."""

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def send_json(self, code: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _handler_for(server: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def send_chunk(self, doc: dict[str, Any]) -> None:
            data = json.dumps(doc).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def end_chunks(self) -> None:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def client_gone(self) -> bool:
            """The client closed its end (it sends nothing on a watch, so readable means EOF)."""
            try:
                readable, _, _ = select.select([self.connection], [], [], 0)
                return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

        def abort(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            watching = (query.get("watch") or [""])[0] == "true"
            kind = NS if url.path == "/api/v1/namespaces" else NAD if url.path == NAD_PREFIX else None
            if url.path.startswith(TRAINER_PREFIX) and url.path[len(TRAINER_PREFIX) :] in (TR, CTR) and server.trainer:
                kind = url.path[len(TRAINER_PREFIX) :]
            item = _NS_ITEM.match(url.path)
            if kind:
                label = f"{'watch' if watching else 'list'} {kind}"
            else:
                label = f"get namespaces/{item.group(1)}" if item else f"other {url.path}"
            with server.cond:
                server.requests[label] += 1
            if kind and watching:
                server._watch(self, kind, query)
            elif kind:
                server.lists_gate.wait(10)
                code, doc = server._list_doc(kind, query)
                self.send_json(code, doc)
                if server.page_hook is not None:
                    with server.cond:
                        page = server.requests[label]
                    server.page_hook(kind, page)
            elif item:
                server.gets_gate.wait(30)  # an unbounded client read would wait this long
                with server.cond:
                    obj = copy.deepcopy(server.objects[NS].get(item.group(1)))
                if obj is None:
                    self.send_json(404, _status(404, "NotFound", f'namespaces "{item.group(1)}" not found'))
                else:
                    self.send_json(200, obj)
            else:
                self.send_json(404, _status(404, "NotFound", "the server could not find the requested resource"))

    return Handler
