"""Instructions per admission through the serving path, counted by callgrind: repeatable on a
machine whose wall-clock figures move by 10-15% from one phase to the next.

What runs, in process: `webhook.serving.worker`'s connection (uvicorn's HTTP protocol with our
additions) on a uvloop event loop, `webhook.serving.asgi.Front`, and the Flask app exactly as `serve`
builds it (`webhook.serving.app.wsgi(create_app(...))`, the worker's one application context pushed);
or the floor's Flask app (benchmarks/floor.py) on the same path. Requests of the benchmark mix
(benchmarks/payloads.py) are fed as raw HTTP/1.1 into C connections at once (each a fake
transport), the way a loop pass finds several sockets readable, and the answers are checked.
What it leaves out: TLS, the sockets and the kernel (run.py measures those with everything
else).

    .venv/bin/python -m benchmarks.instructions                     # webhook and floor, 4 connections
    .venv/bin/python -m benchmarks.instructions --target webhook --connections 1
    .venv/bin/python -m benchmarks.instructions --run webhook 500   # one plain run, no valgrind
    .venv/bin/python -m benchmarks.instructions --store instructions  # also benchmarks/results/instructions.json

The figure is (Ir of a run with 50 + N requests - Ir of a run with 50) / N, so start-up,
imports and policy loading cancel out. Needs valgrind (apt-get install -y valgrind).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WARM = 50


class _Transport:
    """What the connection writes to; counts the answers."""

    def __init__(self):
        self.answers, self.last, self.closed = 0, b"", False

    def write(self, data: bytes) -> None:
        self.answers += 1
        self.last = data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 8443), "peername": ("10.0.0.9", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _app(target: str):
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="rdma-webhook-instr-"))
    from webhook.serving.app import create_app, wsgi
    from webhook.telemetry.logs import setup_logging

    if target == "floor":
        from benchmarks import floor

        return wsgi(floor.app)
    from webhook.cluster.state import FileClusterState
    from webhook.policy.store import PolicyStore

    setup_logging("INFO")  # admission lines on the direct path, as served (to stdout: /dev/null here)
    store = PolicyStore(str(ROOT / "policies"))
    store.reload(force=True)
    return wsgi(create_app(store, FileClusterState.from_file(str(ROOT / "examples" / "cluster-state.yaml"))))


def run(target: str, n: int, connections: int) -> None:
    import uvloop
    from benchmarks.payloads import mix
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from webhook.serving import worker as uvworker
    from webhook.serving.asgi import Front

    app = _app(target)
    requests = [
        b"POST /mutate HTTP/1.1\r\nHost: rdma-webhook.rdma-webhook.svc:443\r\nUser-Agent: kube-apiserver-admission\r\n"
        b"Accept: application/json, */*\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        for _, body in mix()
    ]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        app.flask.app_context().push()  # as webhook.serving.worker.Worker does before serving
        front = Front(app)
        try:  # the worker's class: admissions answered by the connection (older trees: the ASGI path)
            cls = uvworker.connection_class(None, front)
        except TypeError:
            cls = uvworker.connection_class(None)
        config = Config(app=front, http=cls, lifespan="off", access_log=False, server_header=False, proxy_headers=False)
        config.load()
        conns = []
        for _ in range(connections):
            conn = cls(config=config, server_state=ServerState(), app_state={}, _loop=loop)
            transport = _Transport()
            conn.connection_made(transport)
            conns.append((conn, transport))
        sent = 0
        while sent < n:
            group = conns[: n - sent]
            for conn, transport in group:
                transport.answers = 0
                conn.data_received(requests[sent % len(requests)])
                sent += 1
            while any(t.answers == 0 for _, t in group):
                await asyncio.sleep(0)
            for _, transport in group:
                if not transport.last.startswith(b"HTTP/1.1 200 "):
                    raise SystemExit(f"unexpected answer: {transport.last[:200]!r}")

    uvloop.run(main())


def instructions(target: str, n: int, connections: int) -> int:
    def ir(count: int) -> int:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                *(["-P"] if sys.flags.safe_path else []),
                "-m",
                "benchmarks.instructions",
                "--run",
                target,
                str(count),
                "--connections",
                str(connections),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
        )
        return int(re.search(r"Collected : (\d+)", out.stderr).group(1))

    return (ir(WARM + n) - ir(WARM)) // n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=("webhook", "floor", "both"), default="both")
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--run", nargs=2, metavar=("TARGET", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--store", metavar="NAME", help="write benchmarks/results/NAME.json with provenance")
    args = ap.parse_args()
    if args.run:
        run(args.run[0], int(args.run[1]), args.connections)
        return 0
    targets = ("webhook", "floor") if args.target == "both" else (args.target,)
    from benchmarks import provenance

    prov = provenance.start()
    got = {t: instructions(t, args.requests, args.connections) for t in targets}
    for t, v in got.items():
        print(
            f"{t:8s} {v:>10,d} instructions per admission ({args.requests} requests of the mix, {args.connections} connections)"
        )
    if len(got) == 2:
        print(f"webhook / floor: {got['webhook'] / got['floor']:.2f}")
    if args.store:
        data = {"requests": args.requests, "connections": args.connections, "instructions_per_admission": got}
        if len(got) == 2:
            data["webhook_to_floor"] = round(got["webhook"] / got["floor"], 2)
        print(f"stored in {provenance.store(args.store, prov, data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
