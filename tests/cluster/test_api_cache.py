"""webhook.cluster.api in process, without a server: `ApiClusterState`'s lookups, readiness and its
reasons, the direct read of a namespace (and the misses it remembers), `prime`, and when NADs
are followed. Its informers list from stand-in list calls (bodies as the API server sends them);
its clock, and the stop event the policy check loop waits on, are the test's: no test sleeps.
tests/cluster/test_api.py runs the same state against the HTTP stand-in server, with threads."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.stand_ins import Answering
from webhook.cluster import api as cluster_api
from webhook.cluster.api import ApiClusterState
from webhook.core import keys

OPTED_IN = {keys.NS_INJECTION: keys.NS_INJECTION_ENABLED}


class Resp:
    def __init__(self, body: Any):
        self.data = body if isinstance(body, bytes) else orjson.dumps(body)
        self.released = 0

    def release_conn(self) -> None:
        self.released += 1


class Lister:
    def __init__(self, *answers: Any):
        self.answers, self.calls = list(answers), []

    def __call__(self, *args: Any, **kwargs: Any) -> Resp:
        self.calls.append((args, kwargs))
        answer = (
            self.answers.pop(0) if self.answers else {"kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}
        )
        if isinstance(answer, BaseException):
            raise answer
        return Resp(answer)


def namespace(name: str, **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}, "resourceVersion": "3"},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def listing(*items: dict, version: str = "100") -> dict:
    return {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": version}, "items": list(items)}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def make():
    """An ApiClusterState whose client points at a port nothing listens on: any request a test
    did not stand in for fails."""
    made: list[client.ApiClient] = []

    def build(**kw: Any) -> ApiClusterState:
        cfg = client.Configuration()
        cfg.host = "http://127.0.0.1:9"
        made.append(client.ApiClient(cfg))
        return ApiClusterState(made[-1], **kw)

    yield build
    for api in made:
        api.close()


def no_threads(state: ApiClusterState) -> list[str]:
    """Informers of `state` whose start is recorded instead of starting a watch thread."""
    started: list[str] = []
    informers = (state._ns, state._nads, *state._runtime_informers, *state._dra_informers)
    for i in informers:
        i.start = lambda i=i: (started.append(i.kind), setattr(i, "thread", threading.Thread(target=lambda: None)))
    return started


def messages(caplog) -> list[str]:
    """The log lines as written, each whole (a mutant's "XX...XX" text contains the original)."""
    return [r.getMessage() for r in caplog.records]


# -- the client ----------------------------------------------------------------------------------


def test_the_client_does_not_retry_on_its_own_unless_configured_to():
    cfg = client.Configuration()
    api = client.ApiClient(cfg)
    ApiClusterState(api)
    assert api.configuration.retries is False
    assert api.rest_client.pool_manager.connection_pool_kw["retries"].total is False  # the client in use too
    cfg = client.Configuration()
    cfg.retries = 3
    api = client.ApiClient(cfg)
    rest_client = api.rest_client
    ApiClusterState(api)
    assert api.configuration.retries == 3 and api.rest_client is rest_client


# -- prime: the list before the fork ---------------------------------------------------------------


def test_prime_lists_namespaces_within_its_budget_from_the_watch_cache(make, caplog):
    state = make()
    state._ns.list_call = lister = Lister(listing(namespace("team-a", **OPTED_IN), namespace("team-b")))
    state._nads.list_call = nads = Lister()
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    assert state.prime() is True
    ((_, kwargs),) = lister.calls
    assert kwargs["limit"] == 500 and kwargs["resource_version"] == "0"
    connect, read = kwargs["_request_timeout"]
    assert connect == 5.0 and 14.0 < read <= 15.0  # the budget's 15 s, less what the start took
    assert nads.calls == []  # no policy uses a network
    assert state._ns.items["team-a"].labels[keys.NS_INJECTION] == "enabled"
    assert state.ready() and state.attachments() is None
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("listed before the fork in "))
    assert "namespaces 2 in " in line and "s (1 pages)" in line


