"""Where a shell or Python takes the program it runs from, given its argument list: a command
string (`bash -c '...'`, `python -c '...'`), a file (`bash run.sh`, `python train.py`), its
standard input (`bash`, `bash -s a b`, `python -`) or a module (`python -m torch.distributed.run`).

Why one module: the shell parser (webhook.commands.shell: does a heredoc or a pipe feed a shell
its script?) and the reader (webhook.commands.reader: which script does a shell or Python run?)
need the same answer, and two option parsers had drifted apart: the reader took
`bash -euo pipefail -c '...'` (the usual strict-mode idiom of Dockerfile SHELL lines and CI
steps) for a script file named `pipefail`, so a fallback setting in its script went unseen.

The grammar, as bash(1) (OPTIONS, INVOCATION), dash(1) and python(1) (COMMAND LINE) give it and
as the tests check it against real bash, dash and python:
- single-letter options come alone or clustered (`-eux`, `-uc`); a shell's `+` clusters unset;
- a shell's `o` and `O` (`-o pipefail`, `+O extglob`) each take the next word, in the order of
  the cluster (`-euo pipefail`, `-oO pipefail extglob`); `--rcfile` and `--init-file` take the
  next word; other long options take none;
- a shell's `c` makes the first word after all the options the command string (options may
  follow it: `bash -c -x 'cmd'`); `s` makes the standard input the script; `c` wins over `s`
  (dash given both runs the command string, then its standard input: the command string is
  what is named here);
- Python's `c` and `m` take the rest of their cluster or, ending it, the next word, and end the
  options; `W` and `X` take an argument the same way; `--check-hash-based-pycs` takes the next;
- `--` ends the options; so does `-` (for Python: the script is the standard input); the first
  other word is the script file; with none, the standard input (also when a shell's `-o` lacks
  its argument: bash and dash then list their options and read on).
"""

from __future__ import annotations

from typing import Final

COMMAND: Final = "command"  # a command string
FILE: Final = "file"  # a script file
STDIN: Final = "stdin"  # the standard input
MODULE: Final = "module"  # Python's -m
UNKNOWN: Final = "unknown"  # a word we cannot know where an option may stand, or a missing argument

_SHELL_LONG_WITH_ARGUMENT: Final = ("--rcfile", "--init-file")


def source(argv: list[str | None], shell: bool) -> tuple[str, int, int]:
    """(kind, index, start) for `argv` (argv[0] the program; None a word we cannot know): the
    program text of COMMAND and MODULE is argv[index][start:], the path of FILE is argv[index]
    (either may be None: unknown); STDIN and UNKNOWN have no word."""
    i, n = 1, len(argv)
    with_c = from_stdin = False
    while i < n:
        w = argv[i]
        if w is None:
            return UNKNOWN, i, 0
        if w == "--" or w == "-":
            if w == "-" and not shell:
                return STDIN, i, 0
            i += 1
            break
        if len(w) < 2 or not (w[0] == "-" or (shell and w[0] == "+")):
            break  # the first operand
        i += 1
        if w[1] == "-":  # a long option
            if (w in _SHELL_LONG_WITH_ARGUMENT) if shell else (w == "--check-hash-based-pycs"):
                i += 1
            continue
        taken = 0  # the words this cluster's letters take as their arguments
        for k in range(1, len(w)):
            letter = w[k]
            if shell:
                if letter == "c":
                    with_c = True
                elif letter == "s":
                    from_stdin = from_stdin or w[0] == "-"
                elif letter == "o" or letter == "O":
                    taken += 1
            elif letter in "cmWX":
                if k + 1 < len(w):  # the rest of the cluster is the argument
                    if letter in "cm":
                        return (COMMAND if letter == "c" else MODULE), i - 1, k + 1
                    break
                if letter in "WX":
                    taken += 1
                    break
                if i >= n:
                    return UNKNOWN, i, 0  # `python -c` with nothing after it: an error
                return (COMMAND if letter == "c" else MODULE), i, 0
        i += taken
    if i > n:  # an option's argument is missing: a shell lists its options and goes on
        if not shell:
            return UNKNOWN, n, 0
        i = n
    if shell and with_c:
        return (COMMAND, i, 0) if i < n else (UNKNOWN, i, 0)
    if (shell and from_stdin) or i == n:
        return STDIN, i, 0
    return FILE, i, 0
