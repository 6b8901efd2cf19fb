"""What the generated final-state policies cost the API server's CEL, before and after a change,
in one run: every shipped policy's ValidatingAdmissionPolicy as committed at REV against the one
the work tree generates, each evaluated by k8s.io/apiserver 1.37's own code (benchmarks/celcost,
Go) on the pods of that policy.

    .venv/bin/python -m benchmarks.celcost [--against HEAD] [--n 3000] [--rounds 5] [--out FILE]

The pods per policy: the pod its mutation leaves (e2e/admission_policy_pods.py's
`complete_pod`, which the e2e suite checks the API server admits), with the service-account
volume and a sidecar container without a GPU added as the API server would show them; and the
same pod with its device removed (denied: the validations and their messages run too). The
rounds interleave REV's objects and the work tree's, so drift reaches both alike; the ratio is
taken per round, then the median. Needs Go (>= 1.26) and the module proxy, as the e2e suite does.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import provenance
from e2e.admission_policy_pods import complete_pod
from webhook.policy import admission_policy as ap
from webhook.policy.load import load_dir

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


TOKEN = "kube-api-access-x7k2p"


def go_build(package: str, binary: Path) -> Path:
    """`binary` built from a package of the Go module benchmarks/celcost (`.`: celcost itself,
    `./patchcost`), with the module proxy as the e2e suite uses it."""
    subprocess.run(
        ["go", "build", "-o", str(binary), package],
        cwd=HERE / "celcost",
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    return binary


def as_sent(pod: dict) -> dict:
    """`pod` with what the API server adds before admission: the service-account token volume
    and its mounts, and a sidecar without a GPU."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    spec.setdefault("volumes", []).append(
        {
            "name": TOKEN,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                ],
            },
        }
    )
    spec["containers"].append(
        {"name": "log-shipper", "image": "registry.example/shipper:1", "env": [{"name": "LOG_LEVEL", "value": "info"}]}
    )
    for c in spec["containers"]:
        c.setdefault("volumeMounts", []).append(
            {"name": TOKEN, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        )
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("imagePullPolicy", "IfNotPresent")
    spec.update(
        restartPolicy="Never", dnsPolicy="ClusterFirst", serviceAccountName="default", schedulerName="default-scheduler"
    )
    return pod


def without_device(pod: dict, policy) -> dict:
    pod = copy.deepcopy(pod)
    res = pod["spec"]["containers"][0]["resources"]
    for d in policy.devices:
        res["limits"].pop(d.resource, None)
    res.pop("claims", None)
    pod["metadata"]["name"] += "-nodevice"
    return pod


def main() -> int:
    ap_ = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap_.add_argument("--against", default="HEAD", help="the revision whose committed objects are 'before'")
    ap_.add_argument("--n", type=int, default=3000, help="evaluations per round")
    ap_.add_argument("--rounds", type=int, default=5)
    ap_.add_argument("--out")
    args = ap_.parse_args()
    prov = provenance.start(sys.argv)
    prov["against"] = subprocess.run(
        ["git", "rev-parse", "--short", args.against], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    policies, errors = load_dir(str(ROOT / "policies"))
    assert policies is not None, errors
    tmp = Path(tempfile.mkdtemp(prefix="rdma-webhook-celcost-"))
    binary = go_build(".", tmp / "celcost")
    results = []
    generated = ap.objects(policies)  # each policy's objects are made from that policy alone
    for name, policy in sorted(policies.by_name.items()):
        rel = f"deploy/admission-policy/{name}/{name}.yaml"
        before = tmp / f"{name}-before.yaml"
        before.write_text(
            subprocess.run(
                ["git", "show", f"{args.against}:{rel}"], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout
        )
        after = tmp / f"{name}-after.yaml"
        after.write_text(ap.to_yaml([d for d in generated if d["metadata"]["labels"][ap.POLICY_LABEL] == name]))
        good = as_sent(complete_pod(policy, f"{name}-0", "ns"))
        pods = tmp / f"{name}-pods.json"
        pods.write_text(json.dumps([good, without_device(good, policy)]))
        out = subprocess.run(
            [
                str(binary),
                "-policies",
                f"{before},{after}",
                "-pods",
                str(pods),
                "-n",
                str(args.n),
                "-rounds",
                str(args.rounds),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        for pod_index, label in ((0, "admitted"), (1, "device removed")):
            b = next(r for r in rows if r["pod"] == pod_index and r["policies"] == str(before))
            a = next(r for r in rows if r["pod"] == pod_index and r["policies"] == str(after))
            ratios = [x / y for x, y in zip(a["ns_per_eval_rounds"], b["ns_per_eval_rounds"])]
            row = {
                "policy": name,
                "pod": label,
                "allowed_before": b["allowed"],
                "allowed_after": a["allowed"],
                "us_before": round(b["ns_per_eval_median"] / 1000, 1),
                "us_after": round(a["ns_per_eval_median"] / 1000, 1),
                "after_over_before": round(statistics.median(ratios), 3),
            }
            print(json.dumps(row), flush=True)
            results.append(row)
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {"provenance": provenance.finish(prov), "n": args.n, "rounds": args.rounds, "results": results},
                indent=1,
            )
            + "\n"
        )
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
