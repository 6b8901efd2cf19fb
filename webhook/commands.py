"""A container's command read the way the shell and the launchers it runs read it: which values
of a given set of environment variables each process it starts will see.

    settings(argv_or_script, names, env) -> [(name, value), ...]

`argv_or_script` is a container's command + args as the kubelet runs them (a list), or a shell
script (a string). `names` is the set of variables asked about (the fallback rules pass NCCL's;
another transport passes its own, e.g. FI_PROVIDER). `env` looks up the container's own `env`
(what `mpirun -x NAME` and `$NAME` read when the script does not set NAME itself).

What is reported: every value of a named variable that the command itself makes and that some
process it starts will see: an assignment in the script (`export`, `declare -x`, `NAME=v cmd`,
a plain `NAME=v` of a variable that is exported), `env NAME=v`, a launcher's flags (`LAUNCHERS`:
`mpirun -x`, `-genv`, `-env`, `-genvlist`, `--mca mca_base_env_list`), `os.environ` in
`python -c`, through `sh -c`/`bash -c` strings, `eval` and `exec`, nested. Values the container's
`env` gives and nothing in the command forwards are not reported (the env rules judge those).

Shell scripts are parsed with tree-sitter-bash (README, "How commands are read"): comments,
quoted text, `echo`/`printf` arguments and heredoc bodies are not settings, and a process sees
the last assignment made before it on the straight-line path. What the reading cannot follow
is read conservatively: a branch, a loop body or a function body may or may not run, so the
values it assigns are added to the possible ones; sourced files and scripts in the image are
not read; a script the parser cannot read (a syntax error, deeper nesting than `_MAX_DEPTH`,
more than `MAX_PARSED` bytes) falls back to `scan_text`, the textual reading, which reports
every `NAME=value` it finds. Nothing here raises on any input.

Cost: only a text that mentions one of the names (a substring test per name prefix, then per
name) is parsed at all, and a parsed script is remembered by its text (the pods of one job
send the same script), so a decision pays the parser once per distinct script.
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import Any, Final, Protocol

# -- the table of launchers -------------------------------------------------------------------
# What each launcher does with its flags. Actions: "set" NAME VALUE (two words), "export"
# NAME=VALUE or NAME (one word; NAME alone forwards the launcher's own value), "forward" a
# comma-separated list of names (values from the launcher's environment), "mca" KEY VALUE (Open
# MPI's MCA parameters: `mca_base_env_list` is a ;-separated list of NAME=VALUE or NAME), "arg"
# a flag that takes one word that is not the program. The program the ranks run is the first
# word that is neither a flag nor a flag's argument; it is read as any command (a `bash -c`
# there is read too). Open MPI: mpirun(1) `-x`, `--mca`; MPICH and Intel MPI (Hydra):
# mpiexec(1) `-genv`, `-env`, `-genvlist`, `-envlist`.

_OPEN_MPI: Final = {
    "-x": "export", "--x": "export",
    "--mca": "mca", "-mca": "mca", "--gmca": "mca", "-gmca": "mca", "--omca": "mca",
    "-np": "arg", "-n": "arg", "--np": "arg", "-c": "arg", "-H": "arg", "--host": "arg", "-host": "arg",
    "--hostfile": "arg", "-hostfile": "arg", "--machinefile": "arg", "-machinefile": "arg",
    "--map-by": "arg", "-map-by": "arg", "--bind-to": "arg", "-bind-to": "arg", "--rank-by": "arg", "-rank-by": "arg",
    "-N": "arg", "-npernode": "arg", "--npernode": "arg", "-npersocket": "arg", "--prefix": "arg",
    "--wdir": "arg", "-wdir": "arg", "--wd": "arg", "-wd": "arg", "--output-filename": "arg", "--tune": "arg",
    "--am": "arg", "--app": "arg", "--path": "arg", "--launch-agent": "arg", "--personality": "arg",
    "--prtemca": "mca", "--pmixmca": "mca",
}
_HYDRA: Final = {
    "-genv": "set", "-env": "set", "-genvlist": "forward", "-envlist": "forward",
    "-n": "arg", "-np": "arg", "-f": "arg", "-hostfile": "arg", "-machinefile": "arg", "-host": "arg", "-hosts": "arg",
    "-ppn": "arg", "-perhost": "arg", "-wdir": "arg", "-path": "arg", "-configfile": "arg", "-bootstrap": "arg",
    "-bootstrap-exec": "arg", "-launcher": "arg", "-launcher-exec": "arg", "-iface": "arg", "-envexcl": "arg",
    "-genvexcl": "arg", "-bind-to": "arg", "-map-by": "arg", "-binding": "arg", "-rmk": "arg", "-rr": "arg",
    "-errfile-pattern": "arg", "-outfile-pattern": "arg", "-prepend-pattern": "arg",
}
# `mpirun`/`mpiexec` may be either family: their union is read (no flag means different things).
_EITHER: Final = {**_OPEN_MPI, **_HYDRA}

LAUNCHERS: Final[dict[str, dict[str, str]]] = {
    "mpirun": _EITHER, "mpiexec": _EITHER,
    "orterun": _OPEN_MPI, "prterun": _OPEN_MPI, "prun": _OPEN_MPI, "oshrun": _OPEN_MPI,
    "mpirun.openmpi": _OPEN_MPI, "mpiexec.openmpi": _OPEN_MPI,
    "mpiexec.hydra": _HYDRA, "mpirun.mpich": _HYDRA, "mpiexec.mpich": _HYDRA,
}
_MCA_ENV_LIST: Final = "mca_base_env_list"

SHELLS: Final = frozenset({"sh", "bash", "dash", "ash", "ksh", "mksh", "zsh"})
# Shell builtins (and plain programs) that start no process of their own: their arguments are
# data, so `echo NCCL_NET=Socket` sets nothing, and they see no environment worth reporting.
_NO_PROCESS: Final = frozenset({
    "echo", "printf", "cd", "pwd", "true", "false", ":", "test", "[", "read", "shift", "wait", "trap", "return",
    "exit", "break", "continue", "ulimit", "umask", "alias", "unalias", "hash", "type", "getopts", "let", "shopt",
    "source", ".", "printenv", "sleep", "mkdir", "touch", "cat", "ls", "rm", "cp", "mv", "ln", "chmod", "chown",
    "tee", "grep", "sed", "awk", "head", "tail", "wc", "hostname", "date", "nslookup", "ping", "whoami", "id",
})
_DECLARE: Final = frozenset({"export", "declare", "typeset", "local", "readonly"})
_PYTHON_NAME: Final = re.compile(r"python[0-9.]*$")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")

MAX_PARSED: Final = 32 * 1024  # bytes of one script; a longer one gets the textual reading
_MAX_DEPTH: Final = 12  # nested `bash -c`/`eval`/`python -c` and syntax nesting, per command
_CACHE_MAX: Final = 256  # parsed scripts remembered (per process); cleared when full


class Lookup(Protocol):
    """The container's own env: a variable's value, None when it has none that is known."""

    def get(self, name: str) -> str | None: ...


# -- the substring pre-check ------------------------------------------------------------------

_PREFIXES: dict[frozenset[str], tuple[str, ...]] = {}


def prefixes(names: frozenset[str]) -> tuple[str, ...]:
    """The distinct prefixes of `names` up to their first `_` (NCCL_, FI_): one substring test
    each rules out almost every command. Computed once per set of names."""
    found = _PREFIXES.get(names)
    if found is None:
        seen: list[str] = []
        for n in sorted(names):
            cut = n.find("_", 1)
            p = n[:cut + 1] if cut > 0 else n
            if p not in seen:
                seen.append(p)
        found = tuple(seen)
        if len(_PREFIXES) < 64:
            _PREFIXES[names] = found
    return found


def mentions(text: str, names: frozenset[str]) -> bool:
    """Whether `text` mentions any of `names`: no setting of them can be made otherwise."""
    for p in prefixes(names):
        if p in text:
            for n in names:
                if n in text:
                    return True
            return False
    return False


# -- the textual reading (the fallback) -------------------------------------------------------

_SCANNERS: dict[frozenset[str], tuple[re.Pattern[str], re.Pattern[str]]] = {}


def _scanners(names: frozenset[str]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(shell form, shell or os.environ form) for `names`. The shell form starts each
    alternative with its literal prefix and checks the word start with a lookbehind placed after
    it, so the regex engine jumps between occurrences of the prefix instead of trying the
    lookbehind at every character. `NAME=` must start a word: MY_NCCL_NET= does not count."""
    found = _SCANNERS.get(names)
    if found is None:
        alternatives = []
        for p in prefixes(names):
            rests = sorted((n[len(p):] for n in names if n.startswith(p)), key=len, reverse=True)
            alternatives.append(re.escape(p) + "(?<![A-Za-z0-9_]" + re.escape(p) + ")(?:"
                                + "|".join(re.escape(r) for r in rests) + ")")
        shell = "(" + "|".join(alternatives) + r")=(\"[^\"]*\"|'[^']*'|[^\s;&|)`]*)"
        python = (r"environ\[\s*[\"'](" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
                  + r")[\"']\s*\]\s*=\s*(\"[^\"]*\"|'[^']*')")
        found = (re.compile(shell), re.compile(shell + "|" + python))
        if len(_SCANNERS) < 64:
            _SCANNERS[names] = found
    return found


