"""A recorded subprocess imports what its own path says, not the recorder's ``ci`` package.

The start-up hook imports the recorder while ``site`` runs, before the program's ``sys.path[0]``
exists (`ci.observe.aside`). The oracle is the same program run without the hook: a
program whose folder has a ``ci`` package of its own must get that one, recorded or not, and a
program that imports the recorder's own files must share its modules (one ``child``,
holding the log of the recording running in that process).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci.observe import slipcover_core
from ci.observe.aside import SameFileFinder, step_aside
from tests.ci.depmap_child_support import REPO, child_argv, child_env, project, recorded_lines

pytestmark = pytest.mark.skipif(not slipcover_core.available(), reason="slipcover is not installed")

SHOW = ("import sys\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'ci'))\n"  # before the program imports it
        "import pkg.work; pkg.work.work(3)\n"
        "import ci, ci.running.proctree as p\n"
        "print(ci.__file__, p.__file__, getattr(p, 'OWN', None))\n")


def _own_ci(folder: Path) -> Path:
    """A ``ci`` package of the program's own, with a ``running.proctree`` of its own."""
    (folder / "ci" / "running").mkdir(parents=True)
    (folder / "ci" / "__init__.py").write_text("")
    (folder / "ci" / "running" / "__init__.py").write_text("")
    (folder / "ci" / "running" / "proctree.py").write_text("OWN = True\n")
    return folder


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("how", ["-c", "script"])
def test_a_child_whose_folder_has_its_own_ci_imports_its_own(tmp_path: Path, how: str) -> None:
    root, parts = project(tmp_path)
    own = _own_ci(tmp_path / "own")
    if how == "-c":
        argv, cwd = [sys.executable, "-c", SHOW], own  # sys.path[0]: the working directory
    else:
        (own / "main.py").write_text(SHOW)
        argv, cwd = [sys.executable, str(own / "main.py")], tmp_path  # sys.path[0]: the script's folder
    plain = _run(argv, {k: v for k, v in child_env(root, parts).items() if not k.startswith("CI_DEPMAP")}, cwd)
    recorded = _run(argv, child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd)
    assert plain == recorded, (plain, recorded)
    assert recorded == ["[]", f"{own / 'ci' / '__init__.py'} {own / 'ci' / 'running' / 'proctree.py'} True"]
    assert recorded_lines(parts)["tests/test_x.py"]["work.py"] == [1, 2, 3, 4, 5, 8]  # and it was recorded


def test_a_child_importing_the_recorder_s_own_files_shares_its_modules(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    body = SHOW + "import ci.observe.child as c\nprint(len(c._active))\n"
    recorded = _run(child_argv(body), child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), root)
    # one child: the one whose `start` holds this process's log
    assert recorded == ["[]", f"{REPO / 'ci' / '__init__.py'} {REPO / 'ci' / 'running' / 'proctree.py'} None", "1"]
    plain = _run(child_argv(body), {k: v for k, v in child_env(root, parts).items() if not k.startswith("CI_DEPMAP")},
                 root)
    assert plain == recorded[:2] + ["0"]  # unrecorded: the same files, no log


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Two copies of a package ``aside_demo`` (folders ``a`` and ``b``), the one in ``a``
    imported, and the finder's state put back afterwards."""
    for copy in ("a", "b"):
        (tmp_path / copy / "aside_demo").mkdir(parents=True)
        (tmp_path / copy / "aside_demo" / "__init__.py").write_text(f"COPY = {copy!r}\n")
        (tmp_path / copy / "aside_demo" / "sub.py").write_text(f"COPY = {copy!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    import aside_demo.sub  # noqa: F401

    meta_path = list(sys.meta_path)
    yield tmp_path
    sys.meta_path[:] = meta_path
    for name in [n for n in sys.modules if n.startswith("aside_demo")]:
        del sys.modules[name]
    for finder in sys.meta_path:
        if isinstance(finder, SameFileFinder):
            for name in [n for n in finder.aside if n.startswith("aside_demo")]:
                del finder.aside[name]


def test_the_same_file_gives_back_the_same_module_and_another_file_its_own(demo: Path) -> None:
    before = sys.modules["aside_demo"], sys.modules["aside_demo.sub"]
    spec = before[0].__spec__
    names = [set(vars(module)) for module in before]
    finder = step_aside("aside_demo")
    assert sys.meta_path[0] is finder and step_aside("aside_demo") is finder  # installed once
    assert "aside_demo" not in sys.modules and set(finder.aside) >= {"aside_demo", "aside_demo.sub"}
    import aside_demo.sub

    assert (sys.modules["aside_demo"], sys.modules["aside_demo.sub"]) == before  # the very objects
    assert aside_demo.__spec__ is spec  # left as they were, loader included
    assert [set(vars(module)) for module in before] == names  # a module does not become a package

    # given back once: a program that takes a module out of sys.modules to import it afresh
    # gets a fresh one, as it would unrecorded
    del sys.modules["aside_demo.sub"]
    import aside_demo.sub  # noqa: F811

    assert aside_demo.sub is not before[1] and aside_demo.sub.COPY == "a"

    step_aside("aside_demo")
    sys.path.insert(0, str(demo / "b"))  # the program's path now leads to the other copy
    import aside_demo.sub  # noqa: F811

    assert aside_demo.COPY == aside_demo.sub.COPY == "b" and aside_demo is not before[0]


def test_a_module_the_path_no_longer_finds_is_not_found(demo: Path) -> None:
    step_aside("aside_demo")
    sys.path.remove(str(demo / "a"))
    with pytest.raises(ModuleNotFoundError):
        import aside_demo  # noqa: F401


def test_a_module_whose_name_only_starts_like_the_package_stays(demo: Path) -> None:
    (demo / "a" / "aside_demo_extra.py").write_text("")
    import aside_demo_extra

    step_aside("aside_demo")
    assert sys.modules["aside_demo_extra"] is aside_demo_extra and "aside_demo" not in sys.modules


def test_the_same_file_through_a_symbolic_link_is_the_same_module(demo: Path) -> None:
    before = sys.modules["aside_demo.sub"]
    (demo / "link").symlink_to(demo / "a", target_is_directory=True)
    step_aside("aside_demo")
    sys.path.insert(0, str(demo / "link"))  # the program's path names the same files another way
    import aside_demo.sub

    assert aside_demo.sub is before


def test_a_namespace_package_on_the_program_s_path_is_imported_as_without_the_hook(demo: Path) -> None:
    step_aside("aside_demo")
    (demo / "ns" / "aside_demo").mkdir(parents=True)  # no __init__.py: no file to compare
    sys.path.remove(str(demo / "a"))
    sys.path.insert(0, str(demo / "ns"))
    import aside_demo

    assert list(aside_demo.__path__) == [str(demo / "ns" / "aside_demo")] and aside_demo.__file__ is None
