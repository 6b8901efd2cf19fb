"""`ApiClusterState` for real against `fake_apiserver`: list, watch, relist on 410, backoff,
the one direct read, NAD tracking, stop; and one decision end to end."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Callable

import pytest
from kubernetes import client
from kubernetes.config import kube_config

from fake_apiserver import FakeApiServer
from webhook.core import decision, keys
from webhook.telemetry import metrics
from webhook.cluster.api import ApiClusterState

OPTED_IN = {keys.NS_INJECTION: keys.NS_INJECTION_ENABLED}
RDMA_VF = {keys.NAD_RESOURCE_NAME: "example.com/rdma_vf"}


def cached_namespace(state: ApiClusterState, name: str) -> decision.Namespace | None:
    """The namespace as the cache has it; never a request."""
    return state._ns.items.get(name)


def list_count(state: ApiClusterState) -> tuple[int, int]:
    """(namespace lists, NAD lists) done so far."""
    return state._ns.lists, state._nads.lists


def threads_of(state: ApiClusterState) -> list[threading.Thread]:
    return list(state._threads)


def eventually(check: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.01)


@pytest.fixture
def apiserver():
    srv = FakeApiServer().start()
    yield srv
    srv.close()


@pytest.fixture
def make_unstarted(apiserver):
    """ApiClusterState against the fake server, not started: for what happens before the fork
    (`prime`) or for patching an informer before it runs. Every state made is stopped, its
    threads must have ended, and its client is closed."""
    made: list[tuple[ApiClusterState, client.ApiClient]] = []

    def make(uses_networks: Callable[[], bool] = lambda: False, **kw: Any) -> tuple[ApiClusterState, client.ApiClient]:
        cfg = client.Configuration()
        cfg.host = apiserver.url
        api = client.ApiClient(cfg)
        kw = {"backoff_min": 0.02, "backoff_max": 0.2, "networks_check_interval": 0.05, "watch_runtimes": False, **kw}
        made.append((ApiClusterState(api, uses_networks, **kw), api))
        return made[-1]

    yield make
    apiserver.lists_gate.set()
    for state, api in made:
        state.stop()
        assert not [t.name for t in threads_of(state) if t.is_alive()]
        api.rest_client.pool_manager.clear()
        api.close()


@pytest.fixture
def make_state(make_unstarted):
    """A started ApiClusterState (as in a worker after the fork)."""

    def make(uses_networks: Callable[[], bool] = lambda: False, **kw: Any) -> ApiClusterState:
        state, _ = make_unstarted(uses_networks, **kw)
        state.start()
        return state

    return make


def synced(state: ApiClusterState) -> ApiClusterState:
    eventually(state.ready, what="cache ready")
    return state


def test_initial_list_fills_cache_and_flips_ready(apiserver, make_state):
    apiserver.put_namespace("team-a", OPTED_IN)
    apiserver.put_namespace("team-b")
    apiserver.lists_gate.clear()  # hold the list to see the state before it completes
    state = make_state()
    eventually(lambda: apiserver.count("list namespaces") == 1, what="list request")
    assert not state.ready()
    assert metrics.CACHE_READY._value.get() == 0
    apiserver.lists_gate.set()
    synced(state)
    assert metrics.CACHE_READY._value.get() == 1
    assert cached_namespace(state, "team-a").labels == {"kubernetes.io/metadata.name": "team-a", **OPTED_IN}
    assert state.namespace("team-b").labels == {"kubernetes.io/metadata.name": "team-b"}
    assert state.attachments() is None
    assert apiserver.count("get ") == 0 and apiserver.count("list nads") == 0


def test_watch_applies_added_modified_deleted(apiserver, make_state):
    state = synced(make_state())
    apiserver.put_namespace("new")
    eventually(lambda: cached_namespace(state, "new"), what="ADDED applied")
    apiserver.put_namespace("new", {"team": "x", **OPTED_IN})
    eventually(lambda: cached_namespace(state, "new").labels.get("team") == "x", what="MODIFIED applied")
    apiserver.delete_namespace("new")
    eventually(lambda: cached_namespace(state, "new") is None, what="DELETED applied")
    assert apiserver.count("get ") == 0
    assert apiserver.count("list namespaces") == 1


def test_dropped_watch_is_reestablished_without_relist(apiserver, make_state):
    state = synced(make_state())
    eventually(lambda: apiserver.open_watches() == 1, what="watch open")
    apiserver.drop_watches()
    eventually(
        lambda: apiserver.count("watch namespaces") >= 2 and apiserver.open_watches() == 1, what="watch re-established"
    )
    apiserver.put_namespace("after-drop", OPTED_IN)
    eventually(lambda: cached_namespace(state, "after-drop"), what="event after the drop")
    assert apiserver.count("list namespaces") == 1  # resumed from its resourceVersion


@pytest.mark.parametrize("gone_as", ["event", "http"])
def test_gone_relists_and_catches_up_on_changes_made_while_disconnected(apiserver, make_state, gone_as):
    apiserver.gone_as = gone_as
    apiserver.put_namespace("doomed", OPTED_IN)
    apiserver.put_namespace("kept")
    state = synced(make_state())
    apiserver.put_namespace("seen")  # some watch progress first
    eventually(lambda: cached_namespace(state, "seen"), what="watch progress")
    with apiserver.pause_watches():
        apiserver.delete_namespace("doomed")
        apiserver.put_namespace("kept", {"team": "y"})
        apiserver.put_namespace("born")
        apiserver.compact()
        eventually(lambda: apiserver.count("watch namespaces") >= 3, what="retries while paused")
    eventually(lambda: list_count(state)[0] == 2, what="relist")
    assert apiserver.count("list namespaces") == 2
    assert cached_namespace(state, "doomed") is None
    assert cached_namespace(state, "kept").labels["team"] == "y"
    assert cached_namespace(state, "born") is not None
    assert cached_namespace(state, "seen") is not None
    apiserver.put_namespace("later")
    eventually(lambda: cached_namespace(state, "later"), what="watch after relist")
    assert apiserver.count("get ") == 0


def test_bookmark_moves_resource_version_so_no_relist_is_needed(apiserver, make_state):
    state = synced(make_state())
    eventually(lambda: apiserver.open_watches() == 1, what="watch open")
    apiserver.compact()  # history before now is gone ...
    apiserver.bookmark()  # ... but the bookmark brings the watch up to now
    eventually(lambda: state._ns.resource_version == str(apiserver.rv), what="bookmark applied")
    apiserver.drop_watches()
    eventually(lambda: apiserver.count("watch namespaces") >= 2 and apiserver.open_watches() == 1, what="re-watch")
    apiserver.put_namespace("after-bookmark")
    eventually(lambda: cached_namespace(state, "after-bookmark"), what="event after re-watch")
    assert apiserver.count("list namespaces") == 1


def test_watch_failures_back_off(apiserver, make_state):
    synced(make_state(backoff_min=0.05, backoff_max=0.4))
    with apiserver.pause_watches():
        start, before = time.monotonic(), apiserver.count("watch namespaces")
        while time.monotonic() - start < 1.0:
            time.sleep(0.02)
        attempts = apiserver.count("watch namespaces") - before
    # 0.05 s doubling to 0.4 s, each with jitter in [d/2, d]: at most 9 attempts in one second
    # (a stalled machine makes fewer, never more); without the back-off there would be hundreds
    assert 1 <= attempts <= 10, attempts


def test_direct_read_of_a_namespace_not_yet_seen_happens_once_and_is_cached(apiserver, make_state):
    state = synced(make_state())
    with apiserver.pause_watches():  # the watch cannot deliver it
        apiserver.put_namespace("fresh", OPTED_IN)
        assert cached_namespace(state, "fresh") is None
        ns = state.namespace("fresh")
        assert ns is not None and ns.labels[keys.NS_INJECTION] == keys.NS_INJECTION_ENABLED
        assert state.namespace("fresh") == ns
        assert cached_namespace(state, "fresh") == ns
        assert apiserver.count("get namespaces/fresh") == 1


def test_missing_namespace_is_one_read_per_miss_window(apiserver, make_state):
    state = synced(make_state(miss_ttl=0.3))
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(state.namespace("ghost"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert results == [None] * 8
    for _ in range(20):
        assert state.namespace("ghost") is None
    assert apiserver.count("get namespaces/ghost") == 1
    # after the window, one more read
    eventually(
        lambda: state.namespace("ghost") is None and apiserver.count("get namespaces/ghost") == 2,
        what="read after the miss window",
    )
    assert apiserver.count("get namespaces/ghost") == 2


def test_direct_read_is_bounded_by_its_timeout(apiserver, make_state):
    state = synced(make_state(fetch_timeout=0.3))
    apiserver.gets_gate.clear()  # the API server does not answer (until the gate opens, 30 s on)
    start = time.monotonic()
    assert state.namespace("slow") is None
    assert time.monotonic() - start < 10.0  # 0.3 s with a wide margin for a loaded machine
    assert state.namespace("slow") is None  # remembered: no second wait
    apiserver.gets_gate.set()
    assert apiserver.count("get namespaces/slow") == 1  # one attempt: no urllib3 retries


def test_direct_read_failure_is_none():
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # nothing listens there
    state = ApiClusterState(client.ApiClient(cfg), fetch_timeout=0.5)
    assert state.namespace("anything") is None
    assert state.attachments() is None and not state.ready()


def test_from_environment_uses_kubeconfig_and_connects_only_on_start(apiserver, monkeypatch, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{apiserver.url}'}}}}]\n"
        "users: [{name: fake, user: {token: t0ken}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # KUBECONFIG is read when kubernetes.config is imported; point its default at the file instead
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    apiserver.put_namespace("team-a", OPTED_IN)
    threads_before = set(threading.enumerate())
    state = ApiClusterState.from_environment(uses_networks=lambda: False, backoff_min=0.02)
    assert apiserver.count() == 0  # no request and no thread before the fork
    assert not set(threading.enumerate()) - threads_before
    try:
        state.start()
        synced(state)
        assert state.namespace("team-a").labels[keys.NS_INJECTION] == keys.NS_INJECTION_ENABLED
    finally:
        state.stop()
    assert not [t.name for t in threads_of(state) if t.is_alive()]


def pooled_connections(api: client.ApiClient) -> int:
    """Connection pools urllib3 keeps open for this client, each holding the sockets it used
    (none may cross a fork)."""
    return len(api.rest_client.pool_manager.pools)


def test_prime_lists_once_before_the_fork_and_the_workers_only_watch(apiserver, make_unstarted, caplog):
    apiserver.put_namespace("team-a", OPTED_IN)
    apiserver.put_nad("team-a", "rdma-network", RDMA_VF)
    state, api = make_unstarted(lambda: True)
    threads_before = set(threading.enumerate())
    metrics.CACHE_READY.set(-1)  # whatever earlier tests left, to see that prime leaves it alone
    with caplog.at_level(logging.INFO, logger="rdma_webhook.cluster"):
        assert state.prime() is True
    # one line says what the start spent on each kind (what a slow start is diagnosed from)
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("listed before the fork")]
    assert re.fullmatch(
        r"listed before the fork in \d+\.\d{3}s: namespaces 1 in \d+\.\d{3}s \(1 pages\), "
        r"network-attachment-definitions 1 in \d+\.\d{3}s \(1 pages\)",
        line,
    ), line
    assert (apiserver.count("list namespaces"), apiserver.count("list nads")) == (1, 1)
    new_threads = set(threading.enumerate()) - threads_before
    # none but the in-process fake server's request handlers: no thread of ours crosses the fork
    assert not [t.name for t in new_threads if "process_request_thread" not in t.name]
    assert pooled_connections(api) == 0  # nor a socket
    assert metrics.CACHE_READY._value.get() == -1  # the master does not speak for the workers
    state.start()  # in the worker: synced at once, watching from the listed resourceVersion
    assert state.ready() and state.attachments() is state and metrics.CACHE_READY._value.get() == 1
    assert cached_namespace(state, "team-a").labels[keys.NS_INJECTION] == keys.NS_INJECTION_ENABLED
    eventually(lambda: apiserver.open_watches() == 2, what="both watches open")
    apiserver.put_namespace("team-b", OPTED_IN)
    apiserver.put_nad("team-b", "rdma-network", RDMA_VF)
    eventually(
        lambda: cached_namespace(state, "team-b") and state.attachment("team-b", "rdma-network"),
        what="events after the primed list",
    )
    assert (apiserver.count("list namespaces"), apiserver.count("list nads")) == (1, 1)


def test_prime_gives_up_within_its_budget_and_the_worker_lists(apiserver, make_unstarted, caplog):
    apiserver.put_namespace("team-a", OPTED_IN)
    state, api = make_unstarted()
    apiserver.lists_gate.clear()  # the API server does not answer lists
    start = time.monotonic()
    with caplog.at_level(logging.INFO, logger="rdma_webhook.cluster"):
        assert state.prime(budget=0.5) is False
    assert any(
        re.fullmatch(r"listed before the fork in \d+\.\d{3}s: namespaces not listed", r.getMessage())
        for r in caplog.records
    )
    assert time.monotonic() - start < 8.0  # bounded by the budget (0.5 s), with a wide margin
    assert not state.ready() and cached_namespace(state, "team-a") is None
    assert pooled_connections(api) == 0
    apiserver.lists_gate.set()
    state.start()
    synced(state)
    assert cached_namespace(state, "team-a") is not None


def test_prime_lists_nads_only_for_a_policy_with_a_network(apiserver, make_unstarted):
    apiserver.put_namespace("team-a", OPTED_IN)
    state, _ = make_unstarted(lambda: False)
    assert state.prime() is True
    assert (apiserver.count("list namespaces"), apiserver.count("list nads")) == (1, 0)


def test_cache_reads_make_no_requests(apiserver, make_state):
    for i in range(50):
        apiserver.put_namespace(f"ns-{i}", OPTED_IN)
    apiserver.put_nad("ns-1", "rdma-network", RDMA_VF)
    state = synced(make_state(lambda: True))
    # both watches open first: on a loaded machine a watch may start after the lists are done
    eventually(lambda: apiserver.open_watches() == 2, what="both watches open")
    before = apiserver.count()
    for _ in range(20):
        for i in range(50):
            assert state.namespace(f"ns-{i}").name == f"ns-{i}"
        assert state.attachments() is state
        assert state.attachment("ns-1", "rdma-network")["metadata"]["annotations"] == RDMA_VF
        assert state.attachment("ns-2", "rdma-network") is None
    assert apiserver.count() == before


def test_nads_are_tracked_only_when_a_policy_uses_a_network(apiserver, make_state):
    apiserver.put_namespace("team-a", OPTED_IN)
    apiserver.put_nad("team-a", "rdma-network", RDMA_VF)
    wanted = {"networks": False, "asked": 0}

    def uses_networks() -> bool:
        wanted["asked"] += 1
        return wanted["networks"]

    state = synced(make_state(uses_networks))
    eventually(lambda: wanted["asked"] >= 4, what="periodic re-check")
    assert apiserver.count("list nads") == 0 and apiserver.count("watch nads") == 0
    assert state.attachments() is None
    wanted["networks"] = True  # a policy reload added a Multus network
    eventually(lambda: state.attachments() is state, what="NAD informer synced")
    assert state.ready()
    assert state.attachment("team-a", "rdma-network")["metadata"]["annotations"] == RDMA_VF
    assert apiserver.count("list nads") == 1
    apiserver.put_nad("team-b", "rdma-network", {keys.NAD_RESOURCE_NAME: "example.com/other"})
    eventually(lambda: state.attachment("team-b", "rdma-network"), what="NAD ADDED")
    apiserver.delete_nad("team-a", "rdma-network")
    eventually(lambda: state.attachment("team-a", "rdma-network") is None, what="NAD DELETED")


def test_stop_ends_threads_promptly(apiserver, make_state):
    state = synced(make_state(lambda: True))
    eventually(lambda: apiserver.open_watches() == 2, what="both watches open")
    threads = threads_of(state)
    # the two watches, and the checker that starts the DRA informers once a policy names DRA classes
    assert sorted(t.name for t in threads) == [
        "watch-namespaces",
        "watch-network-attachment-definitions",
        "watch-policy-networks",
    ] and all(t.daemon for t in threads)
    state.stop(timeout=20.0)  # returns as soon as the threads ended; they must end, not time out
    assert not [t.name for t in threads if t.is_alive()]
    eventually(lambda: apiserver.open_watches() == 0, what="watch connections closed")


def test_stop_during_backoff(apiserver, make_state):
    state = synced(make_state(backoff_min=5.0, backoff_max=5.0))
    with apiserver.pause_watches():
        eventually(lambda: apiserver.open_watches() == 0, what="the watch dropped")  # now backing off
        start = time.monotonic()
        state.stop(timeout=20.0)
        assert time.monotonic() - start < 4.0  # the 5 s back-off was cut short, with a margin
    assert not [t.name for t in threads_of(state) if t.is_alive()]


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer-0",
            "namespace": "team-a",
            "labels": {keys.POD_INJECT: keys.POD_INJECT_TRUE},
            "annotations": {keys.POD_POLICY: "sriov-roce"},
        },
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example/trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ]
        },
    }


def test_decision_end_to_end_follows_the_nad(apiserver, make_state, policies):
    apiserver.put_namespace("team-a", OPTED_IN)
    apiserver.put_nad("team-a", "rdma-network", RDMA_VF)
    state = synced(make_state(lambda: any(p.networks for p in policies.by_name.values())))

    def asked() -> int:
        """What a decision could ask the API server for: a namespace or NAD, by get or list (the
        informers' watches, and their retries of kinds this fake does not serve, run on their own
        time in the background and are not the admission path's)."""
        return (
            apiserver.count("get ")
            + apiserver.count("list namespaces")
            + apiserver.count("list nads")
            + apiserver.count("other /apis/k8s.cni.cncf.io/")
        )  # a NAD by name

    before = asked()

    def decide() -> decision.Decision:
        return decision.decide(_pod(), state.namespace("team-a"), policies, state.attachments())

    result = decide()
    assert result.outcome == decision.MUTATED, (result.denials, result.warnings)
    limits = result.pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["example.com/rdma_vf"] == "1"
    assert asked() == before  # the admission path asked the API server nothing

    apiserver.delete_nad("team-a", "rdma-network")
    eventually(lambda: state.attachment("team-a", "rdma-network") is None, what="NAD deletion seen")
    result = decide()
    assert result.outcome == decision.DENIED
    assert any(f.rule == "network-attachment" for f in result.denials), result.denials
    assert asked() == before


def _runtime(kind: str, name: str, namespace: str | None = None, image: str = "torch:1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "managedFields": [{"manager": "kubectl"}]}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": kind,
        "metadata": meta,
        "spec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": image}]}}}
                            },
                        }
                    ]
                }
            }
        },
    }


