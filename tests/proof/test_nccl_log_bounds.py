"""The reader's memory is bounded whatever the input's size: a 1 GB log (generated lazily from
real lines, never held) is read through a fixed buffer, only its first `max_bytes`, and the
memory it takes does not grow with the bytes read nor with the number of ranks. Peak memory is
measured with tracemalloc (allocations by Python code during the read), not by timing."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

from webhook.proof import expectation, nccl_log, verdict

LOGS = Path(__file__).parent / "nccl-logs"
GB = 1 << 30


class GeneratedLog(io.RawIOBase):
    """`size` bytes made of `lines` repeated (each prefixed by `prefix(i)` for the i-th), produced
    as they are read: nothing but the current line is ever held."""

    def __init__(self, lines: list[bytes], size: int, prefix=lambda i: b""):
        self.lines, self.size, self.prefix = lines, size, prefix
        self.served = 0
        self.count = 0
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self.size - self.served)
        if want <= 0:
            return 0
        out = bytearray()
        while len(out) < want:
            if not self.pending:
                self.pending = self.prefix(self.count) + self.lines[self.count % len(self.lines)] + b"\n"
                self.count += 1
            take = self.pending[: want - len(out)]
            out += take
            self.pending = self.pending[len(take) :]
        buffer[: len(out)] = out
        self.served += len(out)
        return len(out)


def real_lines(name: str) -> list[bytes]:
    return (LOGS / name).read_bytes().splitlines()


def peak_of(read) -> tuple[int, object]:
    tracemalloc.start()
    try:
        result = read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


_CHILD = """
import io, json, sys
from tests.proof.test_nccl_log_bounds import GB, GeneratedLog, real_lines
from webhook.proof import expectation, nccl_log, verdict
name, max_bytes, whole = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "whole"
def peak_kib():  # this process's own resident high-water mark (getrusage's ru_maxrss survives exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
before = peak_kib()
raw = GeneratedLog(real_lines(name), GB)
held = io.BufferedReader(GeneratedLog(real_lines(name), GB)).read(max_bytes) if whole else b""  # the control
reading = nccl_log.read_stream(io.BufferedReader(raw, buffer_size=64 * 1024), max_bytes=max_bytes, max_lines=10**9)
got = verdict.judge(reading, expectation.ANY_RDMA)
after = peak_kib()
print(json.dumps({"grew_kib": after - before, "served": raw.served, "bytes": reading.bytes,
                  "truncated": reading.truncated, "verdict": got.verdict, "reasons": got.reasons,
                  "ranks": len(got.ranks)}))
"""


def read_in_child(name: str, max_bytes: int, whole: bool = False) -> dict:
    """Read a lazily generated 1 GB log in a fresh interpreter and report how much its peak
    resident memory (the kernel's VmHWM, KiB) grew during the read: tracemalloc would slow a read
    of millions of lines tenfold, and a fresh process has no earlier peak to hide it (getrusage's
    ru_maxrss would: Linux keeps it across exec, so a child of a large pytest starts high)."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, name, str(max_bytes), "whole" if whole else "stream"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout)


def test_a_1_gb_log_is_read_only_up_to_max_bytes_in_bounded_memory():
    got = read_in_child("nccl-226-ec2-socket-2.4.7.log", nccl_log.MAX_BYTES)
    assert got["truncated"]
    assert got["bytes"] <= nccl_log.MAX_BYTES
    assert got["served"] <= nccl_log.MAX_BYTES + 2 * 64 * 1024  # the rest of the gigabyte never read
    assert got["grew_kib"] < 4 * 1024, got
    assert (got["verdict"], got["reasons"][0], got["ranks"]) == ("fallback", "NetSocket", 8)


def test_memory_does_not_grow_with_the_bytes_read():
    small = read_in_child("nccl-tests-185-roce-2.19.log", 1 << 20)
    large = read_in_child("nccl-tests-185-roce-2.19.log", 32 << 20)
    assert large["bytes"] > 31 << 20
    assert large["grew_kib"] < small["grew_kib"] + 2 * 1024, (small, large)


def test_the_measure_sees_a_log_held_whole():
    """The control: the same child holding the first 32 MiB it reads grows by about that much,
    so the bounds above would catch a reader that loads its input."""
    held = read_in_child("nccl-tests-185-roce-2.19.log", 32 << 20, whole=True)
    assert held["grew_kib"] > 24 * 1024, held


def test_memory_does_not_grow_past_max_ranks():
    """A launcher's log of ever more ranks ([rankN]: prefixes on the TCPX README's lines, which
    carry no host:pid): at most max_ranks are kept, the rest counted."""

    def read(ranks: int):
        raw = GeneratedLog(real_lines("skypilot-tcpx-plugin-lines.log"), GB, lambda i: b"[rank%d]:" % (i // 2))
        return nccl_log.read_stream(io.BufferedReader(raw), max_lines=2 * ranks, max_ranks=1000)

    at_cap, reading = peak_of(lambda: read(1000))
    past_cap, reading = peak_of(lambda: read(20_000))
    assert len(reading.ranks) == 1000 and reading.ranks_dropped == 2 * 19_000
    assert past_cap < at_cap * 1.25 + 64 * 1024, (at_cap, past_cap)
    assert verdict.judge(reading, expectation.ANY_RDMA).verdict == "unverifiable"