def scan_text(text: str, names: frozenset[str]) -> list[tuple[str, str]]:
    """The textual reading: every `NAME=value` that starts a word, and every
    `environ["NAME"] = "value"`, in order, whatever surrounds it (a comment, an echo). Values
    with a `$` are skipped (not known here). What `settings` falls back to for a script it cannot
    parse: it may report more than the shell would set, never less."""
    found: list[tuple[str, str]] = []
    if not mentions(text, names):
        return found
    shell, either = _scanners(names)
    for m in (either if "environ" in text else shell).finditer(text):
        first: str | None = m.group(1)
        name: str = first if first else m.group(3)
        raw: str = m.group(2) if first else m.group(4)
        if raw[:1] in ("'", '"'):
            raw = raw[1:-1]
        elif "\\" in raw or "'" in raw or '"' in raw:  # a shell word with escapes or inner quotes
            try:
                raw = "".join(shlex.split(raw))
            except ValueError:
                pass
        if "$" in raw:  # a shell variable: its value is not known here
            continue
        found.append((name, raw))
    return found


# -- the parsed form of a script --------------------------------------------------------------
# tree-sitter's syntax tree is turned once per script into these few node kinds; the reading
# (below) then runs on them for each decision. A word is a list of parts: literal text, a
# variable reference (`Ref`), or None for what cannot be known here ($(...), $((...)), ${X:-y}).