def test_trainer_runtimes_are_listed_and_watched(apiserver, make_state):
    apiserver.trainer = True
    apiserver.put_namespace("team-a", OPTED_IN)
    apiserver.put_runtime(_runtime("ClusterTrainingRuntime", "torch-distributed"))
    apiserver.put_runtime(_runtime("TrainingRuntime", "deepspeed", "team-a"))
    state = synced(make_state(watch_runtimes=True))
    runtimes = eventually(state.runtimes, what="runtimes listed")
    assert runtimes.cluster_training_runtime("torch-distributed")["spec"]["template"]
    assert runtimes.training_runtime("team-a", "deepspeed")["metadata"] == {"name": "deepspeed", "namespace": "team-a"}
    assert runtimes.training_runtime("team-b", "deepspeed") is None
    # changes arrive through the watch
    apiserver.put_runtime(_runtime("ClusterTrainingRuntime", "torch-distributed", image="torch:2"))
    apiserver.put_runtime(_runtime("TrainingRuntime", "jax", "team-a"))
    eventually(lambda: runtimes.training_runtime("team-a", "jax") is not None, what="new runtime")
    eventually(
        lambda: (
            runtimes.cluster_training_runtime("torch-distributed")["spec"]["template"]["spec"]["replicatedJobs"][0][
                "template"
            ]["spec"]["template"]["spec"]["containers"][0]["image"]
            == "torch:2"
        ),
        what="modified runtime",
    )
    apiserver.delete_runtime("TrainingRuntime", "deepspeed", "team-a")
    eventually(lambda: runtimes.training_runtime("team-a", "deepspeed") is None, what="deleted runtime")
    assert apiserver.count("list trainingruntimes") == 1 and apiserver.count("list clustertrainingruntimes") == 1


