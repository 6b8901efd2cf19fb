"""What the API server does with our /mutate answer against what it does with the Go yardstick's,
for the same review, in process with k8s.io/apiserver 1.37's own code (benchmarks/celcost/patchcost, Go):
decode the AdmissionReview, verify it, decode the JSON patch, encode the pod, apply the patch,
decode the result into a Pod, compare it with the pod sent, marshal the patch's audit annotation.

    .venv/bin/python -m benchmarks.patchcost --go-peer BINARY [--n 20000] [--rounds 5] [--out FILE]

Why: behind a real API server the API server's mean time per /mutate call is 1.14-1.37x Go's
(benchmarks/results/e2e_latency-3253326-quiet.json) while our server on its own answers within a
few percent of Go's (benchmarks/results/lowrate-5bb7496.json); our patch has more operations and
bytes than Go's (benchmarks/patch_size.py). This measures what that difference costs the API
server per call, so the call's excess can be split into the patch and the rest.

Cases: the e2e pod (benchmarks/lowrate.py's review: what benchmarks/e2e_latency.py creates) and
the shapes of benchmarks/patch_size.py. Our answer is made in process by the admission function
the server calls (shipped policies, the example cluster state); Go's by the yardstick over TLS on
loopback. The two answers of a case alternate within each round; per answer the median of the
rounds' ns per call, and the ratio ours/Go per round, then its median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks import celcost
from benchmarks import lowrate
from benchmarks import patch_size
from benchmarks import payloads
from benchmarks import provenance
from benchmarks.run import work_dir

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--go-peer", required=True)
    ap.add_argument("--n", type=int, default=20000, help="calls per answer per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", help="store the result here (JSON)")
    args = ap.parse_args()
    prov = provenance.start(sys.argv)
    bodies = {"e2e-pod": lowrate.review_body()}
    bodies.update((name, body) for name, body in payloads.bodies().items() if name in patch_size.SHAPES)
    work, _ = work_dir("rdma-webhook-patchcost-")
    go = patch_size.theirs(args.go_peer, bodies, work)
    cases, sizes = [], {}
    for name, body in bodies.items():
        ours = patch_size.ours(body)
        cases.append(
            {
                "name": name,
                "request": json.loads(body),
                "answers": {"webhook": json.loads(ours), "go_peer": json.loads(go[name])},
            }
        )
        sizes[name] = {"webhook": patch_size.describe(ours), "go_peer": patch_size.describe(go[name])}
    path = work / "cases.json"
    path.write_text(json.dumps(cases))
    binary = celcost.go_build("./patchcost", work / "patchcost")
    out = subprocess.run(
        [str(binary), "-cases", str(path), "-n", str(args.n), "-rounds", str(args.rounds)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = json.loads(out)
    result: dict = {}
    for name in bodies:
        mine = next(r for r in rows if r["case"] == name and r["answer"] == "webhook")
        theirs = next(r for r in rows if r["case"] == name and r["answer"] == "go_peer")
        ratios = [a / b for a, b in zip(mine["total_ns_rounds"], theirs["total_ns_rounds"])]
        result[name] = {
            "webhook": {
                **{k: sizes[name]["webhook"][k] for k in ("ops", "patch_bytes", "response_bytes")},
                "us": {k: round(v / 1000, 2) for k, v in mine["ns"].items()},
            },
            "go_peer": {
                **{k: sizes[name]["go_peer"][k] for k in ("ops", "patch_bytes", "response_bytes")},
                "us": {k: round(v / 1000, 2) for k, v in theirs["ns"].items()},
            },
            "total_ratio_median_of_rounds": round(statistics.median(ratios), 3),
            "excess_us": round((mine["ns"]["total"] - theirs["ns"]["total"]) / 1000, 2),
        }
        print(
            f"{name}: webhook {mine['ns']['total'] / 1000:.1f} us ({sizes[name]['webhook']['ops']} ops, "
            f"{sizes[name]['webhook']['patch_bytes']} B), go-peer {theirs['ns']['total'] / 1000:.1f} us "
            f"({sizes[name]['go_peer']['ops']} ops, {sizes[name]['go_peer']['patch_bytes']} B); "
            f"ratio {result[name]['total_ratio_median_of_rounds']}"
        )
    doc = {"provenance": provenance.finish(prov), "n": args.n, "rounds": args.rounds, "cases": result}
    text = json.dumps(doc, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