class Ref:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class Cmd:
    """A simple command, a declaration (`export ...`) or a bare assignment: prefix assignments,
    words, and the command substitutions in them (run before it, each in a subshell)."""

    __slots__ = ("assigns", "words", "subs")

    def __init__(self, assigns: list[tuple[str, list[Any]]], words: list[list[Any]], subs: list[Block]):
        self.assigns = assigns
        self.words = words
        self.subs = subs


SEQ, MAYBE, SUB = 0, 1, 2  # runs once in this shell; may run or not (branch, loop, function); in a subshell


class Block:
    __slots__ = ("kind", "items")

    def __init__(self, kind: int, items: list[Any]):
        self.kind = kind
        self.items = items  # Cmd and Block


class _Unreadable(Exception):
    """The script cannot be read faithfully (syntax error, nesting too deep)."""


_parser: Any = None


def _tree_sitter_parser() -> Any:
    global _parser
    if _parser is None:
        import tree_sitter
        import tree_sitter_bash

        _parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
    return _parser


_PARSED: dict[str, Block | None] = {}


def parse_script(text: str) -> Block | None:
    """The script's commands, or None when it cannot be read faithfully. Remembered by text."""
    if text in _PARSED:
        return _PARSED[text]
    block: Block | None = None
    if len(text) <= MAX_PARSED:
        try:
            tree = _tree_sitter_parser().parse(text.encode("utf-8", "surrogatepass"))
            root = tree.root_node
            if not root.has_error:
                block = _Converter().block(root, SEQ, 0)
        except (_Unreadable, RecursionError, ValueError, UnicodeError):
            block = None
    if len(_PARSED) >= _CACHE_MAX:
        _PARSED.clear()
    _PARSED[text] = block
    return block