def test_without_trainer_crds_runtimes_are_unknown_and_readiness_unaffected(apiserver, make_state, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="rdma_webhook.cluster")
    apiserver.put_namespace("team-a", OPTED_IN)
    state = synced(make_state(watch_runtimes=True, backoff_max=0.2))
    eventually(lambda: apiserver.count("other /apis/trainer.kubeflow.org") >= 4, what="404s")
    assert state.ready() and state.runtimes() is None
    assert sum("CRD not installed" in r.getMessage() for r in caplog.records) == 2  # once per kind, not per retry
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "trainingruntimes" in r.getMessage()]


def test_a_watch_that_keeps_failing_makes_the_cache_unready_until_it_works_again(apiserver, make_state):
    """Listed once, then every watch refused (a missing RBAC verb, a broken proxy): after
    `stale_after` of failures without a success the cache says it is not ready, with the reason;
    a working watch makes it ready again, events or not (a quiet cluster sends none)."""
    apiserver.put_namespace("team-a", OPTED_IN)
    state = synced(make_state(stale_after=0.3))
    with apiserver.pause_watches():
        eventually(lambda: not state.ready(), what="stale after repeated watch failures")
        reason = state.not_ready_reason()
        assert reason and reason.startswith("cluster state stale: namespaces list/watch failing for"), reason
        assert "HTTP 503" in reason, reason
        eventually(lambda: metrics.CACHE_READY._value.get() == 0, what="the gauge at the next attempt")
        assert cached_namespace(state, "team-a") is not None  # decisions still have the last state
    eventually(state.ready, what="ready again once a watch is open", timeout=20)
    assert state.not_ready_reason() is None