def test_prime_lists_nads_and_dra_kinds_when_policies_need_them(make, caplog):
    state = make(uses_networks=lambda: True, uses_dra=lambda: True)
    nad = {
        "metadata": {
            "name": "sriov-rdma",
            "namespace": "team-a",
            "annotations": {keys.NAD_RESOURCE_NAME: "openshift.io/mlxnics"},
        }
    }
    state._ns.list_call = Lister(listing(namespace("team-a")))
    state._nads.list_call = Lister(listing(nad))
    not_served = ApiException(status=404, reason="Not Found")
    for i in state._dra_informers:
        i.list_call = Lister(not_served)
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    assert state.prime(budget=5.0) is True
    assert ("team-a", "sriov-rdma") in state._nads.items and state._nads.synced
    assert all(i.absent and not i.synced for i in state._dra_informers)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("listed before the fork in "))
    assert "network-attachment-definitions 1 in " in line and "deviceclasses not listed" in line


def test_prime_reports_what_failed_and_the_workers_list_it(make, caplog):
    state = make(uses_networks=lambda: True)
    state._ns.list_call = Lister(ApiException(status=403, reason="Forbidden"))
    state._nads.list_call = Lister(ConnectionRefusedError("refused"))
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    assert state.prime() is False
    assert (
        "listing before the fork failed (namespaces: HTTP 403 Forbidden; "
        "network-attachment-definitions: ConnectionRefusedError: refused); each worker lists what is missing"
    ) in messages(caplog)
    assert not state._ns.synced and not state.ready()
    state = make()
    state._ns.list_call = Lister(ApiException(status=404, reason="Not Found"))  # namespaces are not optional
    assert state.prime() is False and not state._ns.absent


def test_prime_after_start_does_nothing(make):
    state = make(watch_runtimes=False)
    started = no_threads(state)
    state._ns.list_call = lister = Lister()
    state.start()
    try:
        assert started == ["namespaces"]
        assert state.prime() is False and lister.calls == []
    finally:
        state.stop()


# -- readiness -----------------------------------------------------------------------------------


def test_not_ready_until_namespaces_are_listed_then_ready(make):
    state = make()
    assert not state.ready() and state.not_ready_reason() == "cluster state not synced yet (namespaces)"
    state._ns.list_call = Lister(listing(namespace("team-a")))
    state._ns.relist()
    assert state.ready() and state.not_ready_reason() is None


def test_stale_after_a_minute_of_failures(make):
    clock = Clock()
    state = make(clock=clock)
    state._ns.list_call = Lister(listing())
    state._ns.relist()
    for _ in range(3):
        state._ns.failed(ApiException(status=403, reason="Forbidden"))
    clock.now += 60.0
    assert state.ready() and state.not_ready_reason() is None  # 60 s: not yet
    clock.now += 1.0
    assert not state.ready()
    assert state.not_ready_reason() == (
        "cluster state stale: namespaces list/watch failing for 61s (3 attempts, last: HTTP 403 Forbidden)"
    )
    quick = make(clock=clock, stale_after=10.0)
    quick._ns.list_call = Lister(listing())
    quick._ns.relist()
    for _ in range(3):
        quick._ns.failed(OSError("down"))
    clock.now += 11.0
    assert not quick.ready() and "failing for 11s" in quick.not_ready_reason()


def test_nads_hold_up_readiness_once_followed_and_dra_kinds_unless_not_served(make):
    state = make(uses_networks=lambda: True, uses_dra=lambda: True)
    started = no_threads(state)
    state._ns.list_call = Lister(listing())
    state._ns.relist()
    assert state.ready()  # not followed yet
    assert state._maybe_track_networks() and state._maybe_track_dra()
    assert started == ["network-attachment-definitions", "deviceclasses", "resourceclaimtemplates", "resourceclaims"]
    assert state.not_ready_reason() == "cluster state not synced yet (network-attachment-definitions)"
    assert state.attachments() is None
    state._nads.list_call = Lister(listing())
    state._nads.relist()
    assert state.attachments() is state
    assert state.not_ready_reason() == "cluster state not synced yet (deviceclasses)"
    for i in state._dra_informers[:2]:
        i.list_call = Lister(listing())
        i.relist()
    assert not state.ready()
    state._dra_informers[2].absent = True
    assert state.ready()
    clock_failures = state._nads
    for _ in range(3):
        clock_failures.failed(OSError("reset"))
    clock_failures.failing_since = -1e9
    assert state.not_ready_reason().startswith("cluster state stale: network-attachment-definitions")


