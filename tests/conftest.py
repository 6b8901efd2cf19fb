"""Shared fixtures: the shipped policies, the example cluster state, and a real server.

`server` starts `rdma-webhook serve` as a subprocess, exactly as the README does, on a free
loopback port with freshly generated certificates, and waits until /readyz says ready.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from webhook.serving.certs import write_certs
from webhook.cluster.state import FileClusterState
from webhook.policy.load import load_dir

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "policies"
CLUSTER_STATE = ROOT / "examples" / "cluster-state.yaml"
# -P: not the working directory first on the import path. `python -m` would otherwise put the checkout
# (with the compiled extensions `make compile` leaves in webhook/) ahead of PYTHONPATH, and the
# pure run (`make test-pure`, PYTHONPATH=build/pure) would serve compiled code.
CLI = [sys.executable, "-P", "-m", "webhook"]


def expected_core() -> str | None:
    """ "compiled" or "pure" when the Makefile says which core this run tests, else None."""
    return os.environ.get("RDMA_WEBHOOK_EXPECT") or None


def check_served_core(log_text: str) -> str:
    """The core `serve` says it runs (its startup line), checked against RDMA_WEBHOOK_EXPECT."""
    lines = [line for line in log_text.splitlines() if "decision core: " in line]
    assert lines, f"no 'decision core:' line in the server log:\n{log_text[-2000:]}"
    served = (
        "compiled"
        if "decision core: compiled" in lines[0]
        else "pure"
        if "decision core: interpreted" in lines[0]
        else "?"
    )
    expected = expected_core()
    assert expected is None or served == expected, (
        f"this run tests the {expected} core, the server ran {served}: {lines[0]}"
    )
    return served


@pytest.fixture(scope="session")
def policies():
    ps, errors = load_dir(POLICIES)
    assert ps is not None, errors
    return ps


@pytest.fixture(scope="session")
def cluster():
    return FileClusterState.from_file(str(CLUSTER_STATE))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    port: int
    certs: Path
    proc: subprocess.Popen
    policies_dir: Path
    log: Path

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        return ctx

    def connection(self, timeout: float = 10) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("localhost", self.port, context=self.context(), timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict | None = None,
        conn: http.client.HTTPSConnection | None = None,
    ) -> tuple[int, bytes, http.client.HTTPMessage]:
        own = conn is None
        conn = conn or self.connection()
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            return resp.status, resp.read(), resp.headers  # header names are case-insensitive
        finally:
            if own:
                conn.close()

    def review(self, review: dict, conn=None) -> dict:
        status, data, _ = self.request("POST", "/mutate", json.dumps(review).encode(), conn=conn)
        assert status == 200, data
        return json.loads(data)


def start_server(
    tmp: Path,
    *,
    extra_args: list[str] = (),
    workers: int = 2,
    policies_src: Path = POLICIES,
    env: dict | None = None,
    wait_for: str = "/readyz",
) -> Server:
    certs = tmp / "certs"
    write_certs(certs, "rdma-webhook", "rdma-webhook", dns=["localhost"], ips=["127.0.0.1"])
    pol = tmp / "policies"
    if not pol.exists():
        shutil.copytree(policies_src, pol)
    port = free_port()
    log = tmp / "server.log"
    proc_env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp / "metrics"), **(env or {})}
    proc = subprocess.Popen(
        CLI
        + [
            "serve",
            "--policies",
            str(pol),
            "--tls-cert",
            str(certs / "tls.crt"),
            "--tls-key",
            str(certs / "tls.key"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--cluster-state",
            str(CLUSTER_STATE),
            *extra_args,
        ],
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        env=proc_env,
        cwd=str(ROOT),
    )
    server = Server(port, certs, proc, pol, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}: {log.read_text()}")
        try:
            status, _, _ = server.request("GET", wait_for)
            if status == 200:
                try:
                    check_served_core(log.read_text())
                except AssertionError:
                    stop_server(server)
                    raise
                return server
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server: no 200 from {wait_for} in 30 s: {log.read_text()}")


def stop_server(server: Server) -> None:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("server"))
    yield srv
    stop_server(srv)


@pytest.fixture
def command_caches_emptied():
    """Every reading of commands the command modules remember (parses, readings, pre-checks)
    emptied before the test: a test of the readers reads its own scripts, not a reading another
    test left (and a mutant's worker, forked after the clean run, has not inherited one)."""
    from webhook.commands import python, reader, shell, text

    for cache in (text._PREFIXES, text._SCANNERS, text._USES, python._PY_PARSED, reader._READ, shell.PARSED):
        cache.clear()
    yield
