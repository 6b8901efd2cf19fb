"""The build: pyproject.toml holds the metadata; this file only adds the decision core compiled
with mypyc (README, "Dependencies"). RDMA_WEBHOOK_PURE_PYTHON=1 builds without it, for a
platform without a C compiler: the same code then runs interpreted, about half as fast."""

import ast
import os
from pathlib import Path

from setuptools import setup


def compiled_modules() -> list[str]:
    init = ast.parse(Path(__file__).with_name("webhook").joinpath("__init__.py").read_text())
    names = next(ast.literal_eval(node.value) for node in init.body
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED_MODULES")
    return [f"webhook/{name}.py" for name in names]


def ext_modules():
    if os.environ.get("RDMA_WEBHOOK_PURE_PYTHON"):
        return []
    from mypyc.build import mypycify

    # Imports outside the compiled set (yaml, jsonschema, flask, ...) are typed as Any: the build
    # does not need their stubs, and their own type errors are not the build's business.
    return mypycify(["--ignore-missing-imports", "--follow-imports=silent", *compiled_modules()], opt_level="3")


setup(ext_modules=ext_modules())
