"""A container's command read the way the shell and the launchers it runs read it: which values
of a given set of environment variables each process it starts will see.

    settings(argv_or_script, names, env) -> [(name, value), ...];  read(..., files) -> Reading

`names` is the set of variables asked about (the fallback rules pass NCCL's; another transport
passes its own, e.g. FI_PROVIDER); the arguments are described at `read`.

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
values it assigns are added to the possible ones; sourced files and scripts are read only when
they come from a ConfigMap volume handed in (`Files`), those in the image are not;
a script the parser cannot read (a syntax error, deeper nesting than `MAX_DEPTH`,
more than `MAX_PARSED` bytes) falls back to `scan_text`, the textual reading, which reports
every `NAME=value` it finds. Nothing here raises on any input.

Cost: only a text that mentions one of the names (a substring test per name prefix, then per
name) is parsed at all, and a parsed script is remembered by its text: a decision pays the
parser once per distinct script. A reading is remembered too (`read`), with what it looked up
as it went (`webhook.commands.record`, the part of the walk that records). The builtins it knows
by name, and what `export`/`declare`/`unset` do, are `webhook.commands.shell_builtins`.
"""

from __future__ import annotations

import shlex
from typing import Any

from webhook.commands import invocation
from webhook.commands.files import Budget, FileSource, Lookup, Reading
from webhook.commands.launchers import LAUNCHERS, MCA_ENV_LIST
from webhook.commands.python import python_settings
from webhook.commands.record import Record
from webhook.commands.state import State, Var
from webhook.commands.shell_builtins import DECLARE, NAME, NO_PROCESS, declare
from webhook.commands.shell import (
    CACHE_MAX,
    MAX_DEPTH,
    MAX_PARSED,
    PARSED,
    PYTHON_NAME,
    SEQ,
    SHELLS,
    SUB,
    Block,
    Cmd,
    Unreadable,
    parse_script,
)
from webhook.commands.text import mentions, scan_text


# -- the reading ------------------------------------------------------------------------------


