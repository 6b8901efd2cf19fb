"""What one reading of a command records as it goes (`webhook.commands.reader` walks the
command): the settings it reports and the script file each came from, and everything its answer
depends on besides the command's text: each value looked up in the container's env, each
question put to the ConfigMap files, the budget spent. `reader.read` remembers a reading with
those answers and reuses it only while the container gives the same ones, so every lookup goes
through here to be recorded. The values of variables as the reading knows them (`value`,
`expand`, `assign`) are here for the same reason: an inherited value is such a lookup.
"""

from __future__ import annotations

from typing import Any, Final

from webhook.commands.files import Budget, FileSource, Lookup
from webhook.commands.shell import Ref, Unreadable
from webhook.commands.state import State, Var
from webhook.commands.text import scan_text

_MAX_VALUE: Final = 4096  # longer expanded values are "not known here" (A=$A$A doubling stays small)


class Record:
    """A reading's findings and what they depended on; `reader._Reader` adds the walk."""

    def __init__(self, names: frozenset[str], env: Lookup | None, budget: Budget, files: FileSource | None = None):
        self.names = names
        self.env = env
        self.budget = budget
        self.files = files
        self.file: str | None = None  # the script file being read, if any
        self.origins: dict[tuple[str, str], str] = {}
        self.unread: list[tuple[str, str]] = []
        self.found: list[tuple[str, str]] = []
        self._seen: set[tuple[str, str]] = set()
        self.deps: list[tuple[str, str | None]] = []  # what was looked up in the container env
        # what was asked of the files: (a lookup?, its path or text, the answer), so that a
        # remembered reading is reused only while the files answer the same
        self.file_deps: list[tuple[bool, str, Any]] = []
        self.complete = True  # False when the parsing budget sent a script to the textual reading

    def report(self, name: str, value: str | None, origin: str | None = None) -> None:
        if value is not None and name in self.names:
            pair = (name, value)
            if pair not in self._seen:
                self._seen.add(pair)
                self.found.append(pair)
                if origin is None:
                    origin = self.file
                if origin is not None:
                    self.origins[pair] = origin

    def lookup(self, path: str) -> tuple[str | None, str] | None:
        if self.files is None:
            return None
        found = self.files.lookup(path)
        self.file_deps.append((True, path, found))
        return found

    def mentioned(self, text: str) -> bool:
        if self.files is None:
            return False
        said = self.files.mentioned(text)
        self.file_deps.append((False, text, said))
        return said

    def spend(self, steps: int) -> None:
        self.budget.steps -= steps
        if self.budget.steps < 0:
            raise Unreadable()  # the reading ends here: `read` gives the textual one, remembered nowhere

    def report_state(self, state: State) -> None:
        for name, v in state.vars.items():
            if v.exported and v.own and name in self.names:
                for value in v.values:
                    self.report(name, value, v.origin)

    def fallback(self, text: str) -> None:
        for name, value in scan_text(text, self.names):
            self.report(name, value)

    # values -----------------------------------------------------------------------------------

    def inherited(self, state: State, name: str) -> str | None:
        if state.cleared:
            return None
        # recorded without an env too: the reading is reused only for a container whose env agrees
        value = self.env.get(name) if self.env is not None else None
        self.deps.append((name, value))
        return value

    def value(self, state: State, name: str) -> str | None:
        """The one known value of `name` here, else None."""
        v = state.vars.get(name)
        if v is None:
            return self.inherited(state, name)
        if len(v.values) == 1:
            return v.values[0]
        return None

    def expand(self, word: list[Any], state: State) -> str | None:
        if len(word) == 1 and isinstance(word[0], str):
            return word[0]
        out: list[str] = []
        for part in word:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, Ref):
                known = self.value(state, part.name)
                if known is None:
                    return None
                out.append(known)
            else:
                return None
        joined = "".join(out)
        return joined if len(joined) <= _MAX_VALUE else None

    def assign(self, state: State, name: str, value: str | None, export: bool) -> None:
        """NAME=value (export: with `export`/`declare -x`). A plain assignment is seen by later
        processes when NAME is exported already, or `set -a` is on, or NAME is in the container
        env, or NAME is one of the names asked about: the policy may add those to the env, and
        the shell then exports the new value."""
        if not name:
            return
        v = state.vars.get(name)
        exported = (
            export
            or state.allexport
            or name in self.names
            or (v.exported if v is not None else self.inherited(state, name) is not None)
        )
        state.vars[name] = Var([value], exported, True, self.file)
