"""Saturation only, several phases per target in the order given, to see through a noisy machine:
the ratios of `run.py` come from one phase each, and on a shared VM one phase can lose a third.

    .venv/bin/python benchmarks/interleave.py floor-gunicorn,webhook-uvicorn,webhook-granian,floor-uvicorn,...
        [--seconds 10] [--connections 32]

A target may appear several times; each phase starts its server afresh. Prints req/s and server
CPU per admission per phase, then the median per target and its ratio to floor-gunicorn's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import bench_target, floor_target, webhook_target, work_dir  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", help="comma separated: floor-<server> or webhook-<server>, repeats allowed")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    work, seq = work_dir("rdma-webhook-interleave-")
    phase = SimpleNamespace(seconds=args.seconds, connections=args.connections, rates=[], latency_seconds=0)
    results: dict[str, list[float]] = {}
    for name in args.targets.split(","):
        kind, server = name.split("-", 1)
        t = floor_target(server, args.workers, 4, work) if kind == "floor" else webhook_target(server, args.workers, work)
        r = bench_target(t, work, work / "mix.lua", [b for _, b in seq], phase)
        results.setdefault(name, []).append(r["throughput_rps"])
        print(f"{name:24s} {r['throughput_rps']:8.0f} req/s  {r['cpu_s_per_1000']:.3f} CPU ms/admission  "
              f"worker CPU s {r['worker_cpu_s']}", flush=True)
    base = statistics.median(results["floor-gunicorn"]) if "floor-gunicorn" in results else None
    print()
    for name, rps in results.items():
        med = statistics.median(rps)
        ratio = f"  {med / base:.2f}x floor-gunicorn" if base else ""
        print(f"{name:24s} median {med:8.0f} req/s over {len(rps)} phases{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
