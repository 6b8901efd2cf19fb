"""webhook/verify/controller.py against a cluster in process: pod events in (the webhook's own
mutated pods with a kubelet's status, tests/verify/test_starts.py), container logs streamed from
the real NCCL log excerpts of tests/proof/nccl-logs/ in chunks with pauses, and what the verifier
writes back (the condition patch, Events) recorded. The real API server and node: e2e."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest

from webhook.telemetry.metrics import child
from webhook.verify.controller import LOG_READS
from webhook.verify.controller import Verifier
from webhook.verify.starts import Start

from tests.verify.test_starts import PS, admitted, running, trainer

LOGS = Path(__file__).parents[1] / "proof" / "nccl-logs"


class Cluster:
    """Pod events from a queue; each container's log from `logs[(pod, container)]`: a list of
    chunks (bytes) and pauses (float seconds), then the end, or an exception to raise."""

    def __init__(self):
        self.events: asyncio.Queue = asyncio.Queue()
        self.logs: dict[tuple[str, str], list] = {}
        self.reads: list[Start] = []
        self.conditions: list[tuple[Start, dict]] = []
        self.created: list[dict] = []
        self.evicted: list[str] = []
        self.open = 0
        self.most_open = 0

    async def pod_events(self):
        while True:
            yield await self.events.get()

    async def log(self, start: Start, limit_bytes: int):
        self.reads.append(start)
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            for item in self.logs.get((start.pod, start.container), []):
                if isinstance(item, float):
                    await asyncio.sleep(item)
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            self.open -= 1

    async def set_condition(self, start, patch):
        self.conditions.append((start, patch))

    async def create_event(self, event):
        self.created.append(event)

    async def evict(self, start):
        self.evicted.append(start.pod)


def real(name: str) -> bytes:
    return (LOGS / name).read_bytes()


def pod_named(name: str, policy_pod=None) -> dict:
    pod = copy.deepcopy(policy_pod or admitted(trainer()))
    pod["metadata"]["name"] = name
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "job-" + name, "uid": "j", "controller": True}
    ]
    return pod


async def settle(verifier: Verifier, cluster: Cluster, events: list, wait: float = 0.2) -> None:
    for event in events:
        verifier.handle(*event)
    await asyncio.sleep(wait)
    while verifier.tasks:
        await asyncio.gather(*list(verifier.tasks.values()), return_exceptions=True)


def conditions(cluster: Cluster) -> dict[str, tuple[str, str]]:
    out = {}
    for start, patch in cluster.conditions:
        [c] = patch["status"]["conditions"]
        assert c["type"] == "rdma-webhook.io/TransportVerified"
        out[start.pod] = (c["status"], c["reason"])
    return out


def run(coro):
    return asyncio.run(coro)


def test_each_verdict_reaches_the_condition_and_events_of_the_pod_and_its_job():
    async def go():
        cluster = Cluster()
        verifier = Verifier(cluster, lambda: PS, quiet=0.05, window=2.0)
        cases = {
            "ib": [real("nccl-302-ib-2.5.6.log")],
            "socket": [real("nccl-1410-k8s-verbs-missing.log")],
            "warn-only": [real("nccl-1652-tcpx-warn-only.log")],
            "silent": [b"Loading checkpoint shards: 100%\n"],
            "gdr-off": [real("nccl-392-gdr-off-2.5.7.log")],
        }
        events = []
        for name, chunks in cases.items():
            cluster.logs[(name, "trainer")] = chunks
            events.append(("ADDED", running(pod_named(name), "trainer")))
        await settle(verifier, cluster, events)
        return cluster

    cluster = run(go())
    assert conditions(cluster) == {
        "ib": ("True", "Verified"),
        "socket": ("False", "NetSocket"),
        "warn-only": ("Unknown", "Unverifiable"),
        "silent": ("Unknown", "Unverifiable"),
        "gdr-off": ("False", "GdrDisabled"),
    }
    by_target = {(e["regarding"]["kind"], e["regarding"]["name"]): e for e in cluster.created}
    assert len(cluster.created) == 10
    socket = by_target[("Pod", "socket")]
    assert socket["type"] == "Warning" and socket["reason"] == "TransportNetSocket"
    assert "NCCL uses socket" in socket["note"] and "policy ib-shared" in socket["note"]
    job = by_target[("MPIJob", "job-socket")]
    assert job["related"]["name"] == "socket" and job["note"] == socket["note"]
    assert by_target[("Pod", "ib")]["type"] == "Normal"


def test_one_read_per_container_start_however_often_the_pod_is_seen():
    async def go():
        cluster = Cluster()
        verifier = Verifier(cluster, lambda: PS, quiet=0.05, window=2.0)
        pod = running(pod_named("p"), "trainer")
        cluster.logs[("p", "trainer")] = [real("nccl-302-ib-2.5.6.log")]
        await settle(verifier, cluster, [("ADDED", pod)] + [("MODIFIED", pod)] * 5)
        first = len(cluster.reads)
        restarted = running(pod_named("p"), "trainer", restarts=1)
        await settle(verifier, cluster, [("MODIFIED", restarted), ("MODIFIED", restarted)])
        return first, cluster

    first, cluster = run(go())
    assert first == 1 and len(cluster.reads) == 2 and len(cluster.conditions) == 2


def test_a_verdict_comes_within_the_quiet_time_of_the_line_not_at_the_end_of_the_stream():
    async def go():
        cluster = Cluster()
        verifier = Verifier(cluster, lambda: PS, quiet=0.1, window=30.0)
        lines = real("nccl-302-ib-2.5.6.log")
        cluster.logs[("p", "trainer")] = [b"starting\n", 0.2, lines, 20.0]  # then the job runs for long
        loop = asyncio.get_running_loop()
        began = loop.time()
        verifier.handle("ADDED", running(pod_named("p"), "trainer"))
        while not cluster.conditions:
            await asyncio.sleep(0.01)
            assert loop.time() - began < 5
        took = loop.time() - began
        for task in list(verifier.tasks.values()):
            task.cancel()
        return took, cluster

    took, cluster = run(go())
    assert conditions(cluster) == {"p": ("True", "Verified")}
    assert took < 2.0 and cluster.open == 0  # the stream was closed once the verdict was given


def test_a_deleted_pod_mid_read_and_an_api_error_report_nothing_and_stop_nothing():
    async def go():
        cluster = Cluster()
        verifier = Verifier(cluster, lambda: PS, quiet=0.05, window=30.0)
        cluster.logs[("gone", "trainer")] = [b"x\n", 10.0]
        cluster.logs[("broken", "trainer")] = [RuntimeError("HTTP 429: too many requests")]
        cluster.logs[("fine", "trainer")] = [real("nccl-1053-socket-lo.log")]
        gone = running(pod_named("gone"), "trainer")
        verifier.handle("ADDED", gone)
        verifier.handle("ADDED", running(pod_named("broken"), "trainer"))
        await asyncio.sleep(0.1)
        verifier.handle("DELETED", gone)
        await settle(verifier, cluster, [("ADDED", running(pod_named("fine"), "trainer"))])
        return verifier, cluster

    errors = child(LOG_READS, "error")._value.get()
    verifier, cluster = run(go())
    assert conditions(cluster) == {"fine": ("False", "NetSocket")}
    assert child(LOG_READS, "error")._value.get() == errors + 1
    assert "uid-gone" not in verifier.seen and cluster.open == 0


def test_a_fresh_list_forgets_the_pods_it_no_longer_holds():
    async def go():
        cluster = Cluster()
        verifier = Verifier(cluster, lambda: PS, quiet=0.05, window=1.0)
        a, b = running(pod_named("a"), "trainer"), running(pod_named("b"), "trainer")
        await settle(verifier, cluster, [("ADDED", a), ("ADDED", b), ("SYNC", {"items": [b]})])
        return verifier

    assert set(run(go()).seen) == {"uid-b"}


@pytest.mark.parametrize("concurrency", [1, 3])
def test_reads_wait_for_a_slot_and_the_memory_of_a_read_is_bounded(concurrency):
    async def go():
        cluster = Cluster()
        verifier = Verifier(cluster, lambda: PS, quiet=0.02, window=5.0, max_bytes=256 * 1024, concurrency=concurrency)
        big = real("nccl-1410-k8s-verbs-missing.log") + b"z" * 1_000_000  # the job's own output after
        events = []
        for i in range(8):
            cluster.logs[(f"p{i}", "trainer")] = [b"noise\n" * 1000, big]
            events.append(("ADDED", running(pod_named(f"p{i}"), "trainer")))
        await settle(verifier, cluster, events)
        return cluster

    cluster = run(go())
    assert cluster.most_open <= concurrency and len(conditions(cluster)) == 8
    assert set(conditions(cluster).values()) == {("False", "NetSocket")}


def test_a_policy_that_fails_on_fallback_evicts_only_what_the_lines_prove():
    """proof.onFallback: fail: a pod on TCP or with a failed transport is evicted (its Events say
    so first); degraded, unverifiable and verified pods are not; the default policy evicts none."""
    from webhook.policy.load import load_texts

    text = (Path(__file__).parents[2] / "policies" / "ib-shared.yaml").read_text() + "proof: {onFallback: fail}\n"
    failing, errors = load_texts([("ib-shared.yaml", text)])
    assert failing is not None, errors
    cases = {
        "socket": "nccl-1410-k8s-verbs-missing.log",
        "completion": "nccl-1737-completion-err5.log",
        "gdr-off": "nccl-392-gdr-off-2.5.7.log",
        "warn-only": "nccl-1652-tcpx-warn-only.log",
        "ib": "nccl-302-ib-2.5.6.log",
    }

    async def go(policies):
        cluster = Cluster()
        verifier = Verifier(cluster, lambda: policies, quiet=0.05, window=2.0)
        events = []
        for name, log in cases.items():
            cluster.logs[(name, "trainer")] = [real(log)]
            events.append(("ADDED", running(pod_named(name), "trainer")))
        await settle(verifier, cluster, events)
        return cluster

    cluster = run(go(failing))
    assert sorted(cluster.evicted) == ["completion", "socket"]
    notes = {e["regarding"]["name"]: e for e in cluster.created if e["regarding"]["kind"] == "Pod"}
    assert notes["socket"]["note"].startswith("evicting the pod (policy ib-shared: proof.onFallback fail): ")
    assert notes["socket"]["action"] == "Evict" and notes["gdr-off"]["action"] == "VerifyTransport"
    assert run(go(PS)).evicted == []


def test_an_eviction_the_api_server_refuses_leaves_the_pod_and_says_so():
    """A PodDisruptionBudget (or any API error) refuses the eviction: the pod is not evicted, the
    verdict stays reported, a second Warning Event says the pod was not evicted and why, and the
    metric counts it apart from the evictions; the next pod is still evicted."""
    from webhook.policy.load import load_texts

    text = (Path(__file__).parents[2] / "policies" / "ib-shared.yaml").read_text() + "proof: {onFallback: fail}\n"
    failing, errors = load_texts([("ib-shared.yaml", text)])
    assert failing is not None, errors

    class Guarded(Cluster):
        async def evict(self, start):
            if start.pod == "guarded":
                raise RuntimeError("HTTP 429: Cannot evict pod as it would violate the pod's disruption budget.")
            await super().evict(start)

    async def go():
        cluster = Guarded()
        verifier = Verifier(cluster, lambda: failing, quiet=0.05, window=2.0)
        events = []
        for name in ("guarded", "free"):
            cluster.logs[(name, "trainer")] = [real("nccl-1410-k8s-verbs-missing.log")]
            events.append(("ADDED", running(pod_named(name), "trainer")))
        await settle(verifier, cluster, events)
        return cluster

    refused_before = child(LOG_READS, "eviction-refused")._value.get()
    evicted_before = child(LOG_READS, "evicted")._value.get()
    cluster = run(go())
    assert cluster.evicted == ["free"]
    assert conditions(cluster) == {"guarded": ("False", "NetSocket"), "free": ("False", "NetSocket")}
    refused = [e for e in cluster.created if e["reason"] == "EvictionRefused"]
    assert [e["regarding"]["name"] for e in refused] == ["guarded"]
    assert refused[0]["type"] == "Warning" and "disruption budget" in refused[0]["note"]
    assert refused[0]["note"].startswith("not evicted (policy ib-shared: proof.onFallback fail)")
    assert child(LOG_READS, "eviction-refused")._value.get() - refused_before == 1
    assert child(LOG_READS, "evicted")._value.get() - evicted_before == 1
