"""webhook.cluster.informer in process, without a server or a thread: an `Informer` driven with a
stand-in owner (its clock and its stop event are the test's), a list call that answers as the API
server does (pages, continue tokens, 410 and 504) and a watch whose events are the test's. The loop
`run` is driven through the owner's stop event, which is where it waits: no test sleeps.
tests/cluster/test_api.py runs the same code against the HTTP stand-in server."""

from __future__ import annotations

import logging
from typing import Any, Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from tests.cluster.stand_ins import Owner, Resp
from webhook.cluster import informer as inf
from webhook.cluster.listing import METADATA_LIST, nad_key, nad_value, ns_key
from webhook.cluster.state import namespace_from
from webhook.core.keys import NAD_RESOURCE_NAME


def page(items: list[dict], version: str = "100", token: str | None = None, kind: str = "NamespaceList") -> dict:
    meta: dict[str, Any] = {"resourceVersion": version}
    if token is not None:
        meta["continue"] = token
    return {"kind": kind, "apiVersion": "v1", "metadata": meta, "items": items}


def ns(name: str, rv: str = "1", **labels: str) -> dict:
    # a Namespace as the API server sends it (list item or watch event object)
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "resourceVersion": rv,
            "labels": {"kubernetes.io/metadata.name": name, **labels},
            "managedFields": [{"manager": "kubectl-create", "operation": "Update"}],
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


class Lister:
    """A list call: answers in turn (a body, or an exception to raise), recording each call."""

    def __init__(self, *answers: Any):
        self.answers, self.calls, self.responses = list(answers), [], []

    def __call__(self, *args: Any, **kwargs: Any) -> Resp:
        self.calls.append((args, kwargs))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        self.responses.append(Resp(answer))
        return self.responses[-1]


class FakeWatch:
    """A watch: each `stream` call yields the next batch of events or raises the next exception."""

    def __init__(self, *batches: Any, owner: Owner | None = None, stop_after: int | None = None):
        self.batches, self.calls, self.stopped = list(batches), [], 0
        self.owner, self.stop_after = owner, stop_after

    def stream(self, func: Any, *args: Any, **kwargs: Any) -> Iterator[dict]:
        self.calls.append((func, args, kwargs))
        batch = self.batches.pop(0) if self.batches else []
        if isinstance(batch, BaseException):
            raise batch
        return self._events(batch)

    def _events(self, batch: list[dict]) -> Iterator[dict]:
        for n, event in enumerate(batch):
            if self.stop_after is not None and n == self.stop_after and self.owner is not None:
                self.owner._stopping.set()
            yield event

    def stop(self) -> None:
        self.stopped += 1


def namespaces(owner: Owner, lister: Lister, **kw: Any) -> inf.Informer:
    return inf.Informer(owner, "namespaces", lister, (), ns_key, namespace_from, **kw)


def event(kind: str, obj: dict) -> dict:
    return {"type": kind, "raw_object": obj, "object": obj}


def gone() -> ApiException:
    return ApiException(status=410, reason="Gone")


def messages(caplog) -> list[str]:
    """The log lines as written, each whole (a mutant's "XX...XX" text contains the original)."""
    return [r.getMessage() for r in caplog.records]


# -- describe ------------------------------------------------------------------------------------


def test_describe_names_the_http_status_or_the_exception():
    assert inf.describe(ApiException(status=403, reason="Forbidden")) == "HTTP 403 Forbidden"
    assert inf.describe(ApiException(status=410)) == "HTTP 410 None"
    assert inf.describe(ConnectionRefusedError("[Errno 111] Connection refused")) == (
        "ConnectionRefusedError: [Errno 111] Connection refused"
    )


# -- relist --------------------------------------------------------------------------------------


def test_first_list_asks_the_watch_cache_and_fills_the_cache():
    owner = Owner()
    lister = Lister(page([ns("team-a", **{"rdma-webhook.io/injection": "enabled"}), ns("team-b")], version="81644"))
    i = namespaces(owner, lister, metadata_only=True)
    i.relist()
    ((args, kwargs),) = lister.calls
    assert kwargs == {
        "limit": 500,
        "_preload_content": False,
        "_request_timeout": (5.0, 60.0),
        "resource_version": "0",
        "_headers": {"Accept": METADATA_LIST},
    }
    assert lister.responses[0].released
    assert sorted(i.items) == ["team-a", "team-b"]
    assert i.items["team-a"].labels["rdma-webhook.io/injection"] == "enabled"
    assert i.synced and i.resource_version == i.listed_version == "81644"
    assert (i.lists, i.pages, i.removals) == (1, 1, 1) and i.list_kind == "NamespaceList"
    assert owner.recorded == 1


