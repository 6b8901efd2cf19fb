"""The log lines: one JSON object per line, the admission line on its direct path."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from webhook.telemetry import logs


@pytest.fixture
def logging_restored():
    """The logging set-up (root handlers and level, the admission writer) put back afterwards,
    since these tests call `setup_logging`."""
    root = logging.getLogger()
    handlers, level, writer = root.handlers[:], root.level, logs._writer
    yield
    root.handlers[:], logs._writer = handlers, writer
    root.setLevel(level)


@pytest.fixture
def stdout_file(tmp_path, logging_restored):
    """A real file for stdout (the direct path writes to its file descriptor); the test swaps
    it in with `monkeypatch.setattr(sys, "stdout", ...)` itself, since pytest's own capture
    replaces sys.stdout again when the test starts."""
    path = tmp_path / "stdout"
    with open(path, "w", encoding="utf-8") as fh:
        yield path, fh


def _lines(path) -> list[dict]:
    # split on newlines only: U+2028 stays raw inside a JSON string, and str.splitlines would cut there
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def test_admission_and_ordinary_lines_share_one_shape(stdout_file, monkeypatch):
    stdout_file, fh = stdout_file
    monkeypatch.setattr(sys, "stdout", fh)
    logs.setup_logging("INFO")
    logging.getLogger("rdma_webhook.policy").warning("policy file rejected", extra={"file": "a.yaml"})
    sys.stdout.flush()
    logs.admissions(
        [{"endpoint": "mutate", "outcome": "denied", "pod": "evil\n{\"level\":\"error\"}\u2028", "ms": 0.2}]
    )
    logging.getLogger("rdma_webhook.serve").info("after")
    sys.stdout.flush()
    first, admission, last = _lines(stdout_file)
    assert first["level"] == "warning" and first["file"] == "a.yaml" and first["msg"] == "policy file rejected"
    assert (
        admission["level"] == "info"
        and admission["logger"] == "rdma_webhook.admission"
        and admission["msg"] == "admission"
    )
    assert admission["pod"] == "evil\n{\"level\":\"error\"}\u2028" and admission["outcome"] == "denied"
    assert set(first) >= {"time", "level", "logger", "msg"} and admission["time"][:4] == first["time"][:4]
    assert last["msg"] == "after"


def test_admission_lines_follow_the_level(stdout_file, monkeypatch):
    stdout_file, fh = stdout_file
    monkeypatch.setattr(sys, "stdout", fh)
    logs.setup_logging("WARNING")
    logs.admissions([{"endpoint": "mutate", "outcome": "mutated"}])
    sys.stdout.flush()
    assert stdout_file.read_text() == ""


def test_admission_before_setup_goes_through_logging(caplog, monkeypatch):
    monkeypatch.setattr(logs, "_writer", None)
    with caplog.at_level(logging.INFO, logger="rdma_webhook.admission"):
        logs.admissions([{"endpoint": "validate", "outcome": "skipped"}])
    (record,) = caplog.records
    assert record.admission == {"endpoint": "validate", "outcome": "skipped"}


def test_a_stdout_without_a_descriptor_falls_back_to_logging(logging_restored, monkeypatch):
    import io

    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)
    logs.setup_logging("INFO")
    logs.admissions([{"endpoint": "mutate", "outcome": "mutated"}])
    (line,) = [json.loads(x) for x in buffer.getvalue().splitlines()]
    assert line["msg"] == "admission" and line["outcome"] == "mutated" and line["logger"] == "rdma_webhook.admission"


def test_gunicorns_own_lines_are_json_lines(capsys):
    """The master's and workers' lines that gunicorn writes itself (here, as when a worker is sent
    SIGINT) go out as JSON objects in the same shape as the webhook's (issue 26: a plain
    `[WARNING] Worker (pid:590) was sent SIGINT!` had landed in the JSON log)."""
    import json

    from gunicorn.config import Config

    from webhook.serving.server import JsonGunicornLogger, gunicorn_options

    cfg = Config()
    for key, value in gunicorn_options(
        host="127.0.0.1", port=1, workers=1, tls=type("T", (), {"cert_file": None, "key_file": None})()
    ).items():
        if key in ("logger_class", "errorlog", "loglevel", "accesslog"):
            cfg.set(key, value)
    assert cfg.logger_class is JsonGunicornLogger
    logger = cfg.logger_class(cfg)
    logger.warning("Worker (pid:%s) was sent SIGINT!", 590)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    doc = json.loads(err[0])
    assert (
        doc["level"] == "warning"
        and doc["logger"] == "gunicorn.error"
        and doc["msg"] == "Worker (pid:590) was sent SIGINT!"
    )
    assert set(doc) == {"time", "level", "logger", "msg"}
