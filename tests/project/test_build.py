"""The decision core runs as built: compiled by mypyc under `make test`, interpreted under
`make test-pure`, and never from extensions older than the source they are built from (a stale
build would test yesterday's code)."""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import subprocess
from pathlib import Path

import webhook
from conftest import CLI, ROOT

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


def _path(name: str) -> Path:
    """The source file of a dotted module name under `webhook` ("core.decision")."""
    return SOURCE.joinpath(*name.split(".")).with_suffix(".py")


def _core_sources() -> set[Path]:
    """The compiled modules and every webhook module they import, transitively: what mypyc
    reads to build them (the serving modules around the core are not part of the build)."""
    todo, seen = list(webhook.COMPILED_MODULES), set()
    while todo:
        name = todo.pop()
        if name in seen or not _path(name).exists():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(_path(name).read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("webhook."):
                package = node.module.removeprefix("webhook.")
                todo.extend(
                    f"{package}.{alias.name}" if _path(f"{package}.{alias.name}").exists() else package
                    for alias in node.names
                )
            elif isinstance(node, ast.Import):
                todo.extend(a.name.removeprefix("webhook.") for a in node.names if a.name.startswith("webhook."))
    return {_path(name) for name in seen}


def test_core_sources_are_the_compiled_modules_and_what_they_import():
    names = {p.relative_to(SOURCE).with_suffix("").as_posix().replace("/", ".") for p in _core_sources()}
    assert set(webhook.COMPILED_MODULES) <= names
    # the AdmissionReview envelope reaches the workload kinds lazily (/validate of a workload)
    assert {"kinds.workloads", "kinds.verdict"} <= names
    assert not {n for n in names if n.startswith(("serving.", "cli.", "cluster.", "policy."))}, names


MANIFEST = SOURCE.parent / "build" / "mypyc-sources.json"


def test_compiled_extensions_were_built_from_this_source():
    """setup.py records the sha256 of every webhook module as mypyc read it, after a build that
    succeeded; the sources under test must be those. (Modification times proved nothing: the
    build leaves unchanged extensions alone, so `make compile` touched them all.)"""
    _import_core()
    if not webhook.compiled():
        return  # the interpreted run: nothing was built
    assert MANIFEST.exists(), f"{MANIFEST} missing: run `make compile`"
    built = json.loads(MANIFEST.read_text())
    stale = sorted(
        p.relative_to(SOURCE).as_posix()
        for p in _core_sources()
        if built.get(p.relative_to(SOURCE).as_posix()) != hashlib.sha256(p.read_bytes()).hexdigest()
    )
    assert not stale, f"the compiled core was built from other versions of {stale}: run `make compile`"


def test_subprocesses_run_the_core_under_test():
    """The CLI and `serve` are started as `conftest.CLI` (python -P -m webhook): they must import
    the same core as this process, compiled under `make test`, interpreted under `make test-pure`
    (where the checkout's extensions must not come first on the import path)."""
    code = (
        "import webhook, importlib; [importlib.import_module('webhook.' + n) for n in webhook.COMPILED_MODULES]; "
        "print(','.join(webhook.compiled()))"
    )
    out = subprocess.run([*CLI[:-2], "-c", code], capture_output=True, text=True, cwd=str(ROOT), check=True)
    _import_core()
    assert out.stdout.strip() == ",".join(webhook.compiled())
