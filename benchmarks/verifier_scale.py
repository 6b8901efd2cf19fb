"""The verifier at scale (issue 44): N labelled pods whose containers start within a spread of
seconds, each log a fake source (in process) that prints some lines of the job's own, then a real
NCCL log excerpt (tests/proof/nccl-logs/, copied from public threads) at a random moment, then
keeps the stream open as a running job does. Measured, with the verifier as `verify` runs it
(webhook.verify.controller.Verifier, its default quiet time and concurrency):

- for each start, the time from its NCCL lines appearing to its condition being written;
- the log reads opened per container start (every pod is announced three times: ADDED and two
  MODIFIED, as a pod's status changes come);
- the verifier's memory: the peak of Python allocations (tracemalloc) and the process's max RSS.

    python -m benchmarks.verifier_scale [--pods 1000] [--spread 60] [--store NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import random
import resource
import sys
import time
import tracemalloc

from benchmarks import provenance

ROOT = provenance.ROOT
LOGS = ROOT / "tests" / "proof" / "nccl-logs"
# (file, what its verdict is under ib-shared): a mix of verified, fallback, degraded and WARN-only
MIX = [
    "nccl-302-ib-2.5.6.log",
    "nccl-707-gdrdma-channels.log",
    "nccl-1410-k8s-verbs-missing.log",
    "pytorch-72835-lo-socket-2.10.3.log",
    "nccl-392-gdr-off-2.5.7.log",
    "nccl-1652-tcpx-warn-only.log",
]
NOISE = b"[2026-12-07 16:00:00] loading shard %d of the dataset\n"


def pod(i: int) -> dict:
    name = f"trainer-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml-training",
            "uid": f"uid-{i:05d}",
            "labels": {"rdma-webhook.io/applied-policy": "ib-shared", "rdma-webhook.io/inject": "true"},
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama", "uid": "j", "controller": True}
            ],
        },
        "spec": {
            "nodeName": f"gpu-{i % 125:03d}",
            "containers": [{"name": "pytorch", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}],
        },
        "status": {
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "containerID": f"containerd://{i:064x}",
                    "state": {"running": {"startedAt": "2026-12-07T16:00:00Z"}},
                }
            ]
        },
    }


class FakeCluster:
    def __init__(self, pods: int, spread: float, seed: int = 7):
        rng = random.Random(seed)
        self.texts = {name: (LOGS / name).read_bytes() for name in MIX}
        self.plan = {}
        for i in range(pods):
            start = rng.uniform(0, spread)
            self.plan[f"trainer-{i:05d}"] = (start, start + rng.uniform(0.5, 20.0), MIX[i % len(MIX)])
        self.appeared: dict[str, float] = {}
        self.reported: dict[str, float] = {}
        self.reads: dict[str, int] = {}
        self.events = 0
        self.began = 0.0

    async def pod_events(self):
        order = sorted(self.plan, key=lambda n: self.plan[n][0])
        for name in order:
            await asyncio.sleep(max(0.0, self.began + self.plan[name][0] - time.monotonic()))
            p = pod(int(name.split("-")[1]))
            for kind in ("ADDED", "MODIFIED", "MODIFIED"):
                yield kind, copy.deepcopy(p)
        await asyncio.Event().wait()

    async def log(self, start, limit_bytes: int):
        self.reads[start.pod] = self.reads.get(start.pod, 0) + 1
        _, at, name = self.plan[start.pod]
        for i in range(20):
            yield NOISE % i
        await asyncio.sleep(max(0.0, self.began + at - time.monotonic()))
        self.appeared[start.pod] = time.monotonic()
        yield self.texts[name]
        await asyncio.sleep(3600)  # the job runs on; the verifier closes the stream

    async def set_condition(self, start, patch):
        self.reported[start.pod] = time.monotonic()

    async def create_event(self, event):
        self.events += 1


async def run(pods: int, spread: float) -> dict:
    from webhook.policy.load import load_dir
    from webhook.verify.controller import Verifier

    policies, errors = load_dir(ROOT / "policies")
    assert policies is not None, errors
    cluster = FakeCluster(pods, spread)
    verifier = Verifier(cluster, lambda: policies)
    tracemalloc.start()
    cluster.began = time.monotonic()
    main = asyncio.ensure_future(verifier.run())
    while len(cluster.reported) < pods and time.monotonic() - cluster.began < spread + 120:
        await asyncio.sleep(0.25)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    main.cancel()
    for task in list(verifier.tasks.values()):
        task.cancel()
    await asyncio.gather(main, *verifier.tasks.values(), return_exceptions=True)
    latencies = sorted(cluster.reported[p] - cluster.appeared[p] for p in cluster.reported)
    verdicts: dict[str, int] = {}
    by_verdict: dict[str, list[float]] = {}
    for start, verdict in verifier.reported:
        verdicts[verdict.verdict] = verdicts.get(verdict.verdict, 0) + 1
        by_verdict.setdefault(verdict.verdict, []).append(cluster.reported[start.pod] - cluster.appeared[start.pod])
    return {
        "pods": pods,
        "spread_seconds": spread,
        "verdicts_reported": len(cluster.reported),
        "verdicts": verdicts,
        "events": cluster.events,
        "latency_seconds": {
            "max": round(latencies[-1], 3),
            "p99": round(latencies[int(0.99 * (len(latencies) - 1))], 3),
            "median": round(latencies[len(latencies) // 2], 3),
        },
        "latency_max_seconds_by_verdict": {v: round(max(t), 3) for v, t in sorted(by_verdict.items())},
        "log_reads_per_start": {"max": max(cluster.reads.values()), "total": sum(cluster.reads.values())},
        "tracemalloc_peak_mib": round(peak / 2**20, 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--spread", type=float, default=60.0, help="seconds over which the containers start")
    ap.add_argument("--store", help="benchmarks/results/NAME.json")
    args = ap.parse_args(argv)
    prov = provenance.start(argv)
    out = asyncio.run(run(args.pods, args.spread))
    print(out)
    if args.store:
        print(provenance.store(args.store, prov, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
