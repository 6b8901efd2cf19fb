"""No two modules of `webhook/` import each other in a circle, counting every import: at the top of
a module, inside a function (lazy) and under `if TYPE_CHECKING:`.

Why lazy imports count here: tests/project/test_layers.py's cycle check reads top-level imports only (a
circle of top-level imports fails at import time), so two modules could still import each other
as long as one side did it inside a function. They are then one module in two files: neither can
be read, moved or tested without the other. webhook/cluster/ had such a pair (api.py and
admission_policies.py, one taking the other's private informer; issue 41 put the informer in its
own module). Read from the source with `ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import webhook

PACKAGE = Path(webhook.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent / dotted.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imported(tree: ast.AST) -> set[str]:
    """Every `webhook.*` module the source imports, wherever the import statement is."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("webhook."))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "webhook" or node.module.startswith("webhook."):
                # `from webhook.cluster import api` imports the module webhook.cluster.api;
                # `from webhook.cluster.api import ApiClusterState` imports webhook.cluster.api
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    out.add(sub if _is_module(sub) else node.module)
    return out


def graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (itself left out)."""
    edges = {module_name(p): imported(ast.parse(p.read_text(), str(p))) for p in sorted(PACKAGE.rglob("*.py"))}
    return {mod: {t for t in targets if t in edges and t != mod} for mod, targets in edges.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted:
    every module of a group reaches every other one through imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycles_counting_lazy_imports():
    assert cycles(graph()) == []


def test_the_cluster_modules_import_the_informer_not_each_other():
    edges = graph()
    assert "webhook.cluster.informer" in edges["webhook.cluster.api"]
    assert "webhook.cluster.informer" in edges["webhook.cluster.admission_policies"]
    assert "webhook.cluster.api" not in edges["webhook.cluster.admission_policies"]
    assert not edges["webhook.cluster.informer"] & {"webhook.cluster.api", "webhook.cluster.admission_policies"}


def test_the_check_sees_a_planted_lazy_cycle():
    """The circle webhook/cluster/ had, planted again: a function of the informer's module that
    imports the API state, which imports the informer at the top. test_layers' top-level check
    does not see it; this one must."""
    edges = graph()
    planted = (
        "def owner_of(informer):\n    from webhook.cluster.api import ApiClusterState\n    return ApiClusterState\n"
    )
    edges["webhook.cluster.informer"] = edges["webhook.cluster.informer"] | imported(ast.parse(planted))
    # api -> informer -> api, and api -> admission_policies -> informer -> api: one group of three
    assert cycles(edges) == [["webhook.cluster.admission_policies", "webhook.cluster.api", "webhook.cluster.informer"]]


def test_the_check_sees_a_cycle_through_type_checking_and_three_modules():
    edges = graph()
    planted = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from webhook.serving import server\n"
    edges["webhook.serving.app"] = edges["webhook.serving.app"] | imported(ast.parse(planted))
    # server imports app lazily (inside `prepare`), app now imports server: one group
    found = cycles(edges)
    assert len(found) == 1 and {"webhook.serving.app", "webhook.serving.server"} <= set(found[0]), found


def test_the_reader_resolves_each_form_of_import():
    source = (
        "import webhook.core.decision\n"
        "from webhook.cluster import api\n"
        "from webhook.cluster.state import FileClusterState\n"
        "def f():\n    from webhook import telemetry\n"
    )
    assert imported(ast.parse(source)) == {
        "webhook.core.decision",
        "webhook.cluster.api",
        "webhook.cluster.state",
        "webhook.telemetry",
    }