class _Converter:
    """tree-sitter-bash's tree -> Block/Cmd. Node kinds as in the grammar's node-types.json."""

    def block(self, node: Any, kind: int, depth: int) -> Block:
        items: list[Any] = []
        for child in node.named_children:
            self.statement(child, items, depth + 1)
        return Block(kind, items)

    def statement(self, node: Any, items: list[Any], depth: int) -> None:
        if depth > 4 * _MAX_DEPTH:
            raise _Unreadable()
        t: str = node.type
        if t in ("command", "declaration_command", "unset_command", "variable_assignment", "variable_assignments"):
            items.append(self.command(node, depth))
        elif t in ("compound_statement", "do_group", "program"):
            for child in node.named_children:
                self.statement(child, items, depth + 1)
        elif t == "subshell":
            items.append(self.block(node, SUB, depth))
        elif t == "pipeline":
            for child in node.named_children:
                sub: list[Any] = []
                self.statement(child, sub, depth + 1)
                items.append(Block(SUB, sub))
        elif t == "list":  # a && b, a || b: the first runs, the rest may
            children = node.named_children
            if children:
                self.statement(children[0], items, depth + 1)
                rest: list[Any] = []
                for child in children[1:]:
                    self.statement(child, rest, depth + 1)
                items.append(Block(MAYBE, rest))
        elif t == "redirected_statement":
            self.redirected(node, items, depth)
        elif t == "negated_command":
            for child in node.named_children:
                self.statement(child, items, depth + 1)
        elif t in ("if_statement", "while_statement", "until_statement", "for_statement", "c_style_for_statement",
                   "case_statement", "function_definition", "elif_clause", "else_clause", "case_item"):
            # conditions run here; bodies may run or not (a function body is read where it is defined)
            maybe: list[Any] = []
            for i, child in enumerate(node.children):
                if not child.is_named:
                    continue
                field = node.field_name_for_child(i)
                if field in ("condition", "value", "initializer"):
                    if child.type in ("word", "string", "raw_string", "concatenation", "simple_expansion",
                                      "expansion", "number", "command_substitution"):
                        subs: list[Block] = []
                        self.word(child, subs, depth + 1)
                        items.extend(subs)
                    else:
                        self.statement(child, items, depth + 1)
                elif field == "name" or field == "variable" or child.type in ("extglob_pattern",):
                    continue
                else:
                    self.statement(child, maybe, depth + 1)
            items.append(Block(MAYBE, maybe))
        # anything else (comments, heredoc bodies, [[ ]], (( ))) starts no process and sets nothing

    def redirected(self, node: Any, items: list[Any], depth: int) -> None:
        """`cmd <<EOF ... EOF` and `cat <<EOF | cmd`: a shell or Python fed a heredoc runs its
        body as a script (read as `sh -c body`); a pipeline after the heredoc's start runs too.
        Any other heredoc body is data."""
        body = node.child_by_field_name("body")
        script: str | None = None
        later: list[Any] = []
        for child in node.named_children:
            if child.type != "heredoc_redirect":
                continue
            for part in child.named_children:
                if part.type == "heredoc_body":
                    script = part.text.decode("utf-8", "replace")
                elif part.type in ("pipeline", "command", "list", "redirected_statement"):
                    later.append(part)
        if body is not None:
            before = len(items)
            self.statement(body, items, depth + 1)
            if script is not None and len(items) == before + 1 and isinstance(items[-1], Cmd):
                cmd: Cmd = items[-1]
                program = cmd.words[0] if cmd.words else []
                name = program[0].rsplit("/", 1)[-1] if len(program) == 1 and isinstance(program[0], str) else ""
                if name in SHELLS or _PYTHON_NAME.match(name):
                    cmd.words = [program, ["-c"], [script]]
        for part in later:
            sub: list[Any] = []
            self.statement(part, sub, depth + 1)
            items.append(Block(SUB, sub))

    def command(self, node: Any, depth: int) -> Cmd:
        t: str = node.type
        assigns: list[tuple[str, list[Any]]] = []
        words: list[list[Any]] = []
        subs: list[Block] = []
        if t in ("variable_assignment", "variable_assignments"):
            for a in ([node] if t == "variable_assignment" else node.named_children):
                if a.type == "variable_assignment":
                    assigns.append(self.assignment(a, subs, depth))
            return Cmd(assigns, words, subs)
        if t in ("declaration_command", "unset_command"):
            keyword = node.children[0].type if node.child_count else ""
            words.append([keyword])
            for child in node.named_children:
                if child.type == "variable_assignment":
                    name, value = self.assignment(child, subs, depth)
                    words.append([name, "="] + value)
                elif child.type == "variable_name":
                    words.append([child.text.decode("utf-8", "replace")])
                else:
                    words.append(self.word(child, subs, depth))
            return Cmd(assigns, words, subs)
        for i, child in enumerate(node.children):
            field = node.field_name_for_child(i)
            if child.type == "variable_assignment" and not words:
                assigns.append(self.assignment(child, subs, depth))
            elif field == "name":
                inner = child.named_children
                words.append(self.word(inner[0], subs, depth) if inner else [None])
            elif field == "argument":
                words.append(self.word(child, subs, depth))
        return Cmd(assigns, words, subs)

    def assignment(self, node: Any, subs: list[Block], depth: int) -> tuple[str, list[Any]]:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        name = name_node.text.decode("utf-8", "replace") if name_node is not None else ""
        if name_node is not None and name_node.type != "variable_name":
            name = ""  # arr[i]=...: not an environment variable
        value: list[Any] = self.word(value_node, subs, depth) if value_node is not None else [""]
        return name, value

    def word(self, node: Any, subs: list[Block], depth: int) -> list[Any]:
        if depth > 4 * _MAX_DEPTH:
            raise _Unreadable()
        t: str = node.type
        text: str = node.text.decode("utf-8", "replace")
        if t == "word" or t == "number":
            return [_unquoted(text)]
        if t == "raw_string":
            return [text[1:-1]]
        if t in ("string", "translated_string"):
            parts: list[Any] = []
            for child in node.named_children:
                ct = child.type
                if ct == "string_content":
                    parts.append(_in_double_quotes(child.text.decode("utf-8", "replace")))
                else:
                    parts.extend(self.word(child, subs, depth + 1))
            return parts or [""]
        if t == "concatenation":
            parts = []
            for child in node.children:
                if child.is_named:
                    parts.extend(self.word(child, subs, depth + 1))
                else:
                    parts.append(child.text.decode("utf-8", "replace"))
            return parts
        if t == "simple_expansion" or t == "expansion":
            inner = node.named_children
            if len(inner) == 1 and inner[0].type == "variable_name" and node.child_count == (2 if t == "simple_expansion" else 3):
                return [Ref(inner[0].text.decode("utf-8", "replace"))]
            return [None]
        if t == "ansi_c_string":
            body = text[2:-1]
            return [body] if "\\" not in body else [None]
        if t in ("command_substitution", "process_substitution"):
            subs.append(self.block(node, SUB, depth + 1))
            return [None]
        return [None]  # arithmetic, arrays, brace expansion, globs: not known here


def _unescape(text: str, escapable: str | None) -> str:
    """Backslashes removed as the shell removes them: before any character outside quotes
    (`escapable` None), or only before one of `escapable` inside double quotes; `\\<newline>`
    is a line continuation (nothing) in both."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and (escapable is None or text[i + 1] in escapable):
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _unquoted(text: str) -> str:
    """An unquoted word's text without its backslashes (`\\x` is `x`, `\\<newline>` nothing)."""
    return _unescape(text, None)


def _in_double_quotes(text: str) -> str:
    """Inside "...", a backslash escapes only $ ` " \\ and a newline."""
    return _unescape(text, '$`"\\\n')


# -- the reading ------------------------------------------------------------------------------