def test_nads_and_their_lookups_follow_uses_networks(make, caplog):
    wanted = [False]
    state = make(uses_networks=lambda: wanted[0])
    started = no_threads(state)
    assert not state._maybe_track_networks() and started == []
    wanted[0] = True
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    assert state._maybe_track_networks() and state._maybe_track_networks()
    assert started == ["network-attachment-definitions"]
    assert messages(caplog) == ["a policy uses a Multus network: watching network-attachment-definitions"]
    nad = {"metadata": {"name": "rdma", "namespace": "team-a", "annotations": {keys.NAD_RESOURCE_NAME: "x.io/r"}}}
    state._nads.list_call = Lister(listing(nad))
    state._nads.relist()
    assert state.attachment("team-a", "rdma") == {"metadata": {"annotations": {keys.NAD_RESOURCE_NAME: "x.io/r"}}}
    assert state.attachment("team-b", "rdma") is None
    stopped = make(uses_networks=lambda: True)
    stopped_started = no_threads(stopped)
    stopped._stopping.set()
    assert not stopped._maybe_track_networks() and stopped_started == []


def test_a_failing_uses_networks_is_logged_and_taken_as_no(make, caplog):
    def broken() -> bool:
        raise KeyError("policies")

    state = make(uses_networks=broken)
    caplog.set_level(logging.ERROR, "rdma_webhook.cluster")
    assert state._uses_networks() is False and messages(caplog) == ["uses_networks() failed"]
    assert make(uses_networks=lambda: "yes")._uses_networks() is True


class Waits:
    """The state's stop event for `_check_networks`: records each wait, sets itself after `n`."""

    def __init__(self, n: int):
        self.n, self.waited = n, []

    def wait(self, timeout: float) -> bool:
        self.waited.append(timeout)
        return len(self.waited) > self.n

    def is_set(self) -> bool:
        return len(self.waited) > self.n


def test_the_policy_check_looks_every_interval_until_both_are_followed(make):
    calls = {"networks": 0, "dra": 0}

    def networks() -> bool:
        calls["networks"] += 1
        return calls["networks"] >= 2

    def dra() -> bool:
        calls["dra"] += 1
        return calls["dra"] >= 3

    state = make(uses_networks=networks, uses_dra=dra)
    started = no_threads(state)
    state._stopping = Waits(10)
    state._check_networks()
    assert state._stopping.waited == [5.0, 5.0, 5.0]  # returns once both are followed
    assert started[0] == "network-attachment-definitions" and len(started) == 4
    slow = make(networks_check_interval=0.25)
    no_threads(slow)
    slow._stopping = Waits(2)
    slow._check_networks()
    assert slow._stopping.waited == [0.25, 0.25, 0.25]  # never needed: looks until stopped


# -- lookups -------------------------------------------------------------------------------------


def runtime(kind: str, name: str, namespace: str | None = None) -> dict:
    # kubeflow/trainer, manifests/base/runtimes/torch_distributed.yaml (trimmed), as listed
    meta: dict[str, Any] = {"name": name, "uid": "u", "managedFields": [{"manager": "kubectl"}]}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": kind,
        "metadata": meta,
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}}},
        "status": {"conditions": []},
    }


