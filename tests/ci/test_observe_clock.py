"""The recorder's durations are its own clock's: a test that freezes time (as freezegun does,
patching every module's global bound to the clock functions) leaves pytest's report durations
reading the frozen clock, but not ``ci observe``'s ``duration_s``."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.ci.depmap_support import write_project
from tests.ci.test_observe_command import FILES, _observe


FROZEN_CLOCK = '''\
import sys
import time

import pytest

from pkg.work import add

FROZEN = 1.3e9  # a frozen "now", as freezegun's fakes return for 2011


@pytest.fixture
def frozen():
    """What freezegun does on start: every loaded module's global bound to the real clock
    functions (pytest's own timing included) now returns the frozen time; undone on stop."""
    real = {id(f): f for f in (time.monotonic, time.perf_counter, time.time)}
    swapped = []
    for module in list(sys.modules.values()):
        for name, value in list(getattr(module, "__dict__", {}).items()):
            if id(value) in real and callable(value):
                setattr(module, name, lambda: FROZEN)
                swapped.append((module, name, value))
    yield
    for module, name, value in swapped:
        setattr(module, name, value)


def test_frozen(frozen):
    time.sleep(0.05)
    assert add(1, 1) == 2
'''


def test_a_test_that_freezes_the_clock_gets_its_real_duration(tmp_path: Path) -> None:
    """pytest's report durations read the clock a test froze (a setup of 1.3e9 s); observe keeps its own."""
    root = tmp_path / "project"
    write_project(root, {**{k: v for k, v in FILES.items() if k.startswith("pkg/")}, "tests/test_frozen.py": FROZEN_CLOCK})
    proc, facts = _observe(sys.executable, root, "python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_frozen.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = facts["tests"]["tests/test_frozen.py"]
    assert (entry["outcome"], entry["complete"]) == ("passed", True)
    assert 0.05 <= entry["duration_s"] < 60, entry["duration_s"]
