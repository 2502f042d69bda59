"""SGLang's own per-commit selection at a commit, by SGLang's own code: ``python _sglang_oracle.py TREE``.

Run as a script in a fresh interpreter (by `bench._sglang_suites`), never imported: it loads the
tree's ``python/sglang/test/ci/ci_register.py`` and ``test/run_suite.py`` from their files and calls
``run_a_suite`` for every suite of ``PER_COMMIT_SUITES`` whose backend ``HW_MAPPING`` names, as
``python3 run_suite.py --hw HW --suite SUITE`` would, with three stand-ins: ``run_unittest_files``
records the tests it is handed instead of running them, ``tabulate`` returns "" where it is not
installed, and the ``sglang`` packages above ``ci_register`` are empty modules (both files import
only the standard library otherwise). So the file discovery (its globs), its sanity checks and its
``filter_tests`` are SGLang's, at that commit.

Prints JSON: ``{"globbed": [paths run_suite.py collected from], "suites": {"BACKEND SUITE":
[[path, est_time], ...]}}``, paths relative to TREE.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import sys
import types
import warnings


def _load(name: str, path: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class _Args(argparse.Namespace):
    """run_suite.py's parsed arguments: the defaults its parser gives, None for the rest."""

    def __getattr__(self, name: str) -> object:
        return None


def main(tree: str) -> None:
    tree = os.path.realpath(tree)
    for package in ("sglang", "sglang.test", "sglang.test.ci"):
        sys.modules[package] = types.ModuleType(package)
    _load("sglang.test.ci.ci_register", os.path.join(tree, "python/sglang/test/ci/ci_register.py"))
    picked: list[object] = []
    utils = types.ModuleType("sglang.test.ci.ci_utils")
    utils.run_unittest_files = lambda tests, **_: picked.extend(tests) or 0  # type: ignore[attr-defined]
    sys.modules["sglang.test.ci.ci_utils"] = utils
    if importlib.util.find_spec("tabulate") is None:
        stand_in = types.ModuleType("tabulate")
        stand_in.tabulate = lambda *a, **k: ""  # type: ignore[attr-defined]
        sys.modules["tabulate"] = stand_in
    run_suite = _load("_sglang_run_suite", os.path.join(tree, "test/run_suite.py"))
    globbed: list[str] = []
    collect = run_suite.collect_tests
    collected: dict[tuple[object, ...], object] = {}

    def recording_collect(files: list[str], *args: object, **kwargs: object) -> object:
        # the same files every suite: parse them once (collect_tests only reads them), not once per suite
        key = (tuple(files), args, tuple(sorted(kwargs.items())))
        if key not in collected:
            globbed.extend(f for f in files if f not in globbed)
            collected[key] = collect(files, *args, **kwargs)
        return list(collected[key])  # type: ignore[call-overload]

    run_suite.collect_tests = recording_collect
    hw_of = {backend: hw for hw, backend in run_suite.HW_MAPPING.items()}
    out: dict[str, list[list[object]]] = {}
    for backend, suites in run_suite.PER_COMMIT_SUITES.items():
        if backend not in hw_of:
            continue
        for suite in suites:
            picked.clear()
            args = _Args(hw=hw_of[backend], suite=suite, nightly=False, timeout_per_file=1200)
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_suite.run_a_suite(args)
            out[f"{hw_of[backend]} {suite}"] = [[os.path.relpath(t.filename, tree), t.est_time] for t in picked]
    print(json.dumps({"globbed": sorted(os.path.relpath(f, tree) for f in globbed), "suites": out}))


if __name__ == "__main__":
    main(sys.argv[1])