def test_runtimes_are_known_once_both_kinds_are_listed_and_keep_kind_name_and_spec(make, caplog):
    state = make()
    tr, ctr = state._runtime_informers
    assert tr.args == ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes") and tr.optional
    assert ctr.args == ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes") and ctr.optional
    tr.list_call = Lister(
        listing(runtime("TrainingRuntime", "torch-rdma", "team-a"), runtime("TrainingRuntime", "bare"))
    )
    ctr.list_call = Lister(listing(runtime("ClusterTrainingRuntime", "torch-distributed")))
    assert state.runtimes() is None
    tr.relist()
    assert state.runtimes() is None
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    ctr.relist()
    assert messages(caplog) == ["clustertrainingruntimes: cache synced (1 objects)"]
    assert state.runtimes() is state
    assert state.training_runtime("team-a", "torch-rdma") == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "torch-rdma", "namespace": "team-a"},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}}},
    }
    assert state.training_runtime("", "bare")["metadata"] == {"name": "bare", "namespace": None}
    assert state.cluster_training_runtime("torch-distributed")["kind"] == "ClusterTrainingRuntime"
    assert state.cluster_training_runtime("torch-rdma") is None
    assert make(watch_runtimes=False).runtimes() is None


def test_a_runtime_without_metadata_is_kept_with_no_name():
    assert cluster_api._runtime_value({"kind": "TrainingRuntime"}) == {
        "apiVersion": None,
        "kind": "TrainingRuntime",
        "metadata": {"name": None, "namespace": None},
        "spec": None,
    }


def test_nads_and_namespaces_are_listed_as_metadata_and_runtimes_whole(make):
    state = make()
    assert state._ns.metadata_only and state._nads.metadata_only
    assert state._nads.args == ("k8s.cni.cncf.io", "v1", "network-attachment-definitions")
    assert not any(i.metadata_only for i in state._runtime_informers)
    assert not state._ns.optional and not state._nads.optional


# -- the direct read -----------------------------------------------------------------------------


class Reads:
    """CoreV1Api.read_namespace: answers in turn, recording each call."""

    def __init__(self, *answers: Any):
        self.answers, self.calls, self.responses = list(answers), [], []

    def __call__(self, name: str, **kwargs: Any) -> Resp:
        self.calls.append((name, kwargs))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        self.responses.append(Resp(answer))
        return self.responses[-1]


