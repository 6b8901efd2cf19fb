"""webhook/verify/session.py: a container's log read as the API server streams it (chunks cut
anywhere), on the real NCCL log excerpts of tests/proof/nccl-logs/ (copied from public threads,
sources in SOURCES.yaml): the same verdict as `nccl-log` gives the whole file, and due when the
module says."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.policy.load import load_dir
from webhook.proof import nccl_log
from webhook.proof.expectation import expectation
from webhook.proof.verdict import judge
from webhook.verify.session import Session

from conftest import POLICIES

LOGS = Path(__file__).parents[1] / "proof" / "nccl-logs"
REAL = sorted(p.name for p in LOGS.glob("*.log"))
PS, _ = load_dir(POLICIES)


def whole_file(name: str, policy: str | None):
    with open(LOGS / name, "rb") as f:
        return judge(nccl_log.read_stream(f), expectation(PS.by_name.get(policy) if policy else None))


def fed(name: str, policy: str | None, cuts: list[int], session: Session | None = None) -> Session:
    data = (LOGS / name).read_bytes()
    session = session or Session(expectation(PS.by_name.get(policy) if policy else None))
    at = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        session.feed(data[at:cut], 0.0)
        at = max(at, cut)
    session.feed(b"\n", 0.0)  # the stream's end: the last line is whole
    return session


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("policy", [None, "ib-shared", "efa", "gke-gib"])
def test_any_cutting_of_a_real_log_gives_the_verdict_of_the_whole_file(name, policy):
    want = whole_file(name, policy)
    size = len((LOGS / name).read_bytes())
    rng = random.Random(name)
    for cuts in ([], list(range(size)), [rng.randrange(size) for _ in range(7)]):
        got = fed(name, policy, cuts).verdict()
        assert (got.verdict, got.reasons, got.transport, got.devices, got.gdr, len(got.ranks)) == (
            want.verdict,
            want.reasons,
            want.transport,
            want.devices,
            want.gdr,
            len(want.ranks),
        ), (name, policy, cuts[:5])


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(REAL), cuts=st.lists(st.integers(min_value=0, max_value=20_000), max_size=20))
def test_the_verdict_does_not_depend_on_where_the_chunks_end(name, cuts):
    want = whole_file(name, "ib-shared")
    got = fed(name, "ib-shared", cuts).verdict()
    assert (got.verdict, got.reasons, got.devices) == (want.verdict, want.reasons, want.devices)


def test_a_fallback_is_due_at_once_a_verified_rank_after_the_quiet_time():
    fallback = Session(expectation(PS.by_name["ib-shared"]), quiet=5.0)
    assert not fallback.due(0.0)
    fallback.feed((LOGS / "nccl-1410-k8s-verbs-missing.log").read_bytes(), 100.0)
    assert fallback.verdict().verdict == "fallback" and fallback.due(100.0)
    verified = Session(expectation(PS.by_name["ib-shared"]), quiet=5.0)
    verified.feed((LOGS / "nccl-302-ib-2.5.6.log").read_bytes(), 100.0)
    assert verified.verdict().verdict == "verified"
    assert not verified.due(104.9) and verified.due(105.0)
    verified.feed(b"epoch 1 loss 2.31\n", 104.0)  # not an NCCL line: the quiet time goes on
    assert verified.due(105.0)


def test_a_log_without_nccl_lines_is_never_due_and_never_more_than_unverifiable():
    session = Session(expectation(PS.by_name["ib-shared"]))
    session.feed(b"Loading checkpoint shards: 100%\n" * 1000, 0.0)
    assert not session.due(1e9)
    assert session.verdict().verdict == "unverifiable" and session.verdict().condition()[0] == "Unknown"


def test_a_line_over_the_limit_is_skipped_and_the_reading_stops_at_max_bytes():
    real = (LOGS / "nccl-1410-k8s-verbs-missing.log").read_bytes()
    session = Session(expectation(PS.by_name["ib-shared"]), max_bytes=len(real) + 100_000)
    session.feed(b"x" * 50_000, 0.0)  # a line with no end, longer than any NCCL line
    session.feed(b"y" * 40_000 + b"\n", 0.0)
    session.feed(real, 1.0)
    assert session.verdict().verdict == "fallback" and session.reader.reading.partial_lines >= 1
    assert len(session.partial) <= 8192
    small = Session(expectation(PS.by_name["ib-shared"]), max_bytes=64)
    small.feed(real, 0.0)
    assert small.full and small.read == 64 and small.verdict().verdict == "unverifiable"
