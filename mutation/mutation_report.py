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

The last column says whether each module's source changed since the commit its run's copy was
taken of (git diff of that commit against the checkout; a copy "plus uncommitted changes" is read
as its commit): a CHANGED score is of the code as it was then. The script writes the table to
mutation/mutation-report.txt (and prints it); nothing in it depends on when or where it runs, so
`make test` compares the committed file with what the script writes now
(tests/project/test_mutation_report.py): a commit that changes a scored module, a record, an
equivalent or the configuration needs `make mutation-report` re-run (not a mutation run), and the
report then says which scores are of older code. It needs the history back to the runs' commits
(not a shallow clone: it says so).

    .venv/bin/python mutation/mutation_report.py            # writes mutation/mutation-report.txt
    .venv/bin/python mutation/mutation_report.py --check    # exit 1 when the committed file differs
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from mutation_summary import changed_lines, parse_equivalents, split_name

HERE = Path(__file__).resolve().parent
REPORT = HERE / "mutation-report.txt"
HEADER = (
    "mutation/mutation-report.txt, written by mutation/mutation_report.py (`make mutation-report`) from the records "
    "in mutation/: regenerate, do not edit; `make test` fails when it differs from what the script writes now "
    "(tests/project/test_mutation_report.py)"
)
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


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=HERE.parent, capture_output=True, text=True)


def since_the_run(commit: str, module: str) -> str:
    """Whether the module's source changed since the commit its run's copy was taken of, the
    checkout's file against that commit's (no mutation run needed to say so: `make mutation-report`
    compares them). A commit that is not in this clone's history (a shallow clone) is said."""
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        shallow = git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        raise LookupError(
            f"commit {commit} (the copy of {module}'s run) is not in this clone's history"
            + (": a shallow clone; `git fetch --unshallow` brings it" if shallow else "")
        )
    path = "webhook/" + module.replace(".", "/") + ".py"
    out = git("diff", "--numstat", commit, "--", path)
    if out.returncode != 0:
        raise LookupError(f"git diff {commit} -- {path}: {out.stderr.strip()}")
    if not out.stdout.strip():
        return "unchanged"
    added, removed, _ = out.stdout.split("\t", 2)
    return f"CHANGED (+{added} -{removed} lines)"


def report(mutants=mutants_in) -> str:
    """The report's text: a function of the records in mutation/, the configuration, the
    equivalents and the checkout's sources (nothing of when or where it is produced, so that the
    committed report can be compared with what this produces now: tests/project/test_mutation_report.py)."""
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
    out = [HEADER, ""]
    out.append(
        "| module | part | copy of | run | wall | mutants | score in the run | run's target "
        "| with later verdicts (killed, equivalent) | target | source since the run |"
    )
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    short = stale = 0
    for module in sorted(latest):
        part, commit, start, wall, row, (kills, equivalent) = latest[module]
        if row is None:
            count = mutants(module)
            if count == 0:  # constants or data tables only: mutmut makes no mutant of it
                out.append(f"| {module} | - | - | - | - | 0 | - | no mutants | - | nothing to kill | - |")
                continue
            short += 1
            n = "?" if count is None else count
            out.append(f"| {module} | - | - | - | - | {n} | - | no record | - | no record | - |")
            continue
        score, target = row["score"].strip(), row["target"].strip()
        m = SCORE.match(score)
        later, met = "-", target
        if m and (kills or equivalent):
            killed, of = int(m[1]) + kills, int(m[2]) - equivalent
            if of == 0:  # every mutant argued equivalent (e.g. code run only at import)
                later, met = f"0/0 (all {equivalent} equivalent)", "nothing to kill"
            else:
                later = f"{killed}/{of} = {100 * killed / of:.1f}% (+{kills} killed, {equivalent} equivalent)"
                met = "met" if killed / of >= 0.9 else "NOT met"
        short += met not in ("met", "nothing to kill")
        since = since_the_run(commit, module)
        stale += since != "unchanged"
        out.append(
            f"| {module} | {part} | {commit} | {start} | {wall} | {row['mutants'].strip()} | {score} | {target} "
            f"| {later} | {met} | {since} |"
        )
    out.append(
        f"\n{len(latest)} modules, {short} without a met target, "
        f"{stale} whose source changed since its run (its score is of the code as it was then)"
    )
    if follow_ups:
        out.append("\nRuns of some functions only (after a change to them; not the module's score):")
        out.extend(f"- {line}" for line in follow_ups)
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only say whether mutation-report.txt is what this writes")
    args = ap.parse_args()
    try:
        text = report()
    except LookupError as e:
        print(f"mutation_report: {e}", file=sys.stderr)
        return 2
    if args.check:
        same = REPORT.exists() and REPORT.read_text() == text
        print(f"{REPORT.relative_to(HERE.parent)} is {'up to date' if same else 'STALE: run make mutation-report'}")
        return 0 if same else 1
    REPORT.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