@pytest.fixture
def monotonic(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(cluster_api.time, "monotonic", clock)
    return clock


def test_a_namespace_not_cached_is_read_once_and_cached(make, monotonic):
    state = make()
    state._core.read_namespace = reads = Reads(namespace("fresh", **OPTED_IN))
    ns = state.namespace("fresh")
    assert ns.name == "fresh" and ns.labels[keys.NS_INJECTION] == "enabled"
    assert reads.calls == [("fresh", {"_preload_content": False, "_request_timeout": 2.0})]
    assert reads.responses[0].released == 1
    assert state.namespace("fresh") is ns and len(reads.calls) == 1


def test_a_missing_namespace_is_remembered_for_miss_ttl(make, monotonic, caplog):
    state = make(fetch_timeout=0.5)
    not_found = ApiException(status=404, reason="Not Found")
    state._core.read_namespace = reads = Reads(not_found, not_found)
    caplog.set_level(logging.WARNING, "rdma_webhook.cluster")
    assert state.namespace("ghost") is None
    assert reads.calls[0][1]["_request_timeout"] == 0.5
    monotonic.now += 4.0
    assert state.namespace("ghost") is None and len(reads.calls) == 1
    monotonic.now += 1.0  # miss_ttl to the dot: the miss has expired
    assert state.namespace("ghost") is None and len(reads.calls) == 2
    assert caplog.text == ""  # a 404 is an answer, not a failure


def test_a_failed_read_is_logged_remembered_and_none(make, monotonic, caplog):
    state = make(miss_ttl=1.0)
    state._core.read_namespace = reads = Reads(
        ApiException(status=500, reason="Internal Server Error"), TimeoutError("read timed out"), b"<html>"
    )
    caplog.set_level(logging.WARNING, "rdma_webhook.cluster")
    assert state.namespace("team-a") is None
    assert messages(caplog) == ["namespace 'team-a': direct read failed (HTTP 500 Internal Server Error)"]
    assert state.namespace("team-a") is None and len(reads.calls) == 1
    monotonic.now += 1.5
    assert state.namespace("team-a") is None
    assert messages(caplog)[1] == "namespace 'team-a': direct read failed (TimeoutError: read timed out)"
    monotonic.now += 1.5
    assert state.namespace("team-a") is None and messages(caplog)[2].startswith(
        "namespace 'team-a': direct read failed (JSONDecodeError: "
    )
    assert reads.responses[0].released == 1  # released even when its body is not JSON
    assert state._inflight == {}


def test_a_read_that_a_deletion_may_have_overtaken_is_answered_but_not_cached(make, monotonic):
    state = make()

    class Overtaken(Reads):
        def __call__(self, name, **kwargs):
            state._ns.removals += 1  # a DELETED event or a relist while the read was on its way
            return super().__call__(name, **kwargs)

    state._core.read_namespace = reads = Overtaken(namespace("team-a"), namespace("team-a"))
    assert state.namespace("team-a").name == "team-a"
    assert "team-a" not in state._ns.items
    assert state.namespace("team-a").name == "team-a" and len(reads.calls) == 2


def test_misses_are_pruned_past_a_thousand(make, monotonic):
    state = make(miss_ttl=5.0)
    for n in range(1001):
        state._remember_miss(f"gone-{n}")
    assert len(state._misses) == 1001
    monotonic.now += 5.0  # every miss expires now: pruned
    state._remember_miss("late")
    assert state._misses == {"late": monotonic.now + 5.0}
    fresh = make()
    for n in range(1000):
        fresh._remember_miss(f"gone-{n}")
    monotonic.now += 6.0
    fresh._remember_miss("late")
    assert len(fresh._misses) == 1001  # not past the bound yet: nothing pruned


def test_concurrent_reads_of_one_namespace_wait_for_the_first(make, monotonic):
    state = make(fetch_timeout=5.0)
    entered, release = threading.Event(), threading.Event()

    class Slow(Reads):
        def __call__(self, name, **kwargs):
            entered.set()
            release.wait(10)
            return super().__call__(name, **kwargs)

    state._core.read_namespace = reads = Slow(namespace("team-a"))
    first: list[Any] = []
    t = threading.Thread(target=lambda: first.append(state.namespace("team-a")))
    t.start()
    assert entered.wait(10)
    waiting = threading.Event()

    waited: list[Any] = []

    class Seen(threading.Event):
        def wait(self, timeout=None):
            waited.append(timeout)
            waiting.set()
            return super().wait(timeout)

    state._inflight["team-a"][0] = waiter = Seen()  # tells when the second caller waits on it
    second: list[Any] = []
    t2 = threading.Thread(target=lambda: second.append(state.namespace("team-a")))
    t2.start()
    assert waiting.wait(10)  # the second caller found the read in flight and waits for it
    release.set()
    t.join(10)
    t2.join(10)
    assert waiter.is_set() and first[0].name == "team-a" and second[0] is first[0]
    assert len(reads.calls) == 1 and state._inflight == {}
    assert waited == [5.5]  # bounded: the read's own timeout and half a second


# -- from the environment ------------------------------------------------------------------------


def test_from_environment_takes_the_in_cluster_service_account_first(monkeypatch):
    loaded: list[Any] = []

    def in_cluster(client_configuration):
        # what kubernetes.config's in-cluster loader sets from the pod's service account
        client_configuration.host = "https://10.96.0.1:443"
        client_configuration.api_key = {"authorization": "bearer t0ken"}
        loaded.append(client_configuration)

    monkeypatch.setattr(cluster_api.config, "load_incluster_config", in_cluster)
    state = ApiClusterState.from_environment(lambda: True, page_size=7, uses_dra=lambda: True)
    api = state._core.api_client
    assert api.configuration is loaded[0] and api.configuration.host == "https://10.96.0.1:443"
    assert api.configuration.retries is False  # the informers retry, with backoff; urllib3 does not
    assert state._uses_networks() is True and state._uses_dra() is True and state.page_size == 7
    api.close()


# -- prime's bound and stop ----------------------------------------------------------------------


_Thread = threading.Thread


class Joins:
    """threading.Thread whose `join` records its timeout: how long prime waits for its lists."""

    joined: list[Any] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.thread = _Thread(*args, **kwargs)
        self.name = self.thread.name

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: Any = None) -> None:
        Joins.joined.append(timeout)
        self.thread.join(10 if timeout is None else min(timeout, 10))

    def is_alive(self) -> bool:
        return self.thread.is_alive()


