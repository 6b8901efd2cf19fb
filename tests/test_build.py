"""The decision core runs as built: compiled by mypyc under `make test`, interpreted under
`make test-pure`, and never from extensions older than the source they are built from (a stale
build would test yesterday's code)."""

from __future__ import annotations

import ast
import importlib
import os
import sys
from pathlib import Path

import webhook

SOURCE = Path(webhook.__file__).resolve().parent


def _import_core() -> None:
    for name in webhook.COMPILED_MODULES:
        importlib.import_module(f"webhook.{name}")


def test_core_is_compiled_or_interpreted_as_expected():
    _import_core()
    compiled = webhook.compiled()
    expected = os.environ.get("RDMA_WEBHOOK_EXPECT")
    if expected == "compiled":
        assert compiled == list(webhook.COMPILED_MODULES)
    elif expected == "pure":
        assert compiled == []
    else:  # a hand-run pytest: all or nothing, never a half-built core
        assert compiled in ([], list(webhook.COMPILED_MODULES))


def _core_sources() -> set[Path]:
    """The compiled modules and every webhook module they import, transitively: what mypyc
    reads to build them (the serving modules around the core are not part of the build)."""
    todo, seen = list(webhook.COMPILED_MODULES), set()
    while todo:
        name = todo.pop()
        if name in seen or not (SOURCE / f"{name}.py").exists():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((SOURCE / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "webhook":
                todo.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("webhook."):
                todo.append(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                todo.extend(a.name.split(".")[1] for a in node.names if a.name.startswith("webhook."))
    return {SOURCE / f"{name}.py" for name in seen}


def test_core_sources_are_the_compiled_modules_and_what_they_import():
    names = {p.stem for p in _core_sources()}
    assert set(webhook.COMPILED_MODULES) <= names and "policy" in names
    assert not names & {"app", "serve", "asgi", "uvworker", "cli"}


def _built_at(shim: Path) -> float:
    """When a compiled module's code was last built. mypyc puts the code of all modules in one
    shared library (`<hash>__mypyc.*.so`, beside setup.py); each `webhook/<name>.*.so` is a shim
    that imports it, rewritten only when its own (unchanging) text does, so a rebuild after a
    source change may leave the shims' times as they were."""
    shared = [p for d in (SOURCE.parent, *map(Path, sys.path)) if d.is_dir() for p in d.glob("*__mypyc.*.so")]
    return max([shim.stat().st_mtime] + [p.stat().st_mtime for p in shared])


def test_compiled_extensions_are_newer_than_their_sources():
    _import_core()
    newest_source = max(p.stat().st_mtime for p in _core_sources())
    for name in webhook.compiled():
        built = Path(importlib.import_module(f"webhook.{name}").__file__)
        assert _built_at(built) >= newest_source, f"{built.name} is older than the source: run `make compile`"
