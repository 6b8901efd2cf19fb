"""bash's quote removal on a word's text: backslashes outside and inside double quotes, the
escapes of `$'...'` (bash(1), QUOTING, ANSI-C Quoting), and the whole word after a `NAME=` as
the textual reading (`webhook.commands.text.scan_text`) takes it without a parse. The syntax
tree's reading is `webhook.commands.shell`'s.
"""

from __future__ import annotations

import re
from typing import Final


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


def unquoted(text: str) -> str:
    """An unquoted word's text without its backslashes (`\\x` is `x`, `\\<newline>` nothing)."""
    return _unescape(text, None)


def in_double_quotes(text: str) -> str:
    """Inside "...", a backslash escapes only $ ` " \\ and a newline."""
    return _unescape(text, '$`"\\\n')


# -- ANSI-C strings and words -----------------------------------------------------------------

_ANSI_SIMPLE: Final = {
    "a": 7,
    "b": 8,
    "e": 27,
    "E": 27,
    "f": 12,
    "n": 10,
    "r": 13,
    "t": 9,
    "v": 11,
    "\\": 92,
    "'": 39,
    '"': 34,
    "?": 63,
}
_HEX: Final = "0123456789abcdefABCDEF"


def ansi_c_end(text: str, i: int) -> int:
    """Where the ANSI-C string whose body starts at text[i] (after `$'`) ends: after its closing
    quote, as bash finds it (a backslash escapes the next character, a quote too); -1 when it
    is not closed."""
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "'":
            return i + 1
        i += 2 if ch == "\\" else 1
    return -1


def ansi_c(body: str) -> str | None:
    """The value of `$'body'` as bash gives it (bash(1), QUOTING, ANSI-C Quoting): \\a \\b \\e \\E \\f
    \\n \\r \\t \\v \\\\ \\' \\" \\?, \\nnn (one to three octal digits, the byte's low 8 bits), \\xHH (one
    or two hex digits), \\uHHHH and \\UHHHHHHHH (one to four, one to eight), \\cX (control-X: X's
    upper case & 0x1f, `\\c?` is DEL, `\\c\\\\` one backslash); any other escape, and \\x, \\u, \\U, \\c
    without what they take, stay as written. A NUL byte ends the string there. None when the
    value is not known here: a \\u or \\U escape above 0x7f (its bytes are the locale's) or bytes
    that are not UTF-8."""
    out = bytearray()
    i, n = 0, len(body)
    while i < n:
        ch = body[i]
        if ch != "\\" or i + 1 >= n:
            out += ch.encode("utf-8", "surrogatepass") if ch >= "\x80" else bytes((ord(ch),))
            i += 1
            continue
        c = body[i + 1]
        i += 2
        simple = _ANSI_SIMPLE.get(c)
        value = -1
        if simple is not None:
            value = simple
        elif "0" <= c <= "7":
            value = ord(c) - 48
            k = 0
            while k < 2 and i < n and "0" <= body[i] <= "7":
                value = value * 8 + ord(body[i]) - 48
                i += 1
                k += 1
            value &= 0xFF
        elif c == "x" or c == "u" or c == "U":
            most = 2 if c == "x" else 4 if c == "u" else 8
            k = 0
            while k < most and i + k < n and body[i + k] in _HEX:
                k += 1
            if k:
                value = int(body[i : i + k], 16)
                i += k
                if c != "x" and value > 0x7F:
                    return None  # the locale's encoding of that character
        elif c == "c" and i < n:
            x = body[i]
            i += 1
            if x == "\\" and i < n and body[i] == "\\":
                i += 1
            if x >= "\x80":
                return None
            value = 0x7F if x == "?" else ord(x.upper()) & 0x1F
        if value < 0:  # not an escape: the backslash stays
            out += b"\\"
            i -= 1
            continue
        if value == 0:
            break  # bash's strings end at a NUL
        out.append(value)
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        return None


def word_at(text: str, i: int) -> tuple[str | None, int]:
    """The shell word that starts at text[i] (the value of a `NAME=` there) with its quotes
    removed, and where it ends: what the textual reading (`webhook.commands.text.scan_text`)
    reads without a parse. Single and double quotes, `$'...'`, backslashes; None for a word
    with an expansion or a backquote (its end then is where that starts), or with a quote
    that is not closed (its end then is -1)."""
    out: list[str] = []
    n = len(text)
    if text.startswith("(", i):
        return None, i  # NAME=(a b): an array
    while i < n:
        ch = text[i]
        if ch in " \t\n;&|()<>":
            break
        if ch == "\\":
            if i + 1 < n:
                if text[i + 1] != "\n":
                    out.append(text[i + 1])
                i += 2
            else:
                out.append(ch)
                i += 1
        elif ch == "'":
            close = text.find("'", i + 1)
            if close < 0:
                return None, -1
            out.append(text[i + 1 : close])
            i = close + 1
        elif ch == '"' or (ch == "$" and text.startswith('$"', i)):
            start = i + (1 if ch == '"' else 2)
            j = start
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    j += 1
                elif text[j] == "$" or text[j] == "`":
                    if text[j] == "`" or (j + 1 < n and (text[j + 1] in "{(_@*#?$!-\\" or text[j + 1].isalnum())):
                        return None, j
                j += 1
            if j >= n:
                return None, -1
            out.append(in_double_quotes(text[start:j]))
            i = j + 1
        elif ch == "$" and text.startswith("$'", i):
            end = ansi_c_end(text, i + 2)
            if end < 0:
                return None, -1
            value = ansi_c(text[i + 2 : end - 1])
            if value is None:
                return None, end
            out.append(value)
            i = end
        elif (
            ch == "`"
            or ch == "~"
            or (ch == "$" and i + 1 < n and (text[i + 1] in "{(_@*#?$!-\\" or text[i + 1].isalnum()))
        ):
            return None, i  # an expansion (`$\\<newline>X` is `$X`), a tilde bash may expand
        else:
            out.append(ch)
            i += 1
    return "".join(out), i


