"""``python -m bench lint [--quick]``: `python -m ci lint` on synthetic repositories.

1. Generates (untimed) a registry of N entries and a tree of N small test files plus a
   first-party package they import from, then times each lint phase, best of R. Baselines
   measured in the same run: loading the same registry with PyYAML (pure-Python and libyaml
   loaders), and plain ``ast.parse`` of every test file.
2. A src-layout repository (issue 12): ``src/acme`` with N modules in 100 subpackages, every one
   importing two others (absolute or relative) and, in one module in ten, a name inside a
   function; ``acme/__init__`` imports a generated ``acme._version``; tests under
   ``test/registered`` named ``*_test.py``. Every module must be parsed (each imports
   first-party names), so this is the import check's worst case. Target: lint under 1 s.
"""

from __future__ import annotations

import ast
import random
import sys
import tempfile
from pathlib import Path

import yaml

from bench.table import best_of, format_table, ratio
from ci.imports.check import check_imports
from ci.lint import lint_registry, lint_repo
from ci.project import ProjectConfig
from ci.registry import _parse_precise, derived_timeout, gc_paused, iter_test_files, parse_registry

HEADER = """version: 1
run_all_paths: [registry.yaml]
tiers:
  cpu:
    description: no GPU
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
  gpu_b200:
    description: one B200
    runner_labels: [self-hosted, gpu-b200]
    gpu_count: 1
    arch: sm_100
    features: [fp8, fp4]
tests:
"""

PLAIN_TEST = "import pytest\n\n\ndef test_one():\n    assert sum([1, 2]) == 3\n"
IMPORTING_TEST = ("from fp4kv.mod{m} import helper{m}\n\n\ndef test_one():\n"
                  "    from fp4kv.mod{m} import Thing{m}\n    assert helper{m}() == Thing{m}\n")


def synthetic_path(i: int) -> str:
    return f"tests/area{i % 100}/test_synth_{i}.py"


def registry_text(n: int) -> str:
    """The synthetic registry: ``n`` entries for `synthetic_path` 0..n-1, depending on fp4kv modules."""
    lines = [HEADER]
    for i in range(n):
        gpu = i % 7 == 0
        tiers = "[cpu, gpu_b200]" if gpu else "[cpu]"
        timeout = f"    timeout: {derived_timeout(1 + i % 50)}\n" if gpu else ""  # lint's L007
        lines.append(f"  {synthetic_path(i)}:\n    tiers: {tiers}\n    est_time: {1 + i % 50}\n{timeout}"
                     f"    owner: \"@team{i % 9}\"\n    status: active\n    depends_on: [fp4kv/mod{i % 20}.py]\n")
    return "".join(lines)


def build(root: Path, n: int) -> None:
    """A repository at ``root``: registry.yaml with ``n`` entries, ``n`` test files, package fp4kv."""
    package = root / "fp4kv"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""synthetic"""\n')
    for m in range(20):
        (package / f"mod{m}.py").write_text(f"def helper{m}():\n    return Thing{m}\n\n\nclass Thing{m}:\n    pass\n")
    for i in range(n):
        file = root / synthetic_path(i)
        file.parent.mkdir(parents=True, exist_ok=True)
        # One file in ten imports first-party names (at module level and inside a function).
        file.write_text(IMPORTING_TEST.format(m=i % 20) if i % 10 == 0 else PLAIN_TEST)
    (root / "registry.yaml").write_text(registry_text(n))


SRC_PROJECT = ProjectConfig(source_roots=("src",), test_roots=("test/registered",), test_patterns=("*_test.py",),
                            generated_modules=("acme._version",))


def build_src_layout(root: Path, n: int) -> None:
    """The src-layout repository of section 2 (seeded)."""
    rng = random.Random(12)
    package = root / "src" / "acme"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""acme"""\nfrom acme._version import version\n')
    for p in range(100):
        (package / f"p{p}").mkdir()
        (package / f"p{p}" / "__init__.py").write_text("")
    for i in range(n):
        lines = ['"""a module"""', "import os"]
        for d in rng.sample(range(i), min(i, 2)):
            lines.append(f"from .m{d} import f{d}" if d % 100 == i % 100 else f"from acme.p{d % 100}.m{d} import f{d}")
        lines += ["", f"def f{i}(x: int) -> int:", "    return x + 1", "", f"class C{i}:", "    def run(self):"]
        lines += [f"        from acme.p{i % 100} import m{i}", f"        return m{i}.f{i}", ""] if i % 10 == 0 else \
                 ["        return os.sep", ""]
        (package / f"p{i % 100}" / f"m{i}.py").write_text("\n".join(lines))
    tests = root / "test" / "registered"
    tests.mkdir(parents=True)
    entries = []
    for t in range(100):
        (tests / f"unit{t}_test.py").write_text(f"from acme.p{t}.m{t} import f{t}\n\n\ndef test_f():\n"
                                                f"    assert f{t}(1) == 2\n")
        entries.append(f"  test/registered/unit{t}_test.py:\n    tiers: [cpu]\n    est_time: 1\n"
                       f"    owner: \"@team\"\n    status: active\n")
    (root / "registry.yaml").write_text(HEADER + "".join(entries))