class _Var:
    """A variable as the command leaves it: its possible values (None: one not known here, or
    the inherited one), whether it is exported, whether its values are the command's own (else
    it only marks a variable of the container env, which the env rules judge already)."""

    __slots__ = ("values", "exported", "own")

    def __init__(self, values: list[str | None], exported: bool, own: bool = True):
        self.values = values
        self.exported = exported
        self.own = own


class Budget:
    """What one decision may spend on reading commands: bytes of script parsed (the rest get the
    textual reading) and steps of the reading (each variable copied or command read is one), so
    that a decision stays linear in its input whatever a pod's scripts hold."""

    __slots__ = ("parse_bytes", "steps")

    def __init__(self, parse_bytes: int = 64 * 1024, steps: int = 200_000):
        self.parse_bytes = parse_bytes
        self.steps = steps


class _State:
    __slots__ = ("vars", "allexport", "cleared")

    def __init__(self, variables: dict[str, _Var], allexport: bool = False, cleared: bool = False):
        self.vars = variables
        self.allexport = allexport
        self.cleared = cleared  # `env -i`: the container env is not inherited

    def copy(self) -> _State:
        return _State({k: _Var(list(v.values), v.exported, v.own) for k, v in self.vars.items()}, self.allexport, self.cleared)

    def child(self) -> _State:
        """What a started process inherits: the exported variables."""
        return _State({k: _Var(list(v.values), True, v.own) for k, v in self.vars.items() if v.exported}, False, self.cleared)

    def merge(self, other: _State) -> None:
        """Either this state or `other` holds afterwards (a branch that may have run)."""
        for k, v in other.vars.items():
            mine = self.vars.get(k)
            if mine is None:
                values: list[str | None] = [None]  # before the branch: as inherited
                values.extend(v.values)
                self.vars[k] = _Var(values, v.exported, v.own)
            else:
                for value in v.values:
                    if value not in mine.values:
                        mine.values.append(value)
                mine.exported = mine.exported or v.exported
                mine.own = mine.own or v.own
        self.allexport = self.allexport or other.allexport


_MAX_VALUE: Final = 4096  # longer expanded values are "not known here" (A=$A$A doubling stays small)