def test_one_failed_watch_does_not_make_the_cache_unready(apiserver, make_state):
    state = synced(make_state(stale_after=0.0))
    apiserver.drop_watches()  # one broken connection: the informer watches again at once
    apiserver.put_namespace("later", OPTED_IN)
    eventually(lambda: cached_namespace(state, "later"), what="event after the reconnect")
    assert state.ready() and state.not_ready_reason() is None


def test_lists_ask_for_metadata_only_where_decisions_read_metadata_alone(apiserver, make_unstarted):
    """Namespace and NAD lists send the PartialObjectMetadataList Accept header (with plain JSON
    as the fallback), Trainer runtime lists do not (a TrainJob's check reads their spec)."""
    from webhook.cluster import api as cluster_api, listing

    seen: dict[str, list[Any]] = {}

    def recording(informer):
        inner = informer.list_call

        def call(*args, **kwargs):
            if not kwargs.get("watch"):
                seen.setdefault(informer.kind, []).append((kwargs.get("_headers") or {}).get("Accept"))
            return inner(*args, **kwargs)

        informer.list_call = call

    for i in range(3):
        apiserver.put_namespace(f"team-{i}", {"rdma-webhook.io/injection": "enabled"})
    state, _ = make_unstarted(lambda: True, watch_runtimes=True)
    for informer in (state._ns, state._nads, *state._runtime_informers):
        recording(informer)
    state.start()
    synced(state)
    eventually(
        lambda: all(k in seen for k in ("namespaces", cluster_api.NAD_PLURAL, cluster_api.TR_PLURAL)),
        what="every kind listed",
    )
    assert set(seen["namespaces"]) == {listing.METADATA_LIST}, seen
    assert set(seen[cluster_api.NAD_PLURAL]) == {listing.METADATA_LIST}, seen
    assert set(seen[cluster_api.TR_PLURAL]) == {None}, seen
    assert listing.METADATA_LIST.startswith("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,")
    assert listing.METADATA_LIST.endswith(", application/json")
    assert cached_namespace(state, "team-2") is not None


