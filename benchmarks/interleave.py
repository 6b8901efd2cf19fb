"""Saturation only, several phases per target in the order given, to see through a noisy machine:
the ratios of `run.py` come from one phase each, and on a shared VM one phase can lose a third.

    .venv/bin/python -m benchmarks.interleave floor-gunicorn,webhook-uvicorn,webhook-granian,floor-uvicorn,...
        [--seconds 10] [--connections 32] [--target 1.5] [--store NAME]
    .venv/bin/python -m benchmarks.interleave --pairs 7 --store interleave   # floor-gunicorn,webhook-uvicorn x 7

A target may appear several times; each phase starts its server afresh. Prints req/s and server
CPU per admission per phase, then the median per target and its ratio to floor-gunicorn's. The
verdict on the throughput target (webhook-uvicorn >= --target x floor-gunicorn) uses the median
ratio and the spread of the ratios of adjacent webhook/floor phases: "met" or "not met" only when
every pair agrees, "within noise" when the spread covers the target. `--store NAME` writes
benchmarks/results/NAME.json with every phase and the provenance (commit, machine, load, command).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from types import SimpleNamespace
from benchmarks import provenance
from benchmarks.run import bench_target, floor_target, webhook_target, work_dir


def verdict(phases: list[dict], target: float) -> dict:
    """Median ratio webhook-uvicorn / floor-gunicorn and the ratios of adjacent pairs."""
    base = [p["throughput_rps"] for p in phases if p["target"] == "floor-gunicorn"]
    hook = [p["throughput_rps"] for p in phases if p["target"] == "webhook-uvicorn"]
    if not base or not hook:
        return {}
    pairs, last = [], {}
    for p in phases:  # each webhook phase against the floor phase next to it (before or after)
        if p["target"] in ("floor-gunicorn", "webhook-uvicorn"):
            other = "webhook-uvicorn" if p["target"] == "floor-gunicorn" else "floor-gunicorn"
            if other in last:
                w, f = (p, last[other]) if p["target"] == "webhook-uvicorn" else (last[other], p)
                pairs.append(round(w["throughput_rps"] / f["throughput_rps"], 2))
                last.clear()
                continue
            last[p["target"]] = p
    ratio = statistics.median(hook) / statistics.median(base)
    low, high = (min(pairs), max(pairs)) if pairs else (ratio, ratio)
    word = "met" if low >= target else "not met" if high < target else "within noise"
    return {
        "target": target,
        "median_ratio": round(ratio, 2),
        "pair_ratios": pairs,
        "pair_min": low,
        "pair_max": high,
        "verdict": word,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="?", help="comma separated: floor-<server> or webhook-<server>, repeats allowed")
    ap.add_argument("--pairs", type=int, help="instead of targets: floor-gunicorn,webhook-uvicorn this many times")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--target", type=float, default=1.5, help="throughput target, webhook-uvicorn / floor-gunicorn")
    ap.add_argument("--store", metavar="NAME", help="write benchmarks/results/NAME.json")
    args = ap.parse_args()
    if args.pairs:
        args.targets = ",".join(["floor-gunicorn,webhook-uvicorn"] * args.pairs)
    if not args.targets:
        ap.error("give targets or --pairs")
    prov = provenance.start()
    phases: list[dict] = []
    work, seq = work_dir("rdma-webhook-interleave-")
    phase = SimpleNamespace(seconds=args.seconds, connections=args.connections, rates=[], latency_seconds=0)
    results: dict[str, list[float]] = {}
    for name in args.targets.split(","):
        kind, server = name.split("-", 1)
        t = (
            floor_target(server, args.workers, 4, work)
            if kind == "floor"
            else webhook_target(server, args.workers, work)
        )
        r = bench_target(t, work, work / "mix.lua", [b for _, b in seq], phase)
        results.setdefault(name, []).append(r["throughput_rps"])
        phases.append(
            {
                "target": name,
                "throughput_rps": r["throughput_rps"],
                "cpu_ms_per_admission": r["cpu_s_per_1000"],
                "loadavg": provenance.loadavg(),
            }
        )
        print(
            f"{name:24s} {r['throughput_rps']:8.0f} req/s  {r['cpu_s_per_1000']:.3f} CPU ms/admission  "
            f"worker CPU s {r['worker_cpu_s']}",
            flush=True,
        )
    base = statistics.median(results["floor-gunicorn"]) if "floor-gunicorn" in results else None
    print()
    for name, rps in results.items():
        med = statistics.median(rps)
        ratio = f"  {med / base:.2f}x floor-gunicorn" if base else ""
        print(f"{name:24s} median {med:8.0f} req/s over {len(rps)} phases{ratio}")
    v = verdict(phases, args.target)
    if v:
        print(
            f"\nwebhook-uvicorn / floor-gunicorn: median {v['median_ratio']}x, adjacent pairs {v['pair_min']}-{v['pair_max']}x "
            f"{v['pair_ratios']}; target {v['target']}x: {v['verdict']}"
        )
    if args.store:
        cpu = {
            name: statistics.median(p["cpu_ms_per_admission"] for p in phases if p["target"] == name)
            for name in results
        }
        data = {
            "settings": {"seconds": args.seconds, "connections": args.connections, "workers": args.workers},
            "phases": phases,
            "median_rps": {n: statistics.median(r) for n, r in results.items()},
            "median_cpu_ms_per_admission": cpu,
            "throughput_target": v,
        }
        print(f"stored in {provenance.store(args.store, prov, data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
