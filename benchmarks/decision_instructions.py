"""Instructions per decision, per pod shape, counted by callgrind: `webhook.admission.review.handle(body)`
plus `orjson.dumps` of the response (what benchmarks/decision.py times), policies loaded
beforehand, PYTHONHASHSEED=0. Repeatable where the wall-clock figures of decision.py move by
10-40% on a shared machine.

    .venv/bin/python -m benchmarks.decision_instructions [--calls 400] [--json out.json]
    PYTHONPATH=DIR:$PWD .venv/bin/python -P -m benchmarks.decision_instructions  # another build: DIR holds
                                                                   # a link to its webhook/ alone

The figure is (Ir of a run with WARM + N calls - Ir of a run with WARM calls) / N, so start-up,
imports and policy loading cancel out; the same body is sent every time, as the pods of one job
are alike (so caches keyed by a command's text are warm, as in production after the first pod).
`--cold` adds shapes whose command is a shell script seen for the first time on every call (a
distinct comment line per call), which measures the shell parser itself (webhook/commands/reader.py).
Needs valgrind (apt-get install -y valgrind).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WARM = 30

# A launcher script as vendors' NCCL tests write them (752 bytes), run by `bash -c`.
LAUNCHER_SCRIPT = """#!/bin/bash
set -euo pipefail
# NCCL settings for the fabric; do not set NCCL_IB_DISABLE here
export NCCL_DEBUG=WARN
export NCCL_SOCKET_IFNAME=net1
export NCCL_IB_GID_INDEX=3
HOSTFILE=/etc/mpi/hostfile
NP=$(wc -l < "$HOSTFILE")
echo "launching on $NP hosts; never set NCCL_NET=Socket here"
if [ -f /opt/setup.sh ]; then
  . /opt/setup.sh
fi
until nslookup "${MASTER_ADDR}" >/dev/null 2>&1; do sleep 2; done
mpirun --allow-run-as-root -np "$((NP * 8))" --hostfile "$HOSTFILE" \\
  -bind-to none -map-by slot \\
  -x NCCL_DEBUG -x NCCL_SOCKET_IFNAME -x NCCL_IB_GID_INDEX -x LD_LIBRARY_PATH -x PATH \\
  --mca pml ob1 --mca btl ^openib --mca btl_tcp_if_include eth0 \\
  python /workspace/train.py --epochs 10 --batch-size 64 --fp16 2>&1 | tee /tmp/train.log
"""


def _script_pod(script: str):
    from tests import kube_objects as k

    c = k.container(
        "trainer",
        gpus=8,
        command=["/bin/bash", "-c"],
        args=[script],
        env=[{"name": "MASTER_ADDR", "value": "job-master-0"}],
    )
    return k.pod([c], name="script-pod", generate_name=None)


def shapes(cold: bool) -> dict[str, object]:
    from benchmarks.payloads import shapes as mix_shapes

    out: dict[str, object] = dict(mix_shapes())
    out["launcher-script"] = _script_pod(LAUNCHER_SCRIPT)
    if cold:
        out["launcher-script-cold"] = _script_pod(LAUNCHER_SCRIPT)
        big = (LAUNCHER_SCRIPT.split("\n", 1)[1]) * (100_000 // len(LAUNCHER_SCRIPT) + 1)
        out["script-100k-cold"] = _script_pod(big)  # over commands.MAX_PARSED: the textual reading
        out["script-30k-cold"] = _script_pod(big[:32_000].rsplit("\n", 1)[0] + "\n")  # about the largest parsed
    return out


def run(shape: str, calls: int, cold: bool, build: int) -> None:
    import copy

    from tests import kube_objects as k
    import orjson

    from webhook.admission import review
    from webhook.cluster.state import FileClusterState
    from webhook.policy.load import load_dir

    policies, errors = load_dir(ROOT / "policies")
    assert policies is not None, errors
    cluster = FileClusterState.from_file(str(ROOT / "examples" / "cluster-state.yaml"))
    pod = shapes(cold)[shape]
    bodies = []
    if shape.endswith("-cold"):  # a script never seen before on every call
        for i in range(build):  # as many in both runs, so that building them cancels out
            p = copy.deepcopy(pod)
            c = p["spec"]["containers"][0]
            c["args"][0] = f"# run {i}\n" + c["args"][0]
            bodies.append(k.body(k.admission_review(p, namespace="ml-training")))
    else:
        bodies = [k.body(k.admission_review(pod, namespace="ai-training" if "lws" in shape else "ml-training"))]
    for i in range(calls):
        status, doc, _, _ = review.handle(bodies[i % len(bodies)], policies, cluster.namespace, cluster.attachments())
        orjson.dumps(doc)
        assert status == 200


def instructions(shape: str, calls: int, cold: bool) -> int:
    def ir(count: int) -> int:
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                *(["-P"] if sys.flags.safe_path else []),
                "-m",
                "benchmarks.decision_instructions",
                "--run",
                shape,
                str(count),
                "--build",
                str(WARM + calls),
            ]
            + (["--cold"] if cold else []),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        if out.returncode:
            raise SystemExit(out.stderr[-2000:])
        return int(re.search(r"Collected : (\d+)", out.stderr).group(1))

    return (ir(WARM + calls) - ir(WARM)) // calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--cold", action="store_true", help="also the shell parser on scripts never seen before")
    ap.add_argument("--only", help="comma-separated shape names")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--run", nargs=2, metavar=("SHAPE", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--build", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        run(args.run[0], int(args.run[1]), args.cold, max(args.build, int(args.run[1])))
        return 0
    names = list(shapes(args.cold))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    got = {}
    for name in names:
        calls = min(args.calls, 40) if name in ("script-100k-cold", "script-30k-cold") else args.calls
        got[name] = instructions(name, calls, args.cold)
        print(f"{name:26s} {got[name]:>12,d} instructions per decision", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(got, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
