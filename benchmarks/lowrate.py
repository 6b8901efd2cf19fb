"""One admission at a time, as the API server sends them at 50 pods/s: the webhook against the Go
yardstick, without the API server.

    .venv/bin/python -m benchmarks.lowrate --go-peer /tmp/go-peer [--rate 50] [--seconds 20] [--rounds 3]

Why: behind the real API server (benchmarks/e2e_latency.py) the webhook's share of a pod CREATE
is a fraction of a millisecond inside the noise of etcd, the API server and the controller
manager on the same two cores. Here the same review the e2e pods make (a defaulted one-container
pod with two GPUs and the service-account volume, about 2.9 KB) goes over one keep-alive TLS
connection at a fixed rate to each server in turn, interleaved by round: what the server adds
per admission when each one arrives alone, on cold caches. Per target and round: the client's
p50 / p90 / p99 (from each request's scheduled time, benchmarks/loadgen.py) and the server's CPU
per admission (utime + stime of its processes from /proc, idle included); the ratio to go-peer's
is taken per round, then the median over rounds. Stored with provenance (--out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from tests import kube_objects as k
from benchmarks import loadgen
from benchmarks import provenance
from benchmarks.run import Target, cpu_seconds, free_port, proc_tree, webhook_target, work_dir

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def review_body() -> bytes:
    """The review of one e2e pod (benchmarks/e2e_latency.py's `pod`) as the API server sends it."""
    pod = k.pod([k.container("pytorch", "registry.example/trainer:1", gpus=2)], namespace="ml-training", name="p-0")
    return k.body(k.admission_review(pod, uid="lowrate-0"))


def measure(t: Target, body: bytes, ca: str, rate: float, seconds: float) -> dict:
    pids = proc_tree(t.proc.pid)
    c0 = cpu_seconds(pids)
    r = loadgen.open_loop("127.0.0.1", t.port, ca, [body], rate, seconds, conns=1)
    c1 = cpu_seconds(pids)
    n = len(r.latencies)
    return {
        "sent": r.sent,
        "answered": n,
        "errors": r.errors,
        "non_200": r.non_200,
        "p50_ms": round(r.pct(50) * 1000, 3),
        "p90_ms": round(r.pct(90) * 1000, 3),
        "p99_ms": round(r.pct(99) * 1000, 3),
        "server_cpu_ms_per_admission": round((c1 - c0) * 1000 / n, 3) if n else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--go-peer", default="/tmp/go-peer")
    ap.add_argument("--rate", type=float, default=50)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--split",
        action="store_true",
        help="headers and body in two writes (two TLS records), as the API server's Go client sends them",
    )
    ap.add_argument("--out", help="store the result here (JSON)")
    args = ap.parse_args()
    loadgen.Conn.split = args.split
    if not os.path.exists(args.go_peer):
        print(f"lowrate: {args.go_peer} not built (see benchmarks/README.md)", file=sys.stderr)
        return 2
    prov = provenance.start(sys.argv)
    work, _ = work_dir("rdma-webhook-lowrate-")
    cert, key, ca = (str(work / "certs" / n) for n in ("tls.crt", "tls.key", "ca.crt"))
    port = free_port()
    targets = [
        webhook_target("uvicorn", args.workers, work),
        Target("go-peer", [args.go_peer, "-addr", f"127.0.0.1:{port}", "-cert", cert, "-key", key], None, port),
    ]
    body = review_body()
    rounds: list[dict] = []
    try:
        for t in targets:
            t.start(work / f"{t.name}.log")
            loadgen.open_loop("127.0.0.1", t.port, ca, [body], args.rate, 2, conns=1)  # warm-up
        for i in range(args.rounds):
            for t in targets:
                res = measure(t, body, ca, args.rate, args.seconds)
                res.update(target=t.name, round=i, loadavg_1m=os.getloadavg()[0])
                print(json.dumps(res), flush=True)
                rounds.append(res)
    finally:
        for t in targets:
            t.stop()
    summary = {}
    for field in ("p50_ms", "p90_ms", "p99_ms", "server_cpu_ms_per_admission"):
        ratios = []
        for i in range(args.rounds):
            ours = next(r for r in rounds if r["round"] == i and r["target"] == "webhook-uvicorn")[field]
            go = next(r for r in rounds if r["round"] == i and r["target"] == "go-peer")[field]
            if ours is not None and go:
                ratios.append(ours / go)
        summary[field] = {
            "webhook": statistics.median(r[field] for r in rounds if r["target"] == "webhook-uvicorn"),
            "go-peer": statistics.median(r[field] for r in rounds if r["target"] == "go-peer"),
            "ratio_median_of_rounds": round(statistics.median(ratios), 3) if ratios else None,
        }
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "provenance": provenance.finish(prov),
                    "rate": args.rate,
                    "seconds": args.seconds,
                    "split": args.split,
                    "review_bytes": len(body),
                    "rounds": rounds,
                    "summary": summary,
                },
                indent=1,
            )
            + "\n"
        )
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
