"""Where a worker's time goes under saturation: py-spy on one worker of `rdma-webhook serve`
while wrk sends the benchmark mix, summarised as the frames that hold the most samples.

    .venv/bin/python -m benchmarks.hotpath [--server uvicorn|granian] [--seconds 10] [--top 25]

Prints two tables, by share of samples: "own" (the frame on top of the stack, where the time is
spent) and "inclusive" (every frame on the stack, what the time is spent under). Writes the raw
py-spy stacks to benchmarks/results/profile-<server>.txt for flame graphs. py-spy samples the
wall clock: a frame blocked in a system call (sending on a socket, waiting for the GIL) counts
as much as one computing, so read "own" time in C calls with the CPU figures of run.py.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.run import PY, run_wrk, webhook_target, work_dir

HERE = Path(__file__).resolve().parent


def summarise(raw: str, top: int) -> str:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for frame in set(frames):
            incl[frame] += n
    out = [f"{total} samples"]
    for title, counter in (("own", own), ("inclusive", incl)):
        out += ["", f"| {title} % | frame |", "| --- | --- |"]
        out += [f"| {n * 100 / total:.1f} | `{frame}` |" for frame, n in counter.most_common(top)]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=("uvicorn", "granian"), default="uvicorn")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    for tool in ("wrk", "py-spy"):
        if not shutil.which(tool) and not (Path(PY).parent / tool).exists():
            print(f"{tool} not found (wrk: apt-get install -y wrk; py-spy: pip install -e '.[bench]')", file=sys.stderr)
            return 2
    spy = shutil.which("py-spy") or str(Path(PY).parent / "py-spy")
    work, _ = work_dir("rdma-webhook-profile-")
    lua = work / "mix.lua"
    target = webhook_target(args.server, 2, work)
    port = target.port
    target.start(work / "server.log")
    raw_path = HERE / "results" / f"profile-{args.server}.txt"
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_wrk(port, lua, 2, conns=args.connections)  # warm-up
        load = subprocess.Popen(
            [
                "wrk",
                "-t2",
                f"-c{args.connections}",
                f"-d{args.seconds + 3}s",
                "--timeout",
                "10s",
                "-s",
                str(lua),
                f"https://127.0.0.1:{port}/mutate",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(1)
        worker = target.workers()[0]
        subprocess.run(
            [spy, "record", "-p", str(worker), "-d", str(args.seconds), "-r", "200", "-f", "raw", "-o", str(raw_path)],
            check=True,
            capture_output=True,
        )
        out = load.communicate()[0]
    finally:
        target.stop()
        shutil.rmtree(work, ignore_errors=True)
    rps = next((line.split()[1] for line in out.splitlines() if line.startswith("Requests/sec:")), "?")
    print(
        f"server {args.server}, 2 workers, wrk {args.connections} connections: {rps} req/s; worker profiled: {worker}"
    )
    print(summarise(raw_path.read_text(), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
