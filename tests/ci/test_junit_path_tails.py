"""A JUnit path is the tail of a registered file only at a folder boundary (issue #32's mutation
survivors).

pytest writes paths relative to its rootdir, so ``a/test_x.py`` in a report may be the registered
``tests/a/test_x.py`` (`ci.results.junit`). A tail is whole path components: ``a/test_x.py`` is never
``tests/ba/test_x.py``; a tail several registered files share is settled by the pytest
configuration in the folder it cuts off, else left as written. The same holds for xunit2's dotted
classnames (``a.test_x`` -> ``a/test_x.py`` -> its tail).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.results.junit import parse_junit
from tests.ci.tree_testutil import write


def _report(tmp_path: Path, *, file: str | None, classname: str) -> Path:
    attr = f' file="{file}"' if file is not None else ""
    path = tmp_path / "r.xml"
    path.write_text(f'<testsuite time="1"><testcase classname="{classname}" name="test_ok"{attr} time="0.5"/>'
                    "</testsuite>", encoding="utf-8")
    return path


# known files -> the file a report's ``file="a/test_x.py"`` maps to, and the one its xunit2
# classname ``a.test_x`` maps to (nothing found: the path as written, and "" for a classname)
@pytest.mark.parametrize("known, by_file, by_classname", [
    (["tests/ba/test_x.py"], "a/test_x.py", ""),                     # "ba" is not "a"
    (["tests/a/test_x.py", "tests/ba/test_x.py"], "tests/a/test_x.py", "tests/a/test_x.py"),
    (["tests/ba/test_x.py", "tests/a/test_x.py"], "tests/a/test_x.py", "tests/a/test_x.py"),
    (["tests/a/test_xx.py"], "a/test_x.py", ""),                     # nor is a longer file name
    (["tests/a/mytest_x.py"], "a/test_x.py", ""),
    (["x/tests/a/test_x.py", "y/a/test_x.py"], "a/test_x.py", ""),   # a shared tail, no config
])
def test_a_reported_path_maps_only_onto_a_whole_tail(tmp_path: Path, known: list[str], by_file: str,
                                                     by_classname: str) -> None:
    report = parse_junit(_report(tmp_path, file="a/test_x.py", classname="a.test_x"), root=tmp_path, known_files=known)
    assert [c.file for c in report.cases] == [by_file]
    report = parse_junit(_report(tmp_path, file=None, classname="a.test_x"), root=tmp_path, known_files=known)
    assert [c.file for c in report.cases] == [by_classname]


def test_a_shared_tail_goes_to_the_file_whose_cut_off_folder_holds_the_config(tmp_path: Path) -> None:
    write(tmp_path, {"y/pytest.ini": "[pytest]\n"})
    known = ["x/tests/a/test_x.py", "y/a/test_x.py"]
    report = parse_junit(_report(tmp_path, file="a/test_x.py", classname="a.test_x"), root=tmp_path, known_files=known)
    assert [c.file for c in report.cases] == ["y/a/test_x.py"]
    write(tmp_path, {"x/tests/pytest.ini": "[pytest]\n"})  # both hold one now: no longer settled
    report = parse_junit(_report(tmp_path, file="a/test_x.py", classname="a.test_x"), root=tmp_path, known_files=known)
    assert [c.file for c in report.cases] == ["a/test_x.py"]


def test_an_inherited_test_belongs_to_the_module_that_collected_it(tmp_path: Path) -> None:
    """xunit1 writes the base class's file for an inherited test (pallets/itsdangerous's
    test_timed.py subclasses test_serializer.py's classes); pytest's node id is the oracle."""
    import subprocess
    import sys

    write(tmp_path, {"test_base.py": "class TestBase:\n    value = 1\n\n    def test_value(self):\n"
                                     "        assert self.value == 1\n",
                     "test_child.py": "from test_base import TestBase\n\n\nclass TestChild(TestBase):\n    value = 2\n"})
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rf", "-o", "junit_family=xunit1",
                           "--junitxml=r.xml", "test_base.py", "test_child.py"], cwd=tmp_path, capture_output=True,
                          text=True)
    assert "FAILED test_child.py::TestChild::test_value" in proc.stdout, proc.stdout
    assert 'file="test_base.py"' in (tmp_path / "r.xml").read_text()  # what pytest writes for both cases
    report = parse_junit(tmp_path / "r.xml", root=tmp_path, known_files=["test_base.py", "test_child.py"])
    # test_child.py also collects the TestBase it imports: both of its cases are its own
    assert {(c.classname, c.file, c.outcome) for c in report.cases} == {
        ("test_base.TestBase", "test_base.py", "passed"), ("test_child.TestBase", "test_child.py", "passed"),
        ("test_child.TestChild", "test_child.py", "failed")}
    assert set(report.files) == {"test_base.py", "test_child.py"}


def test_a_node_id_from_xunit2_under_a_sub_rootdir_is_pytests_own(tmp_path: Path) -> None:
    """pytest run with ``test/pytest.ini`` (SGLang's layout) writes classnames relative to ``test/``:
    ``registered.a.test_x.TestA``. The stored node id is the repository path and pytest's own node
    id after it, never the module's folders again as classes (``::registered::a::test_x::``);
    pytest's ``-rA`` summary lines are the oracle."""
    import subprocess
    import sys

    from ci.history.ingest import node_id

    write(tmp_path, {"test/pytest.ini": "[pytest]\naddopts = --import-mode=importlib\n",
                     "test/registered/a/test_x.py": "class TestA:\n    def test_in_class(self):\n        pass\n\n\n"
                                                    "def test_top():\n    pass\n",
                     "test/x/test_x.py": "def test_top():\n    pass\n"})
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--junitxml=../r.xml",
                           "registered/a/test_x.py", "x/test_x.py"], cwd=tmp_path / "test", capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pytest_ids = {"test/" + line.split()[1] for line in proc.stdout.splitlines() if line.startswith("PASSED ")}
    assert len(pytest_ids) == 3, proc.stdout
    known = ["test/registered/a/test_x.py", "test/x/test_x.py"]
    report = parse_junit(tmp_path / "r.xml", root=tmp_path, known_files=known)
    assert {node_id(c) for c in report.cases} == pytest_ids