def test_prime_waits_for_its_lists_up_to_the_budget_and_a_connection_then_forks_anyway(make, monkeypatch, caplog):
    """Budget 15 s from 100 (the clock prime reads): the lists are given until 100 + 15 + the
    connect timeout (5) + 5 = 125. A list still running then is left behind: prime says so and
    returns False, and the worker lists for itself."""
    state = make(uses_networks=lambda: True)
    release = threading.Event()
    names: list[str] = []
    readings = iter([100.0, 120.0, 130.0, 140.0])

    def clock() -> float:
        if threading.current_thread().name.startswith("prime-"):
            return 100.0  # the lists' own deadline checks
        return next(readings)

    def hanging(*args: Any, **kwargs: Any) -> Resp:
        names.append(threading.current_thread().name)
        release.wait(10)
        return Resp(listing())

    def quick(*args: Any, **kwargs: Any) -> Resp:
        names.append(threading.current_thread().name)
        return Resp(listing(namespace("team-a")))

    state._ns.list_call, state._nads.list_call = quick, hanging
    Joins.joined = []
    monkeypatch.setattr(cluster_api.time, "monotonic", clock)
    monkeypatch.setattr(cluster_api.threading, "Thread", Joins)
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    try:
        assert state.prime() is False
    finally:
        release.set()
    assert Joins.joined == [5.0, 0.0]  # 125 - 120, then past it: not at all
    assert sorted(names) == ["prime-namespaces", "prime-network-attachment-definitions"]
    assert messages(caplog)[-1] == "listing before the fork outlived its budget; forking anyway"


def test_prime_logs_how_long_the_lists_took(make, monkeypatch, caplog):
    state = make()
    readings = iter([100.0, 101.0, 102.5])
    monkeypatch.setattr(
        cluster_api.time,
        "monotonic",
        lambda: 100.0 if threading.current_thread().name.startswith("prime-") else next(readings),
    )
    state._ns.list_call = Lister(listing(namespace("team-a")))
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    assert state.prime() is True
    assert messages(caplog)[-1].startswith("listed before the fork in 2.500s: namespaces 1 in ")


class Stoppable:
    """A watch whose stop() is counted and may end a thread waiting on it."""

    def __init__(self, ends: threading.Event | None = None):
        self.stopped, self.ends = 0, ends

    def stop(self) -> None:
        self.stopped += 1
        if self.ends is not None:
            self.ends.set()


def test_stop_stops_every_open_watch_until_its_timeout(make, monkeypatch, caplog):
    """A thread that does not end is waited for `timeout` seconds (2 by default) of the clock
    stop reads, the open watches stopped again on each round, then named in a warning."""
    state = make(admission_policies=lambda: None)
    never = threading.Event()
    stuck = threading.Thread(target=never.wait, args=(10,), name="watch-namespaces")
    stuck.start()
    state._threads = [stuck]
    state._ns.watch = watch = Stoppable()
    ticks = iter(x * 0.5 for x in range(100))
    monkeypatch.setattr(cluster_api.time, "monotonic", lambda: next(ticks))
    caplog.set_level(logging.WARNING, "rdma_webhook.cluster")
    try:
        state.stop()
    finally:
        never.set()
        stuck.join(10)
    assert watch.stopped == 3  # at 0.5, 1.0 and 1.5 of the 2 s from 0
    assert messages(caplog) == ["watch-namespaces did not stop within 2.0s"]
    assert state._stopping.is_set()


