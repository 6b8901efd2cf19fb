"""`rdma-webhook nccl-log` as a user runs it: one JSON object per input, exit 0 only when every
input is verified, 1 when any is not, 2 on bad input (with a message, never a traceback); the
logs are the real excerpts of tests/proof/nccl-logs/."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import CLI

ROOT = Path(__file__).resolve().parent.parent.parent
LOGS = ROOT / "tests" / "proof" / "nccl-logs"
IB = str(LOGS / "nccl-tests-185-roce-2.19.log")
SOCKET = str(LOGS / "pytorch-72835-lo-socket-2.10.3.log")


def run(*args, stdin=None):
    return subprocess.run([*CLI, "nccl-log", *args], capture_output=True, input=stdin, cwd=ROOT)


def objects(out) -> list[dict]:
    return [json.loads(line) for line in out.stdout.decode().splitlines()]


def test_verified_log_exits_0_with_one_json_object():
    out = run(IB)
    assert out.returncode == 0, out.stderr
    [obj] = objects(out)
    assert obj["file"] == IB
    assert (obj["verdict"], obj["transport"], obj["ranks"], obj["gdr"]) == ("verified", "ib-verbs", 2, None)
    assert obj["devices"] == ["mlx5_10", "mlx5_11"] and obj["reasons"] == []


def test_one_object_per_input_and_exit_1_when_any_is_not_verified():
    out = run(IB, SOCKET)
    assert out.returncode == 1
    assert [o["verdict"] for o in objects(out)] == ["verified", "fallback"]
    assert objects(out)[1]["reasons"] == ["NetSocket", "NoDevice"]


def test_policy_from_the_catalogue():
    out = run("--policy", "sriov-roce-8rail", IB)
    assert out.returncode == 1
    [obj] = objects(out)
    assert (obj["policy"], obj["verdict"], obj["reasons"]) == ("sriov-roce-8rail", "degraded", ["FewerRails"])
    assert obj["expected"]["rails"] == 8


def test_policy_from_a_folder(tmp_path):
    (tmp_path / "mine.yaml").write_text((ROOT / "policies" / "roce-dranet.yaml").read_text())
    out = run("--policies", str(tmp_path), "--policy", "roce-dranet", IB)
    assert out.returncode == 0, out.stderr
    assert objects(out)[0]["policy"] == "roce-dranet"


def test_stdin_and_text_output():
    log = (LOGS / "nccl-1537-gdr-disabled.log").read_bytes()
    out = run("--output", "text", "-", stdin=log)
    assert out.returncode == 0  # no policy: any RDMA transport is proof, GDR is not checked
    assert out.stdout.decode().startswith("-: verified; transport ib-verbs")
    out = run("--output", "text", "--policy", "roce-dranet", "-", stdin=log)
    assert out.returncode == 1
    text = out.stdout.decode()
    assert text.startswith("-: degraded (GdrDisabled); transport ib-verbs")
    assert "rank 0 (hostname1:25668): GPUDirect RDMA disabled for mlx5_0, mlx5_1" in text


def test_bad_inputs_are_messages_not_tracebacks(tmp_path):
    missing = str(tmp_path / "nope.log")
    out = run(IB, missing, str(tmp_path))
    err = out.stderr.decode()
    assert out.returncode == 2
    assert "Traceback" not in err
    assert f"{missing}: No such file or directory" in err and "is a directory" in err
    assert [o.get("error") is None for o in objects(out)] == [True, False, False]


def test_unreadable_file(tmp_path):
    path = tmp_path / "secret.log"
    path.write_bytes((LOGS / "nccl-1053-socket-lo.log").read_bytes())
    path.chmod(0)
    out = run(str(path))
    if os.geteuid() == 0:  # root reads it anyway: then it is read like any other
        assert (out.returncode, objects(out)[0]["verdict"]) == (1, "fallback")
    else:
        assert out.returncode == 2 and "Permission denied" in out.stderr.decode()


def test_binary_garbage_is_said_and_unverifiable(tmp_path):
    path = tmp_path / "core"
    path.write_bytes(bytes(range(256)) * 64)
    out = run(str(path))
    assert out.returncode == 1
    assert objects(out)[0]["verdict"] == "unverifiable"
    assert "looks binary" in out.stderr.decode() and "Traceback" not in out.stderr.decode()


def test_unknown_policy_and_bad_flags():
    out = run("--policy", "no-such-policy", IB)
    assert out.returncode == 2 and "no policy 'no-such-policy'" in out.stderr.decode()
    out = run("--max-bytes", "0", IB)
    assert out.returncode == 2 and "must be positive" in out.stderr.decode()


def test_max_lines_is_honoured():
    out = run("--max-lines", "3", IB)
    [obj] = objects(out)
    assert (obj["lines_read"], obj["truncated"], obj["verdict"]) == (3, True, "unverifiable")
