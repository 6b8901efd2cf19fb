"""Pod CREATE latency through a real kube-apiserver, with and without the webhook registered.

Starts the e2e control plane (e2e/cluster.py: etcd, kube-apiserver, kube-controller-manager on
loopback) and the webhook as deployed (2 workers, shipped policies, ServiceAccount token), then
for each rate sends labelled GPU pods to an opted-in namespace in an open loop (a request is due
at t0 + i/rate whether or not earlier ones returned; latency is measured from that due time, so a
stalled server is not hidden by a slower sender) for DURATION seconds:

    phase "without": the webhook configurations are not registered
    phase "with":    the MutatingWebhookConfiguration and ValidatingWebhookConfiguration of
                     deploy/ are registered (the API server calls /mutate, then /validate)

and reports p50/p99 of each and what the webhook adds. Pods are really stored (not dry-run).
The sender runs in this process (threads over keep-alive HTTPS connections), on the same machine:
on 2 cores it competes with the API server, etcd and the webhook; say so with the figures.

    .venv/bin/python benchmarks/e2e_latency.py [--rates 50,200] [--duration 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import statistics
import sys
import threading
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from e2e import cluster as c  # noqa: E402
from e2e_bench import control_plane, write  # noqa: E402
import provenance  # noqa: E402


def pod(name: str) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "labels": {"rdma-webhook.io/inject": "true"}},
                       "spec": {"containers": [{"name": "pytorch", "image": "registry.example/trainer:1",
                                                "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}).encode()


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    k = max(0, min(len(values) - 1, int(round(q * (len(values) - 1)))))
    return values[k]


def open_loop(cp: c.ControlPlane, namespace: str, rate: float, duration: float, tag: str,
              senders: int = 48) -> dict:
    due: "queue.Queue[tuple[int, float] | None]" = queue.Queue()
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    ctx = cp.ssl_context()
    path = f"/api/v1/namespaces/{namespace}/pods"
    headers = {"Authorization": f"Bearer {cp.admin_token}", "Content-Type": "application/json"}

    def sender():
        conn = http.client.HTTPSConnection("127.0.0.1", cp.port, context=ctx, timeout=60)
        while True:
            item = due.get()
            if item is None:
                conn.close()
                return
            i, at = item
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            try:
                conn.request("POST", path, body=pod(f"{tag}-{i}"), headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                ok = resp.status == 201
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                conn = http.client.HTTPSConnection("127.0.0.1", cp.port, context=ctx, timeout=60)
                ok, body = False, str(exc).encode()
            took = time.monotonic() - at
            with lock:
                if ok:
                    latencies.append(took)
                else:
                    errors.append(body[:200].decode(errors="replace"))

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(senders)]
    for t in threads:
        t.start()
    n = int(rate * duration)
    t0 = time.monotonic() + 0.5
    for i in range(n):
        due.put((i, t0 + i / rate))
    for _ in threads:
        due.put(None)
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    return {"sent": n, "ok": len(latencies), "errors": len(errors), "first_error": errors[0] if errors else None,
            "achieved_per_s": round(len(latencies) / wall, 1),
            "p50_ms": round(percentile(latencies, 0.50) * 1000, 2) if latencies else None,
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 2) if latencies else None,
            "mean_ms": round(statistics.fmean(latencies) * 1000, 2) if latencies else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="50,200")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds at the lowest rate before measuring")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "e2e_latency.json"))
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    prov = provenance.start()
    results: dict = {"duration_s": args.duration, "runs": []}
    with control_plane("rdma-webhook-e2e-bench-") as (cp, workdir):
        docs = c.render_deploy(cp)
        hook = c.install_webhook(cp, workdir, docs)  # registers the configurations
        configs = c.loopback_webhooks(docs, hook.port, hook.ca_bundle)
        for i, rate in enumerate(rates):
            for phase in ("without", "with"):
                if phase == "without":
                    cp.kubectl("delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                               "rdma-webhook", "--ignore-not-found", check=True)
                else:
                    cp.apply(configs)
                time.sleep(3)  # the API server's webhook configuration informer catches up
                ns = f"bench-{phase}-{int(rate)}"
                cp.apply([{"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": ns, "labels": {"rdma-webhook.io/injection": "enabled"}}}])
                c.wait_for(f"ServiceAccount default in {ns}",
                           lambda: cp.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 60)
                if args.warmup and i == 0:
                    open_loop(cp, ns, rates[0], args.warmup, f"warm-{phase}")
                load_before = os.getloadavg()
                run = open_loop(cp, ns, rate, args.duration, f"p-{phase}")
                run.update(rate=rate, phase=phase, loadavg_1m_before=round(load_before[0], 2))
                print(json.dumps(run), flush=True)
                results["runs"].append(run)
                cp.kubectl("delete", "namespace", ns, "--wait=false")
        for rate in rates:
            by = {r["phase"]: r for r in results["runs"] if r["rate"] == rate}
            if by["with"]["p50_ms"] is not None and by["without"]["p50_ms"] is not None:
                added = {"rate": rate, "p50_added_ms": round(by["with"]["p50_ms"] - by["without"]["p50_ms"], 2),
                         "p99_added_ms": round(by["with"]["p99_ms"] - by["without"]["p99_ms"], 2)}
                results.setdefault("added", []).append(added)
                print(json.dumps(added), flush=True)
    write(args.out, prov, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