def test_stop_reaches_the_admission_policy_checks_watches_too(make, caplog):
    state = make(admission_policies=lambda: None)
    ended = threading.Event()
    waiting = threading.Thread(target=ended.wait, args=(10,), name="watch-validatingadmissionpolicies")
    waiting.start()
    state._threads = [waiting]
    vaps, bindings = state.admission_policy_check.informers
    vaps.watch = Stoppable(ended)
    caplog.set_level(logging.WARNING, "rdma_webhook.cluster")
    state.stop()
    waiting.join(10)
    assert vaps.watch.stopped >= 1 and not waiting.is_alive() and caplog.records == []
    assert state._threads == []


def test_start_follows_what_policies_need_and_looks_again_only_when_something_is_missing(make):
    state = make(uses_networks=lambda: True, uses_dra=lambda: True, admission_policies=lambda: None)
    started = no_threads(state)
    for i in state.admission_policy_check.informers:
        i.start = lambda i=i: (started.append(i.kind), setattr(i, "thread", threading.Thread(target=lambda: None)))
    state.start()
    try:
        names = [t.name for t in state._threads]
        assert "check-admission-policies" in names and "watch-policy-networks" not in names
        assert started == [
            "namespaces",
            "trainingruntimes",
            "clustertrainingruntimes",
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
            "network-attachment-definitions",
            "deviceclasses",
            "resourceclaimtemplates",
            "resourceclaims",
        ]
    finally:
        state.stop()
    later = make(uses_networks=lambda: True, watch_runtimes=False)
    no_threads(later)
    later.start()
    try:
        assert [t.name for t in later._threads][-1] == "watch-policy-networks"  # DRA not needed yet
    finally:
        later.stop()


def test_stop_returns_within_about_its_timeout():
    """A thread that does not end holds stop() up for `timeout` seconds and a poll, no more."""
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"
    api = client.ApiClient(cfg)
    state = ApiClusterState(api)
    never = threading.Event()
    stuck = threading.Thread(target=never.wait, args=(10,), name="watch-namespaces")
    stuck.start()
    state._threads = [stuck]
    began = time.perf_counter()
    try:
        state.stop(timeout=0.2)
        took = time.perf_counter() - began
    finally:
        never.set()
        stuck.join(10)
        api.close()
    assert 0.2 <= took < 1.0, took


# -- the defaults a deployment runs with ------------------------------------------------------------


class FakeWatch:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def stream(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return iter([{"type": "BOOKMARK", "raw_object": {"metadata": {"resourceVersion": "9"}}}])

    def stop(self) -> None:
        pass


def test_by_default_watches_cycle_every_five_minutes_and_failures_back_off_from_half_a_second_to_30(make, monkeypatch):
    from webhook.cluster import informer

    state = make()
    state._ns.watch = watch = FakeWatch()
    state._ns.resource_version = "8"
    state._ns.watch_once()
    assert watch.calls[0]["timeout_seconds"] == 300 and watch.calls[0]["_request_timeout"] == (5.0, 330)
    drawn: list[float] = []
    monkeypatch.setattr(informer.random, "uniform", lambda low, high: drawn.append(high) or high)
    state._stopping = Waits(8)
    state._ns.resource_version = None
    state._ns.list_call = Lister(*[OSError("connection refused")] * 9)
    state._ns.run()
    assert drawn == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_the_admission_policy_check_lists_through_the_states_client_and_stops_with_it():
    from webhook.policy.load import load_texts

    root = Path(__file__).resolve().parents[2]
    erdma, errors = load_texts([("erdma.yaml", (root / "policies" / "erdma.yaml").read_text())])
    assert erdma is not None, errors
    api = Answering({})
    state = ApiClusterState(api, admission_policies=lambda: erdma)
    check = state.admission_policy_check
    for i in check.informers:
        i.relist()
    assert [path for _, path, _ in api.asked] == [
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    ]
    assert check.check() == [
        "ValidatingAdmissionPolicy rdma-webhook-final-state-erdma for policy erdma is not installed",
        "ValidatingAdmissionPolicy rdma-webhook-final-state-erdma has no ValidatingAdmissionPolicyBinding, so it checks nothing",
    ]
    state._stopping.set()
    check._loop()  # waits on the state's stop event: returns at once
    assert ApiClusterState(api).admission_policy_check is None