class _Reader:
    def __init__(self, names: frozenset[str], env: Lookup | None, budget: Budget):
        self.names = names
        self.env = env
        self.budget = budget
        self.found: list[tuple[str, str]] = []
        self._seen: set[tuple[str, str]] = set()
        self.deps: list[tuple[str, str | None]] = []  # what was looked up in the container env
        self.complete = True  # False when the budget cut the reading short

    def report(self, name: str, value: str | None) -> None:
        if value is not None and name in self.names:
            pair = (name, value)
            if pair not in self._seen:
                self._seen.add(pair)
                self.found.append(pair)

    def spend(self, steps: int) -> None:
        self.budget.steps -= steps
        if self.budget.steps < 0:
            self.complete = False
            raise _Unreadable()

    def report_state(self, state: _State) -> None:
        for name, v in state.vars.items():
            if v.exported and v.own and name in self.names:
                for value in v.values:
                    self.report(name, value)

    def fallback(self, text: str) -> None:
        for name, value in scan_text(text, self.names):
            self.report(name, value)

    # values -----------------------------------------------------------------------------------

    def inherited(self, state: _State, name: str) -> str | None:
        if state.cleared or self.env is None:
            return None
        value = self.env.get(name)
        self.deps.append((name, value))
        return value

    def value(self, state: _State, name: str) -> str | None:
        """The one known value of `name` here, else None."""
        v = state.vars.get(name)
        if v is None:
            return self.inherited(state, name)
        if len(v.values) == 1:
            return v.values[0]
        return None

    def expand(self, word: list[Any], state: _State) -> str | None:
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

    def assign(self, state: _State, name: str, value: str | None, export: bool) -> None:
        """NAME=value (export: with `export`/`declare -x`). A plain assignment is seen by later
        processes when NAME is exported already, or `set -a` is on, or NAME is in the container
        env, or NAME is one of the names asked about: the policy may add those to the env, and
        the shell then exports the new value."""
        if not name:
            return
        v = state.vars.get(name)
        exported = (export or state.allexport or name in self.names
                    or (v.exported if v is not None else self.inherited(state, name) is not None))
        state.vars[name] = _Var([value], exported)

    # processes --------------------------------------------------------------------------------

    def process(self, argv: list[str | None], state: _State, depth: int) -> None:
        """A process started with `argv` and the exported variables of `state` (already the
        child's): report what it sees from the command, then read what it runs in turn. `env`
        and a shell whose script is read report nothing themselves: the processes they start
        do, with what `env -u` or the script changed."""
        self.spend(1 + len(state.vars))
        program = argv[0] if argv else None
        if program is None or depth > _MAX_DEPTH:
            self.report_state(state)
            return
        base = program.rsplit("/", 1)[-1]
        if base == "env":
            self.env_command(argv, state, depth)
            return
        if base in SHELLS:
            if not self.shell(argv, state, depth):
                self.report_state(state)
            return
        self.report_state(state)
        if base in LAUNCHERS:
            self.launcher(argv, LAUNCHERS[base], state, depth)
        elif _PYTHON_NAME.match(base):
            self.python(argv, state)
        elif base not in _NO_PROCESS:
            # an unknown program (an entrypoint, tini, timeout, nohup, torchrun --no-python):
            # read on from the first later word that names a program we know
            for i in range(1, len(argv)):
                w = argv[i]
                if w is not None and not w.startswith("-"):
                    b = w.rsplit("/", 1)[-1]
                    if b in SHELLS or b == "env" or b in LAUNCHERS or _PYTHON_NAME.match(b):
                        self.process(argv[i:], state, depth + 1)
                        return

    def shell(self, argv: list[str | None], state: _State, depth: int) -> bool:
        """`sh -c script`: read the script (True when it was read as the shell reads it)."""
        i, n, with_c = 1, len(argv), False
        while i < n:
            w = argv[i]
            if w is None:
                return False
            if w == "--" or w == "-":
                i += 1
                break
            if w[:1] in ("-", "+") and len(w) > 1:
                if w in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                    i += 1
                elif not w.startswith("--") and "c" in w[1:]:
                    with_c = True
                i += 1
                continue
            break
        script = argv[i] if with_c and i < n else None
        if script is None:
            return False  # `bash file.sh`, stdin: a script in the image, out of reach
        return self.script(script, state, depth + 1)

    def script(self, text: str, state: _State, depth: int) -> bool:
        """Read a shell script in `state`; False when it was not read as the shell reads it
        (then the caller reports what the shell itself sees). A script that does not mention
        the names is not parsed: it changes none of them, and the shell's own view stands for
        the processes it starts."""
        if not mentions(text, self.names):
            return False
        block: Block | None = None
        if depth <= _MAX_DEPTH:
            block = _PARSED.get(text)
            if block is None and text not in _PARSED:
                if len(text) <= self.budget.parse_bytes:
                    self.budget.parse_bytes -= len(text)
                    block = parse_script(text)
                else:
                    self.complete = False
        if block is None:
            self.fallback(text)
            return False
        self.run(block, state, depth)
        return True

    def env_command(self, argv: list[str | None], state: _State, depth: int) -> None:
        i, n = 1, len(argv)
        while i < n:
            w = argv[i]
            if w is None:
                return
            if w in ("-i", "--ignore-environment", "-"):
                state = _State({}, False, True)
            elif w in ("-u", "--unset"):
                i += 1
                if i < n and argv[i] is not None:
                    state.vars[str(argv[i])] = _Var([], False)
            elif w.startswith("--unset=") or (w.startswith("-u") and len(w) > 2):
                state.vars[w.split("=", 1)[1] if w.startswith("--") else w[2:]] = _Var([], False)
            elif w in ("-C", "--chdir"):
                i += 1
            elif w in ("-S", "--split-string") or w.startswith("--split-string=") or (w.startswith("-S") and len(w) > 2):
                text = argv[i + 1] if w in ("-S", "--split-string") and i + 1 < n else (w.split("=", 1)[1] if w.startswith("--") else w[2:])
                try:
                    split: list[str | None] = list(shlex.split(text or ""))
                except ValueError:
                    return
                rest = argv[i + 2:] if w in ("-S", "--split-string") else argv[i + 1:]
                self.env_command(["env"] + split + rest, state, depth + 1)
                return
            elif w == "--":
                i += 1
                break
            elif w.startswith("-"):
                pass  # -0, -v, --debug ...
            elif "=" in w and _NAME.match(w.split("=", 1)[0]):
                name, value = w.split("=", 1)
                state.vars[name] = _Var([value], True)
            else:
                break
            i += 1
        if i < n:
            self.process(argv[i:], state, depth + 1)

    def launcher(self, argv: list[str | None], flags: dict[str, str], state: _State, depth: int) -> None:
        ranks = state.copy()
        i, n = 1, len(argv)
        while i < n:
            w = argv[i]
            if w is None:
                i += 1
                continue
            if w == ":":  # MPMD: the next argument set (its flags are read as well)
                i += 1
                continue
            action = flags.get(w)
            if action is None and "=" in w and w.startswith("--"):  # --mca=... / --host=a,b
                action = "arg0"
            if action is None:
                if w.startswith("-"):
                    i += 1
                    continue
                # the program of this argument set
                end = i
                while end < n and argv[end] != ":":
                    end += 1
                self.process(argv[i:end], ranks.copy(), depth + 1)
                i = end
                continue
            if action == "set" and i + 1 < n and "=" in (argv[i + 1] or ""):  # -genv NAME=VALUE
                self.launcher_item(argv[i + 1], state, ranks)
                i += 2
            elif action == "set" and i + 2 < n:
                name, value = argv[i + 1], argv[i + 2]
                if name is not None:
                    ranks.vars[name] = _Var([value], True)
                i += 3
            elif action == "export" and i + 1 < n:
                self.launcher_item(argv[i + 1], state, ranks)
                i += 2
            elif action == "forward" and i + 1 < n:
                names = argv[i + 1]
                for name in (names or "").split(","):
                    self.launcher_item(name.strip(), state, ranks)
                i += 2
            elif action == "mca" and i + 2 < n:
                if argv[i + 1] == _MCA_ENV_LIST:
                    for item in (argv[i + 2] or "").split(";"):
                        self.launcher_item(item.strip(), state, ranks)
                i += 3
            elif action == "arg":
                i += 2
            else:
                i += 1
        # the launcher's own flags make settings even when its program is unknown
        self.report_state(ranks)

    def launcher_item(self, item: str | None, state: _State, ranks: _State) -> None:
        """NAME=VALUE, or NAME: the launcher's own value of NAME (its container env, or what the
        script exported before it)."""
        if not item:
            return
        if "=" in item:
            name, value = item.split("=", 1)
            ranks.vars[name] = _Var([value], True)
            return
        v = state.vars.get(item)
        if v is not None:
            values = [x if x is not None else self.inherited(state, item) for x in v.values]
            ranks.vars[item] = _Var(values, True)
        else:
            ranks.vars[item] = _Var([self.inherited(state, item)], True)

    def python(self, argv: list[str | None], state: _State) -> None:
        i, n = 1, len(argv)
        while i < n:
            w = argv[i]
            if w is None or not w.startswith("-") or w in ("-", "-m") or w.startswith("-m"):
                return  # a script file, stdin or a module: out of reach
            if w in ("-W", "-X", "--check-hash-based-pycs"):
                i += 2
                continue
            if w.startswith("-W") or w.startswith("-X") or w.startswith("--"):
                i += 1
                continue
            if not w.startswith("--") and "c" in w[1:]:
                code = argv[i + 1] if w.endswith("c") and i + 1 < n else w[w.index("c") + 1:] or None
                if code is not None and mentions(code, self.names):
                    for name, value in python_settings(code, self.names):
                        self.report(name, value)
                return
            i += 1

    # the shell --------------------------------------------------------------------------------

    def run(self, block: Block, state: _State, depth: int) -> None:
        self.spend(len(block.items))
        for item in block.items:
            if isinstance(item, Cmd):
                self.command(item, state, depth)
            else:
                inner: Block = item
                if inner.kind == SEQ:
                    self.run(inner, state, depth)
                elif inner.kind == SUB:
                    self.spend(len(state.vars))
                    self.run(inner, state.copy(), depth)
                else:
                    self.spend(2 * len(state.vars))
                    branch = state.copy()
                    self.run(inner, branch, depth)
                    state.merge(branch)

    def command(self, cmd: Cmd, state: _State, depth: int) -> None:
        for sub in cmd.subs:
            self.spend(len(state.vars))
            self.run(sub, state.copy(), depth)
        if not cmd.words:
            for name, word in cmd.assigns:
                self.assign(state, name, self.expand(word, state), False)
            return
        argv: list[str | None] = [self.expand(w, state) for w in cmd.words]
        program = argv[0]
        if program in _DECLARE or program == "unset":
            self.declare(str(program), argv[1:], state)
            return
        if program == "set":
            for w in argv[1:]:
                if w is not None and w.startswith("-") and "a" in w and not w.startswith("--"):
                    state.allexport = True
                elif w is not None and w.startswith("+") and "a" in w:
                    state.allexport = False
            if "allexport" in argv and argv.index("allexport") > 0:
                state.allexport = argv[argv.index("allexport") - 1] == "-o"
            return
        if program == "eval":
            text = " ".join(w for w in argv[1:] if w is not None)
            if None in argv[1:]:
                self.fallback(text)
            elif depth < _MAX_DEPTH:
                self.script(text, state, depth + 1)
            return
        if program in ("exec", "command", "builtin", "nohup", "time") and len(argv) > 1:
            rest = argv[1:]
            while rest and rest[0] is not None and rest[0].startswith("-"):
                rest = rest[1:]
            self.command(Cmd(cmd.assigns, [[w] for w in rest], []), state, depth)
            return
        if program in _NO_PROCESS:
            return
        child = state.child()
        for name, word in cmd.assigns:  # NAME=value cmd: for this process only
            if name:
                child.vars[name] = _Var([self.expand(word, state)], True)
        self.process(argv, child, depth + 1)

    def declare(self, keyword: str, args: list[str | None], state: _State) -> None:
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
                    state.vars[w] = _Var([], False)  # unset: nothing to see, nothing inherited
                continue
            if functions:
                continue
            name, eq, value = w.partition("=")
            if not _NAME.match(name):
                continue
            if eq:
                self.assign(state, name, value, export)
                if unexport:
                    state.vars[name].exported = False
            else:
                v = state.vars.get(name)
                if v is None:
                    inherited = self.inherited(state, name)
                    v = state.vars[name] = _Var([inherited] if inherited is not None else [], inherited is not None, False)
                if export:
                    v.exported = True
                elif unexport:
                    v.exported = False


