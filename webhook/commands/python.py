"""`python -c` code read for the environment it sets: assignments to `os.environ[...]`, found
in Python's own syntax tree, remembered by code."""

from __future__ import annotations

import ast
from typing import Any

from webhook.commands.shell import CACHE_MAX, MAX_PARSED
from webhook.commands.text import scan_text

# -- python -c --------------------------------------------------------------------------------

# (name, value or None for a deletion or an unknown value, on the straight-line path, appended to
# the value before: `+=`), in the order the code runs
_Op = tuple[str, str | None, bool, bool]
_PY_PARSED: dict[str, list[_Op] | None] = {}


def python_settings(code: str, names: frozenset[str]) -> list[tuple[str, str]]:
    """What `python -c code` puts into os.environ for `names` (the process itself and everything
    it starts sees it): `os.environ[NAME] = "v"`, `.update`, `.setdefault`, `os.putenv`, the
    last one on the straight-line path; inside a branch, a loop or a function, every value; `+=`
    appends to each value before it (unknown when none is). Read with Python's own parser
    (`ast`); a text it rejects gets the textual reading."""
    ops = _PY_PARSED.get(code)
    if ops is None and code not in _PY_PARSED:
        try:
            ops = _python_ops(code) if len(code) <= MAX_PARSED else None
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            ops = None
        if len(_PY_PARSED) >= CACHE_MAX:
            _PY_PARSED.clear()
        _PY_PARSED[code] = ops
    if ops is None:
        return scan_text(code, names)
    final: dict[str, list[str | None]] = {}
    for name, value, certain, append in ops:
        if name not in names:
            continue
        values: list[str | None] = [value]
        if append:  # NAME += "x": what was there before, unknown unless this code set it
            values = [b + value if b is not None and value is not None else None for b in final.get(name) or [None]]
        if certain:
            final[name] = values
        else:
            final.setdefault(name, []).extend(values)
    out: list[tuple[str, str]] = []
    for name, values in final.items():
        for value in values:
            if value is not None and (name, value) not in out:
                out.append((name, value))
    return out


# Nodes whose inner code may run never, once or many times: a function or lambda body (it runs
# when called, which the reading does not follow), a comprehension's element and conditions.
_MAY_RUN = (
    ast.Lambda,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def _python_ops(code: str) -> list[_Op]:
    """What the code does to os.environ (`_Op`), in the order it runs. On the straight-line
    path: a top-level assignment, deletion or expression statement, except where it may not
    run: past the first operand of `and`/`or`,
    the branches of `x if c else y`, and inside a lambda or a comprehension (so
    `rank == 0 and os.environ.update(NCCL_IB_DISABLE='0')` adds a possible value, as an `if`
    would, instead of replacing the one every other rank keeps)."""
    tree = ast.parse(code, mode="exec")
    ops: list[_Op] = []
    for stmt in tree.body:
        stack: list[tuple[Any, bool]] = [(stmt, isinstance(stmt, (ast.Assign, ast.Expr, ast.Delete, ast.AugAssign)))]
        while stack:  # depth first, children in source order (iterative: no recursion limit)
            node, certain = stack.pop()
            _python_op(node, ops, certain)
            if isinstance(node, _MAY_RUN):
                certain = False
            children: list[tuple[Any, bool]]
            if isinstance(node, ast.BoolOp):
                children = [(v, certain and i == 0) for i, v in enumerate(node.values)]
            elif isinstance(node, ast.IfExp):
                children = [(node.test, certain), (node.body, False), (node.orelse, False)]
            else:
                children = [(child, certain) for child in ast.iter_child_nodes(node)]
            stack.extend(reversed(children))
    return ops


def _is_environ(node: Any) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _const(node: Any) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
        return str(node.value)
    return None


def _environ_name(target: Any) -> str | None:
    """NAME of an `os.environ["NAME"]` target (assigned, appended to or deleted), else None."""
    if isinstance(target, ast.Subscript) and _is_environ(target.value):
        return _const(target.slice)
    return None


def _python_op(node: Any, ops: list[_Op], certain: bool) -> None:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            name = _environ_name(target)
            if name is not None:
                ops.append((name, _const(node.value), certain, False))
    elif isinstance(node, ast.AugAssign):
        name = _environ_name(node.target)
        if name is not None:
            ops.append((name, _const(node.value) if isinstance(node.op, ast.Add) else None, certain, True))
    elif isinstance(node, ast.Delete):
        for target in node.targets:
            name = _environ_name(target)
            if name is not None:
                ops.append((name, None, certain, False))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        attr = node.func.attr
        owner = node.func.value
        if _is_environ(owner) and attr in ("setdefault", "__setitem__") and len(node.args) >= 2:
            name = _const(node.args[0])
            if name is not None:
                ops.append((name, _const(node.args[1]), certain and attr == "__setitem__", False))
        elif _is_environ(owner) and attr == "update":
            for arg in node.args:
                if isinstance(arg, ast.Dict):
                    for k, v in zip(arg.keys, arg.values):
                        name = _const(k) if k is not None else None
                        if name is not None:
                            ops.append((name, _const(v), certain, False))
            for kw in node.keywords:
                if kw.arg is not None:
                    ops.append((kw.arg, _const(kw.value), certain, False))
        elif _is_environ(owner) and attr == "pop" and node.args:
            name = _const(node.args[0])
            if name is not None:
                ops.append((name, None, certain, False))
        elif attr == "putenv" and len(node.args) >= 2:
            name = _const(node.args[0])
            if name is not None:
                ops.append((name, _const(node.args[1]), certain, False))
