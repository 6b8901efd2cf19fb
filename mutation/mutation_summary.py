"""The outcome of `make mutation`, in plain text: where the run came from, the score per module
against the target, and every surviving mutant with its diff and verdict. Run from the folder
mutmut ran in (build/mutation); `make mutation` writes it to mutation/mutation-survivors.txt.

A survivor's verdict comes from mutation/mutation_equivalents/<module>.txt (the dotted name under
`webhook`, e.g. core.decision.txt): an entry names the
function (mutmut's name without the module and the `__mutmut_N` suffix) and the exact changed
lines, then says why no input can tell the mutant from the original:

    ## x__assess: equivalent
    -        subject = Subject(pod, policy, namespace.labels, [])
    +        subject = Subject(pod, policy, None, [])
    why: ...

Entries match by function and changed lines, not by mutmut's number, which shifts when the
function's code changes; one entry covers every survivor of its function with those lines.
The score is killed (timeouts included) over the mutants that ran
minus the equivalents; a survivor without an entry counts as not killed. An entry that matches
no survivor is listed as stale (a test kills it now, or the code it argued about changed).

    cd build/mutation && ../../.venv/bin/python ../../mutation/mutation_summary.py [PATTERN ...]

With mutmut name patterns (what `make mutation MUTANTS=...` ran, e.g. `webhook.fabrics.*`) only
the mutants they match are counted and listed, and only those modules' entries can be stale. A
mutant that no test reaches ("no tests": no selected test calls its function) counts as run and
not killed: code no test runs is code no test checks.
"""

from __future__ import annotations

import collections
import contextlib
import fnmatch
import io
import sys
from pathlib import Path

TARGET = 0.90
HERE = Path(__file__).resolve().parent
EQUIVALENTS = HERE / "mutation_equivalents"
PROVENANCE = ".mutation-provenance"  # written by `make mutation` in build/mutation

Key = tuple[str, str, tuple[str, ...]]  # module, function, changed lines
# mutmut's statuses of a mutant that was given its chance: "no tests" is a mutant of a function no
# selected test calls (a survivor by another name).
RAN = ("killed", "timeout", "survived", "segfault", "suspicious", "no tests")


def parse_equivalents(folder: Path = EQUIVALENTS) -> dict[Key, str]:
    """Every entry of the equivalents files, keyed by module, function and changed lines."""
    entries: dict[Key, str] = {}
    for path in sorted(folder.glob("*.txt")):
        module = f"webhook.{path.stem}"
        blocks: list[list[str]] = []
        for line in path.read_text().splitlines():
            if line.startswith("## "):
                blocks.append([line])
            elif blocks:
                blocks[-1].append(line)
        for head, *lines in blocks:
            function, _, verdict = head.removeprefix("## ").partition(": ")
            if verdict.strip() != "equivalent":
                raise SystemExit(f"{path}: entry {head!r}: the verdict must be 'equivalent'")
            diff = tuple(line.rstrip() for line in lines if line.startswith(("+", "-")))
            why = " ".join(
                line.removeprefix("why:").strip() for line in lines if not line.startswith(("+", "-"))
            ).strip()
            if not diff or not why:
                raise SystemExit(f"{path}: entry {head!r} needs its -/+ lines and a why:")
            key = (module, function.strip(), changed_lines(list(diff)))
            # Two mutants of one function can change the same text (two `return -1` lines made
            # `return -2`): one entry, or one per mutant, covers every survivor with that diff.
            entries[key] = f"{entries[key]} / {why}" if key in entries else why
    return entries


def changed_lines(lines: list[str]) -> tuple[str, ...]:
    """A diff's -/+ lines as a key: the sign and the line without its leading white space. mutmut
    shows a method's lines dedented by its class's level in some runs and not in others (3.8.1's
    diff of a trampolined method), and an entry is written from one of them: the text is what
    tells a mutant, not its indentation."""
    return tuple(line[0] + line[1:].strip() for line in lines)


