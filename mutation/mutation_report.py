"""`make mutation-report`: one table of every module's latest mutation score, read from the
records `make mutation` leaves (mutation/mutation-survivors.txt for the core run,
mutation/mutation-survivors-<part>.txt for each part), each row with where its run came from (the
copy's commit and the run's start and wall time). A module in several records is taken from the
newest run. The last column adds the survivors without a verdict that tests written after the run
kill, as `mutation/mutation_verify.py` found in that run's copy: its stored output,
mutation/mutation-verify-<part>.txt, counts only when it names the record's copy (its commit) or the
record itself, and only its `killed`/`timeout` lines for mutants the record lists as survived or
untested without a verdict; survivors without a verdict that an entry of mutation/mutation_equivalents/
written after the run matches (by function and changed lines, as mutation/mutation_summary.py matches)
leave the denominator. A fresh run of the part shows the same in its own record.

    .venv/bin/python mutation/mutation_report.py
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from mutation_summary import changed_lines, parse_equivalents, split_name

HERE = Path(__file__).resolve().parent
# the core run of 2026-11-25 predates the regroup of webhook/ into layers: its modules' names then
OLD_NAMES = {
    "decision": "core.decision",
    "fallback": "core.fallback",
    "mutation": "core.mutation",
    "patch": "core.patch",
    "nccl": "grammar.nccl",
    "k8s": "grammar.k8s",
}
ROW = re.compile(r"^\| (?P<module>[a-z0-9_.]+) \| (?P<mutants>[^|]+) \|.*\| (?P<score>[^|]+) \| (?P<target>[^|]+) \|$")


NO_VERDICT = re.compile(r"^## (\S+): (?:survived|no tests), NO VERDICT$", re.M)
VERIFIED = re.compile(r"^\s*(?:killed|timeout)\s+(webhook\.\S+)", re.M)
SCORE = re.compile(r"^(\d+)/(\d+)")


def later_verdicts(record: Path, commit: str, equivalents: dict) -> dict[str, tuple[int, int]]:
    """Per module (without `webhook.`): (survivors without a verdict in the record that its part's
    stored mutation_verify output kills, when that output is about this record's run; those an
    equivalents entry now matches)."""
    text = record.read_text()
    open_: dict[str, tuple[str, ...]] = {}  # name -> its changed lines, as the record lists them
    for block in text.split("\n## ")[1:]:
        head, *lines = block.splitlines()
        m = NO_VERDICT.match("## " + head)
        if m:
            open_[m[1]] = changed_lines(
                [line.rstrip() for line in lines if line.startswith(("+", "-")) and line.strip()]
            )
    verify = record.with_name(f"mutation-verify{record.stem.removeprefix('mutation-survivors')}.txt")
    killed: set[str] = set()
    if verify.exists():
        vtext = verify.read_text()
        if commit in vtext or record.name in vtext:
            killed = set(VERIFIED.findall(vtext)) & set(open_)
    out: dict[str, tuple[int, int]] = {}
    for name, diff in open_.items():
        module, function = split_name(name)
        k, e = out.get(module.removeprefix("webhook."), (0, 0))
        if name in killed:
            k += 1
        elif (module, function, diff) in equivalents:
            e += 1
        out[module.removeprefix("webhook.")] = (k, e)
    return out


def mutants_in(module: str) -> int | None:
    """How many mutants mutmut makes of a module (its own generation); None without mutmut."""
    try:
        from mutmut.mutation.file_mutation import mutate_file_contents
    except ImportError:
        return None
    path = HERE.parent / "webhook" / (module.replace(".", "/") + ".py")
    return len(mutate_file_contents(str(path), path.read_text()).mutant_names)


def whole(record_text: str, module: str) -> bool:
    """Whether some run of the record took all of the module's mutants (no pattern, or one naming
    the module or a package holding it, as `webhook.commands.*`), not only some functions' (a
    follow-up run of the functions a change touched does not stand for the whole module)."""
    for line in re.findall(r"^run \S+, .*?: mutmut run --max-children \d+(.*)$", record_text, re.M):
        patterns = line.split()
        if not patterns or any(
            p.endswith(".*") and (module + ".").startswith(p[:-1].removeprefix("webhook.")) for p in patterns
        ):
            return True
    return False


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
    equivalents = parse_equivalents()
    latest: dict[str, tuple[str, str, str, str, re.Match[str] | None, tuple[int, int]]] = {}
    follow_ups: list[str] = []
    for record in sorted(HERE.glob("mutation-survivors*.txt")):
        part = record.stem.removeprefix("mutation-survivors").removeprefix("-") or "core"
        commit, start, wall, rows = runs(record)
        later = later_verdicts(record, commit, equivalents)
        text = record.read_text()
        for row in rows:
            module = OLD_NAMES.get(row["module"], row["module"])
            if not whole(text, module):
                follow_ups.append(
                    f"{module}: {row['mutants'].strip()} mutants of some functions, {row['score'].strip()} "
                    f"({part}, copy of {commit}, {start})"
                )
                continue
            if module not in latest or start > latest[module][2]:
                latest[module] = (part, commit, start, wall, row, later.get(row["module"], (0, 0)))
    config = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["tool"]["mutmut"]
    for path in config["only_mutate"]:  # every module the configuration names, with a record or not
        module = path.removeprefix("webhook/").removesuffix(".py").replace("/", ".")
        latest.setdefault(module, ("-", "-", "-", "-", None, (0, 0)))
    print(
        "| module | part | copy of | run | wall | mutants | score in the run | run's target "
        "| with later verdicts (killed, equivalent) | target |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    short = 0
    for module in sorted(latest):
        part, commit, start, wall, row, (kills, equivalent) = latest[module]
        if row is None:
            count = mutants_in(module)
            if count == 0:  # constants or data tables only: mutmut makes no mutant of it
                print(f"| {module} | - | - | - | - | 0 | - | no mutants | - | nothing to kill |")
                continue
            short += 1
            print(f"| {module} | - | - | - | - | {'?' if count is None else count} | - | no record | - | no record |")
            continue
        score, target = row["score"].strip(), row["target"].strip()
        m = SCORE.match(score)
        later, met = "-", target
        if m and (kills or equivalent):
            killed, of = int(m[1]) + kills, int(m[2]) - equivalent
            later = f"{killed}/{of} = {100 * killed / of:.1f}% (+{kills} killed, {equivalent} equivalent)"
            met = "met" if killed / of >= 0.9 else "NOT met"
        short += met != "met"
        print(
            f"| {module} | {part} | {commit} | {start} | {wall} | {row['mutants'].strip()} | {score} | {target} "
            f"| {later} | {met} |"
        )
    print(f"\n{len(latest)} modules, {short} without a met target")
    if follow_ups:
        print("\nRuns of some functions only (after a change to them; not the module's score):")
        for line in follow_ups:
            print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
