"""The cheap readings of a command's text: whether it mentions a variable at all (a substring
test per name prefix, which rules out almost every command before anything is parsed), and the
textual reading that `webhook.commands.reader` falls back to for a script it cannot parse.
"""

from __future__ import annotations

import re
from typing import Final

from webhook.commands import launchers
from webhook.commands.quoting import word_at

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
            p = n[: cut + 1] if cut > 0 else n
            if p not in seen:
                seen.append(p)
        found = tuple(seen)
        if len(_PREFIXES) < 64:
            _PREFIXES[names] = found
    return found


def mentions(text: str, names: frozenset[str]) -> bool:
    """Whether `text` mentions any of `names`: no setting of them can be made otherwise. A name
    may be split by quotes or backslashes (bash reads `NCCL_IB_DIS''ABLE` as the name) or spelled
    with escapes (`$'NCCL\\x5fIB_DISABLE'`, Python's `'\\x5f'`): such a text is read too."""
    for p in prefixes(names):
        if p in text:
            for n in names:
                if n in text:
                    return True
            break
    if "'" in text or '"' in text or "\\" in text:
        return _hidden(text, names)
    return False


_HIDING: Final = str.maketrans("", "", "'\"\\")  # what can split a name inside one shell word
_ESCAPES: Final = ("\\x", "\\u", "\\U", "\\N", "\\0", "\\1", "\\2", "\\3", "\\4", "\\5", "\\6", "\\7")


def _hidden(text: str, names: frozenset[str]) -> bool:
    """A name the text holds only with its quotes and backslashes removed, or any escape that can
    spell a character (the reading, which decodes them, then decides)."""
    if "\\" in text:
        for escape in _ESCAPES:
            if escape in text:
                return True
    plain = text.translate(_HIDING)
    for n in names:
        if n in plain:
            return True
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
            rests = sorted((n[len(p) :] for n in names if n.startswith(p)), key=len, reverse=True)
            alternatives.append(
                re.escape(p) + "(?<![A-Za-z0-9_]" + re.escape(p) + ")(?:" + "|".join(re.escape(r) for r in rests) + ")"
            )
        shell = "(" + "|".join(alternatives) + r")="
        python = (
            r"environ\[\s*[\"']("
            + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
            + r")[\"']\s*\]\s*=\s*(\"[^\"]*\"|'[^']*')"
        )
        found = (re.compile(shell), re.compile(shell + "|" + python))
        if len(_SCANNERS) < 64:
            _SCANNERS[names] = found
    return found


def scan_text(text: str, names: frozenset[str]) -> list[tuple[str, str]]:
    """The textual reading: every `NAME=value` that starts a word, and every
    `environ["NAME"] = "value"`, in order, whatever surrounds it (a comment, an echo). The value
    is the shell word after `=` with its quotes removed as the shell removes them
    (`webhook.commands.quoting.word_at`, `$'...'` decoded); values with an expansion (`$X`,
    `$(...)`) are skipped (not known here), and one with a quote that is not closed is read up
    to a blank as written. What `settings` falls back to for a script it
    cannot parse: it may report more than the shell would set, never less."""
    found: list[tuple[str, str]] = []
    if not mentions(text, names):
        return found
    shell, either = _scanners(names)
    scanner = either if "environ" in text else shell
    at = 0
    while True:
        m = scanner.search(text, at)
        if m is None:
            break
        at = m.end()
        first: str | None = m.group(1)
        if not first:  # environ["NAME"] = "value"
            raw: str = m.group(3)[1:-1]
            if "$" not in raw:
                found.append((m.group(2), raw))
            continue
        value, end = word_at(text, at)
        if end < 0:  # a quote not closed: the text up to a blank, as written
            cut = _UNQUOTED.match(text, at)
            rest = cut.group(0) if cut is not None else ""
            value = None if "$" in rest else rest
        else:
            at = max(at, end)
        if value is not None:
            found.append((first, value))
    return found


_UNQUOTED: Final = re.compile(r"[^\s;&|)`]*")


# -- which launchers a command runs -----------------------------------------------------------

_WORD = re.compile(r"[^\s;&|()'\"`\x00]+")
_USES: dict[str, tuple[tuple[str, ...], bool, bool, bool]] = {}
# The launcher names no other one contains (mpirun.openmpi holds mpirun): a text that holds none
# of them runs no launcher, whatever else it says (`torchrun` holds "run" but none of these).
LAUNCHER_NEEDLES: Final[tuple[str, ...]] = tuple(
    n for n in launchers.FAMILIES if not any(m != n and m in n for m in launchers.FAMILIES)
)


def mentions_launcher(text: str) -> bool:
    """Whether `text` holds a launcher's name at all: the test before any reading of it."""
    for needle in LAUNCHER_NEEDLES:
        if needle in text:
            return True
    return False


def launcher_use(text: str) -> tuple[tuple[str, ...], bool, bool, bool]:
    """The MPI launcher families a command's text runs (`launchers.FAMILIES`, by the base name
    of any word, in scripts too), whether it restricts Hydra's forwarding (`-genvnone`,
    `-genvlist`, ...), whether it gives `mca_base_env_list` on the command line, and whether an
    Open MPI export flag (`-x`) follows a launcher's name (a `set -x` before it does not count).
    Textual, so a launcher in a comment counts too: that only adds forwarding. Remembered by
    text."""
    if "mpi" not in text and "run" not in text:
        return (), False, False, False
    known = _USES.get(text)
    if known is not None:
        return known
    families: list[str] = []
    restricts = False
    env_list = False
    exports = False
    for m in _WORD.finditer(text):
        word = m.group(0)
        family = launchers.FAMILIES.get(word.rsplit("/", 1)[-1])
        if family is not None and family not in families:
            families.append(family)
        elif word in launchers.HYDRA_RESTRICTS:
            restricts = True
        elif launchers.OMPI_CMD_ENV_LIST in word:
            env_list = True
        elif families and word in launchers.OMPI_EXPORT_FLAGS:
            exports = True
    found = (tuple(families), restricts, env_list, exports)
    if len(text) <= 64 * 1024:
        if len(_USES) >= 512:
            _USES.clear()
        _USES[text] = found
    return found
