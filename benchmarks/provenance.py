"""Where a stored benchmark result came from: the commit (and whether the work tree differed from
it), the machine, the load on it, the time and the command. Every script that writes under
benchmarks/results/ puts this block first, so a figure in a README can be traced to its run."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def loadavg() -> list[str]:
    try:
        return open("/proc/loadavg").read().split()[:3]
    except OSError:
        return []


def start(argv: list[str] | None = None) -> dict:
    """The provenance block, taken at the start of a run; `finish` adds the end."""
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        pass
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", "webhook", "benchmarks", "setup.py")
    return {
        "commit": _git("rev-parse", "--short", "HEAD"),
        "work_tree_differs": bool(dirty),  # webhook/, benchmarks/ or setup.py changed since the commit
        "command": " ".join([Path(sys.executable).name, *(argv if argv is not None else sys.argv)]),
        "started_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "nproc": os.cpu_count(),
            "cpu": model,
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
        "loadavg_at_start": loadavg(),
    }


def finish(prov: dict) -> dict:
    prov["finished_utc"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    prov["loadavg_at_end"] = loadavg()
    return prov


def store(name: str, prov: dict, data: dict) -> Path:
    """benchmarks/results/<name>.json: {"provenance": ..., **data}."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"provenance": finish(prov), **data}, indent=1) + "\n")
    return path