def split_name(name: str) -> tuple[str, str]:
    """'webhook.core.decision.x__assess__mutmut_107' -> ('webhook.core.decision', 'x__assess'):
    the module is every part before the first mangled function name (mutmut's `x_`/`xǁ`)."""
    parts = name.split(".")
    at = next((i for i, part in enumerate(parts) if part.startswith(("x_", "xǁ"))), len(parts) - 1)
    return ".".join(parts[:at]), ".".join(parts[at:]).rpartition("__mutmut_")[0]


def score_table(status: dict[str, str], equivalent: set[str]) -> list[str]:
    """Rows of the per-module table: what ran, what was killed, the score against TARGET."""
    rows = [
        "| module | mutants | killed | timeout | survived | equivalent | no verdict | score | target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    by_module: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, verdict in status.items():
        module, _ = split_name(name)
        for m in (module, "all"):
            by_module[m][verdict] += 1
            by_module[m]["equivalent"] += name in equivalent
    for module in sorted(by_module, key=lambda m: (m == "all", m)):
        c = by_module[module]
        ran = sum(c[k] for k in RAN)
        killed = c["killed"] + c["timeout"] + c["segfault"]
        denominator = ran - c["equivalent"]
        no_verdict = ran - killed - c["equivalent"]
        score = killed / denominator if denominator else 1.0
        not_run = sum(v for k, v in c.items() if k not in (*RAN, "equivalent"))
        if not ran:  # nothing of this module ran (a part stopped early): no score to claim
            rows.append(
                f"| {module.removeprefix('webhook.')} | 0 (+{not_run} not run) | 0 | 0 | 0 | 0 | 0 | - | not run |"
            )
            continue
        # a module part of whose mutants did not run has no result against the target yet
        verdict_ = "partial run" if not_run else "met" if score >= TARGET else "NOT met"
        rows.append(
            f"| {module.removeprefix('webhook.')} | {ran}{f' (+{not_run} not run)' if not_run else ''} "
            f"| {c['killed']} | {c['timeout']} | {c['survived']} | {c['equivalent']} | {no_verdict} "
            f"| {killed}/{denominator} = {100 * score:.1f}% | {verdict_} |"
        )
    return rows


def main(patterns: list[str]) -> int:
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
        if name and (not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)):
            status[name] = verdict
    entries = parse_equivalents()
    if patterns:  # only the modules of this part can have stale entries
        modules = {split_name(name)[0] for name in status}
        entries = {key: why for key, why in entries.items() if key[0] in modules}
    provenance = Path(PROVENANCE)
    print("mutmut run of the interpreted source (mutation/MUTATION.md says how to read this)")
    print(provenance.read_text().rstrip() if provenance.exists() else "(no provenance: not made by `make mutation`)")

    survivors: dict[str, tuple[Key, list[str]]] = {}
    for name in sorted(n for n, v in status.items() if v in ("survived", "suspicious", "no tests")):
        m = find_mutant(name)
        diff = get_diff_for_mutant(name, path=m.path)
        changed = [
            line.rstrip()
            for line in diff.splitlines()
            if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
        ]
        module, function = split_name(name)
        survivors[name] = ((module, function, changed_lines(changed)), changed)
    equivalent = {name for name, (key, _) in survivors.items() if key in entries}
    used = {survivors[name][0] for name in equivalent}

    print(
        f"\nScore: killed (timeouts included) of the mutants that ran minus the equivalents; "
        f"target {100 * TARGET:.0f}% per module.\n"
    )
    print("\n".join(score_table(status, equivalent)))
    stale = sorted(set(entries) - used)
    if stale:
        print(
            f"\n{len(stale)} entries of mutation/mutation_equivalents/ match no survivor of this run "
            f"(killed now, not run, or their code changed):"
        )
        for module, function, diff in stale:
            print(f"- {module}.{function}: {' / '.join(diff)}")
    for name, (key, changed) in survivors.items():
        verdict = "equivalent (mutation/mutation_equivalents/)" if name in equivalent else "NO VERDICT"
        print(f"\n## {name}: {status[name]}, {verdict}")
        print("\n".join(changed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
