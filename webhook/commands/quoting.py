"""bash's quote removal on a word's text: backslashes outside and inside double quotes, the
escapes of `$'...'` (bash(1), QUOTING, ANSI-C Quoting), and the whole word after a `NAME=` as
the textual reading (`webhook.commands.text.scan_text`) takes it without a parse. The syntax
tree's reading is `webhook.commands.shell`'s.
"""

from __future__ import annotations

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

_ANSI_SIMPLE: Final = {"a": 7, "b": 8, "e": 27, "E": 27, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11,
                       "\\": 92, "'": 39, '"': 34, "?": 63}
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
                value = int(body[i:i + k], 16)
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
            out.append(text[i + 1:close])
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
            value = ansi_c(text[i + 2:end - 1])
            if value is None:
                return None, end
            out.append(value)
            i = end
        elif ch == "`" or ch == "~" or (ch == "$" and i + 1 < n and (text[i + 1] in "{(_@*#?$!-\\" or text[i + 1].isalnum())):
            return None, i  # an expansion (`$\\<newline>X` is `$X`), a tilde bash may expand
        else:
            out.append(ch)
            i += 1
    return "".join(out), i
