"""The command line as a user runs it: `review` exit codes and output, `--explain`, `certs`."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import yaml
from cryptography import x509

import kube_objects as k
from conftest import CLI

ROOT = Path(__file__).resolve().parent.parent.parent
STATE = str(ROOT / "examples" / "cluster-state.yaml")
# review uses no policy it is not given (issue 26): these tests judge against the whole catalogue
POLICIES = str(ROOT / "policies")


def run(*args, stdin=None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, input=stdin, cwd=ROOT)


def write(tmp_path, name, *docs):
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def test_review_prints_admission_responses_and_exit_0(tmp_path):
    f = write(tmp_path, "jobs.yaml", k.pytorchjob_worker(), k.mpijob_launcher())
    out = run("review", "--policies", POLICIES, "--cluster-state", STATE, f)
    assert out.returncode == 0, out.stderr
    docs = [json.loads(d) for d in out.stdout.replace("}\n{", "}\x00{").split("\x00")]
    assert len(docs) == 2 and all(d["kind"] == "AdmissionReview" for d in docs)
    assert docs[0]["response"]["allowed"] and docs[0]["response"]["patchType"] == "JSONPatch"
    assert (
        docs[1]["response"]["allowed"] and docs[1]["response"]["patchType"] == "JSONPatch"
    )  # the launcher gets the block


def test_review_exit_1_when_any_denied(tmp_path):
    bad = k.pytorchjob_worker(env=[{"name": "NCCL_NET", "value": "Socket"}])
    f = write(tmp_path, "jobs.yaml", k.pytorchjob_worker(), bad)
    out = run("review", "--policies", POLICIES, "--cluster-state", STATE, f)
    assert out.returncode == 1
    assert "NCCL_NET='Socket'" in out.stdout


def test_review_exit_2_on_bad_input(tmp_path):
    (tmp_path / "broken.yaml").write_text("kind: Pod\nmetadata: [\n")
    out = run("review", "--policies", POLICIES, str(tmp_path / "broken.yaml"))
    assert out.returncode == 2 and "not valid YAML" in out.stderr and "Traceback" not in out.stderr
    f = write(tmp_path, "widget.yaml", {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}})
    out = run("review", "--policies", POLICIES, "--strict", f)
    assert out.returncode == 2 and "unknown kind" in out.stderr and "--strict" in out.stderr
    assert run("review", "--policies", POLICIES, f).returncode == 0  # listed as not checked without --strict
    f = write(tmp_path, "scalar.yaml", "just a string")
    out = run("review", "--policies", POLICIES, f)
    assert out.returncode == 2 and "expected a Kubernetes object" in out.stderr and "Traceback" not in out.stderr
    out = run("review", "--policies", POLICIES, str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "cannot read" in out.stderr


def test_review_accepts_admission_reviews_json_and_stdin(tmp_path):
    rv = k.admission_review(k.pytorchjob_worker())
    path = tmp_path / "rv.json"
    path.write_text(json.dumps(rv))
    out = run("review", "--policies", POLICIES, "--cluster-state", STATE, str(path))
    assert out.returncode == 0 and json.loads(out.stdout)["response"]["uid"] == rv["request"]["uid"]
    out = run("review", "--policies", POLICIES, "--cluster-state", STATE, "-", stdin=json.dumps(k.pytorchjob_worker()))
    assert out.returncode == 0 and json.loads(out.stdout)["response"]["allowed"]


def test_review_without_cluster_state_assumes_opted_in(tmp_path):
    f = write(tmp_path, "p.yaml", k.pod([k.container("trainer")], namespace="anywhere"))
    out = run("review", "--policies", POLICIES, f)
    assert out.returncode == 0 and json.loads(out.stdout)["response"]["patchType"] == "JSONPatch"


def test_explain_shows_decision_reasons_and_coloured_diff(tmp_path):
    bad = k.pytorchjob_worker(env=[{"name": "NCCL_IB_DISABLE", "value": "1"}])
    f = write(tmp_path, "jobs.yaml", k.pytorchjob_worker(), bad)
    out = run("review", "--policies", POLICIES, "--explain", "--color", "always", "--cluster-state", STATE, f)
    assert out.returncode == 1
    text = out.stdout
    assert "MUTATED" in text and "DENIED" in text and "by policy erdma" in text
    assert "NCCL_IB_DISABLE='1'" in text and "[env-fallback]" in text
    assert "\033[32m+" in text and "aliyun/erdma: '1'" in text  # a green added line
    assert "--- before" in text and "+++ after" in text
    plain = run("review", "--policies", POLICIES, "--explain", "--color", "never", "--cluster-state", STATE, f).stdout
    assert "\033[" not in plain


def test_explain_on_the_seed_pods():
    pods = sorted(str(p) for p in (ROOT / "examples" / "pods").glob("*.yaml"))
    out = run("review", "--policies", POLICIES, "--explain", "--color", "never", "--cluster-state", STATE, *pods)
    assert out.returncode == 1  # tcp-fallback-worker.yaml is denied
    assert out.stdout.count("MUTATED") == 3 and out.stdout.count("DENIED") == 1  # the launcher gets the block too


def test_certs_writes_a_ca_and_serving_certificate(tmp_path):
    out = run(
        "certs",
        "--service",
        "rdma-webhook",
        "--namespace",
        "rdma-webhook",
        "--out",
        str(tmp_path),
        "--dns",
        "webhook.example.test",
        "--ip",
        "127.0.0.1",
    )
    assert out.returncode == 0, out.stderr
    ca_pem = base64.b64decode(out.stdout.strip())
    assert ca_pem == (tmp_path / "ca.crt").read_bytes()
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    ca = x509.load_pem_x509_certificate(ca_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {
        "rdma-webhook",
        "rdma-webhook.rdma-webhook",
        "rdma-webhook.rdma-webhook.svc",
        "rdma-webhook.rdma-webhook.svc.cluster.local",
        "webhook.example.test",
    }
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    cert.verify_directly_issued_by(ca)
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "ca.key").stat().st_mode & 0o777 == 0o600


def test_serve_reports_missing_files():
    out = run("serve", "--tls-cert", "/nonexistent.crt", "--tls-key", "/nonexistent.key")
    assert out.returncode == 2 and "no such file" in out.stderr


def test_serve_without_cluster_state_or_api_config_exits_with_one_line(tmp_path):
    """As deployed, `serve` reads the cluster from the API: with no in-cluster service account and
    no kubeconfig it exits 2 at once with what to do, not a traceback or a server that never gets
    ready."""
    import os

    from webhook.serving.certs import write_certs

    write_certs(tmp_path / "certs", "rdma-webhook", "rdma-webhook", dns=["localhost"], ips=["127.0.0.1"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(tmp_path / "no-such-kubeconfig"), HOME=str(tmp_path))
    out = subprocess.run(
        [
            *CLI,
            "serve",
            "--tls-cert",
            str(tmp_path / "certs" / "tls.crt"),
            "--tls-key",
            str(tmp_path / "certs" / "tls.key"),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--policies",
            str(ROOT / "policies"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    said = out.stdout + out.stderr  # the log goes to stdout
    assert out.returncode == 2, (out.returncode, said[-2000:])
    assert "cannot reach the Kubernetes API" in said and "--cluster-state FILE" in said, said[-2000:]
    assert "Traceback" not in said, said[-2000:]


def test_certs_reuse_ca_renews_only_the_serving_certificate(tmp_path):
    first = run("certs", "--service", "rdma-webhook", "--namespace", "rdma-webhook", "--out", str(tmp_path))
    old_cert = (tmp_path / "tls.crt").read_bytes()
    again = run(
        "certs", "--service", "rdma-webhook", "--namespace", "rdma-webhook", "--out", str(tmp_path), "--reuse-ca"
    )
    assert again.returncode == 0 and again.stdout == first.stdout  # same caBundle
    new = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert (tmp_path / "tls.crt").read_bytes() != old_cert
    new.verify_directly_issued_by(x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes()))
    empty = run("certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path / "none"), "--reuse-ca")
    assert empty.returncode == 1 and "drop --reuse-ca" in empty.stderr and "Traceback" not in empty.stderr
    assert not (tmp_path / "none").exists()


def test_certs_refuses_to_replace_a_ca_without_force(tmp_path):
    first = run("certs", "--service", "rdma-webhook", "--namespace", "rdma-webhook", "--out", str(tmp_path))
    assert first.returncode == 0 and "stdout: the base64 CA bundle" in first.stderr
    ca = (tmp_path / "ca.crt").read_bytes()
    again = run("certs", "--service", "rdma-webhook", "--namespace", "rdma-webhook", "--out", str(tmp_path))
    assert again.returncode == 1 and again.stdout == "" and "--reuse-ca" in again.stderr and "--force" in again.stderr
    assert (tmp_path / "ca.crt").read_bytes() == ca  # untouched
    forced = run("certs", "--service", "rdma-webhook", "--namespace", "rdma-webhook", "--out", str(tmp_path), "--force")
    assert forced.returncode == 0 and (tmp_path / "ca.crt").read_bytes() != ca
    assert base64.b64decode(forced.stdout.strip()) == (tmp_path / "ca.crt").read_bytes()


def test_version_and_help_describe_every_flag():
    import re

    out = run("--version")
    assert out.returncode == 0 and re.match(r"rdma-webhook \d+\.\d+", out.stdout)
    for cmd in (["serve"], ["review"], ["policy", "lint"], ["certs"]):
        out = run(*cmd, "--help")
        assert out.returncode == 0, out.stderr
        text = " ".join(out.stdout.split())
        assert "exit status" in text, cmd
        section = out.stdout.split("options:", 1)[1]
        blocks = re.split(r"\n(?=  -)", section)
        flags = [b for b in blocks if b.lstrip().startswith("--") and not b.lstrip().startswith("--help")]
        assert flags or cmd == ["policy", "lint"], cmd
        for block in flags:  # each flag's help says its default (or that it is required)
            assert "default" in block or "required" in block, (cmd, block)


def test_make_run_says_listening_only_once_ready(tmp_path):
    """scripts/run-local.sh (what `make run` runs) prints its "listening on" line only when
    /readyz answers 200, and stops the server on SIGTERM."""
    import os
    import signal
    import socket
    import ssl
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "PORT": str(port),
        "CERTS": str(tmp_path / "certs"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }
    proc = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "run-local.sh")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        seen = []
        deadline = time.monotonic() + 90
        for line in proc.stdout:
            seen.append(line)
            if "listening on" in line:
                ctx = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
                with urllib.request.urlopen(f"https://localhost:{port}/readyz", context=ctx, timeout=5) as r:
                    assert r.status == 200  # already ready when the line appears
                break
            assert time.monotonic() < deadline, "".join(seen)
        else:
            raise AssertionError("no 'listening on' line:\n" + "".join(seen))
        assert sum("listening on" in line for line in seen) == 1
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_review_refuses_unrendered_templates(tmp_path):
    """`nvidia.com/gpu: $GPU_PER_NODE` is no GPU to the decision: offline it is bad input, not a pass."""
    pod = k.pytorchjob_worker()
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "$GPU_PER_NODE"
    out = run("review", "--policies", POLICIES, "--cluster-state", STATE, write(tmp_path, "pod.yaml", pod))
    assert (
        out.returncode == 2
        and "resources.limits[nvidia.com/gpu] is '$GPU_PER_NODE', a template placeholder" in out.stderr
    )
    assert "render the manifest first" in out.stderr
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml-training"},
        "spec": {
            "template": {
                "metadata": {"labels": {"rdma-webhook.io/inject": "true"}},
                "spec": {
                    "containers": [
                        {"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "{{ .Values.gpus }}"}}}
                    ]
                },
            }
        },
    }
    out = run("review", "--policies", POLICIES, "--cluster-state", STATE, write(tmp_path, "job.yaml", job))
    assert out.returncode == 2 and "spec.template, container t: resources.limits[nvidia.com/gpu]" in out.stderr
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    assert (
        run("review", "--policies", POLICIES, "--cluster-state", STATE, write(tmp_path, "job.yaml", job)).returncode
        == 0
    )


def test_the_shipped_examples_success_path_has_no_warning():
    """What `make run` tells a new user to send (examples/admission-review.json) and the worker pod
    `review --explain` shows are mutated under the shipped policies without a single warning: the
    example itself is how a clean pod looks (issue 26: it set NCCL_SOCKET_IFNAME=net1, which no
    policy in force gives the pod, and NCCL_DEBUG=INFO, so its own success path warned)."""
    for path in (ROOT / "examples" / "admission-review.json", ROOT / "examples" / "pods" / "pytorchjob-worker.yaml"):
        out = run("review", "--policies", POLICIES, "--cluster-state", STATE, "--output", "json", str(path))
        assert out.returncode == 0, out.stderr + out.stdout
        [rec] = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        assert rec["outcome"] == "mutated" and rec["allowed"], rec
        assert rec["warnings"] == [], rec["warnings"]


# -- the parser itself, in-process (`main(argv)`) ----------------------------------------------


def test_main_lists_the_commands_in_order_and_needs_one(capsys):
    import pytest

    from webhook.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and out.startswith("usage: rdma-webhook [-h] [--version]\n")
    assert "RDMA injection webhook for GPU training pods." in out.splitlines()
    assert out.rstrip().endswith("`rdma-webhook COMMAND --help` describes each command, its flags and exit codes.")
    commands = out.split("positional arguments:")[1].split("options:")[0]
    listed = [line.split()[0] for line in commands.splitlines() if line.startswith("    ") and line[4] != " "]
    assert listed == ["serve", "review", "policy", "nccl-log", "verify", "status", "certs"]
    assert "    policy              policy tools" in out.splitlines()
    with pytest.raises(SystemExit) as exc:
        main([])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.splitlines()[-1] == (
        "rdma-webhook: error: the following arguments are required: {serve,review,policy,nccl-log,verify,status,certs}"
    )


def test_main_version_is_the_installed_packages(capsys, monkeypatch):
    import importlib.metadata

    import pytest

    from webhook.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"rdma-webhook {importlib.metadata.version('rdma-webhook')}\n"

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out == "rdma-webhook unknown\n"


def test_main_returns_the_commands_status_and_130_on_ctrl_c_0_on_a_closed_pipe(tmp_path, monkeypatch):
    from webhook.cli import policy
    from webhook.cli.main import main

    def stop(exc):
        def command(args):
            assert args.command == "policy" and args.policy_command == "lint" and args.dir == str(tmp_path)
            raise exc

        return command

    for raised, status in [(KeyboardInterrupt(), 130), (BrokenPipeError(), 0)]:
        monkeypatch.setattr(policy, "cmd_lint", stop(raised))
        assert main(["policy", "lint", str(tmp_path)]) == status
    monkeypatch.setattr(policy, "cmd_lint", lambda args: 7)
    assert main(iter(["policy", "lint", str(tmp_path)])) == 7  # any iterable of words
    monkeypatch.setattr(sys, "argv", ["rdma-webhook", "policy", "lint", str(tmp_path)])
    assert main() == 7  # no argv: the process's own
