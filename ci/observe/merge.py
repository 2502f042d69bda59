"""Build the map from the parts every recording process left in the parts directory.

Parts: coverage data files ``cov.*`` (one per process the ``ctrace`` core or coverage.py's hook
measured; contexts are test files), the JSON lines ``clines.*.jsonl`` (one per process the
slipcover or sysmon core measured, a pytest process's or a subprocess's, `ci.observe.child`), open logs
``opened.*.log`` (`ci.observe.files.OpenedLog`), and one ``items.*.json`` per process
that ran tests: ``{"items": {test: n}, "done": {test: n}, "ran": {test: n}}`` (collected,
finished, and with their body run). Under pytest-xdist every worker collects every test and runs
some, so a test file's collected count is the largest any process saw and its finished count the
sum: the file is complete when they meet. An items part may also hold ``"facts"``
(`ci.observe.facts`): each entry gets its file's duration, outcome and skip reasons, and from
``devices.<pid>.jsonl`` (`ci.observe.devices`) the devices it touched, with their evidence.

A test file one of whose subprocesses ended without saving its lines (a live mark left,
`ci.observe.live`) is not complete: its entry never narrows selection. Nor is one that
executed or opened a file that differed from the map's commit during the recording (``dirty``).
A coverage data file that cannot be read (its process died mid-write) is skipped; when its
process left no live mark, no entry of the map is complete, since whose lines it held is unknown.

Contract: `build_map` returns one entry per collected test file, with the lines each executed,
the files it opened; lines of shared contexts
(`ci.observe.files.read_context`) also go to the map's ``shared``; lines and opened files
of test files that were not collected are dropped. It raises `OSError` / `ValueError` only for
parts it cannot read at all.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator

from ci.observe.facts import Facts, combine, read_devices
from ci.observe.files import RepoFiles, read_context
from ci.observe.live import left_live, unsaved_tests
from ci.selection.depmap_format import DepMap, TestMap


def _child_records(part: Path) -> Iterator[tuple[str, dict[str, list[int]]]]:
    """The (context, {path: lines}) records of a subprocess's ``clines.*.jsonl``. Only its last
    line may be torn (a process killed in the middle of its one write); any other bad line is a
    ValueError naming the file and line."""
    text = part.read_text(encoding="utf-8", errors="replace").split("\n")
    for number, line in enumerate(text, 1):
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if number == len(text):
                return
            raise ValueError(f"{part.name}: line {number} is not JSON") from None
        if not isinstance(record, dict):
            raise ValueError(f"{part.name}: line {number} is not a JSON object")
        yield from record.items()


_PID = re.compile(r"\.pid(\d+)\.")  # coverage.py's data file suffix: <host>.pid<pid>.<random>


class _Torn(Exception):
    """A coverage.py data file that cannot be read: its process died mid-write (coverage.py's own
    core writes in place; sqlite3 reports a garbled schema text as UnicodeDecodeError)."""


def _coverage_part(part: Path) -> list[tuple[str, dict[int, list[str]]]]:
    """Each measured file of one coverage.py data file, with the contexts of each line; `_Torn`
    when it cannot be read."""
    # deferred: importing coverage.py costs about 0.15 s of CPU, and a map whose processes all
    # wrote JSON parts (the 3.12 sysmon core, slipcover's children) needs none of it (nor sqlite3)
    import sqlite3

    from coverage import CoverageData
    from coverage.exceptions import CoverageException

    data = CoverageData(basename=str(part))
    try:
        data.read()
        return [(measured, data.contexts_by_lineno(measured)) for measured in data.measured_files()]
    except (CoverageException, sqlite3.DatabaseError, AssertionError, UnicodeDecodeError) as exc:
        raise _Torn(part.name) from exc


def build_map(parts: Path, files: RepoFiles, tier: str | None, sha: str | None = None,
              dirty: frozenset[str] = frozenset()) -> DepMap:
    """See the module docstring. ``dirty``: the tracked files that differed from ``sha`` during
    the recording (`ci.observe.worktree`)."""
    items: dict[str, int] = defaultdict(int)
    done: dict[str, int] = defaultdict(int)
    ran: dict[str, int] = defaultdict(int)
    facts_parts = []
    for part in sorted(parts.glob("items.*.json")):
        data = json.loads(part.read_text(encoding="utf-8"))
        facts_parts.append(data.get("facts"))
        for test, n in data["items"].items():
            items[test] = max(items[test], n)
        for test, n in data["done"].items():
            done[test] += n
        for test, n in data["ran"].items():
            ran[test] += n
    lines: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    shared: dict[str, set[int]] = defaultdict(set)

    def add(context: str, measured: str, numbers: Iterable[int]) -> None:
        rel = files.relative(measured)
        if rel is None:
            return
        test, is_shared = read_context(context)
        kept = [n for n in numbers if n >= 1]  # an empty module runs "line 0": no line
        if test:
            lines[test][rel].update(kept)
        if is_shared:
            shared[rel].update(kept)

    torn_unmarked = False  # a torn part whose process left no live mark: whose lines are lost is unknown
    for part in sorted(parts.glob("cov.*")):
        try:
            measured_lines = _coverage_part(part)
        except _Torn:
            # where its process left its live mark, that mark already makes its test file's entry partial
            pid = _PID.search(part.name)
            torn_unmarked = torn_unmarked or pid is None or not left_live(parts, int(pid.group(1)))
            continue
        for measured, by_line in measured_lines:
            for lineno, contexts in by_line.items():
                for context in contexts:
                    add(context, measured, (lineno,))
    for part in sorted(parts.glob("clines.*.jsonl")):
        for context, measured_files in _child_records(part):
            for measured, numbers in measured_files.items():
                add(context, measured, numbers)
    opened: dict[str, set[str]] = defaultdict(set)
    for part in sorted(parts.glob("opened.*.log")):
        for line in part.read_text(encoding="utf-8", errors="replace").splitlines():
            test, sep, rel = line.partition("\t")
            if sep:
                opened[test].add(rel)
    unsaved = unsaved_tests(parts)
    facts = combine(facts_parts, read_devices(parts))
    for test in unsaved - items.keys() - {""}:
        items[test] = 0  # known only by a mark, which keeps it from being complete
    for test in facts.keys() - items.keys() - {""}:
        items[test] = 0  # no item collected (its collection failed): its facts still count
    tests = {}
    for test, n in items.items():
        own = {rel: frozenset(found) for rel, found in lines.get(test, {}).items()}
        # lines of a file that differed from the commit are another text's: never read line for line
        complete = done[test] >= n and test not in unsaved and "" not in unsaved and not torn_unmarked \
            and dirty.isdisjoint(own.keys() | opened.get(test, ()))
        fact = facts.get(test, Facts(None, None, ()))
        tests[test] = TestMap(frozenset(own), frozenset(opened.get(test, ())), complete, n, ran[test], lines=own,
                              duration_s=fact.duration_s, outcome=fact.outcome, skip_reasons=fact.skip_reasons,
                              devices=fact.devices, device_evidence=fact.device_evidence)
    return DepMap(tier, datetime.now(timezone.utc).isoformat(timespec="seconds"), tests,
                  {rel: frozenset(found) for rel, found in shared.items()}, sha, dirty)