def src_layout(n: int, repeat: int) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-lint-src-") as tmp:
        root = Path(tmp)
        build_src_layout(root, n)
        unclean = lint_repo(root, project=SRC_PROJECT)
        if unclean:
            print("bench lint: src-layout repository is not clean:", *unclean[:5], sep="\n  ", file=sys.stderr)
            return float("inf")
        sources = [p.read_bytes() for p in (root / "src").rglob("*.py")]
        with gc_paused():
            t_parse = best_of(lambda: [ast.parse(s) for s in sources], repeat)
        t_check = best_of(lambda: check_imports(root, project=SRC_PROJECT), repeat)
        t_lint = best_of(lambda: lint_repo(root, project=SRC_PROJECT), repeat)
    print(format_table(["phase", "ms", "x ast.parse"], [
        ["baseline: ast.parse of every module (GC paused)", f"{t_parse * 1e3:.1f}", "1.00"],
        ["import check", f"{t_check * 1e3:.1f}", f"{t_check / t_parse:.2f}"],
        ["lint_repo", f"{t_lint * 1e3:.1f}", f"{t_lint / t_parse:.2f}"],
    ], title=f"lint of a src-layout repository: {n} modules in src/acme, best of {repeat}"))
    return t_lint


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    n, repeat = (2_000, 3) if quick else (10_000, 5)
    with tempfile.TemporaryDirectory(prefix="bench-lint-") as tmp:
        root = Path(tmp)
        build(root, n)
        text = (root / "registry.yaml").read_text()
        registry, problems = parse_registry(text, "registry.yaml")
        if registry is None or problems:
            print("bench lint: synthetic registry does not parse:", *problems[:5], sep="\n  ", file=sys.stderr)
            return 1
        files = iter_test_files(root)
        unclean = lint_repo(root)
        if unclean:
            print("bench lint: synthetic repository is not clean:", *unclean[:5], sep="\n  ", file=sys.stderr)
            return 1
        sources = [(root / f).read_bytes() for f in files]

        timings = {
            # ~10 s at 10,000 entries: timed once.
            "baseline: yaml.safe_load (pure Python)": best_of(lambda: yaml.safe_load(text), repeat=1, warmup=0),
            "baseline: yaml.load CSafeLoader": best_of(lambda: yaml.load(text, Loader=yaml.CSafeLoader), repeat),
            "baseline: ast.parse of every test file": best_of(lambda: [ast.parse(s) for s in sources], repeat),
            "parse_registry": best_of(lambda: parse_registry(text, "registry.yaml"), repeat),
            # What a registry outside the fast path's YAML subset, or with a problem, costs.
            "parse_registry, precise path only": best_of(lambda: _parse_precise(text, "registry.yaml"), repeat),
            "walk tests/ (iter_test_files)": best_of(lambda: iter_test_files(root), repeat),
            "registry <-> tree checks": best_of(lambda: lint_registry(root, registry, files), repeat),
            "import check": best_of(lambda: check_imports(root), repeat),
            "lint_repo (all of the above)": best_of(lambda: lint_repo(root), repeat),
            "lint_repo, info=True (+ L005 from the import graph)": best_of(lambda: lint_repo(root, info=True), repeat),
        }
    base = timings["baseline: yaml.load CSafeLoader"]
    rows = [(name, f"{t * 1e3:.1f}", ratio(t / base)) for name, t in timings.items()]
    print(format_table(["phase", "ms", "x CSafeLoader load"], rows,
                       title=f"lint of {n} registry entries and {n} test files, best of {repeat}"))
    print()
    t_src = src_layout(n, repeat)
    verdict = "OK" if t_src < 1.0 else "MISSED"
    print(f"\ntarget src-layout lint of {n} modules under 1 s: {t_src:.3f} s -> {verdict}")
    return 0 if t_src < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