class _Reader(Record):
    """The walk of a command: the processes it starts and the shell scripts they run, in order."""

    def from_file(self, path: str | None, state: State, depth: int, python: bool = False) -> bool | None:
        """Read the script at `path` when it is a ConfigMap's file (None: it is not one): whether it
        was read as the shell reads it (False for python: the interpreter and what it starts see the
        caller's exports as well, which the caller reports). One whose ConfigMap is not at hand is
        listed as unread."""
        found = self.lookup(path) if path is not None else None
        if found is None or path is None:
            return None
        text, source = found
        if text is None or depth > MAX_DEPTH:
            if text is None and (path, source) not in self.unread:
                self.unread.append((path, source))
            if text is not None:
                self.fallback(text)
            return False
        outer, self.file = self.file, path
        try:
            first = text.split("\n", 1)[0]
            if python or (first.startswith("#!") and "python" in first):
                for name, value in python_settings(text, self.names) if mentions(text, self.names) else []:
                    self.report(name, value)
                return False
            return self.script(text, state, depth + 1)
        finally:
            self.file = outer

    # processes --------------------------------------------------------------------------------

    def process(self, argv: list[str | None], state: State, depth: int) -> None:
        """A process started with `argv` and the exported variables of `state` (already the
        child's): report what it sees from the command, then read what it runs in turn. `env`
        and a shell whose script is read report nothing themselves: the processes they start
        do, with what `env -u` or the script changed."""
        self.spend(1 + len(state.vars))
        program = argv[0] if argv else None
        if program is None or depth > MAX_DEPTH:
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
        if self.files is not None and "/" in program and base not in LAUNCHERS and not PYTHON_NAME.match(base):
            read = self.from_file(program, state, depth)
            if read is not None:
                if not read:
                    self.report_state(state)
                return
        self.report_state(state)
        if base in LAUNCHERS:
            self.launcher(argv, LAUNCHERS[base], state, depth)
        elif PYTHON_NAME.match(base):
            self.python(argv, state)
        elif base not in NO_PROCESS:
            # an unknown program (an entrypoint, tini, timeout, nohup, torchrun --no-python):
            # read on from the first later word that names a program we know
            for i in range(1, len(argv)):
                w = argv[i]
                if w is not None and not w.startswith("-"):
                    b = w.rsplit("/", 1)[-1]
                    if (
                        b in SHELLS
                        or b == "env"
                        or b in LAUNCHERS
                        or PYTHON_NAME.match(b)
                        or ("/" in w and self.lookup(w) is not None)
                    ):
                        self.process(argv[i:], state, depth + 1)
                        return

    def shell(self, argv: list[str | None], state: State, depth: int) -> bool:
        """`sh -c script`: read the script (True when it was read as the shell reads it); a
        script file when it is a ConfigMap's; the standard input or a script in the image is
        out of reach (webhook.commands.invocation says which the shell runs)."""
        kind, i, _ = invocation.source(argv, True)
        word = argv[i] if i < len(argv) else None
        if word is None:
            return False
        if kind == invocation.COMMAND:
            return self.script(word, state, depth + 1)
        return kind == invocation.FILE and self.from_file(word, state, depth) is True

    def script(self, text: str, state: State, depth: int) -> bool:
        """Read a shell script in `state`; False when it was not read as the shell reads it
        (then the caller reports what the shell itself sees). A script that does not mention
        the names is not parsed: it changes none of them, and the shell's own view stands for
        the processes it starts."""
        if not mentions(text, self.names) and not self.mentioned(text):
            return False  # it changes none of the names and runs none of the ConfigMap files
        block: Block | None = None
        if depth <= MAX_DEPTH:
            block = PARSED.get(text)
            if block is None and text not in PARSED:
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

    def env_command(self, argv: list[str | None], state: State, depth: int) -> None:
        i, n = 1, len(argv)
        while i < n:
            w = argv[i]
            if w is None:
                return
            if w in ("-i", "--ignore-environment", "-"):
                state = State({}, False, True)
            elif w in ("-u", "--unset"):
                i += 1
                if i < n and argv[i] is not None:
                    state.vars[str(argv[i])] = Var([], False)
            elif w.startswith("--unset=") or (w.startswith("-u") and len(w) > 2):
                state.vars[w.split("=", 1)[1] if w.startswith("--") else w[2:]] = Var([], False)
            elif w in ("-C", "--chdir"):
                i += 1
            elif (
                w in ("-S", "--split-string") or w.startswith("--split-string=") or (w.startswith("-S") and len(w) > 2)
            ):
                text = (
                    argv[i + 1]
                    if w in ("-S", "--split-string") and i + 1 < n
                    else (w.split("=", 1)[1] if w.startswith("--") else w[2:])
                )
                try:
                    split: list[str | None] = list(shlex.split(text or ""))
                except ValueError:
                    return
                rest = argv[i + 2 :] if w in ("-S", "--split-string") else argv[i + 1 :]
                self.env_command(["env"] + split + rest, state, depth + 1)
                return
            elif w == "--":
                i += 1
                break
            elif w.startswith("-"):
                pass  # -0, -v, --debug ...
            elif "=" in w and NAME.match(w.split("=", 1)[0]):
                name, value = w.split("=", 1)
                state.vars[name] = Var([value], True, True, self.file)
            else:
                break
            i += 1
        if i < n:
            self.process(argv[i:], state, depth + 1)

    def launcher(self, argv: list[str | None], flags: dict[str, str], state: State, depth: int) -> None:
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
                    ranks.vars[name] = Var([value], True, True, self.file)
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
                if argv[i + 1] == MCA_ENV_LIST:
                    for item in (argv[i + 2] or "").split(";"):
                        self.launcher_item(item.strip(), state, ranks)
                i += 3
            elif action == "arg":
                i += 2
            else:
                i += 1
        # the launcher's own flags make settings even when its program is unknown
        self.report_state(ranks)

    def launcher_item(self, item: str | None, state: State, ranks: State) -> None:
        """NAME=VALUE, or NAME: the launcher's own value of NAME (its container env, or what the
        script exported before it)."""
        if not item:
            return
        if "=" in item:
            name, value = item.split("=", 1)
            ranks.vars[name] = Var([value], True, True, self.file)
            return
        v = state.vars.get(item)
        if v is not None:
            values = [x if x is not None else self.inherited(state, item) for x in v.values]
            ranks.vars[item] = Var(values, True)
        else:
            ranks.vars[item] = Var([self.inherited(state, item)], True)

    def python(self, argv: list[str | None], state: State) -> None:
        """`python -c code`: report what the code sets; a script file when it is a ConfigMap's;
        the standard input, a module or a script in the image is out of reach."""
        kind, i, start = invocation.source(argv, False)
        word = argv[i] if i < len(argv) else None
        if word is None:
            return
        if kind == invocation.FILE:
            self.from_file(word, state, 1, python=True)
        elif kind == invocation.COMMAND:
            code = word[start:]
            if mentions(code, self.names):
                for name, value in python_settings(code, self.names):
                    self.report(name, value)

    # the shell --------------------------------------------------------------------------------

    def run(self, block: Block, state: State, depth: int) -> None:
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

    def command(self, cmd: Cmd, state: State, depth: int) -> None:
        for sub in cmd.subs:
            self.spend(len(state.vars))
            self.run(sub, state.copy(), depth)
        if not cmd.words:
            for name, word in cmd.assigns:
                self.assign(state, name, self.expand(word, state), False)
            return
        argv: list[str | None] = [self.expand(w, state) for w in cmd.words]
        program = argv[0]
        if program in DECLARE or program == "unset":
            declare(self, str(program), argv[1:], state)
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
            elif depth < MAX_DEPTH:
                self.script(text, state, depth + 1)
            return
        if program in ("exec", "command", "builtin", "nohup", "time") and len(argv) > 1:
            rest = argv[1:]
            while rest and rest[0] is not None and rest[0].startswith("-"):
                rest = rest[1:]
            self.command(Cmd(cmd.assigns, [[w] for w in rest], []), state, depth)
            return
        if program in ("source", ".") and len(argv) > 1:
            self.from_file(argv[1], state, depth + 1)  # read in this shell: its assignments stay
            return
        if program in NO_PROCESS:
            return
        child = state.child()
        for name, word in cmd.assigns:  # NAME=value cmd: for this process only
            if name:
                child.vars[name] = Var([self.expand(word, state)], True, True, self.file)
        self.process(argv, child, depth + 1)