def test_a_list_records_how_long_it_took_and_logs_the_first_sync(monkeypatch, caplog):
    readings = iter([100.0, 102.5, 200.0, 200.25])
    monkeypatch.setattr(inf.time, "monotonic", lambda: next(readings))
    i = namespaces(Owner(), Lister(page([ns("a"), ns("b")]), page([ns("a")])))
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    i.relist()
    assert i.list_seconds == 2.5
    i.relist()
    assert i.list_seconds == 0.25
    assert messages(caplog) == ["namespaces: cache synced (2 objects)"]  # the first list only


def test_a_list_in_pages_sends_the_token_and_no_version_and_keeps_every_page():
    owner = Owner()
    owner.page_size = 2
    lister = Lister(
        page([ns("a"), ns("b")], version="7", token="tok1"),
        page([ns("c"), ns("d")], version="7", token="tok2"),
        page([ns("e")], version="7"),
    )
    i = namespaces(owner, lister)
    i.relist()
    sent = [kwargs for _, kwargs in lister.calls]
    assert [k.get("_continue") for k in sent] == [None, "tok1", "tok2"]
    assert [k.get("resource_version") for k in sent] == ["0", None, None]
    assert all(k["limit"] == 2 for k in sent) and all("_headers" not in k for k in sent)
    assert sorted(i.items) == ["a", "b", "c", "d", "e"]
    assert i.pages == 3 and i.lists == 1 and i.resource_version == "7"
    assert all(r.released for r in lister.responses)


def test_a_list_replaces_the_cache_wholesale_and_counts_as_a_removal():
    owner = Owner()
    i = namespaces(owner, Lister(page([ns("a"), ns("b")], version="5"), page([ns("b")], version="9", kind="")))
    i.relist()
    first = i.items
    i.absent = True
    i.relist()
    assert list(i.items) == ["b"] and i.items is not first and "a" in first
    assert i.removals == 2 and i.lists == 2 and not i.absent
    assert i.resource_version == "9" and i.list_kind is None


def test_without_list_from_cache_and_after_a_refusal_the_list_reads_etcd():
    owner = Owner()
    owner.list_from_cache = False
    lister = Lister(page([]))
    namespaces(owner, lister).relist()
    assert "resource_version" not in lister.calls[0][1]
    for status in (410, 504):
        owner = Owner()
        lister = Lister(ApiException(status=status), page([ns("a")], version="12"))
        i = namespaces(owner, lister)
        i.relist_version = "11"
        with pytest.raises(ApiException):
            i.relist()
        assert i.relist_version == "" and not i.synced
        i.relist()
        assert "resource_version" not in lister.calls[1][1] and i.synced


def test_a_failed_continue_keeps_the_version_to_list_from():
    owner = Owner()
    lister = Lister(page([ns("a")], token="tok"), ApiException(status=410, reason="Gone"))
    i = namespaces(owner, lister)
    i.relist_version = "50"
    with pytest.raises(ApiException):
        i.relist()
    assert i.relist_version == "50" and i.items == {} and not i.synced
    other = Lister(ApiException(status=500, reason="Internal Server Error"))
    j = namespaces(owner, other)
    j.relist_version = "50"
    with pytest.raises(ApiException):
        j.relist()
    assert j.relist_version == "50"


def test_a_list_page_without_version_or_metadata_leaves_no_version():
    i = namespaces(Owner(), Lister({"kind": "NamespaceList", "items": [ns("a")]}))
    i.relist()
    assert i.synced and i.resource_version is None and i.listed_version is None and "a" in i.items
    j = namespaces(Owner(), Lister({"metadata": {"resourceVersion": ""}, "items": None}))
    j.relist()
    assert j.synced and j.resource_version is None and j.items == {}


