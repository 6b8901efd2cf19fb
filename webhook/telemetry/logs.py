"""Logs: one JSON object per line on stdout, for the cluster's log collector.

Everything goes through the standard `logging` module with `JsonFormatter`, except the one line
per admission, which `admissions()` writes itself: a `logging` call cost 24 µs per request (a
LogRecord, the caller's frame, the handler lock, a flush; benchmarks/README.md), a third of a
whole decision, on the path of every pod creation. The admission line has the same shape (time,
level, logger, msg, then its fields) and goes to the same stream in whole lines, one `write` for
the lines of all admissions one pass of the event loop answered (`webhook.serving.batch`), so lines from
both paths never interleave. It is written only when the `rdma_webhook.admission` logger is enabled
for INFO, which `setup_logging` reads once.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import orjson

ADMISSION_LOGGER = "rdma_webhook.admission"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"

_log = logging.getLogger(ADMISSION_LOGGER)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and structured extras."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": self.formatTime(record, _TIME_FORMAT),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        admission = getattr(record, "admission", None)
        if admission:
            doc.update(admission)
        for key in ("file", "policy", "field"):
            if getattr(record, key, None) is not None:
                doc[key] = getattr(record, key)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(
            doc, default=str, option=orjson.OPT_NON_STR_KEYS
        ).decode()  # UTF-8 as is, like ensure_ascii=False


class _AdmissionWriter:
    """Writes admission lines straight to a file descriptor, with the time string cached per
    second; several lines go out in one `write` (each line whole, so they never interleave)."""

    def __init__(self, fd: int):
        self.fd, self._second, self._stamp = fd, -1, ""

    def __call__(self, many: list[dict[str, Any]]) -> None:
        now = int(time.time())
        if now != self._second:
            self._second, self._stamp = now, time.strftime(_TIME_FORMAT, time.localtime(now))
        head = {"time": self._stamp, "level": "info", "logger": ADMISSION_LOGGER, "msg": "admission"}
        lines = [orjson.dumps({**head, **fields}, default=str, option=orjson.OPT_APPEND_NEWLINE) for fields in many]
        data = memoryview(lines[0] if len(lines) == 1 else b"".join(lines))
        while data:
            data = data[os.write(self.fd, data) :]


_writer: _AdmissionWriter | None = None


def setup_logging(level: str = "INFO") -> None:
    """JSON lines on stdout at `level`; admission lines on the direct path when INFO is on."""
    global _writer
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    _writer = None
    if _log.isEnabledFor(logging.INFO):
        try:
            sys.stdout.flush()
            _writer = _AdmissionWriter(sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):  # a stdout without a file descriptor: plain logging
            pass


def admissions(many: list[dict[str, Any]]) -> None:
    """Log admissions, in order: on the direct path once `setup_logging` set it up, one `write`
    for all of them (`webhook.serving.batch` hands over those of one loop pass), else (before it, in
    tests, or with INFO off) through `logging`, which also applies the level."""
    if not many:
        return
    if _writer is not None:
        _writer(many)
    elif _log.isEnabledFor(logging.INFO):
        for fields in many:
            _log.info("admission", extra={"admission": fields})