# -- python -c --------------------------------------------------------------------------------

_PY_PARSED: dict[str, list[tuple[str, str | None, bool]] | None] = {}


def python_settings(code: str, names: frozenset[str]) -> list[tuple[str, str]]:
    """What `python -c code` puts into os.environ for `names` (the process itself and everything
    it starts sees it): `os.environ[NAME] = "v"`, `.update`, `.setdefault`, `os.putenv`, the
    last one on the straight-line path; inside a branch, a loop or a function, every value. Read
    with Python's own parser (`ast`); a text it rejects gets the textual reading."""
    ops = _PY_PARSED.get(code)
    if ops is None and code not in _PY_PARSED:
        try:
            ops = _python_ops(code) if len(code) <= MAX_PARSED else None
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            ops = None
        if len(_PY_PARSED) >= _CACHE_MAX:
            _PY_PARSED.clear()
        _PY_PARSED[code] = ops
    if ops is None:
        return scan_text(code, names)
    final: dict[str, list[str | None]] = {}
    for name, value, certain in ops:
        if name not in names:
            continue
        if certain:
            final[name] = [value]
        else:
            final.setdefault(name, []).append(value)
    out: list[tuple[str, str]] = []
    for name, values in final.items():
        for value in values:
            if value is not None and (name, value) not in out:
                out.append((name, value))
    return out