def test_a_list_bounded_by_a_deadline_gives_up_past_it(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(inf.time, "monotonic", lambda: now[0])
    lister = Lister(page([ns("a")], token="t"), page([ns("b")]))
    i = namespaces(Owner(), lister)
    i.relist(deadline=110.0)
    assert lister.calls[0][1]["_request_timeout"] == (5.0, 10.0)
    lister = Lister(page([ns("a")], token="t"), page([ns("b")]))
    j = namespaces(Owner(), lister)
    j.relist(deadline=1000.0)
    assert lister.calls[0][1]["_request_timeout"] == (5.0, 60.0)
    lister = Lister(page([ns("a")]))
    namespaces(Owner(), lister).relist(deadline=100.5)  # half a second left: still asked, for that long
    assert lister.calls[0][1]["_request_timeout"] == (5.0, 0.5)
    k = namespaces(Owner(), Lister())
    with pytest.raises(TimeoutError, match=r"^namespaces: list not done by its deadline \(0 pages\)$"):
        k.relist(deadline=100.0)
    assert not k.synced


def test_metadata_decoding_keeps_only_what_a_decision_reads_and_other_kinds_keep_the_object():
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": "rdma",
            "namespace": "team-a",
            "annotations": {NAD_RESOURCE_NAME: "openshift.io/mlxnics", "x": "y"},
        },
        "spec": {"config": "{}"},
    }
    seen: list[dict] = []

    def keep(obj: dict) -> dict:
        seen.append(obj)
        return nad_value(obj)

    owner = Owner()
    meta = inf.Informer(
        owner, "network-attachment-definitions", Lister(page([nad])), (), nad_key, keep, metadata_only=True
    )
    meta.relist()
    assert seen[-1] == {
        "metadata": {"name": "rdma", "namespace": "team-a", "annotations": {NAD_RESOURCE_NAME: "openshift.io/mlxnics"}}
    }
    for kind, metadata_only in (("network-attachment-definitions", False), ("widgets", True)):
        whole = inf.Informer(owner, kind, Lister(page([nad])), (), nad_key, keep, metadata_only=metadata_only)
        whole.relist()
        assert seen[-1] == nad, kind
    assert meta.items[("team-a", "rdma")] == {"metadata": {"annotations": {NAD_RESOURCE_NAME: "openshift.io/mlxnics"}}}


# -- watch ---------------------------------------------------------------------------------------


def test_watch_applies_events_and_follows_their_versions():
    owner = Owner()
    i = namespaces(owner, Lister(page([ns("a"), ns("old")], version="10")))
    i.relist()
    i.watch = FakeWatch(
        [
            event("ADDED", ns("new", rv="11")),
            event("MODIFIED", ns("a", rv="12", team="x")),
            event("DELETED", ns("old", rv="13")),
            event("BOOKMARK", {"kind": "Namespace", "metadata": {"resourceVersion": "14"}}),
            event("DELETED", ns("never-seen", rv="")),
        ]
    )
    i.watch_once()
    ((func, args, kwargs),) = i.watch.calls
    assert func is i.list_call and args == ()
    assert kwargs == {
        "resource_version": "10",
        "allow_watch_bookmarks": True,
        "timeout_seconds": 300,
        "_request_timeout": (5.0, 330),
    }
    assert sorted(i.items) == ["a", "new"] and i.items["a"].labels["team"] == "x"
    assert i.resource_version == "14" and i.removals == 3
    assert i.watching_since is None


def test_apply_without_metadata_changes_nothing_but_the_cache():
    i = namespaces(Owner(), Lister())
    i.resource_version = "5"
    i.apply("BOOKMARK", {})
    i.apply("ERROR", {"metadata": {"name": "x"}})
    i.apply(None, {"metadata": {"name": "x"}})
    assert i.items == {} and i.resource_version == "5" and i.removals == 0


def test_a_watch_that_ends_at_once_with_nothing_is_an_error_and_one_that_sent_events_is_not():
    i = namespaces(Owner(), Lister())
    i.resource_version = "3"
    i.watch = FakeWatch([], [event("ADDED", ns("a", rv="4"))])
    with pytest.raises(inf._ShortWatch, match="^the watch ended at once$"):
        i.watch_once()
    i.watch_once()
    assert i.resource_version == "4"


def test_a_quiet_watch_that_ran_its_course_is_not_an_error(monkeypatch):
    times = iter([100.0, 101.5])
    monkeypatch.setattr(inf.time, "monotonic", lambda: next(times))
    i = namespaces(Owner(), Lister())
    i.watch = FakeWatch([])
    i.watch_once()  # ended after 1.5 s with no event: a timeout, not a misbehaving server
    times = iter([100.0, 101.0])
    i.watch_once()  # a second exactly: not "at once"
    times = iter([100.0, 100.9])
    with pytest.raises(inf._ShortWatch):
        i.watch_once()


def test_the_first_event_after_failures_clears_them_and_stop_ends_the_stream():
    owner = Owner()
    i = namespaces(owner, Lister())
    i.failures, i.failing_since = 4, 1.0
    i.watch = FakeWatch(
        [event("ADDED", ns("a")), event("ADDED", ns("b")), event("ADDED", ns("c"))], owner=owner, stop_after=1
    )
    i.watch_once()
    assert i.failures == 0 and i.failing_since is None and owner.recorded == 1
    assert list(i.items) == ["a"] and i.watch.stopped == 1
    owner._stopping.set()
    i.watch = FakeWatch([])
    i.watch_once()  # stopping: an empty watch is not an error


