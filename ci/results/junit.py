"""Parse pytest JUnit XML into per-test and per-file results (standard library only).

Contract:
- Accepts both ``junit_family`` flavours pytest writes: ``xunit1`` (``<testcase file=...>``) and
  ``xunit2`` (no ``file``: the file is recovered from the dotted ``classname``, checked against the
  known registry paths or the files under ``root``).
- xunit1's ``file`` is where the test function is defined; a test a class inherits from a class
  of another file was collected from the module its ``classname`` names, which is the file that
  ran it and that it failed in: that module wins when it is a known file or one under ``root``.
- pytest-xdist interleaves test cases from workers; order does not matter here.
- pytest-rerunfailures writes one ``<testcase>`` per attempt with the same id; the *last* one is
  the outcome, the earlier ones count as reruns, and all attempts' times are summed (that is the
  time the file really cost). Each attempt is kept in ``CaseResult.attempts`` with its own outcome
  and failure text; pytest writes a rerun attempt as an empty ``<testcase>``. `ci.pytest_attempts`
  gives it the ``ci.attempt.*`` properties (outcome, error line, text), read here as that
  attempt's outcome, ``message`` and ``detail``; an element without them (another plugin's
  report, or one written before) reads ``passed``: it was rerun, so it failed (`ci.history`
  counts it so). A ``<failure>``/``<error>`` child, when there is one, is read before them.
- Collection errors (``classname=""``, ``name="tests.test_x"``) become an ``error`` for that file.
- A ``<testcase>`` with no ``name``, ``classname`` or ``file`` names no test and is skipped: pytest
  writes one for a test whose pytest-xdist worker crashed and that pytest-rerunfailures reruns (the
  crash report has no teardown, so the element is never given its test's name); the crashed attempt
  cannot be told apart from any other test's, so the rerun test shows its later attempts only.
- Paths are mapped to the repository: pytest writes them relative to its rootdir, the folder of the
  configuration file it ran with (``test/`` for a ``test/pytest.ini``), not the repository root. A
  path that is neither a known file nor a file under ``root`` is read as the tail of a known file
  (``registered/a/test_x.py`` -> ``test/registered/a/test_x.py``); a tail that several known files
  share is settled by the one whose cut-off folder holds a pytest configuration, else left as
  written.
- Times are seconds. Malformed XML raises `JUnitError` naming the file, and so does a time that is
  not a finite, non-negative number, or a testcase time above `ci.registry.MAX_SECONDS` (one day:
  no test file may be estimated longer, so one test that long is a corrupt report).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ci.limits import MAX_SECONDS, is_plain_decimal
from ci.results.attempt_props import ATTEMPT_ERROR, ATTEMPT_OUTCOME, ATTEMPT_TEXT, MAX_DETAIL_CHARS  # noqa: F401 (re-exported)
from ci.project import PYTEST_CONFIG_FILES
from ci.regular_file import MAX_REPORT_BYTES, read_regular

PASSED, FAILED, SKIPPED, ERROR = "passed", "failed", "skipped", "error"


class JUnitError(ValueError):
    """A JUnit XML file could not be read or does not look like pytest's output."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One ``<testcase>`` element: its outcome, time, and the ``message`` attribute and text (the
    last `MAX_DETAIL_CHARS`) of its ``<failure>``/``<error>``/``<skipped>`` child, ``""`` if none."""

    outcome: str
    time: float
    message: str = ""
    detail: str = ""


@dataclass(frozen=True)
class CaseResult:
    """One test (all its attempts folded). ``file`` is repo-relative POSIX, or ``""`` if unknown."""

    file: str
    classname: str
    name: str
    outcome: str
    time: float
    reruns: int = 0
    attempts: tuple[Attempt, ...] = ()


@dataclass
class FileResult:
    """Counts and summed testcase time (seconds) for one test file in one report."""

    file: str
    tests: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    reruns: int = 0
    time: float = 0.0

    def add(self, case: CaseResult) -> None:
        self.tests += 1
        self.reruns += case.reruns
        self.time += case.time
        if case.outcome == PASSED:
            self.passed += 1
        elif case.outcome == FAILED:
            self.failed += 1
        elif case.outcome == SKIPPED:
            self.skipped += 1
        else:
            self.errors += 1


@dataclass(frozen=True)
class JUnitReport:
    """One XML file: ``cases`` in document order, ``wall_time`` the sum of testsuite ``time``s."""

    source: str
    cases: tuple[CaseResult, ...]
    wall_time: float
    files: dict[str, FileResult] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(c.outcome in (FAILED, ERROR) for c in self.cases)


def parse_junit(path: str | Path, *, root: str | Path | None = None,
                known_files: Iterable[str] = ()) -> JUnitReport:
    """Parse one pytest JUnit XML file; see the module docstring for the folding rules."""
    source = str(path)
    try:
        top = ET.fromstring(read_regular(source, MAX_REPORT_BYTES))
    except OSError as exc:
        raise JUnitError(f"{source}: cannot read JUnit XML: {exc.strerror}") from exc
    except ET.ParseError as exc:
        raise JUnitError(f"{source}: cannot read JUnit XML: {exc}") from exc
    if top.tag == "testsuites":
        suites = top.findall("testsuite")
    elif top.tag == "testsuite":
        suites = [top]
    else:
        raise JUnitError(f"{source}: root element is <{top.tag}>, expected <testsuites> or <testsuite>")
    resolver = _FileResolver(Path(root) if root is not None else None, set(known_files))
    attempts: dict[tuple[str, str, str], list[Attempt]] = {}
    wall = 0.0
    for suite in suites:
        wall += _seconds(suite.get("time"), f"{source}: testsuite time")
        for case in suite.iter("testcase"):
            classname, name = case.get("classname", ""), case.get("name", "")
            reported = case.get("file")
            if not (classname or name or reported):
                continue
            file = resolver.path(reported) if reported else resolver.resolve(classname, name)
            if reported and classname and file != (collected := resolver.resolve(classname, name)) and collected:
                file = collected  # an inherited test: ``file`` is its base class's, the classname the module run
            raw = case.get("time")
            # The common case without building an error message; anything unusual goes to `_seconds`.
            seconds = float(raw) if raw and is_plain_decimal(raw, exponent=True) else (0.0 if not raw else -1.0)
            if not 0.0 <= seconds <= MAX_SECONDS:  # also false for nan
                seconds = _seconds(raw, f"{source}: time of testcase {file or classname}::{name}", MAX_SECONDS)
            attempt = _attempt(case, seconds) if len(case) else Attempt(PASSED, seconds)
            runs = attempts.get((file, classname, name))
            if runs is None:
                attempts[(file, classname, name)] = [attempt]
            else:
                runs.append(attempt)
    cases = tuple(
        CaseResult(file, classname, name, runs[-1].outcome, sum(a.time for a in runs), len(runs) - 1, tuple(runs))
        for (file, classname, name), runs in attempts.items())
    files: dict[str, FileResult] = {}
    for case in cases:
        files.setdefault(case.file, FileResult(case.file)).add(case)
    return JUnitReport(source, cases, wall, files)


def merge_file_results(reports: Iterable[JUnitReport]) -> dict[str, FileResult]:
    """Per-file totals over several reports of *one* run (for example one XML per shard)."""
    out: dict[str, FileResult] = {}
    for report in reports:
        for case in report.cases:
            out.setdefault(case.file, FileResult(case.file)).add(case)
    return out


def _attempt(case: ET.Element, seconds: float) -> Attempt:
    # pytest writes a teardown error as a second child next to <failure>; the error wins.
    children = {child.tag: child for child in case if child.tag in ("error", "failure", "skipped")}
    for tag, outcome in (("error", ERROR), ("failure", FAILED), ("skipped", SKIPPED)):
        child = children.get(tag)
        if child is not None:
            return Attempt(outcome, seconds, child.get("message", ""), (child.text or "")[-MAX_DETAIL_CHARS:])
    recorded = {p.get("name"): p.get("value") or "" for p in case.iterfind("properties/property")}
    outcome = recorded.get(ATTEMPT_OUTCOME)
    if outcome in (FAILED, ERROR):
        return Attempt(outcome, seconds, recorded.get(ATTEMPT_ERROR, "")[:MAX_DETAIL_CHARS],
                       recorded.get(ATTEMPT_TEXT, "")[-MAX_DETAIL_CHARS:])
    return Attempt(PASSED, seconds)


def _seconds(raw: str | None, what: str, limit: float = math.inf) -> float:
    """A time attribute: absent or empty is 0; anything but a finite number in [0, limit] is refused."""
    if raw is None or raw == "":
        return 0.0
    shown = repr(raw) if len(raw) <= 40 else f"{raw[:20]!r}... ({len(raw)} characters)"
    try:
        value = float(raw)
    except ValueError:
        raise JUnitError(f"{what} is not a number: {shown}") from None
    if not math.isfinite(value):
        raise JUnitError(f"{what} is {shown}: not a finite number of seconds")
    if value < 0:
        raise JUnitError(f"{what} is {shown}: negative")
    if value > limit:
        raise JUnitError(f"{what} is {shown}: above {limit:.0f} s, the longest a test file may be registered for")
    if not is_plain_decimal(raw, exponent=True):  # float() also reads "5_0", " 5", Arabic-Indic digits
        raise JUnitError(f"{what} is {shown}: not a plain decimal number of seconds such as 1.234 (ASCII digits)")
    return value


class _FileResolver:
    """Reported paths and dotted classnames -> repo-relative test files (see the module docstring)."""

    def __init__(self, root: Path | None, known: set[str]):
        self.root = root
        self.known = known
        self.cache: dict[str, str] = {}
        self._tails: dict[str, list[str]] | None = None

    def resolve(self, classname: str, name: str) -> str:
        """The file of a testcase without a ``file`` attribute, ``""`` if none is found."""
        dotted = classname or name  # a collection error carries the module in ``name``
        if dotted not in self.cache:
            self.cache[dotted] = self._lookup(dotted)
        return self.cache[dotted]

    def path(self, reported: str) -> str:
        """A reported ``file`` attribute as a repo-relative path (as written when nothing fits)."""
        key = "\0" + reported
        if key not in self.cache:
            self.cache[key] = self._exact(reported) or self._tail(reported) or reported
        return self.cache[key]

    def _lookup(self, dotted: str) -> str:
        parts = dotted.split(".")
        candidates = ["/".join(parts[:cut]) + ".py" for cut in range(len(parts), 0, -1)]
        for candidate in candidates:
            if self._exact(candidate):
                return candidate
        for candidate in candidates:
            found = self._tail(candidate)
            if found:
                return found
        return ""

    def _exact(self, rel: str) -> str:
        if rel in self.known or (self.root is not None and (self.root / rel).is_file()):
            return rel
        return ""

    def _tail(self, rel: str) -> str:
        if self._tails is None:
            self._tails = {}
            for known in sorted(self.known):
                parts = known.split("/")
                for cut in range(1, len(parts)):
                    self._tails.setdefault("/".join(parts[cut:]), []).append(known)
        matches = self._tails.get(rel, ())
        if len(matches) > 1 and self.root is not None:
            matches = [m for m in matches if _holds_pytest_config(self.root / m[: -len(rel) - 1])]
        return matches[0] if len(matches) == 1 else ""


def _holds_pytest_config(folder: Path) -> bool:
    return any((folder / name).is_file() for name in PYTEST_CONFIG_FILES)