# -- paging: limit and continue, as the real server pages ------------------------------------------


def test_a_list_in_pages_keeps_every_page(apiserver, make_state):
    """Seven namespaces in pages of three: three list requests, two of them with the continue
    token the page before gave, and every namespace of every page in the cache (a list that
    kept only its last page would hold one)."""
    for i in range(7):
        apiserver.put_namespace(f"team-{i}", OPTED_IN)
    state = synced(make_state(page_size=3))
    assert apiserver.count("list namespaces") == 3 and apiserver.continues["namespaces"] == 2
    assert sorted(state._ns.items) == [f"team-{i}" for i in range(7)]
    assert state._ns.pages == 3 and state._ns.lists == 1


def test_a_change_between_pages_reaches_the_cache_through_the_watch(apiserver, make_state):
    """The pages are one snapshot (the first page's resourceVersion): a namespace created after
    the first page is not in the list, and the watch from the list's resourceVersion brings it."""
    for i in range(5):
        apiserver.put_namespace(f"team-{i}", OPTED_IN)

    def between(kind: str, n: int) -> None:
        if kind == "namespaces" and n == 1:
            apiserver.put_namespace("created-between-pages", OPTED_IN)
            apiserver.delete_namespace("team-4")

    apiserver.page_hook = between
    state = synced(make_state(page_size=2))
    assert apiserver.count("list namespaces") == 3
    eventually(lambda: cached_namespace(state, "created-between-pages"), what="the namespace made between pages")
    eventually(lambda: cached_namespace(state, "team-4") is None, what="the namespace deleted between pages")
    assert state._ns.lists == 1  # no relist was needed


