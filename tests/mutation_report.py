"""`make mutation-report`: one table of every module's latest mutation score, read from the
records `make mutation` leaves (tests/mutation-survivors.txt for the core run,
tests/mutation-survivors-<part>.txt for each part), each row with where its run came from (the
copy's commit and the run's start and wall time). A module in several records is taken from the
newest run. Survivors killed by tests written after a run are not in its record (tests/MUTATION.md
tells them per part, with mutation_verify's output); a fresh run of the part shows them.

    .venv/bin/python tests/mutation_report.py
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the core run of 2026-11-25 predates the regroup of webhook/ into layers: its modules' names then
OLD_NAMES = {"decision": "core.decision", "fallback": "core.fallback", "mutation": "core.mutation", "patch": "core.patch",
             "nccl": "grammar.nccl", "k8s": "grammar.k8s"}
ROW = re.compile(r"^\| (?P<module>[a-z0-9_.]+) \| (?P<mutants>[^|]+) \|.*\| (?P<score>[^|]+) \| (?P<target>[^|]+) \|$")


def runs(record: Path) -> tuple[str, str, str, list[re.Match[str]]]:
    """(the copy's commit, the first run's start, the runs' wall time, the module rows) of one record;
    a module none of whose mutants ran in it has no row."""
    text = record.read_text()
    commit = re.search(r"^copy of (\S+)", text, re.M)
    starts = re.findall(r"^run (\S+),", text, re.M)
    walls = re.findall(r"after (\d+) s", text)
    rows = [m for line in text.splitlines() if (m := ROW.match(line)) and m["module"] not in ("module", "all")]
    rows = [m for m in rows if not m["mutants"].lstrip().startswith("0 (")]
    wall = f"{sum(int(w) for w in walls)} s" if len(walls) == len(starts) else "unfinished"
    return commit[1] if commit else "?", starts[0] if starts else "?", wall, rows


def main() -> int:
    latest: dict[str, tuple[str, str, str, str, re.Match[str] | None]] = {}
    for record in sorted(HERE.glob("mutation-survivors*.txt")):
        part = record.stem.removeprefix("mutation-survivors").removeprefix("-") or "core"
        commit, start, wall, rows = runs(record)
        for row in rows:
            module = OLD_NAMES.get(row["module"], row["module"])
            if module not in latest or start > latest[module][2]:
                latest[module] = (part, commit, start, wall, row)
    config = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["tool"]["mutmut"]
    for path in config["only_mutate"]:  # every module the configuration names, with a record or not
        module = path.removeprefix("webhook/").removesuffix(".py").replace("/", ".")
        latest.setdefault(module, ("-", "-", "-", "-", None))
    print("| module | part | copy of | run | wall | mutants | score | target |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    short = 0
    for module in sorted(latest):
        part, commit, start, wall, row = latest[module]
        if row is None:
            short += 1
            print(f"| {module} | - | - | - | - | - | - | no record |")
            continue
        short += row["target"].strip() != "met"
        print(f"| {module} | {part} | {commit} | {start} | {wall} | {row['mutants'].strip()} | {row['score'].strip()} "
              f"| {row['target'].strip()} |")
    print(f"\n{len(latest)} modules, {short} without a met target in their latest record")
    return 0


if __name__ == "__main__":
    sys.exit(main())
