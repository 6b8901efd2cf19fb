"""One container start's log, read as it is written, and when its verdict is due.

The log arrives in chunks from one streaming read (`follow`, bounded by `limitBytes`); the lines
go to NCCL's log reader (webhook.proof.nccl_log.Reader) as they complete. NCCL prints its
transport lines at communicator init, all ranks of a pod within moments of each other, so:

- a rank on TCP or a failed transport is due at once (`fallback`, `failed`: the job is slow or
  broken now, and more lines cannot make it right);
- anything else is due once NCCL has said something about its network and then been quiet for
  `quiet` seconds (the other ranks' lines would have come by then);
- the end of the stream (the container stopped, or the byte limit), or the end of the window
  the verifier gives a start, makes the verdict due with whatever was read: `unverifiable` when
  no line proves anything. Never `verified` on lines that do not prove it (webhook.proof.verdict).

Memory: the reader's own bounds, one partial line of at most MAX_LINE bytes, and nothing past
`max_bytes`.
"""

from __future__ import annotations

from webhook.proof.expectation import Expectation
from webhook.proof.nccl_log import MAX_LINE, Reader
from webhook.proof.verdict import FAILED, FALLBACK, Verdict, judge

QUIET = 5.0  # seconds without a new NCCL line after which the ranks seen have all spoken
MAX_BYTES = 4 * 1024 * 1024  # NCCL's init lines come first; a start's log is read this far at most
WINDOW = 1800.0  # seconds a start's log is followed waiting for NCCL's init lines
CONCURRENCY = 2000  # logs read at once by one verifier (webhook.verify.controller)


class Session:
    """The reading of one container start: `feed` chunks as they arrive, ask `due(now)`, then
    take `verdict()`."""

    def __init__(self, expected: Expectation, quiet: float = QUIET, max_bytes: int = MAX_BYTES):
        self.expected, self.quiet, self.max_bytes = expected, quiet, max_bytes
        self.reader = Reader()
        self.read = 0
        self.partial = b""
        self.skipping = False  # inside a line longer than MAX_LINE: its rest proves nothing
        self.last_nccl: float | None = None  # when the last NCCL line was read
        self._verdict: Verdict | None = None

    @property
    def full(self) -> bool:
        return self.read >= self.max_bytes

    def feed(self, chunk: bytes, now: float) -> None:
        """Read a chunk of the log (any size, lines cut anywhere)."""
        if self.full:
            return
        chunk = chunk[: self.max_bytes - self.read]
        self.read += len(chunk)
        before = self.reader.reading.nccl_lines
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        for raw in lines:
            if self.skipping:
                self.skipping = False  # the end of the cut line
                continue
            self._line(raw)
        if len(self.partial) > MAX_LINE:
            self.partial, self.skipping = b"", True
            self.reader.reading.partial_lines += 1
        if self.reader.reading.nccl_lines != before:
            self.last_nccl, self._verdict = now, None

    def _line(self, raw: bytes) -> None:
        if len(raw) > MAX_LINE:
            self.reader.reading.partial_lines += 1
            return
        self.reader.reading.bytes += len(raw) + 1
        self.reader.feed(raw.rstrip(b"\r").decode("utf-8", errors="replace"))

    def verdict(self) -> Verdict:
        """The verdict of what has been read (a line still without its newline is not read: it
        may be cut)."""
        if self._verdict is None:
            self._verdict = judge(self.reader.reading, self.expected)
        return self._verdict

    def due(self, now: float) -> bool:
        """Whether the verdict can be given now, before the stream ends (see the module docstring)."""
        if self.last_nccl is None:
            return False
        if self.verdict().verdict in (FALLBACK, FAILED):
            return True
        return now - self.last_nccl >= self.quiet
