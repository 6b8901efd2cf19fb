"""The measurement behind the choice of shell parser (webhook/commands/reader.py, docs/commands.md "How commands
are read"): tree-sitter-bash against bashlex, on a typical launcher script and a 100 KB one,
plus the constructs each cannot parse, and each package's installed size.

    python -m venv /tmp/p && /tmp/p/bin/pip install tree-sitter tree-sitter-bash bashlex
    /tmp/p/bin/python -m benchmarks.parsers          # results/parsers.txt holds one run

Times are CPU time (time.process_time), best of 5 rounds, for the parse alone and for the parse
plus a walk over every node (what a reader does at least once).
"""

from __future__ import annotations

import importlib.metadata
import sys
import time

from benchmarks.decision_instructions import LAUNCHER_SCRIPT


CONSTRUCTS = {
    "arithmetic $((...))": "echo $((1 + 2))",
    "case": "case $x in a) echo a;; *) echo b;; esac",
    "array": "arr=(1 2); echo ${arr[0]}",
    "[[ test ]]": "[[ -f x ]] && echo yes",
    "heredoc": "cat <<EOF\nexport NCCL_IB_DISABLE=1\nEOF",
    "function": "f() { export A=1; }; f",
    "select": "select x in a b; do break; done",
    "process substitution": "diff <(ls a) <(ls b)",
    "${X:-default}": "echo ${X:-default}",
}


def _best(fn, text: str, reps: int) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(reps):
            fn(text)
        best = min(best, (time.process_time() - t0) / reps)
    return best


def _size(dist: str) -> int:
    files = importlib.metadata.distribution(dist).files or []
    return sum(f.size or 0 for f in files)


def parsers():
    out = {}
    try:
        import tree_sitter
        import tree_sitter_bash

        p = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))

        def ts_parse(text: str):
            return p.parse(text.encode())

        def ts_walk(text: str):
            stack = [p.parse(text.encode()).root_node]
            n = 0
            while stack:
                node = stack.pop()
                n += 1
                stack.extend(node.children)
            return n

        def ts_ok(text: str) -> bool:
            return not p.parse(text.encode()).root_node.has_error

        out["tree-sitter-bash"] = (ts_parse, ts_walk, ts_ok, ("tree-sitter", "tree-sitter-bash"))
    except ImportError:
        pass
    try:
        import bashlex

        def bl_walk(text: str):
            n = 0

            class V(bashlex.ast.nodevisitor):
                def visitnode(self, node):
                    nonlocal n
                    n += 1

            for part in bashlex.parse(text):
                V().visit(part)
            return n

        def bl_ok(text: str) -> bool:
            try:
                bashlex.parse(text)
                return True
            except Exception:
                return False

        out["bashlex"] = (bashlex.parse, bl_walk, bl_ok, ("bashlex",))
    except ImportError:
        pass
    return out


def main() -> int:
    typical = LAUNCHER_SCRIPT
    big = typical.split("\n", 1)[1] * (100_000 // len(typical) + 1)
    # bashlex cannot parse $((...)): give it the same scripts without it, so both parse something
    plain = typical.replace('"$((NP * 8))"', '"$NP"')
    plain_big = plain.split("\n", 1)[1] * (100_000 // len(plain) + 1)
    print(f"python {sys.version.split()[0]}; typical script {len(typical)} bytes, big {len(big)} bytes")
    for name, (parse, walk, ok, dists) in parsers().items():
        versions = ", ".join(f"{d} {importlib.metadata.version(d)}" for d in dists)
        size = sum(_size(d) for d in dists)
        print(f"\n{name} ({versions}; installed {size / 1024:.0f} KiB)")
        for label, text, reps in (
            ("typical", typical, 200),
            ("typical without $((..))", plain, 200),
            ("100 KB", big, 3),
            ("100 KB without $((..))", plain_big, 3),
        ):
            if not ok(text):
                print(f"  {label:26s} cannot parse")
                continue
            print(
                f"  {label:26s} parse {_best(parse, text, reps) * 1e6:10.0f} us   parse+walk {_best(walk, text, reps) * 1e6:10.0f} us"
            )
        failed = [c for c, text in CONSTRUCTS.items() if not ok(text)]
        print(f"  cannot parse: {', '.join(failed) if failed else 'none of ' + str(len(CONSTRUCTS))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