def test_the_watch_is_open_while_it_streams():
    owner = Owner()
    i = namespaces(owner, Lister())
    opened: list[Any] = []

    class Seeing(FakeWatch):
        def _events(self, batch):
            opened.append(i.watching_since)
            yield from super()._events(batch)

    owner.now = 77.0
    i.watch = Seeing([event("ADDED", ns("a"))])
    i.watch_once()
    assert opened == [77.0] and i.watching_since is None


# -- failures and staleness ----------------------------------------------------------------------


def test_failures_are_counted_from_the_first_and_a_success_clears_them():
    owner = Owner()
    i = namespaces(owner, Lister())
    owner.now = 10.0
    i.failed(ApiException(status=403, reason="Forbidden"))
    owner.now = 20.0
    i.failed(ConnectionResetError("reset"))
    assert i.failures == 2 and i.failing_since == 10.0 and i.last_error == "ConnectionResetError: reset"
    assert owner.recorded == 2
    i.succeeded()
    assert i.failures == 0 and i.failing_since is None and owner.recorded == 3
    i.succeeded()
    assert owner.recorded == 3  # nothing changed: nothing recorded


def test_stale_only_after_three_failures_and_not_while_a_watch_has_been_open_a_while():
    owner = Owner()
    i = namespaces(owner, Lister())
    owner.now = 100.0
    for n in range(inf.STALE_FAILURES - 1):
        i.failed(OSError("down"))
    assert i.stale_for(190.0) == 0.0
    i.failed(OSError("down"))
    assert i.stale_for(190.0) == 90.0
    i.watching_since = 180.0  # open for 10 s: longer than connecting can take to fail
    assert i.stale_for(190.0) == 0.0
    i.watching_since = 184.0  # open for 6 s = connect_timeout + 1: not yet
    assert i.stale_for(190.0) == 90.0
    i.watching_since = 183.5
    assert i.stale_for(190.0) == 0.0
    i.failing_since = None
    assert i.stale_for(190.0) == 0.0


# -- the loop ------------------------------------------------------------------------------------


@pytest.fixture
def uniform(monkeypatch):
    """The jitter's bounds, each time the loop draws one; the pause is the upper bound."""
    drawn: list[tuple[float, float]] = []

    def draw(low: float, high: float) -> float:
        drawn.append((low, high))
        return high

    monkeypatch.setattr(inf.random, "uniform", draw)
    return drawn


def test_a_failing_list_backs_off_doubling_up_to_the_maximum(uniform, caplog):
    owner = Owner(waits=9)
    refused = ApiException(status=503, reason="Service Unavailable")
    i = namespaces(owner, Lister(*[refused] * 9))
    caplog.set_level(logging.WARNING, "rdma_webhook.cluster")
    i.run()
    assert [high for _, high in uniform] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert [low for low, _ in uniform] == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert owner._stopping.waited == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert i.failures == 9 and i.last_error == "HTTP 503 Service Unavailable" and not i.synced
    assert messages(caplog)[0] == (
        "namespaces: list/watch failed (HTTP 503 Service Unavailable); retrying in 0.50s, answering from the cache"
    )


def test_a_success_resets_the_backoff(uniform):
    owner = Owner(waits=4)
    boom = OSError("connection reset")
    i = namespaces(owner, Lister(boom, boom, page([ns("a")], version="3"), boom))
    i.watch = FakeWatch(boom, boom)
    i.run()
    # list fails twice (0.5, 1), lists, the watch fails (0.5 again), the watch fails (1)
    assert owner._stopping.waited == [0.5, 1.0, 0.5, 1.0]
    assert i.synced and "a" in i.items
    assert i.last_error == "OSError: connection reset"


def test_a_watch_that_ran_its_course_resets_the_backoff_and_the_failures(uniform):
    owner = Owner(waits=3)
    boom = OSError("reset")
    i = namespaces(owner, Lister(page([ns("a")], version="3")))
    i.watch = FakeWatch(boom, boom, [event("ADDED", ns("b", rv="4"))], boom)
    i.run()
    assert owner._stopping.waited == [0.5, 1.0, 0.5]
    assert i.failures == 1 and "b" in i.items


def test_a_quiet_watch_cycle_clears_failures(uniform):
    owner = Owner(waits=2)
    boom = OSError("reset")

    class Cycles(FakeWatch):
        def stream(self, func, *args, **kwargs):
            events = super().stream(func, *args, **kwargs)
            if len(self.calls) == 2:
                i.failures = 2  # as if earlier watches had failed; this one runs its course
            return events

    i = namespaces(owner, Lister(page([ns("a")], version="3")))
    i.watch = Cycles(boom, [event("BOOKMARK", {"metadata": {"resourceVersion": "5"}})], boom)
    i.run()
    assert i.failures == 1 and owner._stopping.waited == [0.5, 0.5]


