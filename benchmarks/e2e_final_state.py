"""What the final-state check as ValidatingAdmissionPolicies costs the API server, per pod CREATE:
the generated objects of a committed revision against those the work tree generates now.

Starts the e2e control plane and the webhook as e2e_latency.py does, registers the mutating
configuration alone (one webhook call per pod) and, in turn, per variant:

    none:     no admission policy (the validate step's floor)
    REV:      the ValidatingAdmissionPolicies and bindings committed at REV
              (deploy/admission-policy/NAME/NAME.yaml of every catalogue policy)
    worktree: `rdma-webhook policy admission-policy` over the shipped policies, as generated now
    floor:    (--floor) the same objects with each match condition `false`: every policy still
              selects its pods, the API server still converts the pod for its validating stage
              and builds the CEL activation, and no rule is evaluated: what any policy of this
              shape costs, whatever its CEL

then sends labelled GPU pods at RATE/s for DURATION seconds and records, from the API server's
own metrics, the mean of the whole validate step of admission (every validating admission
plugin, the policies' CEL included) and of the admit step, per repeat, and the CPU time the
kube-apiserver process used per pod (e2e_latency.cpu_by_process: less sensitive than a wall-clock
mean to what else runs on the cores). The webhook must write
what the variant selects pods by (REV's objects may need the webhook of REV; the stored pod's
labels and annotations are recorded so a variant that matched nothing shows).

    .venv/bin/python -m benchmarks.e2e_final_state [--against REV] [--rate 50] [--duration 10]
        [--repeats 3] [--out FILE]

The variants run interleaved (none, REV, worktree, none, ...): compare them within a run. The
figures are CPU time of the API server on the same 2 cores as everything else.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

from e2e import cluster as c
from benchmarks.e2e_bench import control_plane, write
from benchmarks import e2e_latency as latency
from benchmarks import provenance

ROOT = Path(__file__).resolve().parent.parent


STEP = "apiserver_admission_step_admission_duration_seconds"


def committed_objects(rev: str) -> list[dict]:
    """The generated objects of every catalogue policy as committed at `rev`."""
    listing = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "deploy/admission-policy/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    out: list[dict] = []
    for path in listing:
        parts = path.split("/")
        if len(parts) == 4 and parts[3] == parts[2] + ".yaml":
            text = subprocess.run(
                ["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout
            out += [d for d in yaml.safe_load_all(text) if d]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", default="HEAD")
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--floor", action="store_true", help="also the objects with each match condition `false`")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "e2e_final_state.json"))
    args = ap.parse_args()
    rev = subprocess.run(
        ["git", "rev-parse", "--short", args.against], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    variants = {"none": [], rev: committed_objects(rev), "worktree": latency.generated_admission_policies()}
    if args.floor:
        variants["floor"] = [_never(d) for d in variants["worktree"]]
    prov = provenance.start()
    runs: list[dict] = []
    with control_plane("rdma-webhook-e2e-final-state-") as (cp, workdir):
        docs = c.render_deploy(cp)
        hook = c.install_webhook(cp, workdir, docs)
        mutating = latency.phase_configs(
            "mutate-only", c.loopback_webhooks(docs, hook.port, hook.ca_bundle), None, hook.ca_bundle
        )
        for repeat in range(args.repeats):
            for name, objects in variants.items():
                ns = f"final-state-{len(runs)}"
                run = latency.measure_phase(
                    cp, mutating + objects, ns, args.rate, args.duration, "p", warmup=(args.rate, 2)
                )
                means = run["apiserver"]
                stored = json.loads(cp.get(f"/api/v1/namespaces/{ns}/pods/p-0") or b"{}")
                meta = stored.get("metadata") or {}
                row = {
                    "variant": name,
                    "repeat": repeat,
                    "p50_ms": run["p50_ms"],
                    "p99_ms": run["p99_ms"],
                    "errors": run["errors"],
                    "loadavg_1m_before": run["loadavg_1m_before"],
                    "validate_step_ms": (means.get(f"{STEP} validate CREATE") or {}).get("mean_ms"),
                    "admit_step_ms": (means.get(f"{STEP} admit CREATE") or {}).get("mean_ms"),
                    "apiserver_cpu_ms_per_pod": run["cpu_ms_per_pod"].get("kube-apiserver"),
                    "stored_labels": meta.get("labels"),
                    "stored_annotations": meta.get("annotations"),
                }
                print(json.dumps(row), flush=True)
                runs.append(row)
                cp.kubectl(
                    "delete", "namespace", ns, "--wait=true", "--timeout=300s"
                )  # its pods gone before the next variant
    summary = {}
    for name in variants:
        values = [r["validate_step_ms"] for r in runs if r["variant"] == name and r["validate_step_ms"] is not None]
        cpu = [r["apiserver_cpu_ms_per_pod"] for r in runs if r["variant"] == name]
        summary[name] = {
            "validate_step_ms_median": round(statistics.median(values), 3) if values else None,
            "validate_step_ms": values,
            "apiserver_cpu_ms_per_pod_median": round(statistics.median(cpu), 3) if cpu else None,
            "apiserver_cpu_ms_per_pod": cpu,
        }
    floor = summary["none"]["validate_step_ms_median"]
    for name, s in summary.items():
        if name != "none" and s["validate_step_ms_median"] is not None and floor is not None:
            s["added_ms"] = round(s["validate_step_ms_median"] - floor, 3)
            s["apiserver_cpu_added_ms"] = round(
                s["apiserver_cpu_ms_per_pod_median"] - summary["none"]["apiserver_cpu_ms_per_pod_median"], 3
            )
    print(json.dumps(summary, indent=1))
    write(
        args.out,
        prov,
        {
            "against": rev,
            "rate": args.rate,
            "duration_s": args.duration,
            "repeats": args.repeats,
            "runs": runs,
            "summary": summary,
        },
    )
    return 0


def _never(doc: dict) -> dict:
    """`doc` (a generated object) with each match condition replaced by `false`."""
    doc = json.loads(json.dumps(doc))
    for condition in (doc.get("spec") or {}).get("matchConditions") or []:
        condition["expression"] = "false"
    return doc


if __name__ == "__main__":
    sys.exit(main())
