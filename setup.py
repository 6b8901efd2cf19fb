"""The build: pyproject.toml holds the metadata; this file only adds the decision core compiled
with mypyc (README, "Dependencies"). RDMA_WEBHOOK_PURE_PYTHON=1 builds without it, for a
platform without a C compiler: the same code then runs interpreted, about half as fast."""

import ast
import hashlib
import json
import os
from pathlib import Path

from setuptools import setup


def compiled_modules() -> list[str]:
    init = ast.parse(Path(__file__).with_name("webhook").joinpath("__init__.py").read_text())
    names = next(
        ast.literal_eval(node.value)
        for node in init.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED_MODULES"
    )
    return [f"webhook/{name.replace('.', '/')}.py" for name in names]


# The core is one shared library whose functions call each other. Built as any -fPIC library is,
# each of those calls goes through the PLT (another library could interpose the symbol) and none
# can be inlined. Hidden visibility and no interposition make them direct calls; CPython builds
# libpython with the latter. Measured in benchmarks/README.md, "Build flags".
COMPILE_FLAGS = ["-fvisibility=hidden", "-fno-semantic-interposition"]


def ext_modules():
    if os.environ.get("RDMA_WEBHOOK_PURE_PYTHON"):
        return []
    from mypyc.build import mypycify

    # Imports outside the compiled set (yaml, jsonschema, flask, ...) are typed as Any: the build
    # does not need their stubs, and their own type errors are not the build's business.
    extensions = mypycify(["--ignore-missing-imports", "--follow-imports=silent", *compiled_modules()], opt_level="3")
    for ext in extensions:
        ext.extra_compile_args = [*(ext.extra_compile_args or []), *COMPILE_FLAGS]
    return extensions


# What the compiled extensions were built from: the sha256 of every webhook module present when
# mypyc read them (it reads the core and what it imports). Written only after a build that
# succeeded; tests/project/test_build.py compares it with the source under test, so a build that left
# old extensions in place (or a source edited since) fails the suite instead of testing old code.
MANIFEST = Path(__file__).with_name("build") / "mypyc-sources.json"


def source_hashes() -> dict[str, str]:
    root = Path(__file__).with_name("webhook")
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.py"))
    }


read = source_hashes()  # before mypyc reads them
modules = ext_modules()
setup(ext_modules=modules)
if modules:
    MANIFEST.parent.mkdir(exist_ok=True)
    MANIFEST.write_text(json.dumps(read, indent=1) + "\n")
