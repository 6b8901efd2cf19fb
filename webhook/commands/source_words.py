"""What tree-sitter-bash loses of a shell word, read from the script's bytes instead: where an
unquoted word ends (`WORD_END`), what the grammar skips inside one word as if it were white
space (`glue`: escaped blanks and newlines, \\r, \\v, \\f), and whether an assignment's value
holds a tilde bash expands (`tilde_expanded`). Byte-level scanning of the source, apart from
the conversion of the tree (`webhook.commands.shell`) that calls it where a node falls short.
"""

from __future__ import annotations

import re
from typing import Final

WORD_END: Final = frozenset(b" \t\n;&|()<>`")  # what ends an unquoted word (a blank or a metacharacter)
BLANKS: Final = frozenset(b" \t\n")
LEADING_BLANK: Final = (" ", "\t", "\n")
_ASSIGNMENT_START: Final = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*\+?=")


def tilde_expanded(src: bytes, start: int, end: int) -> bool:
    """Whether the word src[start:end] is an assignment, or an argument that looks like one
    (`env NAME=~/x`: bash expands those too), with a tilde bash expands: an unquoted `~` first in
    the value or right after an unquoted `:` (`PATH=~/bin:~/x`)."""
    m = _ASSIGNMENT_START.match(src, start, end)
    if m is None:
        return False
    i: int = m.end()
    after = True  # at the value's start or after an unquoted `:`
    while i < end:
        b = src[i]
        if b == 126 and after:  # ~
            return True
        if b == 92:  # a backslash: what it escapes is quoted; a line continuation is nothing
            if i + 1 < end and src[i + 1] == 10:
                i += 2
                continue
            i += 2
        elif b == 39:  # '...'
            close = src.find(b"'", i + 1, end)
            if close < 0:
                return True  # not closed: not known
            i = close + 1
        elif b == 36 and i + 1 < end and src[i + 1] == 39:  # $'...'
            i += 2
            while i < end and src[i] != 39:
                i += 2 if src[i] == 92 else 1
            i += 1
        elif b == 34:  # "..."
            i += 1
            while i < end and src[i] != 34:
                i += 2 if src[i] == 92 else 1
            i += 1
        else:
            i += 1
        after = b == 58  # :
    return False


def glue(src: bytes, start: int, stop: int) -> int:
    """How far from `start` (up to `stop`) the source holds only what tree-sitter skips inside
    one shell word: backslash pairs (`\\ `, `\\<tab>`, `\\<newline>`) and \\r, \\v, \\f, which
    it takes for white space and bash does not."""
    p = start
    while p < stop:
        b = src[p]
        if b == 92 and p + 1 < stop:
            p += 2
        elif b == 13 or b == 11 or b == 12:
            p += 1
        else:
            break
    return p
