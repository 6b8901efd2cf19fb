"""How long `make test` takes on this machine, step by step, measured on the checkout as it is:
the lint, the compiled pytest run and the pure run, each with the very command the Makefile's
`test` and `test-pure` recipes run (the pytest options and the pure file list are read from the
Makefile itself, so a change there is measured as it is). Writes
benchmarks/results/make-test-time-LABEL.txt: the provenance block (commit, machine, load), then
per step its command, wall time, CPU time (user + system of the step's processes, which the load
moves far less than the wall time), load average before and after, and pytest's summary line.
`--serial` runs the suite in one process (without the Makefile's PYTEST_WORKERS), to compare.

    .venv/bin/python -m benchmarks.make_test_time --label before [--durations 40]

It runs the steps without `make` (which would install and compile first): build the extensions
once beforehand (`make compile`, or `python setup.py build_ext --inplace --force`). The compiled
run expects them (RDMA_WEBHOOK_EXPECT=compiled, as `make test` sets), and needs scripts/build-helm.sh
and scripts/build-celcheck.sh, as `make test` does. Other jobs on the machine move every figure:
measure the runs to compare back to back, and read them with the load averages they record.
"""

from __future__ import annotations

import argparse
import os
import resource
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import provenance

ROOT = provenance.ROOT
SLOWEST = re.compile(r"^\d+\.\d+s (?:call|setup|teardown) ")


def make_variable(name: str) -> str:
    """The value of a variable of the Makefile, as make expands it."""
    probe = f"include Makefile\n__print:\n\t@printf '%s\\n' '$({name})'\n"
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", "-f", "-", "__print"],
        input=probe,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def build_pure() -> None:
    """The interpreted copy of the package that `make test-pure` builds (build/pure)."""
    subprocess.run(
        "rm -rf build/pure && mkdir -p build/pure && cp -r webhook build/pure/ && find build/pure/webhook -name '*.so' -delete"
        " && ln -s ../../policies build/pure/policies",
        shell=True,
        cwd=ROOT,
        check=True,
    )


def run_step(name: str, argv: list[str], env: dict[str, str]) -> dict:
    load = provenance.loadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    summary = next((line for line in reversed(lines) if line.startswith("=") or " passed" in line), "")
    slowest = [line for line in lines if SLOWEST.match(line)]  # pytest --durations
    print(f"{name}: {seconds:.1f} s, {cpu:.1f} CPU s, exit {out.returncode}: {summary.strip('= ')}", flush=True)
    if out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-2000:], sep="\n", file=sys.stderr)
    return {
        "name": name,
        "command": " ".join(argv),
        "seconds": round(seconds, 1),
        "cpu": round(cpu, 1),
        "exit": out.returncode,
        "load_before": load,
        "load_after": provenance.loadavg(),
        "summary": summary.strip("= "),
        "slowest": slowest,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", required=True, help="names the result file: make-test-time-LABEL.txt")
    ap.add_argument("--serial", action="store_true", help="without the Makefile's PYTEST_WORKERS (one process)")
    ap.add_argument("--durations", type=int, default=0, help="also record pytest's N slowest tests per run")
    ap.add_argument(
        "--site", help="a directory of packages put last on PYTHONPATH (a plugin not installed in the venv)"
    )
    args = ap.parse_args()
    prov = provenance.start()
    workers = [] if args.serial else make_variable("PYTEST_WORKERS").split()
    pure_tests = make_variable("PURE_TESTS").split()
    extra = [f"--durations={args.durations}"] if args.durations else []
    site = [str(Path(args.site).resolve())] if args.site else []
    helm = subprocess.run(["bash", "scripts/build-helm.sh"], cwd=ROOT, capture_output=True, text=True, check=True)
    cel = subprocess.run(["bash", "scripts/build-celcheck.sh"], cwd=ROOT, capture_output=True, text=True, check=True)
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RDMA_WEBHOOK_EXPECT")}
    compiled = dict(
        base,
        PYTHONPATH=os.pathsep.join([str(ROOT), *site]),
        RDMA_WEBHOOK_HELM=helm.stdout.strip(),
        RDMA_WEBHOOK_CELCHECK=cel.stdout.strip(),
        RDMA_WEBHOOK_EXPECT="compiled",
    )
    pure = dict(base, PYTHONPATH=os.pathsep.join(["build/pure", *site]), RDMA_WEBHOOK_EXPECT="pure")
    total = time.monotonic()
    steps = [
        run_step("lint: format", [tool("ruff"), "format", "--check", "--quiet", "."], base),
        run_step("lint: check", [tool("ruff"), "check", "--quiet", "."], base),
        run_step("pytest, compiled", [tool("pytest"), *workers, *extra], compiled),
    ]
    build_pure()
    steps.append(
        run_step("test-pure", [tool("pytest"), "-q", "-p", "no:cacheprovider", *workers, *extra, *pure_tests], pure)
    )
    seconds = time.monotonic() - total
    provenance.finish(prov)
    lines = [f"{k}: {v}" for k, v in prov.items()]
    lines += [f"PYTHONPATH also holds: {site[0]}"] if site else []
    cpu = sum(s["cpu"] for s in steps)
    lines += [f"make test, its steps in a row: {seconds:.1f} s, {cpu:.1f} CPU s", ""]
    for s in steps:
        lines += [
            f"## {s['name']}: {s['seconds']} s (exit {s['exit']}), {s['cpu']} CPU s (user + system of its processes)",
            f"command: {s['command']}",
            f"load average before / after: {' '.join(s['load_before'])} / {' '.join(s['load_after'])}",
            f"summary: {s['summary']}",
            *(["slowest:", *s["slowest"]] if s["slowest"] else []),
            "",
        ]
    out = provenance.RESULTS / f"make-test-time-{args.label}.txt"
    out.write_text("\n".join(lines))
    print(f"{seconds:.1f} s in all; written to {out.relative_to(ROOT)}")
    return 0 if all(s["exit"] == 0 for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
