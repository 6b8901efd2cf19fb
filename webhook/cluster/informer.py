"""One informer, as client-go's reflector and watch make one: a resource kind listed, then watched,
into a dict that request threads read without a lock. `webhook.cluster.api.ApiClusterState` keeps
one per kind it follows (its DRA kinds through `webhook.cluster.dra_watch`) and
`webhook.cluster.admission_policies` two more; both import it from here, so neither imports the
other for it.

The loop, in a daemon thread started by `start()` (never before: the owner is built in the
gunicorn master, and sockets or threads must not cross the fork):

    list (replace the cache wholesale, record resourceVersion)
    -> watch from it (allowWatchBookmarks, timeoutSeconds so it cycles), apply each event
    -> 410 Gone (an ERROR event or an HTTP 410): list again
    -> any other error or a broken connection: watch again after a backoff of 0.5 s doubling
       up to 30 s (the owner's `backoff_min` and `backoff_max`), with jitter, reset after a
       success; admissions are answered from the cache
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable, Hashable, Mapping, Protocol

import orjson
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from webhook.cluster.listing import METADATA_DECODERS, METADATA_LIST

log = logging.getLogger("rdma_webhook.cluster")

GONE, NOT_FOUND, TIMEOUT = 410, 404, 504
# A cache whose list or watch has failed this many times in a row, for longer than the state's
# `stale_after`, is stale: `ready()` is False (with the reason in `not_ready_reason()`), so that
# a replica whose watch is refused (a missing RBAC verb) or broken stops serving decisions from a
# cache that no longer follows the cluster, instead of serving them without a word.
STALE_FAILURES = 3


class Owner(Protocol):
    """What an informer reads of the state that owns it (`webhook.cluster.api.ApiClusterState`):
    its timeouts and backoff, its clock, the event that stops every thread, and where a change
    of readiness is recorded."""

    backoff_min: float
    backoff_max: float
    connect_timeout: float
    watch_timeout: int
    page_size: int
    list_from_cache: bool
    clock: Callable[[], float]
    _stopping: threading.Event

    def _record_ready(self) -> None: ...


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}".strip()
    return f"{type(exc).__name__}: {exc}"


class _ShortWatch(Exception):
    """The server ended a watch at once without sending anything (treated like an error, so a
    misbehaving proxy cannot make us re-watch in a tight loop)."""


class Informer:
    """One resource kind: list, then watch, into `items` (read lock-free by request threads)."""

    def __init__(
        self,
        owner: Owner,
        kind: str,
        list_call: Callable[..., Any],
        args: tuple[Any, ...],
        key: Callable[[Mapping[str, Any]], Hashable],
        value: Callable[[Mapping[str, Any]], Any],
        optional: bool = False,
        metadata_only: bool = False,
    ):
        self.owner, self.kind, self.list_call, self.args, self.key, self.value = (
            owner,
            kind,
            list_call,
            args,
            key,
            value,
        )
        self.metadata_only = metadata_only  # lists ask for PartialObjectMetadataList (METADATA_LIST)
        # the kinds with many objects keep a few fields of each, decoded as such (webhook.cluster.listing)
        self.decode: Callable[[bytes], Any] = (
            METADATA_DECODERS.get(kind, orjson.loads) if metadata_only else orjson.loads
        )
        self.list_kind: str | None = None  # the `kind` of the last list page the server sent
        self.optional = optional  # a CRD that may not be installed: a 404 is expected, not an error
        self.absent_logged = False
        self.absent = False  # an optional kind the server answered 404 for (not served)
        self.items: dict[Hashable, Any] = {}
        self.synced = False  # the first list completed
        self.resource_version: str | None = None
        # The resourceVersion a list asks for (webhook.cluster.listing): "0" the watch cache as it
        # is (the first list); after a 410 the version last seen, which the cache serves once it
        # holds it (the cache never goes back in time); "" etcd, once the cache could not serve it.
        self.relist_version = "0"
        self.listed_version: str | None = None
        self.lists = 0
        self.pages = 0  # list requests made, pages of every list
        self.list_seconds = 0.0  # how long the last complete list took (prime logs it)
        # Consecutive failed lists/watches, since when, and the last error: a cache whose watch
        # keeps failing goes stale without a word (see `stale_for` and `ApiClusterState.ready`).
        self.failures = 0
        self.failing_since: float | None = None
        self.last_error = ""
        self.watching_since: float | None = None  # a watch request is open since then
        self.removals = 0  # DELETED events and relists, so a direct read can tell it may be stale
        self.watch: watch.Watch | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.watch is None:
            self.watch = watch.Watch(return_type="object")  # events as plain dicts
        self.thread = threading.Thread(target=self.run, name=f"watch-{self.kind}", daemon=True)
        self.thread.start()

    def run(self) -> None:
        owner = self.owner
        delay = owner.backoff_min
        while not owner._stopping.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                    delay = owner.backoff_min
                self.watch_once()
                delay = owner.backoff_min  # the watch ran its course
                self.succeeded()
                continue
            except ApiException as exc:
                if exc.status == GONE:
                    stale = self.resource_version
                    self.resource_version = None
                    self.relist_version = stale or "0"  # from the cache once it holds what was seen
                    if stale != self.listed_version:  # expired after some progress: list at once
                        log.info("%s: resourceVersion %s expired; listing again", self.kind, stale)
                        continue
                    error: BaseException = exc  # 410 straight after a list: back off
                elif exc.status == NOT_FOUND and self.optional:
                    self.absent = True
                    self.owner._record_ready()
                    if not self.absent_logged:
                        self.absent_logged = True
                        log.info(
                            "%s: not served by this cluster (CRD not installed); looking again every %.0fs",
                            self.kind,
                            owner.backoff_max,
                        )
                    owner._stopping.wait(owner.backoff_max)
                    continue
                else:
                    error = exc
            except Exception as exc:  # connection refused or broken, read timeout, bad JSON ...
                error = exc
            if owner._stopping.is_set():
                break
            self.failed(error)
            pause = random.uniform(delay / 2, delay)
            log.warning(
                "%s: list/watch failed (%s); retrying in %.2fs, answering from the cache",
                self.kind,
                describe(error),
                pause,
            )
            owner._stopping.wait(pause)
            delay = min(delay * 2, owner.backoff_max)

    def failed(self, error: BaseException) -> None:
        self.failures += 1
        if self.failing_since is None:
            self.failing_since = self.owner.clock()
        self.last_error = describe(error)
        self.owner._record_ready()

    def succeeded(self) -> None:
        if self.failures:
            self.failures, self.failing_since = 0, None
            self.owner._record_ready()

    def stale_for(self, now: float) -> float:
        """Seconds this informer has failed without a success in between (0 when it has not). A
        watch open for longer than a connection can take to fail is a success, events or not: a
        quiet cluster sends none."""
        if self.failures < STALE_FAILURES or self.failing_since is None:
            return 0.0
        watching = self.watching_since
        if watching is not None and now - watching > self.owner.connect_timeout + 1.0:
            return 0.0
        return now - self.failing_since

    def relist(self, deadline: float | None = None) -> None:
        """List as client-go's reflector does: from the API server's watch cache when it has one
        (`relist_version`; the cache answers the whole list at once), else in pages of
        `owner.page_size` (`limit` and `continue`), one page's body held at a time. A continue
        token that expires (410) fails the list, which the loop retries from the start. Past
        `deadline` (time.monotonic()) the list gives up with TimeoutError, the cache as it was."""
        items: dict[Hashable, Any] = {}
        token: str | None = None
        version: str | None = None
        began = time.monotonic()
        while True:
            read_timeout = 60.0
            if deadline is not None:
                read_timeout = min(read_timeout, deadline - time.monotonic())
                if read_timeout <= 0:
                    raise TimeoutError(f"{self.kind}: list not done by its deadline ({self.pages} pages)")
            kwargs: dict[str, Any] = {
                "limit": self.owner.page_size,
                "_preload_content": False,
                "_request_timeout": (self.owner.connect_timeout, read_timeout),
            }
            if token:
                kwargs["_continue"] = token
            elif self.owner.list_from_cache and self.relist_version:
                kwargs["resource_version"] = self.relist_version
            if self.metadata_only:
                kwargs["_headers"] = {"Accept": METADATA_LIST}
            try:
                resp = self.list_call(*self.args, **kwargs)
            except ApiException as exc:
                if not token and exc.status in (GONE, TIMEOUT):  # the cache cannot serve that version
                    self.relist_version = ""  # the next list reads etcd, as client-go's reflector does
                raise
            try:
                doc = self.decode(resp.data)
            finally:
                resp.release_conn()
            for obj in doc.get("items") or ():
                items[self.key(obj)] = self.value(obj)
            meta = doc.get("metadata") or {}
            version = str(meta.get("resourceVersion") or "") or None  # every page: the snapshot's
            token = meta.get("continue") or None
            self.pages += 1
            self.list_kind = str(doc.get("kind") or "") or None
            del doc, resp
            if not token:
                break
        self.items = items  # one assignment: readers see the old dict or the new one
        self.absent = False
        self.removals += 1
        self.resource_version = self.listed_version = version
        self.lists, self.list_seconds = self.lists + 1, time.monotonic() - began
        self.succeeded()
        if not self.synced:
            self.synced = True
            log.info("%s: cache synced (%d objects)", self.kind, len(items))
        self.owner._record_ready()

    def watch_once(self) -> None:
        owner = self.owner
        started, seen, w = time.monotonic(), False, self.watch
        assert w is not None
        stream = w.stream(
            self.list_call,
            *self.args,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=owner.watch_timeout,
            _request_timeout=(owner.connect_timeout, owner.watch_timeout + 30),
        )
        self.watching_since = owner.clock()
        try:
            for event in stream:
                if owner._stopping.is_set():
                    w.stop()
                    break
                seen = True
                if self.failures:  # the watch works again
                    self.succeeded()
                self.apply(event.get("type"), event.get("raw_object") or {})
        finally:
            self.watching_since = None
        if not seen and not owner._stopping.is_set() and time.monotonic() - started < 1.0:
            raise _ShortWatch("the watch ended at once")

    def apply(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if kind in ("ADDED", "MODIFIED"):
            self.items[self.key(obj)] = self.value(obj)  # single-key updates are atomic under the GIL
        elif kind == "DELETED":
            self.removals += 1
            self.items.pop(self.key(obj), None)
        # BOOKMARK carries only metadata.resourceVersion
        if meta.get("resourceVersion"):
            self.resource_version = str(meta["resourceVersion"])