# -- brace expansion ----------------------------------------------------------------------------


class NotReadHere(ValueError):
    """A brace expansion this module does not read (the script then gets the textual reading)."""


_OPEN, _CLOSE, _COMMA = "\ue000", "\ue001", "\ue002"  # an unquoted { } , (private-use characters)
_SEQUENCE: Final = re.compile(r"(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$|([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?$")
MAX_BRACE_WORDS: Final = 256  # more words than this from one word: not read (a script listing ranks)


def brace_words(text: str) -> list[str] | None:
    """bash's brace expansion of one word's text before quote removal (bash(1), Brace
    Expansion): `A={0,1}` as an argument of `export` or `env` is the two words `A=0 A=1`, the
    last of which wins. The words, their quotes kept; None when the word has no brace expression
    bash expands (quoted or escaped braces, `${X}`, `$(...)`, `{a}`, `{}`). ValueError when it has one
    that is not read here: with an expansion (`$`, a backquote) in the word, a letter range passing a
    backslash or backquote, or too many words."""
    if "{" not in text or "}" not in text:
        return None
    marked: list[str] = []
    expansion = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            marked.append(text[i : i + 2])
            i += 2
        elif ch == "'" or (ch == "$" and text.startswith("$'", i)):
            end = ansi_c_end(text, i + 2) if ch == "$" else text.find("'", i + 1) + 1
            end = n if end <= 0 else end
            marked.append(text[i:end])
            i = end
        elif ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            expansion = expansion or "$" in text[i:j] or "`" in text[i:j]
            marked.append(text[i : j + 1])
            i = j + 1
        elif ch == "$" and (text.startswith("${", i) or text.startswith("$(", i)):
            # a parameter expansion or a command substitution: bash expands no brace inside it here
            opening = text[i + 1]
            closing = "}" if opening == "{" else ")"
            depth, j = 0, i + 1
            while j < n:
                depth += 1 if text[j] == opening else -1 if text[j] == closing else 0
                j += 1
                if depth == 0:
                    break
            expansion = True
            marked.append(text[i:j])
            i = j
        elif ch == "`":
            end = text.find("`", i + 1) + 1
            end = n if end <= 0 else end
            expansion = True
            marked.append(text[i:end])
            i = end
        else:
            expansion = expansion or ch == "$"
            marked.append(_OPEN if ch == "{" else _CLOSE if ch == "}" else _COMMA if ch == "," else ch)
            i += 1
    words = _expand("".join(marked))
    if words is None:
        return None
    if expansion or len(words) > MAX_BRACE_WORDS:
        raise NotReadHere()
    return [w.replace(_OPEN, "{").replace(_CLOSE, "}").replace(_COMMA, ",") for w in words]


def _expand(text: str) -> list[str] | None:
    """The words of `text` (its unquoted braces and commas marked), the leftmost brace
    expression first as bash takes it; None when it has none."""
    start = text.find(_OPEN)
    while start >= 0:
        depth, j = 0, start
        commas: list[int] = []
        while j < len(text):
            c = text[j]
            if c == _OPEN:
                depth += 1
            elif c == _CLOSE:
                depth -= 1
                if depth == 0:
                    break
            elif c == _COMMA and depth == 1:
                commas.append(j)
            j += 1
        if j >= len(text):  # this brace is not closed: bash tries the next one
            start = text.find(_OPEN, start + 1)
            continue
        pre, body, post = text[:start], text[start + 1 : j], text[j + 1 :]
        if commas:
            cuts = [start, *commas, j]
            choices = [text[a + 1 : b] for a, b in zip(cuts, cuts[1:])]
        else:
            choices = _sequence(body)
        if choices is not None:
            out: list[str] = []
            for choice in choices:
                rest = pre + choice + post
                out.extend(_expand(rest) or [rest])
                if len(out) > MAX_BRACE_WORDS:
                    break
            return out
        start = text.find(_OPEN, start + 1)
    return None


def _sequence(body: str) -> list[str] | None:
    """`{1..3}`, `{03..1}`, `{a..e..2}`: the words of a sequence expression, or None."""
    m = _SEQUENCE.match(body)
    if m is None:
        return None
    if m.group(1) is not None:
        a, b = m.group(1), m.group(2)
        first, last = int(a), int(b)
        width = max(len(a), len(b)) if _zero_padded(a) or _zero_padded(b) else 0
        step = abs(int(m.group(3) or 1)) or 1
        if abs(last - first) // step >= MAX_BRACE_WORDS:
            raise NotReadHere()
        values = range(first, last + (1 if last >= first else -1), step if last >= first else -step)
        return [f"{v:0{width}d}" if width else str(v) for v in values]
    first_c, last_c = ord(m.group(4)), ord(m.group(5))
    step = abs(int(m.group(6) or 1)) or 1
    values = range(first_c, last_c + (1 if last_c >= first_c else -1), step if last_c >= first_c else -step)
    chars = [chr(v) for v in values]
    if any(
        c in "\\`" for c in chars
    ):  # `{Z..a}` passes [ \ ] ^ _ `: bash takes them literally, quote removal would not
        raise NotReadHere()
    return chars


def _zero_padded(number: str) -> bool:
    digits = number.lstrip("-")
    return len(digits) > 1 and digits[0] == "0"
