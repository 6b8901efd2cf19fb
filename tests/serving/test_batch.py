"""webhook/serving/batch.py: the metrics and log lines of the admissions one pass of the event loop
answered are written once, right after that pass; outside a loop, at once. Over TLS the same
code records every admission of test_server.py and test_server_soak.py (whose counters must equal what
the clients saw)."""

from __future__ import annotations

import asyncio

import pytest

from webhook.serving import batch
from webhook.telemetry import logs, metrics


@pytest.fixture
def written(monkeypatch):
    calls: list[list[dict]] = []
    monkeypatch.setattr(logs, "admissions", lambda many: calls.append(list(many)))
    return calls


def count(*labels: str) -> float:
    return metrics.child(metrics.ADMISSIONS, *labels)._value.get()


def responses(code: str) -> float:
    return metrics.child(metrics.RESPONSES, code)._value.get()


def test_outside_a_loop_each_record_is_written_at_once(written):
    before, ok = count("mutate", "mutated", "batch-a"), responses("200")
    b = batch.Batch()
    b.record("mutate", "mutated", "batch-a", 200, 0.001, {"uid": "1"})
    assert written == [[{"uid": "1"}]] and count("mutate", "mutated", "batch-a") == before + 1
    assert responses("200") == ok + 1


def test_in_a_loop_the_records_of_one_pass_are_written_together_after_it(written):
    b = batch.Batch()
    before, denied = count("mutate", "mutated", "batch-b"), count("validate", "denied", "batch-b")
    ok = responses("200")
    seen_during = []

    async def one_pass():
        b.record("mutate", "mutated", "batch-b", 200, 0.001, {"uid": "1"})
        b.record("validate", "denied", "batch-b", 200, 0.002, {"uid": "2"})
        b.record("mutate", "mutated", "batch-b", 200, 0.003, {"uid": "3"})
        seen_during.append((list(written), count("mutate", "mutated", "batch-b")))
        await asyncio.sleep(0)  # the loop's next pass: the flush scheduled by the first record runs
        seen_during.append((list(written), count("mutate", "mutated", "batch-b")))
        b.record("mutate", "mutated", "batch-b", 200, 0.004, {"uid": "4"})
        await asyncio.sleep(0)

    asyncio.run(one_pass())
    assert seen_during[0] == ([], before)  # nothing before the pass ends
    assert seen_during[1] == ([[{"uid": "1"}, {"uid": "2"}, {"uid": "3"}]], before + 2)  # in order, one write
    assert written[1] == [{"uid": "4"}]  # a later pass has its own flush
    assert count("mutate", "mutated", "batch-b") == before + 3 and count("validate", "denied", "batch-b") == denied + 1
    assert responses("200") == ok + 4  # each answer counted, three of them in one pass


def test_a_failing_write_is_logged_and_the_loop_goes_on(monkeypatch, caplog):
    def broken(many):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(logs, "admissions", broken)
    b = batch.Batch()

    async def go():
        b.record("mutate", "mutated", "batch-c", 200, 0.001, {"uid": "1"})
        await asyncio.sleep(0)
        return "still running"

    assert asyncio.run(go()) == "still running"
    [record] = [r for r in caplog.records if r.name == "rdma_webhook.batch"]
    assert record.getMessage() == "could not write the metrics and log lines of 1 admissions"
    assert record.exc_info[0] is OSError


def test_several_lines_go_out_in_one_write(tmp_path, monkeypatch):
    path = tmp_path / "out"
    with open(path, "wb") as fh:
        writer = logs._AdmissionWriter(fh.fileno())
        writes = []
        real = logs.os.write
        monkeypatch.setattr(logs.os, "write", lambda fd, data: writes.append(len(data)) or real(fd, data))
        writer([{"uid": "1"}, {"uid": "2"}])
    lines = path.read_bytes().split(b"\n")
    assert len(writes) == 1 and len(lines) == 3 and lines[2] == b""
    assert b'"msg":"admission","uid":"1"' in lines[0] and b'"uid":"2"' in lines[1]
