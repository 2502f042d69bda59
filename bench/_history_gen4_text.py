"""The fourth history's JUnit text: one shard's xunit1 report as pytest 8 writes it with
``--junitxml``, pytest-rerunfailures' reruns as repeated ``<testcase>`` elements (an empty one
per rerun attempt, the final attempt with its ``<failure>``), and, with ``attempt_text``, the
registry plugin's ``ci.attempt.*`` properties on every failed attempt (docs/pytest_plugin.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from xml.sax.saxutils import quoteattr, escape

from bench._history_gen4_world import TestSpec


@dataclass(frozen=True)
class Failure:
    """One failed attempt: ``error`` the exception line (``Type: message``), ``text`` the tail."""

    error: str
    text: str


@dataclass(frozen=True)
class CaseOutcome:
    """A test's attempts in one shard: ``failures`` the failed ones in order; when ``passed`` the
    last attempt passed after them (a rerun passed), else the last failure is the final outcome."""

    spec: TestSpec
    failures: tuple[Failure, ...]
    passed: bool
    seconds: float


def _attrs(spec: TestSpec, seconds: float) -> str:
    return (f'classname={quoteattr(spec.classname)} name={quoteattr(spec.name)} file={quoteattr(spec.file)} '
            f'line="{10 + len(spec.name) % 90}" time="{seconds:.3f}"')


def _properties(failure: Failure) -> str:
    return ("<properties>"
            '<property name="ci.attempt.outcome" value="failed"/>'
            f'<property name="ci.attempt.error" value={quoteattr(failure.error)}/>'
            f'<property name="ci.attempt.text" value={quoteattr(failure.text)}/>'
            "</properties>")


def _case_elements(case: CaseOutcome, attempt_text: bool) -> list[str]:
    attrs = _attrs(case.spec, case.seconds)
    out = []
    final_failed = not case.passed
    rerun = case.failures[:-1] if final_failed else case.failures
    for failure in rerun:  # an attempt rerunfailures will rerun: pytest writes it empty
        out.append(f"<testcase {attrs}>{_properties(failure)}</testcase>" if attempt_text else f"<testcase {attrs}/>")
    if final_failed:
        last = case.failures[-1]
        body = escape(f"{case.spec.name.split('[')[0]}(...)\n\n{last.text}\n{case.spec.file}:88: "
                      f"{last.error.split(':')[0]}")
        props = _properties(last) if attempt_text else ""
        out.append(f"<testcase {attrs}>{props}<failure message={quoteattr(last.error)}>{body}</failure></testcase>")
    else:
        out.append(f"<testcase {attrs}/>")
    return out


def shard_xml(cases: list[CaseOutcome], runner: str, started: datetime, attempt_text: bool) -> str:
    """One shard's report: every case's elements in order, the testsuite counting final outcomes
    (pytest counts a rerun attempt in neither ``tests`` nor ``failures``)."""
    body = [element for case in cases for element in _case_elements(case, attempt_text)]
    failures = sum(1 for case in cases if not case.passed)
    total = sum(case.seconds for case in cases)
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
            f'<testsuite name="pytest" errors="0" failures="{failures}" skipped="0" tests="{len(cases)}" '
            f'time="{total:.3f}" timestamp="{started.isoformat(timespec="microseconds")}" '
            f'hostname={quoteattr(runner)}>' + "".join(body) + "</testsuite></testsuites>\n")