def _python_ops(code: str) -> list[tuple[str, str | None, bool]]:
    """(name, value or None for a deletion or an unknown value, on the straight-line path)."""
    tree = ast.parse(code, mode="exec")
    ops: list[tuple[str, str | None, bool]] = []
    for stmt in tree.body:
        certain = isinstance(stmt, (ast.Assign, ast.Expr, ast.Delete, ast.AugAssign))
        for node in ast.walk(stmt):
            _python_op(node, ops, certain)
    return ops


def _is_environ(node: Any) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (isinstance(node, ast.Name) and node.id == "environ")


def _const(node: Any) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
        return str(node.value)
    return None


def _python_op(node: Any, ops: list[tuple[str, str | None, bool]], certain: bool) -> None:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Subscript) and _is_environ(target.value):
                name = _const(target.slice)
                if name is not None:
                    ops.append((name, _const(node.value), certain))
    elif isinstance(node, ast.Delete):
        for target in node.targets:
            if isinstance(target, ast.Subscript) and _is_environ(target.value):
                name = _const(target.slice)
                if name is not None:
                    ops.append((name, None, certain))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        attr = node.func.attr
        owner = node.func.value
        if _is_environ(owner) and attr in ("setdefault", "__setitem__") and len(node.args) >= 2:
            name = _const(node.args[0])
            if name is not None:
                ops.append((name, _const(node.args[1]), certain and attr == "__setitem__"))
        elif _is_environ(owner) and attr == "update":
            for arg in node.args:
                if isinstance(arg, ast.Dict):
                    for k, v in zip(arg.keys, arg.values):
                        name = _const(k) if k is not None else None
                        if name is not None:
                            ops.append((name, _const(v), certain))
            for kw in node.keywords:
                if kw.arg is not None:
                    ops.append((kw.arg, _const(kw.value), certain))
        elif _is_environ(owner) and attr == "pop" and node.args:
            name = _const(node.args[0])
            if name is not None:
                ops.append((name, None, certain))
        elif attr == "putenv" and len(node.args) >= 2:
            name = _const(node.args[0])
            if name is not None:
                ops.append((name, _const(node.args[1]), certain))


# -- the entry point --------------------------------------------------------------------------

def settings(command: list[str] | str, names: frozenset[str], env: Lookup | None = None,
             budget: Budget | None = None) -> list[tuple[str, str]]:
    """The values of `names` that the command makes and some process it starts will see, in the
    order first seen, each (name, value) once. `command`: argv (a container's command + args,
    `$(VAR)` already expanded) or a shell script. `env`: the container's env, for what the
    command forwards from it (`mpirun -x NAME`, `export NAME=$OTHER`). `budget`: shared by the
    calls of one decision (a fresh one per call when None). Never raises: what cannot be read
    within the budget gets the textual reading (`scan_text`)."""
    script = isinstance(command, str)
    text = command if isinstance(command, str) else "\0".join(command)
    if not mentions(text, names):
        return []
    # The pods of a job send the same command: its reading is remembered with the env values
    # it looked up, and reused while the container env gives the same values.
    key = (script, text, names)
    known = _READ.get(key)
    if known is not None:
        deps, found = known
        same = True
        for name, value in deps:
            if (env.get(name) if env is not None else None) != value:
                same = False
                break
        if same:
            return list(found)
    reader = _Reader(names, env, budget if budget is not None else Budget())
    try:
        if isinstance(command, str):
            reader.script(command, _State({}), 0)
        else:
            argv: list[str | None] = list(command)
            reader.process(argv, _State({}), 0)
    except (_Unreadable, RecursionError):
        return scan_text(text.replace("\0", " "), names)
    if reader.complete and len(text) <= MAX_PARSED:
        if len(_READ) >= _CACHE_MAX:
            _READ.clear()
        _READ[key] = (tuple(reader.deps), tuple(reader.found))
    return reader.found


_READ: dict[tuple[bool, str, frozenset[str]], tuple[tuple[tuple[str, str | None], ...], tuple[tuple[str, str], ...]]] = {}
