"""Recording lines per pytest node id (`ci observe --by-test`): a pytest plugin over coverage.py's contexts.

`ci.observe.observed.prepare` with ``by_test`` puts this module in ``PYTEST_PLUGINS`` and names the
parts directory in `BYTEST_ENV`; every pytest process of the observed command (xdist workers
included) then loads it beside the per-file recorder. It measures the repository with a
coverage.py of its own (the C tracer, ``source`` the root; the per-file recorder keeps its own
core, so the two never share a trace function: `refusal` says where they would) and switches
coverage's dynamic context (`coverage.Coverage.switch_context`):

- ``id <node id>`` while an item's setup, call and teardown run;
- ``file <test file>`` while a fixture of a wider scope than ``function`` is set up, and during
  the teardown of an item after which its module or class ends (``nextitem`` has another
  parent: where pytest runs wider fixtures' finalizers), so a line one id ran for the whole file
  is never that id's alone;
- no context otherwise (collection, imports: the per-file map's ``shared`` lines judge those).

At the session's end each process writes ``bytest.<pid>.json``: per test file, per node id (its
file part repo-relative, `repo_id`) the
lines (repo-relative, `ci.observe.files.RepoFiles`), the file's own lines, the ids collected and
the ids whose teardown finished, and each id's seconds (its reports' durations). `ci.observe.bytest_parts.read_parts` merges them into `ByTest` per
test file; a file is
``complete`` when every id any process collected finished in some process.

Contract: the plugin never changes an outcome (coverage's errors at start are recorded as no
data, which leaves the file without ``by_test``: the plan then runs it whole); `read_parts` skips a
part it cannot read.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import pytest

from ci.observe.bytest_parts import BYTEST_ENV
from ci.observe.files import ROOT_ENV, RepoFiles

_ID, _FILE = "id ", "file "


def repo_id(test: str, nodeid: str) -> str:
    """``nodeid`` with its file part (relative to pytest's rootdir, which depends on how pytest was
    started) replaced by the repo-relative ``test``: what the map and `ci.pytest_ids` compare."""
    return f"{test}::{nodeid.split('::', 1)[1]}" if "::" in nodeid else test


class ByTestRecorder:
    """The plugin one pytest process registers (see the module docstring)."""

    def __init__(self, parts: Path, root: Path) -> None:
        import coverage  # deferred: only a by-test observation pays for it

        self.parts, self.files = parts, RepoFiles(root)
        self.cov = coverage.Coverage(data_file=None, source=[str(root)], config_file=False, branch=False)
        self.cov.set_option("run:core", "ctrace")
        self.collected: dict[str, list[str]] = defaultdict(list)
        self.file_of: dict[str, str] = {}  # node id -> repo-relative test file (the map's key)
        self.finished: set[str] = set()
        self.seconds: dict[str, float] = defaultdict(float)  # node id -> setup + call + teardown
        self.current = ""
        self.cov.start()

    def _switch(self, context: str) -> str:
        """Switch to ``context``; the one it replaces."""
        before, self.current = self.current, context
        self.cov.switch_context(context)
        return before

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: pytest.FixtureRequest) -> Iterator[None]:
        item = getattr(request, "_pyfuncitem", None)  # the item that asked: a session fixture's node is the session
        test = self.file_of.get(getattr(item, "nodeid", ""))
        if fixturedef.scope == "function" or test is None:
            return (yield)
        before = self._switch(_FILE + test)
        try:
            return (yield)
        finally:
            self._switch(before)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            test = self.files.relative(str(item.path))
            if test is not None:
                self.file_of[item.nodeid] = test
                self.collected[test].append(repo_id(test, item.nodeid))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        self._switch(_ID + item.nodeid)
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        self._switch(_ID + item.nodeid)
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        ends_scope = nextitem is None or nextitem.parent is not item.parent
        test = self.file_of.get(item.nodeid)
        self._switch((_FILE + test) if ends_scope and test is not None else (_ID + item.nodeid))
        try:
            return (yield)
        finally:
            self.finished.add(item.nodeid)
            self._switch("")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self) -> None:
        self.cov.stop()
        data = self.cov.get_data()
        ids: dict[str, dict[str, dict[str, set[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
        own: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
        for measured in data.measured_files():
            rel = self.files.relative(measured)
            if rel is None:
                continue
            for line, contexts in data.contexts_by_lineno(measured).items():
                for context in contexts:
                    if context.startswith(_ID):
                        node = context[len(_ID):]
                        if node in self.file_of:
                            test = self.file_of[node]
                            ids[test][repo_id(test, node)][rel].add(line)
                    elif context.startswith(_FILE):
                        own[context[len(_FILE):]][rel].add(line)
        out = {}
        for test in self.collected.keys() | ids.keys() | own.keys():
            out[test] = {"collected": self.collected.get(test, []),
                         "finished": sorted(repo_id(test, n) for n in self.finished if self.file_of.get(n) == test),
                         "ids": {n: {p: sorted(v) for p, v in files.items()} for n, files in ids[test].items()},
                         "file": {p: sorted(v) for p, v in own[test].items()},
                         "seconds": {repo_id(test, n): s for n, s in self.seconds.items() if self.file_of.get(n) == test}}
        (self.parts / f"bytest.{os.getpid()}.json").write_text(json.dumps(out), encoding="utf-8")


def pytest_configure(config: pytest.Config) -> None:
    """Register the recorder where `BYTEST_ENV` names a parts directory (else load as nothing)."""
    parts = os.environ.get(BYTEST_ENV)
    root = os.environ.get(ROOT_ENV)
    if not parts or not root or config.pluginmanager.has_plugin("ci-bytest"):
        return
    if getattr(config.option, "dist", "no") not in ("no", None) and not hasattr(config, "workerinput"):
        return  # an xdist controller runs no test: its workers record
    try:
        recorder = ByTestRecorder(Path(parts), Path(root))
    except Exception:  # noqa: BLE001 (coverage's own errors): no per-id data, the file then runs whole
        return
    config.pluginmanager.register(recorder, "ci-bytest")


