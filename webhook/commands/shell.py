"""A shell script's syntax, as the reader needs it: tree-sitter-bash's tree turned once per
script into a few node kinds (`Block`, `Cmd`, `Ref`), remembered by text, its words read as
bash reads them (quote removal: `webhook.commands.quoting`). What the commands then do with the
environment is `webhook.commands.reader`'s.
"""

from __future__ import annotations

import re
from typing import Any, Final

from webhook.commands import invocation
from webhook.commands.quoting import ansi_c, ansi_c_end, brace_words, in_double_quotes, unquoted, word_at
from webhook.commands.source_words import BLANKS, LEADING_BLANK, WORD_END, glue, tilde_expanded

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
            src = text.encode("utf-8", "surrogatepass")
            root = _tree_sitter_parser().parse(src).root_node
            if not root.has_error:
                block = _Converter(src).block(root, SEQ, 0)
        except (Unreadable, RecursionError, ValueError, UnicodeError):
            block = None
    if len(PARSED) >= CACHE_MAX:
        PARSED.clear()
    PARSED[text] = block
    return block


class _Converter:
    """tree-sitter-bash's tree -> Block/Cmd. Node kinds as in the grammar's node-types.json.

    Where tree-sitter's nodes lose part of a word, the word is read from the source text
    (`src`, the script's bytes; `webhook.commands.source_words`): an escaped blank or newline
    between two of a word's tokens
    (`A=\\ a`, `'a'\\ 'b'`) is skipped by the grammar as if it were white space, a word that
    goes on with an escape after a quoted string (`A='0'\\1`) is split into two nodes, blanks
    in double quotes next to an expansion or alone (`" "`, `"$X "`) belong to no node or to the
    `$` token, and an ANSI-C string's body is one token (decoded by `ansi_c`)."""

    __slots__ = ("src",)

    def __init__(self, src: bytes):
        self.src = src

    def raw(self, start: int, end: int) -> str:
        return self.src[start:end].decode("utf-8", "replace")

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
        elif t in (
            "if_statement",
            "while_statement",
            "until_statement",
            "for_statement",
            "c_style_for_statement",
            "case_statement",
            "function_definition",
            "elif_clause",
            "else_clause",
            "case_item",
        ):
            # conditions run here; bodies may run or not (a function body is read where it is defined)
            maybe: list[Any] = []
            for i, child in enumerate(node.children):
                if not child.is_named:
                    continue
                field = node.field_name_for_child(i)
                if field in ("condition", "value", "initializer"):
                    if child.type in (
                        "word",
                        "string",
                        "raw_string",
                        "concatenation",
                        "simple_expansion",
                        "expansion",
                        "number",
                        "command_substitution",
                    ):
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
        """`cmd <<EOF ... EOF` and what follows the heredoc's start on its line. A shell or Python
        fed a heredoc runs its body as a script (read as `sh -c body`), and so does one that `cat`
        pipes it into (`cat <<EOF | bash`); any other heredoc body is data. tree-sitter-bash hangs
        the rest of the line under the heredoc: a `pipeline` node starting with `|` holds the
        pipeline's other commands (each in a subshell, as in `statement`), and after `&&`/`||` come
        commands that may run, in this shell."""
        body = node.child_by_field_name("body")
        script: str | None = None
        piped: list[Any] = []  # nodes: the commands the heredoc's command pipes into
        maybe: list[Any] = []  # after && or ||
        for child in node.named_children:
            if child.type != "heredoc_redirect":
                continue
            after_list = False  # the part after && or ||
            for part in child.children:
                t = part.type
                if t == "&&" or t == "||":
                    after_list = True
                elif t == "heredoc_body":
                    script = part.text.decode("utf-8", "replace")
                elif t == "pipeline" and not after_list:  # `| cmd ...`: the `|` is the node's own first child
                    for piece in part.named_children:
                        self._piped(piece, piped, maybe, depth + 1)
                elif part.is_named and after_list:
                    self.statement(part, maybe, depth + 1)
                    after_list = False
        fed: Cmd | None = None  # the command that reads the heredoc
        if body is not None:
            before = len(items)
            self.statement(body, items, depth + 1)
            if len(items) == before + 1 and isinstance(items[-1], Cmd):
                fed = items[-1]
        if piped and fed is not None:
            items[-1] = Block(SUB, [fed])  # a pipeline's first command runs in a subshell too
        blocks: list[Block] = []
        for part in piped:  # two levels down, as tree-sitter has them: under the heredoc's pipeline node
            sub: list[Any] = []
            self.statement(part, sub, depth + 2)
            blocks.append(Block(SUB, sub))
        if script is not None and fed is not None:
            if _program(fed) in SHELLS or PYTHON_NAME.match(_program(fed)):
                fed.words = [fed.words[0], ["-c"], [script]]
            elif blocks and _program(fed) == "cat" and len(fed.words) == 1:
                first = blocks[0].items  # each part is read once: a second reading doubled per nesting level
                if len(first) == 1 and isinstance(first[0], Cmd) and _reads_stdin(first[0]):
                    first[0].words = [first[0].words[0], ["-c"], [script]]
        items.extend(blocks)
        if maybe:
            items.append(Block(MAYBE, maybe))

    def _piped(self, node: Any, piped: list[Any], maybe: list[Any], depth: int) -> None:
        """What follows a heredoc's `|`: tree-sitter nests the rest of the line's list under it
        (`cat <<EOF | bash && X=1` is `| list(bash && X=1)`), so the list's first part belongs to
        the pipeline and its other parts follow it with && or ||. No bound of its own: every list
        has a part after its first, read by `statement` one level deeper, which has the bound."""
        if node.type == "list" and node.named_children:
            first, *rest = node.named_children
            self._piped(first, piped, maybe, depth + 1)
            for part in rest:
                self.statement(part, maybe, depth + 1)
        elif node.type == "pipeline":
            piped.extend(node.named_children)
        else:
            piped.append(node)

    def command(self, node: Any, depth: int) -> Cmd:
        t: str = node.type
        assigns: list[tuple[str, list[Any]]] = []
        words: list[list[Any]] = []
        subs: list[Block] = []
        pieces: list[Any] = []  # the nodes that make up words, in order (see `words`)
        if t in ("variable_assignment", "variable_assignments"):
            for a in [node] if t == "variable_assignment" else node.named_children:
                if a.type == "variable_assignment":
                    pieces.append(a)
            for name, parts in self.words(pieces, True, subs, depth):
                if name is not None:
                    assigns.append((name, parts))
            return Cmd(assigns, words, subs)
        if t in ("declaration_command", "unset_command"):
            keyword = node.children[0].type if node.child_count else ""
            words.append([keyword])
            for child in node.named_children:
                pieces.append(child)
            for _, parts in self.words(pieces, False, subs, depth):
                words.append(parts)
            return Cmd(assigns, words, subs)
        for i, child in enumerate(node.children):
            field = node.field_name_for_child(i)
            if child.type == "variable_assignment" or field == "name" or field == "argument":
                pieces.append(child)
                if field == "name" and self.src[child.start_byte : child.end_byte] in (b"{", b"}"):
                    # a group's brace as a command's name: tree-sitter-bash parses `! { ...; }` so,
                    # without an error; to bash it is a group that runs in this shell
                    raise Unreadable()
        for name, parts in self.words(pieces, True, subs, depth):
            if name is not None:
                assigns.append((name, parts))
            else:
                words.append(parts)
        return Cmd(assigns, words, subs)

    def words(
        self, pieces: list[Any], assigning: bool, subs: list[Block], depth: int
    ) -> list[tuple[str | None, list[Any]]]:
        """The shell words that `pieces` (a command's nodes: assignments, its name, arguments) make,
        each with its assignment's name when it is one of the command's prefix assignments
        (`assigning`; else `NAME=` stays part of the word). tree-sitter skips escaped blanks and
        newlines and the characters it takes for white space that bash does not (\\r, \\v, \\f)
        and may split one word into several nodes there (`A='0'\\1` is A=01): nodes with only
        those between them are one word, and those right after a node belong to its word. A
        word that goes on past its last node in any other way makes the script unreadable
        (tree-sitter read what follows as something else, e.g. a comment)."""
        out: list[tuple[str | None, list[Any]]] = []
        src = self.src
        size = len(src)
        n = len(pieces)
        i = 0
        while i < n:
            piece = pieces[i]
            i += 1
            name: str | None = None
            parts: list[Any]
            if assigning and piece.type == "variable_assignment":
                name, parts = self.assignment(piece, subs, depth)
            else:
                assigning = False  # NAME=value after the command's name is an argument
                parts = self.piece(piece, subs, depth)
            end: int = piece.end_byte
            while True:
                following: int = pieces[i].start_byte if i < n else size
                p = glue(src, end, following)
                if p > end:
                    parts.append(unquoted(self.raw(end, p)))
                if i < n and following == p:
                    parts.extend(self.piece(pieces[i], subs, depth))
                    end = pieces[i].end_byte
                    i += 1
                    continue
                if p < size and src[p] not in WORD_END:
                    # the word goes on where no node of ours does: tree-sitter read what follows as
                    # something else (after \f or \v, a `#` starts a comment to it and hides the
                    # commands after it), so the script is read as text
                    raise Unreadable()
                if b"~" in src[piece.start_byte : p] and tilde_expanded(src, piece.start_byte, p):
                    parts = [None]  # NAME=~/x, NAME=a:~/x, also as an argument (env NAME=~/x): bash expands the tilde
                break
            if name is None and b"{" in src[piece.start_byte : p]:
                # brace expansion, in every word but a prefix assignment: `export A={0,1}` is
                # `export A=0 A=1`. One not read here (with `$` in it, or a long sequence) makes
                # the script unreadable (the textual reading) where the word may assign (has an
                # `=`) and leaves the word as it is elsewhere (`cp ${SRC}/{a,b} /dst`)
                raw = self.raw(piece.start_byte, p)
                try:
                    braced = brace_words(raw)
                except ValueError:
                    if "=" in raw:
                        raise Unreadable() from None
                    braced = None
                if braced is not None:
                    for text in braced:
                        value, stop = word_at(text, 0)
                        if value is None or stop != len(text):
                            raise Unreadable()
                        out.append((None, [value]))
                    continue
            out.append((name, parts))
        return out

    def piece(self, node: Any, subs: list[Block], depth: int) -> list[Any]:
        t: str = node.type
        if t == "command_name":
            inner = node.named_children
            return self.word(inner[0], subs, depth) if inner else [None]
        if t == "variable_name":
            return [node.text.decode("utf-8", "replace")]
        if t == "variable_assignment":
            name, value = self.assignment(node, subs, depth)
            return [name, "="] + value
        return self.word(node, subs, depth)

    def assignment(self, node: Any, subs: list[Block], depth: int) -> tuple[str, list[Any]]:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        name = name_node.text.decode("utf-8", "replace") if name_node is not None else ""
        if "\\" in name:
            raise Unreadable()  # `\e=x`: a word to bash (a command's name, or export's e=x), not NAME=value
        if name_node is not None and name_node.type != "variable_name":
            name = ""  # arr[i]=...: not an environment variable
        if value_node is None:
            last = node.children[-1]
            if last.type != "=" and last.type != "+=":  # `A=#x...` read as A= and a comment
                raise Unreadable()
            return name, [""]
        value: list[Any] = []
        op = value_node.prev_sibling
        if op is not None:
            if op.type == "+=":
                value.append(Ref(name))  # A+=x appends to A
            start: int = op.end_byte
            if start < value_node.start_byte:  # what tree-sitter skipped: A=\\ a
                if glue(self.src, start, value_node.start_byte) != value_node.start_byte:
                    raise Unreadable()
                value.append(unquoted(self.raw(start, value_node.start_byte)))
        value.extend(self.word(value_node, subs, depth))
        return name, value

    def word(self, node: Any, subs: list[Block], depth: int) -> list[Any]:
        if depth > 4 * MAX_DEPTH:
            raise Unreadable()
        t: str = node.type
        text: str = node.text.decode("utf-8", "replace")
        if t == "word" or t == "number":
            if text[:1] in LEADING_BLANK:  # a word token that took the newline before it: not bash's commands
                raise Unreadable()
            return [unquoted(text)]
        if t == "raw_string":
            return [text[1:-1]]
        if t in ("string", "translated_string"):
            # the text between the quotes, less the expansions in it: blanks can belong to no node
            # (`" "`, `"$X "`) or to the `$` token after them (`" $X"`), and a lone `$` is a token
            src = self.src
            parts: list[Any] = []
            pos: int = node.start_byte + (1 if t == "string" else 2)
            for child in node.named_children:
                if child.type == "string_content":
                    continue
                start: int = child.start_byte
                while src[start] in BLANKS:
                    start += 1
                if start > pos:
                    parts.append(in_double_quotes(self.raw(pos, start)))
                parts.extend(self.word(child, subs, depth + 1))
                pos = child.end_byte
            end: int = node.end_byte - 1
            if end > pos:
                parts.append(in_double_quotes(self.raw(pos, end)))
            return parts or [""]
        if t == "concatenation":
            parts = []
            known = True
            pos = node.start_byte
            for child in node.children:
                start = child.start_byte
                if start > pos:  # what tree-sitter skipped between two tokens
                    if glue(self.src, pos, start) != start:
                        raise Unreadable()
                    parts.append(unquoted(self.raw(pos, start)))
                if child.is_named:
                    parts.extend(self.word(child, subs, depth + 1))
                else:
                    anon = child.text.decode("utf-8", "replace")
                    if anon.startswith("`"):
                        parts.append("")  # an empty command substitution
                    elif anon == "$" and (child.end_byte >= len(self.src) or self.src[child.end_byte] in WORD_END):
                        parts.append("$")  # a `$` that ends the word is itself
                    else:
                        known = False  # `$$` (the shell's pid), a `$` that starts what follows
                pos = child.end_byte
            return parts if known else [None]
        if t == "simple_expansion" or t == "expansion":
            inner = node.named_children
            if (
                len(inner) == 1
                and inner[0].type == "variable_name"
                and node.child_count == (2 if t == "simple_expansion" else 3)
            ):
                return [Ref(inner[0].text.decode("utf-8", "replace"))]
            return [None]
        if t == "ansi_c_string":
            body = text[2:-1]
            if "\\" not in body:
                return [body]
            if ansi_c_end(text, 2) != len(text):  # tree-sitter's token is not bash's ($'a\\' b')
                raise Unreadable()
            return [ansi_c(body)]
        if t in ("command_substitution", "process_substitution"):
            subs.append(self.block(node, SUB, depth + 1))
            return [None]
        return [None]  # arithmetic, arrays, brace expansion, globs: not known here


# -- which program a command runs, and whether it reads a heredoc fed to it as its script -----


def _program(cmd: Cmd) -> str:
    """A command's program by its base name when its name is plain text, else ""."""
    program = cmd.words[0] if cmd.words else []
    return program[0].rpartition("/")[2] if len(program) == 1 and isinstance(program[0], str) else ""


def _reads_stdin(cmd: Cmd) -> bool:
    """A shell or Python whose script is its standard input (webhook.commands.invocation):
    options only (`bash`, `sh -ex`, `bash -euo pipefail`, `python3 -u`), `-s` (the words after it
    are the script's arguments), or `-`/`--` ending the options with no script file after them;
    not with `-c`, a script file or `python -m`, nor with a word we cannot know among the options."""
    name = _program(cmd)
    shell = name in SHELLS
    if not shell and not PYTHON_NAME.match(name):
        return False
    argv: list[str | None] = [w[0] if len(w) == 1 and isinstance(w[0], str) else None for w in cmd.words]
    return invocation.source(argv, shell)[0] == invocation.STDIN
