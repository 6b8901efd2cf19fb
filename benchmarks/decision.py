"""The decision core in-process: body bytes in -> response bytes out, per pod shape.

What is timed per call: `webhook.review.handle(body, ...)` (parse, decision, patch) followed by
`orjson.dumps` of the response document, i.e. everything `/mutate` does except HTTP, metrics and
the log line. Policy loading is excluded. Also the policy-count scaling (1, 10, 100 policies:
variants of policies/erdma.yaml with distinct names and namespace selectors).

    .venv/bin/python benchmarks/decision.py [--seconds 1.0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from payloads import ROOT, bodies  # noqa: E402

from webhook import review  # noqa: E402
from webhook.cluster import FileClusterState  # noqa: E402
from webhook.policy import load_dir, load_texts  # noqa: E402


def policy_variants(n: int) -> list[tuple[str, str]]:
    """n policies: the shipped ones plus n-2 erdma variants, each with its own name and a
    namespace selector that matches no benchmark namespace (so the real choice is unchanged,
    but every auto-selection has n candidates to rank)."""
    texts = [(str(p), p.read_text()) for p in sorted((ROOT / "policies").glob("*.yaml"))]
    erdma = (ROOT / "policies" / "erdma.yaml").read_text()
    for i in range(max(0, n - len(texts))):
        t = erdma.replace("name: erdma", f"name: erdma-v{i:03d}").replace(
            "namespaceSelector: {}", f"namespaceSelector: {{matchLabels: {{team: team-{i:03d}}}}}").replace(
            "priority: 10", f"priority: {20 + i}")
        texts.append((f"variant-{i:03d}.yaml", t))
    return texts


def load_policies(n: int | None):
    if n is None:
        ps, errs = load_dir(ROOT / "policies")
    else:
        ps, errs = load_texts(policy_variants(n))
    assert ps is not None, errs
    return ps


def one(body: bytes, policies, cluster) -> bytes:
    status, doc, _, _ = review.handle(body, policies, cluster.namespace, cluster.attachments())
    return orjson.dumps(doc)


def measure(body: bytes, policies, cluster, seconds: float) -> tuple[float, float]:
    """(decisions/s, µs per decision): best of 5 rounds, each ~seconds/5 long."""
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        one(body, policies, cluster)
    per = (time.perf_counter() - t0) / n
    reps = max(50, int(seconds / 5 / per))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            one(body, policies, cluster)
        best = min(best, (time.perf_counter() - t0) / reps)
    return 1 / best, best * 1e6


def outcome(body: bytes, policies, cluster) -> str:
    status, doc, decision, _ = review.handle(body, policies, cluster.namespace, cluster.attachments())
    return decision.outcome if decision else ("allowed" if doc.get("response", {}).get("allowed") else "error")


def run(seconds: float = 1.0) -> dict:
    cluster = FileClusterState.from_file(str(ROOT / "examples" / "cluster-state.yaml"))
    bs = bodies()
    out: dict = {"shapes": {}, "scaling": {}}
    shipped = load_policies(None)
    for name, body in bs.items():
        rate, us = measure(body, shipped, cluster, seconds)
        resp = one(body, shipped, cluster)
        out["shapes"][name] = {"body_bytes": len(body), "response_bytes": len(resp), "outcome": outcome(body, shipped, cluster),
                               "decisions_per_s": round(rate), "us_per_decision": round(us, 1)}
    for n in (1, 10, 100):
        ps = load_policies(n) if n > 1 else load_texts(policy_variants(2)[:1])[0]
        row = {}
        for name in ("pytorchjob-worker", "mpijob-worker", "denied", "untouched"):
            _, us = measure(bs[name], ps, cluster, seconds / 2)
            row[name] = round(us, 1)
        out["scaling"][n] = {"policies": len(ps), "us_per_decision": row}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per shape (default 1.0)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    res = run(args.seconds)
    print(f"{'shape':26s} {'bytes in':>8s} {'bytes out':>9s} {'outcome':>9s} {'decisions/s':>12s} {'µs each':>8s}")
    for name, r in res["shapes"].items():
        print(f"{name:26s} {r['body_bytes']:8d} {r['response_bytes']:9d} {r['outcome']:>9s} {r['decisions_per_s']:12d} {r['us_per_decision']:8.1f}")
    print("\npolicy-count scaling, µs per decision (policy 1 = erdma only)")
    names = list(next(iter(res["scaling"].values()))["us_per_decision"])
    print(f"{'policies':>8s} " + " ".join(f"{n:>18s}" for n in names))
    for n, r in res["scaling"].items():
        print(f"{r['policies']:8d} " + " ".join(f"{r['us_per_decision'][x]:18.1f}" for x in names))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
