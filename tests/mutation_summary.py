"""The outcome of `make mutation`, in plain text: counts per module and every surviving mutant
with its diff. Run from the folder mutmut ran in (build/mutation); `make mutation` writes it to
tests/mutation-survivors.txt, and tests/MUTATION.md gives each survivor its verdict.

    cd build/mutation && ../../.venv/bin/python ../../tests/mutation_summary.py
"""

from __future__ import annotations

import collections
import contextlib
import io
import subprocess
import sys


def main() -> int:
    from mutmut.__main__ import find_mutant, get_diff_for_mutant, results  # noqa: F401  (mutmut 3)

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            results.callback(all=True)
        except SystemExit:
            pass
    status = {}
    for line in buf.getvalue().splitlines():
        name, _, verdict = line.strip().rpartition(": ")
        if name:
            status[name] = verdict
    by_module: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, verdict in status.items():
        by_module[".".join(name.split(".")[:2])][verdict] += 1
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"mutmut results at {commit or '?'} (working tree copy in build/mutation)\n")
    total = collections.Counter()
    for module in sorted(by_module):
        c = by_module[module]
        total.update(c)
        print(f"{module:22s} " + "  ".join(f"{k} {v}" for k, v in sorted(c.items())))
    tested = total["killed"] + total["survived"] + total["timeout"] + total["segfault"] + total["suspicious"]
    killed = tested - total["survived"]
    print(f"{'all':22s} " + "  ".join(f"{k} {v}" for k, v in sorted(total.items())))
    if tested:
        print(f"\nkilled (incl. timeouts) {killed} of {tested} mutants that ran: {100 * killed / tested:.1f}%")
    for name in sorted(n for n, v in status.items() if v not in ("killed", "timeout", "not checked")):
        m = find_mutant(name)
        diff = get_diff_for_mutant(name, path=m.path)
        changed = [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        print(f"\n## {name}: {status[name]}")
        print("\n".join(changed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
