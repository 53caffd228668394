"""The package's layers import only downward, and no module imports itself round a circle.

Reads every ``import`` in ``budget/`` (function-local ones included; those under ``if
TYPE_CHECKING:`` are annotations, not imports at run time) and fails on an arrow against
:data:`LAYERS` or on a circle of modules. docs/DESIGN.md ("Layout") draws the same order.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "budget"

# Bottom to top. A module may import its own package and any package of a lower layer;
# packages side by side in one layer (compile and eager: the two front ends) may not
# import each other.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "_version"),
    ("core", "runtime"),  # core: pure data, no torch; runtime: the torch seam, measurement
    ("estimators", "solvers"),
    ("config",),
    ("planning",),  # budget semantics over a Problem: options, planner
    ("compile", "eager"),  # the two front ends
    ("models", "__init__"),  # the built-in models, the public API
    ("cli",),
]
RANK = {part: i for i, layer in enumerate(LAYERS) for part in layer}


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = ["budget", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(tree: ast.Module) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _targets(module: str, is_package: bool, node: ast.AST, modules: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        assert isinstance(node, ast.ImportFrom)
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            prefix = ".".join([*base, node.module] if node.module else base)
        else:
            prefix = node.module or ""
        names = [
            f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names
        ]
    out = []
    for name in names:
        while name and name not in modules:  # a name inside a module: the module
            name = name.rpartition(".")[0]
        if name.startswith("budget") and name != module:
            out.append(name)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_only(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip:
                graph[module] |= set(
                    _targets(module, path.name == "__init__.py", node, set(modules))
                )
    return graph


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_package_has_a_layer():
    parts = {_part(m) for m in _modules()}
    assert parts <= set(RANK), f"packages with no layer in LAYERS: {sorted(parts - set(RANK))}"


def test_imports_go_down_the_layers():
    against = []
    for module, targets in import_graph().items():
        for target in targets:
            a, b = _part(module), _part(target)
            if a != b and RANK[b] >= RANK[a]:
                against.append(f"{module} -> {target} ({a} is layer {RANK[a]}, {b} {RANK[b]})")
    assert not against, "imports against the layer order:\n" + "\n".join(sorted(against))


def test_no_import_circle():
    circles = _circles(import_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_checks_catch_a_circle_and_an_upward_arrow():
    """The checks themselves: a hand-made graph with a circle and an arrow upward."""
    graph = {
        "budget.core.a": {"budget.core.b"},
        "budget.core.b": {"budget.core.a"},
        "budget.x": set(),
    }
    assert _circles(graph) == [["budget.core.a", "budget.core.b"]]
    assert _circles({"budget.core.a": {"budget.core.b"}, "budget.core.b": set()}) == []
    assert RANK[_part("budget.cli.main")] > RANK[_part("budget.core.plan")]
