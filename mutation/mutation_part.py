"""Narrow the copy's `[tool.mutmut] only_mutate` to the modules a part names, so that a part
(`make mutation MUTANTS='webhook.fabrics.*'`) generates and traces only its own mutants: mutmut
mutates every file of only_mutate before it filters by name (4 minutes for all 23 files on a
loaded 2-core machine). Run by `make mutation` in the copy (build/mutation-<part>):

    python ../../mutation/mutation_part.py 'webhook.fabrics.*' ...
    python ../../mutation/mutation_part.py --tests tests/cli/test_main.py,tests/cli/test_review_truth.py 'webhook.cli.*'

`--tests` (MUTATION_TESTS) narrows the test selection too: a survivor runs every selected test that
called its function, so a part whose functions the whole selection calls (the review CLI, the shell
reader) spends most of its time in tests that cannot kill its mutants. Narrowing can only lose kills,
never add one, so a part's score stays a lower bound of the full selection's.
"""

from __future__ import annotations

import fnmatch
import re
import sys
import tomllib
from pathlib import Path


def module_of(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def wanted(module: str, patterns: list[str]) -> bool:
    # 'webhook.fabrics.*' names every mutant of webhook.fabrics.*; a mutant's own name starts with its module
    return any(fnmatch.fnmatch(module + ".x_", p) or p.startswith(module + ".") for p in patterns)


def main(args: list[str]) -> int:
    tests = None
    if args[:1] == ["--tests"]:
        tests, args = [t for t in args[1].split(",") if t], args[2:]
    patterns = args
    pyproject = Path("pyproject.toml")
    text = pyproject.read_text()
    files = tomllib.loads(text)["tool"]["mutmut"]["only_mutate"]
    keep = [f for f in files if wanted(module_of(f), patterns)]
    if not keep:
        print(f"no file of only_mutate holds mutants named {patterns}", file=sys.stderr)
        return 1
    new, n = re.subn(
        r"^only_mutate = \[.*?\]", "only_mutate = " + repr(keep).replace("'", '"'), text, count=1, flags=re.S | re.M
    )
    assert n == 1, "only_mutate not found in pyproject.toml"
    print(f"only_mutate narrowed to {', '.join(keep)}")
    if tests:
        missing = [t for t in tests if not Path(t.split("::")[0]).exists()]
        if missing:
            print(f"no such test file: {', '.join(missing)}", file=sys.stderr)
            return 1
        new, n = re.subn(
            r"^pytest_add_cli_args_test_selection = \[.*?\]",
            "pytest_add_cli_args_test_selection = " + repr(tests).replace("'", '"'),
            new,
            count=1,
            flags=re.S | re.M,
        )
        assert n == 1, "pytest_add_cli_args_test_selection not found in pyproject.toml"
        print(f"test selection narrowed to {', '.join(tests)}")
    pyproject.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