def test_gone_after_progress_lists_again_at_once_from_the_version_seen(uniform, caplog):
    owner = Owner(waits=1)
    lister = Lister(page([ns("a")], version="10"), page([ns("a"), ns("b")], version="20"))
    i = namespaces(owner, lister)
    i.watch = FakeWatch([event("BOOKMARK", {"metadata": {"resourceVersion": "15"}})], gone(), OSError("x"))
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    i.run()
    assert [kw.get("resource_version") for _, kw in lister.calls] == ["0", "15"]
    assert sorted(i.items) == ["a", "b"] and i.resource_version == "20"
    assert owner._stopping.waited == [0.5]  # no pause between the 410 and the list; one after the failure
    assert "namespaces: resourceVersion 15 expired; listing again" in messages(caplog)


def test_gone_straight_after_a_list_backs_off_before_listing_again(uniform):
    owner = Owner(waits=1)
    lister = Lister(page([ns("a")], version="10"), page([ns("a")], version="30"))
    i = namespaces(owner, lister)
    i.watch = FakeWatch(gone())
    i.run()
    assert owner._stopping.waited == [0.5] and i.failures == 1 and i.last_error == "HTTP 410 Gone"
    assert i.resource_version is None and i.relist_version == "10"
    assert len(lister.calls) == 1


def test_gone_when_the_list_gave_no_version_lists_from_the_watch_cache_again(uniform):
    """A server that lists without a resourceVersion, then answers the watch 410: the loop backs
    off (the 410 came straight after the list) and lists from the watch cache ("0") again."""
    owner = Owner(waits=2)
    lister = Lister(page([ns("a")], version=""), page([ns("a"), ns("b")], version="9"))
    i = namespaces(owner, lister)
    i.watch = FakeWatch(gone(), OSError("x"))
    i.run()
    assert [kw.get("resource_version") for _, kw in lister.calls] == ["0", "0"]
    assert owner._stopping.waited == [0.5, 0.5] and sorted(i.items) == ["a", "b"]  # the list resets the backoff


def test_an_optional_kind_not_served_is_absent_and_looked_for_again_slowly(uniform, caplog):
    owner = Owner(waits=3)
    not_found = ApiException(status=404, reason="Not Found")
    lister = Lister(not_found, not_found, not_found)
    i = inf.Informer(
        owner,
        "trainingruntimes",
        lister,
        ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"),
        ns_key,
        dict,
        optional=True,
    )
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    i.run()
    assert i.absent and not i.synced and i.failures == 0
    assert owner._stopping.waited == [30.0, 30.0, 30.0] and uniform == []
    assert owner.recorded == 3
    assert (
        messages(caplog).count(
            "trainingruntimes: not served by this cluster (CRD not installed); looking again every 30s"
        )
        == 1
    )
    assert lister.calls[0][0] == ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes")


def test_a_required_kind_not_found_is_a_failure(uniform):
    owner = Owner(waits=2)
    not_found = ApiException(status=404, reason="Not Found")
    i = namespaces(owner, Lister(not_found, not_found))
    i.run()
    assert not i.absent and i.failures == 2 and owner._stopping.waited == [0.5, 1.0]


def test_stopping_during_a_failure_ends_the_loop_without_counting_it(uniform):
    owner = Owner()
    i = namespaces(owner, Lister(page([ns("a")], version="1")))

    class Failing(FakeWatch):
        def stream(self, func, *args, **kwargs):
            owner._stopping.set()
            raise OSError("closed by stop()")

    i.watch = Failing()
    i.run()
    assert i.failures == 0 and uniform == [] and owner._stopping.waited == []


def test_a_stopped_owner_runs_no_loop():
    owner = Owner()
    owner._stopping.set()
    lister = Lister()
    i = namespaces(owner, lister)
    i.run()
    assert lister.calls == []


def test_start_runs_the_loop_in_a_daemon_thread_named_after_the_kind():
    owner = Owner()
    owner._stopping.set()
    i = namespaces(owner, Lister())
    i.start()
    i.thread.join(5)
    assert i.thread.name == "watch-namespaces" and i.thread.daemon and not i.thread.is_alive()
    assert i.watch is not None
    mine = FakeWatch()
    i.watch = mine
    i.start()  # a watch already made is kept
    i.thread.join(5)
    assert i.watch is mine
