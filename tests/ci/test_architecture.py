"""The layout says the architecture, and this test keeps it true.

Every edge of the project's own import graph (`ci.imports.graph`, the graph selection uses:
module level, function bodies, string imports, ``-m``) is checked against `LAYERS`: a file may
import files of its own layer or of layers below it, never above. A second rule bounds module
size. Both fail with the offending file and line, so the fix is obvious.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.imports.graph import Edge, ImportGraph
from ci.imports.index import ModuleIndex
from ci.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 450

# Lowest first. A path belongs to the first layer with a matching prefix (a prefix ending in "/"
# is a folder, otherwise one file). fp4kv, the system under test, sits below everything and
# imports none of the CI half; ci knows nothing of the bot; tests and benchmarks sit on top.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("fp4kv", ("fp4kv/",)),
    ("ci foundation", ("ci/__init__.py", "ci/atomic_write.py", "ci/cache_folder.py", "ci/gc_pause.py", "ci/limits.py",
                       "ci/project.py", "ci/regular_file.py", "ci/repo_root.py",
                       "ci/browser_locate.py", "ci/browser_provision.py", "ci/py312_env.py")),
    ("ci.registry", ("ci/registry/",)),
    ("ci.imports", ("ci/imports/",)),
    ("ci.selection", ("ci/selection/",)),
    ("ci.results", ("ci/results/",)),
    ("ci.history", ("ci/history/",)),
    ("ci.culprit", ("ci/culprit/",)),
    ("ci.report", ("ci/report/",)),
    ("ci.running", ("ci/running/",)),
    ("ci.observe", ("ci/observe/",)),
    ("ci.adopt", ("ci/adopt/",)),
    ("ci top", ("ci/lint.py", "ci/lint_gate.py", "ci/lint_baseline.py", "ci/lint_base.py",
                "ci/quarantine_nodes.py", "ci/pytest_plugin.py", "ci/pytest_state.py", "ci/pytest_budget.py",
                "ci/pytest_attempts.py", "ci/pytest_entry.py", "ci/pytest_ids.py", "ci/bootstrap.py")),
    ("ci.commands", ("ci/commands/",)),
    ("ci entry point", ("ci/__main__.py",)),
    ("tools", ("tools/",)),
    ("bench", ("bench/",)),
    ("tests", ("tests/", "conftest.py")),
)


def layer_of(rel: str) -> int | None:
    """Index into `LAYERS` of repo-relative ``rel``; None for a file no layer names."""
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(rel.startswith(p) if p.endswith("/") else rel == p for p in prefixes):
            return rank
    return None


def upward_edges(edges: dict[str, list[Edge]]) -> list[str]:
    """Every edge from a lower layer to a higher one, as ``file:line: imports target (layer > layer)``.

    ``package`` edges (a module runs its parent packages' ``__init__``) are not imports a module
    chose, and a package's own ``__init__`` is in the package's layer, so they never point up."""
    found = []
    for source in sorted(edges):
        low = layer_of(source)
        for edge in edges[source]:
            high = layer_of(edge.target)
            if low is not None and high is not None and high > low and edge.how != "package":
                found.append(f"{source}:{edge.line}: imports {edge.target} "
                             f"({LAYERS[low][0]} may not import {LAYERS[high][0]})")
    return found


def cycles(edges: dict[str, list[Edge]]) -> list[list[str]]:
    """Import cycles between files (strongly connected components of two or more files). Package
    edges are left out, and so are ``-m`` edges: running ``python -m bench`` in a subprocess is
    not importing it (a benchmark may start a fresh process of its own entry point). Tarjan's
    algorithm, iterative, so a deep chain cannot overflow the stack."""
    graph = {s: sorted({e.target for e in es if e.how not in ("package", "-m") and e.target != s})
             for s, es in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = graph.get(node, [])
            if i < len(targets):
                work.append((node, i + 1))
                target = targets[i]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def repository_graph() -> ImportGraph:
    registry = load_registry(ROOT / "registry.yaml")
    return ImportGraph.build(ModuleIndex(ROOT, registry.project))


def test_no_module_imports_a_layer_above_it() -> None:
    graph = repository_graph()
    assert len(graph.edges) > 100, "the graph lost the repository: this test would check nothing"
    assert upward_edges(graph.edges) == []


def test_every_first_party_file_has_a_layer() -> None:
    """A new top-level folder or ci/ module must be placed in `LAYERS`, not slip past the rule."""
    unplaced = sorted(rel for rel in repository_graph().edges if layer_of(rel) is None)
    assert unplaced == []


def test_no_import_cycles_between_files() -> None:
    assert cycles(repository_graph().edges) == []


def _tracked_python_files() -> list[Path]:
    registry = load_registry(ROOT / "registry.yaml")
    files = []
    for top in registry.project.first_party:
        base = ROOT / top
        files += [base] if base.suffix == ".py" else sorted(base.rglob("*.py"))
    return [f for f in files if "__pycache__" not in f.parts]


def test_no_module_over_the_line_limit() -> None:
    files = _tracked_python_files()
    assert len(files) > 100
    too_long = [f"{f.relative_to(ROOT)}: {n} lines" for f in files
                if (n := len(f.read_bytes().splitlines())) > MAX_MODULE_LINES]
    assert too_long == [], f"split these modules (limit {MAX_MODULE_LINES} lines)"


# -- the checks themselves must be able to fail ------------------------------------------------

def _edges(pairs: list[tuple[str, str, str]]) -> dict[str, list[Edge]]:
    edges: dict[str, list[Edge]] = {}
    for source, target, how in pairs:
        edges.setdefault(source, []).append(Edge(target, 7, how))
    return edges


@pytest.mark.parametrize(("source", "target", "upward"), [
    ("ci/registry/model.py", "ci/imports/index.py", True),      # one layer up
    ("ci/project.py", "ci/registry/__init__.py", True),         # foundation -> registry
    ("ci/selection/plan.py", "ci/commands/plan.py", True),
    ("ci/lint.py", "tools/rerun/replies.py", True),             # ci must not know the bot
    ("fp4kv/quant/e2m1.py", "ci/registry/__init__.py", True),   # the system under test imports no CI
    ("ci/imports/index.py", "ci/registry/__init__.py", False),  # down: fine
    ("ci/registry/files.py", "ci/registry/model.py", False),    # same package: fine
    ("ci/running/runner.py", "ci/running/hardware.py", False),
    ("tools/rerun/report.py", "ci/results/junit.py", False),
])
def test_upward_edges_are_found(source: str, target: str, upward: bool) -> None:
    found = upward_edges(_edges([(source, target, "from")]))
    assert bool(found) is upward
    if upward:
        assert found[0].startswith(f"{source}:7: imports {target}")


def test_package_edges_are_not_choices() -> None:
    assert upward_edges(_edges([("ci/__init__.py", "ci/registry/__init__.py", "package")])) == []


def test_cycles_are_found_and_package_edges_ignored() -> None:
    edges = _edges([("a.py", "b.py", "from"), ("b.py", "c.py", "import"), ("c.py", "a.py", "string"),
                    ("d.py", "a.py", "from"), ("p/m.py", "p/__init__.py", "package"),
                    ("p/__init__.py", "p/m.py", "from"), ("x.py", "y.py", "from"), ("y.py", "x.py", "-m")])
    assert cycles(edges) == [["a.py", "b.py", "c.py"]]


def test_cycle_search_survives_a_deep_chain() -> None:
    n = 20_000
    edges = _edges([(f"m{i}.py", f"m{i + 1}.py", "from") for i in range(n)] + [(f"m{n}.py", "m0.py", "from")])
    assert [len(c) for c in cycles(edges)] == [n + 1]


def test_layer_table_names_every_ci_package() -> None:
    """A new package under ci/ must be given a place; listing it in no layer would hide it."""
    packages = sorted(p.parent.relative_to(ROOT).as_posix() + "/" for p in (ROOT / "ci").glob("*/__init__.py"))
    named = {p for _, prefixes in LAYERS for p in prefixes}
    assert [p for p in packages if p not in named] == []
    # and every top-level module under ci/ is named file by file
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "ci").glob("*.py"))
    assert [m for m in modules if m not in named] == []
