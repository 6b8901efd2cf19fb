"""webhook.cluster.api in process, without a server: `ApiClusterState`'s lookups, readiness and its
reasons, the direct read of a namespace (and the misses it remembers), `prime`, and when NADs
are followed. Its informers list from stand-in list calls (bodies as the API server sends them);
its clock, and the stop event the policy check loop waits on, are the test's: no test sleeps.
tests/cluster/test_api.py runs the same state against the HTTP stand-in server, with threads."""

from __future__ import annotations

import logging
import threading
from typing import Any

import orjson
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

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
    ) in caplog.text
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
    assert "a policy uses a Multus network: watching network-attachment-definitions" in caplog.text
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
    assert state._uses_networks() is False and "uses_networks() failed" in caplog.text
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


def test_runtimes_are_known_once_both_kinds_are_listed_and_keep_kind_name_and_spec(make):
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
    ctr.relist()
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
    monotonic.now += 4.9
    assert state.namespace("ghost") is None and len(reads.calls) == 1
    monotonic.now += 0.2
    assert state.namespace("ghost") is None and len(reads.calls) == 2
    assert caplog.text == ""  # a 404 is an answer, not a failure


def test_a_failed_read_is_logged_remembered_and_none(make, monotonic, caplog):
    state = make(miss_ttl=1.0)
    state._core.read_namespace = reads = Reads(
        ApiException(status=500, reason="Internal Server Error"), TimeoutError("read timed out"), b"<html>"
    )
    caplog.set_level(logging.WARNING, "rdma_webhook.cluster")
    assert state.namespace("team-a") is None
    assert "namespace 'team-a': direct read failed (HTTP 500 Internal Server Error)" in caplog.text
    assert state.namespace("team-a") is None and len(reads.calls) == 1
    monotonic.now += 1.5
    assert state.namespace("team-a") is None
    assert "namespace 'team-a': direct read failed (TimeoutError: read timed out)" in caplog.text
    monotonic.now += 1.5
    assert state.namespace("team-a") is None and "direct read failed (JSONDecodeError" in caplog.text
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
    monotonic.now += 6.0
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

    class Seen(threading.Event):
        def wait(self, timeout=None):
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
