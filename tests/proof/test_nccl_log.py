"""The reader on real lines as they reach it: container-runtime, kubectl and launcher prefixes,
two real logs interleaved, lines cut at every byte, random bytes. Every line used here is one of
tests/proof/nccl-logs/ (copied from public threads); only prefixes and the order of whole lines
are made by the tests."""

from __future__ import annotations

import io
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.strategies import examples
from webhook.proof import expectation, nccl_log, verdict

LOGS = Path(__file__).parent / "nccl-logs"


def lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def judge_lines(text_lines: list[str], policy=None) -> dict:
    data = "".join(f"{line}\n" for line in text_lines).encode()
    reading = nccl_log.read_stream(io.BytesIO(data))
    return verdict.judge(reading, expectation.expectation(policy)).to_json()


def summary(result: dict) -> tuple:
    return (
        result["verdict"],
        result["reasons"],
        result["transport"],
        result["devices"],
        result["gdr"],
        result["ranks"],
        sorted((str(r["transport"]), r["verdict"]) for r in result["per_rank"]),
    )


REAL = sorted(p.name for p in LOGS.glob("*.log"))
CRI_STDOUT = "2024-01-01T00:00:00.000000000Z stdout F "
KUBECTL_TIMESTAMPS = "2024-01-01T00:00:00.123456789Z "


# the two logs whose lines carry no host:pid: a launcher's rank prefix names their process instead
NO_PROCESS = ("nccl-1652-tcpx-warn-only.log", "skypilot-tcpx-plugin-lines.log")


def test_cri_kubectl_and_launcher_prefixes_change_nothing():
    for name in REAL:
        plain = summary(judge_lines(lines(name)))
        for prefix in (CRI_STDOUT, KUBECTL_TIMESTAMPS, "[1,0]<stdout>:", "[rank0]:"):
            if prefix.startswith("[") and name in NO_PROCESS:
                continue
            assert summary(judge_lines([prefix + line for line in lines(name)])) == plain, (name, prefix)


def test_rank_prefixes_tell_ranks_apart_when_nccl_prints_no_process():
    """The TCPX README's lines carry no host:pid: a launcher's [rankN]: or mpirun's [1,N] names them."""
    two = ["[rank0]:" + line for line in lines("skypilot-tcpx-plugin-lines.log")]
    two += ["[rank1]:" + line for line in lines("skypilot-tcpx-plugin-lines.log")]
    assert [r["rank"] for r in judge_lines(two)["per_rank"]] == ["rank0", "rank1"]
    mpi = [f"[1,{i}]<stdout>:" + line for i in (3, 5) for line in lines("nccl-1652-tcpx-warn-only.log")]
    assert {r["rank"] for r in judge_lines(mpi)["per_rank"]} >= {"rank3", "rank5"}


def test_cri_partial_records_are_joined():
    """A line the runtime split into P records and a final F record is read whole."""
    line = lines("nccl-tests-185-roce-2.19.log")[4]  # NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE ...
    for cut in range(1, len(line)):
        records = [
            "2024-01-01T00:00:00.1Z stdout P " + line[:cut],
            "2024-01-01T00:00:00.2Z stderr F unrelated",
            "2024-01-01T00:00:00.3Z stdout F " + line[cut:],
        ]
        reading = nccl_log.read_lines(records)
        assert list(reading.ranks.values())[0].devices == ["mlx5_10", "mlx5_11"], cut


def test_two_real_logs_interleaved_keep_each_rank_apart():
    """An MPI launcher's log holds every rank's lines interleaved: one IB log and one Socket log
    interleaved line by line read as both, and the Socket ranks make the whole a fallback."""
    ib, socket = lines("nccl-tests-185-roce-2.19.log"), lines("pytorch-72835-lo-socket-2.10.3.log")
    mixed = [line for pair in zip(ib, socket) for line in pair] + ib[len(socket) :] + socket[len(ib) :]
    got = judge_lines(mixed)
    alone = judge_lines(ib)["per_rank"] + judge_lines(socket)["per_rank"]
    assert sorted(r["rank"] for r in got["per_rank"]) == sorted(r["rank"] for r in alone)
    assert {r["rank"]: r["verdict"] for r in got["per_rank"]} == {r["rank"]: r["verdict"] for r in alone}
    assert (got["verdict"], got["reasons"][0], got["transport"]) == ("fallback", "NetSocket", "mixed")