def test_an_expired_continue_token_lists_again_from_the_start(apiserver, make_state):
    """etcd compacted between two pages: the continue token gets 410 Expired, and the informer
    lists again from the first page (not from the page it had), ending with every namespace."""
    for i in range(5):
        apiserver.put_namespace(f"team-{i}", OPTED_IN)

    def compact_once(kind: str, n: int) -> None:
        if kind == "namespaces" and n == 1:
            apiserver.put_namespace("after-compaction", OPTED_IN)
            apiserver.compact()

    apiserver.page_hook = compact_once
    state = synced(make_state(page_size=2))
    assert apiserver.continues["namespaces"] >= 3  # the expired one, then the second list's two
    assert apiserver.count("list namespaces") == 1 + 1 + 3  # first page, 410, then three pages
    assert sorted(state._ns.items) == sorted([f"team-{i}" for i in range(5)] + ["after-compaction"])


# -- where a list is served from: the watch cache first (webhook.cluster.listing) -------------------


def test_the_first_list_asks_the_watch_cache_and_takes_its_whole_answer(apiserver, make_state):
    """resourceVersion=0 on the first request: a server with a watch cache answers the whole list
    in one response whatever the limit, and nothing is asked with a continue token."""
    apiserver.watch_cache = True
    for i in range(7):
        apiserver.put_namespace(f"team-{i}", OPTED_IN)
    state = synced(make_state(page_size=3))
    assert apiserver.list_versions["namespaces"] == ["0"]
    assert apiserver.count("list namespaces") == 1 and apiserver.continues["namespaces"] == 0
    assert sorted(state._ns.items) == [f"team-{i}" for i in range(7)] and state._ns.pages == 1


def test_a_server_that_pages_the_cached_list_is_followed_without_a_version_on_the_continues(apiserver, make_state):
    """Without a watch cache the server pages as asked: the first request carries
    resourceVersion=0, the continue requests none (the real server refuses both at once with 400,
    as the stand-in does), and every page is kept."""
    for i in range(7):
        apiserver.put_namespace(f"team-{i}", OPTED_IN)
    state = synced(make_state(page_size=3))
    assert apiserver.list_versions["namespaces"] == ["0"] and apiserver.continues["namespaces"] == 2
    assert sorted(state._ns.items) == [f"team-{i}" for i in range(7)]