# -- the entry point --------------------------------------------------------------------------


def settings(
    command: list[str] | str, names: frozenset[str], env: Lookup | None = None, budget: Budget | None = None
) -> list[tuple[str, str]]:
    """The values of `names` that the command makes and some process it starts will see, in the
    order first seen, each (name, value) once: `read(...).found`."""
    return read(command, names, env, budget).found


def read(
    command: list[str] | str,
    names: frozenset[str],
    env: Lookup | None = None,
    budget: Budget | None = None,
    files: FileSource | None = None,
) -> Reading:
    """What the command makes that processes it starts will see (`Reading`). `command`: argv (a
    container's command + args, `$(VAR)` already expanded) or a shell script. `env`: the
    container's env, for what the command forwards from it (`mpirun -x NAME`, `export
    NAME=$OTHER`). `budget`: shared by the calls of one decision (a fresh one when None).
    `files`: the ConfigMap script files the container sees (`bash FILE`, `source FILE`, `FILE`,
    `python FILE` are read as the same reading). Never raises: what cannot be read within the
    budget gets the textual reading (`scan_text`)."""
    script = isinstance(command, str)
    text = command if isinstance(command, str) else "\0".join(command)
    if not mentions(text, names) and not (files is not None and files.mentioned(text)):
        return Reading([], {}, [])
    # The pods of a job send the same command: its reading is remembered with the env values
    # and the files it looked up, and reused while the container gives the same answers (a
    # reading that looked no file up never asks for the files).
    key = (script, text, names, files is not None)
    known = _READ.get(key)
    if known is not None:
        deps, file_deps, was = known
        same = True
        for name, value in deps:  # a plain loop: compiled, no generator object per decision
            if (env.get(name) if env is not None else None) != value:
                same = False
                break
        if same and files is not None:
            for is_lookup, arg, answer in file_deps:
                if (files.lookup(arg) if is_lookup else files.mentioned(arg)) != answer:
                    same = False
                    break
        if same:
            return Reading(list(was.found), dict(was.origins), list(was.unread))
    reader = _Reader(names, env, budget if budget is not None else Budget(), files)
    try:
        if isinstance(command, str):
            reader.script(command, State({}), 0)
        else:
            argv: list[str | None] = list(command)
            reader.process(argv, State({}), 0)
    except (Unreadable, RecursionError):
        return Reading(scan_text(text.replace("\0", " "), names), {}, list(reader.unread))
    if reader.complete and len(text) <= MAX_PARSED:
        if len(_READ) >= CACHE_MAX:
            _READ.clear()
        _READ[key] = (
            tuple(reader.deps),
            tuple(reader.file_deps),
            Reading(list(reader.found), dict(reader.origins), list(reader.unread)),
        )
    return Reading(reader.found, reader.origins, reader.unread)


_READ: dict[
    tuple[bool, str, frozenset[str], bool],
    tuple[tuple[tuple[str, str | None], ...], tuple[tuple[bool, str, Any], ...], Reading],
] = {}
