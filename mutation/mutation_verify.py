"""Check that tests written after a mutmut run kill the mutants it left alive: each named mutant is
written into the source of the copy mutmut ran in (`mutmut apply`), the given tests run against
that copy, and the file is put back. Run from build/mutation:

    cd build/mutation && ../../.venv/bin/python ../../mutation/mutation_verify.py \\
        --tests ../../tests/core/test_decision_final_state.py webhook.core.decision.x_check_final__mutmut_18 ...

Prints one line per mutant: killed (the tests failed), timeout (they ran longer than --timeout
seconds: a mutant that loops, killed as mutmut counts it) or ALIVE.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tests", required=True, help="comma-separated test paths or node ids")
    ap.add_argument(
        "--timeout", type=float, default=120.0, help="seconds the tests may take with a mutant (default 120)"
    )
    ap.add_argument("names", nargs="+")
    args = ap.parse_args()
    here = Path.cwd()
    env = {**os.environ, "PYTHONPATH": str(here)}
    tests = args.tests.split(",")
    base = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
        env=env,
        capture_output=True,
        text=True,
    )
    if base.returncode != 0:
        print(f"the tests fail without a mutant (exit {base.returncode}): nothing to verify", flush=True)
        return 2
    alive = 0
    for name in args.names:
        parts = name.split(".")  # the module is every part before mutmut's mangled function name
        module = ".".join(parts[: next(i for i, part in enumerate(parts) if part.startswith(("x_", "xǁ")))])
        source = here / (module.replace(".", "/") + ".py")
        backup = source.read_bytes()
        try:
            subprocess.run([sys.executable, "-m", "mutmut", "apply", name], check=True, capture_output=True)
            if source.read_bytes() == backup:
                print(f"?      {name}: mutmut apply changed nothing", flush=True)
                continue
            try:
                out = subprocess.run(
                    [sys.executable, "-P", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=args.timeout,
                )
                verdict = (
                    "killed" if out.returncode == 1 else "ALIVE" if out.returncode == 0 else f"error {out.returncode}"
                )
            except subprocess.TimeoutExpired:
                verdict = "timeout"
            alive += verdict not in ("killed", "timeout")
            print(f"{verdict:6s} {name}", flush=True)
        finally:
            source.write_bytes(backup)
            shutil.rmtree(source.parent / "__pycache__", ignore_errors=True)
    return 1 if alive else 0


if __name__ == "__main__":
    sys.exit(main())
