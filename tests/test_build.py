"""The decision core runs as built: compiled by mypyc under `make test`, interpreted under
`make test-pure`, and never from extensions older than the source (a stale build would test
yesterday's code)."""

from __future__ import annotations

import importlib
import os
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


def test_compiled_extensions_are_newer_than_every_source_file():
    _import_core()
    newest_source = max(p.stat().st_mtime for p in SOURCE.glob("*.py"))
    for name in webhook.compiled():
        built = Path(importlib.import_module(f"webhook.{name}").__file__)
        assert built.stat().st_mtime >= newest_source, f"{built.name} is older than the source: run `make compile`"
