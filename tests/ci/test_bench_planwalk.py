"""``bench planwalk``'s stand-in map (`bench._planwalk_map`): each active test of the tier ran its own
lines and the module-level lines of its import closure, never a line inside a function body;
the oracle is the line numbers read off the hand-written sources below."""

from __future__ import annotations

from pathlib import Path

from bench._planwalk_map import import_only_map, module_level_lines
from ci.registry import load_registry

MOD = (
    "import os\n"                      # 1
    "\n"                               # 2
    "LIMIT = 3\n"                      # 3
    "\n"                               # 4
    "\n"                               # 5
    "@staticmethod\n"                  # 6
    "def f(x):\n"                      # 7
    "    return x + LIMIT\n"           # 8
    "\n"                               # 9
    "\n"                               # 10
    "class C:\n"                       # 11
    "    size = 2\n"                   # 12
    "\n"                               # 13
    "    def __str__(self):\n"         # 14
    "        return 'c'\n"             # 15
)
REGISTRY = """version: 1
project:
  first_party: [pkg]
  source_roots: [src]
  test_roots: [tests]
tiers:
  cpu:
    description: x86-64 Linux, no GPU
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
tests:
  tests/test_a.py:
    tiers: [cpu]
    est_time: 1
    owner: "@t"
    status: active
  tests/test_b.py:
    tiers: [cpu]
    est_time: 1
    owner: "@t"
    status: manual
    reason: "run by hand"
  tests/test_gone.py:
    tiers: [cpu]
    est_time: 1
    owner: "@t"
    status: active
"""


def test_module_level_lines_are_the_statements_outside_function_bodies() -> None:
    # a def's own line and its decorator run at import; its body does not; a class body does
    assert module_level_lines(MOD) == frozenset({1, 3, 6, 7, 11, 12, 14})
    assert module_level_lines("def broken(:\n") == frozenset()


def test_each_active_present_test_imported_its_closure_and_ran_no_body(tmp_path: Path) -> None:
    files = {"registry.yaml": REGISTRY, "src/pkg/__init__.py": "", "src/pkg/mod.py": MOD,
             "tests/test_a.py": "from pkg.mod import f\n\n\ndef test_f():\n    assert f(1) == 4\n",
             "tests/test_b.py": "def test_b():\n    pass\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    depmap = import_only_map(tmp_path, load_registry(tmp_path / "registry.yaml"), "cpu", "a" * 40)
    assert set(depmap.tests) == {"tests/test_a.py"}  # test_b inactive, test_gone absent
    entry = depmap.tests["tests/test_a.py"]
    assert entry.lines == {"tests/test_a.py": frozenset(range(1, 6)),
                           "src/pkg/mod.py": frozenset({1, 3, 6, 7, 11, 12, 14})}
    assert entry.complete and depmap.sha == "a" * 40 and depmap.tier == "cpu"