def test_without_list_from_cache_the_list_is_a_consistent_read(apiserver, make_state):
    apiserver.watch_cache = True
    apiserver.put_namespace("team-0", OPTED_IN)
    synced(make_state(list_from_cache=False))
    assert apiserver.list_versions["namespaces"] == [None]


def test_after_a_410_the_list_asks_for_the_version_last_seen_and_after_a_refusal_reads_etcd(apiserver, make_state):
    """As client-go's reflector: a relist after the watch's 410 asks the cache for what the
    informer had seen (so the cache can never take it back in time), and when the cache cannot
    serve that version (504 Too large resource version) the next list is a consistent read."""
    apiserver.watch_cache = True
    apiserver.put_namespace("team-0", OPTED_IN)
    state = synced(make_state())
    apiserver.put_namespace("seen")
    eventually(lambda: cached_namespace(state, "seen"), what="watch progress")
    seen = state._ns.resource_version
    apiserver.list_errors["namespaces"].append(504)
    with apiserver.pause_watches():
        apiserver.put_namespace("born")
        apiserver.compact()
        eventually(lambda: apiserver.count("watch namespaces") >= 3, what="retries while paused")
    eventually(lambda: cached_namespace(state, "born") is not None, what="relist")
    assert apiserver.list_versions["namespaces"] == ["0", seen, None], apiserver.list_versions
    assert seen not in (None, "0")


def test_the_fake_server_pages_as_the_real_one(apiserver):
    """The stand-in itself: limit, continue, remainingItemCount, one resourceVersion for every
    page, key order, 410 Expired after a compaction, 400 for a token it never gave."""
    import json as _json
    import urllib.request

    for name in ("c", "a", "b"):
        apiserver.put_namespace(name)
    rv = str(apiserver.rv)

    def get(query: str) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"{apiserver.url}/api/v1/namespaces?{query}") as r:
                return r.status, _json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, _json.loads(e.read())

    code, first = get("limit=2")
    assert code == 200 and [o["metadata"]["name"] for o in first["items"]] == ["a", "b"]
    assert first["metadata"]["resourceVersion"] == rv and first["metadata"]["remainingItemCount"] == 1
    apiserver.put_namespace("d")  # after the snapshot: not in its pages
    code, second = get(f"limit=2&continue={first['metadata']['continue']}")
    assert code == 200 and [o["metadata"]["name"] for o in second["items"]] == ["c"]
    assert second["metadata"] == {"resourceVersion": rv}
    code, whole = get("")
    assert [o["metadata"]["name"] for o in whole["items"]] == ["a", "b", "c", "d"] and "continue" not in whole[
        "metadata"
    ]
    code, again = get("limit=1")
    apiserver.compact()
    code, expired = get(f"limit=1&continue={again['metadata']['continue']}")
    assert code == 410 and expired["reason"] == "Expired"
    assert get("limit=1&continue=never-given:1")[0] == 400


# -- the stale-cache rule, on a clock the test moves ------------------------------------------------


def _listed_with_clock(make_unstarted, stale_after: float) -> tuple[ApiClusterState, list[float]]:
    """A state whose namespaces were listed for real (no threads started) and whose stale rule
    reads `now[0]`: failures are then recorded by hand, at times the test chooses."""
    now = [1000.0]
    state, _ = make_unstarted(stale_after=stale_after, clock=lambda: now[0])
    state._ns.relist()
    assert state.ready()
    return state, now


def test_the_cache_turns_unready_only_after_stale_after_of_failures(apiserver, make_unstarted):
    """Both sides of the bound: failing for 59.9 s of a 60 s `stale_after` is still ready,
    60.1 s is not (with the reason); a success makes it ready at once."""
    from webhook.cluster.informer import STALE_FAILURES

    apiserver.put_namespace("team-a", OPTED_IN)
    state, now = _listed_with_clock(make_unstarted, 60.0)
    for _ in range(STALE_FAILURES):
        state._ns.failed(OSError("connection refused"))
    now[0] = 1000.0 + 59.9
    assert state.ready() and state.not_ready_reason() is None
    now[0] = 1000.0 + 60.1
    assert not state.ready()
    reason = state.not_ready_reason()
    assert reason is not None and reason.startswith("cluster state stale: namespaces list/watch failing for 60s"), (
        reason
    )
    assert f"({STALE_FAILURES} attempts, last: " in reason
    state._ns.succeeded()
    assert state.ready() and state.not_ready_reason() is None


