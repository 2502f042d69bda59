"""One job's JUnit as pytest 8's junitxml writes it with its default ``junit_family`` (xunit2: no
``file`` attribute, the file is in the dotted ``classname``), built with ElementTree as pytest builds it.

A failed case gets ``<failure>`` (the call failed) or ``<error message="failed on setup with ...">``
(a fixture did); with ``attempt_text`` the registry's pytest plugin (`ci.pytest_attempts`) has also
given it the ``ci.attempt.*`` properties. No rerun plugin: each case has one ``<testcase>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime

from bench._history_gen14_world import Case

ATTEMPT_OUTCOME, ATTEMPT_ERROR, ATTEMPT_TEXT = "ci.attempt.outcome", "ci.attempt.error", "ci.attempt.text"


@dataclass(frozen=True)
class Outcome:
    """One case's result: ``status`` passed, failed, error or skipped, with its message and text."""

    case: Case
    status: str
    seconds: float
    message: str = ""
    text: str = ""


def junit(outcomes: list[Outcome], started: datetime, hostname: str, attempt_text: bool) -> str:
    """The XML text of one pytest session's JUnit."""
    suites = ET.Element("testsuites", {"name": "pytest tests"})
    counts = {s: sum(1 for o in outcomes if o.status == s) for s in ("failed", "error", "skipped")}
    total = sum(o.seconds for o in outcomes)
    suite = ET.SubElement(suites, "testsuite", {
        "name": "pytest", "errors": str(counts["error"]), "failures": str(counts["failed"]),
        "skipped": str(counts["skipped"]), "tests": str(len(outcomes)), "time": f"{total + 4.2:.3f}",
        "timestamp": started.isoformat(), "hostname": hostname})
    for outcome in outcomes:
        element = ET.SubElement(suite, "testcase", {"classname": outcome.case.classname, "name": outcome.case.name,
                                                    "time": f"{outcome.seconds:.3f}"})
        if outcome.status in ("failed", "error"):
            if attempt_text:
                props = ET.SubElement(element, "properties")
                error = outcome.message.removeprefix('failed on setup with "').rstrip('"').split("\n")[0]
                for name, value in ((ATTEMPT_OUTCOME, outcome.status), (ATTEMPT_ERROR, error),
                                    (ATTEMPT_TEXT, outcome.text)):
                    ET.SubElement(props, "property", {"name": name, "value": value})
            child = ET.SubElement(element, "failure" if outcome.status == "failed" else "error",
                                  {"message": outcome.message})
            child.text = outcome.text
        elif outcome.status == "skipped":
            child = ET.SubElement(element, "skipped", {"type": "pytest.skip", "message": outcome.message})
            child.text = outcome.text
    return '<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(suites, encoding="unicode")