def test_a_line_cut_at_any_byte_proves_nothing():
    """A log that ends inside a line (read while written, or at --max-bytes) reads as its whole
    lines only: the cut line never adds a network, a device or a GDR state (`Using network IB`
    cut to `Using network I`, `/GDRDMA` cut to `/GDR`)."""
    for name in REAL:
        text = lines(name)
        for index in range(len(text)):
            before = summary(judge_lines(text[:index]))
            data = "".join(f"{line}\n" for line in text[:index]).encode()
            line = text[index].encode()
            for cut in range(1, len(line)):
                reading = nccl_log.read_stream(io.BytesIO(data + line[:cut]))
                got = verdict.judge(reading, expectation.ANY_RDMA).to_json()
                assert summary(got) == before, (name, index, cut)


def test_a_line_longer_than_max_line_is_skipped_and_the_next_read():
    text = lines("nccl-tests-185-roce-2.19.log")
    data = ("x" * 50_000 + " NCCL INFO Using network Socket\n" + "\n".join(text) + "\n").encode()
    reading = nccl_log.read_stream(io.BytesIO(data), max_line=4096)
    assert reading.partial_lines == 1
    assert summary(verdict.judge(reading, expectation.ANY_RDMA).to_json()) == summary(judge_lines(text))


def test_max_lines_and_max_bytes_stop_the_read():
    text = lines("pytorch-72835-lo-socket-2.10.3.log")
    data = "".join(f"{line}\n" for line in text).encode()
    first_five = nccl_log.read_stream(io.BytesIO(data), max_lines=5)
    assert first_five.lines == 5 and first_five.truncated
    assert summary(verdict.judge(first_five, expectation.ANY_RDMA).to_json()) == summary(judge_lines(text[:5]))
    some = nccl_log.read_stream(io.BytesIO(data), max_bytes=300)
    assert some.bytes <= 300 and some.truncated


@examples(200, 2000)
@given(st.binary(max_size=4096))
def test_random_bytes_never_crash_nor_prove_anything(data):
    reading = nccl_log.read_stream(io.BytesIO(data))
    got = verdict.judge(reading, expectation.ANY_RDMA)
    assert got.verdict == "unverifiable"


@examples(100, 1000)
@given(st.lists(st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"")), max_size=20), st.randoms())
def test_garbage_lines_between_real_lines_change_nothing(garbage, rnd):
    """Binary lines (NUL bytes, invalid UTF-8) between a real log's lines: same verdict."""
    name = rnd.choice(REAL)
    text = [line.encode() for line in lines(name)]
    mixed = list(text)
    for g in garbage:
        mixed.insert(rnd.randrange(len(mixed) + 1), g)
    reading = nccl_log.read_stream(io.BytesIO(b"".join(line + b"\n" for line in mixed)))
    assert summary(verdict.judge(reading, expectation.ANY_RDMA).to_json()) == summary(judge_lines(lines(name)))


def test_binary_lines_are_counted():
    data = b"\x00\x01\x02\xff\xfe\n" * 3 + (LOGS / "nccl-1053-socket-lo.log").read_bytes()
    reading = nccl_log.read_stream(io.BytesIO(data))
    assert reading.binary_lines == 3
    assert verdict.judge(reading, expectation.ANY_RDMA).verdict == "fallback"


def test_ranks_past_max_ranks_are_not_kept_and_nothing_is_verified():
    text = lines("nccl-tests-185-roce-2.19.log")
    reading = nccl_log.read_lines(text, max_ranks=1)
    assert len(reading.ranks) == 1 and reading.ranks_dropped > 0
    got = verdict.judge(reading, expectation.ANY_RDMA)
    assert got.verdict == "unverifiable"
    assert verdict.judge(nccl_log.read_lines(text), expectation.ANY_RDMA).verdict == "verified"
