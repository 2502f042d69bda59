"""The fifth labelled history's JUnit (`bench._history_gen5`): one shard's report as pytest's
xunit1 writer with pytest-rerunfailures writes it (a rerun attempt an empty ``<testcase>``; with
``attempt_text`` every failed attempt, retried or final, also carries `ci.pytest_attempts`'
properties), or, for a tier run file by file by a runner script with whole-file retries, the
attempts' reports merged by the script. A real pytest run is the oracle of the format
(tests/ci/test_history_gen5.py).

Contract: `shard_xml` is a pure function; every testcase carries ``file``, ``classname`` and
``name`` so `ci.history.ingest.node_id` reads ``file::Class::name``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass

from ci.results.junit import ATTEMPT_ERROR, ATTEMPT_OUTCOME, ATTEMPT_TEXT


@dataclass(frozen=True)
class Attempt:
    """One attempt of one test: failed or not, its exception text, and whether it failed in
    setup (pytest writes ``<error>``) rather than in the call (``<failure>``)."""

    failed: bool
    error: str = ""
    setup: bool = False


@dataclass(frozen=True)
class CaseRun:
    """One test in one shard: its attempts (the last is the outcome), or ``skipped`` (a reason)."""

    file: str
    classname: str
    name: str
    seconds: float
    attempts: tuple[Attempt, ...] = (Attempt(False),)
    skipped: str = ""

    @property
    def node(self) -> str:
        """The id `ci.history.ingest.node_id` gives it: ``file::Class::name``."""
        return f"{self.file}::{self.classname.rsplit('.', 1)[-1]}::{self.name}"


def _line(file: str, name: str) -> int:
    return 40 + zlib.crc32(f"{file}:{name}".encode()) % 3000


def traceback(case: CaseRun, error: str) -> str:
    """pytest's long representation of a failure: the test's frame, then the error as ``E`` lines."""
    method = case.name.split("[")[0]
    return (f"{case.file}:{_line(case.file, case.name)}: in {method}\n    self.run_case(device, dtype)\n"
            f"E   " + error.replace("\n", "\nE   "))


def _testcase(parent: ET.Element, case: CaseRun, seconds: float) -> ET.Element:
    return ET.SubElement(parent, "testcase", {"classname": case.classname, "name": case.name, "file": case.file,
                                              "line": str(_line(case.file, case.name)), "time": f"{seconds:.3f}"})


def _fail(element: ET.Element, case: CaseRun, attempt: Attempt) -> None:
    if attempt.setup:
        child = ET.SubElement(element, "error", {"message": f'failed on setup with "{attempt.error.splitlines()[0]}"'})
    else:
        child = ET.SubElement(element, "failure", {"message": attempt.error})
    child.text = traceback(case, attempt.error)


def _properties(element: ET.Element, case: CaseRun, attempt: Attempt) -> None:
    """`ci.pytest_attempts`' three properties, which it gives every failed attempt, retried or final."""
    props = ET.SubElement(element, "properties")
    for name, value in ((ATTEMPT_OUTCOME, "error" if attempt.setup else "failed"),
                        (ATTEMPT_ERROR, attempt.error.splitlines()[0]), (ATTEMPT_TEXT, traceback(case, attempt.error))):
        ET.SubElement(props, "property", {"name": name, "value": value})


def shard_xml(cases: list[CaseRun], *, attempt_text: bool, file_retry: bool, hostname: str) -> str:
    """The JUnit XML of one shard. With ``file_retry`` a test's earlier attempts are only the
    failed ones, each a full ``<failure>`` (each attempt was its own pytest run; the script keeps
    a passed earlier attempt out, since a second element reads as a rerun)."""
    top = ET.Element("testsuites")
    suite = ET.SubElement(top, "testsuite", {"name": "pytest", "hostname": hostname})
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total = 0.0
    for case in cases:
        counts["tests"] += 1
        if case.skipped:
            element = _testcase(suite, case, 0.001)
            ET.SubElement(element, "skipped", {"type": "pytest.skip", "message": case.skipped}).text = \
                f"{case.file}:{_line(case.file, case.name)}: {case.skipped}"
            counts["skipped"] += 1
            continue
        for index, attempt in enumerate(case.attempts):
            last = index == len(case.attempts) - 1
            seconds = case.seconds * (3.0 if attempt.failed and "timeout" in attempt.error.lower() else 1.0)
            total += seconds
            if file_retry and not last and not attempt.failed:
                continue
            element = _testcase(suite, case, seconds)
            if attempt.failed and attempt_text:
                _properties(element, case, attempt)
            # a rerun attempt (pytest-rerunfailures' "rerun" outcome) is otherwise an empty element
            if attempt.failed and (last or file_retry):
                _fail(element, case, attempt)
                if last:
                    counts["errors" if attempt.setup else "failures"] += 1
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{total:.3f}")
    return ET.tostring(top, encoding="unicode", xml_declaration=True)
