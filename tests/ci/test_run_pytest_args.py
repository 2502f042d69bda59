"""`ci run` with the registry's `pytest_args:` (a tier's, then an entry's): files whose args
differ run in separate pytests, and what runs is what pytest itself selects with those args
(`pytest --collect-only`, the oracle). Bad args are one line at their place in registry.yaml."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.results.junit import parse_junit
from tests.ci.test_run_env import ci_run as _ci_run


ARGS_REGISTRY = textwrap.dedent("""\
    version: 1
    tiers:
      cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu, pytest_args: [-m, not slow]}
    tests:
      tests/test_a.py: {tiers: [cpu], est_time: 3, owner: t, status: active, pytest_args: [-k, not two]}
      tests/test_b.py: {tiers: [cpu], est_time: 2, owner: t, status: active}
      tests/test_c.py: {tiers: [cpu], est_time: 1, owner: t, status: active,
                        pytest_args: [--deselect, tests/test_c.py::test_one, -k, "one or two"]}
    """)
ARGS_TEST = textwrap.dedent("""\
    import pytest
    def test_one(): pass
    def test_two(): pass
    def test_three(): pass
    @pytest.mark.slow
    def test_one_slow(): pass
    """)


def _collected(root: Path, *args: str) -> set[str]:
    """The oracle: the test names pytest itself selects with ``args`` (``--collect-only``)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {line for line in proc.stdout.splitlines() if "::" in line}


def test_run_adds_tier_then_entry_pytest_args_one_pytest_per_distinct_args(tmp_path):
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "registry.yaml").write_text(ARGS_REGISTRY)
    (root / "pytest.ini").write_text("[pytest]\nmarkers = slow\n")
    for name in "abc":
        (root / "tests" / f"test_{name}.py").write_text(ARGS_TEST)
    proc = _ci_run(root, "--tier", "cpu", "--junit", str(root / "j.xml"), "--", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    starts = [line for line in proc.stdout.splitlines() if line.startswith("ci run: ") and "-m pytest" in line]
    assert [line.split(" junit_family=xunit1 ", 1)[1] for line in starts] == [  # as a shell would take it
        "tests/test_a.py -m 'not slow' -k 'not two' -q", "tests/test_b.py -m 'not slow' -q",
        "tests/test_c.py -m 'not slow' --deselect tests/test_c.py::test_one -k 'one or two' -q"], proc.stdout
    ran = {f"{c.file}::{c.name}" for c in parse_junit(root / "j.xml").cases}
    assert ran == (_collected(root, "tests/test_a.py", "-m", "not slow", "-k", "not two")
                   | _collected(root, "tests/test_b.py", "-m", "not slow")
                   | _collected(root, "tests/test_c.py", "-m", "not slow", "--deselect", "tests/test_c.py::test_one",
                                "-k", "one or two"))
    assert ran == {"tests/test_a.py::test_one", "tests/test_a.py::test_three", "tests/test_b.py::test_one",
                   "tests/test_b.py::test_two", "tests/test_b.py::test_three", "tests/test_c.py::test_two"}


@pytest.mark.parametrize(("args", "message"), [
    ("[-k, x, tests/test_b.py]", "pytest_args: 'tests/test_b.py' is no option's value: a path or node id would add "
                                 "tests to every file's run"),
    ("[-vx]", "pytest_args: '-vx' is refused: the report must hold every selected test"),
    ('["--junitxml=out.xml"]', "pytest_args: '--junitxml=out.xml' is refused: `ci run` writes the JUnit report"),
    ("[-n, '4']", "pytest_args: '-n' is refused: use `ci run --workers`"),
    ("[-p, no:ci]", "pytest_args: '-p' is refused: `ci run` sets the plugins"),
    ("[-o, junit_family=xunit2]", "pytest_args: -o 'junit_family=xunit2': `ci run` writes the JUnit report"),
    ("[-k, 3]", "pytest_args item must be str"),
    ("-k x", "pytest_args must be a list of strings"),
])
def test_bad_pytest_args_are_one_line_at_their_place(tmp_path, args, message):
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_b.py").write_text(ARGS_TEST)
    text = ARGS_REGISTRY.replace(
        "tests/test_b.py: {tiers: [cpu], est_time: 2, owner: t, status: active}",
        f"tests/test_b.py: {{tiers: [cpu], est_time: 2, owner: t, status: active, pytest_args: {args}}}")
    (root / "registry.yaml").write_text(text)
    proc = _ci_run(root, "--tier", "cpu")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"registry.yaml:6:" in proc.stderr and message in proc.stderr, proc.stderr