def test_fewer_failures_than_the_threshold_never_make_the_cache_unready(apiserver, make_unstarted):
    """One failure short of STALE_FAILURES keeps the cache ready however long ago it began; the
    next failure crosses it (the threshold is exactly STALE_FAILURES, not one failure)."""
    from webhook.cluster.informer import STALE_FAILURES

    assert STALE_FAILURES > 1
    state, now = _listed_with_clock(make_unstarted, 1.0)
    for _ in range(STALE_FAILURES - 1):
        state._ns.failed(OSError("connection refused"))
    now[0] = 1000.0 + 3600.0
    assert state.ready()
    state._ns.failed(OSError("connection refused"))
    assert not state.ready()


def test_a_watch_open_long_enough_counts_as_working_on_a_quiet_cluster(apiserver, make_unstarted):
    """A watch that has stayed open past the connect timeout (+1 s) is a success although no
    event came (a quiet cluster sends none); one open for less is not yet."""
    from webhook.cluster.informer import STALE_FAILURES

    state, now = _listed_with_clock(make_unstarted, 10.0)
    for _ in range(STALE_FAILURES):
        state._ns.failed(OSError("connection refused"))
    now[0] = 1100.0
    state._ns.watching_since = 1100.0 - state.connect_timeout - 0.5
    assert not state.ready()
    state._ns.watching_since = 1100.0 - state.connect_timeout - 1.5
    assert state.ready()


def test_dra_kinds_the_server_does_not_serve_hold_nothing_up(apiserver, make_state):
    """A policy names DRA classes, and the server answers 404 for resource.k8s.io (a cluster
    before 1.34): the DRA informers are marked absent, the cache is ready, and the lookups answer
    from nothing (no claim is known, so none is judged)."""
    apiserver.put_namespace("team-a", OPTED_IN)
    state = synced(make_state(uses_dra=lambda: True))
    eventually(lambda: state.claims() is state, what="DRA kinds found absent")
    assert all(i.absent and not i.synced for i in state._dra_informers)
    assert state.claim_template("team-a", "rdma-nics") is None and state.device_class("dranet") is None
    assert state.not_ready_reason() is None
    state.stop()


def test_dra_kinds_are_not_watched_until_a_policy_names_them(apiserver, make_state):
    state = synced(make_state())
    assert state.claims() is None and not any(i.thread for i in state._dra_informers)
    state.stop()


def test_the_big_lists_are_read_into_the_fields_a_decision_reads_and_cache_what_a_json_tree_would():
    """webhook.cluster.listing: a namespace list and a NAD list as the API server sends them
    (metadata only, managedFields, a last-applied annotation) keep name, labels, namespace and
    the resourceName annotation alone, and the cache built from them is the one the whole JSON
    tree gives; nulls where the server omits fields are read as absent."""
    import orjson

    from webhook.cluster import api as cluster_api, listing
    from webhook.cluster.state import namespace_from

    managed = [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-11-26T19:25:20Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {}}},
        }
    ]
    namespaces = {
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "81644", "continue": "tok"},
        "items": [
            {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {
                    "name": "team-a",
                    "uid": "u1",
                    "resourceVersion": "7",
                    "creationTimestamp": "x",
                    "labels": {"kubernetes.io/metadata.name": "team-a", **OPTED_IN},
                    "managedFields": managed,
                },
            },
            {"metadata": {"name": "bare", "labels": None}},
        ],
    }
    nads = {
        "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "9"},
        "items": [
            {
                "metadata": {
                    "name": "rdma-net",
                    "namespace": "team-a",
                    "managedFields": managed,
                    "annotations": {
                        keys.NAD_RESOURCE_NAME: "openshift.io/mellanoxrdma",
                        "kubectl.kubernetes.io/last-applied-configuration": "{...}" * 100,
                    },
                }
            },
            {"metadata": {"name": "plain", "namespace": "team-a", "annotations": None}},
        ],
    }
    ns_doc = listing.METADATA_DECODERS["namespaces"](orjson.dumps(namespaces))
    assert ns_doc == {
        "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "81644", "continue": "tok"},
        "items": [
            {"metadata": {"name": "team-a", "labels": namespaces["items"][0]["metadata"]["labels"]}},
            {"metadata": {"name": "bare", "labels": None}},
        ],
    }
    nad_doc = listing.METADATA_DECODERS[cluster_api.NAD_PLURAL](orjson.dumps(nads))
    assert nad_doc["items"] == [
        {
            "metadata": {
                "name": "rdma-net",
                "namespace": "team-a",
                "annotations": {keys.NAD_RESOURCE_NAME: "openshift.io/mellanoxrdma"},
            }
        },
        {"metadata": {"name": "plain", "namespace": "team-a", "annotations": None}},
    ]
    for doc, whole, key, value in (
        (ns_doc, namespaces, listing.ns_key, namespace_from),
        (nad_doc, nads, listing.nad_key, listing.nad_value),
    ):
        assert {key(o): value(o) for o in doc["items"]} == {key(o): value(o) for o in whole["items"]}
