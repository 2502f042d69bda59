"""Broken vs failed and failure fingerprints, on JUnit that real pytest (with pytest-rerunfailures)
wrote: an ImportError is broken on every attempt, never flaky evidence."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.history.classify import RERUN_EXCEPT, exception_type, fingerprint, is_broken, normalise
from ci.history.ingest import case_rows
from ci.results.junit import FAILED, Attempt, parse_junit

TESTS = {
    "test_collect_import.py": "from nowhere_at_all import thing\n\ndef test_x():\n    pass\n",
    "test_syntax.py": "def test_x(:\n    pass\n",
    "test_cases.py": textwrap.dedent("""\
        import pytest

        def test_local_import():
            from os import KVFP4QuantizeUtil  # the seed's function-local ImportError

        def test_no_gpu():
            raise RuntimeError("No CUDA GPUs are available")

        def test_assert(tmp_path):
            assert 0.5 > 0.75, f"accuracy 0.5 below 0.75 at {hex(id(tmp_path))} in {tmp_path}"

        def test_mentions_importerror():
            try:
                import nowhere_at_all
            except ImportError:
                pass
            assert False, "wrong value 3"

        def test_pass():
            pass
        """),
}


@pytest.fixture(scope="module")
def real_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("suite")
    for name, text in TESTS.items():
        (root / name).write_text(text)
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--reruns", "2",
                    "--continue-on-collection-errors", "--junitxml", str(root / "junit.xml"), str(root)],
                   cwd=root, capture_output=True, check=False, timeout=120)
    return root / "junit.xml"


def kinds(report: Path) -> dict[str, list[str]]:
    parsed = parse_junit(report, root=report.parent)
    return {case.name: [row.kind for row in case_rows(case)] for case in parsed.cases}


def test_real_pytest_output_is_classified(real_report: Path) -> None:
    found = kinds(real_report)
    assert found["test_collect_import"] == ["broken"]
    assert found["test_syntax"] == ["broken"]
    assert found["test_local_import"] == ["broken", "broken", "broken"], "its reruns are the same breakage"
    assert found["test_no_gpu"] == ["broken", "broken", "broken"]
    assert found["test_assert"] == ["fail", "fail", "fail"]
    assert found["test_mentions_importerror"] == ["fail", "fail", "fail"], "the exception raised decides"
    assert found["test_pass"] == ["pass"]
    rows = {case.name: case_rows(case) for case in parse_junit(real_report, root=real_report.parent).cases}
    assert rows["test_collect_import"][0].node == "test_collect_import.py", "a collection error is its file's"
    assert rows["test_assert"][0].node == "test_cases.py::test_assert"
    assert [r.retried for r in rows["test_assert"]] == [True, True, False]


def test_fingerprint_of_real_output_is_stable(real_report: Path) -> None:
    parsed = parse_junit(real_report, root=real_report.parent)
    case = next(c for c in parsed.cases if c.name == "test_assert")
    fp, text = fingerprint(case.attempts[-1])
    assert text == "AssertionError: accuracy <n> below <n> at <addr> in <tmp>"
    assert len(fp) == 12
    collect = next(c for c in parsed.cases if c.name == "test_collect_import")
    assert fingerprint(collect.attempts[-1])[1] == "ModuleNotFoundError: No module named 'nowhere_at_all'"


@pytest.mark.parametrize("message, expected", [
    ("AssertionError: 0.8123 < 0.85 at 0x7f3a9c0b1d30", "AssertionError: <n> < <n> at <addr>"),
    ("OSError: /tmp/pytest-of-ci/pytest-12/test_a0/x.bin missing", "OSError: <tmp> missing"),
    ("FileNotFoundError: /home/runner/work/repo/data/7.json", "FileNotFoundError: <path>"),
    ("TimeoutError: worker 3 took 612.5s (pid 4242)", "TimeoutError: worker <n> took <n>s (pid <n>)"),
    ("RuntimeError: run 9f1c2b3a-1d2e-4f5a-8b9c-0123456789ab failed", "RuntimeError: run <id> failed"),
    ("KeyError: 'tests_gpu_h100'", "KeyError: 'tests_gpu_h100'"),
])
def test_normalise(message: str, expected: str) -> None:
    assert normalise(message) == expected


def test_two_runs_of_one_cause_share_a_fingerprint() -> None:
    a = Attempt(FAILED, 1.0, "AssertionError: max err 0.0312 > 0.01 at 0x7f00aa", "")
    b = Attempt(FAILED, 2.0, "AssertionError: max err 0.0415 > 0.01 at 0x7e11bb", "")
    c = Attempt(FAILED, 2.0, "ValueError: max err 0.0415 > 0.01 at 0x7e11bb", "")
    assert fingerprint(a) == fingerprint(b) != fingerprint(c)
    assert fingerprint(Attempt(FAILED, 1.0)) == ("", "")


@pytest.mark.parametrize("message, detail, classname, broken", [
    ("ModuleNotFoundError: No module named 'x'", "", "tests.a", True),
    ("", "E   SyntaxError: invalid syntax", "tests.a", True),
    ("collection failure", "anything", "", True),
    ("AssertionError: ImportError was expected", "", "tests.a", False),
    ("RuntimeError: Found no NVIDIA driver on your system.", "", "tests.a", True),
    ("failed on setup with \"fixture 'x' not found\"", "", "tests.a", False),
])
def test_is_broken(message: str, detail: str, classname: str, broken: bool) -> None:
    assert is_broken(Attempt(FAILED, 0.0, message, detail), classname) is broken


def test_rerun_except_patterns_name_every_broken_type() -> None:
    import re

    for text in ("ImportError: x", "ModuleNotFoundError: y", "SyntaxError: z", "No CUDA GPUs are available"):
        assert any(re.search(p, text) for p in RERUN_EXCEPT), text
    assert not any(re.search(p, "AssertionError: accuracy") for p in RERUN_EXCEPT)
    assert exception_type(Attempt(FAILED, 0.0, "", "E   foo\nE   pkg.mod.CustomError: boom")) == "CustomError"
