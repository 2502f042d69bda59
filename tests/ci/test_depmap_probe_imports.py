"""The recorder's own import hook (`ci.observe.probe_imports`) and slipcover's engine
imported without its package (`ci.observe.slipcover_engine`): what a recorded subprocess
pays at start-up, and that nothing is lost for it. Fresh interpreters where ``sys.modules``
matters; real slipcover probes, real loaders."""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from ci.observe import blocks, probe_imports, slipcover_core, slipcover_engine
from ci.observe.probe_imports import ProbedLoader, ProbeImports
from tests.ci.depmap_support import clean_env

pytestmark = pytest.mark.skipif(not slipcover_core.available(), reason="slipcover is not installed")
REPO = Path(__file__).resolve().parents[2]
# what slipcover's package imports and the recorder does not need in a subprocess
HEAVY = ("slipcover.importer", "slipcover.xmlreport", "slipcover.lcovreport", "slipcover.fuzz", "importlib.abc",
         "xml.dom.minidom", "dataclasses", "inspect")


def _python(code: str, cwd: Path | None = None, argv: list[str] | None = None) -> str:
    base = clean_env()
    if cwd:
        base["PYTHONPATH"] = f"{cwd}{os.pathsep}{REPO}"
    proc = subprocess.run([sys.executable, "-c", code, *(argv or [])], env=base, cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_recorded_subprocess_starts_without_slipcovers_reports_hook_or_dataclasses(tmp_path: Path) -> None:
    from ci.observe.startup import install

    assert install() is not None
    root, parts = tmp_path / "repo", tmp_path / "parts"
    (root / "pkg").mkdir(parents=True)
    parts.mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "work.py").write_text("def work():\n    return 7\n")
    code = ("import json, sys\nfrom pkg.work import work\nwork()\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    env = {"CI_DEPMAP_CHILD_CORE": "slipcover", "CI_DEPMAP_PARTS": str(parts), "CI_DEPMAP_ROOT": str(root),
           "CI_DEPMAP_TEST": "tests/test_x.py", "PYTHONPATH": f"{root}{os.pathsep}{REPO}"}
    base = clean_env()
    proc = subprocess.run([sys.executable, "-c", code], env={**base, **env}, cwd=root, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    seen = [json.loads(line) for part in parts.glob("clines.*.jsonl") for line in part.read_text().splitlines()]
    lines = {os.path.basename(p): set(ls) for record in seen for p, ls in record["tests/test_x.py"].items()}
    assert lines.get("work.py") == {1, 2}  # the module imported through the recorder's hook got probes


def test_a_program_importing_slipcover_after_the_engine_gets_the_whole_package_and_its_reports(
        tmp_path: Path) -> None:
    (tmp_path / "measured.py").write_text("def f(x):\n    if x:\n        return 1\n    return 2\n")
    out = _python(
        "import io, json, sys\n"
        "from ci.observe import slipcover_engine as e\n"
        "core = e.engine()\n"
        "probed = [hasattr(sys.modules['slipcover'], n) for n in ('__wrapped__', '__all__')]\n"
        "lazy = [m for m in ('slipcover.importer', 'slipcover.xmlreport', 'slipcover.fuzz') if m in sys.modules]\n"
        "import slipcover\n"
        "from slipcover import Slipcover, wrap_function, ImportManager\n"
        "sci = Slipcover()\n"
        "import measured\n"
        "sci.instrument(measured.f)\n"
        "measured.f(1)\n"
        "cov = sci.get_coverage()\n"
        "xml, lcov = io.StringIO(), io.StringIO()\n"
        "slipcover.print_xml(cov, [sys.argv[1]], outfile=xml)\n"
        "slipcover.print_lcov(cov, outfile=lcov)\n"
        "print(json.dumps([probed + lazy, Slipcover is core.Slipcover, slipcover.__version__ == e.version(),\n"
        "                  callable(wrap_function), callable(ImportManager), xml.getvalue(), lcov.getvalue()]))",
        cwd=tmp_path, argv=[str(tmp_path)])
    lazy, same_class, same_version, fuzz, hook, xml, lcov = json.loads(out)
    assert (lazy, same_class, same_version, fuzz, hook) == ([False, False], True, True, True, True)
    hits = {int(line.get("number")): int(line.get("hits")) for line in ElementTree.fromstring(xml).iter("line")}
    assert hits == {2: 1, 3: 1, 4: 0}  # the real XML reporter, through the engine's stand-in
    assert "DA:3,1" in lcov and "DA:4,0" in lcov


def test_the_engine_uses_a_package_imported_before_it() -> None:
    out = _python("import json, slipcover, slipcover.slipcover as s\n"
                  "from ci.observe import slipcover_engine as e\n"
                  "print(json.dumps([e.engine() is s, e.version() == slipcover.__version__]))")
    assert json.loads(out) == [True, True]


def test_a_missing_slipcover_is_an_import_error_and_the_core_unavailable(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nclass Hide:\n    def find_spec(self, name, path, target=None):\n"
        "        if name == 'slipcover' or name.startswith('slipcover.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n")
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    base = clean_env()
    proc = subprocess.run([sys.executable, "-c", "from ci.observe import slipcover_core as d\n"
                                                 "print(d.unavailable_reason())"],
                          env={**base, **env}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("slipcover is not installed: No module named 'slipcover")


def test_slipcover_missing_from_the_path_is_an_import_error_and_the_core_unavailable() -> None:
    # not installed at all: no finder knows the name (above, a finder refuses it)
    out = _python("import json, os, sys\n"
                  "sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p, 'slipcover'))]\n"
                  "from ci.observe import slipcover_core as d, slipcover_engine as e\n"
                  "names = []\n"
                  "for call in (e.engine, e.version):\n"
                  "    try:\n"
                  "        call()\n"
                  "    except ImportError as exc:\n"
                  "        names.append(exc.name)\n"
                  "print(json.dumps([names, d.unavailable_reason()]))")
    assert json.loads(out) == [["slipcover", "slipcover"], "slipcover is not installed: No module named 'slipcover'"]


def test_the_first_attribute_the_bare_package_lacks_runs_its_init_and_a_broken_submodule_raises(
        tmp_path: Path) -> None:
    # a package of slipcover's name whose __init__ defines a private name, with a submodule whose
    # own import fails: asking for it is that module's error, not the package's completion
    package = tmp_path / "slipcover"
    package.mkdir()
    (package / "__init__.py").write_text("from .version import __version__\n_ready = 'init ran'\n")
    (package / "version.py").write_text("__version__ = '1.1.0'\n")
    (package / "broken.py").write_text("import no_such_dependency_of_slipcover\n")
    out = _python("import json\n"
                  "from ci.observe import slipcover_engine as e\n"
                  "version = e.version()\n"
                  "import slipcover\n"
                  "try:\n"
                  "    slipcover.broken\n"
                  "    missing = None\n"
                  "except ModuleNotFoundError as exc:\n"
                  "    missing = exc.name\n"
                  "print(json.dumps([version, missing, slipcover._ready, '__getattr__' in vars(slipcover)]))",
                  cwd=tmp_path)
    assert json.loads(out) == ["1.1.0", "no_such_dependency_of_slipcover", "init ran", False]


def test_a_file_loaded_by_path_gets_probes_and_keeps_its_loaders_resources(tmp_path: Path) -> None:
    # slipcover's own engine, not a second `SlipcoverLines.start`: this test may run inside a
    # recording, whose measurement already wrapped pytest's rewriting (once per process)
    sci = slipcover_engine.engine().Slipcover()
    (tmp_path / "plugin_by_path.py").write_text("X = 1\n\n\ndef hook():\n    return X + 1\n")
    hook = ProbeImports(sci.instrument, lambda origin: origin.startswith(str(tmp_path)))
    hook.wrap_spec_from_file_location()
    try:
        spec = importlib.util.spec_from_file_location("plugin_by_path", tmp_path / "plugin_by_path.py")
    finally:
        hook.leave()
    assert isinstance(spec.loader, ProbedLoader)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.hook() == 2
    assert spec.loader.get_filename("plugin_by_path") == str(tmp_path / "plugin_by_path.py")
    assert spec.loader.get_resource_reader("plugin_by_path") is not None  # the source loader's
    # a SlipcoverLines made earlier in this process put one probe per block: its lines stand for
    # the rest, as the `blocks` of the recorder that planned them noted (under a recording
    # by another copy of the recorder, as `test_selection_safety` runs this suite, that copy's)
    planner = slipcover_engine.engine().findlinestarts.__globals__.get("blocks", blocks)
    seen = {os.path.basename(path): planner.expand(path, set(lines))
            for path, lines in sci._get_newly_seen().items()}
    assert seen == {"plugin_by_path.py": {1, 4, 5}}


def test_a_file_outside_the_repository_loaded_by_path_keeps_its_loader(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "elsewhere.py").write_text("Z = 3\n")
    (tmp_path / "repo" / "inside.py").write_text("Z = 4\n")
    original = importlib.util.spec_from_file_location
    hook = ProbeImports(lambda code: code, lambda origin: origin.startswith(str(tmp_path / "repo")))
    hook.wrap_spec_from_file_location()
    try:
        outside = importlib.util.spec_from_file_location("elsewhere", tmp_path / "elsewhere.py")
        inside = importlib.util.spec_from_file_location("inside", tmp_path / "repo" / "inside.py")
    finally:
        hook.leave()
    assert type(outside.loader).__name__ == "SourceFileLoader" and isinstance(inside.loader, ProbedLoader)
    assert importlib.util.spec_from_file_location is original


def test_the_loader_runs_the_instrumented_code_and_copies_cleanly(tmp_path: Path) -> None:
    (tmp_path / "plain_mod.py").write_text("VALUE = 41\n")
    source = importlib.machinery.SourceFileLoader("plain_mod", str(tmp_path / "plain_mod.py"))
    given, registered = [], []

    def instrument(code):
        given.append(code.co_filename)
        return compile("VALUE = 42\n", code.co_filename, "exec")  # what ran is what instrument returned

    loader = ProbedLoader(instrument, source, source.path, registered.append)
    module = type(sys)("plain_mod")
    loader.exec_module(module)
    assert (module.VALUE, given, registered) == (42, [source.path], [module])
    assert copy.copy(loader).loader is source  # no endless lookup of an attribute not set yet


def test_files_outside_the_repository_and_compiled_modules_keep_their_own_loaders(tmp_path: Path) -> None:
    inside = ProbeImports(lambda code: code, lambda origin: origin.startswith(str(tmp_path)))
    anything = ProbeImports(lambda code: code, lambda origin: True)
    (tmp_path / "inside_mod.py").write_text("Y = 2\n")
    sys.path.insert(0, str(tmp_path))
    inside.enter()
    try:
        assert isinstance(inside.find_spec("inside_mod", None).loader, ProbedLoader)
        assert not isinstance(inside.find_spec("json", None).loader, ProbedLoader)  # not the repository's
        assert isinstance(anything.find_spec("json", None).loader, ProbedLoader)
        for compiled in ("_decimal", "_json", "_frozen_importlib"):  # extension, built-in, frozen
            spec = anything.find_spec(compiled, None)
            assert spec is not None and not isinstance(spec.loader, ProbedLoader), compiled
    finally:
        inside.leave()
        sys.path.remove(str(tmp_path))
    assert inside not in sys.meta_path
    inside.leave()  # twice: nothing to take out


def test_two_copies_of_the_hook_ask_each_other_once(tmp_path: Path) -> None:
    # a program running its own copy of the recorder (a copy of this repository's suite, tested
    # under a recording) has a second ProbeImports class: each asks every other finder, so
    # without a guard each asks the other back until the stack runs out
    spec = importlib.util.spec_from_file_location("probe_imports_copy", probe_imports.__file__)
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    assert other.ProbeImports is not ProbeImports
    (tmp_path / "both_mod.py").write_text("W = 5\n")
    mine = ProbeImports(lambda code: code, lambda origin: origin.startswith(str(tmp_path)))
    theirs = other.ProbeImports(lambda code: code, lambda origin: False)
    sys.path.insert(0, str(tmp_path))
    mine.enter()
    theirs.enter()
    try:
        found = theirs.find_spec("both_mod", None)
        assert isinstance(found.loader, ProbedLoader) and found.origin == str(tmp_path / "both_mod.py")
        assert mine.find_spec("no_such_module_here", None) is None
    finally:
        theirs.leave()
        mine.leave()
        sys.path.remove(str(tmp_path))


def test_a_loader_that_gives_no_code_is_an_import_error_naming_the_module(tmp_path: Path) -> None:
    class NoCode:
        def get_code(self, name):
            return None

        def create_module(self, spec):
            return None

    loader = ProbedLoader(lambda code: code, NoCode(), str(tmp_path / "gone.py"))
    module = type(sys)("gone")
    with pytest.raises(ImportError, match=r"cannot load 'gone' from .*gone\.py: its loader gives no code"):
        loader.exec_module(module)
    with pytest.raises(AttributeError):
        loader.get_resource_reader  # noqa: B018  (the wrapped loader has none: neither has this one)
