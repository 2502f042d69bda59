"""A real pytest + pytest-rerunfailures run as the oracle for a generator's JUnit (the labelled
histories' tests): the report it writes, and each testcase's shape to compare with."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

RECORDER = "from ci.pytest_attempts import AttemptRecorder\n\n\ndef pytest_configure(config):\n" \
           "    config.pluginmanager.register(AttemptRecorder(), 'ci-attempts')\n"
# The head of a real test file: ``_attempt(name)`` counts a test's attempts (0 for the first) in a file
# beside it, so a test can fail its first attempts and pass a rerun.
COUNTER = """
import pathlib
import pytest

def _attempt(name):
    seen = pathlib.Path(__file__).with_name(name)
    count = int(seen.read_text()) if seen.exists() else 0
    seen.write_text(str(count + 1))
    return count
"""
Shape = dict[str, list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]]]


def shape(xml: str) -> Shape:
    """Per test name, each ``<testcase>``'s attribute names, child tags and property names."""
    out: Shape = defaultdict(list)
    for case in ET.fromstring(xml).iter("testcase"):
        out[case.get("name", "")].append((tuple(sorted(case.attrib)), tuple(child.tag for child in case),
                                          tuple(p.get("name", "") for p in case.iter("property"))))
    return dict(out)


def real_junit(folder: Path, source: str, attempt_text: bool) -> str:
    """The xunit1 JUnit real pytest writes for ``source`` (as ``test_real.py`` in ``folder``) with
    ``--reruns 2``, with the registry's attempt recorder when ``attempt_text``; some test must fail."""
    (folder / "test_real.py").write_text(source, encoding="utf-8")
    if attempt_text:
        (folder / "conftest.py").write_text(RECORDER, encoding="utf-8")
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "pytest_rerunfailures", "--reruns", "2", "-q",
                           "-o", "junit_family=xunit1", "--junitxml", str(folder / "real.xml"), "test_real.py"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    return (folder / "real.xml").read_text(encoding="utf-8")
