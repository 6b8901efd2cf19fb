"""The shell builtins the reading of a command knows by name: those that start no process (their
arguments are data) and those that declare variables (`export`, `declare`, `unset`, ...), with
what the latter do to the variables a reading tracks.

Apart from `webhook.commands.reader` because they are bash's semantics of a few words, not the
walk: the reader asks this module whether a word starts a process and hands it the declarations.
"""

from __future__ import annotations

import re
from typing import Final

from webhook.commands.record import Record
from webhook.commands.state import State, Var

# Shell builtins (and plain programs) that start no process of their own: their arguments are
# data, so `echo NCCL_NET=Socket` sets nothing, and they see no environment worth reporting.
NO_PROCESS: Final = frozenset(
    {
        "echo",
        "printf",
        "cd",
        "pwd",
        "true",
        "false",
        ":",
        "test",
        "[",
        "read",
        "shift",
        "wait",
        "trap",
        "return",
        "exit",
        "break",
        "continue",
        "ulimit",
        "umask",
        "alias",
        "unalias",
        "hash",
        "type",
        "getopts",
        "let",
        "shopt",
        "source",
        ".",
        "printenv",
        "sleep",
        "mkdir",
        "touch",
        "cat",
        "ls",
        "rm",
        "cp",
        "mv",
        "ln",
        "chmod",
        "chown",
        "tee",
        "grep",
        "sed",
        "awk",
        "head",
        "tail",
        "wc",
        "hostname",
        "date",
        "nslookup",
        "ping",
        "whoami",
        "id",
    }
)
DECLARE: Final = frozenset({"export", "declare", "typeset", "local", "readonly"})
NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def declare(record: Record, keyword: str, args: list[str | None], state: State) -> None:
    """`keyword` (export, declare, typeset, local, readonly or unset) run with `args` in `state`:
    the variables it assigns, exports, unexports or unsets; function names (-f) are left alone."""
    export = keyword == "export"
    unexport = False
    functions = False
    for w in args:
        if w is None:
            continue
        if keyword != "unset" and w[:1] in ("-", "+") and len(w) > 1 and "=" not in w:
            if "x" in w:
                export, unexport = w[0] == "-", w[0] == "+"
            if "n" in w and keyword == "export":
                export, unexport = False, True
            functions = functions or "f" in w
            continue
        if keyword == "unset":
            if w in ("-f", "-v", "-n"):
                functions = w == "-f"
                continue
            if not functions:
                state.vars[w] = Var([], False)  # unset: nothing to see, nothing inherited
            continue
        if functions:
            continue
        name, eq, value = w.partition("=")
        if not NAME.match(name):
            continue
        if eq:
            record.assign(state, name, value, export)
            if unexport:
                state.vars[name].exported = False
        else:
            v = state.vars.get(name)
            if v is None:
                inherited = record.inherited(state, name)
                v = state.vars[name] = Var([inherited] if inherited is not None else [], inherited is not None, False)
            if export:
                v.exported = True
            elif unexport:
                v.exported = False
