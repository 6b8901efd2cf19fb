"""What each admission leaves besides its answer, the metrics and the log line, written once per
pass of the event loop instead of once per admission.

Why: under load uvicorn's loop wakes with several requests ready (about 4 per wake-up at
saturation: strace counted 1,871 epoll waits for 7,484 requests of one worker) and answers
them one after another before it reads the sockets again. Each admission made four
multi-process metric writes (each a lock, a getpid system call and a struct written into the
metric's mmap'd file) and one write system call for its log line. Gathered per pass, the log
lines go out in one write and each counter is incremented once by its number of admissions
(the duration histogram still takes each observation).

When: the first record of a pass schedules the flush with `call_soon`, which runs as soon as
the requests of that pass are answered, before the loop reads a socket again, so a log reader
or a scrape sees an admission as promptly as before, within the same pass. Outside a running
event loop (a WSGI server's threads, the app called directly in tests) each record is written
at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from webhook.telemetry import logs, metrics

log = logging.getLogger("rdma_webhook.batch")

# endpoint, outcome, policy, HTTP status, seconds taken, the log line's fields
Record = tuple[str, str, str, int, float, dict[str, Any]]


class Batch:
    """The admissions answered in this pass of the loop whose metrics and log lines are not
    written yet. One per process; only the loop's thread records while a loop runs."""

    def __init__(self) -> None:
        self._pending: list[Record] = []

    def record(
        self, endpoint: str, outcome: str, policy: str, status: int, elapsed: float, fields: dict[str, Any]
    ) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: nothing would flush, so write now
            write([(endpoint, outcome, policy, status, elapsed, fields)])
            return
        if not self._pending:
            loop.call_soon(self.flush)
        self._pending.append((endpoint, outcome, policy, status, elapsed, fields))

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        try:
            write(pending)
        except Exception:  # a full disk or a closed stdout must not stop the loop's callbacks
            log.exception("could not write the metrics and log lines of %d admissions", len(pending))


def write(records: list[Record]) -> None:
    counts: dict[tuple[Any, ...], int] = {}
    for endpoint, outcome, policy, status, elapsed, _ in records:
        key = (metrics.ADMISSIONS, endpoint, outcome, policy)
        counts[key] = counts.get(key, 0) + 1
        key = (metrics.RESPONSES, str(status))
        counts[key] = counts.get(key, 0) + 1
        metrics.child(metrics.DURATION, endpoint).observe(elapsed)
    for key, n in counts.items():
        metrics.child(*key).inc(n)
    logs.admissions([r[5] for r in records])
