"""The tree mirrors the code (issue 41): the tests of a module are found by its name, in the folder
of its subpackage (tests/core/test_decision*.py for webhook/core/decision.py), and every module is
named on its subpackage's section of docs/architecture.md. A new module without either, or a test
file named after no module, fails here, so the layout cannot drift back into history's names."""

from __future__ import annotations

import re
from pathlib import Path

import webhook

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "webhook"
SUBPACKAGES = [pkg for layer in webhook.LAYERS for pkg in layer]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def modules(pkg: str) -> set[str]:
    return {p.stem for p in (PACKAGE / pkg).glob("*.py") if p.stem != "__init__"}


def misnamed_tests(tests: Path, subpackages: list[str], modules_of) -> list[str]:
    """Test files under tests/<subpackage>/ whose name (test_<module>[_<aspect>].py) names no
    module of that subpackage."""
    out = []
    for pkg in subpackages:
        names = modules_of(pkg)
        for path in sorted((tests / pkg).glob("test_*.py")):
            stem = path.stem[len("test_") :]
            if not any(stem == m or stem.startswith(m + "_") for m in names):
                out.append(
                    f"{path.relative_to(tests.parent)}: names no module of webhook/{pkg}/ ({', '.join(sorted(names))})"
                )
    return out


def section(text: str, pkg: str) -> str:
    match = re.search(rf"^## `webhook/{pkg}/`\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match.group(1) if match else ""


def test_every_subpackage_with_modules_has_a_test_folder():
    missing = [pkg for pkg in SUBPACKAGES if modules(pkg) and not (ROOT / "tests" / pkg).is_dir()]
    assert missing == []


def test_every_test_file_of_a_subpackage_folder_is_named_after_one_of_its_modules():
    assert misnamed_tests(ROOT / "tests", SUBPACKAGES, modules) == []


def test_the_naming_check_sees_a_file_named_after_history(tmp_path):
    (tmp_path / "tests" / "core").mkdir(parents=True)
    for name in ("test_decision.py", "test_decision_tables.py", "test_core_rest_edges.py", "test_decisions.py"):
        (tmp_path / "tests" / "core" / name).write_text("")
    found = misnamed_tests(tmp_path / "tests", ["core"], lambda pkg: {"decision", "patch"})
    assert [f.split(":")[0] for f in found] == ["tests/core/test_core_rest_edges.py", "tests/core/test_decisions.py"]


def test_every_module_is_named_on_its_subpackage_section_of_the_architecture_page():
    text = ARCHITECTURE.read_text()
    missing = [
        f"webhook/{pkg}/{module}.py"
        for pkg in SUBPACKAGES
        for module in sorted(modules(pkg))
        if not re.search(rf"(?<![\w/]){re.escape(module)}\.py\b", section(text, pkg))
    ]
    assert missing == []
