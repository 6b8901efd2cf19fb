"""The verifier's loop: pod events in, one log read per container start, verdicts out.

Each pod event (from a watch of the pods the webhook mutated: the applied-policy label selects
them) yields the pod's container starts (webhook.verify.starts); a start not seen before gets one
task that opens one streaming read of that container's log (follow, limitBytes), feeds it to a
`Session` and reports the verdict as soon as it is due, then closes the stream. A start is
remembered until its pod is deleted, so that a pod update never reads a log twice; a restarted
container is a new start.

Bounds: at most `concurrency` reads at once (the rest wait their turn), each at most
`Session.max_bytes` and `window` seconds; a read that fails (the pod deleted mid-read, an API
error, throttling) ends its start with no verdict reported as proof, counted in the metric, and
never stops the loop. Nothing here talks to the API server itself: `Cluster` does (the real one
is webhook.verify.kube).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Callable, Protocol

from webhook.core.model import PolicySet
from webhook.proof.expectation import expectation
from webhook.proof.verdict import FAILED, FALLBACK, Verdict
from prometheus_client import Counter, Gauge

from webhook.telemetry.metrics import child
from webhook.verify import report
from webhook.verify.session import CONCURRENCY, MAX_BYTES, QUIET, WINDOW, Session
from webhook.verify.starts import Start, starts

log = logging.getLogger("rdma_webhook.verify")

# The verifier's metrics, on its own /metrics (`verify --metrics-port`): defined here, not in
# webhook.telemetry.metrics, so that the webhook's processes never export them. One count per
# container start read, by the policy it was admitted under, the verdict and the condition's
# reason; the reads by result; the reads under way.
TRANSPORT_VERDICTS = Counter(
    "rdma_webhook_transport_verdicts",
    "NCCL transport verdicts of container starts, by policy, verdict and reason.",
    ["policy", "verdict", "reason"],
)
LOG_READS = Counter("rdma_webhook_log_reads", "Container logs read by the verifier, by result.", ["result"])
READS_OPEN = Gauge("rdma_webhook_log_reads_open", "Container logs being read by the verifier.")
METRIC_NAMES = frozenset(
    {"rdma_webhook_transport_verdicts_total", "rdma_webhook_log_reads_total", "rdma_webhook_log_reads_open"}
)


class Cluster(Protocol):
    """What the verifier needs of the cluster (webhook.verify.kube against the API server; the
    tests' and the benchmark's in process)."""

    def pod_events(self) -> AsyncIterator[tuple[str, dict[str, Any]]]: ...

    def log(self, start: Start, limit_bytes: int) -> AsyncIterator[bytes]: ...

    async def set_condition(self, start: Start, patch: dict[str, Any]) -> None: ...

    async def create_event(self, event: dict[str, Any]) -> None: ...

    async def evict(self, start: Start) -> None: ...


async def _pump(stream: AsyncIterator[bytes], into: asyncio.Queue) -> None:
    """The stream's chunks into a queue, then None (or the error that ended it): waiting on a
    queue can time out and wait again, where a timed-out wait on the stream itself would end it."""
    try:
        async for chunk in stream:
            await into.put(chunk)
        await into.put(None)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        await into.put(exc)
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Verifier:
    def __init__(
        self,
        cluster: Cluster,
        policies: Callable[[], PolicySet | None],
        quiet: float = QUIET,
        window: float = WINDOW,
        max_bytes: int = MAX_BYTES,
        concurrency: int = CONCURRENCY,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.cluster, self.policies = cluster, policies
        self.quiet, self.window, self.max_bytes, self.clock = quiet, window, max_bytes, clock
        self.slots = asyncio.Semaphore(concurrency)
        self.seen: dict[str, set[tuple[str, str, str]]] = {}  # pod uid -> the keys of its starts read
        self.tasks: dict[tuple[str, str, str], asyncio.Task] = {}
        self.reported: list[tuple[Start, Verdict]] = []  # the last verdicts (bounded), for `status` and tests
        self.max_reported = 10_000

    async def run(self) -> None:
        """Follow pod events until cancelled."""
        async for kind, pod in self.cluster.pod_events():
            self.handle(kind, pod)

    def handle(self, kind: str, pod: dict[str, Any]) -> None:
        """One watch event: new starts get their read; a deleted pod's reads end and are forgotten.
        `SYNC` (a fresh list, `{"items": [...]}`): the pods not in it are gone."""
        if kind == "SYNC":
            there = {str((p.get("metadata") or {}).get("uid") or "") for p in pod.get("items") or ()}
            for uid in [uid for uid in self.seen if uid not in there]:
                self._forget(uid)
            return
        meta = pod.get("metadata") if isinstance(pod, dict) and isinstance(pod.get("metadata"), dict) else {}
        if kind == "DELETED":
            self._forget(str(meta.get("uid") or ""))
            return
        for start in starts(pod):
            keys = self.seen.setdefault(start.uid, set())
            if start.key in keys:
                continue
            keys.add(start.key)
            self.tasks[start.key] = asyncio.get_running_loop().create_task(self.verify(start))

    def _forget(self, uid: str) -> None:
        for key in self.seen.pop(uid, set()):
            task = self.tasks.pop(key, None)
            if task is not None:
                task.cancel()

    async def verify(self, start: Start) -> Verdict | None:
        """Read one start's log and report its verdict; None when it could not be read."""
        try:
            async with self.slots:
                verdict = await self._read(start)
            if verdict is not None:
                await self._report(start, verdict)
            return verdict
        except asyncio.CancelledError:
            child(LOG_READS, "cancelled").inc()
            raise
        except Exception as exc:  # an API error, a pod gone: this start only, never the loop
            child(LOG_READS, "error").inc()
            log.warning("verifying %s/%s container %s: %s", start.namespace, start.pod, start.container, exc)
            return None
        finally:
            self.tasks.pop(start.key, None)

    async def _read(self, start: Start) -> Verdict:
        policy = (self.policies() or PolicySet({})).by_name.get(start.policy)
        session = Session(expectation(policy), self.quiet, self.max_bytes)
        chunks: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(maxsize=64)
        pump = asyncio.get_running_loop().create_task(_pump(self.cluster.log(start, self.max_bytes), chunks))
        READS_OPEN.inc()
        began = self.clock()
        try:
            while not session.full:
                left = self.window - (self.clock() - began)
                wait = left if session.last_nccl is None else min(left, self.quiet)
                if wait <= 0:
                    break
                try:
                    chunk = await asyncio.wait_for(chunks.get(), wait)
                except TimeoutError:
                    chunk = b""
                if chunk is None:  # the stream ended: the container stopped, or the byte limit
                    break
                if isinstance(chunk, BaseException):
                    raise chunk
                session.feed(chunk, self.clock())
                if session.due(self.clock()):
                    break
            child(LOG_READS, "read").inc()
            return session.verdict()
        finally:
            READS_OPEN.dec()
            pump.cancel()  # and the stream closed before the slot is given to the next read
            await asyncio.gather(pump, return_exceptions=True)

    async def _report(self, start: Start, verdict: Verdict) -> None:
        now = _now()
        child(TRANSPORT_VERDICTS, *report.metric_labels(start, verdict)).inc()
        self.reported.append((start, verdict))
        del self.reported[: -self.max_reported]
        await self.cluster.set_condition(start, report.condition_patch(start, verdict, now))
        failing = verdict.verdict in (FALLBACK, FAILED) and verdict.expected.on_fallback == "fail"
        for event in report.events(start, verdict, now, evicting=failing):
            await self.cluster.create_event(event)
        log.info(report.summary(start, verdict))
        if failing:
            # The policy's `proof.onFallback: fail`: the pod is evicted (the Eviction API, so a
            # PodDisruptionBudget is respected), only on a verdict the log's own lines prove (a
            # rank on TCP, a failed transport), never on `degraded` or `unverifiable`. Refused (a
            # budget, an API error): the pod runs on, and a second Event says so.
            try:
                await self.cluster.evict(start)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                child(LOG_READS, "eviction-refused").inc()
                log.warning("evicting %s/%s: %s", start.namespace, start.pod, exc)
                await self.cluster.create_event(report.eviction_refused(start, str(exc), _now()))
                return
            child(LOG_READS, "evicted").inc()
