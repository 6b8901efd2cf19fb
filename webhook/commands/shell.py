"""A shell script's syntax, as the reader needs it: tree-sitter-bash's tree turned once per
script into a few node kinds (`Block`, `Cmd`, `Ref`), remembered by text, and the shell's
quote removal. What the commands then do with the environment is `webhook.commands.reader`'s.
"""

from __future__ import annotations

import re
from typing import Any, Final

# Programs whose `-c` argument (or heredoc) is a script of their own, read as such.
SHELLS: Final = frozenset({"sh", "bash", "dash", "ash", "ksh", "mksh", "zsh"})
PYTHON_NAME: Final = re.compile(r"python[0-9.]*$")

MAX_PARSED: Final = 32 * 1024  # bytes of one script; a longer one gets the textual reading
MAX_DEPTH: Final = 12  # nested `bash -c`/`eval`/`python -c` and syntax nesting, per command
CACHE_MAX: Final = 256  # parsed scripts remembered (per process); cleared when full


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


class Unreadable(Exception):
    """The script cannot be read faithfully (syntax error, nesting too deep)."""


_parser: Any = None


def _tree_sitter_parser() -> Any:
    global _parser
    if _parser is None:
        import tree_sitter
        import tree_sitter_bash

        _parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
    return _parser


PARSED: dict[str, Block | None] = {}


def parse_script(text: str) -> Block | None:
    """The script's commands, or None when it cannot be read faithfully. Remembered by text."""
    if text in PARSED:
        return PARSED[text]
    block: Block | None = None
    if len(text) <= MAX_PARSED:
        try:
            tree = _tree_sitter_parser().parse(text.encode("utf-8", "surrogatepass"))
            root = tree.root_node
            if not root.has_error:
                block = _Converter().block(root, SEQ, 0)
        except (Unreadable, RecursionError, ValueError, UnicodeError):
            block = None
    if len(PARSED) >= CACHE_MAX:
        PARSED.clear()
    PARSED[text] = block
    return block


class _Converter:
    """tree-sitter-bash's tree -> Block/Cmd. Node kinds as in the grammar's node-types.json."""

    def block(self, node: Any, kind: int, depth: int) -> Block:
        items: list[Any] = []
        for child in node.named_children:
            self.statement(child, items, depth + 1)
        return Block(kind, items)

    def statement(self, node: Any, items: list[Any], depth: int) -> None:
        if depth > 4 * MAX_DEPTH:
            raise Unreadable()
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
                if name in SHELLS or PYTHON_NAME.match(name):
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
        if depth > 4 * MAX_DEPTH:
            raise Unreadable()
        t: str = node.type
        text: str = node.text.decode("utf-8", "replace")
        if t == "word" or t == "number":
            return [unquoted(text)]
        if t == "raw_string":
            return [text[1:-1]]
        if t in ("string", "translated_string"):
            parts: list[Any] = []
            for child in node.named_children:
                ct = child.type
                if ct == "string_content":
                    parts.append(in_double_quotes(child.text.decode("utf-8", "replace")))
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


def unquoted(text: str) -> str:
    """An unquoted word's text without its backslashes (`\\x` is `x`, `\\<newline>` nothing)."""
    return _unescape(text, None)


def in_double_quotes(text: str) -> str:
    """Inside "...", a backslash escapes only $ ` " \\ and a newline."""
    return _unescape(text, '$`"\\\n')
