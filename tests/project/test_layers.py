"""The package's layers hold: every import inside `webhook/` (top-level or lazy, inside a
function) goes to the module's own subpackage or to a lower layer of `webhook.LAYERS`, and no
two modules import each other in a cycle. Read from the source with `ast`; nothing is imported,
so a planted upward import fails here even where no test runs it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import webhook

PACKAGE = Path(webhook.__file__).resolve().parent
RANK = {pkg: i for i, layer in enumerate(webhook.LAYERS) for pkg in layer}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.AST, name: str) -> list[tuple[int, str]]:
    """(line, dotted module) of every `webhook.*` module the source imports, at any depth."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names if a.name.startswith("webhook."))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "webhook":  # `from webhook import core`: the subpackages named
                out.extend((node.lineno, f"webhook.{a.name}") for a in node.names if a.name in RANK)
            elif node.module.startswith("webhook."):
                # `from webhook.core import decision` imports webhook.core.decision
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    is_module = (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists()
                    out.append((node.lineno, sub if is_module else node.module))
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{name}:{node.lineno}: relative import; the layer test reads absolute ones")
    return out


def graph() -> dict[str, list[tuple[int, str]]]:
    return {
        module_name(p): imports(ast.parse(p.read_text(), str(p)), module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))
    }


def violations(edges: dict[str, list[tuple[int, str]]]) -> list[str]:
    out = []
    for mod, targets in edges.items():
        parts = mod.split(".")
        if len(parts) < 3:
            continue  # webhook/__init__.py, __main__.py and the subpackages' own __init__ docstrings
        pkg = parts[1]
        for line, target in targets:
            tpkg = target.split(".")[1] if target.count(".") >= 1 else ""
            if tpkg == pkg or target == "webhook":
                continue
            if tpkg not in RANK:
                out.append(f"{mod}:{line} imports {target}, which is in no layer of webhook.LAYERS")
            elif RANK[tpkg] >= RANK[pkg]:
                where = "the same layer" if RANK[tpkg] == RANK[pkg] else "a higher layer"
                out.append(f"{mod}:{line} imports {target}, from {where} ({tpkg} over {pkg})")
    return out


def cycles(edges: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """Module-level import cycles (top-level imports only: a lazy import inside a function is
    how a module may legitimately reach a sibling that imports it)."""
    top: dict[str, set[str]] = {}
    for p in PACKAGE.rglob("*.py"):
        tree = ast.parse(p.read_text())
        name = module_name(p)
        body = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        top[name] = {t for _, t in imports(ast.Module(body=body, type_ignores=[]), name) if t in edges}
    found, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(top.get(node, ())):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(top):
        if node not in state:
            visit(node, [node])
    return found


def test_every_subpackage_is_in_a_layer():
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages == set(RANK), f"subpackages without a layer or layers without a subpackage: {packages ^ set(RANK)}"


def test_no_module_imports_upward_or_sideways():
    assert violations(graph()) == []


def test_no_import_cycles_between_modules():
    assert cycles(graph()) == []


def test_the_core_imports_nothing_from_the_adapters():
    """The brief's rule, said on its own: the decision core (and what it stands on) never reaches
    serving, cluster state, policy loading or the CLI, not even lazily."""
    adapters = (
        "webhook.serving",
        "webhook.cluster",
        "webhook.cli",
        "webhook.policy",
        "webhook.kinds",
        "webhook.admission",
    )
    low = {pkg for layer in webhook.LAYERS[: RANK["core"] + 1] for pkg in layer}
    reached = sorted(
        f"{mod} -> {t}"
        for mod, targets in graph().items()
        if mod.split(".")[1:2] and mod.split(".")[1] in low
        for _, t in targets
        if t.startswith(adapters)
    )
    assert reached == []


def test_compiled_modules_are_all_low_layers():
    """The compiled core is the pure half: nothing above the AdmissionReview envelope is compiled."""
    for name in webhook.COMPILED_MODULES:
        assert RANK[name.split(".")[0]] <= RANK["admission"], name


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from webhook.serving import app\n", "imports webhook.serving.app, from a higher layer (serving over core)"),
        (
            "def f():\n    from webhook.cli.main import main\n",
            "imports webhook.cli.main, from a higher layer (cli over core)",
        ),
        (
            "from webhook.kinds.workloads import expand\n",
            "imports webhook.kinds.workloads, from a higher layer (kinds over core)",
        ),
        ("import webhook.policy.load\n", "imports webhook.policy.load, from a higher layer (policy over core)"),
    ],
)
def test_the_check_sees_a_planted_upward_import(source, expected):
    """The checker itself, on a planted module of the core: each form of import is seen."""
    edges = graph()
    edges["webhook.core.planted"] = imports(ast.parse(source), "webhook.core.planted")
    found = violations(edges)
    assert len(found) == 1 and expected in found[0], found


def test_the_check_sees_a_sideways_import_within_a_layer():
    edges = graph()
    edges["webhook.fabrics.planted"] = imports(
        ast.parse("from webhook.commands import reader\n"), "webhook.fabrics.planted"
    )
    assert [v for v in violations(edges) if "planted" in v] == [
        "webhook.fabrics.planted:1 imports webhook.commands.reader, from the same layer (commands over fabrics)"
    ]


MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def sizes_over_the_limits(package: Path) -> list[str]:
    """Every module of `package` over MAX_MODULE_LINES lines and every function or method over
    MAX_FUNCTION_LINES, its def line to its last line inclusive (decorators not counted)."""
    out = []
    for p in sorted(package.rglob("*.py")):
        source = p.read_text()
        name = ".".join(p.relative_to(package.parent).with_suffix("").parts)
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            out.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(source, str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return out


def test_no_module_over_500_lines_and_no_function_over_80():
    """Issue 41: a module holds one concept and a function one step, small enough to read whole."""
    assert sizes_over_the_limits(PACKAGE) == []


def test_the_size_check_counts_a_function_from_def_to_last_line(tmp_path):
    (tmp_path / "pkg").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    (tmp_path / "pkg" / "fits.py").write_text(f"def fits():\n{body}\n")  # 80 lines: allowed
    (tmp_path / "pkg" / "long.py").write_text(f"def long():\n{body}\n    return x0\n" + "\n" * 420)
    assert sizes_over_the_limits(tmp_path / "pkg") == ["pkg.long: 501 lines", "pkg.long:1 long: 81 lines"]
