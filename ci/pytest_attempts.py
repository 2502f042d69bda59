"""Every failed attempt's text, kept in pytest's own JUnit report (registered by `ci.pytest_plugin`).

pytest-rerunfailures (16.x) logs an attempt it will rerun with the outcome ``rerun``, which
pytest's JUnit writer does not know: the attempt becomes an empty ``<testcase>``, its exception
and traceback are lost. `AttemptRecorder` runs where the JUnit is written (the serial process, or
the xdist controller, which receives every worker's reports) and gives each failed attempt, retried
or final, three testcase properties through the report's ``user_properties`` (pytest's own
``record_property`` channel, so xdist and pytest's escaping need nothing more):

* ``ci.attempt.outcome``: ``failed`` (the call failed) or ``error`` (setup or teardown did);
* ``ci.attempt.error``: the exception type and the first line of its message;
* ``ci.attempt.text``: the failure's text (pytest's longrepr).

Each value is at most `MAX_ATTEMPT_CHARS` characters: a longer one keeps its head and tail around
a visible ``[... N characters cut ...]``. Characters XML cannot hold (NUL, other control
characters, lone surrogates from undecodable bytes) are written as ``#xNN`` before the cut, so the
bound holds in the file. The elements stay what pytest makes them (an empty ``<testcase>`` for a
retried attempt, ``<failure>`` for a final one), so a reader that ignores ``<properties>`` sees
the same report as before; `ci.results.junit` reads them back (docs/pytest_plugin.md).
"""

from __future__ import annotations

import re

import pytest

from ci.results.attempt_props import ATTEMPT_ERROR, ATTEMPT_OUTCOME, ATTEMPT_TEXT, MAX_DETAIL_CHARS

# The property text is read back into an `ci.results.junit.Attempt`, which keeps this much.
MAX_ATTEMPT_CHARS = MAX_DETAIL_CHARS
_NOT_XML = re.compile("[^\t\n\r\u0020-\u007e\u0080-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def bounded(text: str, limit: int = MAX_ATTEMPT_CHARS) -> str:
    """``text`` with characters XML cannot hold written ``#xNN`` (as pytest does), then cut to at
    most ``limit`` characters: the head and the tail around a ``[... N characters cut ...]``."""
    text = _NOT_XML.sub(lambda m: f"#x{ord(m.group()):02X}", text)
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    while True:  # the marker's own length comes out of the kept text too, and may add a digit
        marker = f"\n[... {cut} characters cut ...]\n"
        kept = limit - len(marker)
        if len(text) - kept == cut:
            break
        cut = len(text) - kept
    head = kept // 2
    return text[:head] + marker + text[len(text) - (kept - head):]


def error_of(report: pytest.TestReport) -> str:
    """The exception type and first message line of a failed report (``RuntimeError: NCCL timeout``),
    else the first non-empty line of its text."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", "") or report.longreprtext
    return next((line.strip() for line in message.splitlines() if line.strip()), "")


class AttemptRecorder:
    """pytest hooks: a failed attempt's properties go onto its teardown report, the one pytest's
    JUnit writer reads ``user_properties`` from when it closes the attempt's ``<testcase>``."""

    def __init__(self) -> None:
        self._failed: dict[tuple[str, object], pytest.TestReport] = {}

    @pytest.hookimpl(tryfirst=True)  # before pytest's JUnit writer reads the report
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        key = (report.nodeid, getattr(report, "node", None))
        if report.outcome in ("rerun", "failed"):
            self._failed.setdefault(key, report)
        if report.when != "teardown":
            return
        failed = self._failed.pop(key, None)
        if failed is None:
            return
        outcome = "failed" if failed.when == "call" else "error"
        report.user_properties.extend([
            (ATTEMPT_OUTCOME, outcome),
            (ATTEMPT_ERROR, bounded(error_of(failed))),
            (ATTEMPT_TEXT, bounded(failed.longreprtext)),
        ])
