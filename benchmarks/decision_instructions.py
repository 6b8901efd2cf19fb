"""Instructions per decision (callgrind), per pod shape: a figure that does not move with the
machine's load, for judging a change to the decision core.

For each shape of `payloads.bodies()` a child Python runs `webhook.review.handle(body, ...)` a
fixed number of times under `valgrind --tool=callgrind`, collecting only inside the compiled
`review.handle` (`--toggle-collect=CPyDef_review___handle`; with the interpreted core,
`--pure`, the whole loop is counted instead and a baseline loop without calls is subtracted).
The count per call is printed and, with `--json`, stored with the commit and the command.

    .venv/bin/python benchmarks/decision_instructions.py [--calls 200] [--json results/x.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import sys
sys.path.insert(0, {here!r})
from payloads import bodies
from webhook import review
from webhook.cluster import FileClusterState
from webhook.policy import load_dir
cluster = FileClusterState.from_file({state!r})
ps, errs = load_dir({policies!r})
assert ps is not None, errs
body = bodies()[{shape!r}]
ns, att = cluster.namespace, cluster.attachments()
for _ in range(20):  # warm caches (judged settings, selector lru) outside the counted calls
    review.handle(body, ps, ns, att)
for _ in range({calls}):
    review.handle(body, ps, ns, att)
"""


def count(shape: str, calls: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        code = CHILD.format(here=str(HERE), state=str(ROOT / "examples" / "cluster-state.yaml"),
                            policies=str(ROOT / "policies"), shape=shape, calls=calls)
        env = dict(os.environ, PYTHONHASHSEED="0")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--toggle-collect=CPyDef_review___handle", sys.executable, "-c", code],
                       check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        text = out.read_text(errors="replace")
    m = re.search(r"^summary:\s*(\d+)", text, re.M) or re.search(r"^totals:\s*(\d+)", text, re.M)
    if not m:
        raise SystemExit("callgrind wrote no summary line")
    return int(m.group(1)) // (calls + 20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--shapes", help="comma-separated shape names (default: all)")
    ap.add_argument("--json", help="write the figures here (with commit, machine, command)")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from payloads import bodies  # noqa: E402
    import webhook

    shapes = args.shapes.split(",") if args.shapes else list(bodies())
    rows = {}
    for shape in shapes:
        rows[shape] = count(shape, args.calls)
        print(f"{shape:26s} {rows[shape]:>10,d} instructions per review.handle", flush=True)
    if args.json:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "webhook"], cwd=ROOT, capture_output=True, text=True).stdout.strip())
        Path(args.json).write_text(json.dumps({
            "commit": commit + ("+uncommitted" if dirty else ""), "compiled": getattr(webhook, "COMPILED", None),
            "machine": f"{platform.machine()} {platform.processor() or ''} nproc={os.cpu_count()}".strip(),
            "python": platform.python_version(), "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "calls": args.calls, "instructions_per_call": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
